"""Reading the tables that judge a run rather than shape it: [stop] (when a ramp ends),
[slo] (the per-request bounds), [guard] (when to stop hurting the server), [gate] (a
headless run's CI conditions) and [after] (the closing C=1 probe)."""

from __future__ import annotations

import math
from typing import Any

from ..measure.slo import Slo
from ..rules.guard import GuardSpec
from .fields import Ctx
from .spec import AfterSpec, StopSpec


def parse_stop(ctx: Ctx, s: dict) -> StopSpec:
    """[stop]: an absent rule is off."""
    vals: dict[str, float | None] = {}
    frac = {
        "plateau_gain": (0.0, 1.0, False, False, "a fraction 0..1 (0.05 = 5 % more tok/s than the best before)"),
        "error_rate": (0.0, 1.0, False, True, "a fraction 0 <= x < 1 (0.05 = 5 % of requests failed)"),
        "collapse": (0.0, 1.0, True, True, "a fraction 0 < x < 1 (0.2 = tok/s 20 % below the best step)"),
    }
    for key in StopSpec.__dataclass_fields__:
        if key not in s:
            vals[key] = None
        elif key == "stall_s":  # always on: its key only moves it
            vals[key] = ctx.seconds("[stop].stall_s", s[key], zero_ok=False)
        elif key in frac:
            lo, hi, lo_open, hi_open, what = frac[key]
            vals[key] = ctx.number(
                f"[stop].{key}", s[key], lo=lo, hi=hi, lo_open=lo_open, hi_open=hi_open, what=what
            )
        else:
            vals[key] = ctx.number(
                f"[stop].{key}", s[key], lo=0.0, hi=math.inf, lo_open=True,
                what="a number of milliseconds > 0",
            )
    return StopSpec(**vals)


def parse_slo(ctx: Ctx, s: Any) -> Slo:
    """[slo]: at least one bound in ms, and the attainment fraction."""
    if not isinstance(s, dict):
        raise ctx.bad("[slo]", "a table", s)
    vals: dict[str, float] = {}
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        if key in s:
            vals[key] = ctx.number(f"[slo].{key}", s[key], lo=0.0, hi=math.inf, lo_open=True, what="a number of milliseconds > 0")
    if "attainment" in s:
        vals["attainment"] = ctx.number("[slo].attainment", s["attainment"], lo=0.0, hi=1.0, lo_open=True,
                                        what="a fraction 0 < x <= 1 of requests that must meet the bounds")
    if not any(k != "attainment" for k in vals):
        raise ctx.err("[slo]", "expected at least one of ttft_ms, tpot_ms, itl_ms, e2e_ms")
    return Slo(**vals)


def parse_guard(ctx: Ctx, g: Any) -> GuardSpec:
    """[guard]: at least one of error_rate, ttft_p99_ms, gpu_temp_c."""
    if not isinstance(g, dict):
        raise ctx.bad("[guard]", "a table", g)
    vals: dict[str, float] = {}
    if "error_rate" in g:
        vals["error_rate"] = ctx.number("[guard].error_rate", g["error_rate"], lo=0.0, hi=1.0, lo_open=False, hi_open=True,
                                        what="a fraction 0 <= x < 1 (0.05 = 5 % of requests failed)")
    if "ttft_p99_ms" in g:
        vals["ttft_p99_ms"] = ctx.number("[guard].ttft_p99_ms", g["ttft_p99_ms"], lo=0.0, hi=math.inf, lo_open=True, what="a number of milliseconds > 0")
    if "gpu_temp_c" in g:
        vals["gpu_temp_c"] = ctx.number("[guard].gpu_temp_c", g["gpu_temp_c"], lo=0.0, hi=200.0, lo_open=True, hi_open=True, what="degrees Celsius, e.g. 85")
    if not vals:
        raise ctx.err("[guard]", "expected at least one of error_rate, ttft_p99_ms, gpu_temp_c")
    return GuardSpec(**vals)


def parse_gate(ctx: Ctx, g: Any) -> tuple[str, ...]:
    """`[gate] conditions = "knee>=64,errors<=1%"` (or a list of them), or `gate = ...` at the
    top: the conditions of `redline run --headless`'s gate (engine/rules/gate_conditions.py), checked here."""
    from ..rules.gate_conditions import GateError, parse_gate as parse_conditions

    key = "gate"
    if isinstance(g, dict):
        if "conditions" not in g:
            raise ctx.err("[gate]", "expected conditions = \"knee>=64,errors<=1%\" (a string or a list of strings)")
        key, g = "[gate].conditions", g["conditions"]
    if isinstance(g, str):
        g = [g]
    if not isinstance(g, list) or not g or not all(isinstance(x, str) for x in g):
        raise ctx.bad(key, "a string of conditions such as \"knee>=64,errors<=1%\", or a list of such strings", g)
    try:
        conds = parse_conditions(g, flag=key)
    except GateError as exc:
        raise ctx.err("", str(exc)) from None
    return tuple(c.text for c in conds)


def parse_after(ctx: Ctx, a: dict) -> AfterSpec:
    """[after]: probe_s, the closing C=1 probe (0 = none)."""
    probe = 0.0
    if "probe_s" in a:
        probe = ctx.seconds("[after].probe_s", a["probe_s"], zero_ok=True)
    return AfterSpec(probe_s=probe)
