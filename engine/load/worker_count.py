"""How many processes hold the load: `--workers auto` (the default), sized by this machine's
measured capacity, re-planned while it runs, and the warning when the load outgrows it.

A lockstep server writes every stream's chunk at once, each decode step. One process reads
them one after another: a burst of b streams takes b x (one token's CPU here) to read. Stamps
stay true while every stream is read before its next chunk comes (the kernel's receive time,
engine/client/kstamp.py); a loop that falls a token interval behind reads two chunks in one
receive, and their gaps are no measurement (docs/numbers.md, coalesced reads). So one process
holds as many streams as keep its burst within SHARE of the token interval (a third where the
kernel stamps reads; a tenth where the loop stamps them, https://: there the burst's spread is
in the stamps themselves):

    per process = SHARE x token interval / token cost,  processes = ceil(streams / per process)

at most one per core free (the usable cores the machine left idle over a 0.1 s sample at start,
what other processes left idle while the run goes: more processes than cores only take turns). The token cost is measured at start (engine/load/token_cost.py: this
machine's read path on loopback, ~30 ms, only when the run may need more than one process);
the token interval is assumed (ASSUMED_TOKEN_INTERVAL_S) until the run observes it. While the
run goes, `live_plan` sizes again from what it measured (the load processes' CPU per token
received, the ITL's median): `engine/core/ticker.py` adds worker processes when the load
grows past what the current ones hold (`engine/load/worker_pool.py` WorkerPool.grow), and
warns when it cannot (one process started in-process, --workers N given, no core free).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from ..constants import ASSUMED_TOKEN_INTERVAL_S, PESSIMISTIC_TOKEN_S, STAMP_SHARE_KERNEL, STAMP_SHARE_LOOP

FREE_SAMPLE_S = 0.1  # the machine's CPU times sampled this long at start (only when auto measures)

CROWDED_KEY = "crowded"  # the warning's key (engine/core/ticker.py raises it, holds it, clears it)


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


def cores_free(cores: int | None = None, sample_s: float = FREE_SAMPLE_S) -> float:
    """Usable cores that other processes do not keep busy now: the machine's idle share over a
    short sample of its CPU times (psutil: /proc/stat), times the usable cores. (The load
    average would still count, for a minute, a run that just ended.)"""
    import time

    import psutil

    n = cores or usable_cores()
    try:
        a = psutil.cpu_times()
        time.sleep(sample_s)
        b = psutil.cpu_times()
    except (psutil.Error, OSError):
        return float(n)
    total = sum(b) - sum(a)
    if total <= 0:
        return float(n)
    idle = (b.idle - a.idle) + (getattr(b, "iowait", 0.0) - getattr(a, "iowait", 0.0))
    return max(0.0, min(float(n), n * idle / total))


def share(kernel: bool) -> float:
    """How much of the token interval one process's burst may take (see the module)."""
    return STAMP_SHARE_KERNEL if kernel else STAMP_SHARE_LOOP


@dataclass(frozen=True)
class Plan:
    processes: int  # 1: the engine's own process; N > 1: N worker processes
    needed: int  # what the load needs by the measure (more than `processes` when cores are short)
    per_process: int  # the streams one process holds
    why: str  # one line: the choice and why


def per_process(token_s: float, interval_s: float, kernel: bool = True) -> int:
    """The streams one process holds: its burst within share(kernel) of the interval."""
    return max(1, int(share(kernel) * interval_s / max(token_s, 1e-9) + 1e-6))  # (a float a hair under a whole)


