"""Truth at the breaking point (docs/numbers.md#requests-that-outlive-their-step-censoring): a step's figures
count every request it sent, the ones still waiting at its close included, checked against
the sim's own clock (/sim/requests: when each request arrived, answered, ended).

A server with 4 slots and 200-token answers (~1 s each at the cap: the sim at half its time
scale): at C=32 the step's own requests queue behind 28 others (~7 s) for longer than the step
is held (max_hold_s 5), so none of them has a first token when it closes. Before censoring, such a step reported TTFT `None` and a p99 rule passed
it; now its TTFT is a lower bound ("≥"), which breaks the rule, and once the requests finish
(a drain step after it) the record holds their true TTFT; their E2E stays the bound of their
age at the close (what they did after it ran under the drain's load).
"""

from __future__ import annotations

import json
import math

import httpx
import polars as pl
import pytest

from redline.engine.core.config import EngineConfig
from redline.engine.measure.step_result import StepResult
from redline.engine.preset import parse_preset
from redline.engine.sim.truth import window_truth
from redline.engine.workload.prompts import WorkloadConfig

from helpers import finish, run_preset_headless, start_headless, steady_in

# 4 running at a time, one decode step 10 ms whatever the batch, at half time scale (the
# shape of time, not its length): a 200-token answer takes ~1 s
SLOTS4 = ("--set", "max_running_requests=4", "--set", "ceiling_tok_s=100000", "--set", "decode_base_s=0.01", "--set", "decode_per_seq_s=0",
          "--set", "time_scale=0.5")
OVERLOAD = {"workload": {"api": "chat", "input_len": 16, "output_len": 200},
            "ramp": {"concurrency": [4, 32], "warmup_s": 0.5, "hold_s": 2, "min_requests": 4, "max_hold_s": 5},
            "after": {"probe_s": 0}}


def _summary_steps(out) -> list[StepResult]:
    return [StepResult.from_dict(d) for d in json.loads((out / "summary.json").read_text())["steps"]]


def _within(measured: float | None, truth: float | None, rel: float) -> bool:
    assert measured is not None and truth is not None, (measured, truth)
    return abs(measured - truth) <= rel * truth


def test_overload_step_breaks_the_p99_ttft_rule_with_a_bound(sim_factory, tmp_path):
    """[4, 32] on 4 slots, max_hold_s 2.5, p99_ttft_ms 750 (every time half the module's: the
    sim at a quarter time scale): the C=32 step closes with its own requests all still
    queued (~3.5 s behind the others); its TTFT is a bound above 0.75 s and the rule fires."""
    sim = sim_factory("healthy", extra_args=(*SLOTS4[:-2], "--set", "time_scale=0.25"))
    preset = tmp_path / "overload.toml"
    preset.write_text(
        '[workload]\napi = "chat"\ninput_len = 16\noutput_len = 200\n'
        "[ramp]\nconcurrency = [4, 32]\nwarmup_s = 0.25\nhold_s = 1\nmin_requests = 4\nmax_hold_s = 2.5\n"
        "[stop]\np99_ttft_ms = 750\n[after]\nprobe_s = 0\n"
    )
    rc, out, err = finish(start_headless(sim.url, preset, tmp_path / "s"), timeout=90)
    assert rc == 0, (out, err)
    # C=4 closed at 2.5 s, never steady (that needs 4 s): an unsteady step is never last good
    assert "break: latency at C=32; no step passed" in out, out
    c32_line = next(line for line in out.splitlines() if line.startswith("C=32"))
    assert "TTFT p50 ≥" in c32_line and "p99 ≥" in c32_line, c32_line
    steps = _summary_steps(tmp_path / "s")
    c4, c32 = steps
    assert not c4.p99_ttft_ms_bound and c4.p99_ttft_ms < 750
    # the run ended at the break: what never answered stays censored, and says so
    assert c32.censored_ttft >= 1 and c32.p99_ttft_ms_bound and c32.p99_ttft_ms > 750
    req = pl.read_ndjson(tmp_path / "s" / "requests.ndjson")
    own = req.filter((pl.col("step") == c32.index) & (pl.col("phase") == "measure"))
    assert c32.requests_sent == own.height
    assert c32.censored_ttft == own.filter(pl.col("ttft_ms").is_null()).height
    # every request of the run belongs to a step (none went out before the first)
    assert req.filter(pl.col("phase") != "calibration")["step"].min() == c4.index


