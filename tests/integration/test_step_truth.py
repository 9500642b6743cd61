"""Step truth: every figure describes the load it is labelled with, checked against the sim's
own clock (/sim/requests: when each request arrived, each chunk was written, it ended).

The until-it-breaks case in miniature: a running cap of 8, requests that outlive a step, a
ramp across the cap. Before the fix, a step's TTFT came from requests that *ended* in it
(sent at the previous concurrency): the C=16 step reported the unqueued TTFT of C=8.
"""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import polars as pl
import pytest

from redline.engine.core.config import EngineConfig
from redline.engine.measure.step_result import StepResult
from redline.engine.preset import parse_preset
from redline.engine.sim.truth import window_truth
from redline.engine.workload.prompts import WorkloadConfig

from helpers import run_preset_headless

CAP_SIM = ("--set", "max_running_requests=8", "--set", "ceiling_tok_s=100000", "--set", "decode_base_s=0.025", "--set", "decode_per_seq_s=0.0005")
OUT_LEN = 60  # ~1.7 s per request at the cap: longer than the hold, so requests outlive steps

PRESET = {
    "name": "truth",
    "workload": {"api": "chat", "input_len": 16, "output_len": OUT_LEN},
    "ramp": {"concurrency": [4, 8, 16], "warmup_s": 0.5, "hold_s": 1.0, "min_requests": 6, "max_hold_s": 12.0},
}


def _close(measured: float | None, truth: float | None, rel: float = 0.10, slack_ms: float = 2.0) -> bool:
    """Within `rel` of the truth (or `slack_ms`: a loaded 2-core machine's scheduling)."""
    assert measured is not None and truth is not None, (measured, truth)
    return abs(measured - truth) <= max(rel * truth, slack_ms)


def _client_side(measured: float | None, truth: float | None, rel: float = 0.10, slack_ms: float = 6.0) -> bool:
    """A latency the client times from its send: the sim's clock starts when its handler runs,
    so the client's figure is the truth plus its own send path (connect, write, the server's
    parse), a few ms on a 2-core machine, never less than the truth (2 ms for the window's
    edges: the two medians are over the same step's requests, picked by different clocks)."""
    assert measured is not None and truth is not None, (measured, truth)
    return truth - 2.0 <= measured <= truth + max(rel * truth, slack_ms)


@pytest.fixture(scope="module")
def capped_run(tmp_path_factory):
    """One headless ramp against a capped sim, shared by the assertions below."""
    from redline.engine.sim.serve import spawn_sim_process

    sim = spawn_sim_process(profile="healthy", extra_args=CAP_SIM)
    out = tmp_path_factory.mktemp("truth") / "session"
    try:
        preset = parse_preset(PRESET, "truth.toml")
        cfg = EngineConfig(url=sim.url, concurrency=4, workload=WorkloadConfig(input_len=16, output_len=OUT_LEN), out_dir=out, live_steps=False, use_nvml=False)

        outcome = run_preset_headless(cfg, preset)
        records = httpx.get(sim.url + "/sim/requests?chunks=1", timeout=30).json()
    finally:
        sim.stop()
    return outcome, records, out


def _final_steps(out) -> list[StepResult]:
    return [StepResult.from_dict(d) for d in json.loads((out / "summary.json").read_text())["steps"]]


def test_each_step_ttft_e2e_itl_match_the_sims_clock(capped_run):
    """The recorded (final) figures: every request sent in the step, however late it answered
    or ended, against the sim's own clock."""
    outcome, records, out = capped_run
    assert [s.concurrency for s in outcome.steps] == [4, 8, 16]
    req = pl.read_ndjson(out / "requests.ndjson")
    steps = _final_steps(out)
    for s in steps:
        own = req.filter((pl.col("step") == s.index) & (pl.col("phase") == "measure"))
        # what the run's end cancelled stays censored (the last step's; the others drained), and
        # so does the E2E of what ended after the close (its age then: the next load's decoding
        # is not this step's)
        after = own.filter(pl.col("after_close") | (pl.col("status") == "cancelled"))
        assert s.final and s.censored_e2e == after.height
        assert s.censored_ttft == own.filter((pl.col("status") == "cancelled") & pl.col("ttft_ms").is_null()).height
    for s in steps[:-1]:
        truth = window_truth(records, s.t_start, s.t_start + s.duration_s)
        assert truth["sent"] >= 3, truth
        assert _client_side(s.median_ttft_ms, truth["median_ttft_all_ms"]), (s.concurrency, s.median_ttft_ms, truth)
        assert _client_side(s.median_e2e_latency_ms, truth["median_e2e_step_ms"]), (s.concurrency, s.median_e2e_latency_ms, truth)
        assert _close(s.median_itl_ms, truth["median_gap_ms"], slack_ms=1.5), (s.concurrency, s.median_itl_ms, truth)
    c16 = outcome.steps[-1]
    # above the cap, requests sent in the step queue: their TTFT is over a decode-long wait,
    # not the unqueued figure the previous step's requests would show
    assert c16.median_ttft_ms > 5 * outcome.steps[0].median_ttft_ms


