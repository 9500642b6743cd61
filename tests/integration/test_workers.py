"""Worker processes (issue 17, `--workers N`): the load held by N processes, one session log
and one set of figures. Counts are checked against the sim's own record (every request it
received is one row, and no other), and every step figure against the same figure computed
in this process from the rows (the merged percentiles equal one process's)."""

from __future__ import annotations

import asyncio
import json
import os
import signal

import httpx
import polars as pl
import pytest

from redline.engine.core.config import EngineConfig
from redline.engine.core.engine import Engine
from redline.engine.load.worker_pool import split
from redline.engine.measure.histogram import Digest
from redline.engine.preset import parse_preset
from redline.engine.workload.prompts import WorkloadConfig

from helpers import run_preset_headless, until


def test_split():  # auto: tests/unit/engine/load/test_worker_count.py
    assert split(10, 4) == [3, 3, 2, 2] and sum(split(1023, 4)) == 1023
    assert split(1, 2) == [1, 0]


def _ms(v: float) -> float:
    return round(v * 1000.0, 3)


@pytest.mark.timing  # percentiles against one process's, on this machine's clock
def test_two_workers_merge_counts_exactly_and_percentiles_equal_one_process(sim_factory, tmp_path):
    sim = sim_factory("healthy")
    out = tmp_path / "s"
    preset = parse_preset(
        # each step closes at 2.5 s (max_hold_s): the test counts requests and recomputes
        # percentiles, it needs no steady window (which held each step STEADY_MIN_S = 4 s)
        {"ramp": {"concurrency": [4, 10], "warmup_s": 0.5, "hold_s": 2.0, "min_requests": 8, "max_hold_s": 2.5},
         "workload": {"input_len": 16, "output_len": 12}},
        "w.toml",
    )
    cfg = EngineConfig(url=sim.url, workers=2, concurrency=4, workload=WorkloadConfig(input_len=16, output_len=12),
                       use_nvml=False, live_steps=False, out_dir=out)
    res = run_preset_headless(cfg, preset)
    rows = pl.read_ndjson(out / "requests.ndjson")
    truth = httpx.get(sim.url + "/sim/requests", timeout=30).json()
    assert rows.height == len(truth)  # every request the sim received is one row, and no other
    assert rows["rid"].n_unique() == rows.height
    load = rows.filter(pl.col("phase") != "calibration")
    assert set(load["worker"].to_list()) == {0, 1}
    summary = json.loads((out / "summary.json").read_text())
    assert [w["worker"] for w in summary["workers"]] == [0, 1]
    assert sum(w["requests"] for w in summary["workers"]) == load.height
    assert [s.concurrency for s in res.steps] == [4, 10]
    for st in summary["steps"]:
        # what a step owns: every request it sent, however late it answered (its final record);
        # what the run's end cancelled counts as "at least its age"
        mine = rows.filter((pl.col("step") == st["index"]) & (pl.col("phase") == "measure"))
        ok = mine.filter(pl.col("status") == "ok")
        cancelled = mine.filter(pl.col("status") == "cancelled")
        assert st["final"] and st["completed"] == ok.height and st["requests_sent"] == mine.height >= st["completed"] > 0
        # its E2E: inside its window, the request's own; ended after the close, its age then
        # (step_e2e_ms, a bound); cancelled, "at least its age" (ended_ms)
        e2e = mine.filter(pl.col("status") != "failed")["step_e2e_ms"]
        for field, q, values in (
            ("median_ttft_ms", 0.5, ttft := mine.filter(pl.col("status") != "failed")["ttft_ms"].drop_nulls().to_list()
             + cancelled.filter(pl.col("ttft_ms").is_null())["ended_ms"].to_list()),
            ("p99_ttft_ms", 0.99, ttft),
            ("median_e2e_latency_ms", 0.5, e2e.to_list()), ("p99_e2e_latency_ms", 0.99, e2e.to_list()),
        ):
            d = Digest()
            for v in values:
                d.add(v)
            assert st[field] == pytest.approx(d.quantile(q), abs=0.002), (field, st[field], d.quantile(q))
    # the step's window tok/s: tokens the sim sent, counted by arrival into 10 ms buckets
    assert all(s["output_throughput"] > 0 and s["median_itl_ms"] is not None for s in summary["steps"])


