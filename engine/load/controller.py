"""The load pool: closed loop (keep `target` requests in flight) or open loop (send on a
schedule: arrivals at a rate, or a trace's recorded times), changed at any moment.

- set_concurrency(n): closed loop at C=n; raising starts requests now, lowering starts none
  until in-flight < n.
- set_rate(r): open loop at r requests/s (engine/workload/arrivals.py draws the intended send times).
  At most `max_concurrency` requests are in flight: a send due while the cap is full waits
  in the backlog (counted in `delayed`) and goes, with its intended time, when a slot frees;
  beyond BACKLOG_MAX waiting it is dropped (counted in `dropped`).
- start_schedule(s, mode): open loop on any schedule (a trace replay: engine/load/trace_replay.py).
- pause()/resume(): stop/start sending; in-flight requests finish normally. An open loop
  resumes its arrivals from the moment it resumes (a pause owes no sends).
- abort(): cancel every in-flight request (its connection closes, the server sees it leave).
- probe(): abort, then C=1 until told otherwise, remembering the previous load (C or rate);
  restore() goes back.

The pool knows nothing of HTTP: `launch(t_intended, item)` returns the coroutine of one
request (closed loop: `launch(None, None)`).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import TYPE_CHECKING, Awaitable, Callable, Coroutine, Protocol, TypedDict

from ..constants import ABORT_WAIT_S, DEFAULT_MAX_CONCURRENCY, SEND_BATCH
from ..loop import wait_set
from ..workload.arrivals import POISSON, Arrival, Schedule

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's own from Python 3.11

RUNNING = "running"
PAUSED = "paused"
PROBE = "probe"
STOPPED = "stopped"

# load modes
CONCURRENCY = "concurrency"  # closed loop
RATE = "rate"  # open loop, arrivals at a rate
TRACE = "trace"  # open loop, a trace's recorded times
BACKLOG_MAX = 100_000  # sends waiting for a slot under the cap; beyond, a due send is dropped


class OpenSchedule(Protocol):
    @property
    def t_next(self) -> float | None: ...  # the next intended send time (perf seconds); None: no more

    def pop(self) -> tuple[float, object]: ...
    def rebase(self, now: float) -> None: ...


class LoadOptions(TypedDict, total=False):
    """LoadControl's keyword arguments, as a subclass passes them on (`**kw`)."""

    arrival: Arrival
    seed: int
    on_held: Callable[[bool, float], None]
    on_abandon: Callable[[list[float]], None]


class ConcurrencyError(ValueError):
    """A concurrency outside 1..max (the message names the value and the range)."""


def check_concurrency(n: object, max_concurrency: int = DEFAULT_MAX_CONCURRENCY) -> int:
    if isinstance(n, bool) or not isinstance(n, int):
        try:
            n = int(str(n).strip())
        except ValueError:
            raise ConcurrencyError(f"concurrency {n!r}: expected a whole number from 1 to {max_concurrency}") from None
    if n < 1 or n > max_concurrency:
        raise ConcurrencyError(f"concurrency {n}: expected a whole number from 1 to {max_concurrency}")
    return n


