"""Request-level truth (issue 13): every per-request figure against what really happened.

- Timestamps are taken where bytes arrive (the lean transport's data_received) and carried
  with them: a consumer that fell behind still gets each read's own time, and one stream's
  slow parse does not delay another stream's timestamp. On Linux the stamp is the kernel's
  receive time (engine/client/kstamp.py): a read that waited while the loop was blocked keeps it.
- SGLang /generate with multi-token chunks: ITL as bench_serving computes it (k entries of
  gap/k), the raw chunk gaps kept apart; against a reference implementation of
  bench_serving's loop and against the sim's own send stamps.
- Reasoning models: TTFT at the first reasoning token, the time to the first answer token
  apart, reasoning tokens counted; on_first called once, at the first token.
- Continuous usage: tokens credited per chunk with the server's exact deltas; their sum is
  the usage total; a server that refuses the option is recognised and the body rebuilt.

The servers here are threads in this process on 127.0.0.1 (so their clocks are ours, and
their timing does not depend on the client's event loop), or the sim (tests/conftest.py).
"""

from __future__ import annotations

import asyncio
import json
import socket
import statistics
import threading
import time

import pytest

import redline.engine.client.request as request_mod
from redline.engine.client import kstamp
from redline.engine.client.api_formats import CHAT, COMPLETIONS, GENERATE, PATHS, build_body, continuous_usage_refused
from redline.engine.client.http import make_client
from redline.engine.client.request import run_request
from redline.engine.client.transport import Stamped
from redline.engine.measure import records
from redline.engine.measure.hooks import RequestHooks
from redline.engine.measure.records import RequestRecord

from helpers import ThreadHandler, ThreadServer, sim_state_async as sim_state

MODEL = "redline-sim-70b"
PROMPT = "the quick brown fox jumps over the lazy dog " * 8


# -- a threaded HTTP/1.1 server on 127.0.0.1 (tests/helpers/servers.py) ---------------------------
Handler = ThreadHandler

SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
END = b"0\r\n\r\n"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def sse(obj) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj, separators=(",", ":")).encode()) + b"\n\n"


def send_at(c: socket.socket, data: bytes, log: list[float] | None = None) -> None:
    """Send, noting the time just before (a stamp of the read can never be earlier)."""
    if log is not None:
        log.append(time.perf_counter())
    c.sendall(data)


def new_rec() -> RequestRecord:
    return RequestRecord(rid=1, phase="live", step=0, concurrency=1, t_send=0.0)


def chat_chunk(delta: dict, **extra) -> dict:
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": MODEL,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}], **extra}


# -- timestamps where bytes arrive ----------------------------------------------------------------
@pytest.mark.timing  # 30 ms read gaps
async def test_a_consumer_behind_gets_each_read_with_its_own_arrival_time():
    sent: list[float] = []

    def handler(c, head, body, i):
        c.sendall(SSE_HEAD)
        for k in range(4):
            send_at(c, chunk(b"data: %d\n\n" % k), sent)
            time.sleep(0.03)
        c.sendall(END)
        return True

    with ThreadServer(handler) as srv:
        client = make_client(transport="lean")
        try:
            async with client.stream("GET", srv.url + "/s") as resp:
                await asyncio.sleep(0.25)  # the consumer falls behind; the loop stays free
                got_at = time.perf_counter()
                items = [item async for item in resp.aiter_raw()]
        finally:
            await client.aclose()
    # one item per read, never merged under one stamp (each write was its own read)
    assert [bytes(i) for i in items] == [b"data: %d\n\n" % k for k in range(4)]
    assert all(isinstance(i, Stamped) for i in items)
    for item, s in zip(items, sent, strict=False):
        assert s <= item.t < s + 0.02, (item.t - s)  # stamped when it arrived ...
        assert item.t < got_at - 0.1  # ... not when the consumer took it
    gaps = [b.t - a.t for a, b in zip(items, items[1:], strict=False)]
    truth = [b - a for a, b in zip(sent, sent[1:], strict=False)]
    assert all(abs(g - x) < 0.015 for g, x in zip(gaps, truth, strict=False)), (gaps, truth)