def test_step_counts_its_own_requests(capped_run):
    outcome, _, out = capped_run
    req = pl.read_ndjson(out / "requests.ndjson")
    for closing, s in zip(outcome.steps, _final_steps(out), strict=False):
        own = req.filter((pl.col("step") == s.index) & (pl.col("phase") == "measure"))
        assert s.requests_sent == own.height == closing.requests_sent
        # at the close: what had completed by then (the rest was censored); in the record: all
        assert closing.completed == own.filter((pl.col("status") == "ok") & (pl.col("t_send") + pl.col("e2e_ms") / 1000 <= s.t_start + s.duration_s + 1e-5)).height
        assert s.completed == own.filter(pl.col("status") == "ok").height
        assert s.ended_after_close == (s.completed + s.failed + s.cancelled) - (closing.completed + closing.failed + closing.cancelled)
        assert closing.censored_e2e == closing.requests_sent - closing.completed - closing.failed
        assert closing.completed >= PRESET["ramp"]["min_requests"] or closing.duration_s >= PRESET["ramp"]["max_hold_s"]
        assert s.requests_first_token >= s.completed
        # warm-up rows carry the step they belong to, at its concurrency
        warm = req.filter((pl.col("step") == s.index) & (pl.col("phase") == "warmup"))
        assert warm.height > 0
        assert set(warm["concurrency"].to_list()) == {s.concurrency}
        assert s.warmup_s >= PRESET["ramp"]["warmup_s"] - 0.01


def test_readme_polars_example_reproduces_summary(capped_run):
    """The docs/session-format.md#export recipe gives summary.json's figures."""
    _, _, out = capped_run
    d = str(out)
    # -- the README example, verbatim in substance ------------------------------------
    steps = json.load(open(f"{d}/summary.json"))["steps"]
    req = pl.read_ndjson(f"{d}/requests.ndjson")
    for s in steps:
        own = req.filter((pl.col("step") == s["index"]) & (pl.col("phase") != "warmup") & (pl.col("status") != "failed"))
        # a request the run cancelled before it answered counts as "at least its age" at its
        # end or its step's close, whichever came first; one that ended after its step
        # closed, its age at the close: both step_e2e_ms
        ttft = own.select(pl.coalesce("ttft_ms", "step_e2e_ms"))["ttft_ms"]
        e2e = own["step_e2e_ms"]
        # ---------------------------------------------------------------------------
        assert own["ttft_ms"].drop_nulls().len() == s["requests_first_token"]
        assert own.filter(pl.col("ttft_ms").is_null()).height == s["censored_ttft"]
        assert abs(ttft.quantile(0.5, "linear") - s["median_ttft_ms"]) <= 0.002
        assert abs(ttft.quantile(0.99, "linear") - s["p99_ttft_ms"]) <= 0.002
        assert abs(e2e.quantile(0.5, "linear") - s["median_e2e_latency_ms"]) <= 0.002


def test_probe_measures_its_own_requests_until_one_answers(healthy_sim, tmp_path):
    """After the ramp, the C=1 probe sends no warm-up request (issue 42 case 17): every
    request it sends is labelled `probe` and is its own; it holds probe_s and until one of
    them answered, so it always reports a TTFT and an ITL; E2E is a bound while its request
    still runs."""
    preset = parse_preset(
        {"name": "p", "workload": {"input_len": 8, "output_len": 24}, "ramp": {"concurrency": [8], "warmup_s": 0.3, "hold_s": 0.7, "min_requests": 1}, "after": {"probe_s": 2.0}},
        "p.toml",
    )
    cfg = EngineConfig(url=healthy_sim.url, concurrency=8, workload=WorkloadConfig(input_len=8, output_len=24), out_dir=tmp_path / "s", live_steps=False, use_nvml=False)

    outcome = run_preset_headless(cfg, preset)
    probe = outcome.probe
    assert probe is not None and probe.phase == "probe" and probe.concurrency == 1
    assert probe.requests_first_token >= 1 and probe.median_ttft_ms is not None and probe.median_itl_ms is not None
    assert probe.duration_s < 2.0 + 1.5  # probe_s, then no waiting for answers to end
    if probe.completed == 0:  # its request still runs: its age is all E2E can say
        assert probe.median_e2e_latency_ms_bound and probe.censored_e2e >= 1
    req = pl.read_ndjson(tmp_path / "s" / "requests.ndjson")
    rows = req.filter(pl.col("step") == probe.index)
    assert rows.filter(pl.col("phase") == "warmup").height == 0
    assert rows.height == rows.filter(pl.col("phase") == "probe").height == probe.requests_sent >= 1


@pytest.mark.timing  # timeline rows' wall-clock spacing
def test_timeline_rows_cover_one_second_under_a_busy_loop():
    """The ticker wakes on absolute deadlines: a loop held 120 ms at a time still gives
    rows one second apart, and a row after a longer stall says how long it covers."""
    from redline.engine.measure.timeline import tick

    seconds: list[float] = []

    async def go():
        t0 = time.perf_counter()
        task = asyncio.create_task(tick(t0, seconds.append, lambda now: None))

        async def busy():
            while True:
                time.sleep(0.12)  # holds the loop
                await asyncio.sleep(0.03)

        hog = asyncio.create_task(busy())
        await asyncio.sleep(4.6)
        for t in (task, hog):
            t.cancel()
        await asyncio.gather(task, hog, return_exceptions=True)
        return t0

    t0 = asyncio.run(go())
    assert len(seconds) == 4
    for k, t in enumerate(seconds, 1):
        assert 0 <= t - (t0 + k) < 0.2, (k, t - t0)  # never drifts: deadline k, late by at most one hold


def test_timeline_row_divides_by_its_real_interval():
    from collections import Counter

    from redline.engine.measure.live_metrics import LiveStats
    from redline.engine.measure.timeline import timeline_row

    row = timeline_row(t_wall=0.0, interval_s=2.5, sec=Counter(out=500, req=5, errors=1, **{"in": 250}), stats=LiveStats(), state="running",
                       target_c=8, in_flight=8, backing_off=0, server=None, health=None, gpus=[])
    assert row["interval_s"] == 2.5 and row["output_tok_s"] == 200.0 and row["req_s"] == 2.0 and row["input_tok_s"] == 100.0
