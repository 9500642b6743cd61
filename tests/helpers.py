"""Helpers shared by the test modules: polling, the sim's counters, running redline itself, and
small servers on 127.0.0.1 for what the simulated server does not do.

The fixtures that start servers (and mark their tests `server`) are in tests/conftest.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import httpx
from aiohttp import web

ROOT = Path(__file__).resolve().parent.parent


# -- polling (every wait is bounded) --------------------------------------------------------
def wait_for(pred: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    """Poll a plain predicate until it holds or `timeout` s passed; its last answer. A server
    that does not answer (httpx.HTTPError) counts as "not yet"."""
    end = time.monotonic() + timeout
    while True:
        with contextlib.suppress(httpx.HTTPError):
            if pred():
                return True
        if time.monotonic() >= end:
            return False
        time.sleep(interval)


async def until(pred: Callable[[], Any], timeout: float, interval: float = 0.02) -> float | None:
    """Seconds (> 0, so the result is true) until `pred()` holds (plain or awaitable), or
    None after `timeout` s. A server that does not answer (httpx.HTTPError) counts as "not yet"."""
    t0 = time.monotonic()
    while True:
        with contextlib.suppress(httpx.HTTPError):
            ok = pred()
            if inspect.isawaitable(ok):
                ok = await ok
            if ok:
                return max(time.monotonic() - t0, 1e-9)
        if time.monotonic() - t0 >= timeout:
            return None
        await asyncio.sleep(interval)


# -- property tests (hypothesis) ---------------------------------------------------------------
def examples(n: int) -> int:
    """How many examples a fuzzer written for `n` runs: `n` under the `thorough` hypothesis
    profile, else (the `ci` profile, the default: tests/conftest.py) a quarter of it, at least
    hypothesis' own default of 100 and never more than `n`."""
    from hypothesis import settings

    current = getattr(settings, "get_current_profile_name", lambda: getattr(settings, "_current_profile", None))()
    if current == "thorough":
        return n
    return min(n, max(100, n // 4))


# -- the simulated server's exact counters (its /sim/state) ----------------------------------
def common_prefix_len(a: str, b: str) -> int:
    """How many leading characters two texts share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


#: sim settings that make a decode step short (TUI tests that want answers quickly)
FAST_SIM = ("--set", "decode_base_s=0.01", "--set", "decode_per_seq_s=0.0001")

#: the pp-capped profile as it was before its micro-batches followed SGLang (64 run there now):
#: one batch of at most 8 (60 ms a step) and a queue behind it; a --set after it wins
CAP8_SIM = ("--set", "pp_size=1", "--set", "max_running_requests=8", "--set", "decode_base_s=0.060",
            "--set", "decode_per_seq_s=0.0002")


async def settle(pilot, pred: Callable[[], bool], timeout: float = 15.0) -> bool:
    """Let a Textual app run (bounded) until `pred()` holds; returns whether it did. It returns
    as soon as it holds: the default bound (15 s) is for a loaded machine (CI runs the suite on
    every core, beside the sims), where an engine's next second or a screen's next refresh can
    come seconds late; a test that means a deadline passes its own `timeout`."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        await pilot.pause(0.1)
    return pred()


def sim_state(url: str) -> dict:
    r = httpx.get(url + "/sim/state", timeout=5.0)
    r.raise_for_status()
    return r.json()


async def sim_state_async(url: str) -> dict:
    async with httpx.AsyncClient() as c:
        r = await c.get(url + "/sim/state", timeout=5.0)
        r.raise_for_status()
        return r.json()


def sim_running(url: str) -> int:
    """Requests the sim is running now."""
    return sim_state(url)["running"]


async def sim_running_async(url: str) -> int:
    return (await sim_state_async(url))["running"]


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (at the time of asking)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- redline itself ---------------------------------------------------------------------------
def redline_command() -> list[str]:
    """The installed console script (what an operator runs), else its exact equivalent."""
    script = Path(sys.executable).with_name("redline")
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-m", "redline.tui"]


def main_in_process(argv: list[str]) -> int:
    """`redline ARGV` in this process; the exit status (argparse's errors included)."""
    from redline.tui import cli

    try:
        return cli.main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


def write_preset(tmp_path: Path, name: str, *, concurrency: list[int], input_len: int = 16,
                 output_len: int = 64, hold_s: float = 60, exact: bool = False, extra: str = "",
                 max_hold_s: float | None = None) -> Path:
    """A preset file holding each concurrency `hold_s` seconds (long by default: a run to stop).
    `exact`: each step lasts exactly hold_s, all of it measured (no warm-up, no waiting for a
    steady window): a short run that only has to send load. `max_hold_s`: the ramp's own
    (max_hold_s = hold_s: each step closes at hold_s, steady or not, with a warm-up-free
    measured window, for a run that reads what its steps sent, not a steady throughput)."""
    ramp = (f"durations_s = {[hold_s] * len(concurrency)}\n" if exact
            else f"warmup_s = 0\nhold_s = {hold_s}\nmin_requests = 1\n"
            + (f"max_hold_s = {max_hold_s}\n" if max_hold_s is not None else ""))
    f = tmp_path / f"{name}.toml"
    f.write_text(
        f"[workload]\ninput_len = {input_len}\noutput_len = {output_len}\n"
        f"[ramp]\nconcurrency = {list(concurrency)}\n{ramp}{extra}"
    )
    return f


def start_headless(url: str, preset: Path, out: Path, *args: str, env: dict | None = None) -> subprocess.Popen:
    """`redline run PRESET --headless --url URL --out OUT --no-nvml ARGS` in its own session
    (a signal to it reaches redline alone); text pipes."""
    return subprocess.Popen(
        [*redline_command(), "run", str(preset), "--headless", "--url", url, "--out", str(out), "--no-nvml", *args],
        cwd=ROOT, env={**os.environ, "CI": "true", **(env or {})}, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )


def finish(proc: subprocess.Popen, timeout: float) -> tuple[int | None, str, str]:
    """(exit status or None if it had to be killed, stdout, stderr)."""
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return None, out, err


# -- a fake NVML library ----------------------------------------------------------------------
class FakeNvml:
    """Implements the pynvml functions NvmlSource uses, for ``n`` GPUs."""

    NVML_TEMPERATURE_GPU = 0

    class NVMLError(Exception):
        pass

    class NVMLError_NotSupported(NVMLError):
        def __str__(self) -> str:
            return "Not Supported"

    class NVMLError_LibraryNotFound(NVMLError):
        def __str__(self) -> str:
            return "NVML Shared Library Not Found"

    def __init__(self, n: int = 4, *, init_error: Exception | None = None) -> None:
        self.n = n
        self.init_error = init_error
        self.inited = 0
        self.shutdowns = 0
        self.calls: dict[str, int] = {}
        self.unsupported = {(2, "energy"), (3, "temp")}

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise self.init_error
        self.inited += 1

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return self.n

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, h: int) -> bytes | str:
        return b"NVIDIA H100 PCIe" if h % 2 else "NVIDIA H100 PCIe"

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        self._count("power")
        return 300_000 + 1000 * h  # mW

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        return 350_000  # mW

    def nvmlDeviceGetUtilizationRates(self, h: int):
        return SimpleNamespace(gpu=40 + h, memory=20)

    def nvmlDeviceGetMemoryInfo(self, h: int):
        return SimpleNamespace(used=(1000 + h) * 1024 * 1024, total=81559 * 1024 * 1024, free=0)

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        assert sensor == self.NVML_TEMPERATURE_GPU
        self._count("temp")
        if (h, "temp") in self.unsupported:
            raise self.NVMLError_NotSupported()
        return 50 + h

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        self._count("energy")
        if (h, "energy") in self.unsupported:
            raise self.NVMLError_NotSupported()
        return 123_456_789 + h  # mJ


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


def steady_in(preset, seconds: int):
    """`preset` with its steps called steady on `seconds` whole measured seconds instead of
    STEADY_MIN_S (4): for a search on a sim whose decode steps are 10-25 ms, where 2 s hold
    80-200 of them (RampSpec.steady_min_s; the halves must still agree within 10 %)."""
    import dataclasses

    return dataclasses.replace(preset, ramp=dataclasses.replace(preset.ramp, steady_min_s=seconds))


def run_preset_headless(cfg, preset, on_line=None):
    """Start an Engine on `cfg`, run `preset` on it as `redline run --headless` does, stop it
    (the session log complete); returns the RunOutcome. `on_line`: each line the run prints."""
    import asyncio

    from redline.engine.core.engine import Engine
    from redline.engine.run.preset_runner import run_preset

    async def go():
        e = Engine(cfg)
        await e.start()
        try:
            return await run_preset(e, preset, **({"on_line": on_line} if on_line is not None else {}))
        finally:
            await e.stop("preset finished")

    return asyncio.run(go())
