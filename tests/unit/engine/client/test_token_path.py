"""The per-token path (issue 26): run_request on the lean transport reads through _Body.pump.

What each test proves, against what the server really sent:
- a stream whose bytes keep coming, each gap well under the read timeout, is not timed out
  although the request waits once for the whole body (the timeout counts from the last read);
  a stream that stalls mid-way is (ERR_TIMEOUT), with the tokens it got kept;
- the pump gives run_request exactly what the iterator gives: same chunks, tokens, usage
  and one stamp per read, each read once (the same stream through both paths);
- a listener that raises fails the request (never raises out of run_request) and the
  connection is closed, not put back in the pool;
- an event past the SSE size limit stops reading: malformed, connection closed.

Servers are threads on 127.0.0.1 (tests/helpers/servers.py ThreadServer).
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from redline.engine.client import sse as sse_mod
from redline.engine.client.api_formats import CHAT, PATHS
from redline.engine.client.http import make_client
from redline.engine.client.request import run_request
from redline.engine.client.transport import BODY_EXTENSION
from redline.engine.measure import records
from redline.engine.measure.hooks import RequestHooks
from redline.engine.measure.records import RequestRecord

from helpers import ThreadServer

SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
END = b"0\r\n\r\n"


def frame(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def event(k: int, usage: int | None = None) -> bytes:
    obj = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
           "choices": [{"index": 0, "delta": {"content": f"t{k}"}, "logprobs": None, "finish_reason": None}]}
    if usage is not None:
        obj["usage"] = {"prompt_tokens": 5, "completion_tokens": usage, "total_tokens": 5 + usage}
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def new_rec() -> RequestRecord:
    return RequestRecord(rid=1, phase="live", step=0, concurrency=1, t_send=0.0)


def _without_body_extension(client, monkeypatch) -> None:
    """The client's responses without their body extension: run_request then iterates
    aiter_raw, the path every transport but the lean one takes."""
    real = client.stream

    def stream(*a, **kw):
        cm = real(*a, **kw)
        enter = cm.__aenter__

        async def aenter():
            resp = await enter()
            resp.extensions = {k: v for k, v in resp.extensions.items() if k != BODY_EXTENSION}
            return resp

        cm.__aenter__ = aenter
        return cm

    monkeypatch.setattr(client, "stream", stream)


def streaming_handler(n: int, gap_s: float, sent: list[float], stall_after: int | None = None):
    def handler(c, head, body, i):
        c.sendall(SSE_HEAD)
        for k in range(n):
            if stall_after is not None and k == stall_after:
                time.sleep(3)  # past the client's read timeout
                return False
            sent.append(time.perf_counter())
            c.sendall(frame(event(k, usage=k + 1)))
            time.sleep(gap_s)
        c.sendall(frame(b"data: [DONE]\n\n") + END)
        return True

    return handler


@pytest.mark.timing  # 0.1 s gaps, 0.5 s timeout
async def test_bytes_that_keep_coming_are_not_a_read_timeout():
    sent: list[float] = []
    with ThreadServer(streaming_handler(12, 0.1, sent)) as srv:  # 1.2 s in all, 0.1 s gaps
        client = make_client(transport="lean", request_timeout=0.5)
        try:
            rec = new_rec()
            await run_request(client, srv.url + PATHS[CHAT], CHAT, {}, rec, RequestHooks())
        finally:
            await client.aclose()
    assert rec.status == records.OK, rec.error_text
    assert rec.output_tokens == 12 and len(rec.chunk_times) == 12
    assert rec.e2e is not None and rec.e2e > 1.0  # longer than two timeouts: one wait, many reads
    assert all(s <= t for t, s in zip(rec.chunk_times, sent, strict=False))  # each chunk stamped at a read after its send


@pytest.mark.timing  # >= 0.39 s after the last send
async def test_a_stall_mid_stream_is_a_read_timeout_and_keeps_what_arrived():
    sent: list[float] = []
    credits: list[tuple[float, int]] = []
    with ThreadServer(streaming_handler(10, 0.02, sent, stall_after=4)) as srv:
        client = make_client(transport="lean", request_timeout=0.4)
        try:
            rec = new_rec()
            t0 = time.perf_counter()
            await run_request(client, srv.url + PATHS[CHAT], CHAT, {}, rec, RequestHooks(tokens=lambda t, n: credits.append((t, n))))
            waited = time.perf_counter() - t0
        finally:
            await client.aclose()
    assert rec.status == records.FAILED and rec.error_kind == records.ERR_TIMEOUT, (rec.status, rec.error_text)
    assert len(rec.chunk_times) == 4 and rec.output_tokens == 4 and sum(n for _, n in credits) == 4
    assert 0.39 <= waited - (sent[-1] - t0) < 2.5  # the timeout counted from the last read


async def test_pump_and_iterator_give_the_same_record(monkeypatch):
    def handler(c, head, body, i):
        c.sendall(SSE_HEAD)
        for k in range(6):
            data = event(k, usage=k + 1)
            if k == 2:  # one event cut across two reads, then two events in one read
                c.sendall(frame(data[:20]))
                time.sleep(0.02)
                c.sendall(frame(data[20:] + event(3, usage=4)))
                time.sleep(0.02)
                continue
            if k == 3:
                continue
            c.sendall(frame(data))
            time.sleep(0.02)
        c.sendall(frame(b"data: [DONE]\n\n") + END)
        return True

    async def one(pump: bool) -> tuple[RequestRecord, list[tuple[float, int]]]:
        credits: list[tuple[float, int]] = []
        rec = new_rec()
        client = make_client(transport="lean")
        if not pump:  # the response without its body extension: run_request iterates aiter_raw
            _without_body_extension(client, monkeypatch)
        try:
            await run_request(client, srv.url + PATHS[CHAT], CHAT, {}, rec, RequestHooks(tokens=lambda t, n: credits.append((t, n))))
        finally:
            await client.aclose()
        return rec, credits

    with ThreadServer(handler) as srv:
        a, ca = await one(True)
        b, cb = await one(False)
    for rec, credits in ((a, ca), (b, cb)):
        assert rec.status == records.OK, rec.error_text
        assert rec.output_tokens == 6 and rec.input_tokens == 5 and rec.usage_reported
        assert list(rec.chunk_tokens) == [1, 1, 1, 1, 1, 1]
        # events 2 and 3 completed by one read: one stamp; one credit per read, its events' sum
        ts = list(rec.chunk_times)
        assert ts[2] == ts[3] and ts == sorted(ts)
        assert [t for t, _ in credits] == sorted(set(ts))
        assert [n for _, n in credits] == [ts.count(t) for t, _ in credits]


async def test_a_listener_that_raises_fails_the_request_and_closes_the_connection():
    def handler(c, head, body, i):
        c.sendall(SSE_HEAD + frame(event(0, usage=1)))
        time.sleep(0.05)
        c.sendall(frame(event(1, usage=2)) + frame(b"data: [DONE]\n\n") + END)
        return True

    def on_tokens(t: float, n: int) -> None:
        raise RuntimeError("a listener's bug")

    with ThreadServer(handler) as srv:
        client = make_client(transport="lean")
        try:
            rec = new_rec()
            out = await run_request(client, srv.url + PATHS[CHAT], CHAT, {}, rec, RequestHooks(tokens=on_tokens))
            ok = new_rec()
            await run_request(client, srv.url + PATHS[CHAT], CHAT, {}, ok, RequestHooks())
        finally:
            await client.aclose()
    assert out is rec and rec.status == records.FAILED and rec.error_kind == records.ERR_OTHER
    assert "a listener's bug" in rec.error_text
    assert ok.status == records.OK and ok.output_tokens == 2
    assert srv.connections == 2  # the failed request's connection was not reused


async def test_an_event_past_the_size_limit_stops_reading(monkeypatch):
    monkeypatch.setattr(sse_mod, "MAX_EVENT_BYTES", 1000)

    def handler(c, head, body, i):
        c.sendall(SSE_HEAD + frame(event(0, usage=1)))
        for _ in range(20):
            try:
                c.sendall(frame(b"data: " + b"x" * 200))  # an event that never ends
            except OSError:
                return False
            time.sleep(0.01)
        return False

    with ThreadServer(handler) as srv:
        client = make_client(transport="lean")
        try:
            rec = new_rec()
            await asyncio.wait_for(run_request(client, srv.url + PATHS[CHAT], CHAT, {}, rec, RequestHooks()), 5)
        finally:
            await client.aclose()
    assert rec.status == records.FAILED and rec.error_kind == records.ERR_MALFORMED, rec.error_text
    assert len(rec.chunk_times) == 1 and rec.output_tokens == 1


# -- one delivery callback per loop iteration (LeanTransport._drain) ------------------------
async def test_reads_of_many_connections_in_one_loop_iteration_go_in_one_callback(monkeypatch):
    """Eight streams whose next event lands while the loop is busy: one _drain delivers all of
    them (not eight callbacks), each read keeps its own stamp, and every record is the one
    the iterator path (one item per read, no pump) gives for the same bytes."""
    import threading

    from redline.engine.client import transport as transport_mod

    n = 8
    go = threading.Event()

    def handler(c, head, body, i):
        c.sendall(SSE_HEAD + frame(event(0, usage=1)))
        go.wait(5)
        c.sendall(frame(event(1, usage=2)))
        time.sleep(0.3)  # after the busy loop is back: a read of its own
        c.sendall(frame(event(2, usage=3)) + frame(b"data: [DONE]\n\n") + END)
        return True

    batches: list[int] = []
    real_drain = transport_mod.LeanTransport._drain

    def drain(self):
        batches.append(len(self._ready))
        real_drain(self)

    monkeypatch.setattr(transport_mod.LeanTransport, "_drain", drain)

    async def run(pump: bool) -> list[RequestRecord]:
        go.clear()
        client = make_client(transport="lean")
        if not pump:
            _without_body_extension(client, monkeypatch)
        recs = [new_rec() for _ in range(n)]
        try:
            tasks = [asyncio.create_task(run_request(client, srv.url + PATHS[CHAT], CHAT, {}, r, RequestHooks())) for r in recs]
            for _ in range(500):  # every stream has its first event
                if all(r.chunk_times for r in recs):
                    break
                await asyncio.sleep(0.01)
            go.set()
            time.sleep(0.15)  # the loop is busy while all eight next events land
            await asyncio.wait_for(asyncio.gather(*tasks), 10)
        finally:
            await client.aclose()
        return recs

    with ThreadServer(handler) as srv:
        pumped = await run(True)
        burst = max(batches)
        iterated = await run(False)
    assert burst == n, batches  # the eight reads that landed together: one callback
    for a, b in zip(pumped, iterated, strict=False):
        for rec in (a, b):
            assert rec.status == records.OK, rec.error_text
            assert rec.output_tokens == 3 and list(rec.chunk_tokens) == [1, 1, 1]
            assert len(set(rec.chunk_times)) == 3  # one stamp per read
    # the burst's reads: stamped when each arrived, after the busy loop woke
    assert len({r.chunk_times[1] for r in pumped}) == n


# -- continuous usage: straight to the full parse once a stream has shown usage --------------
def _sim_chunk(k: int, content: str | None, usage: int | None, extra: dict | None = None, api: str = "chat") -> bytes:
    """A chunk as the sim writes it (engine/sim/wire.py, compact JSON), the answer's piece
    `content`, cumulative usage with the cache report, and the sim's send stamp."""
    if api == "chat":
        choice = {"index": 0, "delta": {} if content is None else {"content": content}, "logprobs": None, "finish_reason": None}
        obj = {"id": "chatcmpl-adf9d9202433e27d", "object": "chat.completion.chunk", "created": 1796175795,
               "model": "redline-sim-70b", "choices": [choice] if content is not None or extra else []}
    else:
        obj = {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m",
               "choices": [{"index": 0, "text": content or "", "logprobs": None, "finish_reason": None}]}
    if extra:
        obj["choices"][0]["delta"].update(extra) if api == "chat" else obj.update(extra)
    if usage is not None:
        obj["usage"] = {"prompt_tokens": 9, "total_tokens": 9 + usage, "completion_tokens": usage,
                        "prompt_tokens_details": {"cached_tokens": 4}}
    obj["sim_t"] = 1796175795.6343958 + k / 1000
    return json.dumps(obj, separators=(",", ":")).encode()


