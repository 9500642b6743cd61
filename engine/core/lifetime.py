"""The engine's life: when its load started (wall and CPU clocks), its tasks, whether it
stopped, and a fixed-size run's end (`finished`, `done`)."""

from __future__ import annotations

import asyncio
import time
from typing import Coroutine


class Lifetime:
    def __init__(self) -> None:
        self.t0 = time.perf_counter()  # when the load started (set again at the start)
        self.cpu0 = time.process_time()  # this process's CPU seconds then
        self.closed = False  # stop() ran (or runs): idempotent from here
        # a fixed-size run (--num-requests, --duration): why it ended ("100 requests sent and
        # ended", "20 s"), set when it did; `done` is set then too
        self.finished = ""
        self.done = asyncio.Event()
        self.tasks: list[asyncio.Task[object]] = []  # cancelled at the stop

    def started(self) -> float:
        """The load starts now: both clocks from here."""
        self.t0, self.cpu0 = time.perf_counter(), time.process_time()
        return self.t0

    def spawn(self, coro: Coroutine[object, None, object], name: str) -> asyncio.Task[object]:
        """A task of the engine's, cancelled at its stop."""
        task: asyncio.Task[object] = asyncio.create_task(coro, name=name)
        self.tasks.append(task)
        return task

    def keep(self, task: asyncio.Task[object]) -> None:
        """A task started elsewhere (a driver), cancelled at the stop too."""
        self.tasks.append(task)

    async def cancel_tasks(self) -> None:
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.tasks.clear()
