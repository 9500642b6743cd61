"""The streamed chunks and whole bodies of the three generation APIs, as each SGLang version
writes them.

An event is built as the bytes of a JSON object *without* its closing brace: the writer
(engine/sim/http_app.py) appends the sim's send time, ``,"sim_t":T}``, at the moment of the
write (the ground truth of when each byte left). Read from the wheels:

- **chat** (``srt/entrypoints/openai/serving_chat.py`` ``_generate_chat_stream``): the first
  output of the request gives a role chunk (``delta`` role "assistant", content ""), then each
  output its content delta; ``finish_reason`` comes in a chunk of its own after the last
  token; with ``include_usage`` a usage chunk (``choices: []``) ends it. 0.5.9 writes every
  chunk through pydantic (``ChatCompletionStreamResponse.model_dump_json``): every field,
  ``"reasoning_content":null,"tool_calls":null`` in each delta and ``"usage":null`` on each
  chunk. 0.5.23 writes the role, content and finish chunks with msgspec (``sse_utils.py``
  ``build_sse_content``: ``omit_defaults``, but ``reasoning_content`` always, null) and the
  usage chunk through pydantic. Continuous usage (``stream_options.continuous_usage_stats``):
  ``UsageInfo`` on each content chunk; 0.5.9 never puts cached tokens there, 0.5.23 does with
  ``--enable-cache-report``. With ``reasoning_tokens`` (a ``--reasoning-parser`` model) the first
  tokens come as ``delta.reasoning_content``. 0.5.23 answers a stream only once its first chunk
  exists (``_handle_streaming_request`` awaits it before the 200 is sent: the headers come
  with the first token); 0.5.9 sends the 200 at once.
- **completions** (``serving_completions.py``): one chunk per output, ``finish_reason`` on the
  last one's choice, ``"usage":null`` (pydantic) unless continuous usage; the usage chunk at
  the end.
- **/generate** (``srt/entrypoints/http_server.py`` ``generate_request``,
  ``managers/tokenizer_manager.py`` ``_handle_batch_output``): ``{"text", "output_ids",
  "meta_info"}``, the text so far and **the whole ``output_ids`` list** in every chunk (0.5.23
  with ``--incremental-streaming-output``: this chunk's text and ids only); ``meta_info``:
  ``id``, ``finish_reason``, ``prompt_tokens``, ``weight_version``, 0.5.9 ``total_retractions``
  / 0.5.23 ``num_retractions``, the timing fields of ``--enable-metrics``, ``completion_tokens``,
  ``cached_tokens`` (0.5.23 also ``reasoning_tokens``), and at the end ``e2e_latency``.

Token ids are drawn per request from its own seeded generator (the sim's texts are its own
words, so the ids are only the right shape).
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

from .wire import GenerationRequest

__all__ = ["ChatShape", "CompletionShape", "GenerateShape", "ResponseShape", "make_shape", "obj_event"]

_DUMPS = json.JSONEncoder(separators=(",", ":")).encode


def obj_event(obj: dict[str, Any], compact: bool = True) -> bytes:
    """An event of a JSON object, without its closing brace (the writer adds sim_t)."""
    text = _DUMPS(obj) if compact else json.dumps(obj)
    return text[:-1].encode()


class ResponseShape:
    """The chunks and the whole body of one response (one subclass per API)."""

    #: 0.5.23's OpenAI routes send the 200 only with their first chunk
    headers_at_first_token = False

    def __init__(self, rid: str, created: int, req: GenerationRequest, version: str, *, cache_report: bool = False,
                 reasoning: int = 0, incremental: bool = False, rng: random.Random | None = None) -> None:
        self.rid = rid
        self.created = created
        self.req = req
        self.version = version
        self.v9 = version == "0.5.9"
        self.cache_report = cache_report  # usage carries prompt_tokens_details.cached_tokens
        self.cached_tokens = 0  # prompt tokens found in the prefix cache (set once admitted)
        self.reasoning = reasoning  # the first tokens that are reasoning (chat)
        self.incremental = incremental
        self.retractions = 0
        self.queue_time: float | None = None
        self.t_arrive = time.time()
        self.first_token_s: float | None = None
        self._rng = rng or random.Random(rid)

    def usage(self, completion_tokens: int, continuous: bool = False) -> dict[str, Any]:
        """SGLang's UsageInfo (``usage_processor.py``): with the cache report,
        prompt_tokens_details.cached_tokens (0.5.9: never on a continuous chunk)."""
        p = self.req.prompt_tokens
        details = None
        if self.cache_report and not (continuous and self.v9):
            details = {"cached_tokens": self.cached_tokens}
        out: dict[str, Any] = {"prompt_tokens": p, "total_tokens": p + completion_tokens,
                               "completion_tokens": completion_tokens, "prompt_tokens_details": details}
        reasoning = 0 if self.v9 else min(self.reasoning, completion_tokens)
        out["reasoning_tokens"] = reasoning
        if not self.v9:
            out["completion_tokens_details"] = {"reasoning_tokens": reasoning} if reasoning else None
        return out

    def first_events(self) -> list[bytes]:
        """Events sent with the first token, before it (the chat role chunk)."""
        return []

    def token_events(self, text: str, k: int, completion_tokens: int, last: bool) -> list[bytes]:
        """The events of ``k`` new tokens ``text``; ``completion_tokens`` counts them all so far."""
        raise NotImplementedError

    def closing(self, completion_tokens: int) -> list[bytes]:
        """Events after the last token (the usage chunk)."""
        return []

    def full_body(self, text: str, completion_tokens: int) -> dict[str, Any]:
        """The non-streaming response."""
        raise NotImplementedError


class ChatShape(ResponseShape):
    """``/v1/chat/completions``."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.headers_at_first_token = not self.v9
        self._head = ('{"id":%s,"object":"chat.completion.chunk","created":%d,"model":%s,"choices":['
                      % (_DUMPS(self.rid), self.created, _DUMPS(self.req.model))).encode()

    def _chunk(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": self.rid, "object": "chat.completion.chunk", "created": self.created,
                "model": self.req.model, "choices": choices}

    def _delta(self, role: str | None = None, content: str | None = None, reasoning: str | None = None) -> str:
        if self.v9:  # pydantic DeltaMessage: every field (tool_calls popped only on 0.5.23)
            return _DUMPS({"role": role, "content": content, "reasoning_content": reasoning, "tool_calls": None})
        d: dict[str, Any] = {"reasoning_content": reasoning}  # msgspec StreamDelta: omit_defaults
        if role is not None:
            d["role"] = role
        if content is not None:
            d["content"] = content
        return _DUMPS(d)

    def _event(self, delta: str, finish: str | None = None, usage: dict[str, Any] | None = None) -> bytes:
        fin = "null" if finish is None else _DUMPS(finish)
        tail = ',"usage":null' if self.v9 and usage is None else ""
        if usage is not None:
            tail = ',"usage":' + _DUMPS(usage)
        return self._head + ('{"index":0,"delta":%s,"logprobs":null,"finish_reason":%s,"matched_stop":null}]%s'
                             % (delta, fin, tail)).encode()

    def first_events(self) -> list[bytes]:
        return [self._event(self._delta(role="assistant", content=""))]

    def token_events(self, text: str, k: int, completion_tokens: int, last: bool) -> list[bytes]:
        usage = self.usage(completion_tokens, continuous=True) if self.req.continuous_usage else None
        before = completion_tokens - k
        out = []
        if before < self.reasoning:  # these tokens (or their first part) are reasoning
            out.append(self._event(self._delta(reasoning=text), usage=usage))
        else:
            out.append(self._event(self._delta(content=text), usage=usage))
        if last:  # finish_reason in a chunk of its own
            out.append(self._event(self._delta(), finish="length"))
        return out

    def closing(self, completion_tokens: int) -> list[bytes]:
        if not self.req.include_usage:
            return []
        chunk = self._chunk([])
        chunk["usage"] = self.usage(completion_tokens)
        return [obj_event(chunk)]

    def full_body(self, text: str, completion_tokens: int) -> dict[str, Any]:
        return {"id": self.rid, "object": "chat.completion", "created": self.created,
                "model": self.req.model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "reasoning_content": None,
                                                     "tool_calls": None},
                             "logprobs": None, "finish_reason": "length", "matched_stop": None}],
                "usage": self.usage(completion_tokens)}


