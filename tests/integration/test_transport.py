"""The lean transport (engine/client/transport.py): against the sim, and against raw servers the test
starts on 127.0.0.1 for the framing cases the sim never produces."""

from __future__ import annotations

import asyncio
import shutil
import socket
import ssl
import struct
import subprocess
import threading
import time
from collections import Counter

import httpx
import pytest

import redline.engine.client.transport as transport_mod
from redline.engine.client import kstamp
from redline.engine.client.api_formats import CHAT, COMPLETIONS, GENERATE, PATHS, build_body
from redline.engine.client.http import DEFAULT_TRANSPORT, TRANSPORTS, make_client
from redline.engine.client.request import run_request
from redline.engine.client.transport import LeanTransport, ssl_context
from redline.engine.core.config import EngineConfig
from redline.engine.core.engine import Engine
from redline.engine.loop import WaitTimeout, _wait_set_310, wait_set, wait_within
from redline.engine.measure import records
from redline.engine.measure.hooks import RequestHooks
from redline.engine.measure.records import RequestRecord
from redline.engine.workload.prompts import WorkloadConfig

from helpers import CAP8_SIM, ThreadServer, sim_state_async as sim_state, until

MODEL = "redline-sim-70b"
PROMPT = "the quick brown fox jumps over the lazy dog " * 8
# A decode step of 5 ms instead of 40: what these tests check does not depend on the pace.
FAST = ("--set", "decode_base_s=0.005")


@pytest.fixture
def fast_sim(shared_sim):
    """The module's healthy sim at the fast pace; every test leaves it with nothing running."""
    return shared_sim("healthy", *FAST)


async def one(client: httpx.AsyncClient, url: str, api: str = CHAT, max_tokens: int = 24) -> RequestRecord:
    rec = RequestRecord(rid=1, phase="live", step=0, concurrency=1, t_send=0.0)
    await run_request(client, url + PATHS[api], api, build_body(api, MODEL, PROMPT, max_tokens), rec, RequestHooks())
    return rec


def lean(**kw) -> httpx.AsyncClient:
    return make_client(transport="lean", **kw)


def opened(client: httpx.AsyncClient) -> int:
    t = client._transport
    assert isinstance(t, LeanTransport)
    return t.connections_opened


# -- against the sim ------------------------------------------------------------------------
def test_lean_is_selectable():
    assert {"lean", "aiohttp", "httpx"} <= set(TRANSPORTS)
    assert DEFAULT_TRANSPORT == "lean"  # it passed the suite and beat aiohttp in benchmarks/client_cost.py
    with pytest.raises(ValueError, match="transport 'nope'"):
        make_client(transport="nope")


@pytest.mark.parametrize("api", [CHAT, COMPLETIONS, GENERATE])
async def test_streams_every_api(fast_sim, api):
    client = lean()
    try:
        rec = await one(client, fast_sim.url, api, 37)
    finally:
        await client.aclose()
    assert rec.status == records.OK, rec.error_text
    assert rec.http_status == 200
    assert rec.output_tokens == 37 and rec.usage_reported
    assert len(rec.chunk_times) == 37  # one token per chunk on the healthy profile
    assert 0 < rec.ttft < rec.e2e


async def test_plain_get_and_status_codes(fast_sim):
    client = lean()
    try:
        r = await client.get(fast_sim.url + "/get_server_info")
        assert r.status_code == 200 and r.json()["tp_size"] == 8
        assert r.reason_phrase == "OK" and r.http_version == "HTTP/1.1"
        r = await client.get(fast_sim.url + "/no/such/path")
        assert r.status_code == 404
        r = await client.post(fast_sim.url + PATHS[CHAT], json={"model": MODEL, "messages": "nope"})
        assert r.status_code == 400 and "messages" in r.text
        assert opened(client) == 1  # error bodies read to the end: the connection stays
    finally:
        await client.aclose()