# a sim at a quarter time scale: its arrivals within 0.5 s of the sends, TTFTs within 20 %
# of its clock (beside the server part at two workers a core its loop fell 0.83 s behind)
@pytest.mark.timing
def test_after_a_drain_the_overload_step_holds_the_servers_truth(sim_factory, tmp_path):
    """[4, 32, 2]: the C=32 step closes on bounds; the drain lets its requests finish, and
    summary.json's C=32 TTFT p50 / p99 and E2E p50 are within 20 % of the sim's own clock
    for the requests sent in that step. Every time here is half the module's (the sim at a
    quarter time scale, warm-up, hold and max_hold_s halved): the same shape, its own
    requests queued ~3.5 s behind the others past a 2.5 s max_hold_s."""
    sim = sim_factory("healthy", extra_args=(*SLOTS4[:-2], "--set", "time_scale=0.25"))
    d = json.loads(json.dumps(OVERLOAD))
    d["ramp"]["concurrency"] = [4, 32, 2]
    d["ramp"].update(warmup_s=0.25, hold_s=0.5, max_hold_s=2.5)
    d["ramp"]["min_requests"] = 2
    cfg = EngineConfig(url=sim.url, concurrency=4, workload=WorkloadConfig(input_len=16, output_len=200), out_dir=tmp_path / "s",
                       live_steps=False, use_nvml=False)
    outcome = run_preset_headless(cfg, parse_preset(d, "drain.toml"))
    records = httpx.get(sim.url + "/sim/requests", timeout=30).json()
    closing = outcome.steps[1]
    assert closing.concurrency == 32 and not closing.final
    assert closing.censored_ttft == closing.requests_sent  # none of its own had answered at the close
    assert closing.p99_ttft_ms_bound and closing.median_ttft_ms_bound
    c32 = _summary_steps(tmp_path / "s")[1]
    assert c32.final and c32.censored_ttft == 0
    assert not (c32.median_ttft_ms_bound or c32.p99_ttft_ms_bound)  # their TTFT: completed, the wait was this step's
    assert c32.ended_after_close == c32.requests_sent == c32.completed
    # their decoding ran under the drain's load: the step's E2E stays its bound at the close
    assert c32.censored_e2e == c32.completed and c32.median_e2e_latency_ms_bound
    # the step's own requests on the sim's clock: every request of the run is one the sim
    # received, in the order sent (the k-th send is the k-th arrival, a moment later), and the
    # C=32 step's rows pick theirs. (A window on the sim's clock, [t_start, t_end), missed a
    # request sent just before the close that arrived just after it: 20 for 21 and 21 for 23
    # on a loaded machine.)
    rows = pl.read_ndjson(tmp_path / "s" / "requests.ndjson").sort("t_send")
    arrivals = sorted(records, key=lambda r: r["t_arrive"])
    assert rows.height == len(arrivals)  # every request the sim received is a row, and no other
    own = []
    for row, rec in zip(rows.iter_rows(named=True), arrivals, strict=False):
        assert abs(rec["t_arrive"] - row["t_send"]) < 0.5, (row, rec)  # the same request
        if row["step"] == c32.index and row["phase"] == "measure":
            own.append(rec)
    truth = window_truth(own, 0.0, math.inf)
    assert truth["sent"] == c32.requests_sent and truth["completed_all"] == c32.completed, truth
    assert all(c32.t_start <= r["t_arrive"] <= c32.t_start + c32.duration_s + 0.5 for r in own)  # sent in its window
    assert _within(c32.median_ttft_ms, truth["median_ttft_all_ms"], 0.2), (c32, truth)
    assert _within(c32.p99_ttft_ms, truth["p99_ttft_all_ms"], 0.2), (c32, truth)
    assert c32.median_e2e_latency_ms <= truth["median_e2e_all_ms"]  # a true lower bound of what they took
    # the bound at the close was a true lower bound of what the requests then showed
    assert closing.median_ttft_ms <= c32.median_ttft_ms and closing.p99_ttft_ms <= c32.p99_ttft_ms


