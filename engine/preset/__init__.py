"""Presets: TOML files that run a ramp of concurrency steps unattended (docs/presets.md).

One module per job; this package re-exports the public names:

    spec.py      the dataclasses (Preset, TargetSpec, WorkloadSpec, RampSpec, StepPlan,
                 StopSpec, AfterSpec), the limits, PresetError; pure data
    fields.py    checking one value: typed getters giving `FILE: KEY: expected ..., got ...`
    parse.py     load_preset / parse_preset / parse_toml: a file or TOML text to a Preset;
                 the tables are read by parse_workload.py, parse_ramp.py (with
                 parse_open_loop.py, parse_search.py, ramp_fields.py, parse_server_ops.py)
                 and parse_rules.py
    toml_out.py  preset_to_toml: a Preset back to TOML (tomli-w), a comment above each table
    builtin.py   the shipped presets (package data redline.presets), listed and found by name

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
