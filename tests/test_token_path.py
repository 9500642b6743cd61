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

Servers are threads on 127.0.0.1 (tests/helpers.py ThreadServer).
"""

from __future__ import annotations

import asyncio
import json
import time

from redline.engine import records as R
from redline.engine import sse as sse_mod
from redline.engine.apis import CHAT, PATHS
from redline.engine.http import make_client
from redline.engine.records import RequestRecord
from redline.engine.request import run_request
from redline.engine.transport import BODY_EXTENSION

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


async def test_bytes_that_keep_coming_are_not_a_read_timeout():
    sent: list[float] = []
    with ThreadServer(streaming_handler(12, 0.1, sent)) as srv:  # 1.2 s in all, 0.1 s gaps
        client = make_client(transport="lean", request_timeout=0.5)
        try:
            rec = new_rec()
            await run_request(client, srv.url + PATHS[CHAT], CHAT, {}, rec, lambda t, n: None)
        finally:
            await client.aclose()
    assert rec.status == R.OK, rec.error_text
    assert rec.output_tokens == 12 and len(rec.chunk_times) == 12
    assert rec.e2e is not None and rec.e2e > 1.0  # longer than two timeouts: one wait, many reads
    assert all(s <= t for t, s in zip(rec.chunk_times, sent))  # each chunk stamped at a read after its send


async def test_a_stall_mid_stream_is_a_read_timeout_and_keeps_what_arrived():
    sent: list[float] = []
    credits: list[tuple[float, int]] = []
    with ThreadServer(streaming_handler(10, 0.02, sent, stall_after=4)) as srv:
        client = make_client(transport="lean", request_timeout=0.4)
        try:
            rec = new_rec()
            t0 = time.perf_counter()
            await run_request(client, srv.url + PATHS[CHAT], CHAT, {}, rec, lambda t, n: credits.append((t, n)))
            waited = time.perf_counter() - t0
        finally:
            await client.aclose()
    assert rec.status == R.FAILED and rec.error_kind == R.ERR_TIMEOUT, (rec.status, rec.error_text)
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
        try:
            await run_request(client, srv.url + PATHS[CHAT], CHAT, {}, rec, lambda t, n: credits.append((t, n)))
        finally:
            await client.aclose()
        return rec, credits

    with ThreadServer(handler) as srv:
        a, ca = await one(True)
        b, cb = await one(False)
    for rec, credits in ((a, ca), (b, cb)):
        assert rec.status == R.OK, rec.error_text
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
            out = await run_request(client, srv.url + PATHS[CHAT], CHAT, {}, rec, on_tokens)
            ok = new_rec()
            await run_request(client, srv.url + PATHS[CHAT], CHAT, {}, ok, lambda t, n: None)
        finally:
            await client.aclose()
    assert out is rec and rec.status == R.FAILED and rec.error_kind == R.ERR_OTHER
    assert "a listener's bug" in rec.error_text
    assert ok.status == R.OK and ok.output_tokens == 2
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
            await asyncio.wait_for(run_request(client, srv.url + PATHS[CHAT], CHAT, {}, rec, lambda t, n: None), 5)
        finally:
            await client.aclose()
    assert rec.status == R.FAILED and rec.error_kind == R.ERR_MALFORMED, rec.error_text
    assert len(rec.chunk_times) == 1 and rec.output_tokens == 1
