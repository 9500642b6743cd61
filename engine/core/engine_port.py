"""The engine as the load sees it (engine/load/port.py LoadPort): what a worker pool replays
its workers' reports into and orders them with, and nothing else of the engine."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, Sequence

if TYPE_CHECKING:
    from ..load.port import TargetReplay
    from ..measure.gap_batch import GapBatch
    from ..measure.histogram import LogHistogram
    from ..measure.hooks import RequestHooks
    from ..measure.live_metrics import LiveMetrics
    from ..measure.records import RequestRecord
    from ..measure.step_book import StepBook
    from ..workload.prompts import WorkloadConfig
    from .config import EngineConfig
    from .measurements import Measurements
    from .target_stats import TargetStats
    from .targets import TargetSet


class Coordinating(Protocol):
    """What the port reads of the engine (engine/core/engine.py Engine)."""

    config: EngineConfig
    book: StepBook
    measurements: Measurements
    metrics: LiveMetrics
    targets: TargetSet

    def stamp(self, t_intended: float | None = None) -> tuple[int, int, str]: ...
    def note_held(self, dropped: bool, t_intended: float | None = None) -> None: ...
    def warn(self, text: str, key: str | None = None) -> None: ...


class Replay:
    """A target's load hooks as a worker pool replays its workers' reports into them
    (engine/load/port.py TargetReplay): the same subscribers as one process's requests."""

    __slots__ = ("_hooks", "_stats")

    def __init__(self, hooks: RequestHooks, stats: TargetStats) -> None:
        self._hooks = hooks
        self._stats = stats

    def on_send(self, rec: RequestRecord) -> None:
        self._hooks.sent.fire(rec)

    def on_first(self, rec: RequestRecord) -> None:
        self._hooks.first_token.fire(rec)

    def on_tokens(self, t: float, n: int) -> None:
        tokens = self._hooks.tokens
        tokens.fire(t, n)
        tokens.flush()  # a report's tokens count now (a step may close on them next)

    def on_remote_end(self, rec: RequestRecord) -> None:
        self._stats.judge_remote_end(rec)  # a failure that may mean the server died asks its watch
        self._hooks.ended.fire(rec)


class EnginePort:
    """LoadPort over the engine."""

    def __init__(self, engine: Coordinating) -> None:
        self._e = engine

    def stamp(self) -> tuple[int, int, str]:
        return self._e.stamp()

    def stamp_at(self, concurrency: int, t: float) -> tuple[int, int, str]:
        return self._e.book.stamp(concurrency, t)

    def listeners(self) -> Sequence[TargetReplay]:
        return [Replay(t.sender.hooks, t.stats) for t in self._e.targets]

    def urls(self) -> Sequence[str]:
        return [t.target.url for t in self._e.targets]

    def gone(self) -> tuple[bool, ...]:
        return tuple(t.down for t in self._e.targets)  # not ready (/health 503) is skipped as gone

    def workload(self) -> WorkloadConfig:
        return self._e.config.workload

    def note_held(self, dropped: bool, t_intended: float | None = None) -> None:
        self._e.note_held(dropped, t_intended)

    def abandon_held(self, times: list[float]) -> None:
        self._e.book.abandon_held(times)

    def on_gaps(self, gaps: GapBatch) -> None:
        self._e.measurements.on_remote_gaps(gaps)

    def unmeasure_gaps(self, gaps: GapBatch) -> None:
        self._e.measurements.unmeasure_gaps(gaps)

    def on_cuts(self, t: float, cuts: list) -> None:
        self._e.book.take_remote_cuts(t, cuts)

    def forget(self, rids: list[int]) -> None:
        self._e.metrics.forget(rids)

    def merge_lags(self, lags: LogHistogram) -> None:
        self._e.metrics.lag.merge(lags)

    def warn(self, text: str, key: str | None = None) -> None:
        self._e.warn(text, key)
