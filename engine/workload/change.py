"""A live workload change (the TUI's workload form, `SetWorkload`): new lengths, a new
dataset, or a prefix ratio, applied to the running workload. The engine starts a new step
with it, logs it (kind `workload`), and summary.json's steps and `preset-from` carry it.

    output_len=N    max_tokens of every request from now on (a ShareGPT dataset's too, instead
                    of each reply's length)
    input_len=N     prompt tokens (random and prefix datasets, in the server's tokens)
    dataset=SPEC    random | sharegpt:PATH | jsonl:PATH | prefix:groups=G,prefix_len=P,suffix_len=S
    prefix_ratio=X  0 <= X < 1: the share of each prompt's input_len that its group shares
                    (a prefix dataset with the current groups, or 8); 0 = random prompts
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from .prompts import WorkloadConfig, WorkloadError, is_prefix_spec, parse_dataset_spec, parse_prefix_spec

DEFAULT_PREFIX_GROUPS = 8
MAX_LEN = 10_000_000
FORM = "output_len=N input_len=N dataset=SPEC prefix_ratio=X (any of them)"
KEYS = ("output_len", "input_len", "dataset", "prefix_ratio")


@dataclass(frozen=True)
class WorkloadChange:
    input_len: int | None = None
    output_len: int | None = None
    dataset: str | None = None
    prefix_ratio: float | None = None

    @property
    def empty(self) -> bool:
        return all(getattr(self, k) is None for k in KEYS)

    def describe(self) -> str:
        return " ".join(f"{k}={getattr(self, k)}" for k in KEYS if getattr(self, k) is not None)

    def apply(self, wl: WorkloadConfig) -> WorkloadConfig:
        """The workload with this change; WorkloadError (one line naming the value) when a
        value cannot be used. A prefix dataset's input_len is its prefix + suffix length."""
        new = wl
        if self.dataset is not None:
            parse_dataset_spec(self.dataset)  # checks the spec (a file's contents: PromptSource)
            new = dataclasses.replace(new, dataset=self.dataset)
        if self.output_len is not None:
            n = _length("output_len", self.output_len)
            new = dataclasses.replace(new, output_len=n)
            if new.dataset.startswith("sharegpt:"):  # ShareGPT asks each reply's length unless one is given
                new = dataclasses.replace(new, sharegpt_output_len=n)
        if self.input_len is not None:
            n = _length("input_len", self.input_len)
            new = dataclasses.replace(new, input_len=n)
            if is_prefix_spec(new.dataset) and self.prefix_ratio is None:
                p = parse_prefix_spec(new.dataset)
                ratio = p.prefix_len / (p.prefix_len + p.suffix_len)
                new = _with_ratio(new, ratio, p.groups)
        if self.prefix_ratio is not None:
            r = self.prefix_ratio
            if isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r) or not 0 <= r < 1:
                raise WorkloadError(f"prefix_ratio {r!r}: expected a number from 0 to below 1 (0 = random prompts)")
            groups = parse_prefix_spec(new.dataset).groups if is_prefix_spec(new.dataset) else DEFAULT_PREFIX_GROUPS
            if is_prefix_spec(new.dataset) and self.input_len is None:
                p = parse_prefix_spec(new.dataset)
                new = dataclasses.replace(new, input_len=p.prefix_len + p.suffix_len)
            new = _with_ratio(new, float(r), groups) if r > 0 else dataclasses.replace(new, dataset="random")
        if is_prefix_spec(new.dataset):
            p = parse_prefix_spec(new.dataset)
            new = dataclasses.replace(new, input_len=p.prefix_len + p.suffix_len)
        return new


def _with_ratio(wl: WorkloadConfig, ratio: float, groups: int) -> WorkloadConfig:
    total = max(2, wl.input_len)
    prefix = min(total - 1, max(1, round(ratio * total)))
    return dataclasses.replace(wl, dataset=f"prefix:groups={groups},prefix_len={prefix},suffix_len={total - prefix}")


def _length(key: str, v: object) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_LEN:
        raise WorkloadError(f"{key} {v!r}: expected a whole number of tokens from 1 to {MAX_LEN}")
    return v


def parse_workload_change(text: str) -> WorkloadChange:
    """`output_len=512 input_len=1024` (spaces between items; `out`/`in` accepted for
    the lengths) -> WorkloadChange; WorkloadError (one line) otherwise."""
    aliases = {"out": "output_len", "output": "output_len", "in": "input_len", "input": "input_len", "prefix": "prefix_ratio"}
    values: dict[str, Any] = {}  # Any: each key's own WorkloadChange field type, as parsed below
    items = text.split()
    if not items:
        raise WorkloadError(f"workload change {text!r}: empty; expected {FORM}")
    for item in items:
        key, eq, raw = item.partition("=")
        key = aliases.get(key.strip(), key.strip())
        if key not in KEYS or not eq:
            raise WorkloadError(f"workload change {item!r}: expected {FORM}")
        if key in values:
            raise WorkloadError(f"workload change: {key} given twice")
        if key == "dataset":
            values[key] = raw
        elif key == "prefix_ratio":
            try:
                values[key] = float(raw)
            except ValueError:
                raise WorkloadError(f"prefix_ratio {raw!r}: expected a number from 0 to below 1 (0 = random prompts)") from None
        else:
            try:
                values[key] = int(raw)
            except ValueError:
                raise WorkloadError(f"{key} {raw!r}: expected a whole number of tokens from 1 to {MAX_LEN}") from None
    return WorkloadChange(**values)
