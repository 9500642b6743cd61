"""Fuzzing: SSE byte streams split anywhere, garbage into the decoders, real vLLM captures.

What each test proves:
- the SSE splitter gives the same payloads however the bytes are cut into socket reads;
- the splitter and the three API decoders raise nothing but MalformedEvent, whatever bytes
  or JSON they get, and what they return is sane (counts are non-negative ints, ...);
- run_request never raises on any response body (every outcome is a counted kind);
- real vLLM streams (tests/fixtures/vllm_*_stream.txt), cut at random points, give exactly
  12 content chunks, usage 15/12 (chat) and 5/12 (completions), and TTFT at the first
  non-empty content (the role-only chunk does not count);
- preset files of arbitrary bytes only raise PresetError (tests/unit/engine/preset/test_preset.py fuzzes the
  decoded dicts; this adds the file layer: bytes -> UTF-8 -> TOML -> preset).
"""

from __future__ import annotations

import asyncio
import json
import math
import types
from pathlib import Path
from unittest import mock

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

import redline.engine.client.request
from redline.engine.client import sse as sse_mod
from redline.engine.client.api_formats import APIS, CHAT, COMPLETIONS, GENERATE, MalformedEvent, make_decoder
from redline.engine.client.request import run_request
from redline.engine.client.sse import DONE, SSEDecoder
from redline.engine.measure import records
from redline.engine.measure.hooks import RequestHooks
from redline.engine.measure.records import RequestRecord
from redline.engine.preset import PresetError, load_preset

from helpers import FIXTURES, examples

CHAT_CAPTURE = FIXTURES / "vllm_chat_stream.txt"
COMPLETIONS_CAPTURE = FIXTURES / "vllm_completions_stream.txt"

FAST = settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOWER = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# -- helpers ------------------------------------------------------------------------------
def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    """data cut at the given offsets (deduplicated, in range): no empty piece."""
    points = sorted({c for c in cuts if 0 < c < len(data)})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


def decode_all(pieces: list[bytes]) -> list[bytes]:
    d = SSEDecoder()
    out: list[bytes] = []
    for p in pieces:
        out.extend(d.feed(p))
    out.extend(d.close())
    return out


cut_lists = st.lists(st.integers(min_value=0, max_value=20_000), max_size=40)


# -- the SSE splitter ---------------------------------------------------------------------
# A payload: any bytes but a line end (CR is dropped too: "x\r\n" is the line "x").
payload_bytes = st.binary(max_size=60).map(lambda b: b.replace(b"\n", b"").replace(b"\r", b""))
event = st.fixed_dictionaries(
    {
        "lines": st.lists(payload_bytes, min_size=1, max_size=3),  # multi-line data joins with \n
        "space": st.booleans(),  # "data: x" or "data:x"
        "crlf": st.booleans(),
        "noise": st.lists(st.sampled_from([b": keep-alive", b"event: message", b"id: 7", b"retry: 10", b":"]), max_size=2),
    }
)


def render(events: list[dict]) -> tuple[bytes, list[bytes]]:
    """The wire bytes of `events` and the payloads a correct decoder returns."""
    out, expected = b"", []
    for ev in events:
        eol = b"\r\n" if ev["crlf"] else b"\n"
        got = []
        for n in ev["noise"]:
            out += n + eol
        for line in ev["lines"]:
            out += (b"data: " if ev["space"] else b"data:") + line + eol
            # the spec strips exactly one space after the colon
            got.append(line if ev["space"] else (line[1:] if line.startswith(b" ") else line))
        out += eol
        expected.append(b"\n".join(got))
    return out, expected


@FAST
@given(st.lists(event, max_size=12), cut_lists)
def test_sse_split_anywhere_gives_the_same_payloads(events, cuts):
    data, expected = render(events)
    whole = decode_all([data])
    assert whole == expected
    assert decode_all(split_at(data, cuts)) == expected
    assert decode_all([bytes([b]) for b in data]) == expected  # one byte per read


