"""Load shapes (issue 16): open-loop rate, multi-turn sessions, trace replay, live workload
change, each checked against the sim's own record of what it received and sent
(/sim/requests: arrival times, chunk times, prompt text and answers, on the same host clock).

- Arrivals: the schedule's gaps have the right mean and dispersion (Poisson: exponential
  gaps, counts with variance = mean; constant: no spread; gamma:K: CV 1/sqrt(K)), and the
  sim sees them.
- Coordinated omission: with the in-flight cap forcing sends to wait, TTFT counts from each
  request's intended send time: the sim's own TTFT plus the wait, per request.
- Multi-turn: each turn's prompt carries the previous turns' real answers.
- A trace replays at its recorded times / speed within 10 ms (sim arrival times).
- A live workload change is a step of its own in summary.json, and preset-from replays it.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import statistics
import time

import httpx
import polars as pl
import pytest

from redline.engine.core.config import EngineConfig
from redline.engine.core.engine import Engine
from redline.engine.load.controller import Controller
from redline.engine.preset import parse_preset, parse_toml
from redline.engine.report.preset_from import preset_from_session
from redline.engine.workload.arrivals import Arrival, ArrivalError, Schedule, check_rate, parse_arrival
from redline.engine.workload.change import WorkloadChange, parse_workload_change
from redline.engine.workload.prompts import WorkloadConfig, WorkloadError

from helpers import run_preset_headless, until


def _truth(url: str, **params: str) -> list[dict]:
    q = "&".join(f"{k}={v}" for k, v in params.items())
    return httpx.get(f"{url}/sim/requests?{q}", timeout=30).json()


def _cv(xs: list[float]) -> float:
    return statistics.pstdev(xs) / statistics.fmean(xs)


# -- arrivals --------------------------------------------------------------------------------

def test_poisson_arrivals_have_mean_1_over_r_and_poisson_dispersion():
    rate = 50.0
    s = Schedule(parse_arrival("poisson"), rate, t0=0.0, seed=7)
    times = [s.pop()[0] for _ in range(20_000)]
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert abs(statistics.fmean(gaps) - 1 / rate) < 0.03 / rate
    assert 0.96 < _cv(gaps) < 1.04  # exponential gaps: sd = mean
    # counts per second of a Poisson process: variance = mean (index of dispersion 1)
    counts = [0] * int(times[-1])
    for t in times:
        if int(t) < len(counts):
            counts[int(t)] += 1
    m, v = statistics.fmean(counts), statistics.pvariance(counts)
    assert abs(m - rate) < 0.05 * rate
    assert 0.8 < v / m < 1.2, (m, v)


def test_constant_and_gamma_arrivals():
    s = Schedule(parse_arrival("constant"), 8.0, t0=100.0)
    times = [s.pop()[0] for _ in range(100)]
    assert all(math.isclose(b - a, 0.125, abs_tol=1e-9) for a, b in zip(times, times[1:], strict=False))
    for k in (0.25, 4.0):
        g = Schedule(parse_arrival(f"gamma:{k:g}"), 10.0, t0=0.0, seed=3)
        ts = [g.pop()[0] for _ in range(20_000)]
        gaps = [b - a for a, b in zip(ts, ts[1:], strict=False)]
        assert abs(statistics.fmean(gaps) - 0.1) < 0.005
        assert abs(_cv(gaps) - 1 / math.sqrt(k)) < 0.1 / math.sqrt(k), (k, _cv(gaps))


@pytest.mark.parametrize(
    "text, needle",
    [("uniform", "arrival 'uniform': expected poisson, constant or gamma:K"), ("gamma:0", "gamma's shape K must be a number > 0"), ("gamma:x", "gamma:K")],
)
def test_unknown_arrival_is_one_line_naming_it(text, needle):
    with pytest.raises(ArrivalError) as e:
        parse_arrival(text)
    assert needle in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("bad", [0, -1, "0", "nan", "inf", "fast", True])
def test_rate_of_zero_or_below_is_refused(bad):
    with pytest.raises(ArrivalError) as e:
        check_rate(bad)
    assert repr(bad) in str(e.value) and "a number > 0" in str(e.value)


# -- the open loop's controller --------------------------------------------------------------

def test_open_loop_keeps_intended_times_holds_sends_at_the_cap_and_a_pause_owes_nothing():
    """Sends wait at the cap with their intended times (never re-anchored on the actual
    send); in flight never exceeds the cap; after a pause arrivals start again from the
    resume (the paused time is not owed as a burst)."""
    launched: list[tuple[float, float]] = []  # (intended, actual)
    peak = 0

    async def go() -> tuple[Controller, float, float, int]:
        ctl: Controller

        async def launch(t_intended, item):
            nonlocal peak
            launched.append((t_intended, time.perf_counter()))
            peak = max(peak, ctl.in_flight)
            await asyncio.sleep(0.1)

        ctl = Controller(launch, 1, max_concurrency=2, arrival=Arrival("constant"))
        ctl.start()
        ctl.set_rate(50.0)  # 50/s with 2 slots of 0.1 s: at most 20/s get through
        await asyncio.sleep(0.6)
        ctl.pause()
        t_pause = time.perf_counter()
        await asyncio.sleep(0.5)
        n_before = len(launched)
        ctl.set_rate(5.0)
        ctl.resume()
        t_resume = time.perf_counter()
        await asyncio.sleep(0.5)
        await ctl.stop()
        return ctl, t_pause, t_resume, n_before

    ctl, t_pause, t_resume, n_before = asyncio.run(go())
    assert peak <= 2
    assert ctl.delayed > 10  # the cap held sends back, and counted them
    before = launched[:n_before]
    intended = [t for t, _ in before]
    assert intended == sorted(intended)
    gaps = [b - a for a, b in zip(intended, intended[1:], strict=False)]
    assert all(abs(g - 0.02) < 1e-6 for g in gaps)  # the schedule, not the sends, sets them
    lags = [a - t for t, a in before]
    assert max(lags) > 0.2  # held at the cap, the wait is on the record
    after = launched[n_before:]
    assert after and all(t >= t_resume - 1e-3 for t, _ in after)
    assert ctl.dropped >= 0 and ctl.mode == "rate"


# -- against the sim -------------------------------------------------------------------------

def _cfg(url: str, **kw) -> EngineConfig:
    wl = kw.pop("workload", WorkloadConfig(input_len=16, output_len=8))
    return EngineConfig(url=url, workload=wl, use_nvml=False, **kw)


@pytest.mark.timing  # arrival gaps' CV at the sim
def test_the_sim_sees_poisson_arrivals_at_the_rate(sim_factory):
    sim = sim_factory("healthy")
    rate = 30.0

    async def go() -> float:
        e = Engine(_cfg(sim.url, rate=rate, arrival="poisson", seed=5))
        await e.start()
        t0 = time.time()
        await asyncio.sleep(6.0)
        await e.stop()
        return t0

    t0 = asyncio.run(go())
    arrivals = sorted(r["t_arrive"] for r in _truth(sim.url) if r["t_arrive"] >= t0)
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:], strict=False)]
    assert len(gaps) > 120
    assert abs(statistics.fmean(gaps) - 1 / rate) < 0.2 / rate
    assert 0.8 < _cv(gaps) < 1.2


@pytest.mark.timing  # the sim's TTFT + the wait, within 15 ms
def test_ttft_counts_from_the_intended_send_time_when_the_cap_holds_sends(sim_factory, tmp_path):
    """20 req/s against 2 slots of ~0.4 s: most sends wait. Each request's TTFT is the
    sim's own (arrival -> first chunk) plus its wait (intended -> actual send): the wait is
    in it, not hidden (coordinated omission)."""
    sim = sim_factory("healthy")
    preset = parse_preset(
        {"ramp": {"rate": [20], "arrival": "constant", "max_concurrency": 2, "warmup_s": 0.3, "hold_s": 4.0, "min_requests": 4, "max_hold_s": 6.0},
         "workload": {"input_len": 16, "output_len": 24}},
        "cap.toml",
    )
    out = tmp_path / "s"
    run_preset_headless(_cfg(sim.url, workload=WorkloadConfig(input_len=16, output_len=24), rate=20.0, arrival="constant", max_concurrency=2, live_steps=False, out_dir=out), preset)

    summary = json.loads((out / "summary.json").read_text())
    step = summary["steps"][0]
    assert step["mode"] == "rate" and step["request_rate"] == 20.0 and step["arrival"] == "constant"
    assert step["concurrency"] == 2
    assert step["request_throughput"] < 10  # achieved, well under the target
    assert step["dropped_or_delayed"] > 10
    assert step["schedule_lag_p50_ms"] > 200 and step["schedule_lag_p99_ms"] >= step["schedule_lag_p50_ms"]

    rows = pl.read_ndjson(out / "requests.ndjson").filter((pl.col("status") == "ok") & pl.col("schedule_lag_ms").is_not_null())
    truth = sorted((r for r in _truth(sim.url, chunks="1") if r["t_first"] is not None), key=lambda r: r["t_arrive"])
    arrive = [r["t_arrive"] for r in truth]
    checked = 0
    for row in rows.iter_rows(named=True):
        i = min(range(len(arrive)), key=lambda j: abs(arrive[j] - row["t_send"]))
        tr = truth[i]
        assert abs(tr["t_arrive"] - row["t_send"]) < 0.05  # the same request
        sim_ttft_ms = (tr["t_first"] - tr["t_arrive"]) * 1000.0
        expected = sim_ttft_ms + row["schedule_lag_ms"]
        assert abs(row["ttft_ms"] - expected) <= max(0.05 * expected, 15.0), (row, sim_ttft_ms)
        assert row["ttft_ms"] > sim_ttft_ms + 0.5 * row["schedule_lag_ms"]
        checked += 1
    assert checked >= 8
    assert rows["schedule_lag_ms"].median() > 200


def test_multi_turn_prompts_carry_the_real_answers(sim_factory, tmp_path):
    sim = sim_factory("healthy")
    turns = 3
    out = tmp_path / "s"

    async def go() -> Engine:
        e = Engine(_cfg(sim.url, api="chat", concurrency=2, workload=WorkloadConfig(input_len=20, output_len=12, turns=turns), out_dir=out))
        await e.start()
        await asyncio.sleep(3.2)  # a live step of at least MIN_LIVE_STEP_S gets its row
        await until(lambda: e.metrics.completed >= 3 * turns + 2, 30)
        await e.stop()
        return e

    e = asyncio.run(go())
    truth = [r for r in _truth(sim.url, text="1") if r.get("answer") and r["tokens"] == 12]  # the sessions' turns
    # every answer of a turn before the last is in a later prompt of its session
    followed = 0
    for r in truth:
        later = [x for x in truth if x["index"] > r["index"] and r["answer"] in (x.get("prompt_tail") or "")]
        if later:
            followed += 1
            nxt = min(later, key=lambda x: x["index"])
            assert nxt["prompt_tokens"] > r["prompt_tokens"] + r["tokens"]  # history + answer + the new turn
    rows = pl.read_ndjson(out / "requests.ndjson").filter(pl.col("phase") != "calibration")
    sessions_done = rows.filter((pl.col("turn") == turns) & (pl.col("status") == "ok")).height
    assert followed >= sessions_done * (turns - 1) >= 2
    assert set(rows["turn"].to_list()) >= {1, 2, 3}
    by_turn = {t: rows.filter(pl.col("turn") == t)["input_tokens"].mean() for t in (1, 2, 3)}
    assert by_turn[1] < by_turn[2] < by_turn[3]  # later turns send longer prompts
    by_turn_ttft = e.steps[-1].ttft_by_turn
    assert [t["turn"] for t in by_turn_ttft][:2] == [1, 2] and by_turn_ttft[0]["requests"] >= 2


@pytest.mark.timing  # sends' wall-clock times against the trace's rows
def test_a_trace_replays_at_its_recorded_times_over_speed(sim_factory, tmp_path):
    sim = sim_factory("healthy")
    rng = random.Random(11)
    t, rows = 0.0, []
    for i in range(30):
        rows.append({"timestamp": round(t * 1000), "input_length": 40, "output_length": 4, "hash_ids": [i % 3]})
        t += rng.expovariate(15.0)
    trace = tmp_path / "trace.jsonl"
    trace.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    speed = 2.0
    preset = parse_preset({"workload": {"trace": str(trace)}, "ramp": {"speed": [speed]}}, "t.toml")
    out = tmp_path / "s"
    t_start = time.time()
    res = run_preset_headless(_cfg(sim.url, workload=WorkloadConfig(trace=str(trace)), rate=speed, live_steps=False, out_dir=out), preset)
    assert res.steps and res.steps[0].mode == "trace" and res.steps[0].trace_speed == speed
    assert res.steps[0].completed == len(rows)
    arrivals = sorted(r["t_arrive"] for r in _truth(sim.url) if r["t_arrive"] >= t_start)[-len(rows):]
    want = [r["timestamp"] / 1000.0 / speed for r in rows]
    offset = statistics.median(a - w for a, w in zip(arrivals, want, strict=False))  # when the replay started
    errs = [a - offset - w for a, w in zip(arrivals, want, strict=False)]
    # at the sim's own arrival stamp (its handler's start: the sim's loop on the same 2 cores,
    # and a row that needs a new connection pays its handshake): all rows but one within 10 ms
    # of the trace's time, every row within 25 ms (CI's timing lane saw one row at 11.5 and
    # one at 11.9 ms, the others within ~1 ms)
    late = sorted(abs(x) for x in errs)
    assert late[-2] < 0.010 and late[-1] < 0.025, [round(x * 1000, 2) for x in errs]


# -- live workload change --------------------------------------------------------------------

def test_workload_change_parsing_and_one_line_errors():
    assert parse_workload_change("out=512 in=1024") == WorkloadChange(input_len=1024, output_len=512)
    wl = WorkloadChange(prefix_ratio=0.75, input_len=400).apply(WorkloadConfig())
    assert wl.dataset == "prefix:groups=8,prefix_len=300,suffix_len=100" and wl.input_len == 400
    assert WorkloadChange(prefix_ratio=0).apply(wl).dataset == "random"
    for bad, needle in (("out=0", "output_len 0"), ("speed=3", "'speed=3'"), ("prefix=1.5", "prefix_ratio 1.5"), ("dataset=foo", "dataset 'foo'")):
        with pytest.raises(WorkloadError) as e:
            parse_workload_change(bad).apply(WorkloadConfig())
        assert needle in str(e.value) and "\n" not in str(e.value)


@pytest.mark.slow
def test_a_live_workload_change_is_a_step_in_summary_and_preset_from_replays_it(sim_factory, tmp_path):
    sim = sim_factory("healthy")
    out = tmp_path / "s"

    async def go() -> None:
        e = Engine(_cfg(sim.url, concurrency=2, workload=WorkloadConfig(input_len=16, output_len=8), out_dir=out))
        await e.start()
        await asyncio.sleep(3.5)
        await e.set_workload(WorkloadChange(output_len=5))
        await asyncio.sleep(3.5)
        await e.stop()

    asyncio.run(go())
    steps = json.loads((out / "summary.json").read_text())["steps"]
    assert [s["workload"]["output_len"] for s in steps] == [8, 5]
    rows = pl.read_ndjson(out / "requests.ndjson").filter((pl.col("status") == "ok") & (pl.col("phase") == "live"))
    assert set(rows.filter(pl.col("step") == steps[1]["index"])["output_tokens"].to_list()) == {5}

    replay = preset_from_session(out, "again")
    assert "workloads = [" in replay.toml and "output_len = 5" in replay.toml
    preset = parse_toml(replay.toml, "again.toml")
    assert [None if w is None else w.get("output_len") for w in preset.ramp.workloads] == [None, 5]
    out2 = tmp_path / "s2"
    res = run_preset_headless(_cfg(sim.url, concurrency=2, workload=WorkloadConfig(input_len=16, output_len=8), live_steps=False, out_dir=out2), preset)
    assert [s.workload["output_len"] for s in res.steps] == [8, 5]


# -- a search over rate -----------------------------------------------------------------------

def test_as_search_of_a_rate_ramp_searches_rates():
    from redline.engine.preset import as_search

    p = parse_preset({"ramp": {"rate": [2, 4, 8], "hold_s": 3}}, "r.toml")
    sp = as_search(p, 1024).ramp.search
    assert sp is not None and sp.rate_unit == pytest.approx(32 / 1000)  # up to 4 x the largest rate
    assert sp.rate_of(sp.start) == pytest.approx(2.0, rel=0.02) and sp.rate_of(sp.max) == pytest.approx(32.0)


@pytest.mark.slow
def test_a_knee_search_over_rate_measures_rate_steps(sim_factory, tmp_path):
    sim = sim_factory("healthy")
    preset = parse_preset(
        {"ramp": {"mode": "search", "over": "rate", "start": 2, "max": 8, "arrival": "constant",
                  "warmup_s": 0.3, "hold_s": 1.5, "min_requests": 3, "max_hold_s": 3},
         "workload": {"input_len": 16, "output_len": 8}},
        "s.toml",
    )
    out = tmp_path / "s"
    res = run_preset_headless(_cfg(sim.url, workload=WorkloadConfig(input_len=16, output_len=8), rate=2.0, arrival="constant", live_steps=False, out_dir=out), preset)
    assert res.steps and all(s.mode == "rate" for s in res.steps)
    # (an unsteady point is measured once more before its stall is believed)
    assert list(dict.fromkeys(s.request_rate for s in res.steps))[:3] == [2.0, 4.0, 8.0]
    for s in res.steps:  # an open loop the server keeps up with: achieved = target
        assert s.request_throughput == pytest.approx(s.request_rate, rel=0.3)
    search = json.loads((out / "summary.json").read_text())["search"]
    assert list(dict.fromkeys(search["rates"]))[:3] == [2.0, 4.0, 8.0]
    # the answer over rates, named in req/s; points held under 4 s are never steady, and
    # unsteady points decide no knee (engine/rules/knee.py): then the reason names each
    reason = search["knee_reason"]
    assert search["knee_rate"] in search["rates"] or (search["knee_rate"] is None and (
        reason.startswith("still rising at max") or "req/s not steady" in reason)), reason
