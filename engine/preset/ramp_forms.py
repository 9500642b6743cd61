"""[ramp]: the forms the table takes, each read from TOML and written back, and the keys that
choose a form (the others are declared on RampSpec's fields, spec.py).

    concurrency = [32, 64, 96]          the steps as given
    start = 8, factor = 2, max = 512    generated geometrically (or start/step/max: additively)
    durations_s = [..]                  a replay: each step held exactly that long
    rate = [..]                         open loop, one step per req/s (in a replay beside concurrency)
    speed = [..]                        a trace replayed once per speed factor
    mode = "search"                     an adaptive knee search (over = "rate": over req/s)

How each step is held (warm-up, hold, min_requests, max_hold_s, or num_requests instead of a
hold) is `_hold`. The other keys declared on RampSpec with a kind (flush_cache, and a key added
there) apply to every form: read after it and written after its keys, as declared; `profile`
too, checked against the form's steps (engine/run/server_ops.py).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from types import SimpleNamespace
from typing import cast

from ..constants import (
    COUNT_MAX_HOLD_S,
    DEFAULT_MAX_HOLD_FACTOR,
    MAX_CONCURRENCY,
    MAX_SECONDS,
    MAX_STEPS,
    RATE_SEARCH_LEVELS,
)
from .fields import Ctx, TomlTable, num
from .keys import Int, Key, Number, OneOf, build, keys_of, read_keys, write_keys
from .ramp_values import concurrency_list, durations, number_list, profile_loads, rate, step_probes, step_workloads
from .spec import Preset, RampSpec, SearchSpec

_SEARCH = "search"  # the docs table of `[ramp] mode = "search"`
_FORM = ""  # described beside its form in the docs, no row of its own
FORM_KEYS = (
    Key(OneOf(("list", "search"), 'one of "list" (the steps as given) or "search" (an adaptive knee search)'),
        '`"search"`: redline chooses the steps (see [Finding the limit](finding-the-limit.md))',
        table="ramp", name="mode", default="list", row=_SEARCH),
    Key(Int(hi=MAX_CONCURRENCY), "the first concurrency", table="ramp", name="start", doc_default="required", row=_SEARCH),
    Key(Int(hi=MAX_CONCURRENCY), "never above this", table="ramp", name="max", doc_type="integer >= `start`",
        doc_default="required", row=_SEARCH),
    Key(Number(0.0, 1.0, "a fraction of C, 0 < x < 1 (0.05: bisect until the bracket is 5 % of C)", "fraction 0 < x < 1",
               hi_open=True),
        "narrow each bracket until it is at most this fraction of C (or 1)", table="ramp", name="resolution",
        default=SearchSpec.resolution, row=_SEARCH),
    Key(Number(1.0, 1e6, "a number > 1 (the growth factor before bisecting)", "number > 1"), "growth factor before bisecting",
        table="ramp", name="factor", default=SearchSpec.factor, row=_SEARCH),
    Key(Int(hi=MAX_CONCURRENCY), "the additive ramp's step: start, start + step, ...", table="ramp", name="step", row=_FORM),
    Key(OneOf(("concurrency", "rate"), '"concurrency" (the default) or "rate" (start and max in req/s)'),
        "what a search runs over", table="ramp", name="over", default="concurrency", row=_FORM),
)
# [ramp]'s keys in the order a refusal lists them (a key declared since: after these)
_ORDER = ("concurrency", "start", "factor", "step", "max", "warmup_s", "hold_s", "min_requests", "num_requests", "max_hold_s",
          "durations_s", "mode", "resolution", "rate", "arrival", "max_concurrency", "speed", "over", "workloads", "probes",
          "repeats", "profile", "flush_cache")
_K = {k.name: k for k in (*keys_of(RampSpec, "ramp"), *keys_of(Preset, "ramp"), *FORM_KEYS)}
RAMP_KEYS: tuple[Key, ...] = (*(_K[n] for n in _ORDER), *(k for n, k in _K.items() if n not in _ORDER))
# the keys with a kind that the forms read themselves (_hold, _open_loop); RampSpec's others are every form's
_BY_FORMS = ("warmup_s", "hold_s", "min_requests", "num_requests", "max_hold_s", "arrival", "max_concurrency")
EVERY_FORM: tuple[Key, ...] = tuple(k for k in keys_of(RampSpec, "ramp") if k.kind is not None and k.name not in _BY_FORMS)


def _read(ctx: Ctx, r: TomlTable, name: str) -> object:
    return _K[name].read(ctx, r[name])


def _int(ctx: Ctx, r: TomlTable, name: str) -> int:
    return cast(int, _read(ctx, r, name))  # its kind (Int) checked it


def _float(ctx: Ctx, r: TomlTable, name: str, default: float) -> float:
    """r[name] checked by its kind (seconds, a number), else `default`."""
    return cast(float, _read(ctx, r, name)) if name in r else default


def parse_ramp(ctx: Ctx, r: object) -> RampSpec:
    """A checked RampSpec from the [ramp] table: picks the form, reads it, then the keys every
    form takes (EVERY_FORM, then profile)."""
    if not isinstance(r, dict):
        raise ctx.bad("[ramp]", "a table", r)
    if "mode" in r and _read(ctx, r, "mode") == "search":
        ramp = _search(ctx, r)
    else:
        for k in ("resolution", "over"):
            if k in r:
                raise ctx.err(f"[ramp].{k}", 'only used with mode = "search"')
        ramp = _speed(ctx, r) if "speed" in r else _rate_ramp(ctx, r) if "rate" in r else _concurrency(ctx, r)
    ramp = build(functools.partial(dataclasses.replace, ramp), read_keys(ctx, EVERY_FORM, r))
    if "profile" in r:
        ramp = dataclasses.replace(ramp, profile=profile_loads(ctx, r["profile"], _levels(ramp)))
    return ramp


def _levels(ramp: RampSpec) -> tuple[float, ...] | None:
    """The loads the ramp's steps hold, as `profile` names them (None: a search, chosen as it goes)."""
    if ramp.search is not None:
        return None
    if ramp.speed is not None:
        return tuple(ramp.speed)
    if ramp.rate is not None and ramp.durations_s is None:
        return tuple(ramp.rate)
    return tuple(float(c) for c in ramp.concurrency) + tuple(ramp.rate or ())


