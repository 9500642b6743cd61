"""The knee in fewer seconds (issue 26): a search point's warm-up ends at turnover, a stall a
steady step proved is not measured again, and the knee bracket is narrowed where the measured
tok/s say the curve crosses the saturation line. Step truth is unchanged: a point's figures
are its own requests', sent once nothing of another load was left in flight."""

from __future__ import annotations

import json
import random

import httpx
import polars as pl
import pytest

from redline.engine.core.config import EngineConfig
from redline.engine.measure.records import Clock, RequestRecord
from redline.engine.measure.step_book import StepBook
from redline.engine.measure.step_result import StepResult
from redline.engine.preset import parse_preset
from redline.engine.rules.knee_search import KneeSearch
from redline.engine.rules.verdicts import STEP_JUDGE
from redline.engine.workload.prompts import WorkloadConfig

from helpers import run_preset_headless

FAST = ("--set", "decode_base_s=0.01", "--set", "decode_per_seq_s=0.0001")
WARMUP_S = 30.0  # far longer than any request lives here: only turnover can end a warm-up


def _res(c, tok, *, steady=True, se=None):
    return StepResult(concurrency=c, duration_s=10, completed=20, failed=0, output_throughput=tok, input_throughput=0,
                      request_throughput=1, p99_ttft_ms=100.0, steady=steady, output_throughput_se=se)


def _healthy(c: int) -> float:
    """The healthy sim's curve: one decode iteration of a batch of B takes
    max(0.04 + 0.0002 B, B / 2000) s, at most 256 running (engine/sim/profiles.py)."""
    b = min(c, 256)
    return b / max(0.04 + 0.0002 * b, b / 2000)


@pytest.mark.timing  # within 0.6 s
@pytest.mark.slow
def test_a_search_point_measures_once_its_in_flight_turned_over_against_the_sims_clock(sim_factory, tmp_path):
    """warmup_s = 30 s, requests that live a fraction of a second: each point's warm-up ends
    when the last request sent at the previous load has ended (turnover), long before 30 s;
    the first point, with nothing in flight, measures from its first request. The sim's own
    clock agrees: no request sent before a point opened was still running when it measured."""
    sim = sim_factory("healthy", extra_args=FAST)
    preset = parse_preset({"workload": {"input_len": 16, "output_len": 24},
                           # each point closes at 1.5 s (max_hold_s), never steady (that needs 4 s)
                           "ramp": {"mode": "search", "start": 4, "max": 16, "warmup_s": WARMUP_S, "hold_s": 1.0, "min_requests": 4,
                                    "max_hold_s": 1.5},
                           "stop": {"plateau_gain": 0.05}}, "turnover.toml")
    cfg = EngineConfig(url=sim.url, concurrency=4, workload=WorkloadConfig(input_len=16, output_len=24), out_dir=tmp_path / "s",
                       live_steps=False, use_nvml=False)
    out = run_preset_headless(cfg, preset)
    truth = httpx.get(sim.url + "/sim/requests", timeout=30).json()
    steps = json.loads((tmp_path / "s" / "summary.json").read_text())["steps"]
    req = pl.read_ndjson(tmp_path / "s" / "requests.ndjson")
    assert [s["concurrency"] for s in steps] == out.search["points"] and len(steps) >= 3
    first = steps[0]
    assert first["warmup_s"] == 0.0  # nothing in flight: its first requests are its own
    assert req.filter((pl.col("step") == first["index"]) & (pl.col("phase") == "warmup")).height == 0
    assert first["requests_sent"] >= first["concurrency"]
    level_open = first["t_start"]  # when the load of the point (and of those measured again right after it) was set
    again = 0
    for prev, s in zip(steps, steps[1:], strict=False):
        t_open, t0 = s["t_start"] - s["warmup_s"], s["t_start"]
        assert s["warmup_s"] < WARMUP_S / 3, s  # turnover ended it, not warmup_s
        if s["concurrency"] == prev["concurrency"]:  # measured again at once: its predecessor had turned over
            assert s["warmup_s"] == 0.0, s
            again += 1
        else:
            level_open = t_open
            # the sim's clock: the requests that arrived before the point's load was set had all
            # ended when it began measuring, and it began soon after the last of them ended
            before = [r for r in truth if r["t_arrive"] < level_open - 0.005]
            last_end = max(r["t_end"] for r in before)
            assert last_end <= t0 + 0.005, (s["concurrency"], last_end - t0)
            assert t0 - last_end < 0.6, (s["concurrency"], t0 - last_end)  # the runner's poll, on a busy machine
        # all in flight when it began measuring was sent at its load (the sim's clock)
        assert not [r for r in truth if r["t_arrive"] < level_open - 0.005 and r["t_end"] > t0 + 0.005]
        # its own requests (phase measure) were all sent after that; its warm-up rows before
        own = req.filter((pl.col("step") == s["index"]) & (pl.col("phase") == "measure"))
        assert own.height == s["requests_sent"] > 0 and own["t_send"].min() >= t0 - 0.005
        warm = req.filter((pl.col("step") == s["index"]) & (pl.col("phase") == "warmup"))
        assert warm.height == 0 or warm["t_send"].max() <= t0 + 0.005
    assert again >= 1, out.search["points"]  # 1 s holds are never steady (4 s needed): each growth point is measured again


