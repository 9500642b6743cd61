"""Reading a preset: TOML text in, a checked `Preset` out, or one line saying what is wrong.

Every key is checked (README, "Presets", lists them all); unknown tables and keys are errors.
A bad one raises PresetError naming the file, the key and what is accepted. In short:

    name = "until-it-breaks"          # optional; default: the file name without .toml
    description = "..."               # optional; one line, shown in the preset picker
    [target]                          # optional; --url overrides
    url = "http://127.0.0.1:30000"
    api = "chat"                      # alias of [workload].api
    [workload]
    api = "chat"                      # chat | completions | generate
    dataset = "random"                # random | sharegpt:PATH | jsonl:PATH
    input_len = 1024
    output_len = 2048
    model = "..."                     # optional; default: what the server says it serves
    [ramp]                            # required
    concurrency = [32, 64, 96]        # or start/factor/max, or start/step/max
    warmup_s = 10                     # not measured; 0 allowed
    hold_s = 30                       # measured window per step, at least
    min_requests = 20                 # keep holding until this many completed ...
    max_hold_s = 90                   # ... but no longer than this (default 3 x hold_s)
    durations_s = [12.5, 40, 7]       # replay: exact per-step time (see replay.py)
    [stop]                            # absent rule = off; "server gone" is always on
    plateau_gain = 0.05
    p99_ttft_ms = 10000
    p99_itl_ms = 500
    error_rate = 0.05
    collapse = 0.2
    [after]
    probe_s = 30                      # C=1 probe at the end; 0 = none
    [gate]                            # optional; CI conditions of a headless run (engine/gate.py)
    conditions = ["knee>=64", "errors<=1%"]   # or a string; --gate replaces them
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any, Callable

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

from redline.engine.apis import APIS
from redline.engine.arrivals import ARRIVAL_FORMS, MAX_RATE, ArrivalError, parse_arrival

from .fields import Ctx, has_control, key_name, num, show
from ..guard import GuardSpec
from ..slo import Slo
from .spec import (
    DEFAULT_HOLD_S,
    DEFAULT_MAX_HOLD_FACTOR,
    DEFAULT_MIN_REQUESTS,
    DEFAULT_WARMUP_S,
    MAX_CONCURRENCY,
    MAX_SECONDS,
    MAX_STEPS,
    AfterSpec,
    Preset,
    PresetError,
    RampSpec,
    SearchSpec,
    StopSpec,
    TargetSpec,
    WorkloadSpec,
)

TOP_KEYS = ("name", "description")
TABLES = ("target", "workload", "ramp", "stop", "after", "slo", "guard", "gate")
TABLE_KEYS: dict[str, tuple[str, ...]] = {
    "target": ("url", "api"),
    "workload": ("api", "dataset", "input_len", "output_len", "model", "turns", "think_s", "trace"),
    "ramp": (
        "concurrency",
        "start",
        "factor",
        "step",
        "max",
        "warmup_s",
        "hold_s",
        "min_requests",
        "max_hold_s",
        "durations_s",
        "mode",
        "resolution",
        "rate",
        "arrival",
        "max_concurrency",
        "speed",
        "over",
        "workloads",
    ),
    "slo": ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "attainment"),
    "guard": ("error_rate", "ttft_p99_ms", "gpu_temp_c"),
    "gate": ("conditions",),
    "stop": ("plateau_gain", "p99_ttft_ms", "p99_itl_ms", "error_rate", "collapse"),
    "after": ("probe_s",),
}


def parse_toml(text: str, source: str) -> Preset:
    """Check preset TOML text; `source` names it in errors. Only ever raises PresetError."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise PresetError(f"{source}: not valid TOML: {e}") from None
    except RecursionError:
        raise PresetError(f"{source}: not valid TOML: nested too deeply") from None
    return parse_preset(data, source)


