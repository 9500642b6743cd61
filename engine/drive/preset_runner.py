"""The preset runner: a ramp of steps, each warmed up then measured, until a rule fires.

Used by `redline run PRESET --headless` and by the TUI (key `p`, `redline run PRESET`):
both drive the same Engine API, so a step means the same thing in either. The runner drives
the engine; the engine knows nothing of presets (it only lets a `driver` task steer it, which
an operator command cancels).

A step (docs/presets.md):
- opens when its concurrency is set, so warm-up requests carry its index;
- warms up for `warmup_s`, and at least until the in-flight count has reached C (lowering C
  waits for the previous step's requests to drain; at most SETTLE_MAX_S more);
- measures for `hold_s`, then longer (up to `max_hold_s`) until `min_requests` of its own
  requests have completed and its throughput is steady; a step that never steadies is
  marked unsteady, and the throughput rules do not judge it. A step that reaches
  `max_hold_s` short of `min_requests` closes with what it has: its own requests still
  waiting are censored (engine/measure/accumulator.py), so its TTFT is a lower bound, never missing.
The C=1 probe at the end warms up until its first request's first token (the server may
still be unwinding the aborted load; it answers again), then holds `probe_s` and until one of
its own requests answered (or PROBE_MIN_REQUESTS completed): its TTFT and ITL are known long
before a 2048-token answer ends, and E2E is a bound while its request still runs.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Callable

from ..constants import (
    DEFAULT_PLATEAU_GAIN,
    MIN_LIVE_STEP_S,
    PROBE_MAX_HOLD_S,
    PROBE_MIN_REQUESTS,
    SETTLE_MAX_S,
    SNAPSHOT_INTERVAL_S,
)
from ..measure.accumulator import StepAccumulator
from ..measure.step_result import BreakResult, StepResult
from ..preset import Preset, StepPlan
from ..rules.knee_search import KneeSearch
from ..rules.step_text import format_step_line
from ..rules.verdicts import StopRules
from ..run import commands as C
from ..run.engine import Engine
from .server_ops import capture_started, drain_and_flush, start_capture

POLL_S = SNAPSHOT_INTERVAL_S
STEP_POLL_S = 0.05  # a step's warm-up and hold look this often whether they are done (a step ends within this of its last condition)


@dataclass
class RunOutcome:
    steps: list[StepResult] = field(default_factory=list)
    break_result: BreakResult | None = None
    probe: StepResult | None = None
    search: dict | None = None  # summary.json's "search" object, after a knee search


async def _warm_up(engine: Engine, acc: StepAccumulator, plan: StepPlan, label: str) -> bool:
    """Until warmup_s has passed and in-flight reached C (or SETTLE_MAX_S more); True if
    the server went meanwhile. A search point (plan.turnover) ends its warm-up sooner when
    its in-flight has turned over (every request in flight when its load began, sent at
    another load, has ended), and one with nothing of another load in flight at its open
    (the first point, a point measured again at once) measures at once: the requests that
    fill C are its own. A replay step (no warm-up, no minimum) measures at once."""
    replay = plan.warmup_s == 0 and plan.min_requests == 0
    if not replay and plan.turnover and acc.foreign == 0:
        acc.begin_measure(acc.t_open)  # before any send: nothing to wait out
        return engine.server_gone
    while not replay:
        ctl = engine.controller
        el = time.perf_counter() - acc.t_open
        settled = ctl is not None and ctl.settled_at is not None
        warm = el >= plan.warmup_s or (plan.turnover and acc.turned_over)
        if warm and (settled or el >= plan.warmup_s + SETTLE_MAX_S):
            if not settled:
                engine.log("warning", f"C={plan.concurrency}: in-flight never reached C ({engine.in_flight}) within {SETTLE_MAX_S:.0f} s after warm-up; measuring anyway", concurrency=plan.concurrency)
            break
        if engine.server_gone:
            return True
        wait = "" if settled else f", in flight {engine.in_flight} -> {plan.concurrency}"
        turn = f", {acc.foreign - acc.foreign_ended} of the previous load in flight" if plan.turnover and not acc.turned_over else ""
        engine.preset_line = f"{label} warm-up {el:.0f}/{plan.warmup_s:.0f}s{wait}{turn}"
        await asyncio.sleep(STEP_POLL_S)
    acc.begin_measure(time.perf_counter())
    return engine.server_gone


async def _hold(engine: Engine, acc: StepAccumulator, done: Callable[[float, float], bool], line: Callable[[float], str]) -> tuple[StepResult, bool]:
    """Measure until `done(now, elapsed)` or the server goes, then close the step. Returns
    (result, server gone)."""
    gone = False
    while True:
        now = time.perf_counter()
        el = acc.duration(now)
        engine.preset_line = line(el)
        if done(now, el):
            break
        if engine.server_gone:
            gone = True
            break
        await asyncio.sleep(STEP_POLL_S)
    return await engine.close_step(acc), gone


async def _measure(engine: Engine, acc: StepAccumulator, plan: StepPlan, label: str, min_requests: int, max_hold_s: float, need_steady: bool) -> tuple[StepResult, bool]:
    """Hold plan.hold_s, then until (when asked) the window is steady and `min_requests` own
    requests completed, up to max_hold_s. Completions lengthen a step only when they can
    come by max_hold_s (completions_can_come); they never decide whether it is judged.
    Returns (result, server gone)."""
    acc.steady_min_s = plan.steady_min_s

    def done(now: float, el: float) -> bool:
        if el < plan.hold_s:
            return False
        if el >= max_hold_s:
            return True
        if need_steady and not acc.steady(now):
            return False
        return acc.completed >= min_requests or not completions_can_come(acc, now, min_requests, max_hold_s)

    if plan.num_requests is not None:
        return await _hold(engine, acc, done, lambda el: f"{label} measuring {el:.0f}s, {acc.completed}/{min_requests} own done")
    return await _hold(engine, acc, done, lambda el: f"{label} measuring {elapsed_text(el, plan.hold_s)}, {acc.completed}/{min_requests} own done")


def elapsed_text(el: float, hold_s: float) -> str:
    """How long a step has measured: `12/30s` within its hold, `26 s (hold 10 s)` past it (a
    step held on for steadiness or its own completions: never `26/10s`)."""
    return f"{el:.0f}/{hold_s:.0f}s" if round(el) <= round(hold_s) else f"{el:.0f} s (hold {hold_s:.0f} s)"


def completions_can_come(acc: StepAccumulator, now: float, need: int, max_hold_s: float) -> bool:
    """Can `need` own completions come within max_hold_s of the window's start? Own
    requests go out as slots free (closed loop: C per request time D; open loop: at its
    rate) and each takes D, so the k-th ends about D + k / (their rate) into the window. D
    is the step's own request time (StepAccumulator.request_time_estimate); unknown, they
    are waited for, as a step with no figure yet cannot tell."""
    if acc.completed >= need:
        return True
    d = acc.request_time_estimate(now)
    if d is None:
        return True
    per_s = acc.rate if acc.mode == "rate" and acc.rate else max(1, acc.concurrency) / max(d, 1e-9)
    return d + need / per_s <= max_hold_s


def _set_load(engine: Engine, plan: StepPlan) -> int:
    """The step's load: C, a rate, or the trace from its first row at a speed; returns the
    step's concurrency (an open loop's: its in-flight cap)."""
    if plan.speed is not None:
        engine.start_trace(plan.speed, kind="preset")
    elif plan.rate is not None:
        engine.set_rate(plan.rate, kind="preset")
    else:
        engine.set_concurrency(plan.concurrency, kind="preset")
    return engine.live.concurrency()


def _flushes(engine: Engine, preset: Preset | None) -> bool:
    """`[ramp] flush_cache = true` or `--flush-cache`: flush the prefix cache before each step."""
    return bool(engine.config.flush_cache or (preset is not None and getattr(preset.ramp, "flush_cache", False)))


def _profiles(preset: Preset | None, plan: StepPlan) -> bool:
    """`[ramp] profile = [C, ...]`: capture the server's profiler during this step's load (a
    rate ramp: its req/s; a trace ramp: its speed)."""
    wanted = getattr(preset.ramp, "profile", None) if preset is not None else None
    if not wanted:
        return False
    level = plan.speed if plan.speed is not None else plan.rate if plan.rate is not None else plan.concurrency
    return any(float(w) == float(level) for w in wanted)


async def _step(engine: Engine, plan: StepPlan, label: str, preset: Preset | None = None) -> tuple[StepResult | None, bool]:
    """One step at plan's load: set it, open, warm up, measure, record. (result, server gone).
    The load is set before the step opens, with no await between: no request goes out in
    between, and the step carries the load's shape. With a cache flush, the load drains to
    zero and the cache is flushed first (engine/drive/server_ops.py): the drain is in no step.
    With a profiler capture at this load, it starts once the step measures and stops after
    --profile-s or at the step's end."""
    book = engine.book
    flushed = await drain_and_flush(engine, plan.label) if _flushes(engine, preset) else None
    if plan.probe:  # a replayed probe: what is in flight is aborted, as the original `a` did
        await engine.probe()
    before = _sent_before(engine)
    c = _set_load(engine, plan)
    acc = book.open_step(c, "measure", measure=False, in_flight=before)
    acc.cache_flush = flushed
    ctl = engine.controller
    if ctl is not None and ctl.paused:  # a preset run starts held: its first request is its first step's
        ctl.resume()
    engine.log("preset", f"{label}: warm-up", concurrency=c)
    try:
        return await _warm_and_measure(engine, acc, plan, label, preset)
    except asyncio.CancelledError:  # cancelled mid-step: the period keeps its row (marked short when it was one)
        if not acc.closed:
            acc.partial = True
            res = book.close_step(acc)
            res.short = acc.short = res.duration_s < MIN_LIVE_STEP_S
            if res.requests_sent or res.completed or res.failed or res.output_throughput > 0:
                book.record(res)
        raise


