"""Where prompts come from: random text of a length in the server's tokens, shared-prefix
groups, ShareGPT, JSONL.

Lengths are in the server's tokens, as bench_serving's are. Random prompts are calibrated
against what the server reports (usage.prompt_tokens on two probe requests), so
`input_len = 1024` means 1024 tokens of *that* server's tokenizer and chat template.

`prefix:groups=G,prefix_len=P,suffix_len=S` is calibrated the same way: G groups, each with its
own text of P tokens that every prompt of the group starts with, followed by S tokens unique
to the prompt (a prompt is P + S tokens, the chat template included). Requests cycle over the
groups (request i is of group i mod G), so a server with a prefix cache (SGLang's
RadixAttention, vLLM's automatic prefix caching) computes each prefix once.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Awaitable, Callable

from ..constants import CALIBRATION_WORDS, DEFAULT_INPUT_LEN, DEFAULT_OUTPUT_LEN
from .request_shape import (
    Headers,
    RequestShapeError,
    check_extra_body,
    check_headers,
    check_range_ratio,
    length_range,
    secret_values,
    shown_headers,
)
from .sharegpt import MIN_TOKENS, ShareGPTError, read_pairs, requests_of

_WORDS = (
    "time year people way day man thing woman life child world school state family student "
    "group country problem hand part place case week company system program question work "
    "government number night point home water room mother area money story fact month lot "
    "right study book eye job word business issue side kind head house service friend father "
    "power hour game line end member law car city community name president team minute idea "
    "kid body information back parent face others level office door health person art war "
    "history party result change morning reason research girl guy moment air teacher force "
    "education foot boy age policy process music market sense nation plan college interest "
    "death experience effect use class control care field development role effort rate heart"
).split()


PREFIX_FORM = "prefix:groups=G,prefix_len=P,suffix_len=S"
FILE_FORMS = "random, sharegpt:PATH or jsonl:PATH"
DATASET_FORMS = f"{FILE_FORMS}, or {PREFIX_FORM}"
PREFIX_KEYS = ("groups", "prefix_len", "suffix_len")
#: Upper bounds of a prefix spec: groups, and prefix_len + suffix_len (tokens of one prompt).
MAX_PREFIX_GROUPS = 1_000_000
MAX_PREFIX_PROMPT_TOKENS = 10_000_000
#: Characters of group prefix texts kept in memory; beyond, a prefix is rebuilt when used.
_PREFIX_MEMO_CHARS = 64 * 1024 * 1024


class WorkloadError(ValueError):
    """A dataset that cannot be used; the message is one line naming the value."""


class PrefixSpecError(WorkloadError):
    """A malformed `prefix:` dataset; `reason` says what is wrong without the spec."""

    def __init__(self, spec: str, reason: str) -> None:
        self.spec = spec
        self.reason = reason
        super().__init__(f"dataset {_shown(spec)}: {reason} (expected {PREFIX_FORM}, each a whole number >= 1)")


@dataclass(frozen=True)
class PrefixSpec:
    """G groups of prompts sharing a P-token prefix, each with an S-token unique suffix."""

    groups: int
    prefix_len: int
    suffix_len: int

    def spec(self) -> str:
        return f"prefix:groups={self.groups},prefix_len={self.prefix_len},suffix_len={self.suffix_len}"


@dataclass(frozen=True)
class WorkloadConfig:
    dataset: str = "random"  # random | sharegpt:PATH | jsonl:PATH | prefix:groups=G,prefix_len=P,suffix_len=S
    input_len: int = DEFAULT_INPUT_LEN
    output_len: int = DEFAULT_OUTPUT_LEN
    seed: int = 0
    turns: int = 1  # multi-turn: each session sends this many turns, each with the answers so far
    think_s: float = 0.0  # multi-turn: pause between a turn's answer and the next turn
    trace: str | None = None  # a Mooncake JSONL trace replayed open-loop (engine/workload/trace.py)
    # request shaping (engine/workload/request_shape.py): the random dataset's lengths drawn per
    # request from [L*(1-R), L*(1+R)]; whether requests ask the server to ignore EOS; a JSON
    # object's text merged into every body; headers sent on every request (a credential's value
    # never shown: describe() masks it)
    random_range_ratio: float = 0.0
    ignore_eos: bool = True
    extra_body: str = ""
    headers: Headers = field(default=(), repr=False)
    # a ShareGPT dataset (engine/workload/sharegpt.py): every request's max_tokens (None: its
    # reply's length, as bench_serving), and the context length past which a pair is left out
    sharegpt_output_len: int | None = None
    sharegpt_context_len: int | None = None

    def __post_init__(self) -> None:
        """The engine's own check of the request shaping (the CLI and presets check first,
        naming their flag or key): WorkloadError, one line."""
        try:
            if self.random_range_ratio:
                check_range_ratio(self.random_range_ratio, "random_range_ratio")
            if self.extra_body:
                check_extra_body(json.loads(self.extra_body), "extra_body")
            if self.headers:
                check_headers(self.headers, "headers")
        except (RequestShapeError, ValueError) as exc:
            raise WorkloadError(str(exc)) from None

    def secret_values(self) -> tuple[str, ...]:
        """The values of credential-like headers (4 characters or more), for the session
        writer to scrub from everything it writes."""
        return tuple(v for v in secret_values(self.headers) if len(v) >= 4)

    def describe(self, full: bool = False) -> dict:
        """The workload as steps, the screen and meta.json carry it: request shaping only
        where it is not the default, unless `full` (meta.json: every key, seed included)."""
        d: dict = {"dataset": self.dataset, "input_len": self.input_len, "output_len": self.output_len}
        if self.turns > 1:
            d.update(turns=self.turns, think_s=self.think_s)
        if self.trace is not None:
            d["trace"] = self.trace
        if full or self.random_range_ratio:
            d["random_range_ratio"] = self.random_range_ratio
        if full or not self.ignore_eos:
            d["ignore_eos"] = self.ignore_eos
        if full or self.extra_body:
            d["extra_body"] = json.loads(self.extra_body) if self.extra_body else {}
        if full or self.headers:
            d["headers"] = shown_headers(self.headers)
        if self.dataset.startswith("sharegpt:"):  # its output lengths are the replies' unless fixed
            d["sharegpt_output_len"] = self.sharegpt_output_len
            if full or self.sharegpt_context_len is not None:
                d["sharegpt_context_len"] = self.sharegpt_context_len
        if full:
            d["seed"] = self.seed
        return d


@dataclass(frozen=True, slots=True)
class Prompt:
    text: str
    max_tokens: int
    expected_input_tokens: int = 0  # what calibration predicts (0 = unknown)


@dataclass(frozen=True)
class Calibration:
    """tokens = overhead + per_word * words, fitted from the server's own counts."""

    overhead: float
    per_word: float
    measured: bool  # False when the server reported no prompt_tokens (fell back to 1/word)

    def words_for(self, tokens: int) -> int:
        return max(1, round((tokens - self.overhead) / self.per_word))

    def tokens_for(self, words: int) -> int:
        return round(self.overhead + self.per_word * words)

    @property
    def tokens_per_char(self) -> float | None:
        """The server's tokens per character of text, from its tokens per word of the
        calibration prompts (random words and their spaces); None when not measured."""
        return self.per_word / calibration_chars_per_word() if self.measured else None


