"""Reading the open-loop forms of [ramp]: `rate = [..]` (req/s, one step each; in a replay
beside concurrency and durations_s) and `speed = [..]` (a trace replayed once per factor)."""

from __future__ import annotations

from .fields import Ctx
from .ramp_fields import (
    concurrency_list,
    durations,
    hold_keys,
    number_list,
    open_loop_keys,
    rate,
    step_count,
    step_probes,
    step_workloads,
)
from .spec import MAX_SECONDS, RampSpec


def parse_rate_ramp(ctx: Ctx, r: dict) -> RampSpec:
    """`rate = [R1, R2, ...]` req/s, one open-loop step each (warm-up, hold and stop rules as
    a concurrency ramp); in replay mode (durations_s) beside `concurrency`, 0 = closed loop."""
    for k in ("start", "factor", "step", "max"):
        if k in r:
            raise ctx.err(f"[ramp].{k}", "not used with rate = [..] (list each rate)")
    arrival, cap = open_loop_keys(ctx, r)
    if "durations_s" in r:
        durs = durations(ctx, r["durations_s"])
        rates = number_list(ctx, "[ramp].rate", r["rate"], lambda k, v: rate(ctx, k, v, zero_ok=True))
        conc = concurrency_list(ctx, r["concurrency"], allow_duplicates=True) if "concurrency" in r else (cap or 1,) * len(rates)
        if not len(durs) == len(rates) == len(conc):
            raise ctx.err("[ramp].rate", f"expected one rate, concurrency and duration per step, got {len(rates)}, {len(conc)} and {len(durs)}")
        return RampSpec(conc, 0.0, durations_s=durs, rate=rates, arrival=arrival, max_concurrency=cap,
                        workloads=step_workloads(ctx, r, len(rates)), probes=step_probes(ctx, r, conc, rates))
    if "concurrency" in r:
        raise ctx.err("[ramp].rate", "give either concurrency = [..] or rate = [..] (both only in a replay, with durations_s)")
    for k in ("workloads", "probes"):
        if k in r:
            raise ctx.err(f"[ramp].{k}", "only used with durations_s (a replay of a recorded session)")
    rates = number_list(ctx, "[ramp].rate", r["rate"], lambda k, v: rate(ctx, k, v))
    warmup, hold, min_req, max_hold = hold_keys(ctx, r)
    return RampSpec((), warmup, hold, min_req, max_hold, rate=rates, arrival=arrival, max_concurrency=cap, num_requests=step_count(ctx, r))


def parse_speed_ramp(ctx: Ctx, r: dict) -> RampSpec:
    """`speed = [X, ...]`: the trace replayed once per factor (x2 = twice as fast); a step
    lasts until every row was sent and answered (hold_s: at least; max_hold_s: at most)."""
    for k in ("concurrency", "rate", "start", "factor", "step", "max", "durations_s", "min_requests", "num_requests", "workloads", "probes"):
        if k in r:
            raise ctx.err(f"[ramp].{k}", "not used with speed = [..] (a trace replay: one step per speed factor)")
    speeds = number_list(ctx, "[ramp].speed", r["speed"], lambda k, v: ctx.number(k, v, lo=0.0, hi=1e6, lo_open=True, what="a speed factor > 0 (2 = twice as fast)"))
    _, cap = open_loop_keys(ctx, r)
    warmup = ctx.seconds("[ramp].warmup_s", r["warmup_s"], zero_ok=True) if "warmup_s" in r else 0.0
    hold = ctx.seconds("[ramp].hold_s", r["hold_s"], zero_ok=True) if "hold_s" in r else 0.0
    max_hold = ctx.seconds("[ramp].max_hold_s", r["max_hold_s"], zero_ok=False) if "max_hold_s" in r else MAX_SECONDS
    return RampSpec((), warmup, hold, 0, max_hold, max_concurrency=cap, speed=speeds)