@pytest.mark.parametrize("workers", [1, 2], ids=["one-process", "2-workers"])
def test_open_loop_requests_belong_to_the_step_that_scheduled_them(sim_factory, tmp_path, workers):
    """rate [16, 0.2] at cap 8 on a server finishing ~6.7 req/s: the 16 req/s step's backlog,
    sent during the 0.2 req/s step, is the 16 req/s step's; the slow step counts only its own
    request; request_throughput is what the server finished. Worker processes hold the same
    load: their sends are placed by intended time on the coordinator's clock.
    The shape of time at half its length: the sim at half time scale (a 60-token answer 0.6 s,
    4 slots: ~6.7 req/s, was 3.3), the rates doubled (16 and 0.2 req/s, were 8 and 0.1), the
    warm-up and the steps halved (0.25 s, 2.5 s): the same counts (a backlog of ~23, ~16
    completions in the fast step, at most one request in the slow one), in half the time."""
    sim = sim_factory("healthy", extra_args=("--set", "max_running_requests=4", "--set", "ceiling_tok_s=100000",
                                             "--set", "decode_base_s=0.02", "--set", "decode_per_seq_s=0",
                                             "--set", "time_scale=0.5"))
    d = {"workload": {"api": "chat", "input_len": 16, "output_len": 60},
         "ramp": {"rate": [16, 0.2], "max_concurrency": 8, "arrival": "constant", "warmup_s": 0.25, "hold_s": 2.5,
                  "min_requests": 1, "max_hold_s": 2.5},
         "after": {"probe_s": 0}}
    cfg = EngineConfig(url=sim.url, concurrency=8, workload=WorkloadConfig(input_len=16, output_len=60), out_dir=tmp_path / "s",
                       live_steps=False, use_nvml=False, rate=16.0, arrival="constant", max_concurrency=8, workers=workers)
    outcome = run_preset_headless(cfg, parse_preset(d, "rate.toml"))
    records = httpx.get(sim.url + "/sim/requests", timeout=30).json()
    fast, slow = outcome.steps
    assert fast.request_rate == 16 and slow.request_rate == 0.2
    # at the close the fast step's own requests still queued or held are censored, not left
    # out: the slowest ranks are theirs
    assert fast.censored_ttft >= 5 and fast.p99_ttft_ms_bound
    req = pl.read_ndjson(tmp_path / "s" / "requests.ndjson").with_columns(
        (pl.col("t_send") - pl.col("schedule_lag_ms").fill_null(0) / 1000).alias("t_intended"))
    for s in (fast, slow):  # every row is the step its intended time fell in
        inside = req.filter((pl.col("t_intended") >= s.t_start) & (pl.col("t_intended") <= s.t_start + s.duration_s))
        assert set(inside["step"].to_list()) <= {s.index}, s.load
    fast_rows = req.filter(pl.col("step") == fast.index)
    assert fast_rows.filter(pl.col("t_send") > fast.t_start + fast.duration_s).height >= 3  # held past its close
    final_fast, final_slow = _summary_steps(tmp_path / "s")
    assert final_slow.requests_sent <= 2 and final_slow.requests_sent == req.filter((pl.col("step") == slow.index) & (pl.col("phase") == "measure")).height
    assert final_fast.requests_sent == fast_rows.filter(pl.col("phase") == "measure").height
    # scheduled at 16/s over the window: sent, or held and given up when the run ended
    abandoned = final_fast.censored_ttft - fast_rows.filter((pl.col("phase") == "measure") & pl.col("ttft_ms").is_null()).height
    assert abs(final_fast.requests_sent + abandoned - 16 * fast.duration_s) <= 2, (final_fast, abandoned)
    # request_throughput: completions per second in the window, as the sim counts them
    done = sum(1 for r in records if r["outcome"] == "completed" and fast.t_start <= r["t_end"] <= fast.t_start + fast.duration_s)
    assert fast.request_throughput == pytest.approx(done / fast.duration_s, rel=0.2)
    assert fast.request_throughput < 9  # the server's ~6.7/s, not the 16/s sent (both doubled with the time scale)


