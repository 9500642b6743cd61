"""ShareGPT as SGLang's bench_serving reads it (`--dataset sharegpt:FILE`).

A ShareGPT file is a JSON list of {"conversations": [{"from": "human", "value": ...},
{"from": "gpt", "value": ...}, ...]} ("conversation" is read too). bench_serving's rules:

- a conversation with fewer than two turns is left out;
- the prompt is the first human turn, its reply the turn after it;
- each request asks for the reply's length in tokens (max_tokens, with ignore_eos), unless a
  fixed length is given (`--sharegpt-output-len N`, or `--output-len N` given with this dataset);
- a pair whose prompt or output is shorter than 2 tokens is left out (too short), and, with a
  context length (`--sharegpt-context-len N`), one whose prompt and output together pass it
  (too long);
- the pairs are shuffled (by the workload's seed here: the same seed, the same order).

One difference, said in docs/numbers.md: bench_serving counts tokens with the model's
tokenizer; redline loads none, so a text's tokens are estimated from its characters at the
rate the server's own counts gave for the calibration prompts (usage.prompt_tokens; without
them, four characters a token). The requests' real input and output tokens are always the
server's `usage`, as for every dataset.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

MIN_TOKENS = 2  # bench_serving prunes a prompt or an output shorter than this
CHARS_PER_TOKEN = 4.0  # without a calibration: the usual estimate for English text
SHAREGPT_FORM = '{"conversations": [{"from": "human", "value": ...}, {"from": "gpt", "value": ...}]}'
HUMAN = ("human", "user")


class ShareGPTError(ValueError):
    """A file that is not a ShareGPT list; one line (engine/workload/prompts.py raises it as
    its WorkloadError)."""


@dataclass(frozen=True, slots=True)
class Pair:
    """A conversation's first human turn and the reply after it."""

    prompt: str
    reply: str


def read_pairs(path: Path, raw: str) -> list[Pair]:
    """The (prompt, reply) pairs of a ShareGPT file's text, in file order; WorkloadError (one
    line, ShareGPTError) when it is not a ShareGPT list. Conversations with no human turn followed by a reply
    are left out."""
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise ShareGPTError(f"dataset file {str(path)!r}: not JSON ({exc}); expected a ShareGPT list of {SHAREGPT_FORM}") from None
    if not isinstance(data, list):
        raise ShareGPTError(f"dataset file {str(path)!r}: expected a JSON list of ShareGPT conversations ({SHAREGPT_FORM})")
    out = []
    for item in data:
        conv = item.get("conversations", item.get("conversation")) if isinstance(item, dict) else None
        if not isinstance(conv, list) or len(conv) < 2:
            continue
        i = next((k for k, t in enumerate(conv) if isinstance(t, dict) and t.get("from") in HUMAN), None)
        if i is None or i + 1 >= len(conv):
            continue
        prompt, reply = conv[i].get("value"), conv[i + 1].get("value") if isinstance(conv[i + 1], dict) else None
        if isinstance(prompt, str) and isinstance(reply, str) and prompt.strip():
            out.append(Pair(prompt, reply))
    return out


def text_tokens(text: str, tokens_per_char: float | None) -> int:
    """A text's length in the server's tokens, estimated (no tokenizer is loaded): its
    characters at the server's rate (engine/workload/prompts.py Calibration.tokens_per_char),
    else four characters a token."""
    return round(len(text) * (tokens_per_char if tokens_per_char is not None else 1.0 / CHARS_PER_TOKEN))


def requests_of(pairs: list[Pair], tokens_per_char: float | None, *, output_len: int | None = None,
                context_len: int | None = None, seed: int = 0) -> list[tuple[str, int]]:
    """(prompt, max_tokens) of each request of a ShareGPT dataset: each pair's prompt asking
    for its reply's length (or `output_len`), the too-short and too-long pairs left out,
    shuffled by `seed`."""
    order = list(pairs)
    random.Random(f"redline-sharegpt:{seed}").shuffle(order)
    tokens: Callable[[str], int] = lambda text: text_tokens(text, tokens_per_char)  # noqa: E731
    out = []
    for p in order:
        n_in = tokens(p.prompt)
        n_out = output_len if output_len is not None else tokens(p.reply)
        if n_in < MIN_TOKENS or n_out < MIN_TOKENS:
            continue
        if context_len is not None and n_in + n_out > context_len:
            continue
        out.append((p.prompt, n_out))
    return out
