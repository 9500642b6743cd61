"""Small servers on 127.0.0.1 for what the simulated server does not do: an aiohttp app on its own thread (ThreadedServer, MiniServer), HTTP/1.1 one thread a connection (ThreadServer), a raw asyncio TCP server."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
from typing import Callable

from aiohttp import web


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (at the time of asking)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- small servers on 127.0.0.1 ---------------------------------------------------------------
class ThreadedServer:
    """An aiohttp app on 127.0.0.1 (an ephemeral port), on its own thread and loop: a small
    independent server for a test. Subclasses build the app (`app()`); `with` starts and stops it."""

    def __init__(self, *, ssl_context=None) -> None:
        self._ssl = ssl_context
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)
        self.port = 0

    @property
    def url(self) -> str:
        return f"{'https' if self._ssl else 'http'}://127.0.0.1:{self.port}"

    def app(self) -> web.Application:
        raise NotImplementedError

    def _main(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        app = self.app()

        async def start() -> None:
            self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
            await self._runner.setup()
            site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self._ssl)
            await site.start()
            self.port = self._runner.addresses[0][1]

        loop.run_until_complete(start())
        self._ready.set()
        loop.run_forever()
        loop.run_until_complete(self._runner.cleanup())
        loop.close()

    def __enter__(self):
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


class MiniServer(ThreadedServer):
    """A tiny OpenAI-compatible server on 127.0.0.1 (own thread and loop) for what the sim
    does not do: it records every request's headers, can echo the bearer token in errors,
    and can play dead (accept the connection, then hang up without a response)."""

    def __init__(self, *, ssl_context=None, chunks: int = 4, echo_key_every: int = 0, delay_s: float = 0.0) -> None:
        self.seen: list[tuple[str, str | None]] = []  # (path, Authorization header)
        self.injected = 0  # requests that carried an X-Injected header (header injection)
        self.dead = False
        self.chunks = chunks
        self.echo_key_every = echo_key_every
        self.delay_s = delay_s
        self.generations = 0
        super().__init__(ssl_context=ssl_context)

    def auth_seen(self, path_prefix: str = "") -> list[str | None]:
        return [a for p, a in list(self.seen) if p.startswith(path_prefix)]

    # -- handlers ---------------------------------------------------------------------
    async def _hang_up(self, request: web.Request) -> web.StreamResponse:
        if request.transport is not None:
            request.transport.close()
        return web.Response()

    @web.middleware
    async def _record(self, request: web.Request, handler):
        self.seen.append((request.path, request.headers.get("Authorization")))
        self.injected += "X-Injected" in request.headers
        if self.dead:
            return await self._hang_up(request)
        return await handler(request)

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "mini-model", "object": "model", "owned_by": "mini"}]})

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.generations += 1
        auth = request.headers.get("Authorization") or ""
        if self.echo_key_every and self.generations % self.echo_key_every == 0:
            # as some servers do: the key, verbatim, in the error message
            return web.json_response({"error": {"message": f"Incorrect API key provided: {auth[7:]}", "code": 401}}, status=401)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        n = min(int(body.get("max_tokens") or self.chunks), self.chunks)

        async def send(obj) -> None:
            await resp.write(b"data: " + json.dumps(obj).encode() + b"\n\n")

        await send({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
        for i in range(n):
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            await send({"choices": [{"index": 0, "delta": {"content": f" w{i}"}}]})
        if self.echo_key_every and self.generations % self.echo_key_every == 1 and self.generations > 1:
            await send({"error": {"message": f"in-stream failure for key {auth[7:]}"}})
        await send({"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": n}})
        await resp.write(b"data: [DONE]\n\n")
        return resp

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._record])
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_post("/v1/chat/completions", self._chat)
        return app


# handler(sock, head, body, index) -> keep the connection open for another request
ThreadHandler = Callable[[socket.socket, bytes, bytes, int], bool]


class ThreadServer:
    """HTTP/1.1 on 127.0.0.1, one thread per connection; `handler(sock, head, body, index)`
    answers request number `index` (0-based, over all connections) and returns whether the
    connection stays open for another request."""

    def __init__(self, handler: ThreadHandler) -> None:
        self.handler = handler
        self.connections = 0
        self.requests: list[tuple[int, bytes, bytes]] = []  # (connection number, head, body)
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        self._stop = False
        self._lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._lsock.bind(("127.0.0.1", 0))
        self._lsock.listen(64)
        self._lsock.settimeout(0.05)
        self.url = f"http://127.0.0.1:{self._lsock.getsockname()[1]}"
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def __enter__(self) -> "ThreadServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._stop = True
        with self._lock:
            socks = list(self._socks)
        for c in socks:  # wake threads blocked in recv on a connection the client keeps open
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for t in self._threads:
            t.join(2.0)
        self._lsock.close()

    def _accept(self) -> None:
        while not self._stop:
            try:
                c, _ = self._lsock.accept()
            except (socket.timeout, OSError):
                continue
            with self._lock:
                self.connections += 1
                n = self.connections
                self._socks.append(c)
            c.settimeout(5.0)
            t = threading.Thread(target=self._serve, args=(c, n), daemon=True)
            self._threads.append(t)
            t.start()

    def _serve(self, c: socket.socket, conn_no: int) -> None:
        buf = b""
        try:
            while not self._stop:
                while b"\r\n\r\n" not in buf:
                    d = c.recv(65536)
                    if not d:
                        return
                    buf += d
                head, _, buf = buf.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                while len(buf) < length:
                    d = c.recv(65536)
                    if not d:
                        return
                    buf += d
                body, buf = buf[:length], buf[length:]
                with self._lock:
                    self.requests.append((conn_no, head, body))
                    index = len(self.requests) - 1
                if not self.handler(c, head, body, index):
                    return
        except OSError:
            pass
        finally:
            try:
                c.close()
            except OSError:
                pass


@contextlib.contextmanager
def raw_server(handler):
    """An asyncio TCP server on 127.0.0.1 in its own thread: handler(reader, writer). Yields its port."""
    ready, box = threading.Event(), {}

    def main() -> None:
        loop = asyncio.new_event_loop()
        srv = loop.run_until_complete(asyncio.start_server(handler, "127.0.0.1", 0))
        box.update(loop=loop, port=srv.sockets[0].getsockname()[1])
        ready.set()
        loop.run_forever()
        srv.close()
        loop.close()

    t = threading.Thread(target=main, daemon=True)
    t.start()
    assert ready.wait(10)
    try:
        yield box["port"]
    finally:
        box["loop"].call_soon_threadsafe(box["loop"].stop)
        t.join(5)