def _rec(rid: int, step: int, c: int, phase: str = "measure") -> RequestRecord:
    return RequestRecord(rid=rid, phase=phase, step=step, concurrency=c, t_send=0.0, t_end=1.0)


def test_turnover_counts_the_previous_loads_requests_and_a_point_measured_again_inherits_it():
    """StepBook: a step opened with 3 of another load in flight turns over when those 3 ended
    (its own warm-up requests ending do not count, nor the probe lane's); the next step at the
    same load waits only for what the first had left; a step at a new load counts afresh."""
    book = StepBook(Clock.now(), judge=STEP_JUDGE)
    a = book.open_step(8, "measure", measure=False, in_flight=3)
    assert a.foreign == 3 and not a.turned_over
    book.on_end(_rec(1, a.index, 8, "warmup"))  # its own: no turnover
    book.on_end(_rec(2, 0, 4, "lane"))
    book.on_end(_rec(3, 0, 4, "live"))  # one of the load before it
    assert a.foreign_ended == 1 and not a.turned_over
    book.close_step(a)
    b = book.open_step(8, "measure", measure=False, in_flight=8)  # measured again at once: same load
    assert b.foreign == 2 and b.level_index == a.index
    book.on_end(_rec(4, a.index, 8))  # the first point's own request: sent at this load
    book.on_end(_rec(5, 0, 4, "live"))
    book.on_end(_rec(6, 0, 4, "live"))
    assert b.turned_over
    book.close_step(b)
    c = book.open_step(16, "measure", measure=False, in_flight=8)
    assert c.foreign == 8 and c.level_index == c.index and not c.turned_over


def test_a_stall_a_steady_step_proved_is_believed_without_measuring_it_again():
    """A doubling that, steady, fell short of the plateau gain even with its noise in its
    favour is not measured again; one that was unsteady (or within the noise) still is."""
    proven = KneeSearch(8, 64, resolution=0.25)
    for c, tok in ((8, 100.0), (16, 200.0), (32, 202.0)):
        assert proven.next() == c
        proven.observe(c, _res(c, tok, se=1.0))
    assert proven.next() != 32  # believed: on to the knee bracket (16, 32)
    doubt = KneeSearch(8, 64, resolution=0.25)
    for c, tok, steady in ((8, 100.0, True), (16, 200.0, True), (32, 202.0, False)):
        assert doubt.next() == c
        doubt.observe(c, _res(c, tok, steady=steady, se=1.0))
    assert doubt.next() == 32  # unsteady: measured once more
    noisy = KneeSearch(8, 64, resolution=0.25)
    for c, tok in ((8, 100.0), (16, 200.0), (32, 205.0)):
        noisy.observe(c, _res(c, tok, se=5.0))  # +2.5 %, but +5 % is within two standard errors
    assert noisy.next() == 32


