"""Whose loop lag marks the figures: with load workers, the workers' loops (they send and stamp),
not the coordinator's (engine/telemetry/load_lag.py). A coordinator held up while two workers
keep up is no doubt on any figure; the same hold in one process is (test_engine_telemetry.py's
test_client_lag_warning_when_the_loop_stalls)."""

from __future__ import annotations

import asyncio
import time

import pytest

from redline.engine.core.config import EngineConfig
from redline.engine.core.engine import Engine
from redline.engine.load.worker_messages import Report
from redline.engine.telemetry.client_health import (
    LAG_OVERLOAD_MS,
    ClientHealth,
    LoopLagMonitor,
    MachineCpu,
    OwnCpu,
    Reading,
    verdict,
)
from redline.engine.telemetry.load_lag import LoadLag
from redline.engine.workload.prompts import WorkloadConfig

from helpers import until

WL = WorkloadConfig(input_len=16, output_len=64)


def _monitor(lag_s: float, now: float, n: int = 40) -> LoopLagMonitor:
    m = LoopLagMonitor(clock=lambda: now)
    for k in range(n):
        m.record(now - 2.0 + k * 0.05, lag_s)
    return m


def test_the_workers_lag_is_read_while_they_hold_the_load():
    own, workers = _monitor(0.200, 100.0), _monitor(0.001, 100.0)
    held: list[LoopLagMonitor | None] = [workers]
    lag = LoadLag(own, lambda: held[0])
    assert lag.in_workers and lag.lag_ms().p99_ms == pytest.approx(1.0)
    assert lag.max_since(99.0) == pytest.approx(1.0)
    held[0] = None  # the load back in this process
    assert not lag.in_workers and lag.lag_ms().p99_ms == pytest.approx(200.0)


def test_with_the_probe_lane_on_the_coordinators_loop_counts_too():
    """The lane's requests go out of the coordinator's loop beside the workers' load."""
    own, workers = _monitor(0.200, 100.0), _monitor(0.001, 100.0)
    lane = [True]
    lag = LoadLag(own, lambda: workers, lambda: lane[0])
    assert lag.lag_ms().p99_ms == pytest.approx(200.0) and lag.max_since(99.0) == pytest.approx(200.0)
    lane[0] = False
    assert lag.lag_ms().p99_ms == pytest.approx(1.0)


def _health(lag: LoadLag, loop_pct: float) -> ClientHealth:
    return ClientHealth(lag, clock=lambda: 100.0, own_cpu=lambda: OwnCpu(loop_pct + 30.0, loop_pct, loop_pct),
                        machine_cpu=lambda: MachineCpu(60.0, 0.0, 0.0, 2), run_wait=lambda: 0.0)


def test_a_coordinator_held_up_is_no_doubt_while_workers_keep_up():
    own, workers = _monitor(0.200, 100.0), _monitor(0.001, 100.0)
    in_workers = _health(LoadLag(own, lambda: workers), loop_pct=95.0).status()
    assert not in_workers.overloaded and in_workers.loop_lag_ms == pytest.approx(1.0), in_workers
    one_process = _health(LoadLag(own, lambda: None), loop_pct=95.0).status()
    assert one_process.overloaded and one_process.cause == "client_cpu"


def test_a_worker_behind_is_named():
    own, workers = _monitor(0.001, 100.0), _monitor(0.060, 100.0)
    s = _health(LoadLag(own, lambda: workers), loop_pct=10.0).status()
    assert s.overloaded and s.loop_lag_ms == pytest.approx(60.0)
    assert "a load worker's event-loop lag 60 ms" in s.reason, s.reason


def test_a_saturated_coordinator_with_no_lag_is_said_only_in_one_process():
    r = [Reading(1.0, OwnCpu(120.0, 95.0, 95.0), None, 0.0)]
    assert verdict(5.0, r)[0] == "client_cpu"
    assert verdict(5.0, r, in_workers=True) == ("", "")
    # a worker lagging at a full core: the busiest process of the tree explains it
    busy = [Reading(1.0, OwnCpu(150.0, 20.0, 98.0), None, 0.0)]
    cause, why = verdict(LAG_OVERLOAD_MS * 2, busy, in_workers=True)
    assert cause == "client_cpu" and "98 %" in why, why


def test_a_report_carries_the_wakeups_and_a_remote_one_is_placed_by_its_age():
    r = Report(kind="batch", seq=1, worker=0, loop_lags=[(10.0, 0.002), (10.05, 0.030)])
    assert r.shifted(5.0, 0.01).loop_lags == [(15.0, 0.002), (15.05, 0.030)]


@pytest.mark.timing  # the workers' loops on time (under 20 ms p99) while the coordinator's is held
@pytest.mark.server
async def test_a_held_coordinator_with_two_workers_reads_the_workers_loops(sim_factory):
    sim = sim_factory("healthy")
    e = Engine(EngineConfig(url=sim.url, concurrency=8, workload=WL, calibrate=False, workers=2))
    await e.start()
    try:
        pool = e.pool
        assert pool is not None
        assert await until(lambda: pool.loop_lag.lag_ms().n >= 20 and e.snapshot.loop_lag_ms is not None, 10.0)
        for _ in range(4):  # something hogs the coordinator's loop: 4 wake-ups 200 ms late
            time.sleep(0.2)
            await asyncio.sleep(0.1)
        await asyncio.sleep(2.5)  # the next checks read the window that holds the hold
        snap = e.snapshot
        assert not any(w.startswith(("loop stalled", "client overloaded")) for w in snap.warnings), snap.warnings
        assert not snap.client_overloaded
        assert snap.loop_lag_ms is not None and snap.loop_lag_ms < LAG_OVERLOAD_MS, snap.loop_lag_ms
        assert pool.loop_lag.lag_ms().n >= 40  # both workers' wake-ups came with their reports
    finally:
        await e.stop()
