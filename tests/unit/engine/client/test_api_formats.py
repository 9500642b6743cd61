"""engine/client/api_formats.py: request bodies, the continuous-usage fallback decision, and the decoders.

- build_body asks for usage on every chunk (stream_options.continuous_usage_stats) unless
  told not to; continuous_usage_refused reads a 400 that names the option.
- The OpenAI decoder reads the chunks real servers send (the vLLM captures in tests/fixtures,
  answer chunks of reasoning models, SGLang's all-fields chunks, usage); the /generate
  decoder's fast path (no parse of the output_ids list) gives exactly the full parse's Event
  on generated variants and on SGLang's own chunks.
- Reasoning: content (a token of any kind) but not answer; the answer flag on answer text.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from redline.engine.client.api_formats import (
    CHAT,
    COMPLETIONS,
    GENERATE,
    Event,
    GenerateDecoder,
    OpenAIDecoder,
    build_body,
    continuous_usage_refused,
    make_decoder,
)
from redline.engine.client.sse import DONE, SSEDecoder

from helpers import FIXTURES, examples


# -- bodies -----------------------------------------------------------------------------------
@pytest.mark.parametrize("api", [CHAT, COMPLETIONS])
def test_openai_bodies_ask_for_continuous_usage_unless_told_not_to(api):
    b = build_body(api, "m", "hi", 7)
    assert b["stream"] is True and b["max_tokens"] == 7 and b["ignore_eos"] is True
    assert b["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    off = build_body(api, "m", "hi", 7, continuous_usage=False)
    assert off["stream_options"] == {"include_usage": True}
    b["stream_options"]["x"] = 1  # each body has its own dict
    assert build_body(api, "m", "hi", 7)["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}


def test_generate_body_is_unchanged_by_the_option():
    assert build_body(GENERATE, "m", "hi", 7) == build_body(GENERATE, "m", "hi", 7, continuous_usage=False)
    assert "stream_options" not in build_body(GENERATE, "m", "hi", 7)


@pytest.mark.parametrize("status,text,refused", [
    # vLLM / pydantic (extra="forbid"), as run_request writes it
    (400, "HTTP 400: [{'type': 'extra_forbidden', 'loc': ('body', 'stream_options', 'continuous_usage_stats'), "
          "'msg': 'Extra inputs are not permitted'}]", True),
    (400, "HTTP 400: Unrecognized request argument supplied: continuous_usage_stats", True),
    (400, "HTTP 400: stream_options is not supported", True),
    (422, "HTTP 422: body.stream_options.continuous_usage_stats: extra fields not permitted", True),
    (400, "HTTP 400: This model's maximum context length is 4096 tokens", False),
    (400, "", False),
    (500, "HTTP 500: continuous_usage_stats crashed the server", False),
    (429, "HTTP 429: stream_options rate limited", False),
    (0, "connection refused", False),
])
def test_continuous_usage_refused(status, text, refused):
    assert continuous_usage_refused(status, text) is refused


# -- the decoders ---------------------------------------------------------------------------
def both(api: str, payload: bytes, fast_path: bool = True) -> Event:
    """decode()'s Event (one path: the full parse; `fast_path` names the shapes an earlier
    byte scan took, kept so the cases read as before)."""
    return OpenAIDecoder(api).decode(payload)


def dumps(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def vllm_chunk(delta: dict, usage: dict | None = None, **extra) -> bytes:
    obj = {"id": "chatcmpl-b92a", "object": "chat.completion.chunk", "created": 1, "model": "m",
           "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None, "token_ids": None}]}
    if usage is not None:
        obj["usage"] = usage
    obj.update(extra)
    return dumps(obj)


def sglang_chunk(content=None, reasoning=None, usage=None) -> bytes:
    """SGLang's pydantic model_dump_json(): every field, null when unused."""
    return dumps({"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m",
                  "choices": [{"index": 0, "delta": {"role": None, "content": content, "reasoning_content": reasoning,
                                                     "tool_calls": None},
                               "logprobs": None, "finish_reason": None, "matched_stop": None}],
                  "usage": usage})


def test_the_real_vllm_captures():
    for api, name in ((CHAT, "vllm_chat_stream.txt"), (COMPLETIONS, "vllm_completions_stream.txt")):
        payloads = SSEDecoder().feed((FIXTURES / name).read_bytes())
        assert payloads[-1] == DONE
        d = OpenAIDecoder(api)
        evs = [d.decode(p) for p in payloads[:-1]]
        assert sum(e.tokens for e in evs) == 12 and all(e.answer == e.content for e in evs)
        assert [e.completion_tokens for e in evs if e.completion_tokens is not None] == [12]


