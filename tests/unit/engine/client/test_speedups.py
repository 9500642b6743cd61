"""The C road of the per-token path (engine/client/_speedups.c, issue 47) gives exactly what the
Python road gives, on the same bytes.

- every stream (real shapes: vLLM and SGLang chunks, usage on every chunk or at the end,
  reasoning, cached tokens, the sim's sim_t; odd ones: errors, duplicate or escaped keys,
  other types, bad UTF-8, NaN, deep nesting, garbage, events past the size limit), cut into
  reads anywhere, leaves the same record (chunk stamps and tokens, coalesced marks, TTFT,
  usage, outcome and error text), the same token and lag callbacks and the same stream state
  through both roads;
- one chunk read in C is either not judged there (None) or judged as the Python decoder
  judges it;
- where the module was not built (no compiler at install) the tests build it from its source
  when a C compiler is here, else they are skipped: redline itself then runs the Python road.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import shutil
import subprocess
import sysconfig

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from redline.engine.client import fast_path, sse as sse_mod
from redline.engine.client.api_formats import CHAT, COMPLETIONS, MalformedEvent, make_decoder
from redline.engine.client.request import _Stream
from redline.engine.measure.records import RequestRecord

from helpers import ROOT, examples

SOURCE = ROOT / "engine" / "client" / "_speedups.c"
SETTINGS = settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def speedups(tmp_path_factory):
    """The C module: the installed one, else built here from its source, else skipped."""
    try:
        from redline.engine.client import _speedups  # type: ignore[attr-defined]

        return _speedups
    except ImportError:
        pass
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("engine/client/_speedups.c is not built and there is no C compiler: redline runs the Python road")
    out = tmp_path_factory.mktemp("speedups") / ("_speedups" + importlib.machinery.EXTENSION_SUFFIXES[0])
    subprocess.run([cc, "-O1", "-shared", "-fPIC", f"-I{sysconfig.get_paths()['include']}", str(SOURCE), "-o", str(out)],
                   check=True, capture_output=True)
    spec = importlib.util.spec_from_file_location("_speedups", out)
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


# -- chunks ------------------------------------------------------------------------------------
texts = st.one_of(st.just(""), st.just(None), st.text(max_size=6), st.sampled_from(["é", "日本", "\u2028", "\"q\"", "\\", "a\nb", "\x00"]))
counts = st.one_of(st.integers(-3, 40), st.just(None), st.sampled_from([5.0, "7", True, 2**70, -0.0]))


def _chunk(api: str, draw) -> dict:
    obj: dict = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    if draw(st.booleans()):
        c0: dict = {"index": 0, "finish_reason": draw(st.sampled_from([None, None, "length", "stop", "abort", 3])), "logprobs": None}
        if api == CHAT:
            delta: dict = {}
            for key in draw(st.lists(st.sampled_from(["content", "reasoning_content", "reasoning", "role", "tool_calls"]), max_size=3, unique=True)):
                delta[key] = "assistant" if key == "role" else None if key == "tool_calls" else draw(texts)
            c0["delta"] = draw(st.sampled_from([delta, delta, delta, None, "x"]))
        else:
            c0["text"] = draw(texts)
        obj["choices"] = draw(st.sampled_from([[c0], [c0], [c0, {"index": 1, "text": "z"}], [], None, [7]]))
    if draw(st.booleans()):
        usage: dict = {"prompt_tokens": draw(counts), "completion_tokens": draw(counts)}
        if draw(st.booleans()):
            usage["prompt_tokens_details"] = draw(st.sampled_from([None, {}, {"cached_tokens": 3}, {"cached_tokens": None}, "x"]))
        obj["usage"] = draw(st.sampled_from([usage, usage, None, []]))
    if draw(st.integers(0, 4)) == 0:
        obj["sim_t"] = draw(st.sampled_from([1712345678.123456, 3, -1.5, "t", None, True, 1e308]))
    if draw(st.integers(0, 8)) == 0:
        obj["error"] = draw(st.sampled_from([None, {"message": "overloaded"}, {"message": "full", "code": 503}, "boom", "", {}, 0, False]))
    return obj


@st.composite
def payload(draw, api: str) -> bytes:
    kind = draw(st.integers(0, 19))
    if kind == 0:
        return b"[DONE]"
    if kind == 1:
        return draw(st.binary(max_size=40)).replace(b"\n", b"")  # garbage
    if kind == 2:  # text surgery on a real chunk: what a fuzzer finds
        raw = json.dumps(_chunk(api, draw)).encode()
        i = draw(st.integers(0, len(raw)))
        return raw[:i] + draw(st.sampled_from([b"", b"}", b",", b"\xff", b"\xed\xa0\x80", b"NaN", b" ", b'"\\u0063ontent":"x",']))  + raw[i:]
    if kind == 3:
        return b'{"choices":[{"delta":{"content":"x"}}],"usage":{"completion_tokens":1},"usage":{"completion_tokens":9}}'  # a duplicate
    if kind == 4:
        return b"[" * 70 + b"]" * 70  # deeper than the C reader goes
    if kind == 5:  # an abort spelled with an escape: Python reads "abort"
        return b'{"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"\\u0061bort"}],"usage":{"completion_tokens":2}}'
    obj = _chunk(api, draw)
    sep = draw(st.sampled_from([(",", ":"), (", ", ": ")]))
    text = json.dumps(obj, separators=sep, ensure_ascii=draw(st.booleans()))
    return draw(st.sampled_from(["", " ", "\t"])).encode() + text.encode() + draw(st.sampled_from([b"", b" ", b"\r"]))


@st.composite
def stream(draw, api: str) -> bytes:
    out = []
    for p in draw(st.lists(payload(api), max_size=12)):
        crlf = draw(st.booleans())
        nl = b"\r\n" if crlf else b"\n"
        if draw(st.integers(0, 9)) == 0:
            out.append(b": keep-alive" + nl)
        if draw(st.integers(0, 14)) == 0 and b"\n" not in p:  # a two-line data field
            half = len(p) // 2
            out.append(b"data: " + p[:half] + nl + b"data:" + p[half:] + nl + nl)
        else:
            out.append(b"data:" + draw(st.sampled_from([b" ", b""])) + p + nl + nl)
    if draw(st.booleans()):
        out.append(b"data: {\"choices\":[{\"delta\":{\"content\":\"tail\"}}]}")  # no blank line at the end
    return b"".join(out)


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c for c in cuts if 0 < c < len(data)})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


def _run(api: str, pieces: list[bytes], fast) -> tuple:
    rec = RequestRecord(rid=1, phase="live", step=0, concurrency=1, t_send=0.0)
    calls: list[tuple] = []
    s = _Stream(rec, make_decoder(api), False, None, lambda t, n: calls.append(("tok", t, n)),  # type: ignore[arg-type]
                lambda lag: calls.append(("lag", round(lag, 9))), 10.0, lambda r: calls.append(("first", r.t_first)), fast)
    reading: bool | str = True
    try:
        for i, piece in enumerate(pieces):
            if not s.feed([(float(i + 1), piece)]):
                reading = False
                break
        if reading:
            s.close()
    except OverflowError as exc:  # a count past 2**63 in a chunk: run_request calls it `other` (both roads alike)
        reading = type(exc).__name__
    s.take_usage()  # as run_request, before its end is told
    return (list(rec.chunk_times), list(rec.chunk_tokens), rec.coalesced, rec.t_first, rec.t_first_answer, rec.input_tokens, rec.http_status,
            rec.usage_reported, rec.cached_tokens, rec.status, rec.error_kind, rec.error_text, rec.max_lag_s,
            s.counted, s.completion_tokens, s.done, s.events, s.first_bytes, reading,
            [c for c in calls if c[0] == "tok"],  # in order; a read's first token and its lags in any order
            sorted((c for c in calls if c[0] != "tok"), key=repr))


def _both(speedups, api: str, pieces: list[bytes]) -> None:
    py = _run(api, pieces, None)
    c = _run(api, pieces, speedups.Splitter(fast_path._MODES[api], sse_mod.MAX_EVENT_BYTES))
    assert c == py


@SETTINGS
@given(st.data())
def test_both_roads_leave_the_same_record_however_the_reads_are_cut(speedups, data):
    api = data.draw(st.sampled_from([CHAT, COMPLETIONS]))
    body = data.draw(stream(api))
    cuts = data.draw(st.lists(st.integers(0, max(len(body), 1)), max_size=8))
    _both(speedups, api, _split(body, cuts))


def test_an_event_past_the_size_limit_fails_both_roads_alike(speedups, monkeypatch):
    monkeypatch.setattr(sse_mod, "MAX_EVENT_BYTES", 300)
    ok = b'data: {"choices":[{"delta":{"content":"a"}}],"usage":{"prompt_tokens":2,"completion_tokens":1}}\n\n'
    for pieces in ([ok + b"data: " + b"x" * 400], [ok, b"data: " + b"y" * 200, b"z" * 200], [b"q" * 301]):
        _both(speedups, CHAT, pieces)
        assert _run(CHAT, pieces, None)[10] == "malformed"  # error_kind


def test_real_captures_through_both_roads(speedups):
    for api, name in ((CHAT, "vllm_chat_stream.txt"), (COMPLETIONS, "vllm_completions_stream.txt")):
        body = (ROOT / "tests" / "fixtures" / name).read_bytes()
        for size in (1, 7, 100, 333, len(body)):
            _both(speedups, api, [body[i:i + size] for i in range(0, len(body), size)])


@SETTINGS
@given(st.data())
def test_a_chunk_judged_in_c_is_judged_as_the_python_decoder_judges_it(speedups, data):
    api = data.draw(st.sampled_from([CHAT, COMPLETIONS]))
    p = data.draw(payload(api))
    got = speedups.read_chunk(p, fast_path._MODES[api])
    if got is None:
        return  # left to the Python road
    content, answer, pt, ct, cached, sim_t = got
    ev = make_decoder(api).__self__.full(p)  # type: ignore[attr-defined]
    assert ev.error is None and not ev.abort
    assert (content, answer) == (ev.content, ev.answer)
    assert (pt if pt >= 0 else None, ct if ct >= 0 else None) == (ev.prompt_tokens, ev.completion_tokens)
    assert (cached if cached >= 0 else None) == ev.cached_tokens
    assert sim_t == ev.sim_t


def test_the_shapes_it_reads_and_the_ones_it_leaves(speedups):
    read = lambda p: speedups.read_chunk(p, 0)  # noqa: E731 - chat
    assert read(b'{"choices":[{"index":0,"delta":{"content":" a"},"finish_reason":null}],'
                b'"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}') == (True, True, 5, 2, -2, None)
    assert read(b'{"choices":[{"delta":{"reasoning_content":"hm","content":null}}]}') == (True, False, -1, -1, -2, None)
    assert read(b'{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":12,"prompt_tokens_details":{"cached_tokens":4}}}') == (False, False, 5, 12, 4, None)
    assert read(b'{"choices":[{"delta":{"content":"x"}}],"sim_t":1712345678.25}') == (True, True, -1, -1, -2, 1712345678.25)
    for odd in (b'{"error":{"message":"x"}}', b'{"choices":[{"delta":{"content":5}}]}', b'{"choices":{"a":1}}',
                b'{"choices":[{"delta":{"\\u0063ontent":"x"}}]}', b'{"a":NaN}', b'{"choices":[{"delta":{"content":"\xff"}}]}',
                b'{"usage":{"prompt_tokens":123456789012345678901234567890}}', b'[1]', b'{"a":1} x', b'{"a":01}'):
        assert read(odd) is None, odd
        try:
            make_decoder(CHAT)(odd)  # the Python road judges them: an Event or MalformedEvent, nothing else
        except MalformedEvent:
            pass


def test_the_c_road_is_taken_only_where_it_reads_the_stream(speedups, monkeypatch):
    monkeypatch.setattr(fast_path, "_speedups", speedups)
    monkeypatch.setattr(fast_path, "AVAILABLE", True)
    assert fast_path.splitter(CHAT, text=False, enabled=True) is not None
    assert fast_path.splitter(COMPLETIONS, text=False, enabled=True) is not None
    assert fast_path.splitter(CHAT, text=True, enabled=True) is None  # multi-turn collects the answer text
    assert fast_path.splitter("generate", text=False, enabled=True) is None
    assert fast_path.splitter(CHAT, text=False, enabled=False) is None  # REDLINE_SPEEDUPS=0
