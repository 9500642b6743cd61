"""Request traces in the Mooncake format: when each request is sent, and its prompt.

A trace is a JSONL file, one request a line, in time order:

    {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 48]}

`timestamp` is milliseconds since the trace's start, `input_length` and `output_length` are
tokens, and `hash_ids` (optional here) name the prompt's blocks of 512 tokens in order: rows
that start with the same hash ids start with the same text, so a server with a prefix cache
computes that text once. A row without hash ids has a prompt of its own.

`load_trace` reads and checks a trace (TraceError: one line naming the file, the line and the
value); `TracePrompts` makes each row's prompt text, with the word counts of a Calibration so
its lengths are in the server's own tokens, as random prompts are (engine/workload/prompts.py).
"""

from __future__ import annotations

import json
import math
import os
import random
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Iterable, Sequence

from .prompts import _WORDS, MAX_PREFIX_PROMPT_TOKENS, Calibration, Prompt, _random_text, _shown, check_file

#: Tokens of one Mooncake hash block.
MOONCAKE_BLOCK_TOKENS = 512
#: Rows a trace may have at most.
MAX_TRACE_ROWS = 1_000_000
#: Tokens one row may ask for, in and out (the bound of a prefix dataset's prompt).
MAX_ROW_TOKENS = MAX_PREFIX_PROMPT_TOKENS
#: Characters of block texts kept in memory; beyond, a block is rebuilt when used.
_BLOCK_MEMO_CHARS = 64 * 1024 * 1024
#: Shown values are cut to this many characters.
_VALUE_CHARS = 60

TRACE_ROW_FORM = '{"timestamp": MS, "input_length": N, "output_length": N, "hash_ids": [ID, ...]}'
_EXPECTED_FILE = f"expected a Mooncake JSONL trace, one {TRACE_ROW_FORM} a line"

_PACKAGE = "redline.presets"
_BUILTIN = ("traces", "example.jsonl")


class TraceError(ValueError):
    """A trace that cannot be replayed; the message is one line naming the file, the line
    and the value, and what is accepted."""


@dataclass(frozen=True, slots=True)
class TraceRow:
    t_s: float  # seconds from the trace's first row
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...] = ()


def _value(v: object) -> str:
    """A JSON value as the file has it, on one line, cut to about 60 characters."""
    try:
        s = json.dumps(v)  # ASCII: control and line-separator characters come escaped
    except (TypeError, ValueError):
        s = repr(v)
    return s if len(s) <= _VALUE_CHARS else s[: _VALUE_CHARS - 3] + "..."


def _line(raw: str) -> str:
    """A line of the file, shown: repr (one line), cut."""
    s = repr(raw)
    return s if len(s) <= _VALUE_CHARS else s[: _VALUE_CHARS - 3] + "..."


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _finite_number(v: object) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        f = float(v)
    except OverflowError:  # an integer literal beyond any float
        return None
    return f if math.isfinite(f) else None


def load_trace(path: str | os.PathLike, max_rows: int = MAX_TRACE_ROWS) -> list[TraceRow]:
    """The rows of a Mooncake JSONL trace, checked; t_s counts from the first row.

    Blank lines are skipped, as is a UTF-8 byte-order mark; keys other than the four are
    ignored. Anything else wrong is a TraceError (one line: file, line number, value, and
    what is accepted).
    """
    p = Path(path).expanduser()
    shown = _shown(str(p))
    where = f"trace {shown}"
    check_file(p, where, _EXPECTED_FILE, TraceError)

    rows: list[TraceRow] = []
    first_ts: int | float | None = None
    last_ts: int | float | None = None
    seen_bytes = 0
    try:
        with open(p, "rb") as f:
            for n, raw in enumerate(f, 1):
                seen_bytes += len(raw)
                if n == 1 and raw.startswith(b"\xef\xbb\xbf"):
                    raw = raw[3:]
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise TraceError(
                        f"{where} line {n}: not UTF-8 text (byte {exc.start} of the line); {_EXPECTED_FILE}"
                    ) from None
                if not line.strip():
                    continue
                if len(rows) >= max_rows:
                    raise TraceError(
                        f"{where} line {n}: more than {max_rows} rows; expected at most {max_rows} "
                        "(cut the trace)")
                row_ts, row = _parse_row(where, n, line)
                if first_ts is None:
                    first_ts = row_ts
                elif last_ts is not None and row_ts < last_ts:  # last_ts is set with first_ts
                    raise TraceError(
                        f"{where} line {n}: timestamp {_value(row_ts)} after {_value(last_ts)}: "
                        "rows must be in time order")
                last_ts = row_ts
                rows.append(TraceRow((row_ts - first_ts) / 1000.0, *row))
    except OSError as exc:
        raise TraceError(f"{where}: cannot read ({exc.strerror or exc.__class__.__name__}); {_EXPECTED_FILE}") from None
    if seen_bytes == 0:
        raise TraceError(f"{where}: empty; {_EXPECTED_FILE}")
    if not rows:
        raise TraceError(f"{where}: no rows (only blank lines); {_EXPECTED_FILE}")
    return rows