def test_goodput_equals_throughput_when_every_request_meets_the_slo(sim_factory, tmp_path):
    """Every request inside a generous SLO: output_goodput is the step's output tok/s."""
    sim = sim_factory("healthy", extra_args=("--set", "decode_base_s=0.01", "--set", "decode_per_seq_s=0.0001"))
    d = {"workload": {"input_len": 16, "output_len": 60},
         "ramp": {"concurrency": [8], "warmup_s": 0.5, "hold_s": 3, "min_requests": 8, "max_hold_s": 8},
         "slo": {"ttft_ms": 60000, "e2e_ms": 120000}, "after": {"probe_s": 0}}
    cfg = EngineConfig(url=sim.url, concurrency=8, workload=WorkloadConfig(input_len=16, output_len=60), out_dir=tmp_path / "s",
                       live_steps=False, use_nvml=False)
    (s,) = run_preset_headless(cfg, parse_preset(d, "g.toml")).steps
    assert s.slo_attainment == 1.0
    assert s.output_goodput == pytest.approx(s.output_throughput, rel=0.1)
    assert s.request_goodput == pytest.approx(s.request_throughput, rel=0.1)


@pytest.mark.timing  # ITL max < 100 ms
@pytest.mark.parametrize("workers", [1, 2], ids=["one-process", "2-workers"])
def test_streams_that_stall_then_drop_stay_out_of_itl(sim_factory, tmp_path, workers):
    """Half the streams hang 400 ms, send once more and drop: the step's p99 ITL is the
    successful requests' (every gap of theirs well under 100 ms), not the stall; with worker
    processes the failed request's gaps travel back out of the coordinator's figures."""
    sim = sim_factory("healthy", extra_args=("--set", "decode_base_s=0.01", "--set", "decode_per_seq_s=0.0001",
                                             "--set", "disconnect_rate=0.5", "--set", "disconnect_stall_s=0.4"))
    d = {"workload": {"input_len": 16, "output_len": 40},
         # the step closes at 3 s (max_hold_s): its streams are never steady (half of them
         # drop), and nothing here reads steadiness; ~0.5 s requests on 8 slots stall dozens
         "ramp": {"concurrency": [8], "warmup_s": 0.5, "hold_s": 3, "min_requests": 8, "max_hold_s": 3},
         "after": {"probe_s": 0}}
    cfg = EngineConfig(url=sim.url, concurrency=8, workload=WorkloadConfig(input_len=16, output_len=40), out_dir=tmp_path / "s",
                       live_steps=False, use_nvml=False, workers=workers)
    (s,) = run_preset_headless(cfg, parse_preset(d, "stall.toml")).steps
    records = httpx.get(sim.url + "/sim/requests?chunks=1", timeout=30).json()
    stalled = [r for r in records if r["outcome"] == "failed" and len(r["chunk_times"]) > 1
               and max(b - a for a, b in zip(r["chunk_times"], r["chunk_times"][1:], strict=False)) >= 0.35]
    assert len(stalled) >= 3  # the sim did stall and drop streams inside the step
    assert s.failed >= 3
    assert s.p99_itl_ms < 100, s
    req = pl.read_ndjson(tmp_path / "s" / "requests.ndjson")
    ok = req.filter((pl.col("step") == s.index) & (pl.col("status") == "ok"))
    assert ok["itl_max_ms"].max() < 100
    # and no failed request's TTFT is in the step's (its record: every own request's outcome in)
    (final,) = _summary_steps(tmp_path / "s")
    own = req.filter((pl.col("step") == s.index) & (pl.col("phase") == "measure") & (pl.col("status") != "failed"))
    waited = own.filter(pl.col("ttft_ms").is_null())["ended_ms"]  # cancelled by the run's end: "at least"
    assert final.censored_ttft == waited.len()
    ttft = pl.concat([own["ttft_ms"].drop_nulls(), waited])
    assert final.median_ttft_ms == pytest.approx(ttft.quantile(0.5, "linear"), abs=0.002)
    assert final.failed == req.filter((pl.col("step") == s.index) & (pl.col("phase") == "measure") & (pl.col("status") == "failed")).height


