"""A preset's adaptive knee search, measured: engine/rules/knee_search.py chooses each C, each
point is a full step (engine/run/step_run.py), judged by the preset's `[stop]` rules as a
staircase's step is (engine/rules/breaks.py RampJudge); a point that fires one bounds the
search, and the lowest such point is the run's break. A point ended by requests failing N in
a row bounds it the same way; the server gone or stalled ends it (nothing more can be
measured). While it runs, summary.json's "search" is marked in_progress; cancelled (an
operator key, a signal), it keeps what it measured and answers no knee ("cancelled": true).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Callable

from ..constants import DEFAULT_PLATEAU_GAIN
from ..core.engine import Engine
from ..preset import Preset, StepPlan
from ..rules.breaks import Place
from ..rules.knee_search import KneeSearch
from ..rules.step_text import format_step_line
from .run_watch import RunWatch
from .step_run import run_step

if TYPE_CHECKING:
    from .ramp_record import RampRecord, RunOutcome


class SearchState:
    """A search and what summary.json says of it, kept current as its points' final figures
    land (RampRecord.rejudge)."""

    def __init__(self, preset: Preset, search: KneeSearch) -> None:
        sp = preset.ramp.search
        assert sp is not None
        self.sp, self.search = sp, search
        self.t0 = time.perf_counter()
        self.duration_s: float | None = None  # set when it answered
        self.cancelled = False

    def summary(self) -> dict:
        """summary.json's "search": a rate search adds its answers in req/s (knee_rate,
        max_slo_rate, rates: the points' rates), beside the integer levels it bisected."""
        done = self.duration_s is not None
        took = self.duration_s if self.duration_s is not None else time.perf_counter() - self.t0
        result = self.search.result(took, cancelled=self.cancelled)
        d = result.to_dict()
        sp = self.sp
        if sp.rate_unit is not None:
            d.update(
                knee_rate=sp.rate_of(result.knee_concurrency) if result.knee_concurrency is not None else None,
                max_throughput_rate=sp.rate_of(result.max_throughput_concurrency) if result.max_throughput_concurrency is not None else None,
                max_slo_rate=sp.rate_of(result.max_slo_concurrency) if result.max_slo_concurrency is not None else None,
                rates=[sp.rate_of(c) for c in result.points],
            )
        return d if done or self.cancelled else {**d, "in_progress": True}


def new_search(engine: Engine, preset: Preset, ramp: RampRecord) -> SearchState:
    sp = preset.ramp.search
    assert sp is not None
    search = KneeSearch(
        sp.start, sp.max, resolution=sp.resolution, factor=sp.factor,
        plateau_gain=preset.stop.plateau_gain if preset.stop.plateau_gain is not None else DEFAULT_PLATEAU_GAIN,
        slo=engine.config.slo, rules=ramp.judge.rules,
        label=(lambda c: f"{sp.rate_of(c):g} req/s") if sp.rate_unit is not None else (lambda c: f"C={c}"),
    )
    return SearchState(preset, search)


async def run_search(engine: Engine, preset: Preset, ramp: RampRecord, watch: RunWatch, out: RunOutcome,
                     on_line: Callable[[str], None]) -> None:
    """The search (see the module docstring), its answer in engine.book.search and out.search."""
    state = ramp.search = new_search(engine, preset, ramp)
    sp, search, book = state.sp, state.search, engine.book
    engine.log("preset", f"preset {preset.name}: knee search from C={sp.start} up to {sp.max}, resolution {sp.resolution * 100:g} %")
    try:
        await _points(engine, preset, state, ramp, watch, out, on_line)
    except asyncio.CancelledError:
        state.cancelled = True
        out.search = book.search = state.summary()
        engine.log("preset", f"search cancelled after {len(search.points)} points: no knee")
        raise
    state.duration_s = time.perf_counter() - state.t0
    out.search = book.search = state.summary()
    result = search.result(state.duration_s)
    if sp.rate_unit is not None:
        knee, best = out.search["knee_rate"], out.search["max_slo_rate"]
        slo_part = ("" if search.slo is None else ", no rate met the SLO" if best is None else f", largest rate meeting the SLO {best:g} req/s")
        points = ", ".join(f"{r:g}" for r in out.search["rates"]) + " req/s"
        line = f"search: {f'no knee: {result.knee_reason}' if knee is None else f'knee at {knee:g} req/s'}{slo_part} ({len(result.points)} points in {result.duration_s:.0f} s: {points})"
    else:
        knee, best = result.knee_concurrency, result.max_slo_concurrency
        slo_part = ("" if search.slo is None else ", no C met the SLO" if best is None else f", largest C meeting the SLO {best}")
        points = ", ".join(f"C={c}" for c in result.points)
        line = f"search: {f'no knee: {result.knee_reason}' if knee is None else f'knee C={knee}'}{slo_part} ({len(result.points)} points in {result.duration_s:.0f} s: {points})"
    engine.log("preset", line)
    on_line(line)
    ramp.announce(out, on_line)


async def _points(engine: Engine, preset: Preset, state: SearchState, ramp: RampRecord, watch: RunWatch, out: RunOutcome,
                  on_line: Callable[[str], None]) -> None:
    """Each point the search asks for, measured as a full step, until it answers (or the
    server goes, or stalls)."""
    sp, r, book, search = state.sp, preset.ramp, engine.book, state.search
    while (c := search.next()) is not None:
        plan = StepPlan(c, r.warmup_s, r.hold_s, r.min_requests, r.max_hold_s, rate=sp.rate_of(c), turnover=True, steady_min_s=r.steady_min_s)
        label = f"{preset.name} point {len(search.points) + 1} {plan.label}"
        res, event = await run_step(engine, plan, label, watch, preset)
        if res is not None:
            ramp.add(res)
            out.steps.append(res)
            search.observe(c, res)
            on_line(format_step_line(res))
        if event is not None:
            place = Place.of(res) if res is not None else Place(c, plan.rate)
            ramp.judge.events.append(ramp.event(event, res, place, watch.stall.began))
            engine.log("break", event[1], concurrency=c)
            on_line(event[1])
            if event[0] != "errors" or res is None:
                return  # gone, or hung: nothing more to measure
            search.bound_at(c)  # its requests failed N in a row: no knee above it, narrowed below
        book.search = state.summary()
        ramp.judge_now()
        engine.write_summary()
