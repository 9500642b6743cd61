"""The simulator's fake tokenizer and generated token texts.

Prompt tokens are counted as ``ceil(len(text) / 4)`` (at least 1): deliberately not one token
per word, so a client has to calibrate its own estimate against ``usage.prompt_tokens``.
Generated tokens are short words from a fixed vocabulary, each starting with a space, drawn
from a seeded generator so a run is reproducible. A request's first token names the request
(`` r<index>``, its arrival index at the sim): no two answers are the same text, so a test can
find a given answer inside a later prompt (multi-turn sessions send answers back).
"""

from __future__ import annotations

import math
import random
from typing import Any, Iterable

__all__ = ["VOCABULARY", "count_tokens", "count_prompt_tokens", "TokenStream"]

VOCABULARY: tuple[str, ...] = tuple(
    " " + w
    for w in (
        "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi "
        "rho sigma tau upsilon phi chi psi omega red line load queue batch token stream server "
        "power watt latency tail knee ramp step probe cap pipe tensor cache block prefill decode "
        "kernel memory budget sample window plateau climb stall burst throughput"
    ).split()
)


def count_tokens(text: str) -> int:
    """Fake tokenizer: one token per four characters, at least one."""
    return max(1, math.ceil(len(text) / 4))


def count_prompt_tokens(prompt: str | Iterable[Any]) -> int:
    """Tokens of a prompt given as text, or as a list of token ids (counted one each)."""
    if isinstance(prompt, str):
        return count_tokens(prompt)
    return max(1, sum(1 for _ in prompt))


class TokenStream:
    """Seeded source of generated token texts for one request."""

    __slots__ = ("_rng", "_first")

    def __init__(self, rng: random.Random, first: str | None = None) -> None:
        """``first``: the text of the first token (one word with its leading space), else drawn."""
        self._rng = rng
        self._first = first

    def next_text(self, n: int = 1) -> str:
        """The text of the next ``n`` generated tokens, concatenated."""
        choice = self._rng.choice
        first = self._first
        if first is not None:
            self._first = None
            return first if n == 1 else first + "".join(choice(VOCABULARY) for _ in range(n - 1))
        if n == 1:
            return choice(VOCABULARY)
        return "".join(choice(VOCABULARY) for _ in range(n))
