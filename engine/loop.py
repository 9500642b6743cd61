"""The event loop every redline process runs (uvloop where it is installed), and the one way
redline waits for something with a time limit (wait_within; wait_set for an event).

Python 3.10 and 3.11+ alike: 3.10 has no asyncio.timeout, and its asyncio.TimeoutError is not
the builtin TimeoutError (3.11 made them one), so wait_within's timeout (WaitTimeout) is both."""

from __future__ import annotations

import asyncio
import sys
import threading
from multiprocessing.connection import Connection
from typing import Any, Awaitable, Callable, TypeVar

T = TypeVar("T")

if sys.version_info >= (3, 11):
    WaitTimeout = TimeoutError  # asyncio.TimeoutError is TimeoutError
else:  # pragma: no cover - Python 3.10

    class WaitTimeout(asyncio.TimeoutError, TimeoutError):
        """wait_within's timeout on Python 3.10: what `except asyncio.TimeoutError` and `except
        TimeoutError` both catch."""


def new_event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop

        return uvloop.new_event_loop()
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux/macOS
        return asyncio.new_event_loop()


def read_pipe(conn: Connection, loop: asyncio.AbstractEventLoop, on_msg: Callable[[Any], None],
              last: Callable[[Any], bool] = lambda msg: False, name: str = "redline-pipe") -> threading.Thread:
    """Read `conn` on a thread of its own and hand each message to `on_msg` on `loop` (None
    once the other end is gone); stops after a message for which `last` is true.

    Not an event-loop reader: that makes the fd non-blocking (uvloop does), and a message
    larger than the pipe's buffer would then be cut mid-write on the other side's sends."""

    def run() -> None:
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                msg = None
            try:
                loop.call_soon_threadsafe(on_msg, msg)
            except RuntimeError:  # the loop is closed: its owner has stopped
                return
            if msg is None or last(msg):
                return

    t = threading.Thread(target=run, name=name, daemon=True)
    t.start()
    return t


async def wait_within(aw: Awaitable[T], timeout: float | None, late: Callable[[T], object] | None = None) -> T:
    """`await aw`, raising WaitTimeout (an asyncio.TimeoutError and a TimeoutError) after
    `timeout` seconds (None: no limit).

    asyncio.wait_for on Python 3.10 and 3.11 drops a cancel that lands as the awaited thing
    finishes: the caller gets the result and runs on (a request cancelled while its connection
    opened, one time in ~15, went on to wait out its read timeout). Here a cancel always goes
    through; a result that came too late for the caller (cancelled, or past the timeout) is
    handed to `late` (a connected transport to close)."""
    if timeout is None:
        return await aw  # a cancel is thrown into the awaited: never lost
    fut = asyncio.ensure_future(aw)
    try:
        done, _ = await asyncio.wait((fut,), timeout=timeout)
    except asyncio.CancelledError:
        _abandon(fut, late)
        raise
    if not done:
        _abandon(fut, late)
        raise WaitTimeout
    return fut.result()


async def wait_set(event: asyncio.Event, timeout: float | None) -> None:
    """Until `event` is set or `timeout` seconds passed (None: no limit; at or below 0: at the
    loop's next turn); back either way, without raising."""
    if sys.version_info >= (3, 11):
        try:
            async with asyncio.timeout(timeout):
                await event.wait()
        except TimeoutError:
            pass
    else:  # pragma: no cover - Python 3.10: no asyncio.timeout
        await _wait_set_310(event, timeout)


async def _wait_set_310(event: asyncio.Event, timeout: float | None) -> None:
    """wait_set without asyncio.timeout (Python 3.10; tests run it on any version)."""
    try:
        await wait_within(event.wait(), timeout)
    except asyncio.TimeoutError:
        pass


def _abandon(fut: asyncio.Future, late: Callable[[Any], object] | None) -> None:
    fut.cancel()

    def settle(f: asyncio.Future) -> None:
        if f.cancelled() or f.exception() is not None:  # read: no "exception never retrieved"
            return
        if late is not None:
            late(f.result())

    fut.add_done_callback(settle)