def test_continuous_usage_chunks_are_read_exactly():
    """Chunks with usage counts are read exactly."""
    d = OpenAIDecoder(CHAT)
    u = {"prompt_tokens": 15, "total_tokens": 18, "completion_tokens": 3}
    p = vllm_chunk({"content": "ab"}, u)
    assert d.decode(p) == Event(tokens=1, content=True, answer=True, prompt_tokens=15, completion_tokens=3)
    ev = d.decode(vllm_chunk({"role": "assistant", "content": ""}, dict(u, completion_tokens=0, total_tokens=15)))
    assert not ev.content and ev.completion_tokens == 0 and ev.prompt_tokens == 15
    ev = OpenAIDecoder(COMPLETIONS).decode(dumps({"id": "cmpl-1", "choices": [{"index": 0, "text": "x", "finish_reason": None}],
                                                  "usage": u, "sim_t": 1700000000.25}))
    assert ev.completion_tokens == 3 and ev.sim_t == 1700000000.25 and ev.answer


def test_sglang_chunks():
    """SGLang writes every field, null when unused (0.5.9's pydantic: reasoning_content,
    tool_calls, usage; 0.5.23's msgspec: reasoning_content): a null is nothing (issue 43 case 11)."""
    assert both(CHAT, sglang_chunk(content="hi")) == Event(tokens=1, content=True, answer=True)
    assert both(CHAT, sglang_chunk(reasoning="hmm"), False) == Event(tokens=1, content=True, answer=False)
    assert both(CHAT, sglang_chunk()) == Event()
    ev = both(CHAT, sglang_chunk(content="hi", usage={"prompt_tokens": 4, "total_tokens": 9, "completion_tokens": 5}), False)
    assert ev.completion_tokens == 5 and ev.prompt_tokens == 4 and ev.answer


def test_reasoning_is_content_not_answer():
    for delta in ({"reasoning_content": "Let"}, {"reasoning": "Let"}, {"reasoning": "Let", "reasoning_content": "Let"},
                  {"content": None, "reasoning_content": "Let"}, {"content": "", "reasoning": "Let"}):
        ev = both(CHAT, vllm_chunk(delta), False)
        assert ev.content and not ev.answer and ev.tokens == 1, delta
    ev = both(CHAT, vllm_chunk({"reasoning_content": None, "content": "The"}))  # null: the fast path
    assert ev.content and ev.answer
    assert both(CHAT, vllm_chunk({"reasoning": "", "content": ""}), False) == Event()
    # answer chunks of a reasoning model (vLLM leaves the reasoning field out) are plain
    assert both(CHAT, vllm_chunk({"content": "The"})) == Event(tokens=1, content=True, answer=True)
    assert both(CHAT, vllm_chunk({"content": None})) == Event()


def test_shapes_with_usage_errors_and_tool_calls():
    d = OpenAIDecoder(CHAT)
    cases = [
        vllm_chunk({"content": "x"}, {"prompt_tokens": 3, "completion_tokens": 4, "prompt_tokens_details": {"cached_tokens": 1}}),
        vllm_chunk({"content": "x"}, {"prompt_tokens": 3, "completion_tokens": 4.0}),  # a float is not a count
        vllm_chunk({"content": None, "tool_calls": [{"index": 0, "function": {"name": "f"}}]}),
        vllm_chunk({"content": "x"}, error={"message": "boom"}),
    ]
    assert [d.decode(p).completion_tokens for p in cases] == [4, None, None, None]
    assert d.decode(cases[0]).cached_tokens == 1 and d.decode(cases[3]).error == "boom"


def test_generate_events_are_answers():
    d = GenerateDecoder()
    ev = d.decode(dumps({"text": "ab", "meta_info": {"completion_tokens": 3, "prompt_tokens": 5}}))
    assert ev.content and ev.answer and ev.tokens == 3 and ev.completion_tokens == 3
    ev = d.decode(dumps({"text": "abc", "meta_info": {"completion_tokens": 3}}))
    assert ev.content and ev.tokens == 0  # text without a new token: bench_serving skips it in ITL
    assert make_decoder(GENERATE)(dumps({"text": "", "meta_info": {"completion_tokens": 0}})) == Event(completion_tokens=0)


