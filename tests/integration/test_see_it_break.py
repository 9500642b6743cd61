"""Issue 42 "See it break", the preset runner's part: a server that hangs, refuses or dies is
judged broken by the ramp, the search and the probe, and every output says where and why.

Each test starts its own sim on 127.0.0.1 (tests/conftest.py), with FAST decode steps and
short holds, so a ramp runs in seconds.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time

import httpx
import pytest
from aiohttp import web

from redline.engine.core.config import EngineConfig
from redline.engine.measure.step_result import StepResult
from redline.engine.preset import parse_preset
from redline.engine.rules.breaks import Place, RampJudge, RunEvent
from redline.engine.rules.knee_search import KneeSearch
from redline.engine.rules.step_text import format_break_line, format_step_table
from redline.engine.rules.verdicts import StopRules, StopSpec
from redline.engine.workload.prompts import WorkloadConfig

from helpers import CAP8_SIM, ROOT, ThreadedServer, redline_command, run_preset_headless, steady_in

FAST = ("--set", "decode_base_s=0.01", "--set", "decode_per_seq_s=0.0001")


def _cfg(url: str, tmp_path, conc: int = 4, out_len: int = 64, in_len: int = 16, **kw) -> EngineConfig:
    return EngineConfig(url=url, concurrency=conc, workload=WorkloadConfig(input_len=in_len, output_len=out_len),
                        out_dir=tmp_path / "s", live_steps=False, use_nvml=False, **kw)


def _events(tmp_path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "s" / "events.ndjson").read_text().splitlines() if line.strip()]


def t_first_break(tmp_path) -> float:
    return next(e["t"] for e in _events(tmp_path) if e["kind"] == "break")


def _summary(tmp_path) -> dict:
    return json.loads((tmp_path / "s" / "summary.json").read_text())


def test_a_hung_server_breaks_as_stalled_within_stall_s(sim_factory, tmp_path):
    """Every request stops streaming after 16 tokens and the connection stays open: nothing
    fails, nothing ends, and no rule on a step's figures could fire. The ramp ends as
    `stalled` at the step it hung in, stall_s (1.5 s) after the last token the sim wrote,
    naming how many waited and how long; the probe after it stalls the same way and ends."""
    sim = sim_factory("healthy", extra_args=(*FAST, "--set", "stall_after_tokens=16"))
    preset = parse_preset({"workload": {"input_len": 16, "output_len": 64},
                           "ramp": {"concurrency": [4, 8], "warmup_s": 0.5, "hold_s": 3.0, "min_requests": 1},
                           "stop": {"stall_s": 1.5, "error_rate": 0.05}, "after": {"probe_s": 2.0}}, "hang.toml")
    out = run_preset_headless(_cfg(sim.url, tmp_path), preset)
    br = out.break_result
    assert br is not None and br.reason == "stalled" and br.concurrency == 4, br
    assert re.fullmatch(r"stalled: 4 requests in flight, no token for 1\.\d s at C=4", br.detail), br.detail
    assert br.last_good == "none" and br.good_text == "no step passed"
    assert [s.concurrency for s in out.steps] in ([], [4])  # no step above the hang was run
    summary = _summary(tmp_path)
    assert summary["break"]["reason"] == "stalled" and summary["break"]["concurrency"] == 4
    # said within stall_s (plus a poll and a busy machine's slack) of the sim's last write
    rows = httpx.get(sim.url + "/sim/requests?chunks=1", timeout=5).json()
    last_write = max(t for r in rows for t in r["chunk_times"] if t < t_first_break(tmp_path))
    ev = _events(tmp_path)
    t_break = next(e["t"] for e in ev if e["kind"] == "break" and e["text"].startswith("stalled: 4 requests"))
    assert 1.5 <= t_break - last_write <= 1.5 + 1.5, t_break - last_write
    # the probe: its one request hangs too; it ends on the same rule, said so
    assert any(e["kind"] == "break" and re.match(r"probe: stalled: 1 request in flight, no token for 1\.\d s at C=1", e["text"]) for e in ev), ev
    assert out.probe is not None and out.probe.partial and out.probe.phase == "probe"


# -- case 6: the knee search is judged by the preset's [stop] rules ---------------------------
def _pt(c: int, tok: float, ttft_ms: float = 200.0, failed: int = 0, completed: int = 20, steady: bool = True, **kw) -> StepResult:
    return StepResult(concurrency=c, duration_s=10, completed=completed, failed=failed, output_throughput=tok, input_throughput=0,
                      request_throughput=1, p99_ttft_ms=ttft_ms, steady=steady, output_throughput_se=1.0, index=kw.pop("index", c), **kw)


def test_a_search_point_that_fires_a_stop_rule_bounds_the_search():
    """The case as filed: p99 TTFT 60 s at C=32 against a 10 s limit, then 40 % errors at
    C=64; the old search ignored both and answered knee C=17 with no break. Judged by [stop]:
    the lowest point over the TTFT limit bounds the search (nothing above it is measured, the
    bracket below it is narrowed), it is the search's break, and the knee is a load where the
    limit still holds (the curve plateaus at 16: 800 tok/s)."""
    rules = StopRules(StopSpec(plateau_gain=0.05, p99_ttft_ms=10000, error_rate=0.05))
    s = KneeSearch(8, 128, resolution=0.05, rules=rules)

    def at(c: int) -> StepResult:
        tok = min(c, 16) * 50.0
        return _pt(c, tok, ttft_ms=200.0 if c <= 20 else 60000.0, failed=8 if c >= 64 else 0, completed=12 if c >= 64 else 20)

    while (c := s.next()) is not None:
        s.observe(c, at(c))
        assert len(s.points) < 20
    r = s.result(1.0)
    assert max(r.points) == 32 and 64 not in r.points, r.points  # nothing above the first breach
    assert r.knee_concurrency == 16, r
    assert at(r.knee_concurrency).p99_ttft_ms <= 10000
    assert "broke a [stop] rule (latency)" in r.knee_reason, r.knee_reason
    br = RampJudge(rules, search=True).verdict(s.steps)
    assert br is not None and br.reason == "latency" and 21 <= br.concurrency <= 22, br  # narrowed to 5 % of the breach
    assert br.last_good_concurrency == 16 and f"p99 TTFT 60000 ms over limit 10000 ms at C={br.concurrency}" in br.detail, br


def test_a_search_bounded_at_its_first_point_looks_below_it():
    """A first point over the limit: the search goes down by its factor until a load holds the
    limit, and the knee is that load (the only one below the break)."""
    s = KneeSearch(32, 128, resolution=0.1, rules=StopRules(StopSpec(p99_ttft_ms=1000)))
    while (c := s.next()) is not None:
        s.observe(c, _pt(c, c * 10.0, ttft_ms=500.0 if c <= 8 else 5000.0))
        assert len(s.points) < 12
    r = s.result(1.0)
    assert r.points[:3] == [32, 16, 8], r.points
    assert r.knee_concurrency is not None and r.knee_concurrency >= 8 and all(c <= 32 for c in r.points), r


def test_a_search_without_stop_rules_is_not_bounded_by_errors_it_does_not_judge():
    """One definition: the search's errors and collapse are the preset's [stop] rules; with no
    [stop] error_rate, failures do not bound it (a failure is still every bound's miss: the SLO)."""
    s = KneeSearch(8, 32, resolution=0.25)
    for c in (8, 16, 32):
        s.observe(c, _pt(c, c * 10.0, failed=10))
    assert s.bound() is None
    s2 = KneeSearch(8, 32, resolution=0.25, rules=StopRules(StopSpec(error_rate=0.05, collapse=0.2)))
    s2.observe(8, _pt(8, 80.0))
    s2.observe(16, _pt(16, 20.0))  # collapsed: -75 %
    assert s2.bound() == (16, "collapse")


def test_a_search_point_whose_requests_failed_in_a_row_bounds_it_and_the_search_narrows_below():
    """C=64's requests failed 20 in a row (the runner ended the point: engine/run/run_watch.py):
    no knee above it, the bracket below it is halved, and nothing above it is measured."""
    s = KneeSearch(16, 256, resolution=0.1)
    for c in (16, 32):
        assert s.next() == c
        s.observe(c, _pt(c, c * 10.0))
    assert s.next() == 64
    s.observe(64, _pt(64, 0.0, completed=0, failed=20))
    s.bound_at(64)
    assert s.bound() == (64, "errors")
    while (c := s.next()) is not None:
        assert 32 < c < 64, c
        s.observe(c, _pt(c, c * 10.0))
    r = s.result(1.0)
    assert r.knee_concurrency is not None and r.knee_concurrency < 64 and "C=64 broke a [stop] rule (errors)" in r.knee_reason, r


def test_the_search_finds_a_knee_where_the_latency_limit_holds(sim_factory, tmp_path):
    """A server whose tok/s keeps rising to C~380 (decode step 20 ms + 1 ms a request, no cap:
    +24 % from 32 to 64, +13 % to 128) while its p99 TTFT (about 1.75 decode steps) passes
    120 ms near C=50: `[stop] p99_ttft_ms = 120` bounds the search, its break is `latency`, and
    the knee is a load whose own p99 TTFT holds the limit, far below the plateau's knee (which
    the search that ignored [stop] answered)."""
    sim = sim_factory("healthy", extra_args=("--set", "decode_base_s=0.02", "--set", "decode_per_seq_s=0.001", "--set", "prefill_per_token_s=0",
                                             "--set", "ceiling_tok_s=100000", "--set", "max_running_requests=512"))
    preset = steady_in(parse_preset({
        "workload": {"input_len": 16, "output_len": 32},
        "ramp": {"mode": "search", "start": 16, "max": 512, "warmup_s": 0.5, "hold_s": 2.0, "min_requests": 4, "max_hold_s": 3.0, "resolution": 0.2},
        "stop": {"plateau_gain": 0.05, "p99_ttft_ms": 120}, "after": {"probe_s": 0}}, "search.toml"), 2)
    out = run_preset_headless(_cfg(sim.url, tmp_path, conc=16, out_len=32), preset)
    summary = _summary(tmp_path)
    steps = [(s["concurrency"], s["p99_ttft_ms"], s["p99_ttft_ms_bound"], s["final"]) for s in summary["steps"]]
    assert summary["break"] is not None and summary["break"]["reason"] == "latency", (summary["break"], out.search, steps)
    broke = summary["break"]["concurrency"]
    knee = summary["knee_concurrency"]
    assert knee is not None and knee < broke <= 128, (summary, steps)  # (a point judged at its close may be judged again on its final figures)
    at_knee = [s for s in summary["steps"] if s["concurrency"] == knee]
    assert at_knee and all(s["p99_ttft_ms"] <= 120 for s in at_knee), at_knee
    assert "broke a [stop] rule (latency)" in summary["knee_reason"]


# -- case 10: break and last good are judged again on final figures ---------------------------
def test_the_break_is_judged_again_when_a_steps_final_figures_land():
    """At its close C=16's TTFT was a bound under the limit (its queued requests had waited
    0.8 s); their final TTFTs are 1.6 s: the break moves to C=16, last good C=8. A run-time
    event later in the ramp (stalled at C=32) is the break only when no earlier step fired."""
    rules = StopRules(StopSpec(p99_ttft_ms=1000, error_rate=0.05))
    judge = RampJudge(rules)
    c8 = _pt(8, 400.0, ttft_ms=50.0, index=1)
    closing = _pt(16, 420.0, ttft_ms=800.0, index=2, p99_ttft_ms_bound=True, final=False)
    final = _pt(16, 420.0, ttft_ms=1600.0, index=2)
    judge.events.append(RunEvent("stalled", "stalled: 32 requests in flight, no token for 10.0 s at C=32", Place(32), before=2))
    at_close = judge.verdict([c8, closing])
    assert at_close is not None and at_close.reason == "stalled" and at_close.where == "C=32" and at_close.last_good == "C=16"
    again = judge.verdict([c8, final])
    assert again.reason == "latency" and again.concurrency == 16 and again.last_good_concurrency == 8, again
    assert again.good_text == "last good C=8"


def test_a_break_is_placed_at_its_steps_load_never_none():
    """A trace replay breaks at its speed (`x2`, not its in-flight cap `C=1024`), a rate ramp at
    its rate; a break with no good step says `no step passed`, never `C=None`."""
    judge = RampJudge(StopRules(StopSpec(p99_ttft_ms=1000)))
    x1 = _pt(1024, 300.0, ttft_ms=200.0, index=1, mode="trace", trace_speed=1.0)
    x2 = _pt(1024, 310.0, ttft_ms=5000.0, index=2, mode="trace", trace_speed=2.0)
    br = judge.verdict([x1, x2])
    assert (br.where, br.last_good, br.speed, br.last_good_speed) == ("x2", "x1", 2.0, 1.0), br
    assert format_break_line(br).startswith("break: latency at x2, last good x1")
    r4 = _pt(256, 300.0, ttft_ms=5000.0, index=3, mode="rate", request_rate=4.0)
    only = judge.verdict([r4])
    assert only.where == "4 req/s" and only.last_good == "none" and "None" not in format_break_line(only)
    table = format_step_table([x1, x2], br)
    assert "<- break: latency" in table.splitlines()[3] and "<- last good" in table.splitlines()[2], table


def test_a_step_that_breaks_only_on_its_final_figures_is_the_break(sim_factory, tmp_path):
    """A cap of 8 (pp-capped's old numbers, CAP8_SIM), each request 150 decode steps (~1.5 s): at C=16 half the
    step's requests queue ~1.5 s for a slot. The step closes after 0.8 s, while they still wait:
    its p99 TTFT is a bound (>= 0.8 s) under the 1 s limit and no rule fires; the ramp goes on
    to C=8. When they get their first tokens, C=16's final figures breach the limit: the break
    is judged again, `latency at C=16`, in summary.json and in the log (no step passed: 0.8 s
    steps are never steady, and only steady steps are last good)."""
    sim = sim_factory("pp-capped", extra_args=(*CAP8_SIM, *FAST))
    preset = parse_preset({"workload": {"input_len": 16, "output_len": 150},
                           "ramp": {"concurrency": [8, 16, 4], "warmup_s": 0, "hold_s": 0.8, "min_requests": 1, "max_hold_s": 0.8},
                           "stop": {"p99_ttft_ms": 1000}, "after": {"probe_s": 0}}, "late.toml")
    lines: list[str] = []
    out = run_preset_headless(_cfg(sim.url, tmp_path, conc=8, out_len=150), preset, on_line=lines.append)
    c16 = next(s for s in _summary(tmp_path)["steps"] if s["concurrency"] == 16)
    assert c16["final"] and c16["p99_ttft_ms"] > 1000 and not c16["p99_ttft_ms_bound"], c16
    br = _summary(tmp_path)["break"]
    assert br is not None and (br["reason"], br["concurrency"], br["last_good_concurrency"]) == ("latency", 16, None), br
    assert any(e["kind"] == "break" and e["text"].startswith("judged again on the steps' final figures: break: latency at C=16; no step passed")
               for e in _events(tmp_path)), _events(tmp_path)
    assert [s.concurrency for s in out.steps][:2] == [8, 16]


# -- case 19: client-limited only when it could matter ------------------------------------------
def test_client_limited_only_when_the_lag_could_move_a_figure_past_its_limit_or_by_10_percent(tmp_path):
    """pp-capped until-it-breaks' C=32: p99 TTFT 75 s, 7x over its 10 s limit, measured over a
    second whose loop lagged 21 ms: the lag cannot explain it (65 s from the limit, 0.03 % of the
    figure), and its 70 ms ITL is the kernel's stamp: not client-limited. The same lag doubts a
    TTFT 10 ms from its limit, a 40 ms ITL the loop stamped, and an unknown lag doubts anything."""
    from redline.engine.session import SessionWriter
    from redline.engine.telemetry.client_doubt import client_doubted

    limits = {"p99_ttft_ms": 10000.0, "p99_itl_ms": 500.0}
    c32 = {"median_ttft_ms": 75000.0, "p99_ttft_ms": 75000.0, "median_itl_ms": 61.0, "p99_itl_ms": 70.0, "mean_tpot_ms": 60.0,
           "median_e2e_latency_ms": 75042.0, "p99_e2e_latency_ms": 75100.0}
    assert not client_doubted(c32, 21.0, limits, kernel_stamped=True)
    assert client_doubted(c32, 21.0, limits, kernel_stamped=False)  # the loop stamped its 70 ms ITL: 30 % of it
    assert client_doubted({**c32, "p99_ttft_ms": 10010.0}, 21.0, limits, kernel_stamped=True)  # 10 ms from the limit
    assert client_doubted({"median_ttft_ms": 150.0}, 21.0, {}, kernel_stamped=True)  # 14 % of a 150 ms TTFT
    assert client_doubted(c32, None, limits, kernel_stamped=True)  # a lag not measured is a doubt
    w = SessionWriter(tmp_path / "s", {"label": "x"}, fsync=False)
    w.doubt = lambda step, lag: client_doubted(step, lag, limits, kernel_stamped=True)
    t0 = w.t0
    for k in range(10):
        w.add_timeline({"t": t0 + k + 1, "interval_s": 1.0, "client_overloaded": k == 3, "client_cause": "machine_busy" if k == 3 else "",
                        "loop_lag_ms": 21.0 if k == 3 else 1.0})
    w.write_summary({"steps": [{**c32, "t_start": t0 + 1, "duration_s": 8.0, "client_limited": False},
                               {"median_ttft_ms": 40.0, "t_start": t0 + 1, "duration_s": 8.0, "client_limited": False}]})
    steps = json.loads((tmp_path / "s" / "summary.json").read_text())["steps"]
    assert [s["client_limited"] for s in steps] == [False, True]
    w.close("done")


# -- case 17: the probe as asked -------------------------------------------------------------
def test_the_probe_lasts_probe_s_plus_the_one_request_it_waits_for_and_its_requests_are_its_own(sim_factory, tmp_path):
    """A 500-token prompt takes the sim 1 s to prefill, a 300-token answer 3 s more. Asked for
    0.5 s, the probe waits for its request's first token (1-2 s: the sim finishes the prefill the
    abort interrupted) and says so; it sent that
    one request, labelled `probe` (no warm-up request, no second one started and cancelled), and
    its TTFT is that request's. The shipped `quick` preset's probe is long enough to be steady."""
    from redline.engine.constants import STEADY_MIN_S
    from redline.engine.preset import load_preset, resolve_preset

    sim = sim_factory("healthy", extra_args=(*FAST, "--set", "prefill_per_token_s=0.002"))
    preset = parse_preset({"workload": {"input_len": 500, "output_len": 300},
                           "ramp": {"concurrency": [2], "warmup_s": 0, "hold_s": 1.0, "min_requests": 1, "max_hold_s": 1.0},
                           "after": {"probe_s": 0.5}}, "probe.toml")
    lines: list[str] = []
    out = run_preset_headless(_cfg(sim.url, tmp_path, conc=2, out_len=300, in_len=500), preset, on_line=lines.append)
    probe = out.probe
    assert probe is not None and probe.phase == "probe"
    assert 0.8 <= probe.duration_s <= 3.5, probe.duration_s
    assert probe.requests_sent == 1 and probe.requests_first_token == 1, probe
    assert any(re.fullmatch(r"probe: held \d\.\d s, past probe_s 0\.5 s, until its request's first token", x) for x in lines), lines
    rows = [json.loads(x) for x in (tmp_path / "s" / "requests.ndjson").read_text().splitlines()]
    own = [r for r in rows if r["step"] == probe.index]
    assert [r["phase"] for r in own] == ["probe"], own
    assert 800 <= own[0]["ttft_ms"] <= 3500 and abs(own[0]["ttft_ms"] - probe.median_ttft_ms) < 1.0, own
    assert load_preset(resolve_preset("quick")).after.probe_s >= STEADY_MIN_S + 1


# -- cases 15 and 18: pp-capped until-it-breaks, one bound everywhere, its cause named ----------
UNTIL_IT_BREAKS_SCALED = """name = "until-it-breaks-scaled"
[workload]
api = "chat"
input_len = 1024
output_len = 2048
[ramp]
concurrency = [32, 64, 96]
warmup_s = 0.75
hold_s = 6
min_requests = 20
max_hold_s = 8
[stop]
plateau_gain = 0.05
p99_ttft_ms = 500
p99_itl_ms = 25
error_rate = 0.05
collapse = 0.2
[after]
probe_s = 1.5
"""


def test_pp_capped_until_it_breaks_prints_one_bound_everywhere_and_names_the_cap(sim_factory, tmp_path):
    """until-it-breaks on a cap of 8 (pp-capped's old numbers, CAP8_SIM; the pp gauge's own cause
    is tests/integration/test_engine_telemetry.py's), scaled down (time_scale 0.1: a 2048-token answer takes the
    capped server 12 s; the preset's times and limits scaled to match): at C=32 the server runs
    8 and queues 24, none of whose requests answers before the step closes. It breaks on
    latency at C=32 with no step passed; the p99 TTFT is one bound, the same in the step line,
    the end table, summary.json, `redline report`, the HTML page and the gate; and the end
    summary, summary.json, the report and the HTML page name the cap beside the break (it was
    said only mid-run)."""
    from helpers import finish, main_in_process, start_headless

    sim = sim_factory("pp-capped", extra_args=(*CAP8_SIM, "--set", "time_scale=0.1"))
    preset = tmp_path / "uib.toml"
    preset.write_text(UNTIL_IT_BREAKS_SCALED)
    out_dir = tmp_path / "run"
    rc, out, err = finish(start_headless(sim.url, preset, out_dir, "--gate", "ttft_p99@C=32<=1s"), timeout=120)
    assert rc == 4, (rc, out, err)  # the gate failed: a bound over 1 s
    summary = json.loads((out_dir / "summary.json").read_text())
    br = summary["break"]
    assert (br["reason"], br["concurrency"], br["last_good_concurrency"]) == ("latency", 32, None), br
    c32 = summary["steps"][0]
    assert c32["p99_ttft_ms_bound"] and c32["p99_ttft_ms"] > 500, c32
    bound = f"≥{c32['p99_ttft_ms']:.0f}"
    step_line = next(x for x in out.splitlines() if x.startswith("C=32 "))
    table_row = next(x for x in out.splitlines() if x.lstrip().startswith("32 ") and "break: latency" in x)
    assert f"p99 {bound} ms" in step_line and bound in table_row.split(), (bound, step_line, table_row)
    gate = summary["gate"]["results"][0]
    assert gate["measured"] == pytest.approx(c32["p99_ttft_ms"], abs=1e-3) and gate["bound"] and not gate["passed"], gate
    cause = "latency at C=32: server runs 8 of 32 in flight: max_running_requests 8"
    assert summary["cause"] == cause, summary.get("cause")
    assert f"cause: {cause}" in out.splitlines(), out
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main_in_process(["report", str(out_dir), "--html", str(tmp_path / "r.html")]) == 0
    report = buf.getvalue()
    assert f"cause: {cause}" in report.splitlines() and bound in next(x for x in report.splitlines() if "break: latency" in x and x.lstrip().startswith("32")).split(), report
    html = (tmp_path / "r.html").read_text()
    assert cause in html and f"{c32['p99_ttft_ms']:.0f}" in html


# -- case 14: a server that refuses everything ends the run --------------------------------------
class RefusingProxy(ThreadedServer):
    """A strict proxy on 127.0.0.1 whose catalogue is stale: /v1/models lists llama-3-70b (so
    the start's model check passes), and every chat request is refused as vLLM refuses a model
    it does not serve: HTTP 404 "The model 'llama-3-70b' does not exist." It counts them."""

    def __init__(self) -> None:
        self.refused = 0
        super().__init__()

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.refused += 1
        return web.json_response({"object": "error", "message": f"The model '{body.get('model')}' does not exist.",
                                  "type": "NotFoundError", "param": None, "code": 404}, status=404)

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "llama-3-70b", "object": "model", "owned_by": "proxy"}]})

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_post("/v1/chat/completions", self._chat)
        return app