def load_preset(path: str | Path) -> Preset:
    """Read and check a preset file. Raises PresetError (one line) on any problem."""
    p = Path(path)
    source = str(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise PresetError(f"{source}: file not found") from None
    except IsADirectoryError:
        raise PresetError(f"{source}: is a directory, expected a .toml preset file") from None
    except PermissionError:
        raise PresetError(f"{source}: permission denied") from None
    except (OSError, ValueError) as e:
        raise PresetError(f"{source}: cannot read: {e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise PresetError(f"{source}: not valid TOML: not UTF-8 text") from None
    return parse_toml(text, source)


def parse_preset(data: dict, source: str) -> Preset:
    """Check a decoded preset. `source` names the file in errors and anchors relative
    dataset paths (its folder). Only ever raises PresetError."""
    ctx = Ctx(str(source))
    if not isinstance(data, dict):
        raise ctx.bad("", "a TOML document (a table of tables)", data)

    for key, value in data.items():
        if key in TOP_KEYS or (key == "gate" and not isinstance(value, dict)):
            continue  # gate = "knee>=64" (or a list): checked by _parse_gate
        if key in TABLES:
            if not isinstance(value, dict):
                raise ctx.bad(f"[{key}]", "a table", value)
            allowed = TABLE_KEYS[key]
            for sub in value:
                if sub not in allowed:
                    raise ctx.err(
                        "",
                        f"unknown key [{key}].{key_name(sub)} (accepted: {', '.join(allowed)})",
                    )
            continue
        if isinstance(value, dict):
            raise ctx.err("", f"unknown table [{key_name(key)}] (accepted: {', '.join(TABLES)})")
        raise ctx.err(
            "",
            f"unknown key {key_name(key)} (accepted: {', '.join(TOP_KEYS)}, "
            f"and tables {', '.join('[' + t + ']' for t in TABLES)})",
        )

    try:
        base = Path(str(source)).expanduser().resolve().parent
    except (OSError, ValueError, RuntimeError):
        base = Path.cwd()

    name = data.get("name")
    if name is None:
        name = Path(str(source)).stem or str(source)
    else:
        name = ctx.string("name", name)
    description = data.get("description", "")
    if not isinstance(description, str) or has_control(description):
        raise ctx.bad("description", "a one-line string", description)

    target, alias_api = _parse_target(ctx, data.get("target", {}))
    workload = _parse_workload(ctx, data.get("workload", {}), alias_api, base)
    if "ramp" not in data:
        raise ctx.err(
            "[ramp]",
            "missing (a preset needs [ramp] with concurrency = [..] or start/factor/max)",
        )
    ramp = _parse_ramp(ctx, data["ramp"])
    _check_shape(ctx, workload, ramp)
    stop = _parse_stop(ctx, data.get("stop", {}))
    after = _parse_after(ctx, data.get("after", {}))
    slo = _parse_slo(ctx, data["slo"]) if "slo" in data else None
    guard = _parse_guard(ctx, data["guard"]) if "guard" in data else None
    gate = _parse_gate(ctx, data["gate"]) if "gate" in data else None
    path = Path(str(source)) if source else None
    return Preset(name, path, target, workload, ramp, stop, after, description, slo, guard, gate)


def _parse_target(ctx: Ctx, t: dict) -> tuple[TargetSpec, str | None]:
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


def _parse_workload(ctx: Ctx, w: dict, alias_api: str | None, base: Path) -> WorkloadSpec:
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
    return WorkloadSpec(api, dataset, input_len, output_len, model, turns, think_s, trace)


MAX_TURNS = 1000


def _trace(ctx: Ctx, value: Any, base: Path) -> str:
    """A Mooncake JSONL trace, made absolute (relative to the preset's folder) and read
    once to check every line (engine/trace.py)."""
    from redline.engine.trace import TraceError, load_trace

    raw = ctx.string("[workload].trace", value, "a path to a JSONL trace file")
    path = Path(raw).expanduser()
    if not path.is_absolute():
        path = base / path
    try:
        load_trace(path)
    except TraceError as exc:
        raise ctx.err("[workload].trace", str(exc)) from None
    return str(path)


def _check_shape(ctx: Ctx, w: WorkloadSpec, r: RampSpec) -> None:
    """The workload and the ramp agree on the load shape."""
    if w.trace is not None and r.speed is None:
        raise ctx.err("[workload].trace", "a trace replays one step per [ramp].speed factor: give speed = [1.0] (or more)")
    if r.speed is not None and w.trace is None:
        raise ctx.err("[ramp].speed", "replays [workload].trace = \"PATH\": give the trace")
    if w.turns > 1 and (r.rate is not None or r.speed is not None or (r.search is not None and r.search.rate_unit is not None)):
        raise ctx.err("[workload].turns", "multi-turn sessions run in concurrency mode (C counts sessions), not with rate or speed")
    if w.think_s > 0 and w.turns == 1:
        raise ctx.err("[workload].think_s", "only used with turns > 1 (the pause between a session's turns)")


def _parse_ramp(ctx: Ctx, r: Any) -> RampSpec:
    if not isinstance(r, dict):
        raise ctx.bad("[ramp]", "a table", r)
    if "mode" in r:
        mode = r["mode"]
        if mode not in ("list", "search"):
            raise ctx.bad("[ramp].mode", 'one of "list" (the steps as given) or "search" (an adaptive knee search)', mode)
        if mode == "search":
            return _parse_search(ctx, r)
    if "resolution" in r:
        raise ctx.err("[ramp].resolution", 'only used with mode = "search"')
    if "over" in r:
        raise ctx.err("[ramp].over", 'only used with mode = "search"')
    if "speed" in r:
        return _parse_speed(ctx, r)
    if "rate" in r:
        return _parse_rate_ramp(ctx, r)
    for k in ("arrival", "max_concurrency"):
        if k in r:
            raise ctx.err(f"[ramp].{k}", "only used with rate = [..] (open loop) or speed = [..] (a trace)")
    if "workloads" in r and "durations_s" not in r:
        raise ctx.err("[ramp].workloads", "only used with durations_s (a replay of a recorded session)")
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

    durations = None
    if "durations_s" in r:
        durations = _durations(ctx, r["durations_s"])

    if list_form:
        conc = _concurrency_list(ctx, r["concurrency"], allow_duplicates=durations is not None)
    else:
        conc = _generated(ctx, r)

    if durations is not None:
        if len(durations) != len(conc):
            raise ctx.err(
                "[ramp].durations_s",
                f"expected one duration per step ({len(conc)}), got {len(durations)}",
            )
        for k in ("hold_s", "min_requests", "max_hold_s"):
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
            durations_s=durations,
            workloads=_workloads(ctx, r, len(conc)),
        )

    warmup = DEFAULT_WARMUP_S
    if "warmup_s" in r:
        warmup = ctx.seconds("[ramp].warmup_s", r["warmup_s"], zero_ok=True)
    hold = DEFAULT_HOLD_S
    if "hold_s" in r:
        hold = ctx.seconds("[ramp].hold_s", r["hold_s"], zero_ok=False)
    min_req = DEFAULT_MIN_REQUESTS
    if "min_requests" in r:
        min_req = ctx.integer("[ramp].min_requests", r["min_requests"], maximum=10_000_000)
    if "max_hold_s" in r:
        max_hold = ctx.seconds("[ramp].max_hold_s", r["max_hold_s"], zero_ok=False)
        if max_hold < hold:
            raise ctx.bad(
                "[ramp].max_hold_s", f"a number of seconds >= hold_s ({num(hold)})", r["max_hold_s"]
            )
    else:
        max_hold = min(hold * DEFAULT_MAX_HOLD_FACTOR, MAX_SECONDS)  # >= hold
    return RampSpec(conc, warmup, hold, min_req, max_hold, None)


_CONC_WHAT = f"a non-empty list of positive integers (at most {MAX_CONCURRENCY})"


def _concurrency_list(ctx: Ctx, value: Any, *, allow_duplicates: bool) -> tuple[int, ...]:
    key = "[ramp].concurrency"
    if not isinstance(value, list) or not value:
        raise ctx.bad(key, _CONC_WHAT, value)
    if len(value) > MAX_STEPS:
        raise ctx.err(key, f"expected at most {MAX_STEPS} steps, got {len(value)}")
    out: list[int] = []
    for i, c in enumerate(value):
        if isinstance(c, bool) or not isinstance(c, int) or not 1 <= c <= MAX_CONCURRENCY:
            raise ctx.err(key, f"expected {_CONC_WHAT}, got {show(c)} at position {i + 1}")
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


def _durations(ctx: Ctx, value: Any) -> tuple[float, ...]:
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


def _generated(ctx: Ctx, r: dict) -> tuple[int, ...]:
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


def _parse_stop(ctx: Ctx, s: dict) -> StopSpec:
    vals: dict[str, float | None] = {}
    frac = {
        "plateau_gain": (0.0, 1.0, False, False, "a fraction 0..1 (0.05 = 5 % more tok/s than the best before)"),
        "error_rate": (0.0, 1.0, False, True, "a fraction 0 <= x < 1 (0.05 = 5 % of requests failed)"),
        "collapse": (0.0, 1.0, True, True, "a fraction 0 < x < 1 (0.2 = tok/s 20 % below the best step)"),
    }
    for key in StopSpec.__dataclass_fields__:
        if key not in s:
            vals[key] = None
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


def _hold_keys(ctx: Ctx, r: dict) -> tuple[float, float, int, float]:
    warmup = ctx.seconds("[ramp].warmup_s", r["warmup_s"], zero_ok=True) if "warmup_s" in r else DEFAULT_WARMUP_S
    hold = ctx.seconds("[ramp].hold_s", r["hold_s"], zero_ok=False) if "hold_s" in r else DEFAULT_HOLD_S
    min_req = ctx.integer("[ramp].min_requests", r["min_requests"], maximum=10_000_000) if "min_requests" in r else DEFAULT_MIN_REQUESTS
    if "max_hold_s" in r:
        max_hold = ctx.seconds("[ramp].max_hold_s", r["max_hold_s"], zero_ok=False)
        if max_hold < hold:
            raise ctx.bad("[ramp].max_hold_s", f"a number of seconds >= hold_s ({num(hold)})", r["max_hold_s"])
    else:
        max_hold = min(hold * DEFAULT_MAX_HOLD_FACTOR, MAX_SECONDS)
    return warmup, hold, min_req, max_hold


RATE_WHAT = f"requests per second, a number > 0 (at most {num(MAX_RATE)})"


def _rate(ctx: Ctx, key: str, value: Any, *, zero_ok: bool = False) -> float:
    what = f"requests per second, 0 (that step held its concurrency) or a number > 0 (at most {num(MAX_RATE)})" if zero_ok else RATE_WHAT
    return ctx.number(key, value, lo=0.0, hi=MAX_RATE, lo_open=not zero_ok, what=what)


def _number_list(ctx: Ctx, key: str, value: Any, one: Callable[[str, Any], float]) -> tuple[float, ...]:
    if not isinstance(value, list) or not value:
        raise ctx.bad(key, "a non-empty list", value)
    if len(value) > MAX_STEPS:
        raise ctx.err(key, f"expected at most {MAX_STEPS} steps, got {len(value)}")
    return tuple(one(f"{key} (position {i + 1})", v) for i, v in enumerate(value))


def _open_loop_keys(ctx: Ctx, r: dict) -> tuple[str, int | None]:
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


def _parse_rate_ramp(ctx: Ctx, r: dict) -> RampSpec:
    """`rate = [R1, R2, ...]` req/s, one open-loop step each (warm-up, hold and stop rules as
    a concurrency ramp); in replay mode (durations_s) beside `concurrency`, 0 = closed loop."""
    for k in ("start", "factor", "step", "max"):
        if k in r:
            raise ctx.err(f"[ramp].{k}", "not used with rate = [..] (list each rate)")
    arrival, cap = _open_loop_keys(ctx, r)
    if "durations_s" in r:
        durations = _durations(ctx, r["durations_s"])
        rates = _number_list(ctx, "[ramp].rate", r["rate"], lambda k, v: _rate(ctx, k, v, zero_ok=True))
        conc = _concurrency_list(ctx, r["concurrency"], allow_duplicates=True) if "concurrency" in r else (cap or 1,) * len(rates)
        if not len(durations) == len(rates) == len(conc):
            raise ctx.err("[ramp].rate", f"expected one rate, concurrency and duration per step, got {len(rates)}, {len(conc)} and {len(durations)}")
        return RampSpec(conc, 0.0, durations_s=durations, rate=rates, arrival=arrival, max_concurrency=cap,
                        workloads=_workloads(ctx, r, len(rates)))
    if "concurrency" in r:
        raise ctx.err("[ramp].rate", "give either concurrency = [..] or rate = [..] (both only in a replay, with durations_s)")
    if "workloads" in r:
        raise ctx.err("[ramp].workloads", "only used with durations_s (a replay of a recorded session)")
    rates = _number_list(ctx, "[ramp].rate", r["rate"], lambda k, v: _rate(ctx, k, v))
    warmup, hold, min_req, max_hold = _hold_keys(ctx, r)
    return RampSpec((), warmup, hold, min_req, max_hold, rate=rates, arrival=arrival, max_concurrency=cap)


def _parse_speed(ctx: Ctx, r: dict) -> RampSpec:
    """`speed = [X, ...]`: the trace replayed once per factor (x2 = twice as fast); a step
    lasts until every row was sent and answered (hold_s: at least; max_hold_s: at most)."""
    for k in ("concurrency", "rate", "start", "factor", "step", "max", "durations_s", "min_requests", "workloads"):
        if k in r:
            raise ctx.err(f"[ramp].{k}", "not used with speed = [..] (a trace replay: one step per speed factor)")
    speeds = _number_list(ctx, "[ramp].speed", r["speed"], lambda k, v: ctx.number(k, v, lo=0.0, hi=1e6, lo_open=True, what="a speed factor > 0 (2 = twice as fast)"))
    _, cap = _open_loop_keys(ctx, r)
    warmup = ctx.seconds("[ramp].warmup_s", r["warmup_s"], zero_ok=True) if "warmup_s" in r else 0.0
    hold = ctx.seconds("[ramp].hold_s", r["hold_s"], zero_ok=True) if "hold_s" in r else 0.0
    max_hold = ctx.seconds("[ramp].max_hold_s", r["max_hold_s"], zero_ok=False) if "max_hold_s" in r else MAX_SECONDS
    return RampSpec((), warmup, hold, 0, max_hold, max_concurrency=cap, speed=speeds)


def _workloads(ctx: Ctx, r: dict, n: int) -> tuple[dict | None, ...] | None:
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
            raise ctx.err(key, f"unknown key {key_name(bad[0])} (accepted: dataset, input_len, output_len)")
        d: dict = {}
        if "dataset" in w:
            d["dataset"] = ctx.dataset(key + ".dataset", w["dataset"], Path.cwd())
        for k in ("input_len", "output_len"):
            if k in w:
                d[k] = ctx.integer(f"{key}.{k}", w[k], maximum=10_000_000)
        out.append(d or None)
    return tuple(out)


def _parse_search(ctx: Ctx, r: dict) -> RampSpec:
    for k in ("concurrency", "step", "durations_s", "rate", "speed", "workloads"):
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
    warmup, hold, min_req, max_hold = _hold_keys(ctx, r)
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


RATE_SEARCH_LEVELS = 1000  # a rate search bisects on max/1000 req/s


def _parse_rate_search(ctx: Ctx, r: dict) -> RampSpec:
    start = _rate(ctx, "[ramp].start", r["start"])
    top = _rate(ctx, "[ramp].max", r["max"])
    if top < start:
        raise ctx.bad("[ramp].max", f"a rate >= start ({num(start)})", r["max"])
    arrival, cap = _open_loop_keys(ctx, r)
    resolution, factor = _search_tuning(ctx, r)
    unit = top / RATE_SEARCH_LEVELS
    warmup, hold, min_req, max_hold = _hold_keys(ctx, r)
    search = SearchSpec(max(1, round(start / unit)), RATE_SEARCH_LEVELS, resolution, factor, rate_unit=unit)
    return RampSpec((), warmup, hold, min_req, max_hold, None, search, arrival=arrival, max_concurrency=cap)


def _parse_slo(ctx: Ctx, s: Any) -> Slo:
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


def _parse_guard(ctx: Ctx, g: Any) -> GuardSpec:
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


def _parse_gate(ctx: Ctx, g: Any) -> tuple[str, ...]:
    """`[gate] conditions = "knee>=64,errors<=1%"` (or a list of them), or `gate = ...` at the
    top: the conditions of `redline run --headless`'s gate (engine/gate.py), checked here."""
    from ..gate import GateError, parse_gate

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
        conds = parse_gate(g, flag=key)
    except GateError as exc:
        raise ctx.err("", str(exc)) from None
    return tuple(c.text for c in conds)


def _parse_after(ctx: Ctx, a: dict) -> AfterSpec:
    probe = 0.0
    if "probe_s" in a:
        probe = ctx.seconds("[after].probe_s", a["probe_s"], zero_ok=True)
    return AfterSpec(probe_s=probe)