def plan(streams: int, token_s: float, interval_s: float, free: float, kernel: bool = True, measured: str = "measured") -> Plan:
    """`--workers auto` for `streams` in flight (see the module): how many processes, and why in one line."""
    per = per_process(token_s, interval_s, kernel)
    needed = max(1, -(-streams // per))
    room = max(1, int(free + 0.5))
    n = min(needed, room)
    where = "one process" if n == 1 else f"{n} worker processes"
    load = streams * token_s / interval_s
    why = (f"--workers auto: {where} for {streams} streams: a token each {interval_s * 1000:.0f} ms"
           f"{'' if measured == 'measured' else ' (' + measured + ')'} x {token_s * 1e6:.1f} us per token here = "
           f"{load:.0%} of a core; one process holds {per} (its reads within {share(kernel):.0%} of the token interval)")
    if needed > n:
        why += f"; {needed} would, {free:.1f} of {usable_cores()} cores free"
    return Plan(n, needed, per, why)


def measure_token_s() -> float:
    """A token's CPU in this machine's load process (engine/load/token_cost.py)."""
    from .token_cost import measure

    return measure().token_s


def auto_plan(peak: int, kernel: bool = True, interval_s: float = ASSUMED_TOKEN_INTERVAL_S) -> Plan:
    """The start's plan for the most the run is set to reach: measured only when a
    pessimistic token cost says one process might not hold it."""
    if per_process(PESSIMISTIC_TOKEN_S, interval_s, kernel) >= peak:
        return Plan(1, 1, per_process(PESSIMISTIC_TOKEN_S, interval_s, kernel), "")
    free = cores_free()  # before the measure: it keeps a core busy itself
    return plan(peak, measure_token_s(), interval_s, free, kernel, measured="assumed until the run measures it")


def live_plan(in_flight: int, processes: int, cpu_pct: float | None, tok_s: float | None, interval_s: float | None,
              kernel: bool = True, others_pct: float | None = None) -> Plan | None:
    """The plan again from what the run measured: the load processes' CPU (% of a core, all
    of them) over the tokens they received per second, the token interval (the ITL's median),
    and the cores free: the usable ones less what other processes used (`others_pct`, 100 =
    one core: the client-health reading). None until those are known (a second or two of load)."""
    if not cpu_pct or not tok_s or not interval_s or tok_s < 1.0 or in_flight <= 0:
        return None
    token_s = cpu_pct / 100.0 / tok_s
    n = usable_cores()
    free = n if others_pct is None else max(0.0, n - others_pct / 100.0)
    return plan(in_flight, token_s, interval_s, free, kernel, measured="measured")


def crowded(in_flight: int, processes: int, held: int) -> bool:
    """More streams per load process than one holds (the plan's per_process)."""
    return in_flight > held * max(1, processes)


def crowded_warning(in_flight: int, processes: int, p: Plan, kernel: bool = True, why: str = "") -> str:
    """One line for the screen, the log and the headless output: how crowded, what it does to
    the figures, and what would help (`why`: why the engine cannot add processes itself)."""
    each = -(-in_flight // max(1, processes))
    where = "one process" if processes <= 1 else f"{processes} worker processes ({each} each)"
    effect = ("its reads may fall a token behind (marked coalesced, out of ITL)" if kernel else
              "ITL's tail may read a few ms high (reads stamped by the loop)")
    text = f"{in_flight} streams in {where}, over {p.per_process} per process: {effect}"
    if p.needed > max(processes, p.processes):
        return f"{text}; more workers need more cores than the {usable_cores()} here ({p.why.split('; ')[-1]})"
    return f"{text}; --workers {p.needed} at start splits it" + (f" ({why})" if why else "")


# -- the fixed rule, kept for what has no measure (tests, a plan without a run) ----------------------
def auto_workers(concurrency: int, cores: int | None = None, kernel: bool = True, token_s: float | None = None,
                 interval_s: float = ASSUMED_TOKEN_INTERVAL_S) -> int:
    """The processes `plan` gives for `concurrency` streams, with `cores` all free (the
    machine's usable cores by default) and `token_s` measured when not given."""
    free = float(cores or usable_cores())
    return plan(concurrency, token_s if token_s is not None else measure_token_s(), interval_s, free, kernel).processes
