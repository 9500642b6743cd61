"""The preset runner: a ramp of steps, each warmed up then measured, until a rule fires.

Used by `redline run PRESET --headless` and by the TUI (key `p`, `redline run PRESET`):
both drive the same Engine API, so a step means the same thing in either.
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable

from .breaker import StopRules
from .constants import SNAPSHOT_INTERVAL_S
from .core import Engine
from .preset import Preset, StepPlan
from .session import format_step_line
from .stepresult import BreakResult, StepResult

POLL_S = SNAPSHOT_INTERVAL_S


class RunOutcome:
    def __init__(self) -> None:
        self.steps: list[StepResult] = []
        self.break_result: BreakResult | None = None
        self.probe: StepResult | None = None


async def _wait(engine: Engine, seconds: float) -> bool:
    """Sleep `seconds` unless the server goes; True if it went."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        if engine.server_gone:
            return True
        await asyncio.sleep(min(POLL_S, max(0.0, end - time.perf_counter())))
    return engine.server_gone


async def _measure(engine: Engine, plan: StepPlan, phase: str, label: str) -> tuple[StepResult, bool]:
    """Hold plan.hold_s (longer, up to max_hold_s, until min_requests completed)."""
    acc = engine.open_step(plan.concurrency, phase)
    t0 = acc.t0
    gone = False
    while True:
        el = time.perf_counter() - t0
        engine.preset_line = f"{label} measuring {el:.0f}/{plan.hold_s:.0f}s, {acc.completed} done"
        if el >= plan.hold_s and (acc.completed >= plan.min_requests or el >= plan.max_hold_s):
            break
        if engine.server_gone:
            gone = True
            break
        await asyncio.sleep(POLL_S)
    return engine.close_step(acc), gone


async def run_preset(engine: Engine, preset: Preset, on_line: Callable[[str], None] = lambda s: None) -> RunOutcome:
    """Run the ramp on a started engine; results also land in engine.steps / summary.json."""
    rules = StopRules(preset.stop)
    out = RunOutcome()
    plans = preset.ramp.steps()
    engine.log("preset", f"preset {preset.name}: {len(plans)} steps {list(preset.ramp.concurrency)}")
    if engine.controller is not None and engine.controller.paused:
        engine.controller.resume()
    gone = False
    for i, plan in enumerate(plans, 1):
        label = f"{preset.name} step {i}/{len(plans)} C={plan.concurrency}"
        engine.phase = "warmup"
        engine.set_concurrency(plan.concurrency)
        if plan.warmup_s > 0:
            engine.preset_line = f"{label} warm-up {plan.warmup_s:.0f}s"
            gone = await _wait(engine, plan.warmup_s)
        res = None
        if not gone:
            engine.phase = "measure"
            res, gone = await _measure(engine, plan, "measure", label)
            if not gone:
                engine.record_step(res)
                out.steps.append(res)
                on_line(format_step_line(res))
        if gone:
            br = rules.evaluate(out.steps, res, server_gone=True)
            br.concurrency = plan.concurrency  # the step the server went in
        else:
            br = rules.evaluate(out.steps[:-1], res)
        if br is not None:
            out.break_result = engine.break_result = br
            engine.log("break", br.detail or br.reason, concurrency=br.concurrency)
            on_line(f"break: {br.reason} at C={br.concurrency}; last good C={br.last_good_concurrency} ({br.detail})")
            break
    if preset.after.probe_s > 0 and not engine.server_gone:
        await engine.probe()
        engine.phase = "probe"
        plan = StepPlan(1, 0.0, preset.after.probe_s, 0, preset.after.probe_s)
        res, gone = await _measure(engine, plan, "probe", f"{preset.name} C=1 probe")
        if not gone:
            engine.record_step(res)
            out.probe = res
            on_line(format_step_line(res))
    engine.phase = "live"
    engine.preset_line = ""
    engine.write_summary()
    return out

