"""A lean HTTP/1.1 transport for httpx: asyncio.Protocol + httptools (llhttp) on the running loop.

httpx stays the API (AsyncClient, timeouts, headers, errors); this replaces only the part that moves
bytes, the part that costs CPU per streamed token (docs/benchmarks.md).

- One keep-alive pool per (scheme, host, port), no connection cap (the engine's concurrency
  is the cap). Idle connections are reused newest first; one idle longer than
  `keepalive_expiry`, or closed by the server, is dropped, not reused.
- TLS through an ssl.SSLContext: verified by default (certifi, as httpx), `verify=False` off.
- Timestamps are the kernel's receive time of each read (plain http:// on Linux: engine/client/kstamp.py
  reads the socket; the stamp on the perf_counter() clock), so a read that waited while the
  loop was busy keeps its arrival time; otherwise (https://, REDLINE_KSTAMP=0) data_received
  reads perf_counter() before it feeds the parser. The body bytes of that read travel to the
  consumer as one `Stamped` item (a bytes subclass; `.t` is that stamp): one item per socket
  read, never two reads under one stamp, so one stream's slow parse never delays another's.
  Chunked framing is removed by llhttp; Content-Length and close-delimited bodies work.
- The per-token path (engine/client/request.py) finds the body in the response's extensions
  (`BODY_EXTENSION`) and hands it a sink, `_Body.pump(sink)`: the reads go to the sink as
  (stamp, bytes) pairs from one loop callback per loop iteration for all connections, after
  the loop read every ready socket, with no wake-up of the request's task per read; and when
  its last byte went to the kernel (`SENT_EXTENSION`: the client's own wait, `send_wait`).
- A pooled keep-alive connection that the server closed while idle is not used: before
  reuse its socket is polled (an idle socket that is readable has an EOF, a reset or bytes
  nobody asked for). If one still fails before any byte of the request was written (the
  socket refuses the first write), the request is sent again, once, on a new connection:
  safe for any method, POST included, since the server got nothing. Once a byte was
  written only idempotent methods are retried.
- Errors are httpx's: ConnectError / ConnectTimeout before the request is on the wire,
  ReadTimeout after request.extensions["timeout"]["read"] seconds without a byte,
  RemoteProtocolError when the server closes before the response is complete (or sends
  something that is not HTTP), ReadError when the connection is reset.
- Closing a response before its end (cancellation, an error body read in part) closes the
  connection, so the server sees the client leave at once and can free the request; a cancel
  while connecting is never lost (engine/loop.py wait_within).

Nothing here knows about SSE or LLMs.
"""

from __future__ import annotations

import asyncio
import ssl
from time import perf_counter
from typing import Any, Callable

import httptools
import httpx

from ..loop import wait_within
from . import kstamp
from .lean_body import Body as _Body, Stamped
from .lean_head import request_head
from .lean_tls import close_opened, dropped as _dropped, ssl_context

__all__ = ["BODY_EXTENSION", "SENT_EXTENSION", "LeanTransport", "Stamped", "ssl_context"]

HIGH_WATER = 256 * 1024  # bytes buffered for a slow consumer before reading pauses (TCP backpressure)
KEEPALIVE_EXPIRY_S = 4.0  # under uvicorn's 5 s keep-alive: never reuse what it may be closing
IDEMPOTENT = frozenset((b"GET", b"HEAD", b"OPTIONS", b"PUT", b"DELETE", b"TRACE"))
DEFAULT_PORTS = {"http": 80, "https": 443}
BODY_EXTENSION = "redline.body"  # Response.extensions key: the _Body, for pump()
SENT_EXTENSION = "redline.sent"  # ... perf_counter() when the write of the request's last byte returned


