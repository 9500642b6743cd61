"""The tables of a preset: which keys each accepts (in the order a refusal lists them), the
comment the writer puts above it, and the keys whose spec lives in a lower layer: [stop]
(engine/rules/verdicts.py StopSpec), [slo] (engine/measure/slo.py Slo), [guard]
(engine/rules/guard.py GuardSpec), [gate]; and the top-level `name` and `description`.

    TOP                  name, description
    TABLES["target"]     TargetSpec's declared fields (spec.py)
    TABLES["workload"]   WorkloadSpec's
    TABLES["ramp"]       RampSpec's, Preset.repeats and the form keys (ramp_forms.py)
    TABLES["stop"] ...   declared here

Each table of plain keys is read and written through their declarations (keys.py `read_keys`,
`write_keys`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from ..constants import STALL_S
from ..measure.slo import DEFAULT_ATTAINMENT
from .fields import Ctx, num
from .keys import Custom, Key, Number, Seconds, Text, keys_of, read_keys, write_keys
from .ramp_forms import RAMP_KEYS
from .spec import AfterSpec, TargetSpec, WorkloadSpec

_MS = Number(0.0, math.inf, "a number of milliseconds > 0", "milliseconds > 0")
_FAILED = Number(0.0, 1.0, "a fraction 0 <= x < 1 (0.05 = 5 % of requests failed)", "fraction 0 <= x < 1", lo_open=False,
                 hi_open=True)


def _off(table: str, name: str, kind: Number | Seconds, help: str) -> Key:
    """A key whose absence turns its rule off (None)."""
    return Key(kind, help, table=table, name=name, default=None)


TOP = (
    Key(Text(), "shown in the TUI, the session metadata and summary", name="name", doc_default="file name without `.toml`"),
    Key(Custom(Ctx.line, "string"), "one line, shown in the preset picker", name="description", default=""),
)
STOP = (
    _off("stop", "plateau_gain", Number(0.0, 1.0, "a fraction 0..1 (0.05 = 5 % more tok/s than the best before)", "fraction 0..1",
                                         lo_open=False),
         "the step's output tok/s − noise < best earlier x (1 + `plateau_gain`), i.e. it did not clearly give that much more "
         "(0.05: under 5 % more). Not on the first step"),
    _off("stop", "p99_ttft_ms", _MS, "the step's p99 time to first token > this"),
    _off("stop", "p99_itl_ms", _MS, "the step's p99 inter-token latency > this"),
    _off("stop", "error_rate", _FAILED, "failed / (completed + failed) > this (0: any failure)"),
    _off("stop", "collapse", Number(0.0, 1.0, "a fraction 0 < x < 1 (0.2 = tok/s 20 % below the best step)", "fraction 0 < x < 1",
                                     hi_open=True),
         "the step's output tok/s + noise < best earlier x (1 - `collapse`) (0.2: fell clearly more than 20 %). Not on the "
         "first step"),
    _off("stop", "stall_s", Seconds(doc=f"seconds > 0 (default {num(STALL_S)})"),
         "requests are in flight and no output token came for this long (`stalled`); always on, the key only moves it. "
         "Raise it for a server whose single prefill takes longer (a 100k-token prompt)"),
)
SLO = (
    _off("slo", "ttft_ms", _MS, "its time to first token"),
    _off("slo", "tpot_ms", _MS, "its time per output token"),
    _off("slo", "itl_ms", _MS, "its own p99 gap between tokens"),
    _off("slo", "e2e_ms", _MS, "its end-to-end latency"),
    Key(Number(0.0, 1.0, "a fraction 0 < x <= 1 of requests that must meet the bounds",
               f"fraction 0 < x <= 1 (default {num(DEFAULT_ATTAINMENT)})"),
        "the share of a step's requests that must meet the bounds for the step to meet the SLO",
        table="slo", name="attainment", default=DEFAULT_ATTAINMENT, always=True),
)
GUARD = (
    _off("guard", "error_rate", _FAILED, "failed / finished requests over the last 3 s"),
    _off("guard", "ttft_p99_ms", _MS, "the live p99 TTFT"),
    _off("guard", "gpu_temp_c", Number(0.0, 200.0, "degrees Celsius, e.g. 85", "degrees Celsius", hi_open=True), "the hottest GPU"),
)
GATE = (Key(None, 'e.g. `["knee>=64", "errors<=1%", "ttft_p99@C=64<=2s"]`', table="gate", name="conditions",
            doc_type="a string of comma-separated conditions, or a list of such strings", flag="--gate"),)


@dataclass(frozen=True)
class Table:
    keys: tuple[Key, ...]
    comments: tuple[str, ...]  # the lines preset_to_toml writes above it
    optional: bool = False  # written only when it holds a key (or, [slo], [guard], [gate], is set)


__all__ = ["GATE", "GUARD", "SLO", "STOP", "TABLES", "TOP", "Table", "every_key", "read_keys", "write_keys"]

TABLES: dict[str, Table] = {
    "target": Table(keys_of(TargetSpec, "target"), ("--url overrides the URL; api is an alias of [workload].api",), optional=True),
    "workload": Table(keys_of(WorkloadSpec, "workload"), (
        "api: chat | completions | generate; dataset: random | sharegpt:PATH | jsonl:PATH",
        "input_len: prompt tokens (random dataset); output_len: max_tokens, generated in full")),
    "ramp": Table(RAMP_KEYS, ()),  # its comments say its form (ramp_forms.py ramp_table)
    "stop": Table(STOP, ("any rule that fires ends the ramp; absent = off (stall_s: default 10 s, always on)",)),
    "after": Table(keys_of(AfterSpec, "after"), ()),
    "slo": Table(SLO, ("per-request bounds (ms) and the share of requests that must meet them",), optional=True),
    "guard": Table(GUARD, ("the load is dropped when a live figure crosses one of these",), optional=True),
    "gate": Table(GATE, ("the conditions of a headless run (engine/report/gate.py); --gate replaces them",), optional=True),
}


def every_key() -> Iterable[Key]:
    """Every declared key: the top level's, then each table's."""
    yield from TOP
    for t in TABLES.values():
        yield from t.keys
