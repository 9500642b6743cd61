"""Checking the list values of a [ramp] table, which its forms share (ramp_forms.py): the
concurrency list, replay durations, rates, the per-step probes and workloads of a replay, and
the loads to profile at. Each raises a one-line PresetError through `Ctx`."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from ..constants import MAX_CONCURRENCY, MAX_COUNT, MAX_SECONDS, MAX_STEPS
from ..text import did_you_mean
from ..workload.arrivals import MAX_RATE
from .fields import Ctx, key_name, num, show

CONC_WHAT = f"a non-empty list of positive integers (at most {MAX_CONCURRENCY})"
RATE_WHAT = f"requests per second, a number > 0 (at most {num(MAX_RATE)})"
STEP_WORKLOAD_KEYS = ("dataset", "input_len", "output_len")  # a replayed step's workload (the live workload form's)


def concurrency_list(ctx: Ctx, value: object, *, allow_duplicates: bool) -> tuple[int, ...]:
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


def durations(ctx: Ctx, value: object) -> tuple[float, ...]:
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


def rate(ctx: Ctx, key: str, value: object, *, zero_ok: bool = False) -> float:
    """A rate in req/s; `zero_ok`: 0 marks a replayed step that held its concurrency."""
    what = f"requests per second, 0 (that step held its concurrency) or a number > 0 (at most {num(MAX_RATE)})" if zero_ok else RATE_WHAT
    return ctx.number(key, value, lo=0.0, hi=MAX_RATE, lo_open=not zero_ok, what=what)


def number_list(ctx: Ctx, key: str, value: object, one: Callable[[str, object], float]) -> tuple[float, ...]:
    """A non-empty list of at most MAX_STEPS numbers, each checked by `one(key, value)`."""
    if not isinstance(value, list) or not value:
        raise ctx.bad(key, "a non-empty list", value)
    if len(value) > MAX_STEPS:
        raise ctx.err(key, f"expected at most {MAX_STEPS} steps, got {len(value)}")
    return tuple(one(f"{key} (position {i + 1})", v) for i, v in enumerate(value))


def step_probes(ctx: Ctx, value: object, conc: tuple[int, ...], rates: tuple[float, ...] | None = None) -> tuple[bool, ...] | None:
    """[ramp].probes (replay): one true/false per step, true = a C=1 probe (aborts first)."""
    n = len(conc)
    if not isinstance(value, list) or len(value) != n or not all(isinstance(x, bool) for x in value):
        raise ctx.bad("[ramp].probes", f"a list of {n} true/false (one per step, true = a C=1 probe)", value)
    for i, p in enumerate(value):
        if p and (conc[i] != 1 or (rates is not None and rates[i])):
            raise ctx.err(f"[ramp].probes (position {i + 1})", f"a probe step holds C=1 with no rate; this step has C={conc[i]}")
    return tuple(value) if any(value) else None


def step_workloads(ctx: Ctx, value: object, n: int) -> tuple[dict[str, object] | None, ...]:
    """[ramp].workloads (replay): one table per step, {} = [workload]'s; keys input_len,
    output_len, dataset (the live workload form's)."""
    if not isinstance(value, list) or len(value) != n or not all(isinstance(x, dict) for x in value):
        raise ctx.bad("[ramp].workloads", f"a list of {n} tables (one per step, {{}} = [workload]'s)", value)
    out: list[dict[str, object] | None] = []
    for i, w in enumerate(value):
        key = f"[ramp].workloads (position {i + 1})"
        bad = [k for k in w if k not in STEP_WORKLOAD_KEYS]
        if bad:
            hint = did_you_mean(bad[0], STEP_WORKLOAD_KEYS) or f" (accepted: {', '.join(STEP_WORKLOAD_KEYS)})"
            raise ctx.err(key, f"unknown key {key_name(bad[0])}{hint}")
        d: dict[str, object] = {}
        if "dataset" in w:
            d["dataset"] = ctx.dataset(key + ".dataset", w["dataset"], Path.cwd())
        for k in ("input_len", "output_len"):
            if k in w:
                d[k] = ctx.integer(f"{key}.{k}", w[k], maximum=MAX_COUNT)
        out.append(d or None)
    return tuple(out)


def profile_loads(ctx: Ctx, value: object, levels: tuple[float, ...] | None) -> tuple[float, ...]:
    """[ramp].profile: the loads at which the profiler captures, each one of the ramp's
    `levels` (None: a search, whose steps are chosen as it goes)."""
    key = "[ramp].profile"
    what = "a list of the loads to profile at (concurrencies; req/s in a rate ramp), e.g. [64]"
    if not isinstance(value, list):
        raise ctx.bad(key, what, value)
    if len(value) > MAX_STEPS:
        raise ctx.err(key, f"expected at most {MAX_STEPS} loads, got {len(value)}")
    out: list[float] = []
    for i, x in enumerate(value):
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not x > 0 or x != x or x == float("inf"):
            raise ctx.err(key, f"expected {what}, got {show(x)} at position {i + 1}")
        out.append(float(x))
    if levels is not None:
        missing = [x for x in out if x not in levels]
        if missing:
            steps = ", ".join(num(s) for s in levels)
            raise ctx.err(key, f"{num(missing[0])} is not a step of this ramp (steps: {steps})")
    return tuple(out)
