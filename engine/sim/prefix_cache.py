"""The prefix cache of the simulated server (SGLang's RadixAttention, vLLM's automatic prefix
caching, kept simple and exact): a prompt is cut into fixed blocks of ``prefix_block_tokens``
tokens, each keyed by a hash chained over every block before it (:func:`prompt_blocks`), held
in an LRU (:class:`PrefixCache`) that evicts the deepest blocks of a prefix first. How the
scheduler uses it: engine/sim/model.py.
"""

from __future__ import annotations

import collections
from typing import Sequence

__all__ = ["PrefixCache", "PromptTokens", "prompt_blocks"]

#: Characters per prompt token of the sim's fake tokenizer (tokens.count_tokens).
_CHARS_PER_TOKEN = 4


def prompt_blocks(prompt: str | Sequence[int], block_tokens: int) -> tuple[int, ...]:
    """Chained hashes of the prompt's full blocks of ``block_tokens`` tokens.

    Text is cut every ``4 * block_tokens`` characters (the fake tokenizer counts 4 characters
    a token), a list of token ids every ``block_tokens`` ids; a partial last block is not
    cached. Block k's key hashes block k's content together with block k-1's key.
    """
    if block_tokens < 1:
        return ()
    out: list[int] = []
    h = 0
    if isinstance(prompt, str):
        size = block_tokens * _CHARS_PER_TOKEN
        for i in range(0, len(prompt) - size + 1, size):
            h = hash((h, prompt[i:i + size]))
            out.append(h)
    else:
        ids = list(prompt)
        for i in range(0, len(ids) - block_tokens + 1, block_tokens):
            h = hash((h, tuple(ids[i:i + block_tokens])))
            out.append(h)
    return tuple(out)


class PromptTokens(int):
    """A prompt's token count that also carries its prefix blocks (:func:`prompt_blocks`).

    The request parser counts prompt tokens and passes this int where a plain count went
    before, so the handler's ``model.submit(req.prompt_tokens, ...)`` hands the blocks to the
    model unchanged; :meth:`BatchModel.submit` takes them (and drops them from this object).
    """

    blocks: tuple[int, ...]

    def __new__(cls, n: int, blocks: Sequence[int] = ()) -> PromptTokens:
        self = super().__new__(cls, n)
        self.blocks = tuple(blocks)
        return self

    def __reduce__(self) -> tuple:  # copies and pickles stay plain ints
        return (int, (int(self),))


class PrefixCache:
    """Blocks of prompt prefixes held by the server: an LRU set of chained block hashes."""

    def __init__(self, capacity_tokens: int, block_tokens: int) -> None:
        self.block_tokens = block_tokens
        self._capacity_blocks = capacity_tokens // block_tokens if block_tokens > 0 else 0
        self._blocks: collections.OrderedDict[int, None] = collections.OrderedDict()

    @property
    def enabled(self) -> bool:
        return self._capacity_blocks > 0

    @property
    def held_tokens(self) -> int:
        """Tokens the cache holds now."""
        return len(self._blocks) * self.block_tokens

    def match(self, blocks: Sequence[int]) -> int:
        """How many of ``blocks``, from the first, the cache holds (no change to it)."""
        n = 0
        for h in blocks:
            if h not in self._blocks:
                break
            n += 1
        return n

    def clear(self) -> None:
        """Forget every block."""
        self._blocks.clear()

    def insert(self, blocks: Sequence[int]) -> None:
        """Hold all ``blocks`` as most recently used, the first one last: eviction takes the
        deepest blocks of a prefix before the blocks it hangs from."""
        if not self.enabled:
            return
        cache = self._blocks
        for h in reversed(blocks):
            if h in cache:
                cache.move_to_end(h)
            else:
                cache[h] = None
        while len(cache) > self._capacity_blocks:
            cache.popitem(last=False)