class CompletionShape(ResponseShape):
    """``/v1/completions``."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.headers_at_first_token = not self.v9

    def _chunk(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": self.rid, "object": "text_completion", "created": self.created,
                "model": self.req.model, "choices": choices}

    def token_events(self, text: str, k: int, completion_tokens: int, last: bool) -> list[bytes]:
        chunk = self._chunk([{"index": 0, "text": text, "logprobs": None,
                              "finish_reason": "length" if last else None, "matched_stop": None}])
        chunk["usage"] = self.usage(completion_tokens, continuous=True) if self.req.continuous_usage else None
        return [obj_event(chunk)]

    def closing(self, completion_tokens: int) -> list[bytes]:
        if not self.req.include_usage:
            return []
        chunk = self._chunk([])
        chunk["usage"] = self.usage(completion_tokens)
        return [obj_event(chunk)]

    def full_body(self, text: str, completion_tokens: int) -> dict[str, Any]:
        body = self._chunk([{"index": 0, "text": text, "logprobs": None, "finish_reason": "length",
                             "matched_stop": None}])
        body["usage"] = self.usage(completion_tokens)
        return body


class GenerateShape(ResponseShape):
    """SGLang ``/generate``: the text so far and every output id in each chunk (bytes kept
    built, so a chunk costs the sim a copy, not a dump of the whole list)."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._text = ""
        self._text_json: list[str] = []  # the text so far, JSON-escaped, in pieces
        self._ids = bytearray()  # the ids so far: "12,345,6789"

    @property
    def text(self) -> str:
        """The whole text sent so far (what an abort's last event carries)."""
        return self._text

    def _meta(self, completion_tokens: int, last: bool) -> dict[str, Any]:
        now = time.time()
        finish = {"type": "length", "length": completion_tokens} if last else None
        meta: dict[str, Any] = {"id": self.rid, "finish_reason": finish, "prompt_tokens": self.req.prompt_tokens,
                                "weight_version": "default"}
        if self.v9:
            meta["total_retractions"] = self.retractions
            if self.queue_time is not None:
                meta["queue_time"] = self.queue_time
        else:
            meta["num_retractions"] = self.retractions
            meta["request_received_ts"] = self.t_arrive
            if self.first_token_s is not None:
                meta["first_token_latency"] = self.first_token_s
            meta["reasoning_tokens"] = 0
        meta["completion_tokens"] = completion_tokens
        meta["cached_tokens"] = self.cached_tokens
        if last:
            e2e = now - self.t_arrive
            meta["e2e_latency"] = e2e
            if self.v9:
                meta.update(request_received_ts=self.t_arrive, response_sent_to_client_ts=now, decode_finished_ts=now,
                            inference_time=e2e - (self.queue_time or 0.0))
            else:
                meta["request_finished_ts"] = now
                if self.first_token_s is not None and completion_tokens > 1 and e2e > self.first_token_s:
                    meta["decode_throughput"] = (completion_tokens - 1) / (e2e - self.first_token_s)
        return meta

    def _new_ids(self, k: int) -> bytes:
        r = self._rng.randrange
        return ",".join(str(r(100, 151_000)) for _ in range(k)).encode()

    def token_events(self, text: str, k: int, completion_tokens: int, last: bool) -> list[bytes]:
        self._text += text
        piece = _DUMPS(text)
        new = self._new_ids(k)
        if self.incremental:
            body_text, ids = piece, new
        else:
            self._text_json.append(piece[1:-1])
            if self._ids:
                self._ids += b","
            self._ids += new
            if len(self._text_json) > 64:
                self._text_json = ["".join(self._text_json)]
            body_text, ids = '"' + "".join(self._text_json) + '"', bytes(self._ids)
        return [b'{"text":' + body_text.encode() + b',"output_ids":[' + ids + b'],"meta_info":'
                + _DUMPS(self._meta(completion_tokens, last)).encode()]

    def full_body(self, text: str, completion_tokens: int) -> dict[str, Any]:
        ids = [int(i) for i in self._new_ids(completion_tokens).split(b",")] if completion_tokens else []
        return {"text": text, "output_ids": ids, "meta_info": self._meta(completion_tokens, True)}


def make_shape(req: GenerationRequest, rng: random.Random, created: int, version: str, *, cache_report: bool = False,
               reasoning: int = 0, incremental: bool = False) -> ResponseShape:
    """The response shape of ``req.api`` for SGLang ``version``; the request's own ``rng``
    draws its id and its token ids."""
    hexid = f"{rng.getrandbits(128):032x}"
    kw = {"cache_report": cache_report, "rng": rng}
    if req.api == "chat":
        return ChatShape(f"chatcmpl-{hexid[:16]}", created, req, version, reasoning=reasoning, **kw)
    if req.api == "completions":
        return CompletionShape(f"cmpl-{hexid[:16]}", created, req, version, **kw)
    return GenerateShape(hexid, created, req, version, incremental=incremental, **kw)
