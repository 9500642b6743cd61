"""Client self-health: event-loop lag, process CPU and machine CPU readers.

Which cause a warning names is tested in tests/unit/engine/telemetry/test_client_health_causes.py.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections import namedtuple

import pytest

from redline.engine.telemetry.client_health import (
    CPU_OVERLOAD_PCT,
    LAG_OVERLOAD_MS,
    ClientHealth,
    LagStats,
    LoopLagMonitor,
    MachineCpu,
    MachineCpuReader,
    OwnCpu,
    ProcessTreeCpu,
)

IDLE_MACHINE = MachineCpu(busy_pct=5.0, steal_pct=0.0, iowait_pct=0.0, ncpu=4)


async def test_blocked_loop_is_measured_and_reported():
    monitor = LoopLagMonitor(interval_s=0.02)
    health = ClientHealth(monitor, machine_cpu=lambda: IDLE_MACHINE)
    monitor.start()
    try:
        await asyncio.sleep(0.1)
        for _ in range(3):
            time.sleep(0.2)  # something holds the event loop
            await asyncio.sleep(0.05)
        lag = monitor.lag_ms()
        assert lag.max_ms >= 150 and lag.p99_ms >= 150
        status = health.status()
        assert status.overloaded and status.cause
        assert status.loop_lag_ms is not None and status.loop_lag_ms > LAG_OVERLOAD_MS
        assert f"event-loop lag {status.loop_lag_ms:.0f} ms" in status.reason
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


def test_lag_read_from_another_thread_while_recorded():
    """The engine reads lag_ms() on a worker thread while the loop records."""
    m = LoopLagMonitor(interval_s=0.05, window_s=5.0, clock=lambda: 0.0)
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        i = 0
        while not stop.is_set():
            m.record(0.0, (i % 7) / 1000)
            i += 1

    t = threading.Thread(target=writer)
    t.start()
    try:
        for _ in range(2000):
            try:
                m.lag_ms()
            except RuntimeError as e:  # "deque mutated during iteration" without the lock
                errors.append(e)
    finally:
        stop.set()
        t.join()
    assert errors == []


class _Lag:
    def __init__(self, p99: float, mx: float) -> None:
        self.stats = LagStats(p99, mx, 100)

    def lag_ms(self) -> LagStats:
        return self.stats


def test_health_ok_and_cpu_overload():
    own = [OwnCpu(3.0, 2.0, 2.0)]
    health = ClientHealth(_Lag(2.0, 5.0), own_cpu=lambda: own[0], machine_cpu=lambda: IDLE_MACHINE)
    s = health.status()
    assert not s.overloaded and s.reason == "" and s.cause == ""
    assert s.loop_lag_ms == 2.0 and s.loop_lag_max_ms == 5.0
    assert s.cpu_pct == 3.0 and s.loop_cpu_pct == 2.0 and s.busiest_cpu_pct == 2.0
    assert s.machine_cpu_pct == 5.0 and s.others_cpu_pct == 2.0 and s.steal_pct == 0.0
    # the loop's process saturating one core is enough, even with a healthy lag
    own[0] = OwnCpu(130.0, 98.0, 98.0)
    s = health.status()
    assert s.overloaded and s.cause == "client_cpu"
    assert s.busiest_cpu_pct == 98.0 and s.cpu_pct == 130.0 and s.loop_cpu_pct == 98.0
    assert s.reason == "client overloaded: redline's loop at 98 % CPU — latencies inflated by redline itself"
    own[0] = OwnCpu(CPU_OVERLOAD_PCT, CPU_OVERLOAD_PCT, CPU_OVERLOAD_PCT)
    assert not health.status().overloaded


def test_cpu_measured_for_process_tree():
    reader = ProcessTreeCpu()
    end = time.perf_counter() + 0.2
    while time.perf_counter() < end:  # burn some CPU
        pass
    own = reader()
    assert own is not None and own.total_pct > 10 and own.loop_pct > 10
    assert own.busiest_pct <= own.total_pct + 1e-9
    # no monitor: no lag, no machine
    s = ClientHealth(own_cpu=lambda: None, machine_cpu=lambda: None).status()
    assert s.loop_lag_ms is None and s.machine_cpu_pct is None and s.cause == ""


def test_a_cpu_reading_right_after_the_last_is_none_not_a_magnified_tick():
    """A reading microseconds after the previous one would be one 10 ms scheduler tick over
    a few µs (thousands of %): it is None, and the next reading spans the whole time since."""
    reader = ProcessTreeCpu()  # primes
    assert reader() is None  # at once: too short a window to mean anything
    end = time.perf_counter() + 0.25
    while time.perf_counter() < end:  # burn one core
        pass
    own = reader()
    assert own is not None and own.total_pct <= 100.0 * (os.cpu_count() or 1) + 1
    assert reader() is None  # again right after
    s = ClientHealth(own_cpu=ProcessTreeCpu(), machine_cpu=lambda: None).status()
    assert s.cause == "", s.reason  # the default reader, read at once: no false "client_cpu"


_Times = namedtuple(
    "_Times", "user nice system idle iowait irq softirq steal guest guest_nice"
)


def test_machine_cpu_from_cpu_times():
    readings = iter(
        [
            _Times(100, 0, 50, 1000, 10, 0, 0, 5, 30, 0),
            # +1 s on 2 CPUs: user 0.8 (guest 0.3 of it), system 0.4, idle 0.4, iowait 0.2, steal 0.2
            _Times(100.8, 0, 50.4, 1000.4, 10.2, 0, 0, 5.2, 30.3, 0),
            _Times(100.8, 0, 50.4, 1000.4, 10.2, 0, 0, 5.2, 30.3, 0),  # no time passed
        ]
    )
    reader = MachineCpuReader(times=lambda: next(readings), ncpu=2)
    m = reader()
    assert m is not None and m.ncpu == 2
    assert m.busy_pct == pytest.approx(120.0)  # 1.2 CPU-seconds of 2.0: guest not counted twice
    assert m.steal_pct == pytest.approx(10.0)
    assert m.iowait_pct == pytest.approx(10.0)
    assert reader() is None


def test_machine_cpu_real_reading():
    reader = MachineCpuReader()
    end = time.perf_counter() + 0.1
    while time.perf_counter() < end:
        pass
    m = reader()
    assert m is not None and 0 <= m.busy_pct <= 100 * m.ncpu + 1e-6
    assert 0 <= m.steal_pct <= 100 and 0 <= m.iowait_pct <= 100
