"""Request parsing of the three generation APIs (their response chunks: engine/sim/chunks.py).

- ``chat``: OpenAI ``/v1/chat/completions``
- ``completions``: OpenAI ``/v1/completions``
- ``generate``: SGLang native ``/generate``

A prompt that does not fit the context is refused with SGLang's own words
(``managers/tokenizer_manager.py`` ``_validate_one_request``, the same in 0.5.9 and 0.5.23:
input + max_new_tokens >= the context length): :class:`ContextTooLong`, whose HTTP answer
depends on the version and the route (engine/sim/http_app.py).

The prompt's token count is a :class:`~.prefix_cache.PromptTokens` carrying the keys of its
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

from .prefix_cache import PromptTokens, prompt_blocks
from .profiles import SimProfile
from .tokens import count_prompt_tokens

__all__ = ["Api", "BadRequest", "ContextTooLong", "GenerationRequest", "parse_request", "encode_event", "DONE_EVENT",
           "error_body"]

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


class ContextTooLong(BadRequest):
    """Prompt + max_new_tokens reach the context length (SGLang's ValueError)."""


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
    priority: int | None = None  # the request's "priority" (SGLang --enable-priority-scheduling)
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
    if prompt_tokens + max_tokens >= profile.max_model_len:
        raise ContextTooLong(
            f"Requested token count exceeds the model's maximum context length of {profile.max_model_len} tokens. "
            f"You requested a total of {prompt_tokens + max_tokens} tokens: {prompt_tokens} tokens from the input "
            f"messages and {max_tokens} tokens for the completion. Please reduce the number of tokens in the input "
            "messages or the completion to fit within the limit."
        )
    model = body.get("model")
    priority = body.get("priority")
    return GenerationRequest(
        api=api,
        model=model if isinstance(model, str) and model else profile.model_name,
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        stream=stream,
        include_usage=include_usage,
        continuous_usage=continuous_usage,
        priority=priority if isinstance(priority, int) and not isinstance(priority, bool) else None,
        prompt_tail=tail,
    )