def test_search_on_a_server_still_scaling_names_no_knee(sim_factory, tmp_path):
    """A search to max=64 on a server whose throughput still doubles with C: no knee, said so."""
    sim = sim_factory("healthy", extra_args=("--set", "ceiling_tok_s=1000000", "--set", "decode_base_s=0.02", "--set", "decode_per_seq_s=0.00001"))
    d = {"workload": {"input_len": 16, "output_len": 40},
         "ramp": {"mode": "search", "start": 8, "max": 64, "warmup_s": 0.5, "hold_s": 2.0, "min_requests": 4, "resolution": 0.1},
         "stop": {"plateau_gain": 0.05}}
    cfg = EngineConfig(url=sim.url, concurrency=8, workload=WorkloadConfig(input_len=16, output_len=40), out_dir=tmp_path / "s",
                       live_steps=False, use_nvml=False)
    out = run_preset_headless(cfg, steady_in(parse_preset(d, "s.toml"), 2))  # points of ~2.5 s, not 4.5
    assert out.search["knee_concurrency"] is None, out.search
    assert out.search["knee_reason"] == "still rising at max C=64"
    assert out.search["points"][:4] == [8, 16, 32, 64]
    summary = json.loads((tmp_path / "s" / "summary.json").read_text())
    assert summary["search"]["knee_concurrency"] is None and summary["search"]["knee_reason"] == "still rising at max C=64"


def test_censored_quantile_is_a_lower_bound_exactly_where_its_rank_falls_among_them():
    """Without a server: observed 1..10 and three requests still waiting at ages 20, 30, 40."""
    from redline.engine.measure.histogram import Digest, censored_quantiles

    d = Digest()
    d.add_many([float(v) for v in range(1, 11)])
    (p50, b50), (p75, b75), (p80, b80), (p99, b99), (mean, bmean) = censored_quantiles(d, (), [20.0, 30.0, 40.0], (0.5, 0.75, 0.8, 0.99, None))
    assert (p50, b50) == (7.0, False)  # ranks 0..12: the median is rank 6, observed
    assert (p75, b75) == (10.0, False)  # rank 9 exactly: the slowest observed, nothing censored below
    assert b80 is True and p80 == pytest.approx(10 + (20 - 10) * 0.6)  # between rank 9 (10) and rank 10 (20, censored)
    assert b99 and p99 == pytest.approx(30 + 0.88 * 10)
    assert bmean and mean == pytest.approx((55 + 90) / 13)
    # in a step of a thousand, a request sent a moment ago (age 0.5) cannot move a figure by
    # more than BOUND_TOLERANCE: not a bound; in a step of ten it can
    many = Digest()
    many.add_many([float(v) for v in range(1, 1001)])
    (p50, b50), (p99, b99) = censored_quantiles(many, (), [0.5], (0.5, 0.99))
    assert not b50 and not b99 and p50 == 500.0
    (p50, b50), = censored_quantiles(d, (), [0.5], (0.5,))
    assert b50 and p50 == 5.0  # truly: 5 or 6
    # nothing observed: everything is a bound
    (p50, b50), = censored_quantiles(Digest(), (), [3.0, 5.0], (0.5,))
    assert b50 and p50 == 4.0
    # binned (beyond the exact limit): still a bound where censored values rank
    big = Digest(limit=100)
    big.add_many([0.1 + i * 1e-4 for i in range(1000)])
    (p50, b50), (p99, b99) = censored_quantiles(big, (), [5.0] * 50, (0.5, 0.99))
    assert not b50 and b99 and p99 >= 5.0 * 0.99
    assert math.isclose(p50, 0.1 + 524.5e-4, rel_tol=0.01)  # rank 524.5 of 1050: among the observed


