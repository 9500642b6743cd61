"""Find the limit: SLOs and goodput, the adaptive knee search, guard rails (against the sim)."""

from __future__ import annotations

import asyncio
import json

import polars as pl
import pytest

from redline.engine.core.config import EngineConfig
from redline.engine.core.engine import Engine
from redline.engine.measure.slo import Slo, SloError, parse_slo
from redline.engine.measure.step_result import StepResult
from redline.engine.preset import parse_preset
from redline.engine.rules.guard import GuardError, parse_guard
from redline.engine.rules.knee_search import KneeSearch
from redline.engine.workload.prompts import WorkloadConfig

from helpers import CAP8_SIM, run_preset_headless, steady_in, until

FAST = ("--set", "decode_base_s=0.01", "--set", "decode_per_seq_s=0.0001")


def test_slo_flag_parses_and_rejects_with_one_line():
    s = parse_slo("ttft=2s,itl=100ms,e2e=1m,tpot=50,ttft_p99=3s,attainment=95%")
    assert (s.ttft_ms, s.itl_ms, s.e2e_ms, s.tpot_ms, s.ttft_p99_ms, s.attainment) == (2000, 100, 60000, 50, 3000, 0.95)
    for bad, needle in (("ttft=fast", "'fast'"), ("speed=2s", "unknown SLO 'speed'"), ("ttft", "NAME=VALUE"), ("attainment=2", "attainment"), ("", "at least one")):
        with pytest.raises(SloError) as ei:
            parse_slo(bad)
        assert needle in str(ei.value) and "\n" not in str(ei.value)
    g = parse_guard("errors=5%,ttft_p99=10s,gpu_temp=85")
    assert (g.error_rate, g.ttft_p99_ms, g.gpu_temp_c) == (0.05, 10000, 85)
    with pytest.raises(GuardError):
        parse_guard("errors=150%")


def _run(sim_url, preset, tmp_path, slo=None, conc=4, out_len=24):
    cfg = EngineConfig(url=sim_url, concurrency=conc, workload=WorkloadConfig(input_len=16, output_len=out_len), out_dir=tmp_path / "s",
                       live_steps=False, use_nvml=False, slo=slo)

    return run_preset_headless(cfg, preset)


# a closing figure against the log's stamps: a request whose last byte arrived just before
# the close but was read after it (a loop behind, at two workers a core) is the record's,
# not the close's (66 for 67 once in CI); test_step_truth's shared run checks the same here
@pytest.mark.timing
@pytest.mark.slow
def test_goodput_equals_a_hand_count_and_the_slo_rule_names_the_slo(sim_factory, tmp_path):
    """request_goodput and slo_attainment of each step, recounted from requests.ndjson; the
    step whose requests queue past the TTFT bound ends the ramp as `slo`. Each step closes at
    2.5 s (max_hold_s): the SLO counts requests, it needs no steady throughput (which would hold
    each step STEADY_MIN_S = 4 s or more)."""
    sim = sim_factory("pp-capped", extra_args=(*CAP8_SIM, *FAST))
    preset = parse_preset({"workload": {"input_len": 16, "output_len": 24},
                           "ramp": {"concurrency": [4, 8, 12], "warmup_s": 0.5, "hold_s": 2.0, "min_requests": 4, "max_hold_s": 2.5},
                           "slo": {"ttft_ms": 100, "e2e_ms": 5000}}, "g.toml")
    out = _run(sim.url, preset, tmp_path)
    req = pl.read_ndjson(tmp_path / "s" / "requests.ndjson")
    for s in out.steps:
        end = s.t_start + s.duration_s
        own = req.filter((pl.col("step") == s.index) & (pl.col("phase") == "measure"))
        done = own.filter(pl.col("t_send") + pl.col("e2e_ms").fill_null(1e12) / 1000 <= end + 1e-5)
        ok = done.filter(pl.col("status") == "ok")
        assert s.completed == ok.height
        # goodput counts like throughput: the window's completions (whoever sent them) that met the SLO
        t_done = pl.col("t_send") + pl.col("e2e_ms") / 1000
        win = req.filter((pl.col("status") == "ok") & (pl.col("phase") != "calibration") & (t_done >= s.t_start) & (t_done <= end + 1e-5))
        win_good = win.filter((pl.col("ttft_ms") <= 100.0) & (pl.col("e2e_ms") <= 5000.0))
        assert round(s.request_goodput * s.duration_s) == win_good.height  # the same requests, counted by hand
        share = win_good["output_tokens"].sum() / win["output_tokens"].sum()
        assert s.output_goodput == pytest.approx(s.output_throughput * share, rel=2e-3, abs=0.01)
        assert 0.0 <= s.slo_attainment <= 1.0
    c4, c8, c12 = out.steps
    assert c4.slo_attainment == 1.0 and c8.slo_attainment >= 0.9  # up to the cap of 8: nothing queues
    assert c12.slo_attainment < 0.9  # four of twelve wait in the queue past 100 ms
    br = out.break_result
    # last good: the best of C=4 and C=8 that decides (steady, its noise known: 2.5 s steps often are not)
    deciding = [s for s in (c4, c8) if s.steady and s.output_throughput_se is not None]
    expected = max(deciding, key=lambda s: s.output_throughput).concurrency if deciding else None
    assert br is not None and br.reason == "slo" and br.concurrency == 12 and br.last_good_concurrency == expected, (br, deciding)
    assert "TTFT≤100 ms" in br.detail
    summary = json.loads((tmp_path / "s" / "summary.json").read_text())
    assert {"request_goodput", "output_goodput", "slo_attainment"} <= set(summary["steps"][0])
    assert summary["slo"] == {"ttft_ms": 100.0, "e2e_ms": 5000.0, "attainment": 0.9}


