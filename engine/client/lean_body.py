"""The lean transport's response body (engine/client/transport.py): the reads of one connection
(its `_Conn`), each read one `Stamped` item, or handed to a sink as they arrive (`pump`)."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Callable, Protocol

import httpx


class Conn(Protocol):
    """What a body reads of its connection (transport.py `_Conn`)."""

    owner: Any  # its LeanTransport: `_release(conn)` at the body's end
    reads: list[tuple[float, bytes]]
    exc: Exception | None
    closed: bool
    complete: bool
    sink: Callable[[list[tuple[float, bytes]]], bool] | None
    stopped: bool | BaseException

    def take(self) -> list[tuple[float, bytes]]: ...
    def wait(self) -> asyncio.Future: ...


class Stamped(bytes):
    """Body bytes of one socket read; `t` is when that read arrived, on the time.perf_counter()
    clock (the kernel's receive time, or perf_counter() in data_received: see the module)."""

    t: float


class Body(httpx.AsyncByteStream):
    """The response body: one Stamped item per socket read, in order; or, through pump(),
    the reads handed to a sink as they arrive."""

    __slots__ = ("_conn", "_done")

    def __init__(self, conn: Conn) -> None:
        self._conn = conn
        self._done = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        c = self._conn
        while True:
            if c.reads:
                for t, data in c.take():
                    item = Stamped(data)
                    item.t = t
                    yield item
                continue
            self._check_end()
            if self._done:
                return
            await c.wait()

    def _check_end(self) -> None:
        """At the end of the body: release the connection (and raise what ended it, if an error)."""
        c = self._conn
        if c.exc is not None or (c.closed and not c.complete):  # closed under us: no error, no end
            exc = c.exc or httpx.ReadError("connection closed")
            self._release()
            raise exc
        if c.complete:
            self._release()

    async def pump(self, sink: Callable[[list[tuple[float, bytes]]], bool]) -> bool:
        """Hand the body to `sink(reads)` as it arrives: a list of (stamp, bytes) pairs, one per
        socket read (stamp: when the read arrived, on the perf_counter() clock), in order, each read once.
        `sink` returns False to stop reading. Returns at the end of the body (True) or when the
        sink stopped (False); raises the transport's error (or what the sink raised). Use
        either this or the iterator, once."""
        c = self._conn
        c.sink = sink
        c.stopped = False
        try:
            while True:
                if c.reads and not c.stopped and not sink(c.take()):
                    c.stopped = True
                if c.stopped:
                    if isinstance(c.stopped, BaseException):
                        raise c.stopped  # what the sink raised in _deliver
                    return False
                self._check_end()
                if self._done:
                    return True
                await c.wait()
        finally:
            c.sink = None

    async def aclose(self) -> None:
        self._release()

    def _release(self) -> None:
        if not self._done:
            self._done = True
            self._conn.owner._release(self._conn)
