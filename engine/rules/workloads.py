"""A step's workload (StepResult.workload, WorkloadConfig.describe()) as a key and in words:
what tells two workloads apart for the knee (one knee per workload: engine/rules/knee.py) and
for a comparison (engine/report/comparable.py). Pure."""

from __future__ import annotations

from typing import Any

LENGTHS = ("input_len", "output_len")
_SHOWN = ("dataset", "trace", *LENGTHS, "sharegpt_output_len")
DEFAULT_DATASET = "random"

WorkloadKey = tuple[tuple[str, Any], ...]


def _plain(v: Any) -> Any:
    """A workload value as compared: a file's path by its name (sharegpt:/data/a.json and
    sharegpt:/other/a.json are the same data set on two machines)."""
    if isinstance(v, str) and "/" in v:
        kind, sep, path = v.partition(":")
        if not sep or "/" in kind:
            kind, sep, path = "", "", v
        return kind + sep + path.rstrip("/").rsplit("/", 1)[-1]
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def workload_key(d: dict[str, Any] | None) -> WorkloadKey:
    """A workload dict as a hashable, comparable key (empty values and nested settings such as
    headers left out); () for a step that recorded none."""
    if not isinstance(d, dict):
        return ()
    return tuple(sorted((str(k), _plain(v)) for k, v in d.items()
                        if v not in (None, "", {}, []) and not isinstance(v, (dict, list))))


def workload_text(d: dict[str, Any] | WorkloadKey | None, show_dataset: bool = False) -> str:
    """`1024 in / 2048 out`; the dataset when it is not random (or `show_dataset`), a trace by
    its name, any other setting (turns) named; "workload not recorded" for none."""
    d = dict(d) if isinstance(d, tuple) else (d if isinstance(d, dict) else {})
    bits = []
    sharegpt = str(d.get("dataset") or "").startswith("sharegpt:")
    if d.get("trace") is not None:
        bits.append(f"trace {d['trace']}")
    elif sharegpt:  # its prompts and reply lengths are the conversations' (input_len / output_len unused)
        fixed = d.get("sharegpt_output_len")
        lengths = "the conversations' lengths" if fixed is None else f"{fixed} out"
        bits.append(f"{d['dataset']} ({lengths})")
    elif any(d.get(k) is not None for k in LENGTHS):
        bits.append(f"{d.get('input_len', '?')} in / {d.get('output_len', '?')} out")
    ds = d.get("dataset")
    if ds is not None and not sharegpt and (show_dataset or ds != DEFAULT_DATASET):
        bits.append(str(ds))
    bits += [f"{k} {v}" for k, v in d.items() if k not in _SHOWN]
    return ", ".join(bits) or "workload not recorded"