def _two_stream_server(go: threading.Event, done: threading.Event) -> Handler:
    def handler(c, head, body, i):
        c.sendall(SSE_HEAD + chunk(sse(chat_chunk({"role": "assistant", "content": ""}))))
        go.wait(5)
        c.sendall(chunk(sse(chat_chunk({"content": "hello"}))))
        done.wait(5)
        c.sendall(chunk(sse(b"[DONE]")) + END)
        return True

    return handler


async def _two_streams_first_token_spread(transport: str, monkeypatch) -> float:
    """Two streams whose first content chunks arrive together; each parse of a content chunk
    takes 80 ms. The difference between their TTFT stamps."""
    real = request_mod.make_decoder

    def slow_make_decoder(api):
        decode = real(api)

        def slow(payload):
            ev = decode(payload)
            if ev.content:
                time.sleep(0.08)  # a slow parse: blocks the loop, as any CPU-bound parse does
            return ev

        return slow

    monkeypatch.setattr(request_mod, "make_decoder", slow_make_decoder)
    monkeypatch.setattr(request_mod.fast_path, "splitter", lambda *a, **k: None)  # the Python road: its decoder is the slow one
    go, done = threading.Event(), threading.Event()
    with ThreadServer(_two_stream_server(go, done)) as srv:
        client = make_client(transport=transport)
        recs = [new_rec(), new_rec()]
        try:
            tasks = [asyncio.create_task(run_request(client, srv.url + PATHS[CHAT], CHAT, {}, r, RequestHooks())) for r in recs]
            for _ in range(200):
                if len(srv.requests) == 2:
                    break
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.1)  # both role chunks read and parsed
            go.set()
            time.sleep(0.05)  # both content chunks land before this loop reads either
            for _ in range(300):
                if all(r.t_first is not None for r in recs):
                    break
                await asyncio.sleep(0.01)
            done.set()
            await asyncio.wait_for(asyncio.gather(*tasks), 5)
        finally:
            done.set()
            await client.aclose()
    assert all(r.status == records.OK for r in recs), [r.error_text for r in recs]
    return abs(recs[0].t_first - recs[1].t_first)


async def test_one_streams_slow_parse_does_not_delay_anothers_timestamp(monkeypatch):
    assert await _two_streams_first_token_spread("lean", monkeypatch) < 0.02


async def test_without_stamps_the_slow_parse_would_show(monkeypatch):
    """The control: on httpx's own transport the stamp is taken when the read reaches
    run_request, after the other stream's 80 ms parse. The test above can see the bug."""
    assert await _two_streams_first_token_spread("httpx", monkeypatch) >= 0.07


def test_items_are_stamped_on_uvloop_too():
    uvloop = pytest.importorskip("uvloop")
    sent: list[float] = []

    def handler(c, head, body, i):
        c.sendall(SSE_HEAD)
        for k in range(3):
            send_at(c, chunk(b"x%d" % k), sent)
            time.sleep(0.02)
        c.sendall(END)
        return True

    async def main():
        client = make_client(transport="lean")
        try:
            async with client.stream("GET", srv.url + "/") as resp:
                await asyncio.sleep(0.15)
                return [i async for i in resp.aiter_raw()]
        finally:
            await client.aclose()

    with ThreadServer(handler) as srv:
        loop = uvloop.new_event_loop()
        try:
            items = loop.run_until_complete(main())
        finally:
            loop.close()
    assert [bytes(i) for i in items] == [b"x0", b"x1", b"x2"]
    for item, s in zip(items, sent, strict=False):
        assert s <= item.t < s + 0.02