def test_the_knee_on_the_healthy_curve_in_fewer_points_within_one_resolution():
    """On the healthy sim's curve (true crossing of 95 % of the plateau at C=122.6), with
    noise: the knee is within one resolution of it, and the bracket (64, 128) closes in at most
    3 points (halving needs 4: 96, 112, 120, 124)."""
    crossing = 122.6
    for seed in range(20):
        rnd = random.Random(seed)
        s = KneeSearch(8, 512, resolution=0.05)
        while (c := s.next()) is not None:
            s.observe(c, _res(c, _healthy(c) + rnd.gauss(0, 3.0), se=3.0))
            assert len(s.points) < 20
        r = s.result(1.0)
        assert abs(r.knee_concurrency - crossing) <= 0.05 * 128, (seed, r)
        assert r.points[:6] == [8, 16, 32, 64, 128, 256], r.points
        assert len([c for c in r.points if 64 < c < 128]) <= 3, (seed, r.points)


def test_an_unsteady_clear_gain_is_grown_on_below_max_and_looked_at_again_at_max():
    """Below max, a doubling whose tok/s cleared the gain beyond its noise is grown on from
    even when its step was unsteady (a false gain would show as the next doubling's stall);
    at max an unsteady gain is measured again before "still rising" is said."""
    s = KneeSearch(8, 32, resolution=0.1)
    s.observe(8, _res(8, 100.0, se=1.0))
    s.observe(16, _res(16, 200.0, steady=False, se=1.0))
    assert s.next() == 32  # grown on, not 16 again
    s.observe(32, _res(32, 400.0, steady=False, se=1.0))
    assert s.next() == 32  # at max: looked at again
    s.observe(32, _res(32, 398.0, steady=False, se=1.0))
    assert s.next() is None
    r = s.result(1.0)
    # the answer is the one knee's (engine/rules/knee.py): unsteady points decide nothing, so
    # the search's gains beyond the noise led it on, but no verdict rests on them
    assert r.knee_concurrency is None and r.points == [8, 16, 32, 32]
    assert r.knee_reason == "one steady load (C=8): nothing to compare (left out: C=16 not steady, C=32 not steady)"


def test_a_step_is_steady_only_after_its_plans_whole_seconds_and_never_under_two():
    """STEADY_MIN_S (4) whole measured seconds by default; a plan may ask for fewer (a test on a
    sim whose decode steps are short) but never under 2, which is one second a half; the halves
    must still agree; and the number reaches every step a ramp plans."""
    import dataclasses

    from redline.engine.constants import STEADY_MIN_S

    book = StepBook(Clock.now(), judge=STEP_JUDGE)
    acc = book.open_step(8, "measure", t=100.0)
    acc.per_second = [500.0] * 3
    assert STEADY_MIN_S == 4 and not acc.steady(103.5)  # 3 whole seconds of 4
    acc.steady_min_s = 2
    assert acc.steady(103.5)
    assert not acc.steady(101.5)  # one whole second: not even with 2 asked
    acc.steady_min_s = 1
    assert not acc.steady(101.5)  # never under 2
    acc.steady_min_s = 2
    acc.per_second = [500.0, 200.0]
    assert not acc.steady(102.5)  # halves apart: not steady however short the window
    ramp = parse_preset({"ramp": {"concurrency": [4, 8], "hold_s": 2}}, "r.toml").ramp
    assert [p.steady_min_s for p in ramp.steps()] == [STEADY_MIN_S] * 2
    assert [p.steady_min_s for p in dataclasses.replace(ramp, steady_min_s=2).steps()] == [2, 2]
