"""Writing a preset: a `Preset` as TOML text that parse.py reads back to an equal one.

tomli-w writes every value (quoting and escapes, numbers, lists, inline tables); this module
only chooses the keys of each table and writes the comment lines above it (tomli-w writes
none).
"""

from __future__ import annotations

import json
import math
from typing import Any

import tomli_w

from .. import __version__
from .spec import Preset, RampSpec, StopSpec, WorkloadSpec, one_line

SLO_KEYS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "attainment")  # what [slo] reads
GUARD_KEYS = ("error_rate", "ttft_p99_ms", "gpu_temp_c")


def preset_to_toml(preset: Preset, header: str | None = None) -> str:
    """A preset as TOML text (commented) that load_preset reads back to an equal Preset
    (apart from `path`). `header` adds comment lines at the top. A ramp is always written
    as its concurrency list (start/factor/max expanded)."""
    lines: list[str] = [f"# redline preset: {one_line(preset.name)}"]
    if header:
        lines += [f"# {h}".rstrip() for h in header.splitlines()]
    lines.append(f"# Written by redline {__version__}. Every key: docs/presets.md.")
    top: dict[str, Any] = {"name": preset.name}
    if preset.description:
        top["description"] = preset.description
    parts = ["\n".join(lines) + "\n\n" + tomli_w.dumps(top)]
    for comments, table, body in _tables(preset):
        parts.append("".join(f"# {c}\n" for c in comments) + tomli_w.dumps({table: body}))
    return "\n".join(parts)


def _tables(preset: Preset) -> list[tuple[list[str], str, dict[str, Any]]]:
    """(comment lines, table name, its keys) for each table, in the order they are written."""
    out: list[tuple[list[str], str, dict[str, Any]]] = []
    t = preset.target
    if t.url is not None or t.api is not None:
        target = {k: v for k, v in (("url", t.url), ("api", t.api)) if v is not None}
        out.append((["--url overrides the URL; api is an alias of [workload].api"], "target", target))

    w = preset.workload
    workload: dict[str, Any] = {"api": w.api, "dataset": w.dataset, "input_len": w.input_len, "output_len": w.output_len}
    comments = ["api: chat | completions | generate; dataset: random | sharegpt:PATH | jsonl:PATH",
                "input_len: prompt tokens (random dataset); output_len: max_tokens, generated in full"]
    if w.model is not None:
        workload["model"] = w.model
    if w.turns > 1:
        workload["turns"] = w.turns
        workload["think_s"] = float(w.think_s)
        comments.append("multi-turn: C counts sessions; think_s: the pause between a session's turns")
    if w.trace is not None:
        workload["trace"] = w.trace
        comments.append("trace: Mooncake JSONL, replayed once per [ramp].speed factor")
    comments += _shaping(w, workload)
    out.append((comments, "workload", workload))

    comments, ramp = _ramp(preset.ramp)
    if preset.repeats > 1:
        ramp["repeats"] = preset.repeats
        comments = [*comments, "repeats: the whole ramp run this many times (redline run, a sweep's configurations)"]
    out.append((comments, "ramp", ramp))

    s = preset.stop
    stop = {k: float(getattr(s, k)) for k in StopSpec.__dataclass_fields__ if getattr(s, k) is not None}
    out.append((["any rule that fires ends the ramp; absent = off (stall_s: default 10 s, always on)"], "stop", stop))
    out.append((["probe_s: a C=1 probe at the end; 0 = none"], "after", {"probe_s": float(preset.after.probe_s)}))

    if preset.slo is not None:
        slo = {k: float(getattr(preset.slo, k)) for k in SLO_KEYS if getattr(preset.slo, k) is not None}
        out.append((["per-request bounds (ms) and the share of requests that must meet them"], "slo", slo))
    if preset.guard is not None:
        guard = {k: float(getattr(preset.guard, k)) for k in GUARD_KEYS if getattr(preset.guard, k) is not None}
        out.append((["the load is dropped when a live figure crosses one of these"], "guard", guard))
    if preset.gate is not None:
        out.append((["the conditions of a headless run (engine/report/gate.py); --gate replaces them"],
                    "gate", {"conditions": list(preset.gate)}))
    return out


def _shaping(w: WorkloadSpec, workload: dict[str, Any]) -> list[str]:
    """[workload]'s request shaping keys that are not their defaults, into `workload`; their
    comment lines."""
    comments = []
    if w.random_range_ratio:
        workload["random_range_ratio"] = float(w.random_range_ratio)
        comments.append("random_range_ratio: lengths drawn per request from [L*(1-R), L*(1+R)]")
    if not w.ignore_eos:
        workload["ignore_eos"] = False
        comments.append("ignore_eos = false: the server may stop at EOS (output lengths from its usage)")
    if w.seed is not None:
        workload["seed"] = w.seed
    if w.extra_body:
        workload["extra_body"] = json.loads(w.extra_body)
        comments.append("extra_body: merged into every request body")
    if w.headers:
        workload["headers"] = dict(w.headers)
        comments.append("headers: sent on every request")
    return comments


