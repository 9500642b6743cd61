"""The shape of an OpenAI stream's chunks, learned from one the full parse read (issue 26).

Under continuous usage every chunk carries a usage object, so the plain-chunk fast path
(engine/apis.py OpenAIDecoder.fast) never applies and each chunk went to json: ~5-7 us of
scanning per token on a 2-core VM, the largest single cost of a streamed token. But a
server writes every chunk of a stream with the same keys in the same order; only the values
change. So once the full parse has read a chunk, `learn` turns its structure into a regular
expression: the keys and the nesting written out, each scalar a pattern of its JSON type
(a string, a number, null, true|false), the values a figure needs (content, reasoning,
text, usage counts, cached tokens, sim_t) captured. A payload that matches it in full is a
JSON object of exactly that structure (no whitespace, no other key, no duplicate), so
the captured values are what json.loads would read there, and the other fields cannot
change the Event; anything else (another shape, whitespace, escapes in a key, NaN) does not
match and the full parse reads it, as before. The first chunk of each shape is always read
by the full parse; `learn` checks its shape reads that same chunk back before it is used.

Shapes do not depend on the values, so they are shared by every stream of the process
(compiling one costs ~2 ms: once per shape, not per request).
"""

from __future__ import annotations

import json
import re
from typing import Any

# JSON's scalars as json.loads accepts them (strict strings: no raw control characters).
_STR = r'"[^"\\\x00-\x1f]*+(?:\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})[^"\\\x00-\x1f]*+)*+"'
_NUM = r"-?(?:0|[1-9][0-9]*+)(?:\.[0-9]++)?(?:[eE][-+]?[0-9]++)?"

# the values a figure reads, by their path in the chunk (0: the first choice)
CONTENT, REASONING_CONTENT, REASONING, TEXT = "content", "reasoning_content", "reasoning", "text"
PROMPT, COMPLETION, CACHED, SIM_T = "prompt_tokens", "completion_tokens", "cached_tokens", "sim_t"
_CHAT_PATHS = {("choices", 0, "delta", "content"): CONTENT, ("choices", 0, "delta", "reasoning_content"): REASONING_CONTENT,
               ("choices", 0, "delta", "reasoning"): REASONING}
_COMMON_PATHS = {("usage", "prompt_tokens"): PROMPT, ("usage", "completion_tokens"): COMPLETION,
                 ("usage", "prompt_tokens_details", "cached_tokens"): CACHED, ("sim_t",): SIM_T}
PATHS = {"chat": {**_CHAT_PATHS, **_COMMON_PATHS}, "completions": {("choices", 0, "text"): TEXT, **_COMMON_PATHS}}

MAX_SHAPES = 8  # per API and process: a server writes a handful (first, content, last, usage-only)


class Shape:
    """One learned chunk structure: its pattern, the group of each captured value (0: not in
    this shape; `m.groups()[i - 1]`) and which containers are objects."""

    __slots__ = ("match", "sim_t", "content", "reasoning_content", "reasoning", "text", "prompt", "completion",
                 "cached", "choice", "delta", "usage", "details")

    def __init__(self, pattern: str, groups: dict[str, int], flags: dict[str, bool]) -> None:
        self.match = re.compile(pattern).fullmatch
        for name, attr in ((SIM_T, "sim_t"), (CONTENT, "content"), (REASONING_CONTENT, "reasoning_content"),
                           (REASONING, "reasoning"), (TEXT, "text"), (PROMPT, "prompt"), (COMPLETION, "completion"),
                           (CACHED, "cached")):
            setattr(self, attr, groups.get(name, 0))
        self.choice = flags["choice"]  # choices is a non-empty list (its first is an object)
        self.delta = flags["delta"]  # chat: that choice's delta is an object
        self.usage = flags["usage"]  # usage is an object
        self.details = flags["details"]  # usage.prompt_tokens_details is an object


def learn(obj: dict[str, Any], api: str) -> tuple[str, dict[str, int], dict[str, bool]] | None:
    """The pattern of `obj`'s structure, its captured groups and its flags; None for a shape
    the Event cannot be read from by position (an error key, choices that are not a list)."""
    if "error" in obj or ("choices" in obj and not isinstance(obj["choices"], list)):
        return None
    paths = PATHS[api]
    groups: dict[str, int] = {}
    parts: list[str] = []

    def walk(v: Any, path: tuple) -> None:
        if isinstance(v, dict):
            parts.append(r"\{")
            for i, (k, x) in enumerate(v.items()):
                if i:
                    parts.append(",")
                parts.append(re.escape(json.dumps(k)) + ":")
                walk(x, path + (k,))
            parts.append(r"\}")
        elif isinstance(v, list):
            parts.append(r"\[")
            for i, x in enumerate(v):
                if i:
                    parts.append(",")
                walk(x, path + (i,))
            parts.append(r"\]")
        else:
            p = (_STR if isinstance(v, str) else "null" if v is None else "true|false" if isinstance(v, bool)
                 else _NUM if isinstance(v, (int, float)) else None)
            if p is None:  # pragma: no cover - json gives no other scalar
                raise ValueError(v)
            name = paths.get(path)
            if name is not None:
                groups[name] = len(groups) + 1
                parts.append("(" + p + ")")
            else:
                parts.append("(?:" + p + ")")

    walk(obj, ())
    choices = obj.get("choices")
    c0 = choices[0] if isinstance(choices, list) and choices else None
    usage = obj.get("usage")
    flags = {"choice": isinstance(c0, dict),
             "delta": isinstance(c0, dict) and isinstance(c0.get("delta"), dict),
             "usage": isinstance(usage, dict),
             "details": isinstance(usage, dict) and isinstance(usage.get("prompt_tokens_details"), dict)}
    return "".join(parts), groups, flags


def truthy(raw: str | None) -> bool:
    """bool() of the JSON scalar `raw` (as a Shape matched it; None: absent)."""
    if raw is None:
        return False
    c = raw[0]
    if c == '"':
        return len(raw) > 2  # "" is the only empty string (an escape is at least one character)
    if c == "n" or c == "f":
        return False
    if c == "t":
        return True
    return float(raw) != 0.0


def count(raw: str | None) -> int | None:
    """apis._count of the JSON scalar `raw`: a non-negative int, else None."""
    if raw is None or raw[0] not in "-0123456789" or "." in raw or "e" in raw or "E" in raw:
        return None
    v = int(raw)
    return v if v >= 0 else None
