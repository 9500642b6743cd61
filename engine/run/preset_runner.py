"""The preset runner: a ramp of steps, each warmed up then measured, until it breaks.

Used by `redline run PRESET --headless` and by the TUI (key `p`, `redline run PRESET`):
both drive the same Engine API, so a step means the same thing in either. The runner drives
the engine; the engine knows nothing of presets (it only lets a `driver` task steer it, which
an operator command cancels).

- a step: engine/run/step_run.py (warm-up, hold, the events that end it first:
  engine/run/run_watch.py); a knee search's points: engine/run/search_run.py; the C=1
  probe at the end: engine/run/probe.py;
- the break: a step whose figures fire a `[stop]` rule, or a run-time event (the server
  gone, stalled, N failures in a row), judged by engine/rules/breaks.py RampJudge over this
  run's steps as they stand: after each step, and again whenever a step's final figures land
  (its late requests ended; StepBook.rejudge), so summary.json, the report, the HTML page,
  the gate, the TUI and /v1/status read one verdict, on final figures.
"""

from __future__ import annotations

import asyncio
from typing import Callable

from ..constants import DEFAULT_MAX_CONCURRENCY
from ..core import commands
from ..core.config import EngineConfig
from ..core.engine import COMMANDS as ENGINE_COMMANDS, Engine
from ..core.load_move import fit_for_run
from ..core.steering import Handler
from ..preset import Preset
from ..rules.breaks import Place, RampJudge
from ..rules.step_text import format_step_line
from ..rules.verdicts import StopRules
from .probe import run_probe
from .ramp_record import RampRecord, RunOutcome
from .run_watch import RunWatch
from .search_run import run_search
from .server_ops import capture_started, start_capture
from .step_run import completions_can_come, run_step

__all__ = ["COMMANDS", "RampRecord", "RunOutcome", "completions_can_come", "new_engine", "run_preset", "start_preset"]


async def run_preset(engine: Engine, preset: Preset, on_line: Callable[[str], None] = lambda s: None) -> RunOutcome:
    """Run the ramp on a started engine; results also land in engine.steps / summary.json."""
    if preset.slo is not None and engine.config.slo is None:
        engine.set_slo(preset.slo)  # --slo, when given, wins over the preset's [slo]
    ramp = RampRecord(engine, RampJudge(StopRules(preset.stop, slo=engine.config.slo), search=preset.ramp.search is not None))
    watch = RunWatch(engine, preset.stop.stall_s)
    out = RunOutcome()
    book = engine.book
    book.break_result = book.cause = None
    book.rejudge = ramp.rejudge
    engine.judge_doubt(doubt_limits(engine, preset))
    cap = engine.config.max_concurrency if engine.config.max_concurrency != DEFAULT_MAX_CONCURRENCY else 0
    await fit_for_run(engine, preset.peak(cap))  # a load kept in this process moves to workers when the run needs them
    ctl = engine.controller
    if ctl is not None and preset.ramp.max_concurrency is not None:
        ctl.max_concurrency = preset.ramp.max_concurrency  # the open loop's in-flight cap
    book.default_phase = "measure"
    if preset.stop.plateau_gain is not None:
        book.plateau_gain = preset.stop.plateau_gain
    try:
        if preset.ramp.search is not None:
            await run_search(engine, preset, ramp, watch, out, on_line)
        else:
            await _ramp(engine, preset, ramp, watch, out, on_line)
        if preset.after.probe_s > 0 and not engine.server_gone:
            out.probe, _ = await run_probe(engine, preset, watch, on_line)
    finally:
        book.default_phase = "live"
        engine.steering.line = ""
        engine.write_summary()
    return out


def doubt_limits(engine: Engine, preset: Preset) -> dict[str, float]:
    """The limits a step's client_limited is judged against (Engine.judge_doubt): this run's
    [stop] p99 TTFT / ITL and its SLO's p99 bounds."""
    slo = engine.config.slo
    limits = {k: v for k, v in (("p99_ttft_ms", preset.stop.p99_ttft_ms), ("p99_itl_ms", preset.stop.p99_itl_ms),
                                ("p99_e2e_latency_ms", slo.e2e_p99_ms if slo is not None else None)) if v is not None}
    if slo is not None and slo.ttft_p99_ms is not None:
        limits.setdefault("p99_ttft_ms", slo.ttft_p99_ms)
    if slo is not None and slo.itl_p99_ms is not None:
        limits.setdefault("p99_itl_ms", slo.itl_p99_ms)
    return limits


async def _ramp(engine: Engine, preset: Preset, ramp: RampRecord, watch: RunWatch, out: RunOutcome, on_line: Callable[[str], None]) -> None:
    """The preset's steps in order, until it breaks."""
    plans = preset.ramp.steps()
    engine.log("preset", f"preset {preset.name}: {len(plans)} steps: {', '.join(p.label for p in plans)}")
    workloads = preset.ramp.workloads or ()
    for i, plan in enumerate(plans, 1):
        label = f"{preset.name} step {i}/{len(plans)} {plan.label}"
        if i <= len(workloads):
            await _replay_workload(engine, workloads[i - 1])
        res, event = await run_step(engine, plan, label, watch, preset)
        if res is not None:
            ramp.add(res)
            out.steps.append(res)
            on_line(format_step_line(res))
        if event is not None:
            place = Place.of(res) if res is not None else Place(plan.concurrency or engine.live.concurrency(), plan.rate, plan.speed)
            ramp.judge.events.append(ramp.event(event, res, place, watch.stall.began))
        if ramp.announce(out, on_line) is not None:
            return


async def _replay_workload(engine: Engine, w: dict | None) -> None:
    """A replayed step's workload (a session that changed it live): [workload]'s for None."""
    from ..workload.change import WorkloadChange

    base = engine.load.base_workload
    target = {**base, **(w or {})}
    cur = engine.config.workload.describe()
    if {k: cur.get(k) for k in target} != target:
        await engine.set_workload(WorkloadChange(input_len=target.get("input_len"), output_len=target.get("output_len"), dataset=target.get("dataset")), kind="preset")


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


def _start_profile(engine: Engine, cmd: commands.StartProfile) -> object:
    """The server's profiler at the load held now (key P): "started", or why not (a coroutine)."""
    task = start_capture(engine, cmd.seconds)
    return capture_started(engine) if task is not None else "already running"


# The engine's one command table as a host makes it: the engine's own commands and the preset
# runner's (the engine knows no presets)
COMMANDS: dict[type, Handler[Engine]] = {
    **ENGINE_COMMANDS,
    commands.StartPreset: lambda e, c: start_preset(e, c.preset),
    commands.StartProfile: _start_profile,
}


def new_engine(config: EngineConfig) -> Engine:
    """An engine whose commands include the preset runner's (every host's: engine/host.py, the
    headless runner)."""
    return Engine(config, COMMANDS)
