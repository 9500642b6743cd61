"""The C=1 probe at the end of a preset (`[after] probe_s`): single-stream speed, as asked.

What is in flight is aborted, and nothing is sent while the abort unwinds
(engine/load/controller.py LoadControl.probe); then the probe's window opens and every request
it sends is its own (phase `probe`, never `warmup`): it measures `probe_s` from the moment the
load is one request. Its TTFT and ITL are known from its first request's first token, long
before a 2048-token answer ends; when none of its requests has answered by `probe_s` (a
server still unwinding the aborted load answers late), it waits for that one first token
(at most PROBE_MAX_HOLD_S) and says so. A request still decoding at the close is its own
censored one (E2E a bound); no second request is started to be cancelled. The run's watch
(engine/run/run_watch.py) ends it on an event, as it ends a step.
"""

from __future__ import annotations

import time
from typing import Callable

from ..constants import PROBE_MAX_HOLD_S
from ..core.engine import Engine
from ..measure.step_result import StepResult
from ..preset import Preset
from ..rules.step_text import format_step_line
from .run_watch import RunWatch
from .server_ops import drain_and_flush
from .step_run import Event, elapsed_text, flushes, hold

PROBE_AT = "C=1 (the probe)"  # where a run-time event in it is said to be


async def run_probe(engine: Engine, preset: Preset, watch: RunWatch, on_line: Callable[[str], None]) -> tuple[StepResult | None, Event | None]:
    """The probe (see the module docstring): (its result, None when it was not recorded; the
    event that ended it, or None)."""
    probe_s = preset.after.probe_s
    book = engine.book
    flushed = await drain_and_flush(engine, "the C=1 probe") if flushes(engine, preset) else None
    acc = book.open_step(1, "probe", measure=False)
    acc.cache_flush = flushed
    await engine.probe()  # the abort: nothing of it lands in the probe's window, nothing is sent meanwhile
    acc.begin_measure(time.perf_counter())  # before the loop turns: the first request sent is the probe's own
    watch.stall.reset()
    watch.begin(acc.index, PROBE_AT)
    if engine.controller is not None:
        engine.controller.poke()  # worker processes: their next order carries the probe's stamp
    label = f"{preset.name} C=1 probe"
    max_hold = max(probe_s, PROBE_MAX_HOLD_S)

    waited: list[bool] = []  # probe_s passed with no request answered: it waits for one first token

    def done(now: float, el: float) -> bool:
        if el < probe_s:
            return False
        if acc.first_token >= 1 or el >= max_hold:
            return True
        waited[:] = [True]
        return False

    def line(el: float) -> str:
        if el >= probe_s and acc.first_token == 0:
            return f"{label} {elapsed_text(el, probe_s)}, waiting for its request's first token"
        return f"{label} measuring {elapsed_text(el, probe_s)}, {acc.first_token} answered"

    res, event = await hold(engine, acc, done, line, watch, PROBE_AT)
    if event is not None:
        engine.log("break" if event[0] != "server_gone" else "preset", f"probe: {event[1]}", concurrency=1)
        on_line(f"probe: {event[1]}")
        if event[0] == "server_gone":
            return None, event
    elif waited:
        said = f"probe: held {res.duration_s:.1f} s, past probe_s {probe_s:g} s, until its request's first token"
        engine.log("preset", said, concurrency=1)
        on_line(said)
    book.record(res)
    on_line(format_step_line(res))
    return res, event
