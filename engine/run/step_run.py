"""One step of a preset's ramp (or one point of a knee search), held as docs/presets.md says:

- it opens when its load is set, so warm-up requests carry its index;
- it warms up for `warmup_s`, and at least until the in-flight count has reached C (lowering
  C waits for the previous step's requests to drain; at most SETTLE_MAX_S more);
- it measures for `hold_s`, then longer (up to `max_hold_s`) until `min_requests` of its own
  requests have completed and its throughput is steady; a step that never steadies is marked
  unsteady, and the throughput rules do not judge it. A step that reaches `max_hold_s` short
  of `min_requests` closes with what it has: its own requests still waiting are censored
  (engine/measure/accumulator.py), so its TTFT is a lower bound, never missing.

Every poll of its warm-up and hold asks the run's watch (engine/run/run_watch.py) whether
an event ends it first: the server gone, a stall, requests failing N in a row. A step ended
by one is recorded when it measured something (a stall, failures: its figures say what the
server did), not when the server went (no figure of it is its own).
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable

from ..constants import MIN_LIVE_STEP_S, SETTLE_MAX_S
from ..core.engine import Engine
from ..measure.accumulator import StepAccumulator
from ..measure.step_result import StepResult
from ..preset import Preset, StepPlan
from .run_watch import RunWatch
from .server_ops import drain_and_flush, start_capture

STEP_POLL_S = 0.05  # a step's warm-up and hold look this often whether they are done (a step ends within this of its last condition)

Event = tuple[str, str]  # (reason, detail): engine/run/run_watch.py RunWatch.check


def where(plan: StepPlan) -> str:
    """A plan's load as a break names it: `C=32`, `5 req/s`, `x2`."""
    if plan.speed is not None:
        return f"x{plan.speed:g}"
    if plan.rate is not None:
        return f"{plan.rate:g} req/s"
    return f"C={plan.concurrency}"


async def _warm_up(engine: Engine, acc: StepAccumulator, plan: StepPlan, label: str, watch: RunWatch) -> Event | None:
    """Until warmup_s has passed and in-flight reached C (or SETTLE_MAX_S more); the event
    that ended it first, if one did. A search point (plan.turnover) ends its warm-up sooner
    when its in-flight has turned over (every request in flight when its load began, sent at
    another load, has ended), and one with nothing of another load in flight at its open (the
    first point, a point measured again at once) measures at once: the requests that fill C
    are its own. A replay step (no warm-up, no minimum) measures at once."""
    replay = plan.warmup_s == 0 and plan.min_requests == 0
    if not replay and plan.turnover and acc.foreign == 0:
        acc.begin_measure(acc.t_open)  # before any send: nothing to wait out
        return watch.check(where(plan), warming=True)
    while not replay:
        ctl = engine.controller
        el = time.perf_counter() - acc.t_open
        settled = ctl is not None and ctl.settled_at is not None
        warm = el >= plan.warmup_s or (plan.turnover and acc.turned_over)
        if warm and (settled or el >= plan.warmup_s + SETTLE_MAX_S):
            if not settled:
                engine.log("warning", f"C={plan.concurrency}: in-flight never reached C ({engine.in_flight}) within {SETTLE_MAX_S:.0f} s after warm-up; measuring anyway", concurrency=plan.concurrency)
            break
        event = watch.check(where(plan), warming=True)
        if event is not None:
            return event
        wait = "" if settled else f", in flight {engine.in_flight} -> {plan.concurrency}"
        turn = f", {acc.foreign - acc.foreign_ended} of the previous load in flight" if plan.turnover and not acc.turned_over else ""
        engine.steering.line = f"{label} warm-up {el:.0f}/{plan.warmup_s:.0f}s{wait}{turn}"
        await asyncio.sleep(STEP_POLL_S)
    acc.begin_measure(time.perf_counter())
    return watch.check(where(plan), warming=True)


async def hold(engine: Engine, acc: StepAccumulator, done: Callable[[float, float], bool], line: Callable[[float], str],
               watch: RunWatch, at: str) -> tuple[StepResult, Event | None]:
    """Measure until `done(now, elapsed)` or an event at load `at`, then close the step.
    Returns (result, the event that ended it or None)."""
    event = None
    while True:
        now = time.perf_counter()
        el = acc.duration(now)
        engine.steering.line = line(el)
        if done(now, el):
            break
        event = watch.check(at)
        if event is not None:
            acc.partial = True  # cut short by it: its figures are what it measured until then
            break
        await asyncio.sleep(STEP_POLL_S)
    return await engine.close_step(acc), event


async def _measure(engine: Engine, acc: StepAccumulator, plan: StepPlan, label: str, watch: RunWatch,
                   need_steady: bool) -> tuple[StepResult, Event | None]:
    """Hold plan.hold_s, then until (when asked) the window is steady and `min_requests` own
    requests completed, up to max_hold_s. Completions lengthen a step only when they can
    come by max_hold_s (completions_can_come); they never decide whether it is judged."""
    acc.steady_min_s = plan.steady_min_s
    min_requests, max_hold_s = plan.min_requests, plan.max_hold_s

    def done(now: float, el: float) -> bool:
        if el < plan.hold_s:
            return False
        if el >= max_hold_s:
            return True
        if need_steady and not acc.steady(now):
            return False
        return acc.completed >= min_requests or not completions_can_come(acc, now, min_requests, max_hold_s)

    def line(el: float) -> str:
        took = f"{el:.0f}s" if plan.num_requests is not None else elapsed_text(el, plan.hold_s)
        return f"{label} measuring {took}, {acc.completed}/{min_requests} own done"

    return await hold(engine, acc, done, line, watch, where(plan))