@FAST
@given(st.binary(max_size=3000), cut_lists)
@example(b"data: x\r", [7])
@example(b"data: a\n\ndata: b", [3, 9])
def test_sse_any_bytes_split_equals_unsplit_and_only_malformed(data, cuts):
    try:
        whole = decode_all([data])
    except MalformedEvent:  # pragma: no cover - only past MAX_EVENT_BYTES
        return
    assert decode_all(split_at(data, cuts)) == whole
    assert all(isinstance(p, bytes) for p in whole)


def test_sse_event_without_end_is_bounded(monkeypatch):
    """A body that never ends a line is not buffered without end: MalformedEvent."""
    monkeypatch.setattr(sse_mod, "MAX_EVENT_BYTES", 1000)
    d = SSEDecoder()
    assert d.feed(b"data: {\"a\": 1}\n\n") == [b'{"a": 1}']
    with pytest.raises(MalformedEvent, match="longer than"):
        for _ in range(100):
            d.feed(b"x" * 100)
    # and many data lines without the blank line that ends the event
    d = SSEDecoder()
    with pytest.raises(MalformedEvent):
        for _ in range(100):
            d.feed(b"data: " + b"y" * 50 + b"\n")


# -- the decoders -------------------------------------------------------------------------
KEYS = ["choices", "delta", "content", "text", "usage", "prompt_tokens", "completion_tokens",
        "meta_info", "error", "message", "type", "sim_t", "reasoning_content", "finish_reason", "role"]
json_scalar = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(-3, 40),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8), st.sampled_from(["", " ", "x"]),
)
json_value = st.recursive(
    json_scalar,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=4)), inner, max_size=4),
    ),
    max_leaves=15,
)
json_payload = json_value.map(lambda v: json.dumps(v).encode())  # NaN/Infinity included: json.loads reads them


def check_event(ev) -> None:
    assert isinstance(ev.tokens, int) and not isinstance(ev.tokens, bool) and ev.tokens >= 0
    assert isinstance(ev.content, bool)
    for n in (ev.prompt_tokens, ev.completion_tokens):
        assert n is None or (isinstance(n, int) and not isinstance(n, bool) and n >= 0)
    assert ev.error is None or (isinstance(ev.error, str) and ev.error and "\n" not in ev.error and len(ev.error) <= 200)
    assert ev.sim_t is None or math.isfinite(ev.sim_t)


@FAST
@given(st.sampled_from(APIS), st.lists(st.one_of(st.binary(max_size=200), json_payload), min_size=1, max_size=8))
@example(CHAT, [b"[" * 100_000])  # nesting past the recursion limit
@example(GENERATE, [b'{"meta_info": {"completion_tokens": true}, "text": "a"}', b'{"error": false}'])
@example(CHAT, [b'{"usage": {"prompt_tokens": -1, "completion_tokens": 1e999}, "sim_t": 1e400}'])
@example(COMPLETIONS, [b'{"choices": {"0": 1}}', b'{"choices": "abc"}', b'{"sim_t": ' + b"9" * 400 + b"}"])
def test_decoders_raise_only_malformed_event(api, payloads):
    decode = make_decoder(api)  # one request's decoder sees every payload (GENERATE keeps state)
    for p in payloads:
        try:
            ev = decode(p)
        except MalformedEvent as exc:
            assert "\n" not in str(exc)
            continue
        check_event(ev)


def test_deeply_nested_json_is_malformed_not_recursion_error():
    for api in APIS:
        with pytest.raises(MalformedEvent):
            make_decoder(api)(b"[" * 100_000 + b"]" * 100_000)
        with pytest.raises(MalformedEvent):
            make_decoder(api)(b'{"a":' * 100_000)


# -- run_request on arbitrary bodies ------------------------------------------------------
class Pieces(httpx.AsyncByteStream):
    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = pieces

    async def __aiter__(self):
        for p in self.pieces:
            yield p


def mock_client(status: int, pieces: list[bytes], api_key: str | None = None) -> httpx.AsyncClient:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, headers={"content-type": "text/event-stream"}, stream=Pieces(pieces))

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return httpx.AsyncClient(transport=httpx.MockTransport(handler), headers=headers)


