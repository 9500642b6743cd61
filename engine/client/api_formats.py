"""The three streaming APIs redline speaks: request bodies and per-event decoding.

- chat:        POST /v1/chat/completions  (OpenAI; choices[0].delta.content)
- completions: POST /v1/completions       (OpenAI; choices[0].text)
- generate:    POST /generate             (SGLang native; cumulative text, meta_info counts)

Each decoder turns one SSE payload into an `Event`: how many output tokens it carries (a
provisional 1 per content chunk for OpenAI APIs, exact deltas for SGLang), whether it had
content of any kind (reasoning or answer: TTFT ends at the first such event, not at a
role-only chunk) and whether it had answer content (the time to the first answer token),
usage counts when the server reports them (cumulative: with `continuous_usage_stats` on
every chunk), and an error text if the server put an error object in the stream.

A decoder made with `make_decoder(api, text=True)` also puts the answer text on the Event
(`Event.text`: chat delta.content, completions choices[0].text, /generate's cumulative
`text`), for multi-turn sessions that send the server's answers back; reasoning text is not
answer text. The default decoders never read the text (no cost on the per-token path).
"""

from __future__ import annotations

import json
import json.scanner
import math
import re
from dataclasses import dataclass
from json.decoder import scanstring
from typing import Any, Callable

from ..text import one_line

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
    content: bool = False  # a token of any kind: reasoning or answer
    prompt_tokens: int | None = None
    completion_tokens: int | None = None  # server's exact total, when it says
    error: str | None = None
    sim_t: float | None = None  # the sim's send time (ground truth for lag)
    answer: bool = False  # answer content (chat: delta.content; not reasoning)
    # the answer text, only from a decoder made with text=True (else None); /generate: the
    # whole text so far (cumulative), the OpenAI APIs: this chunk's piece
    text: str | None = None
    # prompt tokens the server found in its prefix cache: usage.prompt_tokens_details.cached_tokens
    # (vLLM --enable-prompt-tokens-details, SGLang --enable-cache-report), /generate's
    # meta_info.cached_tokens; None when the server does not say
    cached_tokens: int | None = None
    # the server ended the request inside the stream: an in-stream abort (a choice's
    # finish_reason "abort", /generate's meta_info.finish_reason.type "abort"; `error` then
    # holds its message, when it gives one). An abort event still counts its tokens.
    abort: bool = False
    # the status the server gave inside the stream: an error event's `code`, an abort's
    # `status_code` (SGLang: 503 when it sheds load); None when it gives none
    status: int | None = None


# stream_options for OpenAI APIs. continuous_usage_stats (vLLM, SGLang) puts the cumulative
# usage on every chunk, so tokens are credited exactly as they arrive; include_usage alone
# gives one usage chunk at the end.
STREAM_OPTIONS = {"include_usage": True}
STREAM_OPTIONS_CONTINUOUS = {"include_usage": True, "continuous_usage_stats": True}