# -- the kernel's receive time (engine/client/kstamp.py) ----------------------------------------------
def _blocked_loop_streams(blocked_s: float = 0.06, streams: int = 4, spacing: float = 0.01):
    """`streams` streams; once each has its first read, the loop is blocked for `blocked_s`
    (time.sleep on it, as a long harvest or tick would) while the server sends each stream one
    chunk, `spacing` apart. Returns a coroutine function giving (send times, the stamp of each
    stream's chunk, the end of the block)."""
    go, done = threading.Event(), threading.Event()
    t0: list[float] = []
    sent = [0.0] * streams

    def handler(c, head, body, i):
        k = int(head.split(b" ")[1].rsplit(b"/", 1)[1])
        c.sendall(SSE_HEAD + chunk(b"start"))
        go.wait(5)
        time.sleep(max(0.0, t0[0] + 0.005 + k * spacing - time.perf_counter()))
        sent[k] = time.perf_counter()
        c.sendall(chunk(b"%d" % k))
        done.wait(5)
        c.sendall(END)
        return True

    async def run(url: str):
        client = make_client(transport="lean")
        started = 0

        async def one(k: int) -> list[Stamped]:
            nonlocal started
            async with client.stream("GET", f"{url}/s/{k}") as resp:
                items = []
                async for item in resp.aiter_raw():
                    items.append(item)
                    started += len(items) == 1
                return items

        try:
            tasks = [asyncio.ensure_future(one(k)) for k in range(streams)]
            while started < streams:
                await asyncio.sleep(0.005)
            t0.append(time.perf_counter())
            go.set()
            time.sleep(blocked_s)  # the loop reads nothing meanwhile
            unblocked = time.perf_counter()
            await asyncio.sleep(0.02)
            done.set()
            got = await asyncio.gather(*tasks)
        finally:
            done.set()
            await client.aclose()
        stamps = []
        for k, items in enumerate(got):
            assert [bytes(i) for i in items] == [b"start", b"%d" % k]
            stamps.append(items[1].t)
        return sent, stamps, unblocked

    return handler, run


@pytest.mark.timing  # 2 ms against the server thread's send stamps: alone on the machine
@pytest.mark.skipif(not kstamp.ENABLED, reason="kernel receive stamps: Linux (and REDLINE_KSTAMP not 0)")
async def test_reads_that_arrive_while_the_loop_is_blocked_keep_their_arrival_times():
    """The engine's loop is held 60 ms while four streams' chunks arrive 10 ms apart: each is
    stamped when the kernel received it, not when the loop got round to reading it."""
    handler, run = _blocked_loop_streams()
    with ThreadServer(handler) as srv:
        sent, stamps, unblocked = await run(srv.url)
    for s, t in zip(sent, stamps, strict=False):
        assert s <= t < s + 0.002, (t - s)
    assert max(stamps) < unblocked - 0.015
    gaps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
    truth = [b - a for a, b in zip(sent, sent[1:], strict=False)]
    assert all(abs(g - x) < 0.002 for g, x in zip(gaps, truth, strict=False)), (gaps, truth)


@pytest.mark.timing
@pytest.mark.skipif(not kstamp.ENABLED, reason="kernel receive stamps: Linux (and REDLINE_KSTAMP not 0)")
def test_kernel_stamps_on_uvloop_too():
    uvloop = pytest.importorskip("uvloop")
    handler, run = _blocked_loop_streams()
    with ThreadServer(handler) as srv:
        loop = uvloop.new_event_loop()
        try:
            sent, stamps, unblocked = loop.run_until_complete(run(srv.url))
        finally:
            loop.close()
    for s, t in zip(sent, stamps, strict=False):
        assert s <= t < s + 0.002, (t - s)