def _hold(ctx: Ctx, r: TomlTable) -> tuple[float, float, int, float, int | None]:
    """warmup_s, hold_s, min_requests and max_hold_s (default 3 x hold_s), checked, and
    num_requests. With num_requests = N (a step ends once N of its own requests completed)
    instead of a hold: hold_s 0, min_requests N, max_hold_s default COUNT_MAX_HOLD_S."""
    warmup = _float(ctx, r, "warmup_s", RampSpec.warmup_s)
    count = _count(ctx, r)
    if count is not None:
        for k in ("hold_s", "min_requests"):
            if k in r:
                raise ctx.err(f"[ramp].{k}", "not used with num_requests (a step ends once num_requests of its own requests completed); remove one of them")
        max_hold = _float(ctx, r, "max_hold_s", COUNT_MAX_HOLD_S)
        return warmup, 0.0, count, max_hold, count
    hold = _float(ctx, r, "hold_s", RampSpec.hold_s)
    min_req = _int(ctx, r, "min_requests") if "min_requests" in r else RampSpec.min_requests
    if "max_hold_s" in r:
        max_hold = _float(ctx, r, "max_hold_s", 0.0)
        if max_hold < hold:
            raise ctx.bad("[ramp].max_hold_s", f"a number of seconds >= hold_s ({num(hold)})", r["max_hold_s"])
    else:
        max_hold = min(hold * DEFAULT_MAX_HOLD_FACTOR, MAX_SECONDS)  # >= hold
    return warmup, hold, min_req, max_hold, None