def _parse_row(where: str, n: int, line: str) -> tuple[int | float, tuple[int, int, tuple[int, ...]]]:
    """(timestamp in ms, (input_length, output_length, hash_ids)) of one non-blank line."""
    at = f"{where} line {n}"
    line = line.strip()
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:  # its "line 1 column C" would read as the file's line
        reason = f"{exc.msg} at column {exc.colno}"
        raise TraceError(f"{at}: not JSON ({reason}): {_line(line)}; expected {TRACE_ROW_FORM}") from None
    except (ValueError, RecursionError) as exc:  # nesting too deep, a number too long, ...
        reason = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
        raise TraceError(f"{at}: not JSON ({reason}): {_line(line)}; expected {TRACE_ROW_FORM}") from None
    if not isinstance(obj, dict):
        raise TraceError(f"{at}: {_value(obj)} is not an object; expected {TRACE_ROW_FORM}")

    if "timestamp" not in obj:
        raise TraceError(f"{at}: no timestamp; expected milliseconds since the trace's start, a number >= 0")
    ts = obj["timestamp"]
    f = _finite_number(ts)
    if f is None or f < 0:
        raise TraceError(f"{at}: timestamp {_value(ts)}: expected milliseconds since the trace's start, a number >= 0")

    lengths = []
    for key in ("input_length", "output_length"):
        if key not in obj:
            raise TraceError(f"{at}: no {key}; expected a whole number >= 1 (tokens)")
        v = obj[key]
        if not _is_int(v) or v < 1:
            raise TraceError(f"{at}: {key} {_value(v)}: expected a whole number >= 1")
        if v > MAX_ROW_TOKENS:
            raise TraceError(f"{at}: {key} {_value(v)}: expected a whole number from 1 to {MAX_ROW_TOKENS}")
        lengths.append(v)

    ids = obj.get("hash_ids")
    if ids is None:
        hash_ids: tuple[int, ...] = ()
    elif not isinstance(ids, list) or not all(_is_int(h) for h in ids):
        raise TraceError(f"{at}: hash_ids {_value(ids)}: expected a list of whole numbers (block ids)")
    else:
        hash_ids = tuple(ids)
    return ts, (lengths[0], lengths[1], hash_ids)


def trace_duration_s(rows: Sequence[TraceRow]) -> float:
    """Seconds from the first row to the last (0 for no rows)."""
    return rows[-1].t_s if rows else 0.0


def builtin_trace_path() -> Path:
    """The example trace shipped with redline (package data of `redline.presets`)."""
    where = files(_PACKAGE)
    for part in _BUILTIN:  # one name a call: Python 3.10's Traversable.joinpath takes one
        where = where.joinpath(part)
    return Path(str(where))


def builtin_traces() -> dict[str, Path]:
    """The traces shipped with redline, by name (`example`: traces/example.jsonl)."""
    folder = builtin_trace_path().parent
    try:
        return {p.stem: p for p in sorted(folder.glob("*.jsonl")) if p.is_file()}
    except OSError:
        return {}


