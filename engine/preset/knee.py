"""The knee search the TUI's `k` key runs: a search preset built here, in the engine, from the
session's C, its max C and its workload (the UI only asks for it)."""

from __future__ import annotations

from typing import Any

from ..constants import DEFAULT_PLATEAU_GAIN
from .parse import parse_preset
from .spec import Preset

# the live search's pacing: shorter than a preset file's defaults, the operator is watching
KNEE_WARMUP_S = 5
KNEE_HOLD_S = 10
KNEE_MIN_REQUESTS = 10


def knee_search_preset(start: int, max_concurrency: int, workload: Any = None) -> Preset:
    """A knee search from C=`start` up to `max_concurrency` (at least `start`), with the
    session's input and output lengths when `workload` (a WorkloadConfig) is given."""
    lengths = {"input_len": workload.input_len, "output_len": workload.output_len} if workload is not None else {}
    return parse_preset(
        {"name": "knee search", "workload": lengths,
         "ramp": {"mode": "search", "start": start, "max": max(start, max_concurrency), "warmup_s": KNEE_WARMUP_S,
                  "hold_s": KNEE_HOLD_S, "min_requests": KNEE_MIN_REQUESTS},
         # the search's own rules before they became [stop]'s (engine/rules/breaks.py): half the
         # requests failing, or tok/s halved, bound it
         "stop": {"plateau_gain": DEFAULT_PLATEAU_GAIN, "error_rate": 0.5, "collapse": 0.5}},
        "knee-search",
    )