@pytest.mark.parametrize("off", ["loop transport", "stamp refused"])
async def test_without_kernel_stamps_the_blocked_loop_would_show(monkeypatch, off):
    """The control: on the loop's own transport a read is stamped when the loop reads it, after
    the block; so is a read whose kernel stamp is refused (older than MAX_AGE_NS: here every
    one). The test above can see the bug."""
    if off == "loop transport":
        monkeypatch.setattr(kstamp, "ENABLED", False)
    else:
        monkeypatch.setattr(kstamp, "MAX_AGE_NS", 0)
    handler, run = _blocked_loop_streams()
    with ThreadServer(handler) as srv:
        sent, stamps, unblocked = await run(srv.url)
    assert all(t >= unblocked for t in stamps), [t - unblocked for t in stamps]


# -- /generate: ITL as bench_serving computes it ------------------------------------------------
def bench_serving_generate_itl(times: list[float], cumulative: list[int]) -> list[float]:
    """SGLang bench_serving's /generate loop (async_request_sglang_generate), on our stamps:
    the first chunk is TTFT; then a chunk bringing k new tokens adds k entries of gap/k, and
    one bringing none is skipped without moving the last timestamp."""
    itl: list[float] = []
    ttft_seen, last_t, last_len = False, 0.0, 0
    for t, n in zip(times, cumulative, strict=False):
        if not ttft_seen:
            ttft_seen = True
        else:
            k = n - last_len
            if k == 0:
                continue
            itl.extend([(t - last_t) / k] * k)
        last_t, last_len = t, n
    return itl


async def test_generate_multi_token_chunks_itl_as_bench_serving():
    counts = [2, 5, 5, 6, 10]  # cumulative completion_tokens: chunks of 2, 3, 0, 1, 4 tokens
    sent: list[float] = []

    def handler(c, head, body, i):
        c.sendall(SSE_HEAD)
        text = ""
        for n in counts:
            text += "ab"  # the text grows on every chunk, even the one with no new token
            ev = {"text": text, "meta_info": {"prompt_tokens": 9, "completion_tokens": n}, "index": 0}
            send_at(c, chunk(sse(ev)), sent)
            time.sleep(0.02)
        c.sendall(chunk(sse(b"[DONE]")) + END)
        return True

    with ThreadServer(handler) as srv:
        client = make_client(transport="lean")
        rec = new_rec()
        try:
            await run_request(client, srv.url + PATHS[GENERATE], GENERATE, {}, rec, RequestHooks())
        finally:
            await client.aclose()
    assert rec.status == records.OK, rec.error_text
    assert rec.spread_itl and rec.output_tokens == 10 and rec.input_tokens == 9
    ts = list(rec.chunk_times)
    assert len(ts) == 5 and list(rec.chunk_tokens) == [2, 3, 0, 1, 4]
    for t, s in zip(ts, sent, strict=False):
        assert s <= t < s + 0.02
    itls = rec.itls()
    assert itls == pytest.approx(bench_serving_generate_itl(ts, counts), abs=1e-12)
    assert len(itls) == 10 - 2  # the first chunk's two tokens are TTFT
    # k entries of gap/k; the empty chunk's gap rolls into the next chunk's
    assert itls[:3] == pytest.approx([(ts[1] - ts[0]) / 3] * 3)
    assert itls[3] == pytest.approx(ts[3] - ts[1])
    assert itls[4:] == pytest.approx([(ts[4] - ts[3]) / 4] * 4)
    assert sum(itls) == pytest.approx(ts[-1] - ts[0])
    # the raw per-chunk gap stays its own figure
    assert rec.chunk_gaps() == pytest.approx([b - a for a, b in zip(ts, ts[1:], strict=False)])


