"""Telemetry wired into the engine: the cap detector, GPU power, the client's own health."""

from __future__ import annotations

import asyncio
import time

import pytest

from redline.engine.core.config import EngineConfig
from redline.engine.core.engine import Engine
from redline.engine.telemetry.cap import SUSTAIN_S
from redline.engine.workload.prompts import WorkloadConfig

from helpers import sim_state_async as sim_state, until

WL = WorkloadConfig(input_len=16, output_len=64)


async def started(url: str, c: int, **kw) -> Engine:
    kw.setdefault("calibrate", False)  # prompt lengths do not matter here
    e = Engine(EngineConfig(url=url, concurrency=c, workload=WL, **kw))
    await e.start()
    return e


def cap_warnings(e: Engine) -> list[str]:
    return [w for w in e.snapshot.warnings if w.startswith("server cap")]


async def test_cap_detector_fires_on_pp_capped_within_10s(sim_factory, tmp_path):
    """SGLang's pp as the sim schedules it (engine/sim/pipeline.py): at C=96, 64 run as 8
    micro-batches of 8 and 32 queue; each pp rank's running gauge reads one micro-batch (8), and
    the warning names micro-batches, not a running cap of 8."""
    sim = sim_factory("pp-capped")
    e = await started(sim.url, 4, out_dir=tmp_path / "s")
    try:
        # below the cap the server runs everything (staying silent then: the healthy test below);
        # 4 requests sent a moment apart join micro-batches of their own: the gauge reads one, as
        # the scheduler wrote it at its last decode log (every 40 decode batches: 4 a round here)
        assert await until(lambda: _truth_runs(sim.url, 4), 5.0)
        assert await until(lambda: e.snapshot.server is not None and e.snapshot.server.running is not None
                           and 1 <= e.snapshot.server.running <= 4, 12.0), e.snapshot.server
        assert cap_warnings(e) == []
        e.set_concurrency(96)
        took = await until(lambda: cap_warnings(e), 10.0, interval=0.1)
        assert took is not None, "no cap warning within 10 s of C passing the cap"
        w = cap_warnings(e)[0]
        assert "server runs 8 a micro-batch" in w and "micro-batches of 8 from max_running_requests 64 / pp 8" in w, w
        truth = await sim_state(sim.url)
        assert (truth["running"], truth["micro_batches"]) == (64, [8] * 8)  # the gauge is one of them
        snap = e.snapshot
        assert snap.server is not None and snap.server.running == 8
        assert len(snap.gpus) == 8 and all(g.power_w and g.power_limit_w for g in snap.gpus)
        assert max(g.power_pct for g in snap.gpus) < 60  # the story: GPUs idle at low power
        # a warning clears when its condition ends (issue 42 case 20: it stayed up through the
        # probe, server running 2 and queue 0, for the warnings' 10 s hold)
        e.set_concurrency(4)
        assert await until(lambda: not cap_warnings(e), 4.0, interval=0.1), e.snapshot.warnings
    finally:
        await e.stop()
    events = (tmp_path / "s" / "events.ndjson").read_text()
    assert "server cap" in events
    rows = [r for r in e.ticker.history if r.get("server_running") is not None]
    assert rows and rows[-1]["gpu7_power_w"] > 0
    # the rows at C=96 carry the server's queue (the last row may be the stop's, after the
    # load was cancelled and the queue emptied)
    assert any(r["server_queued"] > 0 for r in rows), [r["server_queued"] for r in rows]
    step = next(s for s in e.steps if s.concurrency == 96)
    assert step.server_max_running == 8
    assert step.mean_power_w and step.tokens_per_joule and step.joules_per_token


async def _truth_runs(url: str, n: int) -> bool:
    return (await sim_state(url))["running"] == n


async def test_cap_detector_silent_on_healthy_below_its_cap(sim_factory):
    """Raising C from 24 to 48 queues requests in the server for a moment: not a cap."""
    sim = sim_factory("healthy")
    e = await started(sim.url, 24)
    try:
        assert await until(lambda: e.snapshot.server is not None and e.snapshot.server.running == 24, 5.0)
        e.set_concurrency(48)
        assert await until(lambda: e.snapshot.server is not None and e.snapshot.server.running == 48, 5.0)
        # a false episode would have begun at the change and fired SUSTAIN_S later: watch past that
        await asyncio.sleep(SUSTAIN_S + 1.0)
        assert cap_warnings(e) == []
        assert not [l for l in e.snapshot.log if l.text.startswith("server cap")]
        assert e.snapshot.server.running == 48
    finally:
        await e.stop()


@pytest.mark.timing  # the loop's own lag, read on this machine
async def test_client_lag_warning_when_the_loop_stalls(sim_factory):
    sim = sim_factory("healthy")
    e = await started(sim.url, 4)
    try:
        assert await until(lambda: e.snapshot.loop_lag_ms is not None, 5.0)
        assert not e.snapshot.client_overloaded
        for _ in range(4):  # something hogs redline's own loop: 4 wake-ups 200 ms late
            time.sleep(0.2)
            await asyncio.sleep(0.1)
        # the warning comes with the next once-a-second check
        assert await until(lambda: any(w.startswith("loop stalled: ") for w in e.snapshot.warnings), 3.0), e.snapshot.warnings
        snap = e.snapshot
        assert snap.client_overloaded
        assert any(l.kind == "warning" and l.text.startswith("loop stalled: ") for l in snap.log)
        assert snap.loop_lag_ms and snap.loop_lag_ms > 20
    finally:
        await e.stop()
