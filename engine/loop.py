"""The event loop every redline process runs (uvloop where it is installed), and the one way
redline waits for something with a time limit (wait_within)."""

from __future__ import annotations

import asyncio
import threading
from multiprocessing.connection import Connection
from typing import Any, Awaitable, Callable, TypeVar

T = TypeVar("T")


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
    """`await aw`, raising asyncio.TimeoutError after `timeout` seconds (None: no limit).

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
        raise asyncio.TimeoutError
    return fut.result()


def _abandon(fut: asyncio.Future, late: Callable[[Any], object] | None) -> None:
    fut.cancel()

    def settle(f: asyncio.Future) -> None:
        if f.cancelled() or f.exception() is not None:  # read: no "exception never retrieved"
            return
        if late is not None:
            late(f.result())

    fut.add_done_callback(settle)