async def test_generate_spread_itl_matches_the_sims_send_stamps(sim_factory):
    """4 tokens per chunk: every ITL is a quarter of the gap between the sim's own sends."""
    sim = sim_factory("healthy", extra_args=("--set", "tokens_per_chunk=4"))
    wall_offset = time.time() - time.perf_counter()
    lags: list[float] = []
    client = make_client(transport="lean")
    rec = new_rec()
    try:
        await run_request(client, sim.url + PATHS[GENERATE], GENERATE, build_body(GENERATE, MODEL, PROMPT, 40), rec,
                          RequestHooks(lag=lags.append), wall_offset)
    finally:
        await client.aclose()
    assert rec.status == records.OK, rec.error_text
    assert list(rec.chunk_tokens) == [4] * 10 and len(lags) == 10
    sim_t = [t + wall_offset - lag for t, lag in zip(rec.chunk_times, lags, strict=False)]  # the sim's send stamps
    truth = [g / 4 for g in (b - a for a, b in zip(sim_t, sim_t[1:], strict=False)) for _ in range(4)]
    itls = rec.itls()
    assert len(itls) == len(truth) == 36
    assert statistics.median(itls) == pytest.approx(statistics.median(truth), rel=0.10)
    assert max(itls) == pytest.approx(max(truth), rel=0.10, abs=0.002)
    # the chunk gap is 4x the ITL here: both figures are kept
    assert statistics.median(rec.chunk_gaps()) == pytest.approx(4 * statistics.median(itls), rel=1e-9)


async def test_openai_streams_keep_one_gap_per_chunk(sim_factory):
    """bench_serving's chat/completions ITL: one gap per content chunk, whatever it carries."""
    sim = sim_factory("healthy", extra_args=("--set", "tokens_per_chunk=3"))
    client = make_client(transport="lean")
    try:
        for api in (CHAT, COMPLETIONS):
            rec = new_rec()
            await run_request(client, sim.url + PATHS[api], api, build_body(api, MODEL, PROMPT, 12), rec, RequestHooks())
            assert rec.status == records.OK and not rec.spread_itl
            assert list(rec.chunk_tokens) == [3, 3, 3, 3]  # exact, from continuous usage
            assert rec.itls() == rec.chunk_gaps() and len(rec.itls()) == 3
    finally:
        await client.aclose()


# -- reasoning models -------------------------------------------------------------------------
REASONING_STREAM = [
    chat_chunk({"role": "assistant", "content": ""}),
    chat_chunk({"reasoning_content": "Let"}),  # vLLM before 0.10 / SGLang
    chat_chunk({"reasoning": " me", "reasoning_content": " me"}),
    chat_chunk({"reasoning": " think"}),  # vLLM's newer field
    # SGLang writes every field, null when unused
    chat_chunk({"role": None, "content": "The", "reasoning_content": None, "tool_calls": None}),
    chat_chunk({"content": " answer"}),
]


@pytest.mark.parametrize("with_usage", [True, False])
async def test_reasoning_ttft_at_first_thought_ttfat_at_first_answer(with_usage):
    sent: list[float] = []
    stream = list(REASONING_STREAM)
    if with_usage:
        stream.append({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": MODEL, "choices": [],
                       "usage": {"prompt_tokens": 11, "total_tokens": 18, "completion_tokens": 7}})

    def handler(c, head, body, i):
        c.sendall(SSE_HEAD)
        for ev in stream:
            send_at(c, chunk(sse(ev)), sent)
            time.sleep(0.02)
        c.sendall(chunk(sse(b"[DONE]")) + END)
        return True

    firsts: list[tuple[float | None, float | None]] = []
    calls: list[tuple[str, float]] = []

    def on_first(r: RequestRecord) -> None:
        firsts.append((r.t_first, r.t_first_answer))
        calls.append(("first", r.t_first))

    with ThreadServer(handler) as srv:
        client = make_client(transport="lean")
        rec = new_rec()
        try:
            await run_request(client, srv.url + PATHS[CHAT], CHAT, {}, rec, RequestHooks(tokens=lambda t, n: calls.append(("tokens", t)), first_token=on_first))
        finally:
            await client.aclose()
    assert rec.status == records.OK, rec.error_text
    # TTFT ends at the first reasoning chunk (event 1), not the role chunk, not the answer
    assert sent[1] <= rec.t_first < sent[1] + 0.015
    assert sent[4] <= rec.t_first_answer < sent[4] + 0.015
    assert rec.ttft == rec.t_first - rec.t_send and rec.ttfat == rec.t_first_answer - rec.t_send
    assert rec.ttfat - rec.ttft == pytest.approx(sent[4] - sent[1], abs=0.015)
    # reasoning tokens are output tokens
    assert len(rec.chunk_times) == 5
    assert rec.output_tokens == (7 if with_usage else 5)
    # on_first: once, when t_first was set, before any token was credited
    assert firsts == [(rec.t_first, None)]
    assert calls[0] == ("first", rec.t_first) and calls[1] == ("tokens", rec.t_first)