# -- property: the fast path equals the full parse on the shapes above and their variants --------
_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=8) | st.sampled_from(
    ['"', "\\", "{", "}", "[", "]", '"content":"', '"usage":{', "null", "\u00e9"])
_maybe_text = st.one_of(_text, st.just(""), st.none())
_count = st.one_of(st.integers(0, 10**6), st.none(), st.just(-1), st.just(2.5), st.just(True))


# -- /generate: the fast path skips the output_ids list and agrees with the full parse -------------
@st.composite
def _generate_chunk(draw):
    obj: dict = {}
    meta: dict = {}
    for key in draw(st.permutations(["id", "finish_reason", "prompt_tokens", "completion_tokens", "cached_tokens", "e2e_latency"])):
        if draw(st.booleans()):
            meta[key] = {"finish_reason": draw(st.sampled_from([None, {"type": "length", "length": 4},
                                                                {"type": "abort", "status_code": 503, "message": "full"}])),
                         "id": draw(_text), "e2e_latency": 0.5}.get(key, draw(_count))
    parts = {"text": draw(_maybe_text), "output_ids": draw(st.lists(st.integers(0, 200_000), max_size=6)),
             "meta_info": meta if draw(st.integers(0, 9)) else draw(st.sampled_from([None, [], "m"]))}
    for key in draw(st.permutations(["text", "output_ids", "meta_info"])):
        if draw(st.integers(0, 7)):
            obj[key] = parts[key]
    if draw(st.booleans()):
        obj["sim_t"] = draw(st.floats(min_value=0, max_value=2e9, allow_nan=False))
    if draw(st.integers(0, 6)) == 0:
        obj["error"] = draw(st.sampled_from([None, {"message": "x", "code": 400}, "bad"]))
    if draw(st.integers(0, 6)) == 0:
        obj["index"] = 0
    seps = draw(st.sampled_from([(",", ":"), (",", ":"), (", ", ": ")]))
    payload = json.dumps(obj, separators=seps, ensure_ascii=draw(st.booleans())).encode()
    if draw(st.integers(0, 5)) == 0:
        payload = payload[: draw(st.integers(0, len(payload)))]
    return payload, draw(st.booleans()), draw(st.integers(0, 3))


@settings(max_examples=examples(1500), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_generate_chunk())
def test_generate_fast_path_equals_the_full_parse(case):
    payload, text, seen = case
    a, b = GenerateDecoder(text), GenerateDecoder(text)
    for d in (a, b):  # the same state before: `seen` tokens and text so far
        d._tokens, d._text_len = seen, seen
    fast = a.fast(payload)
    if fast is None:
        return
    assert fast == b.full(payload), payload
    assert (a._tokens, a.text_len(), a._incremental) == (b._tokens, b.text_len(), b._incremental)


@pytest.mark.parametrize("version,incremental", [("0.5.9", False), ("0.5.23", False), ("0.5.23", True)])
def test_sglangs_generate_chunks_take_the_fast_path(version, incremental):
    """The sim's /generate chunks as each version writes them (the whole output_ids list in
    every chunk; 0.5.23's incremental deltas): every one decoded without the list's parse, the
    counts exact, and a text decoder's text the whole answer, incremental output joined."""
    import random

    from redline.engine.sim.chunks import GenerateShape
    from redline.engine.sim.wire import GenerationRequest

    req = GenerationRequest(api="generate", model="m", prompt_tokens=9, max_tokens=40, stream=True, include_usage=False)
    shape = GenerateShape("ab" * 16, 1, req, version, incremental=incremental, rng=random.Random(1))
    words = [f" w{i}" for i in range(40)]
    payloads = [shape.token_events(w, 1, i + 1, i == 39)[0] + b',"sim_t":1.5}' for i, w in enumerate(words)]
    plain, texts = GenerateDecoder(), GenerateDecoder(text=True)
    evs = []
    for p in payloads:
        ev = plain.fast(p)
        assert ev is not None, p[:80]
        evs.append(ev)
        last = texts.fast(p)
        assert last is not None
    assert [e.tokens for e in evs] == [1] * 40 and evs[-1].completion_tokens == 40 and all(e.sim_t == 1.5 for e in evs)
    assert last.text == "".join(words)