@pytest.mark.server
def test_a_server_that_refuses_everything_ends_the_preset_and_the_held_run_with_its_reason(tmp_path):
    """The wrong model behind a strict proxy (case 14: `redline run quick` broke on errors after
    10 s, then its probe sent ~20 failing requests a second for 10 minutes; a plain held run
    exited 0 with `break: none`). Now 20 failures in a row end the preset's step as `errors` and
    its probe, in seconds, with the server's reason on the terminal; a held headless run ends
    with exit 3 and the reason on stderr."""
    from helpers import finish, start_headless

    reason = "HTTP 404: The model 'llama-3-70b' does not exist."
    with RefusingProxy() as proxy:
        preset = tmp_path / "q.toml"
        preset.write_text('[workload]\ninput_len = 16\noutput_len = 16\n[ramp]\nconcurrency = [8, 32]\nwarmup_s = 1\nhold_s = 6\n'
                          'min_requests = 5\nmax_hold_s = 8\n[stop]\nerror_rate = 0.05\n[after]\nprobe_s = 5\n')
        t0 = time.monotonic()
        rc, out, err = finish(start_headless(proxy.url, preset, tmp_path / "run", "--api", "chat", "--model", "llama-3-70b"), timeout=110)
        took = time.monotonic() - t0
        assert rc == 0 and took < 60, (rc, took, out, err)  # a break is the run's answer
        line = rf"break: errors at C=8; no step passed \(errors: (\d+) requests failed in a row at C=8 \({re.escape(reason)}\)\)"
        said = [m for x in out.splitlines() if (m := re.fullmatch(line, x))]
        assert said and 20 <= int(said[0].group(1)) < 60, out  # seen within a 50 ms poll of the 20th
        assert any(re.fullmatch(rf"probe: errors: \d+ requests failed in a row at C=1 \(the probe\) \({re.escape(reason)}\)", x)
                   for x in out.splitlines()), out
        summary = json.loads((tmp_path / "run" / "summary.json").read_text())
        assert summary["break"]["reason"] == "errors" and reason in summary["break"]["detail"]
        assert proxy.refused < 200, proxy.refused  # not hammered: the step and the probe each ended at 20 in a row
        n = proxy.refused
        held = subprocess.Popen([*redline_command(), "--headless", "--url", proxy.url, "--api", "chat", "--model", "llama-3-70b",
                                 "--out", str(tmp_path / "held"), "--no-nvml"], cwd=ROOT, env={**os.environ, "CI": "true"},
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        rc, out, err = finish(held, timeout=60)
        assert rc == 3, (rc, out, err)
        assert re.search(rf"redline: error: \d+ requests failed in a row: {re.escape(reason)}; all load stopped, session saved", err), err
        assert proxy.refused - n < 100


async def test_the_tui_says_a_streak_of_refusals_once_with_the_reason_and_holds_the_load():
    """In the TUI (no preset running) 20 failures in a row are said once, in a notice and the
    log, with the server's reason; the load is held as it is (no command changes it: the operator
    decides); a completed request ends the streak, and a new one is said again."""
    from dataclasses import replace

    from redline.engine.core import commands as C

    from e2e.test_screen import make_app, play

    app, host, snaps = make_app("healthy")
    reason = "HTTP 404: The model 'llama-3-70b' does not exist."
    last = snaps[-1]
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await play(pilot, host, snaps)
        before = len(host.sent)
        await play(pilot, host, [replace(last, failures_in_a_row=12, last_failure=reason)])
        assert not [c for c in host.sent[before:] if isinstance(c, C.Log)]
        await play(pilot, host, [replace(last, failures_in_a_row=n, last_failure=reason) for n in (20, 31, 57)])
        await play(pilot, host, [replace(last, failures_in_a_row=0), replace(last, failures_in_a_row=22, last_failure=reason)])
        notes = [str(n.message) for n in app._notifications]
    logged = [c for c in host.sent[before:] if isinstance(c, C.Log)]
    assert [c.kind for c in logged] == ["warning", "warning"], logged
    assert logged[0].text.startswith(f"20 requests failed in a row: {reason}; the load is held as it is"), logged[0]
    assert logged[1].text.startswith("22 requests failed in a row"), logged[1]
    assert sum(reason in n for n in notes) == 2, notes
    assert not [c for c in host.sent[before:] if not isinstance(c, C.Log)]  # nothing else: the load is held


# -- case 16 and the hung server: deaths and their victims ----------------------------------
def test_fragile_breaks_at_the_step_it_failed_in_and_its_last_good_has_no_failures(sim_factory, tmp_path):
    """quick on fragile, scaled down: at C=128 the server 503s half of what it gets past 48 and
    dies past 96 held for 2 s. The break names C=128 (it was `server_gone at C=128; last good
    C=32 (... stopped answering during C=32)`), and last good is a step with no failure (C=32's
    row read `done 32 fail 32`: the victims of the death counted as its errors)."""
    sim = sim_factory("fragile", extra_args=FAST)
    preset = steady_in(parse_preset({"workload": {"input_len": 16, "output_len": 64},
                                     "ramp": {"concurrency": [8, 32, 128], "warmup_s": 0.5, "hold_s": 2.5, "min_requests": 5, "max_hold_s": 3.0},
                                     "stop": {"plateau_gain": 0.05, "error_rate": 0.05, "collapse": 0.2}, "after": {"probe_s": 1.0}}, "q.toml"), 2)
    run_preset_headless(_cfg(sim.url, tmp_path, conc=8), preset)
    summary = _summary(tmp_path)
    br = summary["break"]
    assert br["reason"] in ("errors", "server_gone") and br["concurrency"] == 128 and "C=128" in br["detail"], br
    assert "C=32" not in br["detail"], br
    good = [s for s in summary["steps"] if s["concurrency"] == br["last_good_concurrency"]]
    assert br["last_good_concurrency"] in (8, 32) and good and all(s["failed"] == 0 for s in good), (br, summary["steps"])


def test_a_hung_server_is_stalled_above_its_knee(sim_factory, tmp_path):
    """The `hung` profile's scheduler stops after N completions (connections accepted, /health
    answering): capped at 8 running, it plateaus from C=8, and hangs after 250 completions,
    near the end of C=16. The ramp breaks as `stalled` (the sim's last token stall_s before the
    break), and the knee is below the hang."""
    sim = sim_factory("hung", extra_args=(*FAST, "--set", "hang_after=250", "--set", "max_running_requests=8", "--set", "ceiling_tok_s=100000"))
    preset = steady_in(parse_preset({"workload": {"input_len": 16, "output_len": 32},
                                     "ramp": {"concurrency": [4, 8, 12, 16, 32, 64], "warmup_s": 0.5, "hold_s": 2.5, "min_requests": 4, "max_hold_s": 3.0},
                                     "stop": {"stall_s": 1.5}, "after": {"probe_s": 0}}, "hang.toml"), 2)
    run_preset_headless(_cfg(sim.url, tmp_path, conc=4, out_len=32), preset)
    summary = _summary(tmp_path)
    br = summary["break"]
    assert br is not None and br["reason"] == "stalled" and br["concurrency"] >= 12, br
    rows = httpx.get(sim.url + "/sim/requests?chunks=1", timeout=5).json()
    last_write = max(t for r in rows for t in r["chunk_times"])
    t_break = t_first_break(tmp_path)
    assert 1.5 <= t_break - last_write <= 1.5 + 1.5, t_break - last_write
    assert summary["knee_concurrency"] is not None and summary["knee_concurrency"] < br["concurrency"], (summary["knee_reason"], br)


def test_a_stall_that_began_in_an_earlier_step_is_that_steps():
    """The silence began in C=128's hold and outlived its close: found 2 s into C=256's warm-up,
    the stall is C=128's (the step the server hung in), last good the best step before it."""
    from types import SimpleNamespace

    from redline.engine.run.ramp_record import RampRecord
    from redline.engine.run.run_watch import StallWatch

    w = StallWatch(stall_s=10.0)
    assert w.quiet(100.0, 128, 4990, (3, "C=128")) == 0.0  # tokens still coming
    assert w.quiet(101.0, 128, 5000, (3, "C=128")) == 0.0  # the last of them: the silence begins here ...
    assert w.quiet(109.0, 256, 5000, (4, "C=256")) == 8.0  # ... and outlives the step
    assert w.quiet(111.0, 256, 5000, (4, "C=256")) == 10.0 and w.began == (3, "C=128")
    steps = [_pt(8, 190.0, index=1), _pt(32, 670.0, index=2), _pt(128, 580.0, index=3, steady=False)]
    engine = SimpleNamespace(book=SimpleNamespace(steps=steps, break_result=None, cause=None, search=None, plateau_gain=None))
    ramp = RampRecord(engine, RampJudge(StopRules()))
    for s in steps:
        ramp.add(s)
    ev = ramp.event(("stalled", "stalled: 256 requests in flight, no token for 10.0 s since C=128 (at C=256)"), None, Place(256), w.began)
    assert ev.place == Place(128) and ev.before == 2
    ramp.judge.events.append(ev)
    br = ramp.judge_now()
    assert (br.reason, br.where, br.last_good) == ("stalled", "C=128", "C=32"), br


def test_forecasts_name_what_the_profile_knows_and_never_none():
    """`redline presets` and the headless banner forecast on the sim's model; a faulty profile
    is forecast where its knobs know the answer (fragile: refused at C=128, before it dies;
    flaky: 10 % of requests fail, errors at the first step; hung: stalled), a search on one is
    no forecast, and no forecast prints None (pp-capped until-it-breaks said `last good C=None`)."""
    from redline.engine.preset import load_preset, resolve_preset
    from redline.engine.run.estimate import estimate
    from redline.engine.sim.profiles import get_profile, profile_names

    def said(preset: str, profile: str) -> str:
        return estimate(load_preset(resolve_preset(preset)), get_profile(profile)).describe(profile)

    assert "expected: errors at C=128, last good C=32" in said("quick", "fragile")
    assert "expected: errors at C=8, no step passed" in said("quick", "flaky")
    assert "expected: stalled at C=128, last good C=32" in said("quick", "hung")
    # 64 run as 8 micro-batches of 8 (SGLang's pp): C=96's 32 queue for a whole answer
    assert "expected: latency at C=96, last good C=64" in said("until-it-breaks", "pp-capped")
    assert "expected: plateau at C=192, last good C=128" in said("until-it-breaks", "healthy")
    search = load_preset(resolve_preset("quick"))
    from redline.engine.preset.spec import as_search

    assert "no forecast: fragile's faults" in estimate(as_search(search, 256), get_profile("fragile")).describe("fragile")
    for profile in profile_names():
        for name in ("quick", "until-it-breaks", "doubling", "rate-ramp", "c1-probe"):
            text = said(name, profile)
            assert "None" not in text, (name, profile, text)


def test_v1_status_says_the_break_and_its_cause_as_summary_json_does():
    """GET /v1/status reads the preset's break and cause from the same place summary.json does
    (the book, judged again on final figures), never its own copy."""
    from types import SimpleNamespace

    from redline.engine.control.status_json import status_of
    from redline.engine.core.snapshot import Snapshot
    from redline.engine.measure.step_result import BreakResult

    br = BreakResult("stalled", 32, 16, "stalled: 32 requests in flight, no token for 10.0 s at C=32")
    book = SimpleNamespace(steps=[], search=None, plateau_gain=None, break_result=br, cause="stalled at C=32: server runs 8 a micro-batch: ...",
                           live=None, current=None)
    engine = SimpleNamespace(snapshot=Snapshot(t=0.0, elapsed_s=1.0, state="preset", target_c=32, previous_c=None, in_flight=32),
                             controller=None, book=book, load_text="C=32")
    status = status_of(engine)
    assert status["break"] == br.to_dict() and status["cause"] == book.cause
