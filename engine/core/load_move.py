"""A load started in the engine's own process moves to worker processes: `--workers auto`
re-planned it (engine/core/replan.py) because the operator raised C past what one process
holds (the TUI starts at C=8, where one process is enough, and is raised to 1024).

The hand-over never has more than C requests in flight, and loses none:

1. the worker processes start (WorkerPool.launch) while this process keeps the whole load;
2. then, with no await between the last check and the swap, this process's Controller sends
   no more (paused: what it has in flight finishes normally, as `HeldLoad.draining`) and the
   pool becomes the load (`controller` and `pool`), its shares C less what still drains here
   (`WorkerPool.lent`). Every command from then on steers the pool; an abort, a probe and the
   stop cancel what drains here as well (engine/core/engine.py);
3. once the last request here has ended, the pool holds all of C, this process's figures are
   kept as summary.json's worker 0 (`HeldLoad.moved`), and the log says so. The live step goes
   on through the move: each request is measured where it was sent, into the same steps.

The pool's processes are workers 1, 2, ... in the rows and the summary (this process was 0).
`may_move` says why a load stays where it is (the `crowded` warning says it): a preset's run
under way, an open loop, a fixed request count, a probe, `--workers N`, Ray. A preset's run
started on a load in this process moves it first when its peak needs workers (`fit_for_run`).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Protocol

from ..load.controller import CONCURRENCY, Controller
from ..load.worker_count import auto_plan
from .engine_port import EnginePort
from .load_start import Starting, worker_spec
from .summary import Summarized, this_process

if TYPE_CHECKING:
    from ..load.worker_pool import WorkerPool
    from .event_log import EventLog
    from .steering import Driven

DRAIN_POLL_S = 0.02  # how often the drain looks at what is left here (the pool's orders go out as often)


class Moved(Starting, Summarized, Protocol):
    """What a move reads and changes of the engine."""

    events: EventLog

    @property
    def steering(self) -> Driven: ...


def may_move(e: Moved, for_run: bool = False) -> str:
    """'' when the load in this process may move to worker processes now; else why it stays.
    `for_run`: a preset's run about to start (its driver is the caller)."""
    cfg, load, ctl = e.config, e.load, e.load.controller
    if cfg.ray is not None:
        return "Ray actors are fixed at start"
    if not cfg.workers_auto:
        return f"--workers {cfg.workers} was given"
    if load.pool is not None or not isinstance(ctl, Controller) or e.life.closed or ctl.stopped:
        return "the load is not in this process"
    if cfg.num_requests is not None:
        return "--num-requests is counted in this process"
    if load.trace is not None or ctl.mode != CONCURRENCY:
        return "an open loop (a rate or a trace) stays in the process it started in"
    if e.steering.driving and not for_run:
        return "a preset's run keeps the load in the processes it started with"
    if ctl.probing or ctl.hold:
        return "the load is probed or held"
    return ""


async def fit_for_run(e: Moved, peak: int) -> None:
    """Before a preset's run (engine/run/preset_runner.py: the TUI's `p` on a session started
    at a small C): a load in this process moves now when the run's peak needs worker processes,
    sized as at start (engine/load/worker_count.py auto_plan)."""
    if peak <= max(1, e.config.workers_peak) or may_move(e, for_run=True):
        return  # sized for it at start (a headless `redline run`), or it cannot move
    kernel = e.targets.kernel_stamped()
    p = await asyncio.to_thread(auto_plan, peak, kernel)  # its measure (~30 ms, a core) off the loop
    if p.processes > 1:
        await move_to_workers(e, p.processes, p.why.split(": ", 1)[-1], for_run=True)


async def move_to_workers(e: Moved, n: int, why: str, for_run: bool = False) -> bool | None:
    """The load in this process, moved to `n` worker processes (see the module docstring):
    True once the pool holds it (what drains here ends in a task of the engine's), False when
    it stays because the load changed while they started, None when they did not start."""
    from ..load.worker_pool import WorkerPool  # worker processes' code: imported only when there are workers

    old, load = e.load.controller, e.load
    assert isinstance(old, Controller)
    e.log("notice", f"--workers auto: the load moves to {n} worker processes: {why}")
    pool = WorkerPool(EnginePort(e), n, old.concurrency, old.max_concurrency, arrival=old.arrival, seed=e.config.seed)
    pool.first_index = 1
    swapped = False
    try:
        try:
            await pool.launch(worker_spec(e, n))
        except RuntimeError as exc:
            e.log("warning", f"--workers auto: the load stays in this process: {exc}")
            return None
        stays = may_move(e, for_run)
        if stays or load.controller is not old:
            e.log("notice", f"--workers auto: the load stays in this process: {stays or 'it changed while the workers started'}")
            return False
        # the swap: nothing awaited from the check above to the pool's start
        pool.concurrency, pool.max_concurrency, pool.paused = old.concurrency, old.max_concurrency, old.paused
        old.pause()
        pool.lent = lambda: old.in_flight
        load.draining, load.controller, load.pool = old, pool, pool
        e.config.workers = n
        pool.start()
        swapped = True
        e.life.spawn(_drain(e, old, pool), "redline-workers-drain")
        e.publish(time.perf_counter())
        return True
    finally:
        if not swapped:
            await pool.stop()  # the workers never held any load


async def _drain(e: Moved, old: Controller, pool: WorkerPool) -> None:
    """Until the last request in this process ended: then the pool holds all of C."""
    load, t0 = e.load, time.perf_counter()
    try:
        while old.in_flight and not old.stopped:
            await asyncio.sleep(DRAIN_POLL_S)
    finally:  # drained, or the engine's stop cut it (and cancels this task): worker 0 as it ended
        load.moved = this_process(e, time.perf_counter())
    if old.stopped:  # the engine stopped: nothing more to hand over
        return
    await old.stop()  # nothing in flight: its loop ends
    load.draining = None
    pool.lent = lambda: 0
    pool.poke()  # the shares of all of C go out now
    e.log("notice", f"--workers auto: the load is in {pool.n} worker processes now (this process's last request ended {time.perf_counter() - t0:.1f} s after the move)")
