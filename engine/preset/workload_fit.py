"""Running a preset in a session that is already running (the TUI's `p`, `redline ctl
preset`): the workload change that gives the session the preset's [workload], or why it
cannot (a trace replay, a number of turns: those start only with `redline run`)."""

from __future__ import annotations

from typing import cast

from ..workload.change import WorkloadChange
from .fields import PresetError, TomlTable
from .keys import keys_of
from .spec import Preset, WorkloadSpec


def preset_workload_change(preset: Preset, current: TomlTable) -> WorkloadChange | None:
    """The WorkloadChange that gives the session `preset`'s [workload] (its lengths and
    dataset), or None when the session already has it. PresetError (one line) for what a
    running session cannot change: a trace replay or the number of turns."""
    w = preset.workload
    trace = w.trace
    if (trace or None) != (current.get("trace") or None):
        what = f"replays the trace {trace}" if trace else f"has no trace and this session replays {current.get('trace')}"
        raise PresetError(f"preset {preset.name} {what}: start it with `redline run {preset.name}`; nothing started")
    turns = w.turns
    if turns != current.get("turns", 1):
        raise PresetError(f"preset {preset.name} has {turns} turn(s) per session, this session {current.get('turns', 1)}: "
                          f"start it with `redline run {preset.name}`; nothing started")
    shaped = _shaping_differs(w, current)
    if shaped:
        raise PresetError(f"preset {preset.name} sets [workload].{shaped} unlike this session (request shaping is set "
                          f"when a session starts): start it with `redline run {preset.name}`; nothing started")
    if trace:
        return None  # a trace sets each request's lengths
    prefix = w.dataset.startswith("prefix:")  # its lengths are in the spec
    change = WorkloadChange(
        input_len=w.input_len if w.input_len != current.get("input_len") and not prefix else None,
        output_len=w.output_len if w.output_len != current.get("output_len") else None,
        dataset=w.dataset if w.dataset != current.get("dataset", "random") else None,
    )
    return None if change.empty else change


def _shaping_differs(w: WorkloadSpec, current: TomlTable) -> str | None:
    """The first request-shaping key (each declared `shaping` on WorkloadSpec) in which the
    preset's [workload] differs from the session's (WorkloadConfig.describe()), or None."""
    for k in keys_of(WorkloadSpec, "workload"):
        if k.shaping and _as_described(k.name, getattr(w, k.name)) != current.get(k.name, _as_described(k.name, k.default)):
            return k.name
    return None


def _as_described(name: str, value: object) -> object:
    """A request-shaping value as WorkloadConfig.describe() gives it: headers with a
    credential's value masked, the extra body as an object."""
    import json

    from ..workload.request_shape import shown_headers

    if name == "headers":
        return shown_headers(cast("tuple[tuple[str, str], ...]", value))
    if name == "extra_body":
        return json.loads(cast(str, value) or "{}")
    return value