def test_a_worker_that_dies_is_reported_and_the_others_carry_the_load(sim_factory):
    sim = sim_factory("healthy")

    async def go() -> None:
        e = Engine(EngineConfig(url=sim.url, workers=2, concurrency=8, workload=WorkloadConfig(input_len=16, output_len=12), use_nvml=False))
        await e.start()
        try:
            assert await until(lambda: e.in_flight == 8, 10) is not None
            os.kill(e.pool._procs[1].pid, signal.SIGKILL)
            assert await until(lambda: not e.pool.states[1].alive, 10) is not None
            assert any("worker 1 died" in w for w in e.snapshot.warnings) or any("worker 1 died" in l.text for l in e.events.recent(20))
            done = e.metrics.completed
            assert await until(lambda: e.in_flight == 8 and e.metrics.completed > done + 10, 15) is not None  # its share moved
            assert e.metrics.lag.count > 10 * e.metrics.completed  # every chunk's lag (sim_t), reported by the workers
            assert e.pool.states[0].share == 8
            e.set_concurrency(12)
            assert await until(lambda: e.in_flight == 12, 5) is not None  # orders reach the live worker at once
            await e.probe()  # abort + C=1: no worker refills its old share after the abort
            assert e.in_flight <= 1
            await asyncio.sleep(0.5)
            assert e.in_flight == 1 and e.pool.states[0].share == 1
        finally:
            await e.stop()
        assert not any(p.is_alive() for p in e.pool._procs)  # no load outlives the engine

    asyncio.run(go())


def test_a_live_workload_change_reaches_every_worker(sim_factory, tmp_path):
    from redline.engine.workload.change import WorkloadChange

    sim = sim_factory("healthy")
    out = tmp_path / "s"

    async def go() -> None:
        e = Engine(EngineConfig(url=sim.url, workers=2, concurrency=4, workload=WorkloadConfig(input_len=16, output_len=8),
                                use_nvml=False, out_dir=out))
        await e.start()
        try:
            await asyncio.sleep(1.5)
            await e.set_workload(WorkloadChange(output_len=5))
            await asyncio.sleep(2.0)
        finally:
            await e.stop()
        counted["live"] = e.metrics.output_tokens_total + e.metrics.failed_output_tokens_total
        counted["received"] = e.measurements.tokens_received

    counted: dict[str, int] = {}
    asyncio.run(go())
    every = pl.read_ndjson(out / "requests.ndjson")
    # every token a worker read reached the engine's figures (kept in batches, flushed before
    # each report and each request's end), those of the requests the stop cancelled too
    assert counted["live"] == counted["received"] == every["output_tokens"].sum() > 0
    rows = every.filter((pl.col("status") == "ok") & (pl.col("phase") != "calibration"))
    last = rows.sort("t_send").tail(8)
    assert set(last["output_tokens"].to_list()) == {5} and set(last["worker"].to_list()) == {0, 1}


@pytest.mark.timing  # percentiles against one process's, on this machine's clock
def test_one_process_is_worker_0_and_the_same_load_gives_the_same_figures_at_every_scale(sim_factory, tmp_path):
    """Every session has the same shape (summary.json `workers`: one process is worker 0),
    and the same workload on the sim gives the same step figures in one process and with 2
    workers (within noise: the sim's decode is the same, the client's split is not)."""
    preset = parse_preset(
        {"ramp": {"concurrency": [4], "warmup_s": 1.0, "hold_s": 4.0, "min_requests": 8, "max_hold_s": 8.0},
         "workload": {"input_len": 16, "output_len": 24}},
        "s.toml",
    )
    steps, summaries = {}, {}
    for n in (1, 2):
        sim = sim_factory("healthy")
        out = tmp_path / f"w{n}"
        cfg = EngineConfig(url=sim.url, workers=n, concurrency=4, workload=WorkloadConfig(input_len=16, output_len=24),
                           use_nvml=False, live_steps=False, out_dir=out)
        steps[n] = run_preset_headless(cfg, preset).steps[0]
        summaries[n] = json.loads((out / "summary.json").read_text())
        load = pl.read_ndjson(out / "requests.ndjson").filter(pl.col("phase") != "calibration")
        workers = summaries[n]["workers"]
        assert [w["worker"] for w in workers] == list(range(n)) and all(w["alive"] and w["node"] for w in workers)
        assert sum(w["requests"] for w in workers) == load.height
        # each request's send wait comes back from the process that sent it (First, Ended)
        answered = load.filter(pl.col("ttft_ms").is_not_null())
        assert answered.height and answered["send_wait_ms"].null_count() == 0
        assert (answered["send_wait_ms"] >= 0).all() and (answered["send_wait_ms"] < answered["ttft_ms"]).all()
        assert isinstance(summaries[n]["steps"][0]["client_send_shift_ms"], float)
    one, two = steps[1], steps[2]
    assert abs(two.output_throughput - one.output_throughput) <= 0.15 * one.output_throughput
    assert abs(two.median_ttft_ms - one.median_ttft_ms) <= max(0.25 * one.median_ttft_ms, 10.0)
    assert abs(two.median_itl_ms - one.median_itl_ms) <= max(0.15 * one.median_itl_ms, 5.0)