DEFAULT_CALIBRATION = Calibration(overhead=0.0, per_word=1.0, measured=False)


def calibration_chars_per_word() -> float:
    """Characters per word of the calibration prompts (random words and their spaces): what
    turns the server's tokens per word into tokens per character (engine/workload/sharegpt.py)."""
    return sum(len(w) + 1 for w in _WORDS) / len(_WORDS)


def _random_text(rng: random.Random, words: int) -> str:
    # A unique numeric prefix defeats prefix caching across requests, as random ids do.
    head = f"{rng.randrange(10**9):09d}"
    return head + " " + " ".join(rng.choices(_WORDS, k=max(0, words - 1)))


async def calibrate(
    measure: Callable[[str], Awaitable[int | None]], seed: int = 0
) -> Calibration:
    """Fit the server's tokens-per-word from two prompts; `measure` returns prompt_tokens."""
    rng = random.Random(seed ^ 0x5EED)
    w1, w2 = CALIBRATION_WORDS
    p1 = await measure(_random_text(rng, w1))
    p2 = await measure(_random_text(rng, w2))
    if not p1 or not p2 or p2 <= p1:
        return DEFAULT_CALIBRATION
    per_word = (p2 - p1) / (w2 - w1)
    return Calibration(overhead=p1 - per_word * w1, per_word=per_word, measured=True)