@pytest.mark.parametrize("setting,status,kind", [("error_500_rate=1", 500, records.ERR_HTTP_500), ("error_429_rate=1", 429, records.ERR_HTTP_429)])
async def test_error_status_maps_to_its_kind(sim_factory, setting, status, kind):
    sim = sim_factory("healthy", extra_args=("--set", setting, *FAST))
    client = lean()
    try:
        rec = await one(client, sim.url)
        rec2 = await one(client, sim.url)
        assert opened(client) == 1
    finally:
        await client.aclose()
    for r in (rec, rec2):
        assert r.status == records.FAILED and r.http_status == status and r.error_kind == kind
        assert f"HTTP {status}" in r.error_text


async def test_keep_alive_reuse(fast_sim):
    client = lean()
    try:
        for _ in range(5):
            assert (await one(client, fast_sim.url, max_tokens=8)).status == records.OK
        assert opened(client) == 1
        recs = await asyncio.gather(*(one(client, fast_sim.url, max_tokens=8) for _ in range(8)))
        assert all(r.status == records.OK for r in recs)
        n = opened(client)
        assert n == 8  # the idle one is reused, 7 more opened for 8 at once
        recs = await asyncio.gather(*(one(client, fast_sim.url, max_tokens=8) for _ in range(8)))
        assert all(r.status == records.OK for r in recs) and opened(client) == n
    finally:
        await client.aclose()


async def test_cancel_closes_the_connection_and_the_sim_empties_within_1s(sim_factory):
    sim = sim_factory("healthy")
    client = lean()
    try:
        tasks = [asyncio.create_task(one(client, sim.url, max_tokens=2000)) for _ in range(20)]
        assert await until(lambda: _running(sim.url, lambda n: n == 20), 5.0) is not None
        t0 = time.monotonic()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        took = await until(lambda: _running(sim.url, lambda n: n == 0), 1.0)
        assert took is not None, await sim_state(sim.url)
        assert time.monotonic() - t0 < 1.0
        st = await sim_state(sim.url)
        assert st["aborted"] == 20 and st["queued"] == 0
        assert not client._transport._conns  # nothing left open on our side
        # and the client is still usable afterwards
        assert (await one(client, sim.url, max_tokens=4)).status == records.OK
    finally:
        await client.aclose()


async def _running(url: str, pred) -> bool:
    return pred((await sim_state(url))["running"])


async def test_engine_abort_on_lean_leaves_server_empty_within_1s(sim_factory):
    sim = sim_factory("pp-capped", extra_args=CAP8_SIM)  # 8 running + a queue
    e = Engine(EngineConfig(url=sim.url, concurrency=32, transport="lean", telemetry=False, calibrate=False))
    await e.start()
    try:
        ok = await until(lambda: _state_is(sim.url, lambda s: s["running"] == 8 and s["queued"] > 0), 5.0)
        assert ok is not None
        t0 = time.monotonic()
        e.pause()
        await e.abort()
        took = await until(lambda: _state_is(sim.url, lambda s: s["running"] == 0 and s["queued"] == 0), 1.0)
        assert took is not None, await sim_state(sim.url)
        assert time.monotonic() - t0 < 1.5
    finally:
        await e.stop()


async def _state_is(url: str, pred) -> bool:
    return pred(await sim_state(url))


async def test_disconnect_mid_stream_is_a_disconnect(sim_factory):
    sim = sim_factory("healthy", extra_args=("--set", "disconnect_rate=1", *FAST))
    client = lean()
    try:
        recs = [await one(client, sim.url, api, 40) for api in (CHAT, COMPLETIONS, GENERATE)]
        # at the httpx level: RemoteProtocolError (clean close) or ReadError (reset)
        with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
            async with client.stream("POST", sim.url + PATHS[CHAT], json=build_body(CHAT, MODEL, PROMPT, 40)) as resp:
                async for _ in resp.aiter_raw():
                    pass
    finally:
        await client.aclose()
    for r in recs:
        assert r.status == records.FAILED and r.error_kind == records.ERR_DISCONNECT, (r.error_kind, r.error_text)
        assert 0 < len(r.chunk_times) < 40