def elapsed_text(el: float, hold_s: float) -> str:
    """How long a step has measured: `12/30s` within its hold, `26 s (hold 10 s)` past it (a
    step held on for steadiness or its own completions, a probe waiting for its answer:
    never `26/10s`)."""
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


async def _measure_trace(engine: Engine, acc: StepAccumulator, plan: StepPlan, label: str, watch: RunWatch) -> tuple[StepResult, Event | None]:
    """A trace step holds until every row was sent and every own request ended (at least
    hold_s, at most max_hold_s)."""
    ctl, trace = engine.controller, engine.load.trace
    assert ctl is not None and trace is not None

    def ended() -> int:
        return acc.completed + acc.failed + acc.cancelled

    def done(now: float, el: float) -> bool:
        return el >= plan.max_hold_s or (el >= plan.hold_s and ctl.trace_done and ended() >= acc.sent)

    def line(el: float) -> str:
        sent, total = trace.progress()
        return f"{label} {sent}/{total} sent, {ended()} ended, {el:.0f}s"

    return await hold(engine, acc, done, line, watch, where(plan))


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


def flushes(engine: Engine, preset: Preset | None) -> bool:
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


async def run_step(engine: Engine, plan: StepPlan, label: str, watch: RunWatch, preset: Preset | None = None) -> tuple[StepResult | None, Event | None]:
    """One step at plan's load: set it, open, warm up, measure, record. Returns (its result,
    None when it was not recorded; the event that ended it, or None).
    The load is set before the step opens, with no await between: no request goes out in
    between, and the step carries the load's shape. With a cache flush, the load drains to
    zero and the cache is flushed first (engine/run/server_ops.py): the drain is in no step.
    With a profiler capture at this load, it starts once the step measures and stops after
    --profile-s or at the step's end."""
    book = engine.book
    flushed = await drain_and_flush(engine, plan.label) if flushes(engine, preset) else None
    if plan.probe:  # a replayed probe: what is in flight is aborted, as the original `a` did
        await engine.probe()
        watch.stall.reset()
    before = _sent_before(engine)
    c = _set_load(engine, plan)
    acc = book.open_step(c, "measure", measure=False, in_flight=before)
    acc.cache_flush = flushed
    watch.begin(acc.index, where(plan))
    ctl = engine.controller
    if ctl is not None and ctl.paused:  # a preset run starts held: its first request is its first step's
        ctl.resume()
    engine.log("preset", f"{label}: warm-up", concurrency=c)
    try:
        return await _warm_and_measure(engine, acc, plan, label, watch, preset)
    except asyncio.CancelledError:  # cancelled mid-step: the period keeps its row (marked short when it was one)
        if not acc.closed:
            acc.partial = True
            res = book.close_step(acc)
            res.short = acc.short = res.duration_s < MIN_LIVE_STEP_S
            if res.requests_sent or res.completed or res.failed or res.output_throughput > 0:
                book.record(res)
        raise


async def _warm_and_measure(engine: Engine, acc: StepAccumulator, plan: StepPlan, label: str, watch: RunWatch,
                            preset: Preset | None) -> tuple[StepResult | None, Event | None]:
    """The step's warm-up, its measured window and its record (see run_step)."""
    book = engine.book
    event = await _warm_up(engine, acc, plan, label, watch)
    if event is not None:
        book.close_step(acc)  # ended in its warm-up: nothing of it was measured
        return None, event
    replay = plan.min_requests == 0
    capture = start_capture(engine, acc=acc) if _profiles(preset, plan) else None
    if plan.speed is not None:
        res, event = await _measure_trace(engine, acc, plan, label, watch)
    else:
        # a step that counts requests ([ramp] num_requests) ends at its count, steady or not
        res, event = await _measure(engine, acc, plan, label, watch, need_steady=not replay and plan.num_requests is None)
    if capture is not None:
        await asyncio.shield(capture)  # stopped at the step's end (or before, after --profile-s)
        res.profiles = list(acc.profiles) or None
    if event is not None and event[0] == "server_gone":
        return None, event  # its figures are the dying server's, not its load's
    book.record(res)
    return res, event


def _sent_before(engine: Engine) -> int:
    """The load's requests whose end is still to come (and open-loop sends waiting at the
    cap): a new step's turnover waits for them. In this process, the senders' own records
    (a request that ended but whose task has not yet left the controller is not one); with
    worker processes, their reported in-flight."""
    ctl = engine.controller
    waiting = ctl.waiting if ctl is not None else 0
    sender = engine.measurements.load_sender
    if engine.pool is None and sender is not None:
        return len(sender.in_flight) + waiting
    return engine.in_flight + waiting