async def _warm_and_measure(engine: Engine, acc: StepAccumulator, plan: StepPlan, label: str, preset: Preset | None) -> tuple[StepResult | None, bool]:
    """The step's warm-up, its measured window and its record (see _step)."""
    book = engine.book
    gone = await _warm_up(engine, acc, plan, label)
    if gone:
        book.close_step(acc)
        return None, True
    replay = plan.min_requests == 0
    capture = start_capture(engine, acc=acc) if _profiles(preset, plan) else None
    if plan.speed is not None:
        res, gone = await _measure_trace(engine, acc, plan, label)
    else:
        # a step that counts requests ([ramp] num_requests) ends at its count, steady or not
        res, gone = await _measure(engine, acc, plan, label, plan.min_requests, plan.max_hold_s,
                                   need_steady=not replay and plan.num_requests is None)
    if capture is not None:
        await asyncio.shield(capture)  # stopped at the step's end (or before, after --profile-s)
        res.profiles = list(acc.profiles) or None
    if gone:
        return None, True
    book.record(res)
    return res, False


def _sent_before(engine: Engine) -> int:
    """The load's requests whose end is still to come (and open-loop sends waiting at the
    cap): a new step's turnover waits for them. In this process, the senders' own records
    (a request that ended but whose task has not yet left the controller is not one); with
    worker processes, their reported in-flight."""
    ctl = engine.controller
    waiting = ctl.waiting if ctl is not None else 0
    sender = engine.recorder.load_sender
    if engine.pool is None and sender is not None:
        return len(sender.in_flight) + waiting
    return engine.in_flight + waiting


