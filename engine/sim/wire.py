"""Request parsing and response shapes of the three generation APIs.

- ``chat``: OpenAI ``/v1/chat/completions``
- ``completions``: OpenAI ``/v1/completions``
- ``generate``: SGLang native ``/generate``

Shapes follow the vLLM captures in ``shared/samples/vllm`` (compact JSON, ``logprobs: null``,
``finish_reason: "length"`` on the last token's chunk, a usage chunk with ``choices: []``) and
SGLang's ``/generate`` stream (cumulative ``text`` plus ``meta_info``).

``stream_options: {"include_usage": true, "continuous_usage_stats": true}`` puts the
cumulative usage on every chunk (the role chunk with 0 completion tokens, then each token
chunk), as vLLM does; the closing usage chunk still comes.

The prompt's token count is a :class:`~.model.PromptTokens` carrying the keys of its
prefix-cache blocks (the text of chat messages joined by newlines, a completion prompt, or the
token ids), which the model looks up in its prefix cache at admission.

The request keeps the last ``PROMPT_TAIL_CHARS`` characters of that same prompt text
(``GenerationRequest.prompt_tail``; empty for token ids) for the ground-truth log: a test of
multi-turn sessions finds a turn's answer inside the next turn's prompt there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from .model import PromptTokens, prompt_blocks
from .profiles import SimProfile
from .tokens import count_prompt_tokens

__all__ = ["Api", "BadRequest", "GenerationRequest", "ResponseShape", "parse_request",
           "make_shape", "encode_event", "DONE_EVENT", "error_body"]

Api = Literal["chat", "completions", "generate"]

DONE_EVENT = b"data: [DONE]\n\n"

#: Characters of the prompt text kept for the ground-truth log (its end).
PROMPT_TAIL_CHARS = 4000


def encode_event(obj: dict[str, Any]) -> bytes:
    """One SSE event with compact JSON, as vLLM and SGLang write it."""
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def error_body(message: str, kind: str, code: int) -> dict[str, Any]:
    """OpenAI-style error JSON."""
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


class BadRequest(ValueError):
    """The request body is not something the server accepts (HTTP 400)."""


@dataclass(frozen=True)
class GenerationRequest:
    """What the sim needs from a generation request body."""

    api: Api
    model: str
    prompt_tokens: int
    max_tokens: int
    stream: bool
    include_usage: bool
    continuous_usage: bool = False  # usage on every chunk (needs include_usage, as in vLLM)
    # the end of the prompt text (chat: messages' contents joined by newlines), for the truth log
    prompt_tail: str = field(default="", repr=False)


def _int_field(body: dict[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadRequest(f"{key} must be a positive integer, got {value!r}")
    return value


def _message_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "".join(parts)
    if content is None:
        return ""
    raise BadRequest("message content must be a string or a list of parts")


def _counted(prompt: str | list[int], extra: int, profile: SimProfile) -> int:
    """The prompt's tokens (+ ``extra``), carrying its prefix-cache blocks when it has any."""
    n = count_prompt_tokens(prompt) + extra
    if profile.prefix_cache_capacity <= 0:
        return n
    blocks = prompt_blocks(prompt, profile.prefix_block_tokens)
    return PromptTokens(n, blocks) if blocks else n


def _tail(prompt: str | list[int]) -> str:
    return prompt[-PROMPT_TAIL_CHARS:] if isinstance(prompt, str) else ""


def _chat_prompt(body: dict[str, Any], profile: SimProfile) -> tuple[int, str]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list")
    texts = []
    for m in messages:
        if not isinstance(m, dict):
            raise BadRequest("each message must be an object with role and content")
        texts.append(_message_text(m.get("content")))
    text = "\n".join(texts)
    return _counted(text, profile.chat_template_tokens, profile), _tail(text)