def _payload_streams() -> list[tuple[str, list[bytes]]]:
    chat_usage = [_sim_chunk(0, "", 0)] + [_sim_chunk(k, f" w{k}", k) for k in range(1, 6)] + [_sim_chunk(6, None, 5)]
    return [
        ("chat", chat_usage),
        # usage only at the end (a server that refused continuous usage), then usage again
        ("chat", [_sim_chunk(k, f" w{k}", None) for k in range(4)] + [_sim_chunk(4, None, 4)] + [_sim_chunk(5, " late", 5)]),
        # reasoning first (usage on every chunk), an escaped text, a null content, an error
        ("chat", [_sim_chunk(0, "", 1, {"reasoning_content": "think"}), _sim_chunk(1, 'q"\\u00e9', 2),
                  _sim_chunk(2, None, 2, {"content": None}), b'{"error":{"message":"boom"},"usage":{"completion_tokens":2}}',
                  _sim_chunk(3, "x", 3, {"tool_calls": None})]),
        ("completions", [_sim_chunk(k, f" w{k}", k, api="completions") for k in range(1, 5)]),
        ("completions", [_sim_chunk(0, " a", None, api="completions"), _sim_chunk(1, "", 1, api="completions")]),
    ]


def test_a_stream_with_usage_gives_what_the_full_parse_gives_for_every_chunk():
    """Every payload of a real-shaped stream: the decoder's Event is the full parse's, with
    and without the answer text, before and after the stream has shown usage."""
    from redline.engine.client import api_formats as apis

    for api, payloads in _payload_streams():
        for cls in (apis.OpenAIDecoder, apis.OpenAITextDecoder):
            dec, reference = cls(api), cls(api)
            for p in payloads:
                got = dec.decode(p)
                assert got == reference.full(p), (api, cls.__name__, p)