def resolve_trace(arg: str) -> str:
    """`--trace PATH|NAME` as a path: an existing file wins, else a bundled trace by its name
    (`example` or `example.jsonl`: reachable after a plain `pip install`, outside a checkout);
    anything else is returned as given, for load_trace to refuse with one line."""
    try:
        if Path(arg).expanduser().exists():
            return arg
    except (OSError, ValueError):
        return arg
    name = arg.strip().removesuffix(".jsonl")
    found = builtin_traces().get(name)
    return str(found) if found is not None and "/" not in name and os.sep not in name else arg


class TracePrompts:
    """The prompt of each row of a trace, in the server's tokens by the calibration.

    Each hash id has its own block text of `block_tokens` tokens (round(block_tokens /
    per_word) words), drawn from the seed and the id alone and starting with a 9-digit head of
    its own, so blocks of different ids differ from their first word. A row's prompt is the
    blocks of its hash ids in order, as many as its input_length covers (Mooncake:
    ceil(input_length / block_tokens), the last one partial), then a suffix of its own (a fresh
    9-digit id first, as random prompts) up to `calibration.words_for(input_length)` words in
    all. Blocks that would pass that count are cut, keeping their first words, and the suffix
    keeps at least its id: rows with the same leading hash ids start with the same bytes, and
    no two prompts are the same.

    The suffixes are drawn in the order of the calls: the same seed and the same rows in the
    same order give the same texts.
    """

    def __init__(self, calibration: Calibration, seed: int = 0, block_tokens: int = MOONCAKE_BLOCK_TOKENS,
                 suffix_seed: int | None = None) -> None:
        if block_tokens < 1:
            raise ValueError(f"block_tokens {block_tokens}: expected a whole number >= 1")
        self.calibration = calibration
        self.seed = seed
        self.block_tokens = block_tokens
        self.block_words = max(1, round(block_tokens / calibration.per_word))
        self._heads = random.Random(f"redline-trace-heads:{seed}").randrange(10**9)
        # a worker process draws its suffixes from a seed of its own (its blocks are the
        # session's: the same hash ids give the same bytes in every process)
        self._rng = random.Random(f"redline-trace-suffix:{seed if suffix_seed is None else suffix_seed}")
        self._memo: dict[int, str] = {}
        self._memo_chars = 0

    def block(self, hash_id: int) -> str:
        """The whole text of one hash block (deterministic for the seed and the id)."""
        text = self._memo.get(hash_id)
        if text is not None:
            return text
        rng = random.Random(f"redline-trace-block:{self.seed}:{hash_id}")
        head = f"{(self._heads + hash_id) % 10**9:09d}"  # distinct per id (ids within 10**9 of each other)
        text = head + " " + " ".join(rng.choices(_WORDS, k=self.block_words - 1)) if self.block_words > 1 else head
        if self._memo_chars + len(text) <= _BLOCK_MEMO_CHARS:
            self._memo[hash_id] = text
            self._memo_chars += len(text)
        return text

    def prompt(self, row: TraceRow) -> Prompt:
        total = self.calibration.words_for(row.input_length)
        room = total - 1  # the suffix keeps at least its 9-digit id
        parts: list[str] = []
        for h in row.hash_ids[: -(-row.input_length // self.block_tokens)]:
            if room <= 0:
                break
            text = self.block(h)
            if self.block_words <= room:
                parts.append(text)
                room -= self.block_words
            else:  # the last block that fits, cut to its first `room` words
                parts.append(" ".join(text.split(" ", room)[:room]))
                room = 0
        # the words the blocks left (room counted down from total - 1), at least the id
        parts.append(_random_text(self._rng, room + 1).rstrip(" "))
        expected = row.input_length if self.calibration.measured else 0
        return Prompt(" ".join(parts), row.output_length, expected)

    def prompts(self, rows: Iterable[TraceRow]) -> list[Prompt]:
        """prompt(row) for each row, in order."""
        return [self.prompt(r) for r in rows]
