"""Client self-health: event-loop lag and process CPU."""

from __future__ import annotations

import asyncio
import time

import pytest

from redline.engine.telemetry.client_health import (
    CPU_OVERLOAD_PCT,
    LAG_OVERLOAD_MS,
    ClientHealth,
    LoopLagMonitor,
)


async def test_blocked_loop_is_reported_as_overloaded():
    monitor = LoopLagMonitor(interval_s=0.02)
    health = ClientHealth(monitor)
    monitor.start()
    try:
        await asyncio.sleep(0.1)
        for _ in range(3):
            time.sleep(0.2)  # something holds the event loop (drawing, parsing...)
            await asyncio.sleep(0.05)
        lag = monitor.lag_ms()
        assert lag.max_ms >= 150 and lag.p99_ms >= 150
        status = health.status()
        assert status.overloaded
        assert status.loop_lag_ms is not None and status.loop_lag_ms > LAG_OVERLOAD_MS
        assert status.reason.startswith("client overloaded: event-loop lag ")
        assert "latencies are inflated by redline itself, not the server" in status.reason
        assert "\n" not in status.reason
    finally:
        await monitor.stop()
    assert not monitor.running


def test_lag_statistics_over_window():
    now = [100.0]
    m = LoopLagMonitor(interval_s=0.05, window_s=5.0, clock=lambda: now[0])
    assert m.lag_ms().n == 0
    for i in range(200):
        m.record(90.0 + i * 0.05, 0.001)
    m.record(99.9, 0.045)
    lag = m.lag_ms()
    assert lag.max_ms == pytest.approx(45.0)
    assert lag.n == 101  # only the last 5 s
    assert lag.p99_ms == pytest.approx(1.0)  # one outlier in 101 is above p99
    now[0] = 200.0
    assert m.lag_ms().n == 0  # old samples fall out of the window


class _Lag:
    def __init__(self, p99: float, mx: float) -> None:
        from redline.engine.telemetry.client_health import LagStats

        self.stats = LagStats(p99, mx, 100)

    def lag_ms(self):
        return self.stats


def test_health_ok_and_cpu_overload(monkeypatch):
    health = ClientHealth(_Lag(2.0, 5.0))  # type: ignore[arg-type]
    s = health.status()
    assert not s.overloaded and s.reason == "" and s.loop_lag_ms == 2.0 and s.loop_lag_max_ms == 5.0
    assert s.cpu_pct is None or s.cpu_pct >= 0
    # CPU saturation of one core alone is enough
    monkeypatch.setattr(health, "_cpu", lambda: (130.0, 98.0))
    s = health.status()
    assert s.overloaded and s.busiest_cpu_pct == 98.0 and s.cpu_pct == 130.0
    assert s.reason == (
        "client overloaded: event-loop lag 2 ms, CPU 98 % — latencies are inflated by redline "
        "itself, not the server"
    )
    monkeypatch.setattr(health, "_cpu", lambda: (CPU_OVERLOAD_PCT, CPU_OVERLOAD_PCT))
    assert not health.status().overloaded


def test_cpu_measured_for_process_tree():
    health = ClientHealth()
    end = time.perf_counter() + 0.2
    while time.perf_counter() < end:  # burn some CPU
        pass
    s = health.status()
    assert s.cpu_pct is not None and s.cpu_pct > 10
    assert s.busiest_cpu_pct is not None and s.busiest_cpu_pct <= s.cpu_pct + 1e-9
    assert s.loop_lag_ms is None