def build_body(
    api: str,
    model: str,
    prompt: str,
    max_tokens: int,
    continuous_usage: bool = True,
    messages: list[dict[str, str]] | None = None,
    extra: dict[str, Any] | None = None,
    ignore_eos: bool = True,
) -> dict[str, Any]:
    """A streaming request that generates exactly `max_tokens` (ignore_eos).

    `extra` (--extra-body, checked by engine/workload/request_shape.py check_extra_body: none
    of the keys written here): merged into the body; for /generate its `sampling_params`
    merges into the request's own. `ignore_eos=False` (--no-ignore-eos): the server may stop
    at EOS (chat, completions: the key left out; /generate: sampling_params.ignore_eos false).

    `messages` (chat only): the whole conversation ({"role", "content"} dicts, see
    engine/load/conversation.py), sent instead of the single user message `prompt`; the other
    APIs ignore it (their `prompt` is the transcript).
    `continuous_usage`: ask for usage on every chunk (chat and completions; /generate always
    reports its count in meta_info). A server that refuses it answers HTTP 400 (see
    `continuous_usage_refused`): build the body again with `continuous_usage=False`.
    """
    if api in (CHAT, COMPLETIONS):
        body: dict[str, Any] = {"model": model}
        if api == CHAT:
            body["messages"] = messages if messages is not None else [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        body["max_tokens"] = max_tokens
        if ignore_eos:
            body["ignore_eos"] = True
        body.update(
            temperature=0.0,
            stream=True,
            stream_options=dict(STREAM_OPTIONS_CONTINUOUS if continuous_usage else STREAM_OPTIONS),
        )
        if extra:
            body.update(extra)
        return body
    if api == GENERATE:
        sp = {"max_new_tokens": max_tokens, "ignore_eos": ignore_eos, "temperature": 0.0}
        body = {"text": prompt, "sampling_params": sp, "stream": True}
        if extra:
            body.update(extra)
            more = extra.get("sampling_params")
            body["sampling_params"] = {**sp, **more} if isinstance(more, dict) else sp
        return body
    raise ValueError(f"unknown api {api!r} (expected one of: {', '.join(APIS)})")


# Words in a 400/422 answer that say the server rejected the stream_options we sent (vLLM,
# SGLang, OpenAI-style "Unrecognized request argument", pydantic "Extra inputs are not
# permitted" with the field's location).
_USAGE_OPTION_WORDS = ("continuous_usage_stats", "stream_options", "continuous usage")


def continuous_usage_refused(http_status: int, error_text: str) -> bool:
    """True when an HTTP error says the server refused `stream_options.continuous_usage_stats`.

    `http_status` / `error_text` are a failed RequestRecord's (`rec.http_status`,
    `rec.error_text`) for a body built with `continuous_usage=True`. Only a client error that
    names the option counts: 400 (vLLM, SGLang, OpenAI) or 422 (FastAPI's validation error).
    Then send again with `build_body(..., continuous_usage=False)`.
    """
    if http_status not in (400, 422) or not error_text:
        return False
    text = error_text.lower()
    return any(w in text for w in _USAGE_OPTION_WORDS)


# The C scanner json.loads ends in (the default decoder's: NaN, Infinity, strict strings).
# For a small chunk json.loads's own wrapping (encoding detection, decode, two whitespace
# regexes, raw_decode) costs more than the parse: an object goes straight to the scanner.
_scan_once = json.scanner.make_scanner(json.JSONDecoder())


def _loads(payload: bytes) -> dict[str, Any]:
    if payload[:1] == b"{":
        try:  # a UTF-8 object with nothing after it: exactly what json.loads returns
            text = payload.decode("utf-8")
            obj, end = _scan_once(text, 0)
        except (ValueError, RecursionError, StopIteration):
            pass  # json.loads judges it (and words the error)
        else:
            if end == len(text):
                return obj
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
        text = one_line(msg)
    except (ValueError, RecursionError):  # pragma: no cover - str() of parsed JSON
        text = "error object in the stream"
    return (text or "error object in the stream")[:200]


def _status(v: object) -> int | None:
    """An HTTP status given inside a stream (SGLang's error `code`, an abort's `status_code`):
    an int from 100 to 599, else None."""
    return v if isinstance(v, int) and not isinstance(v, bool) and 100 <= v <= 599 else None


def _error_status(obj: dict[str, Any]) -> int | None:
    err = obj.get("error")
    return _status(err.get("code")) if isinstance(err, dict) else None


def _usage(ev: Event, obj: dict[str, Any]) -> None:
    usage = obj.get("usage")
    if isinstance(usage, dict):
        # `type(v) is int and v >= 0` first: what JSON gives (never a bool), _count's answer
        # without its call; anything else is _count's to judge
        pt, ct = usage.get("prompt_tokens"), usage.get("completion_tokens")
        if not (type(pt) is int and pt >= 0):
            pt = _count(pt)
        if not (type(ct) is int and ct >= 0):
            ct = _count(ct)
        if pt is not None:
            ev.prompt_tokens = pt
        if ct is not None:
            ev.completion_tokens = ct
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict):
            ev.cached_tokens = _count(details.get("cached_tokens"))


def _sim_t(ev: Event, obj: dict[str, Any]) -> None:
    t = obj.get("sim_t")
    if type(t) is float:  # JSON's number with a fraction: float(t) is t itself
        if math.isfinite(t):
            ev.sim_t = t
        return
    if isinstance(t, (int, float)) and not isinstance(t, bool):
        try:
            f = float(t)
        except OverflowError:  # an int too large for a float
            return
        if math.isfinite(f):
            ev.sim_t = f


