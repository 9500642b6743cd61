"""The engine's public surface for the UI: everything `tui/` uses to run a session.

`tui/` reaches the engine through two modules only (tests/unit/test_architecture.py counts them):
this one (commands, the Snapshot types, the EngineConfig and the checks of every user value,
starting an engine host or the built-in sim, the presets) and `engine/report/api.py` (the
session tools of `redline report`, `export`, `preset-from` and the gates). Where a name lives
inside the engine is the engine's business: it moves, this surface stays.

Every name is loaded on first use (PEP 562 module __getattr__): importing this module costs
nothing, so `redline --help` never pays for httpx, polars or the engine's core, and the TUI's
first frame does not wait for them. A name is looked up in its home module on every access
(nothing cached here), so a test that patches the home module's attribute is seen.

The `if TYPE_CHECKING:` block below names the same things for type checkers and for the
structure tools that draw the import graph; the test checks that it and _EXPORTS agree.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (`redline --help`)

from . import __version__

if TYPE_CHECKING:
    from .client.target import TargetError, TargetUnreachable, validate_url
    from .constants import (
        CONSECUTIVE_FAILURES_END,
        DEFAULT_CONCURRENCY,
        DEFAULT_INPUT_LEN,
        DEFAULT_MAX_CONCURRENCY,
        DEFAULT_OUTPUT_LEN,
        DEFAULT_REQUEST_TIMEOUT_S,
        DEFAULT_STEP,
        DEFAULT_TRANSPORT,
        MAX_SEED,
        MIN_LIVE_STEP_S,
        TIMELINE_INTERVAL_S,
        TRANSPORTS,
    )
    from .control.address import ControlError, check_control
    from .control.http_api import start_engine
    from .core import commands
    from .core.config import EngineConfig
    from .core.engine import Engine
    from .core.snapshot import LogLine, Snapshot
    from .core.target_stats import WeightsError, parse_weights
    from .fmt import BOUND, ms, num, rate, step_ms
    from .host import EngineError, EngineProcess, EngineThread
    from .load.controller import ConcurrencyError, check_concurrency
    from .load.worker_count import Plan, auto_plan, kernel_stamped, usable_cores
    from .loop import wait_within
    from .measure.slo import SloError, parse_slo
    from .measure.step_result import StepResult
    from .preset import Preset, PresetError, as_search, builtin_dir, builtin_presets, load_preset, resolve_preset
    from .preset.knee import knee_search_preset
    from .preset.workload_fit import preset_workload_change
    from .rules.guard import parse_guard
    from .rules.step_text import format_run_summary, format_step_table
    from .rules.verdicts import Knee, knee_from_summary, knees_from_summary, summary_knee
    from .run.estimate import duration_text
    from .run.preset_runner import RunOutcome, new_engine, run_preset
    from .session import SessionError, check_session_dir, default_session_dir
    from .session.scrub import redact_argv
    from .session.writer import loss_line
    from .sim.profiles import get_profile
    from .sim.serve import add_sim_arguments, run_from_args, spawn_sim_process
    from .sweep.gate import SweepGate, SweepGateError, check_sweep, parse_sweep_gate
    from .sweep.merge import merged_doc
    from .sweep.resume import check_resume, preset_digest
    from .sweep.runner import ConfigServer, TimeLeft, open_sweep_file, run_sweep
    from .sweep.server_proc import free_port
    from .sweep.spec import Config as SweepConfig, SweepError, SweepSpec, load_sweep_file, spec_from_args
    from .sweep.sweep_file import SWEEP_FILE, load_sweep
    from .sweep.table import format_answers, format_sweep
    from .telemetry.types import GpuSample
    from .text import closest, one_line
    from .workload.arrivals import MAX_RATE, ArrivalError, check_rate, parse_arrival
    from .workload.change import KEYS as WORKLOAD_KEYS, MAX_LEN as WORKLOAD_MAX_LEN, WorkloadChange
    from .workload.prompts import WorkloadConfig, WorkloadError, is_prefix_spec, load_dataset, parse_prefix_spec
    from .workload.request_shape import (
        RequestShapeError,
        check_headers,
        check_range_ratio,
        extra_body_text,
        parse_extra_body,
        parse_header,
    )
    from .workload.trace import TraceError, builtin_traces, load_trace, resolve_trace

# modules given whole: name -> module (relative to this package)
_MODULES: dict[str, str] = {"commands": ".core.commands"}
# home module (relative to this package) -> the names it gives; "NAME=ATTR" gives ATTR as NAME
_EXPORTS: dict[str, tuple[str, ...]] = {
    ".workload.arrivals": ("MAX_RATE", "ArrivalError", "check_rate", "parse_arrival"),
    ".core.config": ("EngineConfig",),
    ".constants": (
        "CONSECUTIVE_FAILURES_END", "DEFAULT_CONCURRENCY", "DEFAULT_INPUT_LEN", "DEFAULT_MAX_CONCURRENCY", "DEFAULT_OUTPUT_LEN",
        "DEFAULT_REQUEST_TIMEOUT_S", "DEFAULT_STEP", "DEFAULT_TRANSPORT", "MAX_SEED", "MIN_LIVE_STEP_S", "TIMELINE_INTERVAL_S",
        "TRANSPORTS",
    ),
    ".control.address": ("ControlError", "check_control"),
    ".control.http_api": ("start_engine",),
    ".load.controller": ("ConcurrencyError", "check_concurrency"),
    ".core.engine": ("Engine",),
    ".run.estimate": ("duration_text",),
    ".fmt": ("BOUND", "ms", "num", "rate", "step_ms"),
    ".rules.guard": ("parse_guard",),
    ".host": ("EngineError", "EngineProcess", "EngineThread"),
    ".loop": ("wait_within",),
    ".preset": ("Preset", "PresetError", "as_search", "builtin_dir", "builtin_presets", "load_preset", "resolve_preset"),
    ".preset.knee": ("knee_search_preset",),
    ".preset.workload_fit": ("preset_workload_change",),
    ".run.preset_runner": ("RunOutcome", "new_engine", "run_preset"),
    ".session": ("SessionError", "check_session_dir", "default_session_dir"),
    ".rules.step_text": ("format_run_summary", "format_step_table"),
    ".session.scrub": ("redact_argv",),
    ".session.writer": ("loss_line",),
    ".sim.profiles": ("get_profile",),
    ".sim.serve": ("add_sim_arguments", "run_from_args", "spawn_sim_process"),
    ".measure.slo": ("SloError", "parse_slo"),
    ".core.snapshot": ("LogLine", "Snapshot"),
    ".measure.step_result": ("StepResult",),
    ".client.target": ("TargetError", "TargetUnreachable", "validate_url"),
    ".core.target_stats": ("WeightsError", "parse_weights"),
    ".workload.trace": ("TraceError", "builtin_traces", "load_trace", "resolve_trace"),
    ".rules.verdicts": ("Knee", "knee_from_summary", "knees_from_summary", "summary_knee"),
    ".workload.prompts": ("WorkloadConfig", "WorkloadError", "is_prefix_spec", "load_dataset", "parse_prefix_spec"),
    ".workload.request_shape": (
        "RequestShapeError", "check_headers", "check_range_ratio", "extra_body_text", "parse_extra_body", "parse_header",
    ),
    ".sweep.gate": ("SweepGate", "SweepGateError", "check_sweep", "parse_sweep_gate"),
    ".sweep.sweep_file": ("SWEEP_FILE", "load_sweep"),
    ".sweep.merge": ("merged_doc",),
    ".sweep.resume": ("check_resume", "preset_digest"),
    ".sweep.runner": ("ConfigServer", "TimeLeft", "open_sweep_file", "run_sweep"),
    ".sweep.server_proc": ("free_port",),
    ".sweep.spec": ("SweepConfig=Config", "SweepError", "SweepSpec", "load_sweep_file", "spec_from_args"),
    ".sweep.table": ("format_answers", "format_sweep"),
    ".telemetry.types": ("GpuSample",),
    ".text": ("closest", "one_line"),
    ".workload.change": ("WORKLOAD_KEYS=KEYS", "WORKLOAD_MAX_LEN=MAX_LEN", "WorkloadChange"),
    ".load.worker_count": ("Plan", "auto_plan", "kernel_stamped", "usable_cores"),
}


def table(exports: dict[str, tuple[str, ...]], modules: dict[str, str] | None = None) -> dict[str, tuple[str, str | None]]:
    """name -> (home module, attribute in it; None: the module itself)."""
    out: dict[str, tuple[str, str | None]] = {name: (module, None) for name, module in (modules or {}).items()}
    for module, names in exports.items():
        for entry in names:
            name, _, attr = entry.partition("=")
            out[name] = (module, attr or name)
    return out


def resolve(where: dict[str, tuple[str, str | None]], owner: str, package: str, name: str) -> object:
    """The object `name` names, looked up in its home module now (shared by the facades)."""
    try:
        module, attr = where[name]
    except KeyError:
        raise AttributeError(f"module {owner!r} has no attribute {name!r}") from None
    mod = importlib.import_module(module, package)
    return mod if attr is None else getattr(mod, attr)


_WHERE = table(_EXPORTS, _MODULES)
__all__ = ["__version__", *sorted(_WHERE)]


def __getattr__(name: str) -> object:
    return resolve(_WHERE, __name__, __package__, name)


def __dir__() -> list[str]:
    return list(__all__)
