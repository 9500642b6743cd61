"""Running a preset in a session that is already running (the TUI's `p`, `redline ctl
preset`): the workload change that gives the session the preset's [workload], or why it
cannot (a trace replay, a number of turns: those start only with `redline run`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..workload.change import WorkloadChange
from .spec import PresetError

if TYPE_CHECKING:
    from .spec import Preset


def preset_workload_change(preset: Preset, current: dict) -> WorkloadChange | None:
    """The WorkloadChange that gives the session `preset`'s [workload] (its lengths and
    dataset), or None when the session already has it. PresetError (one line) for what a
    running session cannot change: a trace replay or the number of turns."""
    w = preset.workload
    trace = getattr(w, "trace", None)
    if (trace or None) != (current.get("trace") or None):
        what = f"replays the trace {trace}" if trace else f"has no trace and this session replays {current.get('trace')}"
        raise PresetError(f"preset {preset.name} {what}: start it with `redline run {preset.name}`; nothing started")
    turns = getattr(w, "turns", 1)
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


def _shaping_differs(w: object, current: dict) -> str | None:
    """The first request-shaping key (headers, extra_body, ignore_eos, random_range_ratio) in
    which the preset's [workload] differs from the session's (WorkloadConfig.describe()), or
    None."""
    import json

    from ..workload.request_shape import shown_headers

    mine = {
        "headers": shown_headers(getattr(w, "headers", ())),
        "extra_body": json.loads(getattr(w, "extra_body", "") or "{}"),
        "ignore_eos": getattr(w, "ignore_eos", True),
        "random_range_ratio": getattr(w, "random_range_ratio", 0.0),
    }
    now = {"headers": {}, "extra_body": {}, "ignore_eos": True, "random_range_ratio": 0.0}
    now.update({k: current[k] for k in now if k in current})
    return next((k for k in mine if mine[k] != now[k]), None)