def _count(ctx: Ctx, r: TomlTable) -> int | None:
    """[ramp].num_requests (a step that counts its own completed requests instead of a hold), checked."""
    return _int(ctx, r, "num_requests") if "num_requests" in r else None


def _open_loop(ctx: Ctx, r: TomlTable) -> tuple[str, int | None]:
    """[ramp].arrival and max_concurrency (the in-flight cap), checked."""
    arrival = cast(str, _read(ctx, r, "arrival")) if "arrival" in r else RampSpec.arrival
    cap = _int(ctx, r, "max_concurrency") if "max_concurrency" in r else None
    return arrival, cap


def _refuse(ctx: Ctx, r: TomlTable, keys: tuple[str, ...], why: str) -> None:
    for k in keys:
        if k in r:
            raise ctx.err(f"[ramp].{k}", why)


def _concurrency(ctx: Ctx, r: TomlTable) -> RampSpec:
    """concurrency = [..] or start/factor/max (start/step/max); with durations_s, a replay."""
    _refuse(ctx, r, ("arrival", "max_concurrency"), "only used with rate = [..] (open loop) or speed = [..] (a trace)")
    if "durations_s" not in r:
        _refuse(ctx, r, ("workloads", "probes"), "only used with durations_s (a replay of a recorded session)")
    list_form = "concurrency" in r
    gen_keys = [k for k in ("start", "factor", "step", "max") if k in r]
    if list_form and gen_keys:
        raise ctx.err("[ramp]", f"give either concurrency = [..] or start/factor/max (or start/step/max), "
                      f"not both (found concurrency and {', '.join(gen_keys)})")
    if not list_form and not gen_keys:
        raise ctx.err("[ramp]", "expected concurrency = [..] or start/factor/max (or start/step/max)")
    durs = durations(ctx, r["durations_s"]) if "durations_s" in r else None
    conc = concurrency_list(ctx, r["concurrency"], allow_duplicates=durs is not None) if list_form else _generated(ctx, r)
    if durs is not None:
        return _replay(ctx, r, conc, durs)
    warmup, hold, min_req, max_hold, count = _hold(ctx, r)
    return RampSpec(conc, warmup, hold, min_req, max_hold, None, num_requests=count)


def _replay(ctx: Ctx, r: TomlTable, conc: tuple[int, ...], durs: tuple[float, ...]) -> RampSpec:
    """A replay (engine/report/preset_from.py): each step holds exactly its durations_s entry, no warm-up."""
    if len(durs) != len(conc):
        raise ctx.err("[ramp].durations_s", f"expected one duration per step ({len(conc)}), got {len(durs)}")
    _refuse(ctx, r, ("hold_s", "min_requests", "num_requests", "max_hold_s"),
            "not used with durations_s (each step holds exactly its durations_s entry); remove one of them")
    if "warmup_s" in r and _read(ctx, r, "warmup_s") != 0:
        raise ctx.bad("[ramp].warmup_s", "0 (or absent) with durations_s", r["warmup_s"])
    return RampSpec(
        concurrency=conc,
        warmup_s=0.0,
        durations_s=durs,
        workloads=step_workloads(ctx, r["workloads"], len(conc)) if "workloads" in r else None,
        probes=step_probes(ctx, r["probes"], conc) if "probes" in r else None,
    )