async def test_on_first_once_per_request_against_the_sim(healthy_sim):
    client = make_client(transport="lean")
    try:
        for api in (CHAT, COMPLETIONS, GENERATE):
            seen: list[RequestRecord] = []
            rec = new_rec()
            await run_request(client, healthy_sim.url + PATHS[api], api, build_body(api, MODEL, PROMPT, 6), rec,
                              RequestHooks(first_token=seen.append))
            assert rec.status == records.OK and seen == [rec]
            assert rec.t_first == rec.chunk_times[0] and rec.t_first_answer == rec.t_first  # no reasoning here
    finally:
        await client.aclose()


# -- continuous usage: exact tokens as they arrive ---------------------------------------------
@pytest.mark.parametrize("api", [CHAT, COMPLETIONS])
async def test_continuous_usage_credits_exact_deltas_per_chunk(sim_factory, api):
    sim = sim_factory("healthy", extra_args=("--set", "tokens_per_chunk=3"))
    client = make_client(transport="lean")
    try:
        credits: list[tuple[float, int]] = []
        rec = new_rec()
        body = build_body(api, MODEL, PROMPT, 10)
        assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
        await run_request(client, sim.url + PATHS[api], api, body, rec, RequestHooks(tokens=lambda t, n: credits.append((t, n))))
        assert rec.status == records.OK, rec.error_text
        assert [n for _, n in credits] == [3, 3, 3, 1]  # as they arrived, not 1 per chunk
        assert [t for t, _ in credits] == list(rec.chunk_times)  # each at its own chunk's read
        assert sum(n for _, n in credits) == rec.output_tokens == 10 and rec.usage_reported
        assert list(rec.chunk_tokens) == [3, 3, 3, 1]
        # without it: a provisional 1 per chunk, and the rest only at the end
        credits.clear()
        rec2 = new_rec()
        await run_request(client, sim.url + PATHS[api], api, build_body(api, MODEL, PROMPT, 10, continuous_usage=False), rec2,
                          RequestHooks(tokens=lambda t, n: credits.append((t, n))))
        assert rec2.output_tokens == 10 and list(rec2.chunk_tokens) == [1, 1, 1, 1]
        # one call per read (its events' tokens summed): the usage chunk's 6 lands with the
        # last content chunk's 1 when one read brought both, else at a read of its own
        times = [t for t, _ in credits]
        assert times == sorted(set(times)) and set(rec2.chunk_times) <= set(times)
        assert [n for _, n in credits] in ([1, 1, 1, 1, 6], [1, 1, 1, 7])
        assert sum(n for _, n in credits) == 10
    finally:
        await client.aclose()
    st = await sim_state(sim.url)
    assert st["generation_tokens_total"] == 20


