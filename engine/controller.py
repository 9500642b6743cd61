"""The resizable pool: keeps `target` requests in flight, changed at any moment.

- set_concurrency(n): raising starts requests now; lowering starts none until in-flight < n.
- pause()/resume(): stop/start sending; in-flight requests finish normally.
- abort(): cancel every in-flight request (its connection closes, the server sees it leave).
- probe(): abort, then C=1 until told otherwise, remembering the previous C; restore() goes back.

The pool knows nothing of HTTP: `launch()` returns the coroutine of one request.
"""

from __future__ import annotations

import asyncio
import time
from typing import Awaitable, Callable

from .constants import ABORT_WAIT_S, DEFAULT_MAX_CONCURRENCY

RUNNING = "running"
PAUSED = "paused"
PROBE = "probe"
STOPPED = "stopped"


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


class Controller:
    def __init__(
        self,
        launch: Callable[[], Awaitable[object]],
        concurrency: int,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
    ) -> None:
        self._launch = launch
        self.max_concurrency = max_concurrency
        self.target = check_concurrency(concurrency, max_concurrency)
        self.paused = False
        self.probing = False
        self.previous: int | None = None  # C before the probe
        self.stopped = False
        self._tasks: set[asyncio.Task] = set()
        self._wake = asyncio.Event()
        self._runner: asyncio.Task | None = None
        self.hold = False  # set by the engine while the server is gone (no new sends)
        self.settled_at: float | None = None  # when in-flight last reached the target after a change

    # -- state -----------------------------------------------------------------------
    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    @property
    def state(self) -> str:
        if self.stopped:
            return STOPPED
        if self.paused:
            return PAUSED
        return PROBE if self.probing else RUNNING

    # -- commands --------------------------------------------------------------------
    def set_concurrency(self, n: int) -> int:
        n = check_concurrency(n, self.max_concurrency)
        if n != self.target:
            self.settled_at = None
        self.target = n
        self._mark_settled()
        self._wake.set()
        return self.target

    def _mark_settled(self) -> None:
        if self.settled_at is None and len(self._tasks) == self.target:
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
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=ABORT_WAIT_S)
        return len(tasks)

    async def probe(self) -> int:
        if not self.probing:
            self.previous = self.target
        self.probing = True
        self.target = 1
        self.settled_at = None
        self.paused = False
        n = await self.abort()
        self._wake.set()
        return n

    def restore(self) -> int | None:
        """Back to the C held before the probe (None when not probing)."""
        if not self.probing:
            return None
        self.probing = False
        self.target = self.previous or self.target
        self.previous = None
        self.settled_at = None
        self._wake.set()
        return self.target

    # -- the loop --------------------------------------------------------------------
    def start(self) -> None:
        self._runner = asyncio.create_task(self._run(), name="redline-controller")

    async def _run(self) -> None:
        while not self.stopped:
            while not self.paused and not self.hold and len(self._tasks) < self.target and not self.stopped:
                task = asyncio.create_task(self._launch())
                self._tasks.add(task)
                task.add_done_callback(self._done)
            self._mark_settled()
            self._wake.clear()
            await self._wake.wait()

    def _done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        self._mark_settled()
        if not task.cancelled():
            task.exception()  # retrieve, so asyncio does not log it (run_request never raises)
        self._wake.set()

    async def stop(self) -> int:
        """No new requests, cancel the in-flight ones, end the loop."""
        self.stopped = True
        self._wake.set()
        n = await self.abort()
        if self._runner is not None:
            await asyncio.wait([self._runner], timeout=ABORT_WAIT_S)
        return n