def _search_preset(start, top, slo=None, out_len=24, **ramp):
    """Points of 2 s: each called steady on 2 whole seconds (of ~200 decode steps on FAST),
    not STEADY_MIN_S = 4 (tests/helpers/redline.py steady_in)."""
    d = {"workload": {"input_len": 16, "output_len": out_len},
         "ramp": {"mode": "search", "start": start, "max": top, "warmup_s": 0.5, "hold_s": 2.0, "min_requests": 4, "resolution": 0.1, **ramp},
         "stop": {"plateau_gain": 0.05}}
    if slo:
        d["slo"] = slo
    return steady_in(parse_preset(d, "search.toml"), 2)


# a knee and an SLO level read off measured curves (conftest.py's id lists named this test by its
# old name, test_search_finds_the_pp_capped_cap_for_both_answers, and lost it at the rename)
@pytest.mark.timing
@pytest.mark.slow
def test_search_finds_a_cap_of_8_for_both_answers(sim_factory, tmp_path):
    """A server that runs 8 at a time (pp-capped's numbers without pp, CAP8_SIM): the throughput knee and the largest C whose requests get a
    first token within 400 ms are both 8. Its 8 decode in lockstep (same output length), so at
    C=9 one request of each batch of 8 waits a whole batch (96 tokens, ~1 s) in the queue: 7 of
    8 meet the bound, an attainment of ~0.875 that a 2 s point reads anywhere in 0.86-0.93,
    astride the default 0.9. The SLO asks 95 % of requests, which C=9 cannot reach; C=8's TTFTs
    are ~20 ms, far enough under 400 ms that a busy machine's hiccup (129 ms seen) is no miss."""
    sim = sim_factory("pp-capped", extra_args=(*CAP8_SIM, *FAST))
    out = _run(sim.url, _search_preset(4, 64, slo={"ttft_ms": 400, "attainment": 0.95}, out_len=96), tmp_path, out_len=96)
    assert out.search["knee_concurrency"] == 8, out.search
    assert out.search["max_slo_concurrency"] == 8, out.search
    pts = out.search["points"]
    assert pts[:3] == [4, 8, 16] and all(pts.count(c) <= 2 for c in pts)  # a stall is measured once more, no point thrice
    summary = json.loads((tmp_path / "s" / "summary.json").read_text())
    assert summary["search"] == {**out.search}
    assert summary["search"]["duration_s"] > 0


