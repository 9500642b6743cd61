"""How many processes hold the load: `--workers auto` (the default), and the warning when
one process holds more streams than it measures truly.

How many streams one process holds truly depends on how its reads are stamped
(engine/constants.py has the measurements). With the kernel's receive time (plain http:// on
Linux with the lean transport, engine/client/kstamp.py) a stream's chunk keeps its arrival time however
busy the loop is, and one process is good for STREAMS_PER_PROCESS (1024) streams; beyond, it may
fall behind its reads. Stamped when the loop reads (https://, another transport, REDLINE_KSTAMP=0),
a decode burst is read one socket after another between the loop's own pauses, and above
STREAMS_PER_PROCESS_LOOP_STAMPED (256) the ITL tail reads several ms above the server's.
Workers are fixed when the run starts, so `auto` sizes for the most the run is set to reach
then; a load that grows past it later (a key, a search, the control API, a rate whose in-flight
grows) is warned about while it lasts.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from ..constants import STREAMS_PER_PROCESS, STREAMS_PER_PROCESS_LOOP_STAMPED

CROWDED_KEY = "crowded"  # the warning's key (engine/run/each_second.py raises it, holds it, clears it)


def kernel_stamped(urls: Iterable[str], transport: str) -> bool:
    """Whether every read of a load on these targets carries the kernel's receive time."""
    from ..client import kstamp

    return kstamp.ENABLED and transport == "lean" and all(u.startswith("http://") for u in urls)


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity (taskset, a container's cpuset),
    else the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def _cores(cores: int | None) -> int:
    return cores or usable_cores()


def per_process(kernel: bool) -> int:
    """The streams one process holds truly (see the module)."""
    return STREAMS_PER_PROCESS if kernel else STREAMS_PER_PROCESS_LOOP_STAMPED


def auto_workers(concurrency: int, cores: int | None = None, kernel: bool = True) -> int:
    """`--workers auto`: one process up to per_process(kernel) streams; above, one worker per
    that many, at most one per usable core, at least 1. The coordinator takes ~10 % of a core
    (benchmarks/workers.py), so a worker on every core still pays: loop-stamped on 2 cores,
    C=512 and 1024 read ITL +4.8 and +5.8 ms above the server's over 2 workers, against +8.8
    and +35 to +69 ms in one process (benchmarks/itl_gap.py)."""
    return max(1, min(_cores(cores), -(-concurrency // per_process(kernel))))


def auto_reason(peak: int, n: int, kernel: bool = True) -> str:
    """Why auto chose n > 1 processes, for the start notice ("" for one)."""
    if n <= 1:
        return ""
    return f"--workers auto: the run is set to reach {peak} in flight, at most {per_process(kernel)} per process"


def crowded(in_flight: int, processes: int, kernel: bool = True) -> bool:
    """More streams per load process than one measures truly."""
    return in_flight > per_process(kernel) * max(1, processes)


def crowded_warning(in_flight: int, processes: int, cores: int | None = None, kernel: bool = True) -> str:
    """One line for the screen, the log and the headless output: how crowded, what it does to
    the figures, and what would help (more workers at start, or more cores)."""
    per = -(-in_flight // max(1, processes))
    where = "one process" if processes <= 1 else f"{processes} worker processes ({per} each)"
    effect = ("it may fall behind its reads" if kernel else
              "ITL's tail may read a few ms high (reads stamped by the loop)")
    text = f"{in_flight} streams in {where}, over {per_process(kernel)} per process: {effect}"
    better = auto_workers(in_flight, cores, kernel)
    if better > processes:
        return f"{text}; --workers {better} at start splits it"
    return f"{text}; more workers need more cores than this machine's {_cores(cores)}"