# Anything in a chunk that the fast path does not judge sends it to json.loads: usage counts
# (every chunk under continuous usage), errors, an in-stream abort (finish_reason "abort"),
# reasoning, tool calls. Scanning those shapes here was measured slower than json.loads itself
# (issue 13 notes), so they go straight there. The same keys written null are nothing to judge:
# SGLang writes "reasoning_content":null on every chunk (0.5.9 also "tool_calls":null and
# "usage":null, pydantic's every field; engine/sim/chunks.py), so a marker followed by :null
# is passed over (a key inside the content cannot match: its quotes are escaped there).
_SLOW_KEYS = (b"usage", b"error", b"reasoning[a-z_]*", b"tool_calls", b"function_call")
# any of them (a key, its closing quote right after its letters, not null) or "abort", in one
# scan: 0.48 us of CPU on a 220-byte chunk where a loop of `in` over the markers took 1.3
_SLOW = re.compile(b'"(?:' + b"|".join(_SLOW_KEYS) + b')"(?!:null[,}])|"abort"').search
_END = (b",", b"}")
_NUM_CHARS = b"0123456789.eE+-"


def _str_field(payload: bytes, key: bytes) -> int:
    """A string field by its quoted key, found at most once: 0 when absent, null or "",
    1 when a non-empty string, -1 for anything the fast path does not judge."""
    i = payload.find(key)
    if i < 0:
        return 0
    j = i + len(key)
    if payload[j : j + 1] != b":" or payload.find(key, j) >= 0:
        return -1
    c = payload[j + 1 : j + 2]
    if c == b'"':
        return 0 if payload[j + 2 : j + 3] == b'"' else 1
    if c == b"n" and payload[j + 1 : j + 5] == b"null" and payload[j + 5 : j + 6] in _END:
        return 0
    return -1


def _value_end(payload: bytes, j: int) -> int:
    """Where a scalar value starting at j ends: the next comma or closing brace."""
    e = payload.find(b",", j)
    b = payload.find(b"}", j)
    return b if e < 0 or (0 <= b < e) else e


class OpenAIDecoder:
    """chat and completions: one content chunk = one provisional token; usage is exact.

    Most chunks are the same small shape ({"choices":[{"delta":{"content":"..."}}]}); the
    client's CPU per token is the ceiling of what redline can measure, so those are read
    without json.loads: the text key (content / text) found at most once, a string or null.
    Every other shape (usage, errors, reasoning, tool calls, several choices, anything odd)
    takes the full parse. tests/test_fuzz.py and tests/test_apis.py prove both paths give
    the same Event.
    """

    __slots__ = ("_field", "_key", "_text", "_usage")

    def __init__(self, api: str) -> None:
        self._field = api
        self._key = b'"content"' if api == CHAT else b'"text"'
        self._text = False  # OpenAITextDecoder: put the answer text on the Event
        self._usage = False  # this stream's chunks carry usage: the fast path would give way

    def decode(self, payload: bytes) -> Event:
        # Under continuous usage (what redline asks for) every chunk carries "usage", which
        # the fast path leaves to the full parse: once the stream has shown usage, its chunks
        # go straight to the full parse.
        if not self._usage:
            ev = self.fast(payload)
            if ev is not None:
                return ev
        ev = self.full(payload)
        if ev.completion_tokens is not None:
            self._usage = True
        return ev

    def fast(self, payload: bytes) -> Event | None:
        """The Event of a plain content chunk, or None when it needs the full parse."""
        if payload[:1] != b"{" or payload[-1:] != b"}":
            return None
        if _SLOW(payload) is not None:
            return None
        if b'"choices":[{' not in payload or payload.count(b'"index":') > 1:
            return None
        if payload.count(b"{") != payload.count(b"}") or payload.count(b"[") != payload.count(b"]"):
            return None  # truncated or odd (or braces inside the text): let the parser judge
        a = _str_field(payload, self._key)
        if a < 0:
            return None
        ev = Event()
        if a:
            ev.content = ev.answer = True
            ev.tokens = 1
        k = payload.find(b'"sim_t"')
        if k >= 0:
            j = k + 7
            if payload[j : j + 1] != b":" or payload.find(b'"sim_t"', j) >= 0:
                return None
            j += 1
            v = payload[j : _value_end(payload, j)]
            if not v or v.translate(None, _NUM_CHARS):
                return None
            try:
                t = float(v)
            except ValueError:
                return None
            if math.isfinite(t):
                ev.sim_t = t
        return ev

    def full(self, payload: bytes) -> Event:
        obj = _loads(payload)
        ev = Event()
        if "sim_t" in obj:
            _sim_t(ev, obj)
        if obj.get("error"):
            ev.error = _error_text(obj)
            ev.status = _error_status(obj)
            return ev
        choices = obj.get("choices")
        if choices:
            if not isinstance(choices, list) or not isinstance(choices[0], dict):
                raise MalformedEvent(f"bad choices: {payload[:80]!r}")
            c0 = choices[0]
            text = None
            if self._field == CHAT:
                delta = c0.get("delta")
                if isinstance(delta, dict):
                    text = delta.get("content")
                    ev.answer = bool(text)
                    # reasoning models stream thinking tokens first: they are output tokens,
                    # and the first of them ends TTFT (vLLM: reasoning / reasoning_content)
                    ev.content = ev.answer or bool(delta.get("reasoning_content") or delta.get("reasoning"))
            else:
                text = c0.get("text")
                ev.content = ev.answer = bool(text)
            if c0.get("finish_reason") == "abort":  # the server aborted it in the stream
                ev.abort = True
            if ev.content:
                ev.tokens = 1
            if self._text and ev.answer and isinstance(text, str):
                ev.text = text
        _usage(ev, obj)
        return ev