async def test_a_continuous_usage_stream_records_what_the_full_parse_records(monkeypatch):
    """The same bytes over HTTP, once as the decoder runs and once with every chunk through
    the full parse: the same record (chunks, tokens, usage, cache) and the same credits."""
    from redline.engine.client import api_formats as apis

    _, payloads = _payload_streams()[0]

    def handler(c, head, body, i):
        c.sendall(SSE_HEAD)
        for p in payloads:
            c.sendall(frame(b"data: " + p + b"\n\n"))
            time.sleep(0.01)
        c.sendall(frame(b"data: [DONE]\n\n") + END)
        return True

    async def one() -> tuple[RequestRecord, list[int]]:
        credits: list[int] = []
        rec = new_rec()
        client = make_client(transport="lean")
        try:
            await run_request(client, srv.url + PATHS[CHAT], CHAT, {}, rec, RequestHooks(tokens=lambda t, n: credits.append(n)))
        finally:
            await client.aclose()
        return rec, credits

    with ThreadServer(handler) as srv:
        a, ca = await one()
        monkeypatch.setattr(apis.OpenAIDecoder, "decode", apis.OpenAIDecoder.full)
        b, cb = await one()
    for rec in (a, b):
        assert rec.status == records.OK, rec.error_text
    assert (a.output_tokens, a.input_tokens, a.cached_tokens, a.usage_reported, list(a.chunk_tokens), ca) == \
           (b.output_tokens, b.input_tokens, b.cached_tokens, b.usage_reported, list(b.chunk_tokens), cb)
    assert a.output_tokens == 5 and ca == [1, 1, 1, 1, 1] and a.cached_tokens == 4


# -- the engine's own process: what its start-up imports -----------------------------------
def test_an_engine_process_imports_no_command_line_client_nor_unused_parts():
    """httpx's CLI (click, rich, pygments), prometheus_client (telemetry's parser), the worker
    processes' module and polars are not imported by an engine start without them; httpx.main
    still works (it loads the real CLI on first call)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from redline.engine.host import new_event_loop\n"
        "from redline.engine.core.engine import Engine\n"
        "from redline.engine.core.config import EngineConfig\n"
        "bad = [m for m in ('click', 'rich', 'pygments', 'prometheus_client', 'polars', 'redline.engine.load.worker', 'platform') if m in sys.modules]\n"
        "import httpx\n"
        "sys.argv = ['httpx', '--help']\n"
        "try:\n    httpx.main()\nexcept SystemExit as e:\n    code = e.code\n"
        "print(bad, code, 'click' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[] 0 True", out.stdout[-500:]
