"""Whose event loop can move the load's figures: the lag the client's health reads.

In one process, the engine's own loop sends the requests and stamps their bytes: its lag is
what a latency may carry (engine/telemetry/client_doubt.py). With load workers (`--workers N`,
`--workers auto`, `--ray`), each worker's loop sends and stamps its share, and the
coordinator's loop only merges their reports and draws: a coordinator 30 ms late moves no
figure, a worker 30 ms late does. Each worker measures its own loop (a LoopLagMonitor) and its
reports carry every wake-up (engine/load/worker.py); the pool keeps them in one monitor
(WorkerPool.loop_lag), and `LoadLag` reads those while workers hold the load, else the
coordinator's own. The coordinator still sends the probe lane's requests beside the workers'
load (engine/load/probe_lane.py): while the lane is on, the worse of both loops counts.
"""

from __future__ import annotations

from collections.abc import Callable

from .client_health import LagStats, LoopLagMonitor

__all__ = ["LoadLag"]


class LoadLag:
    """A LagSource for ClientHealth: the loops that hold the load. `workers()` gives the
    workers' wake-ups (None: the load runs in this process). The run-queue wait that explains
    a lag is still read of this process's loop thread (`thread_id`)."""

    def __init__(self, own: LoopLagMonitor, workers: Callable[[], LoopLagMonitor | None],
                 own_sends: Callable[[], bool] = lambda: False) -> None:
        self.own = own
        self.workers = workers
        self.own_sends = own_sends  # this process sends beside the workers (the probe lane on)
        self.window_s = own.window_s

    @property
    def thread_id(self) -> int | None:
        return self.own.thread_id

    def _sources(self) -> list[LoopLagMonitor]:
        w = self.workers()
        if w is None:
            return [self.own]
        return [w, self.own] if self.own_sends() else [w]

    @property
    def in_workers(self) -> bool:
        return self.workers() is not None

    def lag_ms(self) -> LagStats:
        stats = [m.lag_ms() for m in self._sources()]
        if len(stats) == 1:
            return stats[0]
        got = [s for s in stats if s.n]
        if not got:
            return LagStats(0.0, 0.0, 0)
        return LagStats(max(s.p99_ms for s in got), max(s.max_ms for s in got), sum(s.n for s in got))

    def max_since(self, since: float) -> float:
        return max(m.max_since(since) for m in self._sources())
