"""The engine as the load sees it (engine/load/port.py LoadPort): what a worker pool replays
its workers' reports into and orders them with, and nothing else of the engine."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from ..load.sender import Listener
    from ..measure.histogram import LogHistogram
    from ..workload.prompts import WorkloadConfig


class EnginePort:
    """LoadPort over the engine (`engine`: the Engine, engine/run/engine.py)."""

    def __init__(self, engine: Any) -> None:
        self._e = engine

    def stamp(self) -> tuple[int, int, str]:
        return self._e.stamp()

    def stamp_at(self, concurrency: int, t: float) -> tuple[int, int, str]:
        return self._e.book.stamp(concurrency, t)

    def listeners(self) -> Sequence[Listener]:
        return [t.stats for t in self._e.targets]

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

    def on_gaps(self, gaps: list) -> None:
        self._e.recorder.on_remote_gaps(gaps)

    def unmeasure_gaps(self, gaps: list) -> None:
        self._e.recorder.unmeasure_gaps(gaps)

    def on_cuts(self, t: float, cuts: list) -> None:
        self._e.book.take_remote_cuts(t, cuts)

    def forget(self, rids: list[int]) -> None:
        self._e.metrics.forget(rids)

    def merge_lags(self, lags: LogHistogram) -> None:
        self._e.metrics.lag.merge(lags)

    def warn(self, text: str, key: str | None = None) -> None:
        self._e.warn(text, key)
