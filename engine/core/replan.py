"""`--workers auto` while the run goes: sized again each second from what it measured.

Once a second (engine/core/ticker.py) the plan of engine/load/worker_count.py is made again
from the run's own figures: the load processes' CPU (the engine's own process, or its worker
processes: the client-health reading of the process tree) over the tokens they received per
second, and the token interval (the live ITL median). When the load (the C asked for, or what is
in flight) is more than the current processes hold:

- worker processes started by `--workers auto` get more beside them (WorkerPool.grow), one line
  in the log saying why (`--workers auto: 3 worker processes now (were 2): ...`), at most one
  growth at a time and none for GROW_PAUSE_S after one (the new figures settle first);
- a load `--workers auto` started in the engine's own process moves to worker processes
  (engine/core/load_move.py: no more than C in flight during the hand-over), on the same terms;
- otherwise (`--workers N` given, Ray actors, no core free, a load that cannot move now: a
  preset's run, an open loop, load_move.may_move) the warning `crowded` says so while it lasts,
  with what would help.

The warning clears when the load is back within what the processes hold.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Protocol

from ..constants import PESSIMISTIC_TOKEN_S
from ..load.worker_count import CROWDED_KEY, Plan, crowded, crowded_warning, live_plan, per_process
from .load_move import Moved, may_move, move_to_workers
from .load_start import worker_spec

if TYPE_CHECKING:
    from ..telemetry.types import ClientHealthSample

GROW_PAUSE_S = 5.0  # after a growth, the figures of the new processes settle before the next judgement
MIN_TOK_S = 1000.0  # below, a second's CPU per token is mostly the engine's own idle work: not judged
MOVE_TRIES = 3  # a move whose workers did not start is tried this often, then the load stays (warned)
WARN_MARGIN = 1.15  # warned only past 15 % over what the processes hold (a measure moves a little)


class Replanned(Moved, Protocol):
    """What the re-plan reads of the engine (and what a grown pool's workers are given, and a move changes)."""

    @property
    def in_flight(self) -> int: ...


class Replanner:
    def __init__(self, engine: Replanned) -> None:
        self.e = engine
        self._kernel: bool | None = None
        self._growing: asyncio.Task | None = None
        self._grown_at: float | None = None
        self.last: Plan | None = None  # the last live plan (tests, the log)
        self._moves_failed = 0  # moves to worker processes whose workers did not start

    def processes(self) -> int:
        pool = self.e.load.pool
        if pool is None:
            return 1
        return max(1, sum(1 for s in pool.states if s.alive))

    def streams(self) -> int:
        """The load to hold: the C asked for in a closed loop (it is where the run is going), else in flight."""
        e = self.e
        ctl = e.load.controller
        asked = ctl.concurrency if ctl is not None and ctl.mode == "concurrency" and not ctl.probing and not ctl.paused else 0
        return max(asked, e.in_flight)

    def each_second(self, now: float, health: ClientHealthSample | None) -> None:
        e = self.e
        ev = e.events
        if self._kernel is None:
            self._kernel = e.targets.kernel_stamped()
        streams, n = self.streams(), self.processes()
        interval = e.metrics.percentiles.itl.p50
        tok_s = e.metrics.rates(now)[0]
        if interval is None or streams <= per_process(PESSIMISTIC_TOKEN_S, interval, self._kernel) or tok_s < MIN_TOK_S:
            ev.clear(CROWDED_KEY)  # one process surely holds it, or too little to judge by
            return
        cpu = None
        if health is not None:
            cpu = health.loop_cpu_pct if e.load.pool is None else (
                None if health.cpu_pct is None or health.loop_cpu_pct is None else health.cpu_pct - health.loop_cpu_pct)
        p = live_plan(streams, n, cpu, tok_s, interval, self._kernel, health.others_cpu_pct if health is not None else None)
        if p is None:
            return
        self.last = p
        if not crowded(streams, n, p.per_process):
            ev.clear(CROWDED_KEY)
            return
        movable = e.load.pool is None and p.processes > 1 and self._moves_failed < MOVE_TRIES and not may_move(e)
        if (movable or self._can_grow()) and p.processes > n:
            if self._growing is None and (self._grown_at is None or now - self._grown_at >= GROW_PAUSE_S):
                work = self._move(p) if movable else self._grow(p, n)
                self._growing = e.life.spawn(work, "redline-workers-move" if movable else "redline-workers-grow")
            return
        if not crowded(streams, n, int(p.per_process * WARN_MARGIN)):
            return  # within the margin: neither grown nor warned (it holds what it warned of)
        text = crowded_warning(streams, n, p, self._kernel, self._why_not())
        if ev.active(CROWDED_KEY):
            ev.hold(CROWDED_KEY, text, now)
        else:
            ev.warn(text, key=CROWDED_KEY)

    def _can_grow(self) -> bool:
        e = self.e
        pool = e.load.pool
        return pool is not None and e.config.ray is None and e.config.workers_auto and not pool.stopped

    def _why_not(self) -> str:
        e = self.e
        if e.load.pool is None:
            return may_move(e) or (f"its worker processes did not start ({self._moves_failed} tries)" if self._moves_failed >= MOVE_TRIES else "")
        if e.config.ray is not None:
            return "Ray actors are fixed at start"
        if not e.config.workers_auto:
            return f"--workers {e.config.workers} was given"
        return ""

    async def _move(self, p: Plan) -> None:
        try:
            if await move_to_workers(self.e, p.processes, p.why.split(": ", 1)[-1]) is None:
                self._moves_failed += 1
        finally:
            self._growing = None
            self._grown_at = time.perf_counter()

    async def _grow(self, p: Plan, n: int) -> None:
        e = self.e
        pool = e.load.pool
        assert pool is not None
        try:
            more = p.processes - n
            e.log("notice", f"--workers auto: {p.processes} worker processes now (were {n}): {p.why.split(': ', 1)[-1]}")
            got = await pool.grow(worker_spec(e), more)
            e.config.workers = pool.n
            if got < more:
                e.log("warning", f"--workers auto: {more - got} of {more} new worker processes did not start")
        finally:
            self._growing = None
            self._grown_at = time.perf_counter()
