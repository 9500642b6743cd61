"""Who hears what on the measurement path: every subscription the engine makes to its named
events, the hooks (engine/measure/hooks.py), in one place.

    a load request (one Sender per target, engine/core/targets.py):
        sent, first_token, tokens, ended -> its TargetStats (the target's own figures), then the
                                            Measurements (engine/core/measurements.py: live windows, steps,
                                            the run's totals, the failure streak, the session's rows)
        lag                              -> LiveMetrics.on_lag (the chunks' lag behind the server)
        overloaded                       -> the engine's warning (slots backing off)
        ended, with --control            -> Prometheus (engine/control/prometheus.py), after those
    a probe-lane request (engine/load/probe_lane.py):
        sent, first_token, tokens, ended -> LaneListener (its own window and rows, never the load's)
    a step (engine/measure/step_book.py):
        closed, final                    -> the engine: its log line, and summary.json rewritten

A worker process's reports are replayed into the same load hooks (engine/core/engine_port.py
EnginePort.listeners); a worker subscribes its own Batch (engine/load/worker.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterable, Protocol

from ..measure.hooks import RequestHooks, StepHooks
from .measurements import GapExport

if TYPE_CHECKING:
    from ..measure.records import RequestRecord
    from ..measure.step_result import StepResult
    from .measurements import LaneListener, Measurements
    from .target_stats import TargetStats


class EndExport(GapExport, Protocol):
    """Prometheus's figures (engine/control/prometheus.py PromMetrics): ended requests and gaps."""

    def on_end(self, rec: RequestRecord) -> None: ...


def load_hooks(stats: TargetStats, measurements: Measurements, on_lag: Callable[[float], None],
                overloaded: Callable[[str], None]) -> RequestHooks:
    """One target's load Sender's hooks: its TargetStats first, then the Measurements."""
    hooks = RequestHooks(lag=on_lag).subscribe(stats).subscribe(measurements)
    hooks.overloaded.add(overloaded)
    measurements.token_hooks.append(hooks.tokens)  # both take its tokens batched: flushed there
    return hooks


def lane_hooks(lane: LaneListener) -> RequestHooks:
    """The probe lane's Sender's hooks: its own subscriber only (no lag, no overload warning)."""
    return RequestHooks().subscribe(lane)


def step_hooks(closed: Callable[[StepResult], None], final: Callable[[StepResult], None]) -> StepHooks:
    """The engine's step book's hooks."""
    return StepHooks(closed, final)


def with_prometheus(load: Iterable[RequestHooks], measurements: Measurements, prom: EndExport) -> None:
    """--control: every target's ended load requests, and the harvest's gaps, to Prometheus."""
    for hooks in load:
        hooks.ended.add(prom.on_end)
    measurements.prom = prom