async def _measure_trace(engine: Engine, acc: StepAccumulator, plan: StepPlan, label: str) -> tuple[StepResult, bool]:
    """A trace step holds until every row was sent and every own request ended (at least
    hold_s, at most max_hold_s). Returns (result, server gone)."""
    ctl, trace = engine.controller, engine.trace
    assert ctl is not None and trace is not None

    def ended() -> int:
        return acc.completed + acc.failed + acc.cancelled

    def done(now: float, el: float) -> bool:
        return el >= plan.max_hold_s or (el >= plan.hold_s and ctl.trace_done and ended() >= acc.sent)

    def line(el: float) -> str:
        sent, total = trace.progress()
        return f"{label} {sent}/{total} sent, {ended()} ended, {el:.0f}s"

    return await _hold(engine, acc, done, line)


async def run_preset(engine: Engine, preset: Preset, on_line: Callable[[str], None] = lambda s: None) -> RunOutcome:
    """Run the ramp on a started engine; results also land in engine.steps / summary.json."""
    if preset.slo is not None and engine.config.slo is None:
        engine.set_slo(preset.slo)  # --slo, when given, wins over the preset's [slo]
    rules = StopRules(preset.stop, slo=engine.config.slo)
    out = RunOutcome()
    book = engine.book
    ctl = engine.controller
    if ctl is not None and preset.ramp.max_concurrency is not None:
        ctl.max_concurrency = preset.ramp.max_concurrency  # the open loop's in-flight cap
    book.default_phase = "measure"
    if preset.stop.plateau_gain is not None:
        book.plateau_gain = preset.stop.plateau_gain
    try:
        if preset.ramp.search is not None:
            await _search(engine, preset, rules, out, on_line)
        else:
            await _ramp(engine, preset, rules, out, on_line)
        if preset.after.probe_s > 0 and not engine.server_gone:
            out.probe = await _probe(engine, preset, on_line)
    finally:
        book.default_phase = "live"
        engine.preset_line = ""
        engine.write_summary()
    return out