def replay(api: str, pieces: list[bytes], status: int = 200, clock=None, api_key: str | None = None) -> tuple[RequestRecord, list]:
    tokens: list[tuple[float, int]] = []

    async def go() -> RequestRecord:
        rec = RequestRecord(rid=1, phase="live", step=0, concurrency=1, t_send=0.0)
        async with mock_client(status, pieces, api_key) as client:
            return await run_request(client, "http://test/x", api, {}, rec, RequestHooks(tokens=lambda t, n: tokens.append((t, n))))

    if clock is None:
        return asyncio.run(go()), tokens
    with mock.patch.object(redline.engine.client.request, "time", types.SimpleNamespace(perf_counter=clock)):
        return asyncio.run(go()), tokens


@SLOWER
@given(st.sampled_from(APIS), st.lists(st.one_of(st.binary(max_size=300), json_payload.map(lambda p: b"data: " + p + b"\n\n")), max_size=6),
       st.sampled_from([200, 200, 200, 400, 429, 500, 503]))
def test_run_request_never_raises_on_any_body(api, pieces, status):
    pieces = [p for p in pieces if p]
    rec, _ = replay(api, pieces, status)
    assert rec.status in (records.OK, records.FAILED)
    assert rec.http_status == status
    if rec.status == records.FAILED:
        assert rec.error_kind in records.ERROR_KINDS
        assert "\n" not in rec.error_text and len(rec.error_text) <= 200
    assert rec.output_tokens >= 0 and rec.t_end is not None


def test_non_sse_body_is_malformed_not_a_disconnect():
    rec, _ = replay(CHAT, [b'{"id": "x", "choices": [{"message": {"content": "hi"}}]}'])
    assert rec.status == records.FAILED and rec.error_kind == records.ERR_MALFORMED, rec.error_text
    assert "not an SSE stream" in rec.error_text


def test_error_body_message_is_extracted_and_key_masked():
    key = "sk-fuzz-0123456789abcdef"
    body = json.dumps({"error": {"message": f"Incorrect API key provided: {key}\nsecond line", "code": 401}}).encode()
    rec, _ = replay(CHAT, [body], status=401, api_key=key)
    assert rec.error_kind == records.ERR_HTTP_4XX
    assert rec.error_text.startswith("HTTP 401: Incorrect API key provided: ***"), rec.error_text
    assert key not in rec.error_text and "\n" not in rec.error_text


# -- real vLLM captures, cut at random points -----------------------------------------------
def capture_expectations(path: Path, content_field: str) -> dict:
    """Figures read off the capture independently of the decoders."""
    data = path.read_bytes()
    events = [e for e in data.split(b"\n\n") if e.strip()]
    contents, first_content_event, usage = 0, None, None
    for i, e in enumerate(events):
        body = e.split(b"data:", 1)[1].strip()
        if body == DONE:
            continue
        obj = json.loads(body)
        for c in obj.get("choices") or []:
            text = c["delta"].get("content") if content_field == "delta" else c.get("text")
            if text:
                contents += 1
                if first_content_event is None:
                    first_content_event = i
        if obj.get("usage"):
            usage = obj["usage"]
    # how many bytes must have arrived for the first content event to be complete (through
    # the last byte of the blank line that ends it)
    end, seen = -1, -1
    while seen < first_content_event:
        end = data.index(b"\n\n", end + 1)
        seen += 1
    return {"data": data, "contents": contents, "first_content_event": first_content_event,
            "bytes_needed": end + 2, "usage": usage}


CHAT_X = capture_expectations(CHAT_CAPTURE, "delta")
COMPLETIONS_X = capture_expectations(COMPLETIONS_CAPTURE, "text")


def test_capture_figures():
    """The figures the replay tests hold the code to (and that the fixtures are the captures)."""
    assert CHAT_X["contents"] == 12 and CHAT_X["first_content_event"] == 1  # event 0: role only
    assert CHAT_X["usage"]["prompt_tokens"] == 15 and CHAT_X["usage"]["completion_tokens"] == 12
    assert COMPLETIONS_X["contents"] == 12 and COMPLETIONS_X["first_content_event"] == 0
    assert COMPLETIONS_X["usage"]["prompt_tokens"] == 5 and COMPLETIONS_X["usage"]["completion_tokens"] == 12
    shared = Path("/work/shared/samples/vllm")
    if shared.is_dir():
        assert CHAT_CAPTURE.read_bytes() == (shared / "chat_stream.txt").read_bytes()
        assert COMPLETIONS_CAPTURE.read_bytes() == (shared / "completions_stream.txt").read_bytes()