def _generated(ctx: Ctx, r: TomlTable) -> tuple[int, ...]:
    """The steps of start/factor/max (geometric) or start/step/max (additive)."""
    for k in ("start", "max"):
        if k not in r:
            raise ctx.err(f"[ramp].{k}", "missing (start/factor/max or start/step/max needs all three)")
    if "factor" in r and "step" in r:
        raise ctx.err("[ramp]", "give factor (geometric: start, start x factor, ...) or step "
                      "(additive: start, start + step, ...), not both")
    if "factor" not in r and "step" not in r:
        raise ctx.err("[ramp].factor", "missing (start/max needs factor = number > 1, or step = positive integer)")
    start, top = _int(ctx, r, "start"), _int(ctx, r, "max")
    if top < start:
        raise ctx.bad("[ramp].max", f"an integer >= start ({start})", r["max"])
    if "step" in r:
        step = _int(ctx, r, "step")
        n = (top - start) // step + 1
        if n > MAX_STEPS:
            raise ctx.err("[ramp]", f"start/step/max gives {n} steps, at most {MAX_STEPS} accepted")
        return tuple(range(start, top + 1, step))
    factor = ctx.number("[ramp].factor", r["factor"], lo=1.0, hi=1e6, lo_open=True,
                        what="a number > 1 (e.g. 2 for 1, 2, 4, ...)")
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
            raise ctx.err("[ramp]", f"start/factor/max gives more than {MAX_STEPS} steps, at most {MAX_STEPS} accepted")
    return tuple(out)


def _rate_ramp(ctx: Ctx, r: TomlTable) -> RampSpec:
    """`rate = [R1, R2, ...]` req/s, one open-loop step each (warm-up, hold and stop rules as
    a concurrency ramp); in replay mode (durations_s) beside `concurrency`, 0 = closed loop."""
    _refuse(ctx, r, ("start", "factor", "step", "max"), "not used with rate = [..] (list each rate)")
    arrival, cap = _open_loop(ctx, r)
    if "durations_s" in r:
        durs = durations(ctx, r["durations_s"])
        rates = number_list(ctx, "[ramp].rate", r["rate"], lambda k, v: rate(ctx, k, v, zero_ok=True))
        conc = concurrency_list(ctx, r["concurrency"], allow_duplicates=True) if "concurrency" in r else (cap or 1,) * len(rates)
        if not len(durs) == len(rates) == len(conc):
            raise ctx.err("[ramp].rate", f"expected one rate, concurrency and duration per step, got {len(rates)}, {len(conc)} and {len(durs)}")
        return RampSpec(conc, 0.0, durations_s=durs, rate=rates, arrival=arrival, max_concurrency=cap,
                        workloads=step_workloads(ctx, r["workloads"], len(rates)) if "workloads" in r else None,
                        probes=step_probes(ctx, r["probes"], conc, rates) if "probes" in r else None)
    if "concurrency" in r:
        raise ctx.err("[ramp].rate", "give either concurrency = [..] or rate = [..] (both only in a replay, with durations_s)")
    _refuse(ctx, r, ("workloads", "probes"), "only used with durations_s (a replay of a recorded session)")
    rates = number_list(ctx, "[ramp].rate", r["rate"], lambda k, v: rate(ctx, k, v))
    warmup, hold, min_req, max_hold, count = _hold(ctx, r)
    return RampSpec((), warmup, hold, min_req, max_hold, rate=rates, arrival=arrival, max_concurrency=cap, num_requests=count)


def _speed(ctx: Ctx, r: TomlTable) -> RampSpec:
    """`speed = [X, ...]`: the trace replayed once per factor (x2 = twice as fast); a step
    lasts until every row was sent and answered (hold_s: at least; max_hold_s: at most)."""
    _refuse(ctx, r, ("concurrency", "rate", "start", "factor", "step", "max", "durations_s", "min_requests", "num_requests",
                     "workloads", "probes"), "not used with speed = [..] (a trace replay: one step per speed factor)")
    speeds = number_list(ctx, "[ramp].speed", r["speed"], lambda k, v: ctx.number(
        k, v, lo=0.0, hi=1e6, lo_open=True, what="a speed factor > 0 (2 = twice as fast)"))
    _, cap = _open_loop(ctx, r)
    warmup = _float(ctx, r, "warmup_s", 0.0)
    hold = ctx.seconds("[ramp].hold_s", r["hold_s"], zero_ok=True) if "hold_s" in r else 0.0  # a trace step may hold 0
    max_hold = _float(ctx, r, "max_hold_s", MAX_SECONDS)
    return RampSpec((), warmup, hold, 0, max_hold, max_concurrency=cap, speed=speeds)


