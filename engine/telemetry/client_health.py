"""Is redline itself the bottleneck? Event-loop lag and CPU of redline's own processes.

redline timestamps tokens when their bytes reach its event loop. If the loop is late (busy
parsing hundreds of streams, or held by drawing), every latency it reports is inflated by
that lateness. ``LoopLagMonitor`` measures the lateness directly: a task that sleeps a fixed
interval and records how late it woke. ``ClientHealth`` adds the CPU of redline's process
tree (an interpreter at ~100 % of one core cannot keep up, whatever the loop says) and turns
both into a one-line operator warning.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import time
from collections import deque
from collections.abc import Callable
from typing import NamedTuple

import psutil

from .types import ClientHealthSample

__all__ = [
    "CHILDREN_REFRESH_S",
    "CPU_OVERLOAD_PCT",
    "LAG_INTERVAL_S",
    "LAG_OVERLOAD_MS",
    "LAG_WINDOW_S",
    "ClientHealth",
    "LagStats",
    "LoopLagMonitor",
]

# -- thresholds, all in one place ---------------------------------------------------------
LAG_INTERVAL_S = 0.05  # the monitor's sleep; its overshoot is the lag
LAG_WINDOW_S = 5.0  # lag statistics cover this many recent seconds
# Lag p99 above this makes measured TTFT/ITL untrustworthy: at 20 ms the measurement error is
# already comparable to a decode step (ITL of a busy server is 10-50 ms).
LAG_OVERLOAD_MS = 20.0
# One Python interpreter cannot use more than one core for its event loop: above this share
# of a core it is saturated and starts to queue its own work.
CPU_OVERLOAD_PCT = 90.0
# Finding child processes scans /proc; do it this often, not on every status() call.
CHILDREN_REFRESH_S = 5.0


class LagStats(NamedTuple):
    """Event-loop lag over the recent window, in milliseconds (0 when nothing recorded)."""

    p99_ms: float
    max_ms: float
    n: int


def _p99(values: list[float]) -> float:
    """Nearest-rank 99th percentile (the max for fewer than 100 values)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


class LoopLagMonitor:
    """Measures how late the running event loop wakes a task that sleeps ``interval_s``."""

    def __init__(
        self,
        interval_s: float = LAG_INTERVAL_S,
        window_s: float = LAG_WINDOW_S,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if interval_s <= 0 or window_s <= 0:
            raise ValueError(f"interval_s and window_s must be > 0, got {interval_s}, {window_s}")
        self.interval_s = interval_s
        self.window_s = window_s
        self.clock = clock
        self._lags: deque[tuple[float, float]] = deque(maxlen=int(window_s / interval_s) + 64)
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Start measuring on the running loop (call from a coroutine on that loop)."""
        if not self.running:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="redline-loop-lag")

    async def stop(self) -> None:
        """Stop measuring; waits for the task to finish."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def record(self, t: float, lag_s: float) -> None:
        """Add one observation (the task does this; exposed for tests and other sources)."""
        self._lags.append((t, max(0.0, lag_s)))

    def lag_ms(self, now: float | None = None) -> LagStats:
        """p99 and max lag over the last ``window_s`` seconds."""
        now = self.clock() if now is None else now
        recent = [lag for t, lag in self._lags if t >= now - self.window_s]
        if not recent:
            return LagStats(0.0, 0.0, 0)
        return LagStats(1000.0 * _p99(recent), 1000.0 * max(recent), len(recent))

    async def _run(self) -> None:
        while True:
            t0 = self.clock()
            await asyncio.sleep(self.interval_s)
            t1 = self.clock()
            self.record(t1, t1 - t0 - self.interval_s)


class ClientHealth:
    """Combines loop lag with the CPU % of redline's process tree (itself and children).

    ``status()`` is cheap enough for once a second on the event loop (the child list is
    refreshed every CHILDREN_REFRESH_S).
    """

    def __init__(
        self,
        monitor: LoopLagMonitor | None = None,
        *,
        pid: int | None = None,
        lag_threshold_ms: float = LAG_OVERLOAD_MS,
        cpu_threshold_pct: float = CPU_OVERLOAD_PCT,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.monitor = monitor
        self.lag_threshold_ms = lag_threshold_ms
        self.cpu_threshold_pct = cpu_threshold_pct
        self.clock = clock
        self._root: psutil.Process | None
        try:
            self._root = psutil.Process(pid if pid is not None else os.getpid())
        except psutil.Error:
            self._root = None
        self._procs: dict[int, psutil.Process] = {}
        self._primed: set[int] = set()
        self._children_at = -math.inf
        self._refresh_tree()
        self._cpu()  # prime psutil's counters: its first reading of a process is meaningless

    def _refresh_tree(self) -> None:
        if self._root is None:
            return
        try:
            tree = [self._root, *self._root.children(recursive=True)]
        except psutil.Error:
            tree = [self._root]
        fresh: dict[int, psutil.Process] = {}
        for p in tree:
            old = self._procs.get(p.pid)
            fresh[p.pid] = old if old is not None and old == p else p  # keep primed objects
        self._primed &= set(fresh)
        self._procs = fresh
        self._children_at = self.clock()

    def _cpu(self) -> tuple[float | None, float | None]:
        """(total %, busiest process %) over the time since the last call."""
        if self.clock() - self._children_at >= CHILDREN_REFRESH_S:
            self._refresh_tree()
        total, busiest, any_value = 0.0, 0.0, False
        for pid, p in list(self._procs.items()):
            try:
                pct = p.cpu_percent(interval=None)
            except psutil.Error:
                self._procs.pop(pid, None)
                self._primed.discard(pid)
                continue
            if pid not in self._primed:
                self._primed.add(pid)
                continue
            any_value = True
            total += pct
            busiest = max(busiest, pct)
        return (total, busiest) if any_value else (None, None)

    def status(self) -> ClientHealthSample:
        """The current verdict, with a one-line operator warning when overloaded."""
        cpu, busiest = self._cpu()
        lag = self.monitor.lag_ms() if self.monitor is not None else None
        lag_p99 = lag.p99_ms if lag is not None and lag.n else None
        lag_max = lag.max_ms if lag is not None and lag.n else None
        causes = []
        if lag_p99 is not None and lag_p99 > self.lag_threshold_ms:
            causes.append("lag")
        if busiest is not None and busiest > self.cpu_threshold_pct:
            causes.append("cpu")
        reason = ""
        if causes:
            parts = []
            if lag_p99 is not None:
                parts.append(f"event-loop lag {lag_p99:.0f} ms")
            if busiest is not None:
                parts.append(f"CPU {busiest:.0f} %")
            reason = (
                f"client overloaded: {', '.join(parts)} — latencies are inflated by redline "
                "itself, not the server"
            )
        return ClientHealthSample(
            cpu_pct=cpu,
            loop_lag_ms=lag_p99,
            overloaded=bool(causes),
            reason=reason,
            loop_lag_max_ms=lag_max,
            busiest_cpu_pct=busiest,
        )