async def _ramp(engine: Engine, preset: Preset, rules: StopRules, out: RunOutcome, on_line: Callable[[str], None]) -> None:
    """The preset's steps in order, until a stop rule fires."""
    plans = preset.ramp.steps()
    engine.log("preset", f"preset {preset.name}: {len(plans)} steps: {', '.join(p.label for p in plans)}")
    workloads = preset.ramp.workloads or ()
    for i, plan in enumerate(plans, 1):
        label = f"{preset.name} step {i}/{len(plans)} {plan.label}"
        if i <= len(workloads):
            await _replay_workload(engine, workloads[i - 1])
        res, gone = await _step(engine, plan, label, preset)
        if res is not None:
            out.steps.append(res)
            on_line(format_step_line(res))
        if gone:
            br = rules.evaluate(out.steps, res, server_gone=True)
            br.concurrency = plan.concurrency  # the step the server went in
            br.rate = plan.rate
        else:
            br = rules.evaluate(out.steps[:-1], res)
        if br is not None:
            out.break_result = engine.book.break_result = br
            engine.log("break", br.detail or br.reason, concurrency=br.concurrency)
            good = "no step passed" if br.last_good_concurrency is None and br.last_good_rate is None else f"last good {br.last_good}"
            on_line(f"break: {br.reason} at {br.where}; {good} ({br.detail})")
            return


async def _replay_workload(engine: Engine, w: dict | None) -> None:
    """A replayed step's workload (a session that changed it live): [workload]'s for None."""
    from ..workload.change import WorkloadChange

    base = engine.replay_base_workload
    target = {**base, **(w or {})}
    cur = engine.config.workload.describe()
    if {k: cur.get(k) for k in target} != target:
        await engine.set_workload(WorkloadChange(input_len=target.get("input_len"), output_len=target.get("output_len"), dataset=target.get("dataset")), kind="preset")


async def _probe(engine: Engine, preset: Preset, on_line: Callable[[str], None]) -> StepResult | None:
    probe_s = preset.after.probe_s
    book = engine.book
    flushed = await drain_and_flush(engine, "the C=1 probe") if _flushes(engine, preset) else None
    acc = book.open_step(1, "probe", measure=False, warmup_requests=1)
    acc.cache_flush = flushed
    await engine.probe()
    label = f"{preset.name} C=1 probe"
    while not acc.measuring:  # its first request is the warm-up, until the server answers it
        if engine.server_gone:
            book.close_step(acc)
            return None
        engine.preset_line = f"{label} warm-up (first request)"
        await asyncio.sleep(POLL_S)
    max_hold = max(probe_s, PROBE_MAX_HOLD_S)

    def done(now: float, el: float) -> bool:
        return el >= probe_s and (el >= max_hold or acc.first_token >= 1 or acc.completed >= PROBE_MIN_REQUESTS)

    res, gone = await _hold(engine, acc, done, lambda el: f"{label} measuring {elapsed_text(el, probe_s)}, {acc.first_token} answered")
    if gone:
        return None
    book.record(res)
    on_line(format_step_line(res))
    return res


