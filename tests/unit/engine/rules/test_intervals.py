"""The statistics of repeats (issue 44), as pure functions against known values: the t
distribution (its quantiles from printed tables), a figure's mean, 95 % interval and CV,
Welch's test of two configurations, Holm-Bonferroni over a report's comparisons, the Pareto
front, and the fingerprint's differences."""

from __future__ import annotations

import math
import random

import pytest

from redline.engine.rules.intervals import (
    BETTER,
    NO_CLEAR,
    WORSE,
    betainc,
    holm_levels,
    spread,
    t_cdf,
    t_quantile,
    verdict,
    welch,
)
from redline.engine.rules.pareto import Point, best_meeting, front
from redline.engine.telemetry.fingerprint import args_from_command, args_from_server_info, differences_text, fingerprint


@pytest.mark.parametrize("p,df,want", [
    # two-sided 95 %, 99 % and 99.9 % quantiles as every t table prints them
    (0.975, 1, 12.7062), (0.975, 2, 4.3027), (0.975, 3, 3.1824), (0.975, 4, 2.7764), (0.975, 10, 2.2281),
    (0.975, 30, 2.0423), (0.995, 4, 4.6041), (0.9995, 2, 31.5991), (0.975, math.inf, 1.9600),
])
def test_t_quantiles_match_the_tables(p, df, want):
    assert t_quantile(p, df) == pytest.approx(want, abs=5e-5)
    assert t_quantile(1 - p, df) == pytest.approx(-want, abs=5e-5)
    assert t_cdf(t_quantile(p, df), df) == pytest.approx(p, abs=1e-10)


def test_the_cdf_and_the_incomplete_beta_at_known_points():
    assert t_cdf(0.0, 3) == pytest.approx(0.5)
    assert t_cdf(2.0, 5) == pytest.approx(0.949030, abs=1e-6)  # tables: 0.9490
    assert t_cdf(1.0, 1) == pytest.approx(0.75)  # Cauchy: 1/2 + atan(1)/pi
    assert betainc(2, 3, 0.4) == pytest.approx(0.5248, abs=1e-4)  # 1 - sum_{k<2} C(4,k) .4^k .6^(4-k)
    # fractional degrees of freedom (Welch's) lie between their neighbours
    assert t_quantile(0.975, 3) > t_quantile(0.975, 3.5) > t_quantile(0.975, 4)
    with pytest.raises(ValueError):
        t_quantile(1.0, 3)


def test_a_figure_over_repeats_has_its_mean_t_interval_and_cv():
    s = spread([100.0, 110.0, 90.0])
    assert s.n == 3 and s.mean == pytest.approx(100.0) and s.sd == pytest.approx(10.0) and s.cv == pytest.approx(0.1)
    half = 4.302653 * 10.0 / math.sqrt(3)  # t(0.975, 2) s / sqrt(n)
    assert s.ci == pytest.approx((100 - half, 100 + half), abs=1e-4)
    one = spread([5.0, None])
    assert one.n == 1 and one.ci is None and one.cv is None  # one repeat: no interval (prints as today)
    assert spread([]) is None


def test_welch_and_its_verdicts():
    a, b = spread([200.0, 204.0, 196.0]), spread([100.0, 101.0, 99.0])
    d = welch(a, b)
    # by hand: var/n = 16/3 and 1/3, se = sqrt(17/3); df = (17/3)^2 / ((16/3)^2/2 + (1/3)^2/2) = 2.2491
    assert d.diff == pytest.approx(100.0) and d.se == pytest.approx(math.sqrt(17 / 3))
    assert d.df == pytest.approx((17 / 3) ** 2 / ((16 / 3) ** 2 / 2 + (1 / 3) ** 2 / 2))
    assert d.change_pct == pytest.approx(100.0) and d.p < 0.01
    lo, hi = d.interval_pct(0.05)
    assert lo < 100 < hi and lo > 0
    assert verdict(d.diff, True, higher_is_better=True) == BETTER
    assert verdict(d.diff, True, higher_is_better=False) == WORSE  # a latency that grew
    assert verdict(d.diff, False, higher_is_better=True) == NO_CLEAR
    same = welch(spread([100.0, 103.0, 97.0]), spread([101.0, 98.0, 102.0]))
    assert same.p > 0.5 and same.interval(0.05)[0] < 0 < same.interval(0.05)[1]
    assert welch(spread([1.0]), b) is None  # one repeat: nothing to test