async def test_read_timeout_on_a_stalled_stream(sim_factory):
    sim = sim_factory("healthy", extra_args=("--set", "stall_after_tokens=5", *FAST))
    client = lean(request_timeout=0.5)
    try:
        t0 = time.monotonic()
        rec = await one(client, sim.url, max_tokens=40)
        took = time.monotonic() - t0
        with pytest.raises(httpx.ReadTimeout):
            async with client.stream("POST", sim.url + PATHS[CHAT], json=build_body(CHAT, MODEL, PROMPT, 40)) as resp:
                async for _ in resp.aiter_raw():
                    pass
    finally:
        await client.aclose()
    assert rec.status == records.FAILED and rec.error_kind == records.ERR_TIMEOUT, (rec.error_kind, rec.error_text)
    assert len(rec.chunk_times) == 5
    assert 0.5 <= took < 2.0
    st = await sim_state(sim.url)
    assert st["failures"].get("stall") == 2 and st["running"] == 0


async def test_connect_error():
    client = lean()
    try:
        rec = await one(client, "http://127.0.0.1:9")
        with pytest.raises(httpx.ConnectError):
            await client.get("http://127.0.0.1:9/health")
    finally:
        await client.aclose()
    assert rec.status == records.FAILED and rec.error_kind == records.ERR_CONNECT


async def test_a_cancel_while_the_connection_opens_is_never_lost():
    """A request cancelled at any moment around its connect (an abort, a signal while the engine
    starts) ends at once, cancelled. asyncio.wait_for (Python 3.10, 3.11) dropped about one such
    cancel in fifteen here, and the request then waited out its read timeout. Every connection
    that opened is closed."""
    with socket.create_server(("127.0.0.1", 0), backlog=512) as silent:  # accepts, never answers
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/x"
        client = lean()
        outcomes: Counter[str] = Counter()
        try:
            for i in range(300):
                task = asyncio.ensure_future(client.get(url, timeout=5))
                await asyncio.sleep(i * 1e-5)  # 0 to 3 ms: before, during and after the connect
                task.cancel()
                t0 = time.perf_counter()
                try:
                    await task
                    outcomes["returned"] += 1
                except asyncio.CancelledError:
                    outcomes["cancelled" if time.perf_counter() - t0 < 0.5 else "cancelled late"] += 1
                except Exception as exc:  # noqa: BLE001 - counted: the assert names it
                    outcomes[type(exc).__name__] += 1
            await asyncio.sleep(0.01)  # a connection that opened after its cancel: closed by now
            assert outcomes == {"cancelled": 300}
            assert not client._transport._conns
        finally:
            await client.aclose()


async def test_wait_within_passes_a_cancel_that_lands_with_the_result():
    loop = asyncio.get_running_loop()
    inner = loop.create_future()
    late: list[str] = []
    waiter = asyncio.ensure_future(wait_within(inner, 5, late=late.append))
    await asyncio.sleep(0)  # the waiter waits on inner
    inner.set_result("connection")
    waiter.cancel()  # in the same turn of the loop as the result
    with pytest.raises(asyncio.CancelledError):
        await waiter
    await asyncio.sleep(0)
    assert late == ["connection"]  # handed over to be closed, not dropped
    slow = loop.create_future()
    with pytest.raises(asyncio.TimeoutError):
        await wait_within(slow, 0.01)
    assert slow.cancelled()
    assert await wait_within(asyncio.sleep(0, "ok"), 1) == "ok"
    assert await wait_within(asyncio.sleep(0, "no limit"), None) == "no limit"


async def test_a_timeout_is_caught_as_asyncio_s_and_as_the_builtin_one():
    """Python 3.10 tells asyncio.TimeoutError from TimeoutError: the pools' `except
    TimeoutError` around wait_within let a worker that never answered crash the run there."""
    for caught in (TimeoutError, asyncio.TimeoutError):
        with pytest.raises(caught):
            await wait_within(asyncio.get_running_loop().create_future(), 0.01)
    assert issubclass(WaitTimeout, TimeoutError) and issubclass(WaitTimeout, asyncio.TimeoutError)


