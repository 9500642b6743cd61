"""Memory: RSS of the engine process over a long high-throughput run (it should stay flat).

    python benchmarks/memory.py [--minutes 2] [--every 30] [--concurrency 256] [--output-len 128]

    python benchmarks/memory.py --minutes 10        # the README's 1 / 5 / 10 minute figures

The engine runs as under the TUI (engine/host.py EngineProcess: its own process, uvloop,
telemetry on, a session written to a temporary directory) against a sim on 127.0.0.1 that
streams as fast as its CPU allows, so requests start and end as often as this machine can
manage. RSS (and USS where the OS gives it) of the engine process is sampled every --every
seconds and at 1, 5 and 10 minutes when the run is that long.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=2.0, help="run length (default 2)")
    p.add_argument("--every", type=float, default=30.0, help="seconds between samples (default 30)")
    p.add_argument("--concurrency", type=int, default=256, help="C (default 256)")
    p.add_argument("--output-len", type=int, default=128, help="max_tokens per request (default 128)")
    p.add_argument("--transport", default=None, help="engine transport (default: redline's default)")
    args = p.parse_args()

    import psutil
    from _bench import FAST_SIM, machine, sim, table

    from redline.engine.client.http import DEFAULT_TRANSPORT
    from redline.engine.core.config import EngineConfig
    from redline.engine.host import EngineProcess
    from redline.engine.workload.prompts import WorkloadConfig

    transport = args.transport or DEFAULT_TRANSPORT
    total_s = args.minutes * 60
    marks = sorted({m for m in (60.0, 300.0, 600.0) if m <= total_s + 1e-6}
                   | {args.every * i for i in range(1, int(total_s // args.every) + 1)} | {total_s})
    print(f"# engine RSS over {args.minutes:g} min at C={args.concurrency}, output_len {args.output_len}, "
          f"transport {transport}, session on, telemetry on ({machine()})")
    tmp = Path(tempfile.mkdtemp(prefix="redline-mem-"))
    rows = []
    try:
        with sim(settings=FAST_SIM) as srv:
            cfg = EngineConfig(url=srv.url, concurrency=args.concurrency, max_concurrency=max(1024, args.concurrency),
                               transport=transport, workload=WorkloadConfig(input_len=32, output_len=args.output_len),
                               out_dir=tmp / "session", command_line=["benchmarks/memory.py"])
            host = EngineProcess(cfg)
            host.start()
            try:
                proc = psutil.Process(host.pid)
                t0 = time.monotonic()
                rows.append(_sample(proc, host, 0.0))
                for m in marks:
                    time.sleep(max(0.0, t0 + m - time.monotonic()))
                    rows.append(_sample(proc, host, time.monotonic() - t0))
                    r = rows[-1]
                    print(f"  {r[0]:>6}  RSS {r[1]} MiB  USS {r[2]} MiB  requests {r[3]}  tokens {r[4]}", file=sys.stderr, flush=True)
            finally:
                host.stop("benchmark done")
        session_mb = sum(f.stat().st_size for f in (tmp / "session").rglob("*") if f.is_file()) / 1e6
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print()
    print(table(("elapsed", "engine RSS MiB", "engine USS MiB", "requests done", "output tokens"), rows))
    first = rows[1] if len(rows) > 2 else rows[0]
    print(f"\nRSS change from {first[0]} to {rows[-1][0]}: {float(rows[-1][1]) - float(first[1]):+.1f} MiB; "
          f"session written: {session_mb:.1f} MB on disk")


def _sample(proc, host, elapsed: float) -> tuple:
    try:
        info = proc.memory_full_info()
        uss = f"{info.uss / 2**20:.1f}"
    except Exception:  # noqa: BLE001 - USS needs /proc/PID/smaps; RSS is enough
        info, uss = proc.memory_info(), "-"
    snap = host.snapshot
    m, s = divmod(int(round(elapsed)), 60)
    return (f"{m}:{s:02d}", f"{info.rss / 2**20:.1f}", uss, snap.completed, snap.output_tokens_total)


if __name__ == "__main__":
    from _bench import run_main

    run_main(main)