def _ramp(r: RampSpec) -> tuple[list[str], dict[str, Any]]:
    """The [ramp] table of one form: search, speed, rate, replay or a concurrency list."""
    ramp: dict[str, Any] = {}
    if r.search is not None:
        sp = r.search
        ramp["mode"] = "search"
        if sp.rate_unit is not None:
            comments = ['an adaptive knee search over the request rate (start and max in req/s)']
            ramp["over"] = "rate"
            top = _rate_level(sp.max, sp.rate_unit, lambda x: x / sp.max == sp.rate_unit)
            ramp["start"] = min(top, _rate_level(sp.start, sp.rate_unit, lambda x: max(1, round(x / sp.rate_unit)) == sp.start))
            ramp["max"] = top
        else:
            comments = ["an adaptive knee search over concurrency"]
            ramp["start"] = sp.start
            ramp["max"] = sp.max
        ramp["resolution"] = float(sp.resolution)
        ramp["factor"] = float(sp.factor)
    elif r.speed is not None:
        comments = ["one trace replay per speed factor; a replay lasts until every row is answered"]
        ramp["speed"] = _floats(r.speed)
    elif r.rate is not None and r.durations_s is None:
        comments = ["rate: req/s, one open-loop step per entry"]
        ramp["rate"] = _floats(r.rate)
    else:
        comments = ["concurrency: one step per entry, in order"]
        ramp["concurrency"] = list(r.concurrency)
        if r.rate is not None:
            comments.append("rate: req/s; 0 = that step held its concurrency")
            ramp["rate"] = _floats(r.rate)
    if r.rate is not None or r.speed is not None or (r.search is not None and r.search.rate_unit is not None):
        if r.speed is None:
            ramp["arrival"] = r.arrival
        if r.max_concurrency is not None:
            ramp["max_concurrency"] = r.max_concurrency
        comments.append("arrival: poisson | constant | gamma:K; max_concurrency: the open loop's in-flight cap")
    if r.durations_s is not None:
        comments += ["replay: each step lasts exactly its duration, all of it measured,",
                     "no warm-up and no min_requests extension"]
        ramp["durations_s"] = _floats(r.durations_s)
        if r.workloads is not None:
            comments.append("workloads: each step's ({} = [workload]'s): the session changed it live")
            ramp["workloads"] = [dict(w) if w else {} for w in r.workloads]
        if r.probes is not None:
            comments.append("probes: true = a C=1 probe (what is in flight is aborted first, as `a` did)")
            ramp["probes"] = list(r.probes)
    elif r.speed is not None:
        comments.append("warmup_s per replay, not measured; hold_s at least, max_hold_s at most")
        ramp.update(warmup_s=float(r.warmup_s), hold_s=float(r.hold_s), max_hold_s=float(r.max_hold_s))
    elif r.num_requests is not None:
        comments.append("per step: warmup_s not measured, then measured until num_requests of its own")
        comments.append("requests completed, but no longer than max_hold_s")
        ramp.update(warmup_s=float(r.warmup_s), num_requests=r.num_requests, max_hold_s=float(r.max_hold_s))
    else:
        comments.append("per step: warmup_s not measured, then hold_s measured (at least) until")
        comments.append("min_requests completed, but no longer than max_hold_s")
        ramp.update(warmup_s=float(r.warmup_s), hold_s=float(r.hold_s), min_requests=r.min_requests,
                    max_hold_s=float(r.max_hold_s))
    if r.profile:
        comments.append("profile: the loads at which the server's profiler captures")
        ramp["profile"] = _floats(r.profile)
    if r.flush_cache:
        comments.append("flush_cache: drain to zero and flush the prefix cache before each step")
        ramp["flush_cache"] = True
    return comments, ramp


def _floats(xs: Any) -> list[float]:
    """Seconds, rates and factors as floats (what the parser gives back), so that writing a
    Preset built with ints and writing it again after reading give the same text."""
    return [float(x) for x in xs]


def _rate_level(level: int, unit: float, reads_back: Any) -> float:
    """A rate search's start or max in req/s: `level` x `unit`, written as a person would
    (12 significant digits) when that reads back to the same search, else exactly."""
    x = level * unit
    short = float(f"{x:.12g}")
    if reads_back(short):
        return short
    for y in (x, math.nextafter(x, math.inf), math.nextafter(x, -math.inf)):
        if reads_back(y):
            return y
    return x