@FAST
@given(st.sampled_from([(CHAT, CHAT_X), (COMPLETIONS, COMPLETIONS_X)]), st.lists(st.integers(0, 6000), max_size=60))
def test_capture_through_decoders_at_random_splits(case, cuts):
    api, x = case
    payloads = decode_all(split_at(x["data"], cuts))
    assert payloads[-1] == DONE
    decode = make_decoder(api)
    evs = [decode(p) for p in payloads[:-1]]
    assert sum(e.content for e in evs) == x["contents"] == 12
    assert next(i for i, e in enumerate(evs) if e.content) == x["first_content_event"]
    assert [e.prompt_tokens for e in evs if e.prompt_tokens is not None] == [x["usage"]["prompt_tokens"]]
    assert [e.completion_tokens for e in evs if e.completion_tokens is not None] == [12]


@SLOWER
@given(st.sampled_from([(CHAT, CHAT_X), (COMPLETIONS, COMPLETIONS_X)]), st.lists(st.integers(0, 6000), max_size=60))
@example((CHAT, CHAT_X), [CHAT_X["bytes_needed"] - 1])  # the first content event ends one byte into read 2
@example((CHAT, CHAT_X), [CHAT_X["bytes_needed"]])  # ... exactly at the end of read 1
def test_capture_through_run_request_at_random_splits(case, cuts):
    """One timestamp per read: TTFT is the read that completed the first non-empty content."""
    api, x = case
    pieces = split_at(x["data"], cuts)
    ticks = iter(range(10_000))
    rec, tokens = replay(api, pieces, clock=lambda: float(next(ticks)))
    assert rec.status == records.OK, rec.error_text
    assert rec.output_tokens == 12 and rec.usage_reported
    assert rec.input_tokens == x["usage"]["prompt_tokens"]
    # chunks one read brought together share its stamp: their gaps are no ITL (docs/numbers.md, coalesced reads)
    merged = set(rec.coalesced or ())
    assert len(rec.chunk_times) == 12 and len(rec.itls()) == sum(1 for i in range(1, 12) if i not in merged)
    # perf_counter(): tick 0 at send, tick i for read i (1-based)
    ends = [sum(len(p) for p in pieces[: i + 1]) for i in range(len(pieces))]
    read_of_first = next(i for i, end in enumerate(ends) if end >= x["bytes_needed"]) + 1
    assert rec.t_send == 0.0 and rec.t_first == float(read_of_first)
    assert rec.ttft == float(read_of_first)
    assert sum(n for _, n in tokens) == 12  # live counters get the exact usage total


# -- preset files of arbitrary bytes --------------------------------------------------------
toml_ish = st.one_of(
    st.binary(max_size=400),
    st.text(max_size=300).map(str.encode),
    st.lists(st.sampled_from([b"[ramp]\n", b"concurrency = [1, 2]\n", b"[stop]\n", b"error_rate = 0.1\n", b"[[x]]\n",
                              b"a = [[[[1]]]]\n", b"hold_s = 1e999\n", b"\xff\n", b"name = \"\\u0000\"\n", b"[workload]\n",
                              b"dataset = \"jsonl:\"\n", b"a = {b = {c = 1}}\n", b"= 1\n"]), max_size=12).map(b"".join),
)


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(toml_ish)
def test_preset_files_of_any_bytes_only_raise_preset_error(tmp_path, data):
    f = tmp_path / "fuzz.toml"
    f.write_bytes(data)
    try:
        load_preset(f)
    except PresetError as exc:
        assert "\n" not in str(exc) and str(exc).startswith(str(f))


def test_preset_nested_too_deeply_is_a_preset_error(tmp_path):
    f = tmp_path / "deep.toml"
    f.write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(PresetError):
        load_preset(f)