@pytest.mark.parametrize("wait", [wait_set, _wait_set_310], ids=["this-python", "python-3.10-road"])
async def test_wait_set_returns_when_set_or_at_its_limit(wait):
    """The open loop's and the worker pool's waits (asyncio.timeout is Python 3.11's: on 3.10
    the rate mode and every --workers run died at their first wait)."""
    ev = asyncio.Event()
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await wait(ev, 0.05)  # nobody sets it: back at the limit, no exception
    assert 0.04 <= loop.time() - t0 < 2.0
    await wait(ev, -1.0)  # a due time already past: back at once
    loop.call_later(0.02, ev.set)
    t0 = loop.time()
    await wait(ev, None)  # no limit: back when set
    assert ev.is_set() and loop.time() - t0 < 2.0
    await wait(ev, 30.0)  # set already: back at once
    assert loop.time() - t0 < 2.0


def _python_310() -> str | None:
    """A Python 3.10: pyenv's own (its shim on PATH may name none), else one on PATH."""
    import glob
    import os

    found = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.10*/bin/python3.10")))
    for py in [*found, shutil.which("python3.10")]:
        if py and subprocess.run([py, "-c", ""], capture_output=True, timeout=30).returncode == 0:
            return py
    return None


def test_the_waits_work_on_python_3_10_where_there_is_one():
    """engine/loop.py alone (it imports nothing of the engine) under Python 3.10, where the
    machine has one: wait_set at its limit and when set, and wait_within's timeout caught as
    the builtin TimeoutError."""
    import redline.engine.loop as loop_module

    py = _python_310()
    if py is None:
        pytest.skip("no Python 3.10 here")
    code = (
        "import asyncio, importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('loop', {loop_module.__file__!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "async def main():\n"
        "    ev = asyncio.Event()\n"
        "    await m.wait_set(ev, 0.02)\n"
        "    asyncio.get_running_loop().call_later(0.01, ev.set)\n"
        "    await m.wait_set(ev, None)\n"
        "    try:\n"
        "        await m.wait_within(asyncio.get_running_loop().create_future(), 0.01)\n"
        "    except TimeoutError:\n"
        "        print('caught', sys.version_info[:2])\n"
        "asyncio.run(main())\n"
    )
    r = subprocess.run([py, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "caught (3, 10)"


@pytest.mark.parametrize("api", [CHAT, COMPLETIONS, GENERATE])
async def test_same_tokens_through_every_transport(shared_sim, api):
    sim = shared_sim("healthy", "--set", "tokens_per_chunk=3", *FAST)
    got = {}
    for name in ("lean", "aiohttp", "httpx"):
        client = make_client(transport=name)
        try:
            got[name] = await one(client, sim.url, api, 50)
        finally:
            await client.aclose()
    figures = {n: (r.status, r.output_tokens, r.input_tokens, len(r.chunk_times), sum(r.chunk_tokens)) for n, r in got.items()}
    assert len(set(figures.values())) == 1, figures
    assert figures["lean"][0] == records.OK and figures["lean"][1] == 50 and figures["lean"][3] == 17  # ceil(50/3) chunks


def test_streams_and_cancels_on_uvloop(fast_sim):
    """The engine's own loop is uvloop (engine/host.py): same behaviour there."""
    uvloop = pytest.importorskip("uvloop")

    async def main() -> None:
        client = lean()
        try:
            rec = await one(client, fast_sim.url, GENERATE, 30)
            assert rec.status == records.OK and rec.output_tokens == 30
            tasks = [asyncio.create_task(one(client, fast_sim.url, max_tokens=2000)) for _ in range(10)]
            assert await until(lambda: _running(fast_sim.url, lambda n: n == 10), 5.0) is not None
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            assert await until(lambda: _running(fast_sim.url, lambda n: n == 0), 1.0) is not None
        finally:
            await client.aclose()

    loop = uvloop.new_event_loop()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()


# -- against raw servers: framing the sim does not produce -----------------------------------
class Raw:
    """A one-shot-per-connection HTTP server on 127.0.0.1 driven by a script per request."""

    def __init__(self, script) -> None:
        self.script = script
        self.server: asyncio.base_events.Server | None = None
        self.connections = 0
        self.requests: list[bytes] = []

    async def __aenter__(self) -> "Raw":
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc) -> None:
        self.server.close()
        await self.server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                body = await reader.readexactly(length) if length else b""
                self.requests.append(head + body)
                if not await self.script(writer, head, body):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.mark.server
async def test_chunked_body_and_one_item_per_read():
    async def script(w, head, body):
        w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        w.write(b"6\r\nhello \r\n")
        await w.drain()
        await asyncio.sleep(0.05)
        w.write(b"5\r\nworld\r\n1\r\n!\r\n")  # two chunks in one write: one item
        await w.drain()
        await asyncio.sleep(0.05)
        w.write(b"0\r\n\r\n")
        await w.drain()
        return True

    async with Raw(script) as srv:
        client = lean()
        try:
            for _ in range(2):
                async with client.stream("GET", srv.url + "/s") as resp:
                    parts = [p async for p in resp.aiter_raw()]
                assert parts == [b"hello ", b"world!"]
            assert srv.connections == 1 and opened(client) == 1
        finally:
            await client.aclose()


@pytest.mark.server
async def test_content_length_and_connection_close():
    async def script(w, head, body):
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\nConnection: close\r\n\r\n" + b"x" * len(body) + b"payload"[len(body):])
        await w.drain()
        return False

    async with Raw(script) as srv:
        client = lean()
        try:
            for _ in range(3):
                r = await client.post(srv.url + "/p", content=b"ab")
                assert r.status_code == 200 and r.content == b"xxyload"
            assert srv.connections == 3  # connection: close is honoured, never reused
            assert srv.requests[0].endswith(b"\r\n\r\nab") and b"Content-Length: 2" in srv.requests[0]
        finally:
            await client.aclose()


@pytest.mark.server
async def test_close_delimited_body_ends_at_eof():
    async def script(w, head, body):
        w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end")
        await w.drain()
        return False

    async with Raw(script) as srv:
        client = lean()
        try:
            r = await client.get(srv.url + "/")
            assert r.text == "until the end"
        finally:
            await client.aclose()


@pytest.mark.server
async def test_server_closing_mid_body_is_a_protocol_error():
    async def chunked(w, head, body):
        w.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
        await w.drain()
        return False

    async def short(w, head, body):
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly a bit")
        await w.drain()
        return False

    async def nothing(w, head, body):
        return False

    async def garbage(w, head, body):
        w.write(b"SPDY/9 nonsense\r\n\r\n")
        await w.drain()
        return False

    for script, err in ((chunked, httpx.RemoteProtocolError), (short, httpx.RemoteProtocolError), (nothing, httpx.RemoteProtocolError), (garbage, httpx.RemoteProtocolError)):
        async with Raw(script) as srv:
            client = lean()
            try:
                with pytest.raises(err):
                    await client.get(srv.url + "/")
            finally:
                await client.aclose()


@pytest.mark.server
async def test_streamed_request_body_is_chunked():
    async def script(w, head, body):
        w.write(b"HTTP/1.1 204 No Content\r\n\r\n")
        await w.drain()
        return False

    received = []

    async def handle(reader, writer):
        received.append(await reader.readuntil(b"0\r\n\r\n"))
        await script(writer, b"", b"")
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"

    async def gen():
        yield b"abc"
        yield b"defgh"

    client = lean()
    try:
        r = await client.post(url + "/u", content=gen())
        assert r.status_code == 204
    finally:
        await client.aclose()
        server.close()
        await server.wait_closed()
    assert b"Transfer-Encoding: chunked" in received[0]
    assert received[0].endswith(b"\r\n\r\n3\r\nabc\r\n5\r\ndefgh\r\n0\r\n\r\n")


@pytest.mark.server
async def test_stale_idle_connection_is_not_reused_for_a_post():
    """The server closes idle keep-alive connections; the pool notices before reusing one."""

    async def script(w, head, body):
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await w.drain()
        return False  # closes the connection without saying so in the headers

    async with Raw(script) as srv:
        client = lean()
        try:
            assert (await client.post(srv.url + "/", content=b"1")).text == "ok"
            await asyncio.sleep(0.1)  # the close reaches us
            assert (await client.post(srv.url + "/", content=b"2")).text == "ok"
            assert srv.connections == 2
        finally:
            await client.aclose()


async def test_transport_close_ends_open_streams(fast_sim):
    client = lean()
    got = []

    async def reader():
        async with client.stream("POST", fast_sim.url + PATHS[CHAT], json=build_body(CHAT, MODEL, PROMPT, 5000)) as resp:
            async for part in resp.aiter_raw():
                got.append(part)

    task = asyncio.create_task(reader())
    assert await until(lambda: len(got) > 3, 5.0) is not None
    await client.aclose()
    with pytest.raises(httpx.HTTPError):
        await asyncio.wait_for(task, 2.0)
    assert await until(lambda: _running(fast_sim.url, lambda n: n == 0), 1.0) is not None


def test_ssl_context_verifies_by_default():
    ctx = ssl_context(True)
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    off = ssl_context(False)
    assert off.verify_mode == ssl.CERT_NONE and not off.check_hostname
    mine = ssl.create_default_context()
    assert ssl_context(mine) is mine


def test_engine_config_accepts_lean():
    cfg = EngineConfig(url="http://127.0.0.1:1", transport="lean", workload=WorkloadConfig())
    assert cfg.transport == "lean"


@pytest.mark.server
@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command to make a test certificate")
async def test_tls_verifies_by_default_and_insecure_skips(tmp_path):
    key, cert = tmp_path / "k.pem", tmp_path / "c.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(str(cert), str(key))

    async def handle(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n9\r\ndata: x\n\n\r\n0\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_ctx)
    url = f"https://127.0.0.1:{server.sockets[0].getsockname()[1]}/"
    try:
        client = lean()  # verify=True: a self-signed certificate is refused, with the cause chained
        try:
            with pytest.raises(httpx.ConnectError) as info:
                await client.get(url)
            assert isinstance(info.value.__cause__, ssl.SSLCertVerificationError)
            rec = await one(client, url.rstrip("/"))
            assert rec.error_kind == records.ERR_CONNECT and "verif" in rec.error_text
        finally:
            await client.aclose()
        client = lean(verify=False)
        try:
            r = await client.get(url)
            assert r.status_code == 200 and r.content == b"data: x\n\n"
        finally:
            await client.aclose()
        client = httpx.AsyncClient(transport=LeanTransport(verify=ssl.create_default_context(cafile=str(cert))))
        try:
            assert (await client.get(url)).status_code == 200
        finally:
            await client.aclose()
    finally:
        server.close()
        await server.wait_closed()


@pytest.mark.server
async def test_lean_asks_for_an_uncompressed_stream():
    async def script(w, head, body):
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await w.drain()
        return True

    async with Raw(script) as srv:
        client = lean(api_key="sk-test")
        try:
            assert (await client.get(srv.url + "/")).text == "ok"
        finally:
            await client.aclose()
    head = srv.requests[0].lower()
    assert b"accept-encoding: identity\r\n" in head
    assert b"authorization: bearer sk-test\r\n" in head


@pytest.mark.server
async def test_slow_consumer_pauses_reading_and_loses_nothing():
    size = 4 * 1024 * 1024

    async def script(w, head, body):
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
        for i in range(size // 65536):
            w.write(bytes([i % 251]) * 65536)
        await w.drain()
        return True

    async with Raw(script) as srv:
        client = lean()
        try:
            got = bytearray()
            async with client.stream("GET", srv.url + "/big") as resp:
                async for part in resp.aiter_raw():
                    got += part
                    await asyncio.sleep(0.02)
            assert len(got) == size
            assert all(got[i * 65536] == i % 251 for i in range(size // 65536))
            assert client._transport.read_pauses > 0
            assert (await client.get(srv.url + "/again")).status_code == 200  # reused after a pause
            assert srv.connections == 1
        finally:
            await client.aclose()


@pytest.mark.server
@pytest.mark.parametrize("headers", [
    {"Authorization": "Bearer sk-x\r\nX-Injected: 1"},
    {"X-Thing": "a\nb"},
    {"X-Thing": "a\x00b"},
    {"Bad Name": "v"},
    {"Bad:Name": "v"},
])
async def test_refuses_header_injection_before_writing(headers):
    async def script(w, head, body):
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await w.drain()
        return True

    async with Raw(script) as srv:
        client = lean()
        try:
            with pytest.raises(httpx.LocalProtocolError) as info:
                await client.get(srv.url + "/", headers=headers)
            assert "sk-x" not in str(info.value)  # the refused value is never echoed
            assert (await client.get(srv.url + "/", headers={"X-Fine": "tab\tand spaces ok"})).text == "ok"
        finally:
            await client.aclose()
    assert len(srv.requests) == 1 and b"X-Injected" not in srv.requests[0]


# -- a keep-alive connection the server closed while idle (a threaded server: it closes while
# our loop is blocked) -----------------------------------------------------------------------
OK_2 = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"  # keep-alive: nothing says close


def _closes_idle(close_now: threading.Event, reset: bool):
    """Answers, keeps the connection open (the client pools it), then closes it when told:
    a FIN, or with reset=True an RST (SO_LINGER 0), as a server's idle timeout does."""

    def handler(c, head, body, i):
        c.sendall(OK_2)
        if c is not None and i == 0:
            close_now.wait(5)
            if reset:
                c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return False
        return True

    return handler


@pytest.mark.server
async def test_plain_http_reads_kernel_stamped_and_a_big_body_written_in_full():
    """http:// on Linux goes through engine/client/kstamp.py's own socket transport: an 8 MB body (far
    over the socket buffer: the write waits for the socket, the request for the drain) arrives
    whole, the answer is read, and the connection is reused."""
    size = 8 * 1024 * 1024
    payload = bytes(range(256)) * (size // 256)

    def handler(c, head, body, i):
        ans = b"%d %d" % (len(body), sum(body[::4096]))
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(ans), ans))
        return True

    with ThreadServer(handler) as srv:
        client = lean()
        try:
            r = await client.post(srv.url + "/up", content=payload)
            assert r.text == "%d %d" % (size, sum(payload[::4096]))
            conns = list(client._transport._conns)
            if kstamp.ENABLED:
                assert [type(c.transport) for c in conns] == [kstamp.RawTransport]
            assert (await client.get(srv.url + "/again")).status_code == 200
            assert opened(client) == 1
        finally:
            await client.aclose()


def _count_dropped(monkeypatch, force: bool | None = None) -> list[bool]:
    seen: list[bool] = []
    real = transport_mod._dropped

    def spy(t):
        r = real(t) if force is None else force
        seen.append(r)
        return r

    monkeypatch.setattr(transport_mod, "_dropped", spy)
    return seen


@pytest.mark.server
async def test_idle_connection_closed_by_the_server_is_not_reused_for_a_post(monkeypatch):
    """The FIN has reached the socket but not the loop: the poll before reuse sees it."""
    close_now = threading.Event()
    seen = _count_dropped(monkeypatch)
    with ThreadServer(_closes_idle(close_now, reset=False)) as srv:
        client = lean()
        try:
            assert (await client.post(srv.url + "/", content=b"1")).text == "ok"
            close_now.set()
            time.sleep(0.05)  # blocks the loop: the close arrives unseen by it
            assert (await client.post(srv.url + "/", content=b"2")).text == "ok"
            assert opened(client) == 2
        finally:
            await client.aclose()
    assert seen == [True]  # the stale one was found by the poll, not by the loop
    assert srv.connections == 2 and [b for _, _, b in srv.requests] == [b"1", b"2"]


@pytest.mark.server
async def test_post_retried_once_when_no_byte_of_it_was_written(monkeypatch):
    """A reset connection handed out anyway (the poll off): the first write fails, nothing
    reached the server, so the POST goes again on a new connection, once."""
    close_now = threading.Event()
    seen = _count_dropped(monkeypatch, force=False)
    with ThreadServer(_closes_idle(close_now, reset=True)) as srv:
        client = lean()
        try:
            assert (await client.post(srv.url + "/", content=b"1")).text == "ok"
            close_now.set()
            time.sleep(0.05)  # the RST arrives unseen by the loop
            r = await client.post(srv.url + "/", content=b"2")
            assert r.text == "ok"
            assert opened(client) == 2
        finally:
            await client.aclose()
    assert seen == [False]
    assert srv.connections == 2 and [b for _, _, b in srv.requests] == [b"1", b"2"]


@pytest.mark.server
async def test_post_not_retried_once_written():
    """The request reached the server, which closed without answering: a POST is not sent
    again (the server may have acted on it); the error is the caller's."""

    def handler(c, head, body, i):
        if i == 0:
            c.sendall(OK_2)
            return True
        return False  # read the second request, then close without a word

    with ThreadServer(handler) as srv:
        client = lean()
        try:
            assert (await client.post(srv.url + "/", content=b"1")).text == "ok"
            with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
                await client.post(srv.url + "/", content=b"2")
        finally:
            await client.aclose()
    assert srv.connections == 1 and [b for _, _, b in srv.requests] == [b"1", b"2"]


# -- connections opened before a rise's requests (preopen) ---------------------------------------
@pytest.mark.server
# timing: a send wait is stamped by the loop once the write returned, TTFT's first read by the
# kernel; a loop that lags beside the suite stamps the wait past a fast sim's first token (CI once)
@pytest.mark.timing
async def test_preopen_opens_what_a_rise_needs_and_its_requests_connect_no_more(fast_sim):
    """Six connections opened ahead (the server accepts six), then six requests at once: none
    connects (the transport opens no seventh), so none of their send waits holds a connect; a
    second preopen finds them idle again and opens nothing; a closed port opens nothing and the
    request that needs it then fails by itself, as before."""
    from redline.engine.client.http import preopen

    client = lean()
    try:
        assert await preopen(client, fast_sim.url, 6) == 6 and opened(client) == 6
        recs = await asyncio.gather(*(one(client, fast_sim.url) for _ in range(6)))
        assert [r.status for r in recs] == [records.OK] * 6
        assert opened(client) == 6  # every request took a connection opened ahead
        assert all(r.send_wait is not None and 0 <= r.send_wait < r.ttft for r in recs)
        assert await preopen(client, fast_sim.url, 6) == 0  # back in the pool, idle
        assert await preopen(client, "http://127.0.0.1:9", 2) == 0
        rec = await one(client, "http://127.0.0.1:9")
        assert rec.status == records.FAILED and rec.error_kind == records.ERR_CONNECT
    finally:
        await client.aclose()
    other = make_client(transport="httpx")
    try:
        assert await preopen(other, fast_sim.url, 4) == 0  # another transport opens its own, as requests need them
    finally:
        await other.aclose()


@pytest.mark.server
async def test_a_preopen_cancelled_leaves_no_connection_behind_and_keeps_those_it_opened():
    """A preopen cancelled (the load stopped while it connects) leaves nothing half-open: what it
    had opened is idle in the pool (closed with the client), the rest never opens. The server
    never accepts, and its queue holds one: the kernel answers no further SYN, those connects hang."""
    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(0)
    url = f"http://127.0.0.1:{lsock.getsockname()[1]}"
    client = lean()
    t = client._transport
    try:
        task = asyncio.ensure_future(t.preopen(url, 4, 5.0))
        await asyncio.sleep(0.3)
        assert not task.done()  # some connects hang
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.05)  # the cancelled connects unwind
        idle = {c for v in t._idle.values() for c in v}
        assert 1 <= len(idle) == t.connections_opened < 4 and set(t._conns) == idle
    finally:
        await client.aclose()
        lsock.close()
    assert not t._conns
