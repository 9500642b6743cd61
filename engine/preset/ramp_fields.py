"""Checking the values a [ramp] table shares between its forms (list, replay, rate, speed,
search): step lists, durations, the hold keys, rates, the open-loop keys and the per-step
workloads of a replay. Each raises a one-line PresetError through `Ctx`."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable

from ..text import did_you_mean
from ..workload.arrivals import ARRIVAL_FORMS, MAX_RATE, ArrivalError, parse_arrival
from .fields import Ctx, key_name, num, show
from .spec import (
    COUNT_MAX_HOLD_S,
    DEFAULT_HOLD_S,
    DEFAULT_MAX_HOLD_FACTOR,
    DEFAULT_MIN_REQUESTS,
    DEFAULT_WARMUP_S,
    MAX_CONCURRENCY,
    MAX_SECONDS,
    MAX_STEPS,
)

CONC_WHAT = f"a non-empty list of positive integers (at most {MAX_CONCURRENCY})"
RATE_WHAT = f"requests per second, a number > 0 (at most {num(MAX_RATE)})"


def concurrency_list(ctx: Ctx, value: Any, *, allow_duplicates: bool) -> tuple[int, ...]:
    """`[ramp].concurrency`: positive integers, each once unless a replay repeats them."""
    key = "[ramp].concurrency"
    if not isinstance(value, list) or not value:
        raise ctx.bad(key, CONC_WHAT, value)
    if len(value) > MAX_STEPS:
        raise ctx.err(key, f"expected at most {MAX_STEPS} steps, got {len(value)}")
    out: list[int] = []
    for i, c in enumerate(value):
        if isinstance(c, bool) or not isinstance(c, int) or not 1 <= c <= MAX_CONCURRENCY:
            raise ctx.err(key, f"expected {CONC_WHAT}, got {show(c)} at position {i + 1}")
        out.append(c)
    if not allow_duplicates:
        seen: set[int] = set()
        for c in out:
            if c in seen:
                raise ctx.err(
                    key,
                    f"expected each concurrency once, got {c} twice in {show(value)} "
                    "(repeats are allowed only with durations_s)",
                )
            seen.add(c)
    return tuple(out)


def durations(ctx: Ctx, value: Any) -> tuple[float, ...]:
    """`[ramp].durations_s`: one exact time per replayed step."""
    key = "[ramp].durations_s"
    what = f"a non-empty list of seconds > 0 (each at most {num(MAX_SECONDS)})"
    if not isinstance(value, list) or not value:
        raise ctx.bad(key, what, value)
    if len(value) > MAX_STEPS:
        raise ctx.err(key, f"expected at most {MAX_STEPS} steps, got {len(value)}")
    out = []
    for i, d in enumerate(value):
        ok = (
            not isinstance(d, bool)
            and isinstance(d, (int, float))
            and math.isfinite(float(d))
            and 0 < float(d) <= MAX_SECONDS
        )
        if not ok:
            raise ctx.err(key, f"expected {what}, got {show(d)} at position {i + 1}")
        out.append(float(d))
    return tuple(out)


def hold_keys(ctx: Ctx, r: dict) -> tuple[float, float, int, float]:
    """warmup_s, hold_s, min_requests and max_hold_s (default 3 x hold_s), checked. With
    num_requests = N (a step ends once N of its own requests completed) instead of a hold:
    hold_s 0, min_requests N, max_hold_s default COUNT_MAX_HOLD_S."""
    warmup = ctx.seconds("[ramp].warmup_s", r["warmup_s"], zero_ok=True) if "warmup_s" in r else DEFAULT_WARMUP_S
    count = step_count(ctx, r)
    if count is not None:
        for k in ("hold_s", "min_requests"):
            if k in r:
                raise ctx.err(f"[ramp].{k}", "not used with num_requests (a step ends once num_requests of its own requests completed); remove one of them")
        max_hold = ctx.seconds("[ramp].max_hold_s", r["max_hold_s"], zero_ok=False) if "max_hold_s" in r else COUNT_MAX_HOLD_S
        return warmup, 0.0, count, max_hold
    hold = ctx.seconds("[ramp].hold_s", r["hold_s"], zero_ok=False) if "hold_s" in r else DEFAULT_HOLD_S
    min_req = ctx.integer("[ramp].min_requests", r["min_requests"], maximum=10_000_000) if "min_requests" in r else DEFAULT_MIN_REQUESTS
    if "max_hold_s" in r:
        max_hold = ctx.seconds("[ramp].max_hold_s", r["max_hold_s"], zero_ok=False)
        if max_hold < hold:
            raise ctx.bad("[ramp].max_hold_s", f"a number of seconds >= hold_s ({num(hold)})", r["max_hold_s"])
    else:
        max_hold = min(hold * DEFAULT_MAX_HOLD_FACTOR, MAX_SECONDS)  # >= hold
    return warmup, hold, min_req, max_hold


def step_count(ctx: Ctx, r: dict) -> int | None:
    """[ramp].num_requests (a step that counts its own completed requests instead of a hold), checked."""
    return ctx.integer("[ramp].num_requests", r["num_requests"], maximum=10_000_000) if "num_requests" in r else None


def rate(ctx: Ctx, key: str, value: Any, *, zero_ok: bool = False) -> float:
    """A rate in req/s; `zero_ok`: 0 marks a replayed step that held its concurrency."""
    what = f"requests per second, 0 (that step held its concurrency) or a number > 0 (at most {num(MAX_RATE)})" if zero_ok else RATE_WHAT
    return ctx.number(key, value, lo=0.0, hi=MAX_RATE, lo_open=not zero_ok, what=what)


def number_list(ctx: Ctx, key: str, value: Any, one: Callable[[str, Any], float]) -> tuple[float, ...]:
    """A non-empty list of at most MAX_STEPS numbers, each checked by `one(key, value)`."""
    if not isinstance(value, list) or not value:
        raise ctx.bad(key, "a non-empty list", value)
    if len(value) > MAX_STEPS:
        raise ctx.err(key, f"expected at most {MAX_STEPS} steps, got {len(value)}")
    return tuple(one(f"{key} (position {i + 1})", v) for i, v in enumerate(value))


def open_loop_keys(ctx: Ctx, r: dict) -> tuple[str, int | None]:
    """[ramp].arrival and max_concurrency (the in-flight cap), checked."""
    arrival = "poisson"
    if "arrival" in r:
        try:
            arrival = parse_arrival(r["arrival"]).describe() if isinstance(r["arrival"], str) else ""
        except ArrivalError:
            arrival = ""
        if not arrival:
            raise ctx.bad("[ramp].arrival", ARRIVAL_FORMS, r["arrival"])
    cap = ctx.integer("[ramp].max_concurrency", r["max_concurrency"], maximum=MAX_CONCURRENCY) if "max_concurrency" in r else None
    return arrival, cap


def step_probes(ctx: Ctx, r: dict, conc: tuple[int, ...], rates: tuple[float, ...] | None = None) -> tuple[bool, ...] | None:
    """[ramp].probes (replay): one true/false per step, true = a C=1 probe (aborts first)."""
    if "probes" not in r:
        return None
    v = r["probes"]
    n = len(conc)
    if not isinstance(v, list) or len(v) != n or not all(isinstance(x, bool) for x in v):
        raise ctx.bad("[ramp].probes", f"a list of {n} true/false (one per step, true = a C=1 probe)", v)
    for i, p in enumerate(v):
        if p and (conc[i] != 1 or (rates is not None and rates[i])):
            raise ctx.err(f"[ramp].probes (position {i + 1})", f"a probe step holds C=1 with no rate; this step has C={conc[i]}")
    return tuple(v) if any(v) else None


def step_workloads(ctx: Ctx, r: dict, n: int) -> tuple[dict | None, ...] | None:
    """[ramp].workloads (replay): one table per step, {} = [workload]'s; keys input_len,
    output_len, dataset (the live workload form's)."""
    if "workloads" not in r:
        return None
    v = r["workloads"]
    if not isinstance(v, list) or len(v) != n or not all(isinstance(x, dict) for x in v):
        raise ctx.bad("[ramp].workloads", f"a list of {n} tables (one per step, {{}} = [workload]'s)", v)
    out: list[dict | None] = []
    for i, w in enumerate(v):
        key = f"[ramp].workloads (position {i + 1})"
        bad = [k for k in w if k not in ("dataset", "input_len", "output_len")]
        if bad:
            raise ctx.err(key, f"unknown key {key_name(bad[0])}{did_you_mean(bad[0], ('dataset', 'input_len', 'output_len')) or ' (accepted: dataset, input_len, output_len)'}")
        d: dict = {}
        if "dataset" in w:
            d["dataset"] = ctx.dataset(key + ".dataset", w["dataset"], Path.cwd())
        for k in ("input_len", "output_len"):
            if k in w:
                d[k] = ctx.integer(f"{key}.{k}", w[k], maximum=10_000_000)
        out.append(d or None)
    return tuple(out)
