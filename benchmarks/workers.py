"""Worker processes: capacity (tok/s the engine received vs what the sim sent) and the
coordinator's figures, for 1, 2 and 4 workers at high concurrency.

    python benchmarks/workers.py [--workers 1,2,4] [--concurrency 1024,4096] [--seconds 10]
                                 [--warmup 3] [--output-len 256]

Against one simulated server on 127.0.0.1 that streams as fast as its CPU allows (no decode
time, no ceiling, no running cap), one redline Engine (telemetry off, no session) holds C
requests in flight with its load in N worker processes (`--workers N`; 1 = the engine's own
process). After the warm-up, for --seconds: output tokens the engine counted (as they
arrived, through the workers' reports) and tokens the sim says it sent, over the whole run
(the sim answers its own counters only when idle; tokens of requests cancelled at the stop
count as sent, not received), per second; the engine process's CPU and each worker's. "kept up" is received / sent: on a machine whose
cores the sim and the client share, the sim itself can be the limit (its CPU is printed).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _bench import FAST_SIM, cpu_seconds, sim, sim_state  # noqa: E402


async def one(url: str, workers: int, c: int, seconds: float, warmup: float, output_len: int) -> dict:
    from redline.engine.core.config import EngineConfig
    from redline.engine.core.engine import Engine
    from redline.engine.workload.prompts import WorkloadConfig

    cfg = EngineConfig(url=url, workers=workers, concurrency=c, max_concurrency=max(c, 1024),
                       workload=WorkloadConfig(input_len=16, output_len=output_len),
                       telemetry=False, calibrate=False, use_nvml=False)
    sent0 = sim_state(url)["generation_tokens_total"]  # the sim answers /sim/state only when idle
    e = Engine(cfg)
    await e.start()
    wpids = [p.pid for p in e.pool._procs] if e.pool else []
    cpu0, wcpu0 = time.process_time(), [cpu_seconds(p) for p in wpids]
    t0 = time.perf_counter()
    try:
        await asyncio.sleep(warmup + seconds)
        wcpu = [cpu_seconds(p) - c0 for p, c0 in zip(wpids, wcpu0, strict=False)]
    finally:
        await e.stop()
    dt = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    got = e.metrics.output_tokens_total
    sent = sim_state(url)["generation_tokens_total"] - sent0
    return {"received": got / dt, "sent": sent / dt, "coord_cpu": 100 * cpu / dt, "worker_cpu": [100 * w / dt for w in wcpu]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--concurrency", default="1024,4096")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--output-len", type=int, default=256)
    a = ap.parse_args()
    ws = [int(x) for x in a.workers.split(",")]
    cs = [int(x) for x in a.concurrency.split(",")]
    print(f"cores {os.cpu_count()}; sim streams as fast as its CPU allows; runs of {a.warmup + a.seconds:g} s")
    print(f"{'C':>5} {'workers':>7} {'sim sent tok/s':>14} {'received tok/s':>14} {'kept up':>7} {'coordinator CPU':>15}  worker CPU")
    for c in cs:
        for w in ws:
            with sim(settings=FAST_SIM) as srv:
                r = asyncio.run(one(srv.url, w, c, a.seconds, a.warmup, a.output_len))
            kept = r["received"] / r["sent"] if r["sent"] else float("nan")
            wc = " ".join(f"{x:.0f}%" for x in r["worker_cpu"]) or "-"
            print(f"{c:>5} {w:>7} {r['sent']:>14.0f} {r['received']:>14.0f} {kept:>7.2f} {r['coord_cpu']:>14.0f}%  {wc}")


if __name__ == "__main__":
    from _bench import run_main

    run_main(main)
