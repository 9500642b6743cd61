"""Reading the [ramp] keys that look inside the server (engine/run/server_ops.py), for every ramp
form:

    profile = [64]        capture the server's profiler during the steps at these loads (C; req/s
                          in a rate ramp; the speed factor of a trace ramp)
    flush_cache = true    before each step and the probe: drain to zero, flush the prefix cache
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .fields import Ctx, num, show
from .spec import MAX_STEPS, RampSpec

__all__ = ["SERVER_OPS_KEYS", "parse_server_ops"]

SERVER_OPS_KEYS = ("profile", "flush_cache")


def _levels(ramp: RampSpec) -> tuple[float, ...] | None:
    """The loads the ramp's steps hold, as `profile` names them (None: a search, chosen as it goes)."""
    if ramp.search is not None:
        return None
    if ramp.speed is not None:
        return tuple(ramp.speed)
    if ramp.rate is not None and ramp.durations_s is None:
        return tuple(ramp.rate)
    return tuple(float(c) for c in ramp.concurrency) + tuple(ramp.rate or ())


def parse_server_ops(ctx: Ctx, r: dict, ramp: RampSpec) -> RampSpec:
    """`ramp` with [ramp].profile and [ramp].flush_cache checked and set."""
    changes: dict[str, Any] = {}
    if "flush_cache" in r:
        v = r["flush_cache"]
        if not isinstance(v, bool):
            raise ctx.bad("[ramp].flush_cache", "true or false", v)
        changes["flush_cache"] = v
    if "profile" in r:
        key = "[ramp].profile"
        v = r["profile"]
        what = "a list of the loads to profile at (concurrencies; req/s in a rate ramp), e.g. [64]"
        if not isinstance(v, list):
            raise ctx.bad(key, what, v)
        if len(v) > MAX_STEPS:
            raise ctx.err(key, f"expected at most {MAX_STEPS} loads, got {len(v)}")
        out: list[float] = []
        for i, x in enumerate(v):
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not x > 0 or x != x or x == float("inf"):
                raise ctx.err(key, f"expected {what}, got {show(x)} at position {i + 1}")
            out.append(float(x))
        levels = _levels(ramp)
        if levels is not None:
            missing = [x for x in out if x not in levels]
            if missing:
                steps = ", ".join(num(s) for s in levels)
                raise ctx.err(key, f"{num(missing[0])} is not a step of this ramp (steps: {steps})")
        changes["profile"] = tuple(out)
    return dataclasses.replace(ramp, **changes) if changes else ramp
