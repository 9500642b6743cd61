"""Reading [target] and [workload] (what is sent, to where), and checking that the workload
and the ramp agree on the load shape."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..client.api_formats import APIS
from .fields import Ctx
from .spec import RampSpec, TargetSpec, WorkloadSpec

MAX_TURNS = 1000
MAX_SEED = 2**63 - 1


def parse_target(ctx: Ctx, t: dict) -> tuple[TargetSpec, str | None]:
    """[target]: the URL, and `api` (an alias of [workload].api, returned beside)."""
    url = None
    if "url" in t:
        url = ctx.url("[target].url", t["url"])
    api = None
    if "api" in t:
        api = _api(ctx, "[target].api", t["api"])
    return TargetSpec(url=url, api=api), api


def _api(ctx: Ctx, key: str, value: Any) -> str:
    if not isinstance(value, str) or value not in APIS:
        raise ctx.bad(key, f"one of {', '.join(APIS)}", value)
    return value


def parse_workload(ctx: Ctx, w: dict, alias_api: str | None, base: Path) -> WorkloadSpec:
    """[workload]; `base` (the preset's folder) anchors relative dataset and trace paths."""
    api = alias_api or WorkloadSpec.api
    if "api" in w:
        api = _api(ctx, "[workload].api", w["api"])
        if alias_api is not None and alias_api != api:
            raise ctx.err(
                "[workload].api",
                f"{api!r} disagrees with [target].api {alias_api!r} (give one, or the same in both)",
            )
    dataset = WorkloadSpec.dataset
    if "dataset" in w:
        dataset = ctx.dataset("[workload].dataset", w["dataset"], base)
    input_len = WorkloadSpec.input_len
    if "input_len" in w:
        input_len = ctx.integer("[workload].input_len", w["input_len"], maximum=10_000_000)
    output_len = WorkloadSpec.output_len
    if "output_len" in w:
        output_len = ctx.integer("[workload].output_len", w["output_len"], maximum=10_000_000)
    model = None
    if "model" in w:
        model = ctx.string("[workload].model", w["model"])
    turns = ctx.integer("[workload].turns", w["turns"], maximum=MAX_TURNS) if "turns" in w else 1
    think_s = ctx.seconds("[workload].think_s", w["think_s"], zero_ok=True) if "think_s" in w else 0.0
    trace = _trace(ctx, w["trace"], base) if "trace" in w else None
    shaping = _shaping(ctx, w)
    return WorkloadSpec(api, dataset, input_len, output_len, model, turns, think_s, trace, **shaping)


def _shaping(ctx: Ctx, w: dict) -> dict[str, Any]:
    """[workload]'s request shaping: headers (a table of strings), extra_body (a table),
    ignore_eos, random_range_ratio, seed; each checked by engine/workload/request_shape.py."""
    from ..workload.request_shape import (
        RequestShapeError,
        check_extra_body,
        check_headers,
        check_range_ratio,
        extra_body_text,
    )

    out: dict[str, Any] = {}
    try:
        if "headers" in w:
            if not isinstance(w["headers"], dict):
                raise ctx.bad("[workload].headers", 'a table of NAME = "VALUE", e.g. {"X-Tenant" = "a"}', w["headers"])
            out["headers"] = check_headers(w["headers"], f"{ctx.source}: [workload].headers")
        if "extra_body" in w:
            if not isinstance(w["extra_body"], dict):
                what = "a table merged into every request body, e.g. {temperature = 0.5}"
                raise ctx.bad("[workload].extra_body", what, w["extra_body"])
            body = check_extra_body(w["extra_body"], f"{ctx.source}: [workload].extra_body")
            out["extra_body"] = extra_body_text(body)
        if "random_range_ratio" in w:
            if not isinstance(w["random_range_ratio"], (int, float)) or isinstance(w["random_range_ratio"], bool):
                raise ctx.bad("[workload].random_range_ratio", "a number from 0 to below 1", w["random_range_ratio"])
            where = f"{ctx.source}: [workload].random_range_ratio"
            out["random_range_ratio"] = check_range_ratio(w["random_range_ratio"], where)
    except RequestShapeError as exc:
        raise ctx.err("", str(exc).removeprefix(f"{ctx.source}: ")) from None
    if "ignore_eos" in w:
        out["ignore_eos"] = ctx.boolean("[workload].ignore_eos", w["ignore_eos"])
    if "seed" in w:
        out["seed"] = ctx.integer("[workload].seed", w["seed"], minimum=0, maximum=MAX_SEED)
    return out


def _trace(ctx: Ctx, value: Any, base: Path) -> str:
    """A Mooncake JSONL trace, made absolute (relative to the preset's folder) and read
    once to check every line (engine/workload/trace.py)."""
    from ..workload.trace import TraceError, load_trace

    raw = ctx.string("[workload].trace", value, "a path to a JSONL trace file")
    path = Path(raw).expanduser()
    if not path.is_absolute():
        path = base / path
    try:
        load_trace(path)
    except TraceError as exc:
        raise ctx.err("[workload].trace", str(exc)) from None
    return str(path)


def check_shape(ctx: Ctx, w: WorkloadSpec, r: RampSpec) -> None:
    """The workload and the ramp agree on the load shape."""
    if w.trace is not None and r.speed is None:
        raise ctx.err("[workload].trace", "a trace replays one step per [ramp].speed factor: give speed = [1.0] (or more)")
    if r.speed is not None and w.trace is None:
        raise ctx.err("[ramp].speed", "replays [workload].trace = \"PATH\": give the trace")
    if w.turns > 1 and (r.rate is not None or r.speed is not None or (r.search is not None and r.search.rate_unit is not None)):
        raise ctx.err("[workload].turns", "multi-turn sessions run in concurrency mode (C counts sessions), not with rate or speed")
    if w.think_s > 0 and w.turns == 1:
        raise ctx.err("[workload].think_s", "only used with turns > 1 (the pause between a session's turns)")
    if w.random_range_ratio and (w.trace is not None or w.dataset != "random"):
        raise ctx.err("[workload].random_range_ratio", "spreads the random dataset's lengths: not with a trace or "
                      f"dataset {w.trace or w.dataset!r} (their lengths are their own)")
