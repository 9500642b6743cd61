"""A load `--workers auto` started in the engine's own process moves to worker processes when
the operator raises C past what one process holds (engine/core/load_move.py): the TUI's flow,
C=8 at start, then C=24 where (by a fixed live measure) one process holds 10. The sim's own
record of every request is the ground truth: no more than C at once in the hand-over, every
request one row, none lost."""

from __future__ import annotations

import asyncio
import json

import httpx
import polars as pl
import pytest

from redline.engine.core import replan
from redline.engine.core.config import EngineConfig
from redline.engine.core.engine import Engine
from redline.engine.load.worker_count import CROWDED_KEY, Plan
from redline.engine.workload.prompts import WorkloadConfig

from helpers import until

pytestmark = pytest.mark.server
HOLDS = 10  # the streams one process holds, by the fixed measure


@pytest.fixture
def fixed_measure(monkeypatch):
    """The live plan as a machine where one process holds HOLDS streams (at most 3 processes):
    any load is judged, however small (the test does not ride on this machine's speed)."""
    monkeypatch.setattr(replan, "live_plan", lambda streams, n, cpu, tok_s, interval, kernel=True, others=None:
                        Plan(min(-(-streams // HOLDS), 3), -(-streams // HOLDS), HOLDS, f"--workers auto: {streams} streams, {HOLDS} each"))
    monkeypatch.setattr(replan, "MIN_TOK_S", 1.0)
    monkeypatch.setattr(replan, "PESSIMISTIC_TOKEN_S", 1.0)


def _engine(url: str, out, output_len: int = 40, **kw) -> Engine:
    """`--workers auto` at C=8, where one process holds it (auto's start: workers=1)."""
    cfg = {"workers": 1, "workers_auto": True, "concurrency": 8, "use_nvml": False, "out_dir": out, **kw}
    return Engine(EngineConfig(url=url, workload=WorkloadConfig(input_len=16, output_len=output_len), **cfg))


async def _raise_until_draining(e: Engine) -> None:
    """C=8 in this process raised to 24: once the pool holds the load, all 24 of this process's
    requests (1000-token outputs: 20 s each) still drain here."""
    assert await until(lambda: e.in_flight == 8, 10) is not None
    e.set_concurrency(24)
    assert await until(lambda: e.load.draining is not None, 30) is not None
    assert e.load.draining_in_flight == 24


def _most_at_once(truth: list[dict]) -> int:
    """The most requests the sim held at once, from its own arrival and end times."""
    edges = sorted([(r["t_arrive"], 1) for r in truth] + [(r["t_end"], -1) for r in truth if r["t_end"] is not None],
                   key=lambda x: (x[0], x[1]))  # an end before an arrival at the same instant
    most = now = 0
    for _, d in edges:
        now += d
        most = max(most, now)
    return most


def test_raised_past_one_process_the_load_moves_to_workers_with_no_more_than_c_in_flight(sim_factory, tmp_path, fixed_measure):
    sim = sim_factory("healthy")
    out = tmp_path / "s"
    seen: list[int] = []

    async def go() -> Engine:
        e = _engine(sim.url, out)
        await e.start()
        try:
            assert await until(lambda: e.in_flight == 8, 10) is not None
            await asyncio.sleep(1.5)
            assert e.pool is None  # 8 in flight: this process holds it
            e.set_concurrency(24)

            def moved() -> bool:
                seen.append(e.in_flight)
                return e.pool is not None and e.load.draining is None and e.in_flight == 24
            assert await until(moved, 30) is not None, ([ln.text for ln in e.events.recent(20)], e.in_flight, e.load.draining_in_flight, e.pool and e.pool.in_flight)
            assert e.pool.n == 3 and [s.share for s in e.pool.states] == [8, 8, 8]
            assert e.load.moved is not None and not e.events.active(CROWDED_KEY)
            texts = [ln.text for ln in e.events.recent(50)]
            assert any(t.startswith("--workers auto: the load moves to 3 worker processes: 24 streams, 10 each") for t in texts), texts
            assert any(t.startswith("--workers auto: the load is in 3 worker processes now") for t in texts), texts
            assert await until(lambda: all(s.requests > 2 for s in e.pool.states), 15) is not None
            e.set_concurrency(12)  # steered as any pool: 4 each
            assert await until(lambda: [s.share for s in e.pool.states] == [4, 4, 4], 5) is not None
        finally:
            await e.stop()
        assert not any(p.is_alive() for p in e.pool._procs)  # no load outlives the stop
        return e

    asyncio.run(go())
    assert max(seen) <= 24
    truth = httpx.get(sim.url + "/sim/requests", timeout=30).json()
    assert _most_at_once(truth) <= 24  # the sim never held more than C: the old load drained as the pool filled
    rows = pl.read_ndjson(out / "requests.ndjson")
    assert rows.height == len(truth) and rows["rid"].n_unique() == rows.height  # every request one row, none lost
    load = rows.filter(pl.col("phase") != "calibration")
    assert set(load["worker"].to_list()) == {0, 1, 2, 3}  # this process, then the pool's 1-3
    here = load.filter(pl.col("worker") == 0)
    assert here.height >= 24 and (here["status"] == "ok").all()  # what drained here finished normally
    workers = json.loads((out / "summary.json").read_text())["workers"]
    assert [w["worker"] for w in workers] == [0, 1, 2, 3]
    w0 = workers[0]
    assert not w0["alive"] and w0["share"] == 0 and w0["held_until_s"] > 1.5
    assert w0["requests"] == here.height  # its own requests, none of the pool's
    assert sum(w["requests"] for w in workers[1:]) == load.height - here.height


def test_a_probe_during_the_hand_over_cancels_what_drains_here_too(sim_factory, tmp_path, fixed_measure):
    """Long outputs (the drain lasts seconds): the abort + C=1 probe pressed while this
    process's requests drain cancels them as well as the pool's; one request in flight then."""
    sim = sim_factory("healthy")
    out = tmp_path / "s"

    async def go() -> None:
        e = _engine(sim.url, out, output_len=1000)
        await e.start()
        try:
            await _raise_until_draining(e)
            n = await e.probe()
            assert n >= 1 and e.load.draining_in_flight == 0
            assert await until(lambda: e.load.draining is None and e.in_flight == 1, 10) is not None
            assert e.controller is e.pool and e.controller.probing
        finally:
            await e.stop()

    asyncio.run(go())
    rows = pl.read_ndjson(out / "requests.ndjson")
    here = rows.filter((pl.col("phase") != "calibration") & (pl.col("worker") == 0))
    assert (here["status"] == "cancelled").sum() >= 1


@pytest.mark.parametrize("why", ["workers given", "open loop"])
def test_a_load_that_cannot_move_stays_and_says_why(sim_factory, tmp_path, fixed_measure, why):
    """`--workers 1` given, or an open loop (a rate): the load stays in this process and the
    warning `crowded` names why."""
    sim = sim_factory("healthy")
    kw = {"workers_auto": why != "workers given"}
    if why == "open loop":
        kw |= {"rate": 200.0, "max_concurrency": 24}

    async def go() -> str:
        e = _engine(sim.url, tmp_path / "s", output_len=200, **kw)
        await e.start()
        try:
            if why == "workers given":
                e.set_concurrency(24)
            assert await until(lambda: e.events.active(CROWDED_KEY), 20) is not None
            assert e.pool is None and e.load.draining is None
            return next(ln.text for ln in reversed(e.events.recent(50)) if "streams in one process" in ln.text)
        finally:
            await e.stop()

    text = asyncio.run(go())
    assert ("--workers 1 was given" if why == "workers given" else "an open loop (a rate or a trace) stays") in text, text


def test_a_stop_during_the_hand_over_leaves_no_load_and_loses_no_row(sim_factory, tmp_path, fixed_measure):
    """The session ends (q, a signal: the engine's stop) while this process's requests drain:
    they are cancelled with the pool's, no worker process is left, and every request the sim
    received is one row."""
    sim = sim_factory("healthy")
    out = tmp_path / "s"

    async def go() -> Engine:
        e = _engine(sim.url, out, output_len=1000)
        await e.start()
        try:
            await _raise_until_draining(e)
        finally:
            await e.stop()
        return e

    e = asyncio.run(go())
    assert e.pool is not None and not any(p.is_alive() for p in e.pool._procs)
    assert e.load.draining_in_flight == 0
    truth = httpx.get(sim.url + "/sim/requests", timeout=30).json()
    rows = pl.read_ndjson(out / "requests.ndjson")
    assert rows.height == len(truth) and rows["rid"].n_unique() == rows.height
    load = rows.filter(pl.col("phase") != "calibration")
    assert (load.filter(pl.col("worker") == 0)["status"] == "cancelled").sum() == 24  # the stop cut what drained here
    w0 = json.loads((out / "summary.json").read_text())["workers"][0]
    assert w0["worker"] == 0 and not w0["alive"] and w0["requests"] == 24  # kept, though the stop cut the drain


def test_a_preset_started_on_a_small_load_moves_it_first_when_its_steps_need_workers(sim_factory, tmp_path, monkeypatch):
    """The TUI's `p` on a session started at C=8 (auto sized one process for 8): a staircase to
    C=24, where (by a fixed start measure) 3 processes are needed, moves the load before its
    first step; its steps run on the pool, each request one row."""
    from redline.engine.core import load_move
    from redline.engine.preset import parse_toml
    from redline.engine.run.preset_runner import COMMANDS, start_preset

    peaks: list[int] = []
    monkeypatch.setattr(load_move, "auto_plan", lambda peak, kernel=True: peaks.append(peak) or Plan(3, 3, HOLDS, f"--workers auto: 3 worker processes for {peak} streams"))
    preset = parse_toml('name = "p"\n[workload]\ninput_len = 16\noutput_len = 12\n'
                        '[ramp]\nconcurrency = [12, 24]\nwarmup_s = 0.3\nhold_s = 1\nmin_requests = 2\nmax_hold_s = 3\n'
                        '[after]\nprobe_s = 0\n', "p.toml")
    sim = sim_factory("healthy")
    out = tmp_path / "s"

    async def go() -> Engine:
        cfg = EngineConfig(url=sim.url, workers=1, workers_auto=True, workers_peak=8, concurrency=8, use_nvml=False, out_dir=out,
                           workload=WorkloadConfig(input_len=16, output_len=12))
        e = Engine(cfg, COMMANDS)
        await e.start()
        try:
            assert await until(lambda: e.in_flight == 8, 10) is not None
            start_preset(e, preset)
            assert await until(lambda: not e.steering.driving, 60) is not None
            assert e.pool is not None and e.pool.n == 3 and [s.concurrency for s in e.steps][-2:] == [12, 24]
        finally:
            await e.stop()
        return e

    e = asyncio.run(go())
    assert peaks == [24]
    assert not any(p.is_alive() for p in e.pool._procs)
    rows = pl.read_ndjson(out / "requests.ndjson")
    truth = httpx.get(sim.url + "/sim/requests", timeout=30).json()
    assert rows.height == len(truth) and rows["rid"].n_unique() == rows.height
    measured = rows.filter(pl.col("phase") == "measure")
    assert measured.height > 0 and set(measured["worker"].to_list()) <= {1, 2, 3}  # the steps' own requests: the pool's