def _shown(spec: str) -> str:
    return repr(spec) if len(spec) <= 120 else repr(spec[:117]) + "..."


def is_prefix_spec(spec: str) -> bool:
    return spec.startswith("prefix:")


def needs_calibration(spec: str) -> bool:
    """Datasets whose lengths are in the server's tokens: `random` and `prefix:...`; and
    `sharegpt:`, whose replies' lengths are estimated at the server's rate."""
    return spec == "random" or is_prefix_spec(spec) or spec.startswith("sharegpt:")


_WHOLE = re.compile(r"[0-9]+")


def parse_prefix_spec(spec: str) -> PrefixSpec:
    """`prefix:groups=G,prefix_len=P,suffix_len=S` (keys in any order, spaces around items
    allowed) -> PrefixSpec; PrefixSpecError naming the bad part otherwise."""
    kind, sep, body = spec.partition(":")
    if kind != "prefix" or not sep:
        raise PrefixSpecError(spec, "not a prefix dataset")
    if not body.strip():
        raise PrefixSpecError(spec, "no groups, prefix_len or suffix_len after 'prefix:'")
    values: dict[str, int] = {}
    for item in body.split(","):
        item = item.strip()
        if not item:
            raise PrefixSpecError(spec, "empty item")
        key, eq, raw = (part.strip() for part in item.partition("="))
        if key not in PREFIX_KEYS:
            raise PrefixSpecError(spec, f"unknown key {key!r}" if eq else f"{item!r} is not KEY=VALUE")
        if not eq:
            raise PrefixSpecError(spec, f"{key} has no value")
        if key in values:
            raise PrefixSpecError(spec, f"{key} given twice")
        if not _WHOLE.fullmatch(raw) or int(raw) < 1:
            raise PrefixSpecError(spec, f"{key} must be a whole number >= 1, got {raw!r}")
        values[key] = int(raw)
    missing = [k for k in PREFIX_KEYS if k not in values]
    if missing:
        raise PrefixSpecError(spec, "missing " + " and ".join(missing))
    if values["groups"] > MAX_PREFIX_GROUPS:
        raise PrefixSpecError(spec, f"groups must be at most {MAX_PREFIX_GROUPS}, got {values['groups']}")
    if values["prefix_len"] + values["suffix_len"] > MAX_PREFIX_PROMPT_TOKENS:
        raise PrefixSpecError(
            spec, f"prefix_len + suffix_len must be at most {MAX_PREFIX_PROMPT_TOKENS} tokens, "
            f"got {values['prefix_len'] + values['suffix_len']}")
    return PrefixSpec(values["groups"], values["prefix_len"], values["suffix_len"])