def test_a_step_the_probe_aborts_keeps_its_itl_and_censors_its_ends(sim_factory, tmp_path):
    """Live C=16 with answers longer than the step, then `a`: every request of the step is
    cancelled, but what the server served it stays (its window's ITL), and its E2E is a
    bound (the requests' ages at the abort), not a missing figure."""
    import asyncio

    from redline.engine.core.engine import Engine

    sim = sim_factory("healthy", extra_args=("--set", "decode_base_s=0.02", "--set", "decode_per_seq_s=0"))
    cfg = EngineConfig(url=sim.url, concurrency=16, workload=WorkloadConfig(input_len=16, output_len=1000), out_dir=tmp_path / "s", use_nvml=False)

    async def go():
        e = Engine(cfg)
        await e.start()
        try:
            await asyncio.sleep(4.5)
            await e.probe()
            await asyncio.sleep(0.5)
            return list(e.steps)
        finally:
            await e.stop("quit")

    steps = asyncio.run(go())
    c16 = next(s for s in steps if s.concurrency == 16)
    assert c16.completed == 0 and c16.cancelled == c16.requests_sent >= 16
    assert c16.median_itl_ms is not None and c16.median_itl_ms == pytest.approx(20, rel=0.5)
    assert c16.median_e2e_latency_ms_bound and c16.censored_e2e == c16.requests_sent
    assert c16.median_ttft_ms is not None and not c16.median_ttft_ms_bound


def test_a_close_while_the_loop_is_behind_counts_the_answers_that_had_arrived(sim_factory, tmp_path, monkeypatch):
    """The loop is busy for 0.3 s as each step ends (a client short of CPU): the answers that
    arrive meanwhile wait in the kernel, stamped with their arrival. The close reads them
    first, so each closing result counts every own request whose last byte arrived by its
    close, as the log's stamps say (it used to close on them as still in flight)."""
    import time

    from redline.engine.core.live_steps import LiveSteps

    close = LiveSteps.close_step

    async def behind(self, acc):
        time.sleep(0.3)  # the loop held: no read, no callback
        return await close(self, acc)

    monkeypatch.setattr(LiveSteps, "close_step", behind)
    sim = sim_factory("healthy", extra_args=("--set", "decode_base_s=0.005", "--set", "decode_per_seq_s=0"))
    preset = parse_preset({"workload": {"input_len": 16, "output_len": 16},
                           "ramp": {"concurrency": [8, 16], "warmup_s": 0.3, "hold_s": 1.0, "min_requests": 1, "max_hold_s": 1.0},
                           "after": {"probe_s": 0}}, "behind.toml")
    cfg = EngineConfig(url=sim.url, concurrency=8, workload=WorkloadConfig(input_len=16, output_len=16), out_dir=tmp_path / "s",
                       live_steps=False, use_nvml=False)
    out = run_preset_headless(cfg, preset)
    req = pl.read_ndjson(tmp_path / "s" / "requests.ndjson")
    assert len(out.steps) == 2
    for s in out.steps:
        own = req.filter((pl.col("step") == s.index) & (pl.col("phase") == "measure"))
        by_close = own.filter((pl.col("status") == "ok") & (pl.col("t_send") + pl.col("e2e_ms") / 1000 <= s.t_start + s.duration_s + 1e-5))
        assert s.completed == by_close.height, (s.concurrency, s.completed, by_close.height)
        assert s.censored_e2e == s.requests_sent - s.completed - s.failed
