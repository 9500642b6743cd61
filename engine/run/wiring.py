"""Who hears what on the measurement path: every subscription the engine makes to the named
events (engine/measure/events.py), in one place.

    a load request (one Sender per target, engine/run/target_set.py):
        sent, first_token, tokens, ended -> its TargetStats (the target's own figures), then the
                                            Recorder (engine/run/recording.py: live windows, steps,
                                            the run's totals, the failure streak, the session's rows)
        lag                              -> LiveMetrics.on_lag (the chunks' lag behind the server)
        overloaded                       -> the engine's warning (slots backing off)
        ended, with --control            -> Prometheus (engine/control/prometheus.py), after those
    a probe-lane request (engine/load/probe_lane.py):
        sent, first_token, tokens, ended -> LaneListener (its own window and rows, never the load's)
    a step (engine/measure/step_book.py):
        closed, final                    -> the engine: its log line, and summary.json rewritten

A worker process's reports are replayed into the same load events (engine/run/load_port.py
EnginePort.listeners); a worker subscribes its own Batch (engine/load/worker.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterable, Protocol

from ..measure.events import RequestEvents, StepEvents
from .recording import GapExport

if TYPE_CHECKING:
    from ..measure.records import RequestRecord
    from ..measure.step_result import StepResult
    from .recording import LaneListener, Recorder
    from .target_stats import TargetStats


class EndExport(GapExport, Protocol):
    """Prometheus's figures (engine/control/prometheus.py PromMetrics): ended requests and gaps."""

    def on_end(self, rec: RequestRecord) -> None: ...


def load_events(stats: TargetStats, recorder: Recorder, on_lag: Callable[[float], None],
                overloaded: Callable[[str], None]) -> RequestEvents:
    """One target's load Sender's events: its TargetStats first, then the Recorder."""
    events = RequestEvents(lag=on_lag).subscribe(stats).subscribe(recorder)
    events.overloaded.add(overloaded)
    return events


def lane_events(lane: LaneListener) -> RequestEvents:
    """The probe lane's Sender's events: its own subscriber only (no lag, no overload warning)."""
    return RequestEvents().subscribe(lane)


def step_events(closed: Callable[[StepResult], None], final: Callable[[StepResult], None]) -> StepEvents:
    """The engine's step book's events."""
    return StepEvents(closed, final)


def with_prometheus(load: Iterable[RequestEvents], recorder: Recorder, prom: EndExport) -> None:
    """--control: every target's ended load requests, and the harvest's gaps, to Prometheus."""
    for events in load:
        events.ended.add(prom.on_end)
    recorder.prom = prom