class PrefixPrompts:
    """The prompts of a prefix dataset: request i is of group i mod G; its text is the group's
    prefix, a space, then a suffix drawn for it alone (starting with a random 9-digit id, like
    a random prompt, so prompts of a group differ right after the prefix).

    Word counts come from the calibration: the prefix has round(P / tokens-per-word) words and
    the whole prompt `calibration.words_for(P + S)`, so the prefix is P of the server's tokens
    and the prompt P + S with the chat template's overhead.
    """

    def __init__(self, spec: PrefixSpec, calibration: Calibration, seed: int, output_len: int) -> None:
        self.spec = spec
        self.calibration = calibration
        self.output_len = output_len
        self.seed = seed
        self.prefix_words = max(1, round(spec.prefix_len / calibration.per_word))
        total = calibration.words_for(spec.prefix_len + spec.suffix_len)
        self.suffix_words = max(1, total - self.prefix_words)
        self._rng = random.Random(f"redline-prefix-suffix:{seed}")
        self._heads = random.Random(f"redline-prefix-heads:{seed}").randrange(10**9)
        self._memo: dict[int, str] = {}
        self._memo_chars = 0
        self._i = 0

    def prefix(self, group: int) -> str:
        """The text every prompt of `group` starts with (deterministic for the seed)."""
        text = self._memo.get(group)
        if text is not None:
            return text
        rng = random.Random(f"redline-prefix:{self.seed}:{group}")
        head = f"{(self._heads + group) % 10**9:09d}"  # distinct per group, 9 digits as random prompts
        text = head + " " + " ".join(rng.choices(_WORDS, k=self.prefix_words - 1)) if self.prefix_words > 1 else head
        if self._memo_chars + len(text) <= _PREFIX_MEMO_CHARS:
            self._memo[group] = text
            self._memo_chars += len(text)
        return text

    def next(self) -> Prompt:
        group = self._i % self.spec.groups
        self._i += 1
        text = self.prefix(group) + " " + _random_text(self._rng, self.suffix_words)
        expected = self.spec.prefix_len + self.spec.suffix_len if self.calibration.measured else 0
        return Prompt(text, self.output_len, expected)


class PromptSource:
    """Yields prompts forever (datasets cycle), deterministically for a seed."""

    def __init__(self, config: WorkloadConfig, calibration: Calibration = DEFAULT_CALIBRATION) -> None:
        self.config = config
        self.calibration = calibration
        self._rng = random.Random(config.seed)
        self._items: list[Prompt] = []
        self._prefix: PrefixPrompts | None = None
        self._i = 0
        # --random-range-ratio: each random prompt's input and output lengths drawn around the
        # means, from an RNG of their own (the prompts' text stays what the seed gives)
        spread = config.random_range_ratio > 0 and config.dataset == "random"
        self._lengths = random.Random(f"redline-lengths:{config.seed}") if spread else None
        if is_prefix_spec(config.dataset):
            self._prefix = PrefixPrompts(parse_prefix_spec(config.dataset), calibration, config.seed, config.output_len)
        elif config.dataset != "random":
            self._items = load_dataset(config.dataset, config.output_len, calibration, config)

    def next(self) -> Prompt:
        if self._prefix is not None:
            return self._prefix.next()
        if self._items:
            p = self._items[self._i % len(self._items)]
            self._i += 1
            return p
        n, out = self.config.input_len, self.config.output_len
        if self._lengths is not None:
            r = self.config.random_range_ratio
            n = self._lengths.randint(*length_range(n, r))
            out = self._lengths.randint(*length_range(out, r))
        words = self.calibration.words_for(n)
        return Prompt(
            _random_text(self._rng, words),
            out,
            n if self.calibration.measured else 0,
        )


def parse_dataset_spec(spec: str) -> tuple[str, Path | None]:
    """'random' | 'sharegpt:PATH' | 'jsonl:PATH' | 'prefix:...' -> (kind, path); a prefix spec
    is checked (PrefixSpecError) and has no path."""
    if spec == "random":
        return "random", None
    if is_prefix_spec(spec):
        parse_prefix_spec(spec)
        return "prefix", None
    kind, sep, path = spec.partition(":")
    if not sep or kind not in ("sharegpt", "jsonl") or not path:
        raise WorkloadError(f"dataset {_shown(spec)}: expected {DATASET_FORMS}")
    return kind, Path(path).expanduser()


def check_file(path: Path, where: str, expected: str, error: type[Exception]) -> None:
    """A regular file that exists, else `error` (one line: `where`: what is wrong; `expected`)."""
    try:
        is_dir, exists, is_file = path.is_dir(), path.exists(), path.is_file()
    except (OSError, ValueError) as exc:  # a name too long, a NUL byte, ...
        reason = getattr(exc, "strerror", None) or str(exc) or exc.__class__.__name__
        raise error(f"{where}: cannot be opened ({reason}); {expected}") from None
    if is_dir:
        raise error(f"{where}: is a directory; {expected}")
    if not exists:
        raise error(f"{where}: not found; {expected}")
    if not is_file:
        raise error(f"{where}: not a regular file; {expected}")