class OpenAITextDecoder(OpenAIDecoder):
    """OpenAIDecoder that also puts each chunk's answer text on the Event (`Event.text`).

    A subclass, so the plain decoder's fast path stays as it is: only requests that collect
    their answer (multi-turn) pay for the text. The fast path reads the JSON string in place
    (json's own scanstring, escapes decoded exactly as json.loads does).
    """

    __slots__ = ("_skey",)

    def __init__(self, api: str) -> None:
        super().__init__(api)
        self._text = True
        self._skey = self._key.decode() + ':"'

    def fast(self, payload: bytes) -> Event | None:
        ev = OpenAIDecoder.fast(self, payload)
        if ev is None or not ev.answer:
            return ev
        try:  # the fast path found the key once, its value a non-empty string
            s = payload.decode("utf-8")
            i = s.find(self._skey)
            if i < 0:
                return None
            ev.text = scanstring(s, i + len(self._skey))[0]
        except ValueError:  # bad UTF-8 or a bad string: the full parse judges
            return None
        return ev


class GenerateDecoder:
    """SGLang /generate: cumulative text, exact completion_tokens in meta_info.

    `text=True`: Event.text is the whole text so far (the chunk's `text`, cumulative; SGLang
    0.5.23 with --incremental-streaming-output sends each chunk's delta instead, told by its
    output_ids holding fewer ids than completion_tokens counts: the deltas are joined).

    SGLang puts the whole ``output_ids`` list and the text so far in every chunk
    (``tokenizer_manager.py _handle_batch_output``): parsing the list costs the client a Python
    int per id, O(n) a chunk, O(n^2) an answer. The fast path reads the text (json's own C
    scanstring: what a chunk without the list costs too), ``meta_info`` (found as the last
    top-level key, its quote unescaped, which no string value can hold) and what follows it,
    and never the list (counted, by its commas, only for a text decoder, to tell incremental
    output); every other shape takes the full parse. tests/test_apis.py and tests/test_fuzz.py
    prove both give the same Event.
    """

    __slots__ = ("_tokens", "_text_len", "_text", "_incremental", "_joined")

    def __init__(self, text: bool = False) -> None:
        self._tokens = 0
        self._text_len = 0
        self._text = text
        self._incremental = False  # the chunks' text is a delta (0.5.23 incremental output)
        self._joined = ""  # ... joined

    def decode(self, payload: bytes) -> Event:
        ev = self.fast(payload)
        return ev if ev is not None else self.full(payload)

    def fast(self, payload: bytes) -> Event | None:
        """The Event of a chunk shaped as SGLang writes it, or None for the full parse."""
        i = payload.rfind(_META_KEY)
        if i < 0 or payload[:1] != b"{" or _ERROR_KEY in payload[:i]:
            return None
        try:
            s = payload[i + len(_META_KEY) - 1:].decode("utf-8")
            meta, end = _scan_once(s, 0)
        except (ValueError, RecursionError, StopIteration):
            return None
        if not isinstance(meta, dict):
            return None
        rest = s[end:]
        tail: dict[str, Any] = {}
        if rest != "}":
            if rest[:1] != "," or rest[-1:] != "}":
                return None
            try:
                tail = json.loads("{" + rest[1:])
            except (ValueError, RecursionError):
                return None
            if not isinstance(tail, dict) or tail.get("error") or "meta_info" in tail or "text" in tail:
                return None
        ct = meta.get("completion_tokens")
        ids = -1
        if payload[:9] == b'{"text":"':
            try:
                text, j = scanstring(payload[:i].decode("utf-8"), 9)
            except ValueError:
                return None
            if self._text and not self._incremental and type(ct) is int and ct > 1:
                ids = _ids_count(payload, 9, i)
        elif payload[:13] == b'{"text":null,':
            text = None
        else:
            return None
        ev = Event()
        if "sim_t" in tail:
            _sim_t(ev, tail)
        return self._event(ev, meta, text, ids)

    def full(self, payload: bytes) -> Event:
        obj = _loads(payload)
        ev = Event()
        _sim_t(ev, obj)
        err = _error_text(obj)
        if err is not None:
            ev.error = err
            ev.status = _error_status(obj)
            return ev
        meta = obj.get("meta_info")
        ids = obj.get("output_ids")
        return self._event(ev, meta if isinstance(meta, dict) else None, obj.get("text"), len(ids) if isinstance(ids, list) else -1)

    def _event(self, ev: Event, meta: dict[str, Any] | None, text: Any, ids: int) -> Event:
        """The Event of a chunk's meta_info and text; ``ids``: how many output_ids it carried
        (-1: not counted)."""
        n_text = len(text) if isinstance(text, str) else self._text_len
        if meta is not None:
            finish = meta.get("finish_reason")
            if isinstance(finish, dict) and finish.get("type") == "abort":
                # SGLang's in-stream abort: {"type": "abort", "status_code": 503, "message": ...}
                ev.abort = True
                ev.status = _status(finish.get("status_code"))
                msg = finish.get("message")
                if isinstance(msg, str) and msg.strip():
                    ev.error = one_line(msg)[:200]
            ct, pt = _count(meta.get("completion_tokens")), _count(meta.get("prompt_tokens"))
            if pt is not None:
                ev.prompt_tokens = pt
            ev.cached_tokens = _count(meta.get("cached_tokens"))
            if ct is not None:
                ev.completion_tokens = ct
                ev.tokens = max(0, ct - self._tokens)
                self._tokens = max(self._tokens, ct)
                if self._text and 0 < ids < ct:  # fewer ids than tokens: each chunk carries its own (incremental)
                    self._incremental = True
        elif n_text > self._text_len:
            ev.tokens = 1
        ev.content = ev.answer = ev.tokens > 0 or n_text > self._text_len
        self._text_len = max(self._text_len, n_text)
        if self._text and isinstance(text, str):
            if self._incremental:
                self._joined += text
                ev.text = self._joined
            else:
                self._joined = text
                ev.text = text
        return ev


_META_KEY = b',"meta_info":{'
_ERROR_KEY = b'"error"'


def _ids_count(payload: bytes, start: int, end: int) -> int:
    """How many ids the chunk's output_ids list (between its text and its meta_info) holds."""
    j = payload.find(b'"output_ids":[', start, end)
    if j < 0:
        return -1
    k = payload.find(b"]", j, end)
    body = payload[j + 14:k]
    return body.count(b",") + 1 if body.strip() else 0


def make_decoder(api: str, text: bool = False) -> Callable[[bytes], Event]:
    """The per-request decoder of `api`; `text=True`: with the answer text (Event.text)."""
    if api == GENERATE:
        return GenerateDecoder(text).decode
    if api in (CHAT, COMPLETIONS):
        return (OpenAITextDecoder(api) if text else OpenAIDecoder(api)).decode
    raise ValueError(f"unknown api {api!r} (expected one of: {', '.join(APIS)})")