@pytest.mark.timing  # a knee read off a measured curve
@pytest.mark.slow
def test_search_finds_the_healthy_knee(sim_factory, tmp_path):
    """A healthy server capped at 32 running (a second profile): the knee is 32 within one
    bisection step, and no C beyond the cap is called the knee."""
    sim = sim_factory("healthy", extra_args=(*FAST, "--set", "max_running_requests=32", "--set", "ceiling_tok_s=100000"))
    out = _run(sim.url, _search_preset(8, 128), tmp_path, conc=8)
    knee = out.search["knee_concurrency"]
    assert 29 <= knee <= 32, out.search
    assert out.search["max_slo_concurrency"] is None  # no SLO given


def _res(c, tok, ttft=100.0, completed=20, failed=0):
    return StepResult(concurrency=c, duration_s=10, completed=completed, failed=failed, output_throughput=tok, input_throughput=0,
                      request_throughput=1, p99_ttft_ms=ttft, steady=True, output_throughput_se=0.0)


def test_search_plan_against_a_known_curve():
    """Without a server: throughput min(C, 100) x 10 and TTFT that jumps past C=100."""
    s = KneeSearch(8, 1024, resolution=0.05, slo=Slo(ttft_p99_ms=500.0))
    while (c := s.next()) is not None:
        s.observe(c, _res(c, min(c, 100) * 10.0, ttft=100.0 if c <= 100 else 2000.0))
        assert len(s.points) < 30
    r = s.result(1.0)
    # the knee is C=95 exactly (950 tok/s is 95 % of 1000): within one resolution of it
    assert 95 <= r.knee_concurrency <= 100 and 96 <= r.max_slo_concurrency <= 100, r
    assert r.points[:6] == [8, 16, 32, 64, 128, 256]  # grown until the curve flattened (256 steady and flat: believed at once)
    assert len(r.points) <= 14  # then narrowed both brackets to 5 %


def test_guard_watch_drops_to_the_last_good_c_after_a_sustained_crossing():
    from redline.engine.rules.guard import GuardSpec, GuardWatch

    g = GuardWatch(GuardSpec(error_rate=0.05), sustain_s=3)
    for _ in range(3):
        assert g.second(16, 0.0, None, None) is None
    assert g.last_good == 16
    assert g.second(64, 0.2, None, None) is None and g.second(64, 0.2, None, None) is None  # 2 s: not yet
    assert g.second(64, 0.01, None, None) is None  # a clean second resets the count
    assert [g.second(64, 0.2, None, None) for _ in range(3)] == [None, None, 16]
    assert "errors 20.0 % over 5 %" in g.reason
    # no good C below: halve
    h = GuardWatch(GuardSpec(gpu_temp_c=85), sustain_s=2)
    assert [h.second(40, None, None, 90.0) for _ in range(2)] == [None, 20]


@pytest.mark.slow
def test_a_guard_drops_the_load_when_the_fragile_server_starts_failing(sim_factory, tmp_path):
    """fragile answers 503 above 48 in flight: at C=80 the error guard trips within seconds and
    the engine goes back to C=32, where it was good, and says why."""
    import time as _t

    from redline.engine.rules.guard import parse_guard

    sim = sim_factory("fragile", extra_args=FAST)
    cfg = EngineConfig(url=sim.url, concurrency=32, workload=WorkloadConfig(input_len=16, output_len=24), out_dir=tmp_path / "s",
                       use_nvml=False, guard=parse_guard("errors=5%"))

    async def go():
        e = Engine(cfg)
        await e.start()
        try:
            # 5 clean seconds at 32: the last good C (bounded; it took 7 s of sleep before)
            assert await until(lambda: e.ticker.guard.last_good == 32, 15.0), e.ticker.guard.last_good
            e.set_concurrency(80)
            t0 = _t.monotonic()
            while e.controller.concurrency != 32 and _t.monotonic() - t0 < 20:
                await asyncio.sleep(0.2)
            return e.controller.concurrency, [l.text for l in e.snapshot.log], e.snapshot.warnings
        finally:
            await e.stop("quit")

    target, log, warnings = asyncio.run(go())
    assert target == 32, log[-10:]
    assert any(t.startswith("guard: errors") and "dropped from C=80 to C=32" in t for t in log), log[-10:]
    events = pl.read_ndjson(tmp_path / "s" / "events.ndjson")
    assert events.filter(pl.col("kind") == "guard").height >= 1  # the drop itself, logged as a guard step


