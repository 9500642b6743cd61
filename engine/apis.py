"""The three streaming APIs redline speaks: request bodies and per-event decoding.

- chat:        POST /v1/chat/completions  (OpenAI; choices[0].delta.content)
- completions: POST /v1/completions       (OpenAI; choices[0].text)
- generate:    POST /generate             (SGLang native; cumulative text, meta_info counts)

Each decoder turns one SSE payload into an `Event`: how many output tokens it carries (a
provisional 1 per content chunk for OpenAI APIs, exact deltas for SGLang), whether it had
content (TTFT ends at the first such event, not at a role-only chunk), usage counts when the
server reports them, and an error text if the server put an error object in the stream.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Callable

CHAT = "chat"
COMPLETIONS = "completions"
GENERATE = "generate"
APIS = (CHAT, COMPLETIONS, GENERATE)

PATHS = {
    CHAT: "/v1/chat/completions",
    COMPLETIONS: "/v1/completions",
    GENERATE: "/generate",
}


class MalformedEvent(ValueError):
    """An SSE payload that is not the JSON object the API promises.

    The only exception a decoder raises, whatever bytes it is given.
    """


@dataclass(slots=True)
class Event:
    tokens: int = 0  # output tokens this event adds (provisional for OpenAI APIs)
    content: bool = False
    prompt_tokens: int | None = None
    completion_tokens: int | None = None  # server's exact total, when it says
    error: str | None = None
    sim_t: float | None = None  # the sim's send time (ground truth for lag)


def build_body(api: str, model: str, prompt: str, max_tokens: int) -> dict[str, Any]:
    """A streaming request that generates exactly `max_tokens` (ignore_eos)."""
    if api in (CHAT, COMPLETIONS):
        body: dict[str, Any] = {"model": model}
        if api == CHAT:
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        body.update(
            max_tokens=max_tokens,
            ignore_eos=True,
            temperature=0.0,
            stream=True,
            stream_options={"include_usage": True},
        )
        return body
    if api == GENERATE:
        return {
            "text": prompt,
            "sampling_params": {"max_new_tokens": max_tokens, "ignore_eos": True, "temperature": 0.0},
            "stream": True,
        }
    raise ValueError(f"unknown api {api!r} (expected one of: {', '.join(APIS)})")


def _loads(payload: bytes) -> dict[str, Any]:
    try:
        obj = json.loads(payload)
    except (ValueError, RecursionError):  # RecursionError: absurdly nested JSON
        raise MalformedEvent(f"not JSON: {payload[:80]!r}") from None
    if not isinstance(obj, dict):
        raise MalformedEvent(f"not a JSON object: {payload[:80]!r}")
    return obj


def _count(v: object) -> int | None:
    """A token count: a non-negative int (not a bool, not a float)."""
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _error_text(obj: dict[str, Any]) -> str | None:
    err = obj.get("error")
    if not err:  # absent, null, false, "", {}: no error
        return None
    if isinstance(err, dict):
        msg = err.get("message") or err.get("type") or err
    else:
        msg = err
    try:
        text = " ".join(str(msg).split())
    except (ValueError, RecursionError):  # pragma: no cover - str() of parsed JSON
        text = "error object in the stream"
    return (text or "error object in the stream")[:200]


def _usage(ev: Event, obj: dict[str, Any]) -> None:
    usage = obj.get("usage")
    if isinstance(usage, dict):
        pt, ct = _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens"))
        if pt is not None:
            ev.prompt_tokens = pt
        if ct is not None:
            ev.completion_tokens = ct


def _sim_t(ev: Event, obj: dict[str, Any]) -> None:
    t = obj.get("sim_t")
    if isinstance(t, (int, float)) and not isinstance(t, bool):
        try:
            f = float(t)
        except OverflowError:  # an int too large for a float
            return
        if math.isfinite(f):
            ev.sim_t = f


# Anything in a chunk that the fast path cannot judge without parsing sends it to json.loads.
_SLOW_MARKERS = (b'"usage"', b'"error"', b'"reasoning', b'"tool_calls"', b'"function_call"')
_NUMBER = frozenset(b"0123456789.eE+-")


class OpenAIDecoder:
    """chat and completions: one content chunk = one provisional token; usage is exact.

    Most chunks are the same small shape ({"choices":[{"delta":{"content":"..."}}]}); the
    client's CPU per token is the ceiling of what redline can measure, so those are read
    without json.loads: a content key found exactly once, empty or not. Every other shape
    (usage, errors, reasoning, tool calls, several choices, anything odd) takes the full
    parse. tests/test_fuzz.py proves both paths give the same Event.
    """

    __slots__ = ("_field", "_key")

    def __init__(self, api: str) -> None:
        self._field = api
        self._key = b'"content":"' if api == CHAT else b'"text":"'

    def decode(self, payload: bytes) -> Event:
        ev = self.fast(payload)
        return ev if ev is not None else self.full(payload)

    def fast(self, payload: bytes) -> Event | None:
        """The Event of a plain content chunk, or None when it needs the full parse."""
        if payload[:1] != b"{" or payload[-1:] != b"}" or b'"choices":[{' not in payload:
            return None
        if payload.count(b"{") != payload.count(b"}") or payload.count(b"[") != payload.count(b"]"):
            return None  # truncated or odd (or braces inside the text): let the parser judge
        for marker in _SLOW_MARKERS:
            if marker in payload:
                return None
        key = self._key
        i = payload.find(key)
        if i < 0 or payload.find(key, i + len(key)) >= 0 or payload.count(b'"index":') > 1:
            return None
        ev = Event()
        if payload[i + len(key) : i + len(key) + 1] != b'"':
            ev.content = True
            ev.tokens = 1
        k = payload.find(b'"sim_t":')
        if k >= 0:
            if payload.find(b'"sim_t":', k + 8) >= 0:
                return None
            j = end = k + 8
            n = len(payload)
            while end < n and payload[end] in _NUMBER:
                end += 1
            if end == j or payload[end : end + 1] not in (b",", b"}"):
                return None
            try:
                t = float(payload[j:end])
            except ValueError:
                return None
            if math.isfinite(t):
                ev.sim_t = t
        return ev

    def full(self, payload: bytes) -> Event:
        obj = _loads(payload)
        ev = Event()
        _sim_t(ev, obj)
        err = _error_text(obj)
        if err is not None:
            ev.error = err
            return ev
        choices = obj.get("choices")
        if choices:
            if not isinstance(choices, list) or not isinstance(choices[0], dict):
                raise MalformedEvent(f"bad choices: {payload[:80]!r}")
            c0 = choices[0]
            if self._field == CHAT:
                delta = c0.get("delta")
                text = delta.get("content") if isinstance(delta, dict) else None
                if not text and isinstance(delta, dict):
                    # reasoning models stream thinking tokens first: they are output tokens
                    text = delta.get("reasoning_content") or delta.get("reasoning")
            else:
                text = c0.get("text")
            if text:
                ev.content = True
                ev.tokens = 1
        _usage(ev, obj)
        return ev


class GenerateDecoder:
    """SGLang /generate: cumulative text, exact completion_tokens in meta_info."""

    __slots__ = ("_tokens", "_text_len")

    def __init__(self) -> None:
        self._tokens = 0
        self._text_len = 0

    def decode(self, payload: bytes) -> Event:
        obj = _loads(payload)
        ev = Event()
        _sim_t(ev, obj)
        err = _error_text(obj)
        if err is not None:
            ev.error = err
            return ev
        meta = obj.get("meta_info")
        text = obj.get("text")
        n_text = len(text) if isinstance(text, str) else self._text_len
        if isinstance(meta, dict):
            ct, pt = _count(meta.get("completion_tokens")), _count(meta.get("prompt_tokens"))
            if pt is not None:
                ev.prompt_tokens = pt
            if ct is not None:
                ev.completion_tokens = ct
                ev.tokens = max(0, ct - self._tokens)
                self._tokens = max(self._tokens, ct)
        elif n_text > self._text_len:
            ev.tokens = 1
        ev.content = ev.tokens > 0 or n_text > self._text_len
        self._text_len = max(self._text_len, n_text)
        return ev


def make_decoder(api: str) -> Callable[[bytes], Event]:
    if api == GENERATE:
        return GenerateDecoder().decode
    if api in (CHAT, COMPLETIONS):
        return OpenAIDecoder(api).decode
    raise ValueError(f"unknown api {api!r} (expected one of: {', '.join(APIS)})")
