"""A trace replay held by worker processes (`--workers N`, issue 22): the coordinator owns the
replay (speed, pauses, progress) and feeds each worker the rows due soon, each with its
intended time; the worker's pool sends it then. Checked against the sim's own arrival times."""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import time

import httpx
import polars as pl
import pytest

from redline.engine.core.config import EngineConfig
from redline.engine.core.engine import Engine
from redline.engine.load.trace_replay import FedSchedule
from redline.engine.preset import parse_preset
from redline.engine.workload.prompts import WorkloadConfig
from redline.engine.workload.trace import TraceRow

from helpers import run_preset_headless, until


def _trace(tmp_path, n: int, rate: float, seed: int = 11) -> tuple[str, list[dict]]:
    rng = random.Random(seed)
    t, rows = 0.0, []
    for i in range(n):
        rows.append({"timestamp": round(t * 1000), "input_length": 40, "output_length": 4, "hash_ids": [i % 3]})
        t += rng.expovariate(rate)
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return str(path), rows


def _arrivals(url: str, since: float) -> list[float]:
    truth = httpx.get(f"{url}/sim/requests", timeout=30).json()
    return sorted(r["t_arrive"] for r in truth if r["t_arrive"] >= since)


def test_fed_rows_move_with_the_replay_and_a_new_replay_drops_the_old_rows():
    row = TraceRow(0.0, 40, 4, (1,))
    f = FedSchedule()
    f.start(1)
    f.feed(1, [(10.0, row), (10.5, row)])
    f.feed(0, [(11.0, row)])  # an older replay's rows arrive late: not this replay's
    assert f.t_next == 10.0 and len(f.q) == 2
    f.shift_to(2.0)  # a pause moved the rest of the trace 2 s later
    assert [t for t, _ in f.q] == [12.0, 12.5]
    f.feed(1, [(13.0, row)])  # fed after the move: already on the new times
    f.shift_to(2.0)
    assert [t for t, _ in f.q] == [12.0, 12.5, 13.0]
    assert f.pop()[0] == 12.0 and f.popped == 1
    f.start(2)
    assert f.t_next is None and f.popped == 0 and f.shift == 0.0


@pytest.mark.timing  # rows within 25 ms
def test_a_trace_over_two_workers_sends_every_row_once_at_its_time(sim_factory, tmp_path):
    sim = sim_factory("healthy")
    path, rows = _trace(tmp_path, 40, 15.0)
    speed = 2.0
    preset = parse_preset({"workload": {"trace": path}, "ramp": {"speed": [speed]}}, "t.toml")
    out = tmp_path / "s"
    t_start = time.time()
    cfg = EngineConfig(url=sim.url, workload=WorkloadConfig(trace=path), rate=speed, workers=2,
                       use_nvml=False, live_steps=False, out_dir=out)
    res = run_preset_headless(cfg, preset)
    assert res.steps and res.steps[0].mode == "trace" and res.steps[0].completed == len(rows)
    arrivals = _arrivals(sim.url, t_start)[-len(rows):]
    want = [r["timestamp"] / 1000.0 / speed for r in rows]
    offset = statistics.median(a - w for a, w in zip(arrivals, want, strict=False))
    errs = [a - offset - w for a, w in zip(arrivals, want, strict=False)]
    assert max(abs(x) for x in errs) < 0.025, [round(x * 1000, 2) for x in errs]
    summary = json.loads((out / "summary.json").read_text())
    assert [w["worker"] for w in summary["workers"]] == [0, 1]
    load = pl.read_ndjson(out / "requests.ndjson").filter(pl.col("phase") != "calibration")
    assert load.height == len(rows) and set(load["worker"].to_list()) == {0, 1}
    assert load["rid"].n_unique() == load.height
    # each row's intended time (its send less its schedule lag) is its trace time
    intended = sorted((load["t_send"] - load["schedule_lag_ms"].fill_null(0.0) / 1000.0).to_list())
    gaps = [b - a for a, b in zip(intended, intended[1:], strict=False)]
    want_gaps = [b - a for a, b in zip(want, want[1:], strict=False)]
    assert max(abs(g - w) for g, w in zip(gaps, want_gaps, strict=False)) < 0.002


@pytest.mark.timing  # rows sent at their times around a wall-clock pause
def test_a_paused_trace_over_workers_resumes_where_it_was_and_sends_each_row_once(sim_factory, tmp_path):
    sim = sim_factory("healthy")
    path, rows = _trace(tmp_path, 40, 20.0, seed=3)
    pause_s = 1.0

    async def go() -> tuple[float, float]:
        e = Engine(EngineConfig(url=sim.url, workload=WorkloadConfig(trace=path), rate=1.0, workers=2,
                                use_nvml=False, live_steps=False, start_paused=True))
        await e.start()
        try:
            e.resume()
            e.start_trace(1.0)
            await asyncio.sleep(0.8)
            e.pause()
            t_pause = time.time()
            await asyncio.sleep(pause_s)
            e.resume()
            await until(lambda: e.controller.trace_done and e.in_flight == 0, timeout=20)
            return t_pause, time.time()
        finally:
            await e.stop("test")

    t_start = time.time()
    t_pause, _ = asyncio.run(go())
    truth = [r for r in httpx.get(f"{sim.url}/sim/requests", timeout=30).json() if r["t_arrive"] >= t_start]
    arrivals = sorted(r["t_arrive"] for r in truth)[-len(rows):]
    assert len(arrivals) == len(rows)  # every row went, once
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:], strict=False)]
    want_gaps = [(b["timestamp"] - a["timestamp"]) / 1000.0 for a, b in zip(rows, rows[1:], strict=False)]
    # one gap holds the pause; every other keeps the trace's spacing
    big = max(range(len(gaps)), key=lambda i: gaps[i] - want_gaps[i])
    assert gaps[big] - want_gaps[big] > pause_s * 0.8
    assert arrivals[big] <= t_pause + 0.05 < arrivals[big + 1]
    rest = [abs(g - w) for i, (g, w) in enumerate(zip(gaps, want_gaps, strict=False)) if i != big]
    assert max(rest) < 0.025, f"pause at gap {big}; gap errors ms: {[round((g - w) * 1000, 1) for g, w in zip(gaps, want_gaps, strict=False)]}"
