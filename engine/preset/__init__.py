"""Presets: TOML files that run a ramp of concurrency steps unattended (docs/presets.md).

One module per job; this package re-exports the public names:

    spec.py         the dataclasses (Preset, TargetSpec, WorkloadSpec, RampSpec, StepPlan,
                    SearchSpec, AfterSpec), each preset key declared on its field; pure data
    keys.py         how a key is declared (`setting`, `Key`) and the kinds that check its value
    fields.py       checking one value: typed getters giving `FILE: KEY: expected ..., got ...`;
                    PresetError
    tables.py       each table's keys (and [stop], [slo], [guard], [gate]'s declarations),
                    read and written through their declarations
    ramp_forms.py   [ramp]: its forms read and written back, the keys that choose a form
    ramp_values.py  [ramp]'s list values (steps, durations, rates, probes, workloads, profile)
    parse.py        load_preset / parse_preset / parse_toml: a file or TOML text to a Preset
    toml_out.py     preset_to_toml: a Preset back to TOML (tomli-w), a comment above each table
    workload_fit.py a preset run in a running session: its workload change, or why not
    knee.py         the knee search the TUI's `k` runs
    builtin.py      the shipped presets (package data redline.presets), listed and found by name

Adding a key: declare it on its spec field (spec.py `setting`: kind, default, meaning, flag,
comment); parse.py reads it, preset_to_toml writes it, tests/unit/engine/preset/test_keys.py holds its row
in docs/presets.md.

A recorded session as a replay preset (`redline preset-from`) reads a session: it is
engine/report/preset_from.py. Layering (docs/architecture.md): nothing here imports the
engine's runtime (core/, run/, host); the preset runner imports presets, never the reverse.
"""

from .builtin import BuiltinPreset, builtin_dir, builtin_presets, resolve_preset
from .parse import load_preset, parse_preset, parse_toml
from .spec import (
    DEFAULT_HOLD_S,
    DEFAULT_MAX_HOLD_FACTOR,
    DEFAULT_MIN_REQUESTS,
    DEFAULT_WARMUP_S,
    MAX_CONCURRENCY,
    MAX_SECONDS,
    MAX_STEPS,
    AfterSpec,
    Preset,
    PresetError,
    RampSpec,
    SearchSpec,
    StepPlan,
    StopSpec,
    TargetSpec,
    WorkloadSpec,
    as_search,
)
from .toml_out import preset_to_toml

__all__ = [
    "SearchSpec",
    "as_search",
    "AfterSpec",
    "BuiltinPreset",
    "DEFAULT_HOLD_S",
    "DEFAULT_MAX_HOLD_FACTOR",
    "DEFAULT_MIN_REQUESTS",
    "DEFAULT_WARMUP_S",
    "MAX_CONCURRENCY",
    "MAX_SECONDS",
    "MAX_STEPS",
    "Preset",
    "PresetError",
    "RampSpec",
    "StepPlan",
    "StopSpec",
    "TargetSpec",
    "WorkloadSpec",
    "builtin_dir",
    "builtin_presets",
    "load_preset",
    "parse_preset",
    "parse_toml",
    "preset_to_toml",
    "resolve_preset",
]