def test_probe_lane_stays_out_of_the_load_and_the_load_out_of_it(sim_factory, tmp_path):
    """With the lane on beside C=8: lane rows are phase 'lane', each step's own counts hold no
    lane request, the lane's TTFT comes only from lane rows, and ids stay unique."""
    sim = sim_factory("healthy", extra_args=FAST)
    cfg = EngineConfig(url=sim.url, concurrency=8, workload=WorkloadConfig(input_len=16, output_len=24), out_dir=tmp_path / "s", use_nvml=False)

    async def go():
        e = Engine(cfg)
        await e.start()
        try:
            assert e.toggle_lane() is True
            await asyncio.sleep(4.5)
            snap = e.snapshot
            e.set_concurrency(16)  # closes the live step at C=8
            await asyncio.sleep(0.5)
            return snap, e.steps
        finally:
            await e.stop("quit")

    snap, steps = asyncio.run(go())
    assert snap.lane_on and snap.lane_ttft_ms is not None and snap.lane_itl_ms is not None
    req = pl.read_ndjson(tmp_path / "s" / "requests.ndjson")
    assert req["rid"].n_unique() == req.height
    lane = req.filter(pl.col("phase") == "lane")
    load = req.filter(pl.col("phase") == "live")
    assert lane.height >= 3 and load.height > lane.height
    s8 = next(s for s in steps if s.concurrency == 8)
    own = load.filter(pl.col("step") == s8.index)
    assert s8.requests_sent == own.height  # lane requests are not the step's own
    lane8 = lane.filter((pl.col("step") == s8.index) & (pl.col("t_send") + pl.col("ttft_ms") / 1000 <= s8.t_start + s8.duration_s))
    assert s8.lane_median_ttft_ms == pytest.approx(lane8["ttft_ms"].quantile(0.5, "linear"), abs=0.002)
    # and the load's TTFT is its own (every own request, however late it answered: the
    # step's final record): recomputed without the lane rows
    assert s8.final and s8.censored_ttft == 0
    own_ttft = own.filter(pl.col("status") != "failed")["ttft_ms"].drop_nulls()
    assert s8.median_ttft_ms == pytest.approx(own_ttft.quantile(0.5, "linear"), abs=0.002)


def test_report_shows_goodput_beside_throughput():
    from redline.engine.rules.step_text import format_step_line, format_step_table

    with_slo = StepResult(concurrency=8, duration_s=10, completed=20, failed=0, output_throughput=100.0, input_throughput=0,
                          request_throughput=2, output_goodput=80.5, request_goodput=1.6, slo_attainment=0.8)
    table = format_step_table([with_slo])
    assert "good tok/s" in table and "80.5" in table and "80 %" in table
    assert "goodput 80.5 tok/s (SLO met 80 %)" in format_step_line(with_slo)
    plain = StepResult(concurrency=8, duration_s=10, completed=20, failed=0, output_throughput=100.0, input_throughput=0, request_throughput=2)
    assert "good tok/s" not in format_step_table([plain]) and "goodput" not in format_step_line(plain)


def test_report_compares_goodput_across_sessions():
    from redline.engine.report.compare import session_from_steps
    from redline.tui.cli.report import format_comparison

    def st(c, tok, good=None, att=None):
        return StepResult(concurrency=c, duration_s=10, completed=20, failed=0, output_throughput=tok, input_throughput=0,
                          request_throughput=1, output_goodput=good, slo_attainment=att)

    a = session_from_steps("tp8", [st(8, 100.0, 95.0, 0.95), st(16, 190.0, 120.0, 0.63)])
    b = session_from_steps("pp8", [st(8, 90.0, 90.0, 1.0)])
    text = format_comparison([a, b])
    assert "goodput (SLOs)" in text and "120.0" in text and "63 %" in text and "100 %" in text
    assert "goodput (SLOs)" not in format_comparison([session_from_steps("x", [st(8, 100.0)])])