class _Conn(asyncio.Protocol):
    """One HTTP/1.1 connection: parser callbacks, body buffer, waiter, read-timeout timer."""

    __slots__ = (
        "key", "loop", "owner", "transport", "parser", "closed", "active", "head",
        "status", "reason", "headers", "headers_done", "complete", "keep_alive", "informational",
        "reads", "pieces", "buffered", "paused", "got_bytes", "sent", "exc", "waiter",
        "timeout", "wait_since", "last_read", "timer", "idle_since", "write_paused", "drain",
        "sink", "queued", "stopped", "on_body",
    )

    def __init__(self, owner: "LeanTransport", key: tuple[str, str, int], loop: asyncio.AbstractEventLoop) -> None:
        self.key = key
        self.loop = loop
        self.owner = owner
        self.transport: asyncio.Transport | None = None
        self.pieces: list[bytes] = []  # body pieces of the read being parsed
        # llhttp calls on_body per piece (a chunked body's chunk: per token): the list's own append,
        # where a method cost ~1 us a token; backpressure is counted per read (data_received)
        self.on_body = self.pieces.append
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.active = False  # a request is in progress on this connection
        self.head = False
        self.reads: list[tuple[float, bytes]] = []  # (stamp, body bytes): one per read, for the consumer
        self.sent = False  # a byte of the current request was handed to the socket
        self.buffered = 0
        self.paused = False
        self.waiter: asyncio.Future | None = None
        self.timeout: float | None = None
        self.wait_since = 0.0  # perf_counter() when the current wait began
        self.last_read = 0.0  # perf_counter() stamp of the last read
        self.timer: asyncio.TimerHandle | None = None
        self.idle_since = 0.0
        self.write_paused = False
        self.drain: asyncio.Future | None = None
        # pump(): the consumer of each read, called from a loop callback (None: _Body's iterator)
        self.sink: Callable[[list[tuple[float, bytes]]], bool] | None = None
        self.queued = False  # queued for the transport's _drain callback
        self.stopped: bool | BaseException = False  # the sink stopped reading (or raised this)
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.reason = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.headers_done = False
        self.complete = False
        self.keep_alive = True
        self.informational = False
        self.got_bytes = False
        self.exc: Exception | None = None
        self.reads.clear()
        self.pieces.clear()
        self.buffered = 0

    # -- asyncio.Protocol ----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # asyncio types it BaseTransport; a TCP connection's is a Transport

    def data_received(self, data: bytes, t: float = 0.0) -> None:
        if not t:  # not the kernel's receive time (engine/client/kstamp.py): now, before any parsing
            t = perf_counter()
        if not self.active:  # bytes on an idle connection, or before the request (an SSH port speaks first): not HTTP
            self._fail(httpx.RemoteProtocolError(f"malformed HTTP response: {len(data)} bytes before the request"))
            return self._close()
        self.got_bytes = True
        self.last_read = t
        pieces = self.pieces
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            if pieces:
                self.reads.append((t, b"".join(pieces)))
                pieces.clear()
            if not self.complete:
                self._fail(httpx.RemoteProtocolError(f"malformed HTTP response: {exc}"))
            self._close()
            return
        if pieces:  # this read's body bytes: one item, stamped with the read's time
            body = pieces[0] if len(pieces) == 1 else b"".join(pieces)
            self.reads.append((t, body))
            pieces.clear()
            self.buffered += len(body)
            if self.buffered > HIGH_WATER and not self.paused and self.transport is not None:
                self.paused = True
                self.owner.read_pauses += 1
                self.transport.pause_reading()
        if self.sink is not None:  # pump(): the reads go to the sink from one loop callback
            if not self.queued and self.reads:
                self.queued = True
                self.owner._queue(self)
            if self.complete:
                self._wake()  # after the delivery (call_soon order); pump() delivers first anyway
            return
        w = self.waiter
        if w is not None and (self.reads or self.complete or self.headers_done):
            self.waiter = None
            if not w.done():
                w.set_result(None)

    def eof_received(self) -> bool | None:
        return None  # close the transport; connection_lost decides what the EOF means

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.owner._forget(self)
        self._cancel_timer()
        if self.active and not self.complete and self.exc is None:
            if self.headers_done and self._close_delimited():
                self.complete = True  # the body ends at the close: that is its end
                self.keep_alive = False
            elif exc is not None:
                self.exc = httpx.ReadError(f"connection lost: {exc.__class__.__name__} {exc}".strip())
                self.exc.__cause__ = exc
            elif self.headers_done:
                self.exc = httpx.RemoteProtocolError("server closed the connection before the response body was complete")
            else:
                self.exc = httpx.RemoteProtocolError("server closed the connection without sending a complete response")
        self._wake()
        d = self.drain
        if d is not None and not d.done():
            d.set_result(None)

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        d = self.drain
        if d is not None and not d.done():
            d.set_result(None)

    # -- httptools callbacks ---------------------------------------------------------------
    def on_status(self, status: bytes) -> None:
        self.reason += status

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if 100 <= status < 200 and status != 101:  # 100 Continue, 103 Early Hints: not the answer
            self.informational = True
            self.headers = []
            self.reason = b""
            return
        self.status = status
        self.headers_done = True
        if self.head:  # llhttp would wait for Content-Length bytes that never come
            self.complete = True
            self.keep_alive = False

    def on_message_complete(self) -> None:
        if self.informational:
            self.informational = False
            return
        self.complete = True
        self.keep_alive = self.keep_alive and self.parser.should_keep_alive()

    # -- helpers ---------------------------------------------------------------------------
    def take(self) -> list[tuple[float, bytes]]:
        """The reads waiting for the consumer, in order (reading resumes if it had paused)."""
        reads = self.reads
        self.reads = []
        self.buffered = 0
        if self.paused:
            self.paused = False
            if not self.closed and self.transport is not None:
                self.transport.resume_reading()
        return reads

    def _deliver(self) -> None:
        """pump()'s delivery (from the transport's `_drain`): the reads to the sink, in one call."""
        self.queued = False
        sink = self.sink
        if sink is None or not self.reads or self.stopped:
            return
        try:
            if not sink(self.take()):
                self.stopped = True
        except BaseException as exc:  # noqa: BLE001 - pump() raises it in its task
            self.stopped = exc
        if self.stopped:
            self._wake()

    def _close_delimited(self) -> bool:
        for name, value in self.headers:
            n = name.lower()
            if n == b"content-length" or (n == b"transfer-encoding" and b"chunked" in value.lower()):
                return False
        return self.status not in (204, 304)

    def _wake(self) -> None:
        w = self.waiter
        if w is not None:
            self.waiter = None
            if not w.done():
                w.set_result(None)

    def _fail(self, exc: Exception) -> None:
        if self.exc is None:
            self.exc = exc
        self._wake()

    def _close(self) -> None:
        self._cancel_timer()
        if not self.closed:
            self.closed = True
            if self.transport is not None:
                self.transport.close()

    def _cancel_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def wait(self) -> asyncio.Future:
        """A future the next parser progress resolves (with a sink: the end of the body, an
        error or the sink's stop); arms the read timeout lazily."""
        fut = self.loop.create_future()
        self.waiter = fut
        if self.timeout is not None:
            self.wait_since = perf_counter()
            if self.timer is None:
                self.timer = self.loop.call_later(self.timeout, self._on_timer)
        return fut

    def _on_timer(self) -> None:
        # One timer per connection, re-armed at most once per timeout period, instead of a
        # timer per read: the deadline is the timeout after the later of the wait's start and
        # the last read (a pump's one long wait sees many reads).
        self.timer = None
        w, t = self.waiter, self.timeout
        if w is None or w.done() or t is None:
            return
        left = max(self.wait_since, self.last_read) + t - perf_counter()
        if left <= 0.001:
            self._fail(httpx.ReadTimeout(f"no data for {t:g} s (read timeout)"))
            self._close()
        else:
            self.timer = self.loop.call_later(left, self._on_timer)

    async def write(self, data: bytes, timeout: float | None) -> None:
        if self.closed or self.transport is None or self.transport.is_closing():
            raise self.exc or httpx.WriteError("connection closed before the request was sent")
        self.transport.write(data)
        if not self.sent:
            # The socket transport sends at once; when that send fails (the server reset
            # the connection) it closes before returning, and nothing was written.
            if self.transport.is_closing():
                raise httpx.WriteError("connection closed before the request was sent")
            self.sent = True
        if self.write_paused:
            self.drain = self.loop.create_future()
            try:
                await wait_within(self.drain, timeout)
            except asyncio.TimeoutError:
                raise httpx.WriteTimeout(f"request not sent within {timeout:g} s") from None
            finally:
                self.drain = None
            if self.closed:
                raise httpx.WriteError("connection closed while the request was being sent")