def test_holm_bonferroni_step_down_and_intervals_that_agree_with_it():
    levels = holm_levels([0.01, 0.04, 0.03, 0.005])
    # sorted .005 (a/4 = .0125, passes), .01 (a/3, passes), .03 (a/2 = .025: fails), .04 (drawn at .025)
    assert [passed for _, passed in levels] == [True, False, False, True]
    assert [round(lv, 5) for lv, _ in levels] == [0.01667, 0.025, 0.025, 0.0125]
    assert holm_levels([]) == []
    # an interval drawn at its level excludes 0 exactly when its test passed
    rng = random.Random(7)
    diffs = [welch(spread([rng.gauss(mu, 3) for _ in range(3)]), spread([rng.gauss(0, 3) for _ in range(3)]))
             for mu in (0, 0, 1, 4, 10, 20)]
    for d, (level, passed) in zip(diffs, holm_levels([d.p for d in diffs]), strict=False):
        lo, hi = d.interval(level)
        assert (lo > 0 or hi < 0) == passed


def test_two_runs_of_one_server_read_no_clear_difference_in_19_of_20_reports():
    """The family-wise claim on the statistics alone: 3 repeats a side, 4 loads x 3 figures,
    equal means; over 400 simulated reports at most 5 % have any difference called."""
    rng = random.Random(44)
    called = 0
    for _ in range(400):
        ps = []
        for _load in range(4):
            for mu, sd in ((1000.0, 30.0), (50.0, 8.0), (20.0, 0.5)):
                a = spread([rng.gauss(mu, sd) for _ in range(3)])
                b = spread([rng.gauss(mu, sd) for _ in range(3)])
                ps.append(welch(a, b).p)
        called += any(passed for _, passed in holm_levels(ps))
    assert called / 400 <= 0.05, called


def test_the_pareto_front_keeps_the_points_nothing_beats():
    pts = [Point("mb8", "C=8", 8, 60.0, 16.0), Point("mb8", "C=64", 64, 62.0, 2.0),
           Point("mb64", "C=8", 8, 60.0, 16.5), Point("mb64", "C=64", 64, 400.0, 12.0), Point("mb64", "C=16", 16, 120.0, 15.0)]
    f = front(pts)
    assert [(p.label, p.load) for p in f] == [("mb64", "C=8"), ("mb64", "C=16"), ("mb64", "C=64")]
    best = best_meeting(pts, lambda p: 1000.0 / p.tok_s_per_user <= 70.0)  # TPOT <= 70 ms
    assert (best.label, best.load) == ("mb64", "C=16")
    assert best_meeting(pts, lambda p: False) is None


def test_fingerprints_say_what_differs():
    def fp(mb: int, driver: str = "550.54") -> dict:
        from redline.engine.telemetry.types import GpuSample

        gpus = [GpuSample(i, name="NVIDIA H100", mem_total_mib=81559, driver=driver) for i in range(8)]
        return fingerprint(kind="sglang", version="0.5.9", model="m",
                           raw={"tp_size": 1, "pp_size": 8, "pp_max_micro_batch_size": mb, "port": 30000 + mb,
                                "api_key": "sk-secret", "internal_states": [{"x": 1}]},
                           launch_command=None, gpus=gpus, gpu_source="nvml")

    a, b = fp(8), fp(64)
    assert a["server"]["args"]["api_key"] == "***" and "internal_states" not in a["server"]["args"]
    assert a["gpus"] == {"name": "NVIDIA H100", "count": 8, "driver": "550.54", "memory_mib": 81559, "source": "nvml"}
    assert differences_text([a, b]) == "fingerprints: only pp_max_micro_batch_size differs"  # the port is a launch detail
    assert differences_text([a, fp(8)]).endswith("nothing differs (server, arguments, model, GPUs, versions)")
    assert "GPU driver" in differences_text([a, fp(64, "560.1")])
    # vLLM: its dev-mode configuration flattened; without it, the launch command's options
    assert args_from_server_info({"vllm_config": {"scheduler_config": {"max_num_seqs": 16}}}) == {"scheduler_config.max_num_seqs": 16}
    text = "model='m', max_seq_len=4096, compilation_config={'level': 0, 'x': [1, 2]}, seed=0"  # an older vLLM's text form
    assert args_from_server_info({"vllm_config": text}) == {"model": "m", "max_seq_len": "4096",
                                                            "compilation_config": "{'level': 0, 'x': [1, 2]}", "seed": "0"}
    assert args_from_command(["vllm", "serve", "m", "--max-num-seqs", "16", "--enforce-eager", "--port=8000"]) == {
        "max_num_seqs": "16", "enforce_eager": True, "port": "8000"}
    v = fingerprint(kind="vllm", version="0.9.2", raw={}, model="m", launch_command=["vllm", "serve", "m", "--max-num-seqs", "4"])
    assert v["server"] == {"kind": "vllm", "version": "0.9.2", "args": {"max_num_seqs": "4"}, "args_from": "launch command"}