class LoadControl:
    """The load's state and commands, wherever it is held: C or a schedule, the cap, pause,
    probe and restore. `Controller` holds it in this process (it launches the requests);
    engine/load/worker_pool.py's WorkerPool holds it in worker processes (it sends them orders)."""

    def __init__(
        self,
        concurrency: int,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
        *,
        arrival: Arrival = POISSON,
        seed: int = 0,
        on_held: Callable[[bool, float], None] = lambda dropped, t: None,
        on_abandon: Callable[[list[float]], None] = lambda times: None,
    ) -> None:
        self.max_concurrency = max_concurrency
        self.concurrency = check_concurrency(concurrency, max_concurrency)
        self.mode = CONCURRENCY
        self.arrival = arrival
        self.rate: float | None = None  # req/s of the open loop (RATE), the speed factor (TRACE)
        self.schedule: OpenSchedule | None = None
        self.backlog: deque[tuple[float, object]] = deque()
        self.delayed = 0  # sends that waited for a slot under the cap (session total)
        self.dropped = 0  # sends dropped: the backlog was full
        self._on_held = on_held  # (dropped?, intended time) for each send held back at the cap
        self._on_abandon = on_abandon  # intended times of held sends given up (left the loop, a pause)
        self._seed = seed
        self._idle = False  # the open loop was idle (paused, held): rebase on resuming
        self.paused = False
        self.probing = False
        self.previous: int | None = None  # C before the probe
        self._previous_load: tuple[str, float | None, OpenSchedule | None] | None = None  # open loop before the probe
        self.stopped = False
        self._wake = asyncio.Event()
        self._runner: asyncio.Task | None = None
        self.hold = False  # set by the engine while the server is gone (no new sends)
        self.settled_at: float | None = None  # when in-flight last reached the target after a change

    # -- state -----------------------------------------------------------------------
    @property
    def in_flight(self) -> int:
        raise NotImplementedError

    @property
    def state(self) -> str:
        if self.stopped:
            return STOPPED
        if self.paused:
            return PAUSED
        return PROBE if self.probing else RUNNING

    @property
    def waiting(self) -> int:
        """Sends waiting now for a slot under the cap (open loop)."""
        return len(self.backlog)

    @property
    def open_loop(self) -> bool:
        return self.mode != CONCURRENCY

    @property
    def trace_done(self) -> bool:
        """A trace replay has sent (or dropped) every row."""
        return self.mode == TRACE and self.schedule is not None and self.schedule.t_next is None and not self.backlog

    # -- commands --------------------------------------------------------------------
    def set_concurrency(self, n: int) -> int:
        n = check_concurrency(n, self.max_concurrency)
        if n != self.concurrency or self.open_loop:
            self.settled_at = None
        self._leave_open_loop()
        self.concurrency = n
        self._mark_settled()
        self._wake.set()
        return self.concurrency

    def set_rate(self, rate: float) -> float:
        """Open loop at `rate` req/s (from now: the next arrival is drawn from now)."""
        now = time.perf_counter()
        if self.mode == RATE and isinstance(self.schedule, Schedule):
            sched = self.schedule
            sched.set_rate(rate, now)
        else:
            sched = Schedule(self.arrival, rate, now, self._seed)
            self._leave_open_loop()
            self.mode, self.schedule = RATE, sched
        self.rate = sched.rate
        self.settled_at = now  # an open loop has nothing to settle
        self._wake.set()
        return self.rate

    def start_schedule(self, schedule: OpenSchedule, mode: str, rate: float | None) -> None:
        """Open loop on `schedule` (a trace replay at speed `rate`)."""
        self._leave_open_loop()
        self.mode, self.schedule, self.rate = mode, schedule, rate
        self.settled_at = time.perf_counter()
        self._wake.set()

    def _leave_open_loop(self) -> None:
        """Back to (or staying in) closed loop: sends still waiting are dropped."""
        self._abandon()
        self.mode, self.schedule, self.rate = CONCURRENCY, None, None

    def _abandon(self) -> None:
        """Sends still waiting will never go: dropped, and told (their step censors them)."""
        if self.backlog:
            times = [t for t, _ in self.backlog]
            self.dropped += len(self.backlog)
            self.backlog.clear()
            self._on_abandon(times)

    def _mark_settled(self) -> None:
        if self.settled_at is None and not self.open_loop and self.in_flight == self.concurrency:
            self.settled_at = time.perf_counter()

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False
        self._wake.set()

    def poke(self) -> None:
        self._wake.set()

    async def abort(self) -> int:
        """Cancel every in-flight request; returns how many were cancelled."""
        raise NotImplementedError

    async def probe(self) -> int:
        if not self.probing:
            self.previous = self.concurrency
            self._previous_load = (self.mode, self.rate, self.schedule) if self.open_loop else None
        self._leave_open_loop()
        self.probing = True
        self.concurrency = 1
        self.settled_at = None
        self.paused = True  # nothing refills while the abort unwinds: the probe's first request goes out after it
        n = await self.abort()
        self.paused = False
        self._wake.set()
        return n

    def restore(self) -> int | None:
        """Back to the C held before the probe (None when not probing)."""
        if not self.probing:
            return None
        self.probing = False
        self.concurrency = self.previous or self.concurrency
        self.previous = None
        self.settled_at = None
        prev, self._previous_load = self._previous_load, None
        if prev is not None:
            mode, rate, sched = prev
            if sched is not None:
                sched.rebase(time.perf_counter())
            self.mode, self.rate, self.schedule = mode, rate, sched
            self.settled_at = time.perf_counter()
        self._wake.set()
        return self.concurrency

    def end_probe(self) -> None:
        """A new load was set: the probe is over, with nothing to go back to."""
        if self.probing:
            self.probing = False
            self.previous = None
            self._previous_load = None

    @property
    def previous_rate(self) -> float | None:
        """The open loop's rate before the probe (None: it was closed loop)."""
        return self._previous_load[1] if self._previous_load is not None else None

    def start(self) -> None:
        raise NotImplementedError

    async def stop(self) -> int:
        """No new requests, cancel the in-flight ones, end the loop; how many were cancelled."""
        raise NotImplementedError