class LeanTransport(httpx.AsyncBaseTransport):
    """httpx transport: HTTP/1.1 keep-alive pools on asyncio.Protocol + httptools."""

    def __init__(
        self,
        *,
        verify: bool | str | ssl.SSLContext = True,
        keepalive_expiry: float | None = KEEPALIVE_EXPIRY_S,
    ) -> None:
        self._verify = verify
        self._ssl: ssl.SSLContext | None = None
        self._keepalive_expiry = keepalive_expiry
        self._idle: dict[tuple[str, str, int], list[_Conn]] = {}
        self._keys: dict[str, tuple[str, str, int]] = {}  # preopen's URLs, parsed once
        self._conns: set[_Conn] = set()
        self._ready: list[_Conn] = []  # connections with reads for their sink, in arrival order
        self._draining = False  # a _drain callback is scheduled
        self._closed = False
        self.connections_opened = 0  # for tests and benchmarks: keep-alive reuse is visible
        self.read_pauses = 0  # times a slow consumer made a connection stop reading

    # -- httpx.AsyncBaseTransport ----------------------------------------------------------
    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._closed:
            raise httpx.ConnectError("transport closed")
        url = request.url
        scheme = url.scheme
        if scheme not in DEFAULT_PORTS:
            raise httpx.UnsupportedProtocol(f"URL scheme {scheme!r} not supported (http, https)")
        key = (scheme, url.host, url.port or DEFAULT_PORTS[scheme])
        timeouts: dict[str, Any] = request.extensions.get("timeout") or {}
        method = request.method.encode("ascii")
        head, body, chunked = request_head(request, method)

        attempt = 0
        while True:
            conn = self._acquire(key) if attempt == 0 else None  # a retry gets a fresh one
            reused = conn is not None
            if conn is None:
                conn = await self._connect(key, timeouts.get("connect"))
            conn.active = True
            conn.sent = False
            conn.head = method == b"HEAD"
            conn.timeout = timeouts.get("read")
            try:
                await conn.write(head, timeouts.get("write"))
                if body is None or body:  # streamed or chunked: frame as we go
                    await self._write_body(conn, request, body, chunked, timeouts.get("write"))
                t_sent = perf_counter()
                while not conn.headers_done:
                    if conn.exc is not None:
                        raise conn.exc
                    if conn.closed:
                        raise httpx.RemoteProtocolError("server closed the connection without sending a response")
                    await conn.wait()
            except BaseException as exc:
                # A reused connection the server had closed: send again on a new one when
                # nothing of the request was written (any method), or, for an idempotent
                # request with a body we still hold, when nothing of a response came back.
                retry = (
                    reused and attempt == 0 and not conn.got_bytes
                    and isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError))
                    and (not conn.sent or (method in IDEMPOTENT and body is not None))
                )
                self._discard(conn)
                if retry:
                    attempt += 1
                    continue
                raise
            break
        stream = _Body(conn)
        return httpx.Response(
            conn.status,
            headers=conn.headers,
            stream=stream,
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": conn.reason, BODY_EXTENSION: stream, SENT_EXTENSION: t_sent},
        )

    async def preopen(self, url: str, n: int, timeout: float | None) -> int:
        """Open connections to `url`'s origin until `n` are idle, before requests need them (a rise
        in C): their connects then wait in no request's TTFT. Returns how many it opened. One that
        fails or is not open within `timeout` is left: the request that needs it connects itself."""
        key = self._keys.get(url)
        if key is None:
            u = httpx.URL(url)
            if u.scheme not in DEFAULT_PORTS:
                return 0
            key = self._keys[url] = (u.scheme, u.host, u.port or DEFAULT_PORTS[u.scheme])
        idle = self._idle.setdefault(key, [])
        if len(idle) >= n or self._closed:
            return 0
        need = n - sum(1 for c in idle if not c.closed)
        if need <= 0:
            return 0
        tasks = [asyncio.ensure_future(self._connect(key, timeout)) for _ in range(need)]
        try:
            await asyncio.wait(tasks, timeout=timeout)
        finally:
            opened = 0
            for t in tasks:
                if not t.done():
                    t.cancel()  # (one that opens after it is closed: _connect's wait_within)
                elif not t.cancelled() and t.exception() is None:
                    conn = t.result()
                    conn.idle_since = conn.loop.time()
                    idle.append(conn)
                    opened += 1
        return opened

    async def aclose(self) -> None:
        self._closed = True
        for conn in list(self._conns):
            conn._close()
        self._conns.clear()
        self._idle.clear()

    def _queue(self, conn: _Conn) -> None:
        """`conn` has reads for its sink. One loop callback per iteration delivers every
        connection's reads (a callback costs ~2 us here; one per read did), where each one's
        own callback ran before: after the loop read every ready socket, before any task
        those reads woke. One transport's connections share one loop, as httpx's pools do."""
        self._ready.append(conn)
        if not self._draining:
            self._draining = True
            conn.loop.call_soon(self._drain)

    def _drain(self) -> None:
        self._draining = False
        ready, self._ready = self._ready, []
        for conn in ready:
            conn._deliver()  # never raises: it keeps what the sink raised for pump()

    # -- pool ------------------------------------------------------------------------------
    def _acquire(self, key: tuple[str, str, int]) -> _Conn | None:
        idle = self._idle.get(key)
        if not idle:
            return None
        exp = self._keepalive_expiry
        now = idle[-1].loop.time() if exp is not None else 0.0
        while idle:
            conn = idle.pop()  # newest first
            if conn.closed or conn.transport is None or conn.transport.is_closing():
                continue
            if (exp is not None and now - conn.idle_since > exp) or _dropped(conn.transport):
                self._discard(conn)
                continue
            return conn
        return None

    async def _connect(self, key: tuple[str, str, int], timeout: float | None) -> _Conn:
        scheme, host, port = key
        loop = asyncio.get_running_loop()
        ctx = None
        if scheme == "https":
            if self._ssl is None:
                self._ssl = ssl_context(self._verify)
            ctx = self._ssl
        conn = _Conn(self, key, loop)
        coro = (kstamp.open_connection(loop, host, port, conn) if ctx is None and kstamp.ENABLED  # kernel-stamped reads
                else loop.create_connection(lambda: conn, host, port, ssl=ctx, server_hostname=host if ctx else None))
        try:
            # one that opens after its request's cancel is closed (kstamp's, or (transport, protocol))
            await wait_within(coro, timeout, late=close_opened)
        except asyncio.TimeoutError:
            raise httpx.ConnectTimeout(f"connect to {host}:{port}: no answer within {timeout:g} s") from None
        except ssl.SSLError as exc:  # the cause stays chained: request.py reads it
            raise httpx.ConnectError(f"TLS with {host}:{port}: {exc}") from exc
        except OSError as exc:
            raise httpx.ConnectError(f"connect to {host}:{port}: {exc.strerror or exc}") from exc
        self.connections_opened += 1
        if self._closed:
            conn._close()
            raise httpx.ConnectError("transport closed")
        self._conns.add(conn)
        return conn

    async def _write_body(self, conn: _Conn, request: httpx.Request, body: bytes | None, chunked: bool, timeout: float | None) -> None:
        if body is not None:  # known bytes, but the headers say chunked
            await conn.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body) if body else b"0\r\n\r\n", timeout)
            return
        async for part in request.stream:  # type: ignore[union-attr]  # httpx: sync or async; an AsyncClient's is async
            if part:
                await conn.write(b"%x\r\n%s\r\n" % (len(part), part) if chunked else part, timeout)
        if chunked:
            await conn.write(b"0\r\n\r\n", timeout)

    def _release(self, conn: _Conn) -> None:
        """The response is closed: back to the pool if it ended cleanly, else close it."""
        conn.active = False
        conn._cancel_timer()
        conn.waiter = None
        reusable = conn.complete and conn.exc is None and conn.keep_alive and not conn.closed and not self._closed
        if not reusable:
            return self._discard(conn)
        conn._reset()
        conn.idle_since = conn.loop.time()
        self._idle.setdefault(conn.key, []).append(conn)

    def _discard(self, conn: _Conn) -> None:
        conn.active = False
        conn._close()
        self._conns.discard(conn)

    def _forget(self, conn: _Conn) -> None:
        """connection_lost: drop it from the sets (an idle one the server closed too)."""
        self._conns.discard(conn)
        if not conn.active:
            if conn in (idle := self._idle.get(conn.key, [])):
                idle.remove(conn)
