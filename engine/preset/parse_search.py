"""Reading `[ramp] mode = "search"`: an adaptive knee search over concurrency (start, max,
resolution, factor) or, with over = "rate", over req/s (bisecting on max/1000 req/s)."""

from __future__ import annotations

from .fields import Ctx, num
from .ramp_fields import hold_keys, open_loop_keys, rate
from .spec import MAX_CONCURRENCY, RampSpec, SearchSpec

RATE_SEARCH_LEVELS = 1000  # a rate search bisects on max/1000 req/s


def parse_search(ctx: Ctx, r: dict) -> RampSpec:
    """A search ramp: its first step is `start`; the driver picks the others as it goes."""
    for k in ("concurrency", "step", "durations_s", "rate", "speed", "workloads", "num_requests"):
        if k in r:
            raise ctx.err(f"[ramp].{k}", 'not used with mode = "search" (it takes start, max, resolution, factor and over)')
    if "start" not in r or "max" not in r:
        raise ctx.err("[ramp]", 'mode = "search" needs start and max (e.g. start = 8, max = 512)')
    over = r.get("over", "concurrency")
    if over not in ("concurrency", "rate"):
        raise ctx.bad("[ramp].over", '"concurrency" (the default) or "rate" (start and max in req/s)', over)
    if over == "rate":
        return _parse_rate_search(ctx, r)
    for k in ("arrival", "max_concurrency"):
        if k in r:
            raise ctx.err(f"[ramp].{k}", 'only used with over = "rate"')
    start = ctx.integer("[ramp].start", r["start"], maximum=MAX_CONCURRENCY)
    top = ctx.integer("[ramp].max", r["max"], maximum=MAX_CONCURRENCY)
    if top < start:
        raise ctx.bad("[ramp].max", f"an integer >= start ({start})", r["max"])
    resolution, factor = _search_tuning(ctx, r)
    warmup, hold, min_req, max_hold = hold_keys(ctx, r)
    return RampSpec((start,), warmup, hold, min_req, max_hold, None, SearchSpec(start, top, resolution, factor))


def _search_tuning(ctx: Ctx, r: dict) -> tuple[float, float]:
    resolution = 0.05
    if "resolution" in r:
        resolution = ctx.number("[ramp].resolution", r["resolution"], lo=0.0, hi=1.0, lo_open=True, hi_open=True,
                                what="a fraction of C, 0 < x < 1 (0.05: bisect until the bracket is 5 % of C)")
    factor = 2.0
    if "factor" in r:
        factor = ctx.number("[ramp].factor", r["factor"], lo=1.0, hi=1e6, lo_open=True, what="a number > 1 (the growth factor before bisecting)")
    return resolution, factor


def _parse_rate_search(ctx: Ctx, r: dict) -> RampSpec:
    start = rate(ctx, "[ramp].start", r["start"])
    top = rate(ctx, "[ramp].max", r["max"])
    if top < start:
        raise ctx.bad("[ramp].max", f"a rate >= start ({num(start)})", r["max"])
    arrival, cap = open_loop_keys(ctx, r)
    resolution, factor = _search_tuning(ctx, r)
    unit = top / RATE_SEARCH_LEVELS
    warmup, hold, min_req, max_hold = hold_keys(ctx, r)
    search = SearchSpec(max(1, round(start / unit)), RATE_SEARCH_LEVELS, resolution, factor, rate_unit=unit)
    return RampSpec((), warmup, hold, min_req, max_hold, None, search, arrival=arrival, max_concurrency=cap)
