"""Many targets (issue 17): the load split over several servers, evenly or by weight, each
target's figures apart, and a target that fails marked gone while the others carry on.
Counts are checked against each sim's own record of what it received (/sim/requests)."""

from __future__ import annotations

import asyncio
import json

import httpx
import polars as pl
import pytest

from redline.engine.core.config import EngineConfig
from redline.engine.core.engine import Engine
from redline.engine.core.target_stats import TargetState, TargetStats, WeightsError, parse_weights
from redline.engine.load.holder import pick
from redline.engine.workload.prompts import WorkloadConfig

from helpers import until


def _received(url: str) -> int:
    return sum(1 for r in httpx.get(url + "/sim/requests", timeout=30).json())


class _Gone:
    def __init__(self, gone: bool) -> None:
        self.gone = self.down = gone


def _states(weights, gone=()):
    out = []
    for i, w in enumerate(weights):
        stats = TargetStats(f"http://h{i}")
        stats.watch = _Gone(i in gone)  # type: ignore[assignment]
        out.append(TargetState(i, None, None, None, stats, w))  # type: ignore[arg-type]
    return out


def test_smooth_weighted_round_robin_keeps_every_window_within_one_of_the_weights():
    states = _states([3, 1, 2])
    seq = [pick(states).index for _ in range(600)]
    assert [seq.count(i) for i in range(3)] == [300, 100, 200]
    for n in range(1, 60):  # any prefix: within one request of its share
        for i, w in enumerate((3, 1, 2)):
            assert abs(seq[:n].count(i) - n * w / 6) < 1.0 + 1e-9
    assert seq[:6] == [0, 2, 0, 1, 2, 0] or sorted(seq[:6]) == [0, 0, 0, 1, 2, 2]


def test_gone_targets_are_skipped_and_none_when_all_are():
    states = _states([1, 1, 1], gone={1})
    assert {pick(states).index for _ in range(50)} == {0, 2}
    assert pick(_states([1, 2], gone={0, 1})) is None


@pytest.mark.parametrize("text, n", [("1,2", 3), ("a,b", 2), ("1,0", 2), ("1,-1", 2), ("1,inf", 2), ("", 1)])
def test_bad_weights_are_one_line(text, n):
    with pytest.raises(WeightsError) as e:
        parse_weights(text, n)
    assert repr(text) in str(e.value) and f"{n} positive numbers" in str(e.value)


def test_weights_default_even():
    assert parse_weights(None, 3) == (1.0, 1.0, 1.0)
    assert parse_weights("3,1", 2) == (3.0, 1.0)


def test_load_splits_by_weight_and_counts_match_each_sim(sim_factory, tmp_path):
    # counts and shares, not times: the sims at half time scale reach 120 completions sooner
    # (half, not a quarter: each sim's running count, sampled once a second, stays above 0)
    a, b = sim_factory("healthy", extra_args=("--set", "time_scale=0.5")), sim_factory("healthy", extra_args=("--set", "time_scale=0.5"))
    out = tmp_path / "s"

    async def go() -> Engine:
        e = Engine(EngineConfig(url=a.url, more_urls=(b.url,), weights=(3.0, 1.0), concurrency=8,
                                workload=WorkloadConfig(input_len=16, output_len=8), use_nvml=False, out_dir=out))
        await e.start()
        await until(lambda: e.metrics.completed >= 120, 30)
        # the server's running count that steps and the cap detector see: every target's
        tot = e.ticker.server_total()
        per = [t.telemetry.server for t in e.targets]
        assert tot is not None and all(p is not None for p in per)
        assert tot.running == sum(p.running for p in per) > max(p.running for p in per)
        await e.stop()
        return e

    asyncio.run(go())
    summary = json.loads((out / "summary.json").read_text())
    rows = pl.read_ndjson(out / "requests.ndjson")
    per = {t["url"]: t for t in summary["targets"]}
    assert list(per) == [a.url, b.url]
    for url in (a.url, b.url):
        sent = rows.filter(pl.col("target") == url)
        assert sent.height == _received(url)  # every request the sim saw is a row, and no other
        load = sent.filter(pl.col("phase") != "calibration")
        assert per[url]["requests"] == load.height
        assert per[url]["completed"] == load.filter(pl.col("status") == "ok").height
        assert per[url]["output_tokens"] == sent["output_tokens"].sum()  # as they arrived, start-up included
    na, nb = per[a.url]["requests"], per[b.url]["requests"]
    assert 2.4 < na / nb < 3.6, (na, nb)  # 3:1, closed loop (ends come in any order)
    assert summary["targets"][0]["ttft_p50_ms"] is not None and summary["targets"][1]["e2e_p99_ms"] is not None


def test_a_target_that_dies_is_marked_gone_and_the_others_carry_its_share(sim_factory, tmp_path):
    # counts, not times: the sims at half time scale reach the 30 and 40 completions sooner
    a, b = sim_factory("healthy", extra_args=("--set", "time_scale=0.5")), sim_factory("healthy", extra_args=("--set", "time_scale=0.5"))
    out = tmp_path / "s"

    async def go() -> tuple[Engine, int, int]:
        e = Engine(EngineConfig(url=a.url, more_urls=(b.url,), concurrency=6,
                                workload=WorkloadConfig(input_len=16, output_len=8), use_nvml=False, out_dir=out))
        await e.start()
        await until(lambda: e.metrics.completed >= 30, 20)
        b.stop()
        gone_at = await until(lambda: e.targets[1].gone, 20)
        assert gone_at is not None, "target b never marked gone"
        done = e.metrics.completed
        await until(lambda: e.metrics.completed >= done + 40, 20)
        snap = e.snapshot
        await e.stop()
        assert snap.state != "server gone"
        assert [t["gone"] for t in snap.targets] == [False, True]
        assert any("gone" in w and b.url in w for w in snap.warnings)
        return e, done, e.metrics.completed

    e, before, after = asyncio.run(go())
    assert after >= before + 40  # the load went on, all of it to the live target
    summary = json.loads((out / "summary.json").read_text())
    assert [t["gone"] for t in summary["targets"]] == [False, True]
    assert summary["targets"][1]["errors"] >= 1