def _plain_prompt(prompt: Any, key: str, profile: SimProfile) -> tuple[int, str]:
    if isinstance(prompt, str):
        return _counted(prompt, 0, profile), _tail(prompt)
    if isinstance(prompt, list) and prompt and all(
        isinstance(t, int) and not isinstance(t, bool) for t in prompt
    ):
        return _counted(prompt, 0, profile), ""
    raise BadRequest(f"{key} must be a string (or a list of token ids), got {type(prompt).__name__}")


def parse_request(api: Api, body: Any, profile: SimProfile) -> GenerationRequest:
    """Validate a request body; raise :class:`BadRequest` with a one-line reason."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    stream = bool(body.get("stream", False))
    if api == "generate":
        params = body.get("sampling_params") or {}
        if not isinstance(params, dict):
            raise BadRequest("sampling_params must be an object")
        max_tokens = _int_field(params, "max_new_tokens")
        if "text" in body:
            prompt_tokens, tail = _plain_prompt(body["text"], "text", profile)
        elif "input_ids" in body:
            prompt_tokens, tail = _plain_prompt(body["input_ids"], "input_ids", profile)
        else:
            raise BadRequest("text or input_ids is required")
        include_usage = continuous_usage = False
    else:
        max_tokens = _int_field(body, "max_tokens")
        if api == "chat":
            max_tokens = max_tokens or _int_field(body, "max_completion_tokens")
            prompt_tokens, tail = _chat_prompt(body, profile)
        else:
            if "prompt" not in body:
                raise BadRequest("prompt is required")
            prompt_tokens, tail = _plain_prompt(body["prompt"], "prompt", profile)
        options = body.get("stream_options") or {}
        include_usage = bool(isinstance(options, dict) and options.get("include_usage"))
        continuous_usage = include_usage and bool(options.get("continuous_usage_stats"))
    if max_tokens is None:
        max_tokens = profile.default_max_tokens
    if prompt_tokens + max_tokens > profile.max_model_len:
        raise BadRequest(
            f"This model's maximum context length is {profile.max_model_len} tokens. However, "
            f"you requested {prompt_tokens + max_tokens} tokens ({prompt_tokens} in the "
            f"messages, {max_tokens} in the completion)."
        )
    model = body.get("model")
    return GenerationRequest(
        api=api,
        model=model if isinstance(model, str) and model else profile.model_name,
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        stream=stream,
        include_usage=include_usage,
        continuous_usage=continuous_usage,
        prompt_tail=tail,
    )


class ResponseShape:
    """Builds the chunks and the full body of one response (one subclass per API)."""

    def __init__(self, rid: str, created: int, req: GenerationRequest,
                 cache_report: bool = False) -> None:
        self.rid = rid
        self.created = created
        self.req = req
        self.cache_report = cache_report  # usage carries prompt_tokens_details.cached_tokens
        self.cached_tokens = 0  # prompt tokens found in the prefix cache (set once admitted)

    def usage(self, completion_tokens: int) -> dict[str, Any]:
        """OpenAI usage object (with the cache report: prompt_tokens_details.cached_tokens,
        as vLLM --enable-prompt-tokens-details and SGLang --enable-cache-report write it)."""
        p = self.req.prompt_tokens
        out: dict[str, Any] = {"prompt_tokens": p, "total_tokens": p + completion_tokens,
                               "completion_tokens": completion_tokens}
        if self.cache_report:
            out["prompt_tokens_details"] = {"cached_tokens": self.cached_tokens}
        return out

    def opening(self) -> dict[str, Any] | None:
        """A chunk sent before the first token, if the API has one."""
        return None

    def token_chunk(self, text: str, completion_tokens: int, last: bool) -> dict[str, Any]:
        """The chunk carrying ``text``; ``completion_tokens`` counts tokens so far."""
        raise NotImplementedError

    def closing(self, completion_tokens: int) -> dict[str, Any] | None:
        """A chunk sent after the last token (the usage chunk), if any."""
        return None

    def full_body(self, text: str, completion_tokens: int) -> dict[str, Any]:
        """The non-streaming response."""
        raise NotImplementedError


class ChatShape(ResponseShape):
    """``/v1/chat/completions``."""

    def _chunk(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": self.rid, "object": "chat.completion.chunk", "created": self.created,
                "model": self.req.model, "choices": choices}

    def opening(self) -> dict[str, Any]:
        chunk = self._chunk([{"index": 0, "delta": {"role": "assistant", "content": ""},
                              "logprobs": None, "finish_reason": None}])
        if self.req.continuous_usage:
            chunk["usage"] = self.usage(0)
        return chunk

    def token_chunk(self, text: str, completion_tokens: int, last: bool) -> dict[str, Any]:
        chunk = self._chunk([{"index": 0, "delta": {"content": text}, "logprobs": None,
                              "finish_reason": "length" if last else None}])
        if self.req.continuous_usage:
            chunk["usage"] = self.usage(completion_tokens)
        return chunk

    def closing(self, completion_tokens: int) -> dict[str, Any] | None:
        if not self.req.include_usage:
            return None
        chunk = self._chunk([])
        chunk["usage"] = self.usage(completion_tokens)
        return chunk

    def full_body(self, text: str, completion_tokens: int) -> dict[str, Any]:
        return {"id": self.rid, "object": "chat.completion", "created": self.created,
                "model": self.req.model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                             "logprobs": None, "finish_reason": "length"}],
                "usage": self.usage(completion_tokens)}


class CompletionShape(ResponseShape):
    """``/v1/completions``."""

    def _chunk(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": self.rid, "object": "text_completion", "created": self.created,
                "model": self.req.model, "choices": choices}

    def token_chunk(self, text: str, completion_tokens: int, last: bool) -> dict[str, Any]:
        chunk = self._chunk([{"index": 0, "text": text, "logprobs": None,
                              "finish_reason": "length" if last else None}])
        if self.req.continuous_usage:
            chunk["usage"] = self.usage(completion_tokens)
        return chunk

    def closing(self, completion_tokens: int) -> dict[str, Any] | None:
        if not self.req.include_usage:
            return None
        chunk = self._chunk([])
        chunk["usage"] = self.usage(completion_tokens)
        return chunk

    def full_body(self, text: str, completion_tokens: int) -> dict[str, Any]:
        body = self._chunk([{"index": 0, "text": text, "logprobs": None,
                             "finish_reason": "length"}])
        body["usage"] = self.usage(completion_tokens)
        return body


class GenerateShape(ResponseShape):
    """SGLang ``/generate``: the streamed ``text`` is cumulative."""

    def __init__(self, rid: str, created: int, req: GenerationRequest,
                 cache_report: bool = False) -> None:
        super().__init__(rid, created, req, cache_report)
        self._text = ""

    @property
    def text(self) -> str:
        """The whole text sent so far (what an abort's last event carries)."""
        return self._text

    def _meta(self, completion_tokens: int, last: bool) -> dict[str, Any]:
        finish = {"type": "length", "length": completion_tokens} if last else None
        return {"id": self.rid, "prompt_tokens": self.req.prompt_tokens,
                "completion_tokens": completion_tokens, "finish_reason": finish,
                "cached_tokens": self.cached_tokens}

    def token_chunk(self, text: str, completion_tokens: int, last: bool) -> dict[str, Any]:
        self._text += text
        return {"text": self._text, "meta_info": self._meta(completion_tokens, last),
                "index": 0}

    def full_body(self, text: str, completion_tokens: int) -> dict[str, Any]:
        return {"text": text, "meta_info": self._meta(completion_tokens, True), "index": 0}


def make_shape(req: GenerationRequest, rid_hex: str, created: int,
               cache_report: bool = False) -> ResponseShape:
    """The response shape for ``req.api``; ``rid_hex`` makes the response id;
    ``cache_report``: OpenAI usage with prompt_tokens_details.cached_tokens."""
    if req.api == "chat":
        return ChatShape(f"chatcmpl-{rid_hex}", created, req, cache_report)
    if req.api == "completions":
        return CompletionShape(f"cmpl-{rid_hex}", created, req, cache_report)
    return GenerateShape(rid_hex, created, req, cache_report)
