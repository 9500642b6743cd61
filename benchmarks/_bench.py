"""Shared helpers of the benchmark scripts (not a benchmark itself).

Every benchmark starts its own simulated server on 127.0.0.1 and stops it on the way out;
Ctrl-C or SIGTERM stops a benchmark the same way (run_main).
"""

from __future__ import annotations

import json
import os
import platform
import signal
import sys
import urllib.request
from contextlib import contextmanager
from typing import Callable, Iterator, NoReturn, Sequence

from redline.engine.sim.serve import SimProcess, spawn_sim_process

# A sim that streams as fast as its own CPU allows: no decode time, no throughput ceiling,
# no prefill cost, no running cap or KV limit that the benchmark concurrencies could reach.
FAST_SIM = (
    "decode_base_s=0", "decode_per_seq_s=0", "ceiling_tok_s=none", "prefill_per_token_s=0",
    "max_running_requests=100000", "kv_budget_tokens=1000000000",
)


def set_args(settings: Sequence[str]) -> list[str]:
    out: list[str] = []
    for s in settings:
        out += ["--set", s]
    return out


@contextmanager
def sim(profile: str = "healthy", settings: Sequence[str] = ()) -> Iterator[SimProcess]:
    """A sim subprocess on 127.0.0.1, stopped (SIGTERM, then SIGKILL) on the way out."""
    proc = spawn_sim_process(profile=profile, extra_args=set_args(settings))
    try:
        assert proc.url.startswith("http://127.0.0.1:"), proc.url
        yield proc
    finally:
        proc.stop()


def sim_state(url: str) -> dict:
    with urllib.request.urlopen(url + "/sim/state", timeout=10) as r:  # noqa: S310 - loopback
        return json.loads(r.read())


def cpu_seconds(pid: int) -> float:
    """user + sys CPU seconds of a live process (its own, not its children's)."""
    import psutil

    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


def box_busy() -> float:
    """CPU seconds all cores of this machine have been busy since boot (every process)."""
    import psutil

    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


def machine() -> str:
    """One line: cores, CPU model, Python, OS, for the README table header."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return (f"{os.cpu_count()}-core {platform.machine()} ({model}), Python {platform.python_version()}, "
            f"{platform.system()} {platform.release()}")


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A markdown table (also readable as plain text)."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(cells[0], widths, strict=False)) + " |",
             "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    lines += ["| " + " | ".join(c.rjust(w) for c, w in zip(r, widths, strict=False)) + " |" for r in cells[1:]]
    return "\n".join(lines)



class Stopped(KeyboardInterrupt):
    """SIGTERM, raised where the script is, so its `finally` blocks run (as on Ctrl-C)."""


def run_main(main: Callable[[], object]) -> NoReturn:
    """A script's entry point: Ctrl-C or SIGTERM stops it through its `finally` blocks (the
    sims and processes it started are stopped; a sim also ends with its parent), one line
    on stderr, exit 130 / 143."""

    def on_term(signum, frame) -> None:
        raise Stopped()

    signal.signal(signal.SIGTERM, on_term)
    try:
        rc = main()
    except KeyboardInterrupt as exc:
        sig = signal.SIGTERM if isinstance(exc, Stopped) else signal.SIGINT
        print(f"{os.path.basename(sys.argv[0])}: stopped by {sig.name}", file=sys.stderr)
        sys.exit(128 + sig)
    sys.exit(rc if isinstance(rc, int) else 0)


if __name__ == "__main__":
    import argparse

    argparse.ArgumentParser(
        description="Helpers shared by the benchmark scripts beside this file (a sim per benchmark, CPU "
                    "readings, tables); not a benchmark: run one of the others, e.g. python benchmarks/lag.py --help",
    ).parse_args()
