"""Steps as the operator makes them: every change of the load (a key, a command from the
control API) closes the live step and opens the next, at the new load (docs/numbers.md#what-a-steps-figures-describe).

A preset run (engine/run/preset_runner.py) manages its own steps: it suspends the rolling and resumes it
when it ends. With worker processes a step is recorded only once every worker has reported
what it measured before the step closed (`pending`, awaited at stop).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from ..constants import CLOSE_CATCH_UP_TURNS
from ..load.controller import CONCURRENCY, RATE
from ..measure.accumulator import StepAccumulator
from ..measure.step_result import StepResult

if TYPE_CHECKING:
    from ..measure.step_book import StepBook
    from .config import EngineConfig
    from .held_load import HeldLoad
    from .measurements import Measurements


class LiveSteps:
    """The live steps: the engine's config (`live_steps`), its step book, its Measurements (a
    close harvests first) and the load it holds (its shape; with workers, their reports)."""

    def __init__(self, config: EngineConfig, book: StepBook, measurements: Measurements, load: HeldLoad) -> None:
        self.config = config
        self.book = book
        self.measurements = measurements
        self.load = load
        self.pending: list[asyncio.Future[None]] = []  # live steps waiting for the workers' last reports

    def concurrency(self) -> int:
        """A step's concurrency: C, or an open loop's in-flight cap."""
        ctl = self.load.controller
        assert ctl is not None
        return ctl.max_concurrency if ctl.open_loop and not ctl.probing else ctl.concurrency

    def sync_shape(self) -> None:
        """Steps opened from now carry the load's shape (mode, rate, arrival)."""
        ctl, book = self.load.controller, self.book
        if ctl is None:
            return
        if ctl.probing or not ctl.open_loop:
            book.shape = (CONCURRENCY, None, None)
        else:
            book.shape = (ctl.mode, ctl.rate, ctl.arrival.describe() if ctl.mode == RATE else None)

    def roll(self) -> None:
        """The load changed: close the live step and open one at the new load (unless a
        driver manages the steps, or the load is paused or stopped)."""
        self.sync_shape()  # steps opened from now (a preset's too) carry the load's shape
        ctl = self.load.controller
        if not self.config.live_steps or ctl is None:
            return
        c = self.concurrency()
        if not ctl.paused and not ctl.stopped and self.book.live_matches(c, ctl.probing):
            return
        self.close_live()
        if not ctl.paused and not ctl.stopped:
            self.book.open_live(c, ctl.probing)

    def suspend(self) -> None:
        """A driver manages its own steps: close the live one and stop rolling."""
        self.close_live()
        self.config.live_steps = False

    def resume(self) -> None:
        self.config.live_steps = True
        self.book.default_phase = "live"
        self.roll()

    def close_live(self) -> None:
        """Close the live step now; with worker processes, record it once every worker has
        reported what it measured before now."""
        now = time.perf_counter()
        pool, book = self.load.pool, self.book
        if pool is None:
            self.measurements.harvest_all()
            book.close_live(now)
            return
        acc = book.detach_live(now)
        if acc is not None:

            async def finish() -> None:
                await pool.sync(self.cut_at(now))
                book.finish_live(acc, now)

            self.pending.append(asyncio.ensure_future(finish()))

    async def close_step(self, acc: StepAccumulator) -> StepResult:
        """Close a driver's step now (with workers: once they reported what came before)."""
        pool = self.load.pool
        if pool is None:
            # first, what the kernel holds: read, delivered and ended on the loop's next turns
            # (a loop behind its reads would close on requests that had in truth answered);
            # then the close, with no turn of the loop (no send) between it and its result
            for _ in range(CLOSE_CATCH_UP_TURNS):
                await asyncio.sleep(0)
            now = time.perf_counter()
            self.measurements.harvest_all()
            return self.book.close_step(acc, now)
        now = time.perf_counter()
        acc.close(now)
        await pool.sync(self.cut_at(now))  # the workers' reports of what came before now (an end after it waits, late)
        return self.book.close_step(acc, now)

    def cut_at(self, now: float) -> tuple[float, bool]:
        """A step's close as the workers are asked it: they take the window figures of their
        requests out at `now` (with each one's own ITL p99 when the SLO bounds it)."""
        slo = self.book.slo
        return now, slo is not None and slo.itl_ms is not None

    async def settle(self) -> None:
        """Every worker report is in: the steps closed before now are recorded."""
        if self.pending:
            await asyncio.gather(*self.pending, return_exceptions=True)
