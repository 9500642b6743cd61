"""The event loop every redline process runs: uvloop where it is installed."""

from __future__ import annotations

import asyncio
import threading
from multiprocessing.connection import Connection
from typing import Any, Callable


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