def load_dataset(spec: str, output_len: int, calibration: Calibration = DEFAULT_CALIBRATION,
                 config: WorkloadConfig | None = None) -> list[Prompt]:
    """The prompts of a dataset file, checked (WorkloadError, one line). A prefix dataset is
    generated without end: this checks its spec and returns one prompt of each group (of the
    first 1000), built with the uncalibrated default (PromptSource makes the real ones).
    A ShareGPT file's lengths are estimated at `calibration`'s rate, its fixed output length,
    context length and shuffle from `config` (engine/workload/sharegpt.py)."""
    kind, path = parse_dataset_spec(spec)
    if kind == "prefix":
        p = PrefixPrompts(parse_prefix_spec(spec), DEFAULT_CALIBRATION, 0, output_len)
        return [p.next() for _ in range(min(p.spec.groups, 1000))]
    assert path is not None
    name = str(path)
    shown = repr(name) if len(name) <= 120 else repr(name[:117]) + "..."
    expected = "expected a ShareGPT JSON file (a human turn and its reply in each conversation)" if kind == "sharegpt" else "expected a JSONL file (one prompt per line)"
    check_file(path, f"dataset file {shown}", expected, WorkloadError)
    try:
        raw = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WorkloadError(f"dataset file {shown}: not UTF-8 text (byte {exc.start}); {expected}") from None
    except OSError as exc:
        raise WorkloadError(f"dataset file {shown}: cannot read ({exc.strerror or exc.__class__.__name__})") from None
    if raw.startswith("\ufeff"):  # a UTF-8 byte-order mark (Windows editors) is not content
        raw = raw[1:]
    if not raw.strip():
        raise WorkloadError(f"dataset file {shown}: empty; {expected}")
    if kind == "sharegpt":
        c = config or WorkloadConfig(dataset=spec)
        try:
            pairs = read_pairs(path, raw)
        except ShareGPTError as exc:
            raise WorkloadError(str(exc)) from None
        items = [Prompt(text, n) for text, n in requests_of(pairs, calibration.tokens_per_char, output_len=c.sharegpt_output_len,
                                                             context_len=c.sharegpt_context_len, seed=c.seed)]
        if pairs and not items:
            too = f"shorter than {MIN_TOKENS} tokens" + (f" or longer than --sharegpt-context-len {c.sharegpt_context_len}"
                                                         if c.sharegpt_context_len is not None else "")
            raise WorkloadError(f"dataset file {shown}: all {len(pairs)} conversations left out (prompt or reply {too})")
    else:
        items = _jsonl(path, raw, output_len)
    if not items:
        raise WorkloadError(f"dataset file {shown}: no usable prompts; {expected}")
    return items


def _jsonl(path: Path, raw: str, output_len: int) -> list[Prompt]:
    """JSONL: one per line, a string or {"prompt": str, "max_tokens"|"output_len": int}."""
    out = []
    for n, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise WorkloadError(
                f"dataset file {str(path)!r} line {n}: not JSON ({exc}); expected a string "
                'or {"prompt": "...", "max_tokens": N}'
            ) from exc
        mt: object  # whatever the line holds, checked before use
        if isinstance(obj, str):
            text, mt = obj, output_len
        elif isinstance(obj, dict) and isinstance(obj.get("prompt"), str):
            text = obj["prompt"]
            mt = obj.get("max_tokens", obj.get("output_len", output_len))
            if not isinstance(mt, int) or isinstance(mt, bool) or mt < 1:
                raise WorkloadError(f"dataset file {str(path)!r} line {n}: max_tokens must be a positive integer, got {mt!r}")
        else:
            raise WorkloadError(
                f'dataset file {str(path)!r} line {n}: expected a string or {{"prompt": "..."}}, got {line[:60]!r}'
            )
        if text.strip():
            out.append(Prompt(text, mt))
    return out