def _search(ctx: Ctx, r: TomlTable) -> RampSpec:
    """A search ramp: its first step is `start`; the driver picks the others as it goes."""
    _refuse(ctx, r, ("concurrency", "step", "durations_s", "rate", "speed", "workloads", "num_requests"),
            'not used with mode = "search" (it takes start, max, resolution, factor and over)')
    if "start" not in r or "max" not in r:
        raise ctx.err("[ramp]", 'mode = "search" needs start and max (e.g. start = 8, max = 512)')
    over = _read(ctx, r, "over") if "over" in r else "concurrency"

    def resolution_factor() -> tuple[float, float]:
        return _float(ctx, r, "resolution", SearchSpec.resolution), _float(ctx, r, "factor", SearchSpec.factor)

    if over == "rate":
        start_r, top_r = rate(ctx, "[ramp].start", r["start"]), rate(ctx, "[ramp].max", r["max"])
        if top_r < start_r:
            raise ctx.bad("[ramp].max", f"a rate >= start ({num(start_r)})", r["max"])
        arrival, cap = _open_loop(ctx, r)
        resolution, factor = resolution_factor()
        unit = top_r / RATE_SEARCH_LEVELS
        warmup, hold, min_req, max_hold, _ = _hold(ctx, r)
        search = SearchSpec(max(1, round(start_r / unit)), RATE_SEARCH_LEVELS, resolution, factor, rate_unit=unit)
        return RampSpec((), warmup, hold, min_req, max_hold, None, search, arrival=arrival, max_concurrency=cap)
    _refuse(ctx, r, ("arrival", "max_concurrency"), 'only used with over = "rate"')
    start, top = _int(ctx, r, "start"), _int(ctx, r, "max")
    if top < start:
        raise ctx.bad("[ramp].max", f"an integer >= start ({start})", r["max"])
    resolution, factor = resolution_factor()
    warmup, hold, min_req, max_hold, _ = _hold(ctx, r)
    return RampSpec((start,), warmup, hold, min_req, max_hold, None, SearchSpec(start, top, resolution, factor))

# -- writing [ramp] back (toml_out.py) ---------------------------------------------------------------
def ramp_table(r: RampSpec, repeats: int = 1) -> tuple[list[str], dict[str, object]]:
    """The [ramp] table of one form (search, speed, rate, replay or a concurrency list) as
    parse_ramp reads it back, and the comment lines above it."""
    ramp: dict[str, object] = {}
    if r.search is not None:
        sp = r.search
        ramp["mode"] = "search"
        if sp.rate_unit is not None:
            unit = sp.rate_unit
            comments = ['an adaptive knee search over the request rate (start and max in req/s)']
            ramp["over"] = "rate"
            top = _rate_level(sp.max, unit, lambda x: x / sp.max == unit)
            ramp["start"] = min(top, _rate_level(sp.start, unit, lambda x: max(1, round(x / unit)) == sp.start))
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
        comments.append(_K["profile"].comment or "")
        ramp["profile"] = _floats(r.profile)
    more, every = write_keys(EVERY_FORM, r)
    comments += more
    ramp.update(every)
    more, rep = write_keys((_K["repeats"],), SimpleNamespace(repeats=repeats))  # Preset.repeats, last
    return comments + more, {**ramp, **rep}


def _floats(xs: tuple[float, ...]) -> list[float]:
    """Seconds, rates and factors as floats (what the parser gives back), so that writing a
    Preset built with ints and writing it again after reading give the same text."""
    return [float(x) for x in xs]


def _rate_level(level: int, unit: float, reads_back: Callable[[float], bool]) -> float:
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
