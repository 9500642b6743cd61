"""Reading [ramp]: which form the table takes, and the closed-loop forms themselves.

    concurrency = [32, 64, 96]          the steps as given
    start = 8, factor = 2, max = 512    generated geometrically (or start/step/max: additively)
    durations_s = [..]                  a replay: each step held exactly that long
    rate = [..]                         open loop (parse_open_loop.py)
    speed = [..]                        a trace replay (parse_open_loop.py)
    mode = "search"                     an adaptive knee search (parse_search.py)
"""

from __future__ import annotations

import math
from typing import Any

from .fields import Ctx
from .parse_open_loop import parse_rate_ramp, parse_speed_ramp
from .parse_search import parse_search
from .ramp_fields import concurrency_list, durations, hold_keys, step_count, step_probes, step_workloads
from .spec import DEFAULT_HOLD_S, DEFAULT_MAX_HOLD_FACTOR, DEFAULT_MIN_REQUESTS, MAX_CONCURRENCY, MAX_STEPS, RampSpec


def parse_ramp(ctx: Ctx, r: Any) -> RampSpec:
    """A checked RampSpec from the [ramp] table: picks the form, then that form's reader."""
    if not isinstance(r, dict):
        raise ctx.bad("[ramp]", "a table", r)
    if "mode" in r:
        mode = r["mode"]
        if mode not in ("list", "search"):
            raise ctx.bad("[ramp].mode", 'one of "list" (the steps as given) or "search" (an adaptive knee search)', mode)
        if mode == "search":
            return parse_search(ctx, r)
    for k in ("resolution", "over"):
        if k in r:
            raise ctx.err(f"[ramp].{k}", 'only used with mode = "search"')
    if "speed" in r:
        return parse_speed_ramp(ctx, r)
    if "rate" in r:
        return parse_rate_ramp(ctx, r)
    return _concurrency_ramp(ctx, r)


def _concurrency_ramp(ctx: Ctx, r: dict) -> RampSpec:
    """concurrency = [..] or start/factor/max (start/step/max); with durations_s, a replay."""
    for k in ("arrival", "max_concurrency"):
        if k in r:
            raise ctx.err(f"[ramp].{k}", "only used with rate = [..] (open loop) or speed = [..] (a trace)")
    for k in ("workloads", "probes"):
        if k in r and "durations_s" not in r:
            raise ctx.err(f"[ramp].{k}", "only used with durations_s (a replay of a recorded session)")
    list_form = "concurrency" in r
    gen_keys = [k for k in ("start", "factor", "step", "max") if k in r]
    if list_form and gen_keys:
        raise ctx.err(
            "[ramp]",
            f"give either concurrency = [..] or start/factor/max (or start/step/max), "
            f"not both (found concurrency and {', '.join(gen_keys)})",
        )
    if not list_form and not gen_keys:
        raise ctx.err(
            "[ramp]",
            "expected concurrency = [..] or start/factor/max (or start/step/max)",
        )

    durs = durations(ctx, r["durations_s"]) if "durations_s" in r else None
    if list_form:
        conc = concurrency_list(ctx, r["concurrency"], allow_duplicates=durs is not None)
    else:
        conc = _generated(ctx, r)
    if durs is not None:
        return _replay_ramp(ctx, r, conc, durs)
    warmup, hold, min_req, max_hold = hold_keys(ctx, r)
    return RampSpec(conc, warmup, hold, min_req, max_hold, None, num_requests=step_count(ctx, r))


def _replay_ramp(ctx: Ctx, r: dict, conc: tuple[int, ...], durs: tuple[float, ...]) -> RampSpec:
    """A replay (replay.py): each step holds exactly its durations_s entry, no warm-up."""
    if len(durs) != len(conc):
        raise ctx.err(
            "[ramp].durations_s",
            f"expected one duration per step ({len(conc)}), got {len(durs)}",
        )
    for k in ("hold_s", "min_requests", "num_requests", "max_hold_s"):
        if k in r:
            raise ctx.err(
                f"[ramp].{k}",
                "not used with durations_s (each step holds exactly its durations_s "
                "entry); remove one of them",
            )
    if "warmup_s" in r:
        w = ctx.seconds("[ramp].warmup_s", r["warmup_s"], zero_ok=True)
        if w != 0:
            raise ctx.bad("[ramp].warmup_s", "0 (or absent) with durations_s", r["warmup_s"])
    return RampSpec(
        concurrency=conc,
        warmup_s=0.0,
        hold_s=DEFAULT_HOLD_S,
        min_requests=DEFAULT_MIN_REQUESTS,
        max_hold_s=DEFAULT_HOLD_S * DEFAULT_MAX_HOLD_FACTOR,
        durations_s=durs,
        workloads=step_workloads(ctx, r, len(conc)),
        probes=step_probes(ctx, r, conc),
    )


def _generated(ctx: Ctx, r: dict) -> tuple[int, ...]:
    """The steps of start/factor/max (geometric) or start/step/max (additive)."""
    if "start" not in r:
        raise ctx.err("[ramp].start", "missing (start/factor/max or start/step/max needs all three)")
    if "max" not in r:
        raise ctx.err("[ramp].max", "missing (start/factor/max or start/step/max needs all three)")
    if "factor" in r and "step" in r:
        raise ctx.err(
            "[ramp]",
            "give factor (geometric: start, start x factor, ...) or step "
            "(additive: start, start + step, ...), not both",
        )
    if "factor" not in r and "step" not in r:
        raise ctx.err(
            "[ramp].factor",
            "missing (start/max needs factor = number > 1, or step = positive integer)",
        )
    start = ctx.integer("[ramp].start", r["start"], maximum=MAX_CONCURRENCY)
    top = ctx.integer("[ramp].max", r["max"], maximum=MAX_CONCURRENCY)
    if top < start:
        raise ctx.bad("[ramp].max", f"an integer >= start ({start})", r["max"])
    if "step" in r:
        step = ctx.integer("[ramp].step", r["step"], maximum=MAX_CONCURRENCY)
        n = (top - start) // step + 1
        if n > MAX_STEPS:
            raise ctx.err("[ramp]", f"start/step/max gives {n} steps, at most {MAX_STEPS} accepted")
        return tuple(range(start, top + 1, step))
    factor = ctx.number(
        "[ramp].factor", r["factor"], lo=1.0, hi=1e6, lo_open=True,
        what="a number > 1 (e.g. 2 for 1, 2, 4, ...)",
    )
    out = [start]
    value = float(start)
    while True:
        value *= factor
        if value > top + 0.5:  # also catches inf
            break
        # start x factor^k rounded half up; bumped by one when rounding would repeat a step
        c = max(math.floor(value + 0.5), out[-1] + 1)
        if c > top:
            break
        out.append(c)
        if len(out) > MAX_STEPS:
            raise ctx.err(
                "[ramp]", f"start/factor/max gives more than {MAX_STEPS} steps, at most {MAX_STEPS} accepted"
            )
    return tuple(out)
