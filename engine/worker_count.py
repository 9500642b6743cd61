"""How many processes hold the load: `--workers auto` (the default), and the warning when
one process holds more streams than it can stamp truly.

One process reads a server's decode burst (a chunk to every stream at once) one chunk after
another, and pauses for its own bookkeeping; above STREAMS_PER_PROCESS streams the last of
a burst is stamped late enough to lift the ITL tail several ms above the server's own
(benchmarks/itl_gap.py, README "Benchmarks"). Workers are fixed when the run starts, so
`auto` sizes for the most the run is set to reach then; a load that grows past it later (a
key, a search, the control API, a rate whose in-flight grows) is warned about while it lasts.
"""

from __future__ import annotations

import os

from .constants import STREAMS_PER_PROCESS

CROWDED_KEY = "crowded"  # the warning's key (engine/ticker.py raises it, holds it, clears it)


def auto_workers(concurrency: int, cores: int | None = None) -> int:
    """`--workers auto`: one process up to STREAMS_PER_PROCESS streams (256); above, one
    worker per 256 streams, at most one per core, at least 1. The coordinator takes ~10 % of a
    core (benchmarks/workers.py), so a worker on every core still pays: on 2 cores C=512 and
    1024 read ITL +4.8 and +5.8 ms above the server's over 2 workers, against +8.8 and +35 to
    +69 ms in one process (benchmarks/itl_gap.py)."""
    cores = cores or os.cpu_count() or 1
    return max(1, min(cores, -(-concurrency // STREAMS_PER_PROCESS)))


def auto_reason(peak: int, n: int) -> str:
    """Why auto chose n > 1 processes, for the start notice ("" for one)."""
    if n <= 1:
        return ""
    return f"--workers auto: the run is set to reach {peak} in flight, at most {STREAMS_PER_PROCESS} per process"


def crowded(in_flight: int, processes: int) -> bool:
    """More streams per load process than one can stamp truly."""
    return in_flight > STREAMS_PER_PROCESS * max(1, processes)


def crowded_warning(in_flight: int, processes: int, cores: int | None = None) -> str:
    """One line for the screen, the log and the headless output: how crowded, what it does to
    the figures, and what would help (more workers at start, or more cores)."""
    per = -(-in_flight // max(1, processes))
    where = "one process" if processes <= 1 else f"{processes} worker processes ({per} each)"
    text = (f"{in_flight} streams in {where}, over {STREAMS_PER_PROCESS} per process: "
            "ITL's tail may read a few ms above the server's")
    better = auto_workers(in_flight, cores)
    if better > processes:
        return f"{text}; --workers {better} at start splits it"
    return f"{text}; more workers need more cores than this machine's {cores or os.cpu_count() or 1}"