class Controller(LoadControl):
    """The load held in this process: `launch(t_intended, item)` returns the coroutine of one
    request (closed loop: `launch(None, None)`); its tasks are the requests in flight."""

    def __init__(self, launch: Callable[[float | None, object], Coroutine[object, None, object]], concurrency: int,
                 max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
                 prepare: Callable[[int], Awaitable[object]] | None = None, **kw: Unpack[LoadOptions]) -> None:
        super().__init__(concurrency, max_concurrency, **kw)
        self._launch = launch
        # the closed loop awaits prepare(n) before it starts n requests (their connections
        # opened before their clocks start: engine/load/holder.py LoadHolder.prepare)
        self._prepare = prepare
        self._tasks: set[asyncio.Task] = set()
        # a fixed-size run (`--num-requests N`): launches left (None: no limit); `drained` is
        # set once they are all launched and every one of them has ended
        self.budget: int | None = None
        self.drained = asyncio.Event()

    def _may_start(self) -> bool:
        return self.budget is None or self.budget > 0

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    async def abort(self) -> int:
        """Cancel every in-flight request; returns how many were cancelled."""
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=ABORT_WAIT_S)
        return len(tasks)

    # -- the loop --------------------------------------------------------------------
    def start(self) -> None:
        self._runner = asyncio.create_task(self._run(), name="redline-controller")

    async def _run(self) -> None:
        while not self.stopped:
            if self.open_loop:
                await self._open_step()
                continue
            want = self.concurrency - len(self._tasks)
            if want > 0 and self._prepare is not None and not self.paused and not self.hold and self._may_start():
                await self._prepare(want if self.budget is None else min(want, self.budget))
                if self.stopped or self.open_loop:
                    continue
            started = 0
            while not self.paused and not self.hold and len(self._tasks) < self.concurrency and not self.stopped and self._may_start():
                self._start(None, None)
                started += 1
                if started % SEND_BATCH == 0:
                    # a rise of hundreds: the loop reads and writes between batches, so each
                    # request goes out right after its send time is stamped (see SEND_BATCH)
                    await asyncio.sleep(0)
            self._mark_settled()
            self._wake.clear()
            await self._wake.wait()

    def _start(self, t_intended: float | None, item: object) -> None:
        if self.budget is not None:
            self.budget -= 1
        task = asyncio.create_task(self._launch(t_intended, item))
        self._tasks.add(task)
        task.add_done_callback(self._done)

    async def _open_step(self) -> None:
        """One turn of the open loop: send what is due (oldest first), else wait for the next
        intended time or a change. Intended times are never moved to when a send happens."""
        sched = self.schedule
        if self.paused or self.hold or sched is None or (sched.t_next is None and not self.backlog) or not self._may_start():
            self._idle = self._idle or self.paused or self.hold
            self._wake.clear()
            await self._wake.wait()
            return
        now = time.perf_counter()
        if self._idle:  # back from a pause or a server gone: arrivals start again from now
            self._idle = False
            self._abandon()  # a pause abandons what was waiting
            sched.rebase(now)
        while self.backlog and len(self._tasks) < self.max_concurrency and self._may_start():
            t, item = self.backlog.popleft()
            self._start(t, item)
        if not self._may_start():
            return
        t_next = sched.t_next
        if t_next is not None and t_next <= now:
            t, item = sched.pop()
            if len(self._tasks) < self.max_concurrency and not self.backlog:
                self._start(t, item)
            elif len(self.backlog) < BACKLOG_MAX:
                self.backlog.append((t, item))
                self.delayed += 1
                self._on_held(False, t)
            else:
                self.dropped += 1
                self._on_held(True, t)
            await asyncio.sleep(0)  # due sends go out in a burst, but let the loop breathe
            return
        self._wake.clear()
        await wait_set(self._wake, None if t_next is None else t_next - now)

    def _done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        self._mark_settled()
        if self.budget == 0 and not self._tasks:
            self.drained.set()
        if not task.cancelled():
            task.exception()  # retrieve, so asyncio does not log it (run_request never raises)
        if not self.open_loop or self.backlog:  # an open loop wakes for its schedule, not for ends
            self._wake.set()

    async def stop(self) -> int:
        """No new requests, cancel the in-flight ones, end the loop."""
        self.stopped = True
        self._wake.set()
        if self._runner is not None:
            self._runner.cancel()  # (it may wait on its connections: prepare)
        n = await self.abort()
        if self._runner is not None:
            await asyncio.wait([self._runner], timeout=ABORT_WAIT_S)
        return n