async def _search(engine: Engine, preset: Preset, rules: StopRules, out: RunOutcome, on_line: Callable[[str], None]) -> None:
    """The adaptive knee search (engine/rules/knee_search.py chooses C; each point is a full step). While
    it runs, summary.json's "search" is marked in_progress; cancelled (an operator key, a
    signal), it keeps what it measured and answers no knee ("cancelled": true)."""
    sp = preset.ramp.search
    assert sp is not None
    search = KneeSearch(
        sp.start, sp.max, resolution=sp.resolution, factor=sp.factor,
        plateau_gain=preset.stop.plateau_gain if preset.stop.plateau_gain is not None else DEFAULT_PLATEAU_GAIN,
        slo=engine.config.slo, error_rate=preset.stop.error_rate,
        label=(lambda c: f"{sp.rate_of(c):g} req/s") if sp.rate_unit is not None else (lambda c: f"C={c}"),
    )
    engine.log("preset", f"preset {preset.name}: knee search from C={sp.start} up to {sp.max}, resolution {sp.resolution * 100:g} %")
    t0 = time.perf_counter()
    book = engine.book
    try:
        await _search_points(engine, preset, search, rules, out, on_line, t0)
    except asyncio.CancelledError:
        out.search = book.search = _search_dict(sp, search.result(time.perf_counter() - t0, cancelled=True))
        engine.log("preset", f"search cancelled after {len(search.points)} points: no knee")
        raise
    result = search.result(time.perf_counter() - t0)
    out.search = book.search = _search_dict(sp, result)
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


async def _search_points(engine: Engine, preset: Preset, search: KneeSearch, rules: StopRules, out: RunOutcome,
                         on_line: Callable[[str], None], t0: float) -> None:
    """Each point the search asks for, measured as a full step, until it answers (or the
    server goes)."""
    sp, r, book = preset.ramp.search, preset.ramp, engine.book
    assert sp is not None
    while (c := search.next()) is not None:
        plan = StepPlan(c, r.warmup_s, r.hold_s, r.min_requests, r.max_hold_s, rate=sp.rate_of(c), turnover=True, steady_min_s=r.steady_min_s)
        label = f"{preset.name} point {len(search.points) + 1} {plan.label}"
        res, gone = await _step(engine, plan, label, preset)
        if gone:
            br = rules.evaluate(out.steps, None, server_gone=True)
            br.concurrency = c
            br.rate = plan.rate
            out.break_result = book.break_result = br
            engine.log("break", br.detail, concurrency=c)
            good = "no step passed" if br.last_good_concurrency is None and br.last_good_rate is None else f"last good {br.last_good}"
            on_line(f"break: {br.reason} at {br.where}; {good}")
            return
        assert res is not None
        out.steps.append(res)
        search.observe(c, res)
        on_line(format_step_line(res))
        book.search = {**_search_dict(sp, search.result(time.perf_counter() - t0)), "in_progress": True}
        engine.write_summary()


def _search_dict(sp, result) -> dict:
    """summary.json's "search": a rate search adds its answers in req/s (knee_rate,
    max_slo_rate, rates: the points' rates), beside the integer levels it bisected."""
    d = result.to_dict()
    if sp.rate_unit is not None:
        d.update(
            knee_rate=sp.rate_of(result.knee_concurrency) if result.knee_concurrency is not None else None,
            max_throughput_rate=sp.rate_of(result.max_throughput_concurrency) if result.max_throughput_concurrency is not None else None,
            max_slo_rate=sp.rate_of(result.max_slo_concurrency) if result.max_slo_concurrency is not None else None,
            rates=[sp.rate_of(c) for c in result.points],
        )
    return d


def start_preset(engine: Engine, preset: Preset) -> None:
    """Run a preset as the engine's driver (the TUI's `p`); operator keys cancel it."""

    async def managed() -> None:
        engine.suspend_live_steps()
        try:
            await run_preset(engine, preset)
        except asyncio.CancelledError:
            engine.log("preset", f"preset {preset.name} cancelled by the operator")
            raise
        finally:
            engine.resume_live_steps()

    engine.attach_driver(asyncio.create_task(managed(), name="redline-preset"))


def execute(engine: Engine, cmd: C.Command) -> object:
    """A host's entry point: StartPreset and StartProfile run here, every other command in
    the engine."""
    if isinstance(cmd, C.StartPreset):
        start_preset(engine, cmd.preset)
        return None
    if isinstance(cmd, C.StartProfile):  # the server's profiler at the load held now (key P)
        task = start_capture(engine, cmd.seconds)
        return capture_started(engine) if task is not None else "already running"
    return engine.execute(cmd)