async def test_continuous_usage_on_a_vllm_shaped_stream_with_held_back_tokens():
    """vLLM holds back a token that ends inside a UTF-8 character and sends it with the next:
    fewer chunks than tokens. Continuous usage credits each chunk its real count."""
    counts = [1, 2, 4, 5]  # chunk 3 carries 2 tokens
    stream = [chat_chunk({"role": "assistant", "content": ""}, usage={"prompt_tokens": 15, "total_tokens": 15, "completion_tokens": 0})]
    for n, text in zip(counts, ["a", "b", "\u00e9\u00e9", "c"], strict=False):
        stream.append(chat_chunk({"content": text}, usage={"prompt_tokens": 15, "total_tokens": 15 + n, "completion_tokens": n}))
    stream.append({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": MODEL, "choices": [],
                   "usage": {"prompt_tokens": 15, "total_tokens": 20, "completion_tokens": 5}})

    def handler(c, head, body, i):
        c.sendall(SSE_HEAD)
        for ev in stream:
            c.sendall(chunk(sse(ev)))
            time.sleep(0.01)
        c.sendall(chunk(sse(b"[DONE]")) + END)
        return True

    credits: list[int] = []
    with ThreadServer(handler) as srv:
        client = make_client(transport="lean")
        rec = new_rec()
        try:
            await run_request(client, srv.url + PATHS[CHAT], CHAT, {}, rec, RequestHooks(tokens=lambda t, n: credits.append(n)))
        finally:
            await client.aclose()
    assert rec.status == records.OK, rec.error_text
    assert credits == [1, 1, 2, 1] and sum(credits) == rec.output_tokens == 5
    assert rec.input_tokens == 15 and len(rec.chunk_times) == 4


# -- a server that refuses continuous_usage_stats ----------------------------------------------
VLLM_400 = {"object": "error", "type": "BadRequestError", "param": None, "code": 400,
            "message": "[{'type': 'extra_forbidden', 'loc': ('body', 'stream_options', 'continuous_usage_stats'), "
                       "'msg': 'Extra inputs are not permitted', 'input': True}]"}


def _refusing_handler(c, head, body, i):
    req = json.loads(body)
    if "continuous_usage_stats" in (req.get("stream_options") or {}):
        payload = json.dumps(VLLM_400).encode()
        c.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(payload), payload))
        return True
    c.sendall(SSE_HEAD)
    for text in ("a", "b", "c"):
        c.sendall(chunk(sse(chat_chunk({"content": text}))))
    c.sendall(chunk(sse({"id": "x", "choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7}})))
    c.sendall(chunk(sse(b"[DONE]")) + END)
    return True


async def test_refused_continuous_usage_is_recognised_and_the_body_rebuilt():
    with ThreadServer(_refusing_handler) as srv:
        client = make_client(transport="lean")
        try:
            rec = new_rec()
            await run_request(client, srv.url + PATHS[CHAT], CHAT, build_body(CHAT, MODEL, PROMPT, 3), rec, RequestHooks())
            assert rec.status == records.FAILED and rec.http_status == 400 and rec.error_kind == records.ERR_HTTP_4XX
            assert continuous_usage_refused(rec.http_status, rec.error_text), rec.error_text
            rec2 = new_rec()
            await run_request(client, srv.url + PATHS[CHAT], CHAT, build_body(CHAT, MODEL, PROMPT, 3, continuous_usage=False), rec2,
                              RequestHooks())
            assert rec2.status == records.OK and rec2.output_tokens == 3, rec2.error_text
        finally:
            await client.aclose()
    assert len(srv.requests) == 2


async def test_sim_accepts_continuous_usage(healthy_sim):
    """The sim takes the option as SGLang 0.5.23 does: no fallback needed, usage on every
    token chunk (serving_chat.py: not on the role chunk nor the finish_reason chunk)."""
    client = make_client(transport="lean")
    try:
        async with client.stream("POST", healthy_sim.url + PATHS[CHAT], json=build_body(CHAT, MODEL, PROMPT, 3)) as resp:
            assert resp.status_code == 200
            text = b"".join([p async for p in resp.aiter_raw()]).decode()
    finally:
        await client.aclose()
    events = [json.loads(line[6:]) for line in text.split("\n") if line.startswith("data: {")]
    # role, 3 tokens, finish_reason, closing
    assert [(e.get("usage") or {}).get("completion_tokens") for e in events] == [None, 1, 2, 3, None, 3]
    assert events[-1]["choices"] == []