async def test_one_process_and_every_worker_hold_the_load_with_one_class(sim_factory):
    """The in-process load is the one-worker case of what a worker holds: both launch
    LoadHolder.one (its targets, its pick, one request's path), and a workload change reaches
    the holder either way."""
    from redline.engine.core.engine import Engine
    from redline.engine.core.load_start import worker_spec
    from redline.engine.load.holder import LoadHolder
    from redline.engine.load.worker import Worker
    from redline.engine.workload.change import WorkloadChange

    sim = sim_factory("healthy")
    e = Engine(EngineConfig(url=sim.url, concurrency=2, workload=WorkloadConfig(input_len=16, output_len=8), use_nvml=False))
    await e.start()
    try:
        assert type(e.load.holder) is LoadHolder and e.controller._launch == e.load.holder.one
        await e.set_workload(WorkloadChange(output_len=12))
        assert e.load.holder.workload.output_len == 12 and e.load.holder.source is e.load.source
        w = Worker(worker_spec(e), None)
        try:
            assert type(w.holder) is LoadHolder and w.ctl._launch == w.holder.one
            assert [t.sender.target.url for t in w.holder.targets] == [sim.url]
        finally:
            await w.close()
    finally:
        await e.stop("test")


# 4 running, 4 ms a token whatever the batch: a 2048-token answer takes ~8 s, far longer than
# the step is held, so every own request is out at the close and judged on its window there
LONG_SIM = ("--set", "max_running_requests=8", "--set", "ceiling_tok_s=100000", "--set", "decode_base_s=0.004", "--set", "decode_per_seq_s=0")
LONG = {"name": "long", "workload": {"api": "chat", "input_len": 16, "output_len": 2048},
        "ramp": {"concurrency": [4], "warmup_s": 0.3, "hold_s": 1.5, "min_requests": 1, "max_hold_s": 2.0},
        "slo": {"ttft_ms": 10000, "tpot_ms": 6, "itl_ms": 3}, "after": {"probe_s": 0}}


def test_outputs_that_outlive_their_step_are_judged_alike_with_workers(sim_factory, tmp_path):
    """Issue 42 case 8: with `--workers`, an output that outlives its step was never judged on
    TPOT or ITL (its chunk times stay in the worker: its window figures were its age only), so
    the same server read attainment 1.0 (TTFT alone judged) with workers and 0.0 without. The
    workers now take each request's window figures at the close: the same TPOT, the same
    verdicts. The SLO: TTFT within 10 s and TPOT within 6 ms (met), own ITL p99 within 3 ms
    (missed: a token every 4 ms)."""
    sim = sim_factory("healthy", extra_args=LONG_SIM)
    preset = parse_preset(LONG, "long.toml")
    steps = {}
    for n in (0, 2):
        cfg = EngineConfig(url=sim.url, workers=n, concurrency=4, workload=WorkloadConfig(input_len=16, output_len=2048),
                           slo=preset.slo, out_dir=tmp_path / f"w{n}", live_steps=False, use_nvml=False)
        (closing,) = run_preset_headless(cfg, preset).steps
        (final,) = json.loads((tmp_path / f"w{n}" / "summary.json").read_text())["steps"]
        steps[n] = (closing, final)
    for n, (closing, final) in steps.items():
        assert closing.requests_sent >= 4 and closing.completed == 0, (n, closing)  # every own request outlived the step
        assert closing.mean_tpot_ms is not None and 3.5 < closing.mean_tpot_ms < 6, (n, closing.mean_tpot_ms)
        assert closing.slo_attainment == 0.0 and final["slo_attainment"] == 0.0, (n, closing.slo_attainment, final["slo_attainment"])
    (one, _), (two, _) = steps[0], steps[2]
    assert two.mean_tpot_ms == pytest.approx(one.mean_tpot_ms, rel=0.2)
