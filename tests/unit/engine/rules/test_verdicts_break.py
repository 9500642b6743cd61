"""See it break (issue 42), the verdicts' side: a server that answers nothing has no knee, a
re-measured load reads the same everywhere, a knee per workload, unsteady steps and unknown
noise decide nothing, one SLO judge, and last good never a step that failed. Crafted step
lists as the review built them, then the invariants over random ones (hypothesis)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from hypothesis import given, settings, strategies as st

from redline.engine.core.summary import step_doc
from redline.engine.measure.slo import Slo, over
from redline.engine.measure.step_result import StepResult
from redline.engine.preset import StopSpec
from redline.engine.report.compare import load_session
from redline.engine.report.gate import GateSession, evaluate, parse_gate
from redline.engine.report.html_data import collect, session_data
from redline.engine.rules.verdicts import (
    StopRules,
    decides,
    judge_request,
    knee,
    knees_from_summary,
    max_slo_load,
    meets_slo,
    one_per_load,
    recorded_max_slo,
    session_knee,
    slo_rule,
    summary_knee,
)
from redline.engine.sweep.sweep_file import figures

from helpers import ROOT, examples, finish, main_in_process, redline_command, start_headless, write_preset


def step(c, tps, *, se=0.0, steady=True, completed=10, failed=0, workload=None, **kw) -> StepResult:
    return StepResult(concurrency=c, duration_s=30, completed=completed, failed=failed, output_throughput=tps,
                      input_throughput=0, request_throughput=completed / 30, steady=steady, output_throughput_se=se,
                      workload=workload, **kw)


def dead(c) -> StepResult:
    """A step of a server that answers nothing: 10 of 10 failed, no token (unsteady: its seconds are silent)."""
    return step(c, 0.0, se=0.0, steady=False, completed=0, failed=10, unjudged="not steady: no output token in its window")


def session(tmp: Path, name: str, steps: list[StepResult], slo: Slo | None = None, **summary) -> Path:
    """A session directory whose summary.json is written as the engine writes it (core/summary.py's
    step_doc and summary_knee)."""
    d = tmp / name
    d.mkdir()
    (d / "meta.json").write_text(json.dumps({"label": name, "redline_version": "0.1.0", "format_version": 1}))
    doc = {"label": name, "steps": [step_doc(s, slo) for s in steps], "break": None, "probe": None,
           **summary_knee(steps, summary.get("search")), **summary}
    if slo is not None:
        doc["slo"] = slo.to_dict()
    (d / "summary.json").write_text(json.dumps(doc))
    return d


def gate(d: Path, spec: str):
    (o,) = evaluate(parse_gate(spec), GateSession.load(d))
    return o


# -- case 2: no progress is no knee ----------------------------------------------------------

def test_a_server_that_answers_nothing_has_no_knee_and_fails_a_knee_gate(tmp_path, capsys):
    """Four steps at 0 tok/s, 40 of 40 failed: it read `no knee: still rising at max C=64` and
    `--gate knee>=64` passed. Now: no step produced output tokens, and the gate fails saying so."""
    steps = [dead(c) for c in (8, 16, 32, 64)]
    k = session_knee(steps)
    assert k.value is None and k.reason == "no step produced output tokens" and k.max_throughput is None
    d = session(tmp_path, "dead", steps)
    assert json.loads((d / "summary.json").read_text())["knee_reason"] == "no step produced output tokens"
    o = gate(d, "knee>=64")
    assert not o.passed and "no knee (no step produced output tokens)" in o.detail
    assert main_in_process(["report", str(d), "--no-plot", "--gate", "knee>=64"]) == 4
    out = capsys.readouterr().out
    assert "no knee: no step produced output tokens" in out and "FAIL  knee>=64" in out


def test_a_zero_token_top_is_never_still_rising_nor_the_knee():
    """A server that hangs at C=64 after rising: C=64 (0 tok/s, nothing completed) is left out;
    the knee is read over the loads that gave tokens, and a gate's bound is the top of those."""
    steps = [step(8, 100), step(16, 200), step(32, 400), dead(64)]
    k = session_knee(steps)
    assert k.value is None and k.reason == "still rising at max C=32 (left out: C=64 no output token)"
    assert k.max_throughput == 32
    flat = [step(8, 100), step(16, 200), step(32, 205), dead(64)]
    assert session_knee(flat).value == 16


def test_a_knee_gate_on_a_still_rising_curve_is_bounded_by_its_top_deciding_load(tmp_path):
    d = session(tmp_path, "rising", [step(8, 100), step(16, 200), step(32, 400), dead(64)])
    o = gate(d, "knee>=32")
    assert o.passed and o.bound and o.value == 32
    assert not gate(d, "knee>=64").passed  # the dead C=64 proves nothing about the curve


def test_no_verdict_reads_the_tokens_of_failed_requests():
    """8 of 8 requests failing half-way: 0 output tok/s, their 800 tok/s in failed_output_tok_s.
    The knee, the plateau and collapse rules and last good read output_throughput alone."""
    half_way = [step(c, 0.0, completed=0, failed=8, failed_output_tok_s=800.0 * c) for c in (8, 16, 32)]
    assert session_knee(half_way).reason == "no step produced output tokens"
    rules = StopRules(StopSpec(plateau_gain=0.05, collapse=0.2))
    assert rules.last_good(half_way) is None
    healthy = [step(8, 500), step(16, 1000)]
    gone_bad = step(32, 100, completed=2, failed=30, failed_output_tok_s=5000.0)
    assert rules.evaluate(healthy, gone_bad).reason == "collapse"  # its failed tokens buy it nothing
    assert session_knee([*healthy, gone_bad]).value == 16


# -- case 7: several knees -------------------------------------------------------------------

def test_a_re_measured_load_is_stood_for_by_its_latest_step_that_decides():
    """C=16 measured three times: 990 (steady), 1200 (an unsteady burst), 960 (steady): the
    latest steady one stands for it, in the curve and the knee alike (the highest stood for it,
    and the most tok/s read C=16)."""
    steps = [step(8, 500), step(16, 990), step(32, 1000), step(16, 1200, steady=False), step(16, 960)]
    assert one_per_load(steps)[("C", 16.0)].output_throughput == 960
    k = session_knee(steps)
    assert (k.value, k.max_throughput) == (16, 32)


def test_a_session_whose_workload_changed_has_a_knee_per_workload(tmp_path, capsys):
    """128-token steps (knee 16), then `w` to 2048-token steps (still rising): never one knee
    across the two. summary.json keeps the top-level fields for the last workload and lists
    each in `knees`; the report, the HTML page and the gate read them."""
    short, long = {"dataset": "random", "input_len": 32, "output_len": 128}, {"dataset": "random", "input_len": 32, "output_len": 2048}
    steps = [step(8, 500, workload=short), step(16, 1000, workload=short), step(32, 1020, workload=short),
             step(8, 300, workload=long), step(16, 600, workload=long), step(32, 1200, workload=long)]
    summ = summary_knee(steps)
    assert summ["knee_concurrency"] is None and summ["knee_reason"] == "still rising at max C=32"
    assert [(e["workload_text"], e["knee_concurrency"]) for e in summ["knees"]] == [("32 in / 128 out", 16), ("32 in / 2048 out", None)]
    d = session(tmp_path, "w", steps)
    ks = knees_from_summary(json.loads((d / "summary.json").read_text()))
    assert [k.describe() for k in ks] == [
        "knee C=16 (within 5 % of the most output tok/s (1020.0 at C=32)); max throughput C=32; workload 32 in / 128 out",
        "no knee: still rising at max C=32; max throughput C=32; workload 32 in / 2048 out"]
    assert main_in_process(["report", str(d), "--no-plot"]) == 0
    out = capsys.readouterr().out
    assert all(k.describe() in out for k in ks)
    page = session_data(0, collect(d), "C")
    assert [m["x"] for m in page["knees"]] == [16] and page["knees"][0]["workload"] == "32 in / 128 out"
    assert gate(d, "knee>=32").bound  # the gate reads the last workload's: still rising at C=32


def test_an_unfinished_search_gives_the_session_no_knee(tmp_path):
    """Killed during a search: summary.json has its interim answer (knee 16) marked
    in_progress. That is no session knee, in summary.json, the report and the gate."""
    steps = [step(8, 500), step(16, 990), step(32, 1000)]
    interim = {"knee_concurrency": 16, "knee_reason": "within 5 %", "max_throughput_concurrency": 32,
               "points": [8, 16, 32], "in_progress": True}
    d = session(tmp_path, "killed", steps, search=interim)
    summ = json.loads((d / "summary.json").read_text())
    assert summ["knee_concurrency"] is None and "did not finish" in summ["knee_reason"]
    assert load_session(d).knee.value is None
    o = gate(d, "knee>=16")
    assert not o.passed and "did not finish" in o.detail


def test_the_tui_curve_draws_the_sessions_verdict_not_its_own():
    """The preset's plateau_gain 0.25: C=16 (800) is within 25 % of C=32's 1000, so the session's
    knee is 16; the curve's own default 5 % would say 32. The curve draws the snapshot's."""
    from redline.engine.core.snapshot import Snapshot
    from redline.engine.report.compare import knee_load, session_from_steps
    from redline.engine.rules.verdicts import knee_from_summary
    from redline.tui.widgets.curve_view import CurveView

    steps = [step(8, 400, p99_ttft_ms=100.0), step(16, 800, p99_ttft_ms=100.0), step(32, 1000, p99_ttft_ms=100.0),
             step(64, 1010, p99_ttft_ms=100.0)]
    verdict = knee_from_summary(summary_knee(steps, None, 0.25))
    assert verdict.value == 16 and session_knee(steps).value == 32
    live = session_from_steps("this session", steps, knee=verdict)
    assert knee_load(live).value == 16
    view = CurveView()
    view._snap = Snapshot(t=0, elapsed_s=0, state="running", target_c=8, previous_c=None, in_flight=8, steps=tuple(steps), knee=verdict)
    text = view.render_text(80, 24).plain
    assert "knee C=16" in text and "knee C=32" not in text


# -- case 9: unsteady never decides ------------------------------------------------------------

def test_an_unsteady_step_with_a_huge_noise_is_never_the_knee():
    """C=4 at 100 tok/s with SE 450 (unsteady) against a best of 1020: its noise carried it
    within 5 % and it became the knee. Now it is left out."""
    steps = [step(4, 100, se=450.0, steady=False), step(8, 600, se=5.0), step(16, 1000, se=5.0), step(32, 1020, se=5.0)]
    k = session_knee(steps)
    assert k.value == 16 and "left out: C=4 not steady" in k.reason


def test_unknown_noise_is_unknown_not_zero():
    """A step under 2 s has no standard error: it carries neither a knee nor a gain."""
    short = step(32, 2000.0, se=None)  # steady as crafted, but its noise was never measured
    assert not decides(short)
    k = session_knee([step(8, 500), step(16, 1000), short])
    assert k.value is None and k.reason == "still rising at max C=16 (left out: C=32 noise unknown)"
    rules = StopRules(StopSpec(plateau_gain=0.05, collapse=0.2))
    assert rules.evaluate([step(16, 1000)], step(32, 100.0, se=None)) is None  # no collapse on an unknown noise


def test_an_unsteady_burst_is_never_last_good():
    rules = StopRules(StopSpec(plateau_gain=0.05))
    steps = [step(8, 500), step(16, 900), step(32, 2000, steady=False), step(64, 910)]
    b = rules.evaluate(steps[:3], steps[3])
    assert b.reason == "plateau" and b.last_good_concurrency == 16


def test_attainment_is_compared_unrounded():
    """89,996 of 100,000 requests met the SLO: 0.89996 rounded to 0.9 and met attainment 0.9."""
    from redline.engine.measure.accumulator import StepAccumulator
    from redline.engine.measure.records import Clock

    acc = StepAccumulator(1, 8, "measure", 0.0, Clock.now(), slo=Slo(ttft_ms=1000))
    acc.close(10.0)
    acc.good, acc.judged = 89996, 100000  # as its own requests' verdicts counted them
    res = acc.result(10.0)
    assert res.slo_attainment == 0.89996
    assert slo_rule(Slo(ttft_ms=1000), res) == "slo: 89.9 % of requests met TTFT≤1 s (needs 90 %) at C=8"
    assert not meets_slo(Slo(ttft_ms=1000), res)


# -- case 11: one SLO judge --------------------------------------------------------------------

def test_one_judge_at_the_bound():
    """A first token 43 ms after its send at t=0.1 s: t_first - t_send is 0.04300000000000001 s,
    over 43 ms in seconds and in milliseconds alike, while the HTML page (figures to the
    microsecond) read it as 43 ms, met. One comparison (measure/slo.py over), to the
    nanosecond, for a request's verdict (attainment and goodput) and one still waiting: at
    the bound is within it; a microsecond over is over."""
    slo = Slo(ttft_ms=43)
    ttft = (0.1 + 0.043) - 0.1
    assert ttft > 0.043 and ttft * 1000.0 > 43  # the spelling that decided
    assert over(ttft, 43) is False and over(0.14100000000000001, 141) is False
    assert judge_request(slo, ttft, None, None, 0.1) is True and not slo.missed_wait(ttft)
    assert judge_request(slo, 0.043001, None, None, 0.1) is False and slo.missed_wait(0.043001)


def test_the_largest_load_meeting_the_slo_is_one_function_everywhere(tmp_path):
    """p99 TTFT 43 ms at C=8 against ttft_p99=43ms (at the bound: met), 900 ms at C=16 (missed),
    40 ms at C=32 (met, but above a miss: not believed). The gate, the HTML page, the sweep and
    the function itself say C=8; the page carries the engine's verdict per step."""
    slo = Slo(ttft_p99_ms=43)
    steps = [step(8, 500, p99_ttft_ms=43.0), step(16, 900, p99_ttft_ms=900.0), step(32, 950, p99_ttft_ms=40.0)]
    assert max_slo_load(steps, slo) == ("C", 8.0)
    unproven = [steps[0], step(16, 900, p99_ttft_ms=40.0, p99_ttft_ms_bound=True), steps[2]]  # at least 40 ms: not proven
    assert max_slo_load(unproven, slo) == ("C", 8.0)  # the knee search's SLO bracket: the same rule
    d = session(tmp_path, "slo", steps, slo)
    summ = json.loads((d / "summary.json").read_text())
    assert [s["meets_slo"] for s in summ["steps"]] == [True, False, True]
    assert recorded_max_slo(summ, steps)[0] == 8.0
    o = gate(d, "max_slo>=8")
    assert o.passed and o.value == 8 and not gate(d, "max_slo>=32").passed
    page = session_data(0, collect(d), "C")
    assert page["max_slo"]["x"] == 8.0
    assert [(p["slo_state"], p["slo_why"]) for p in page["steps"]] == [
        ("pass", ""), ("fail", "p99 TTFT 900 ms over 43 ms at C=16"), ("pass", "")]
    assert page["slo_form"] == {"ttft_p99": 43.0}
    assert figures(summ)["max_slo_concurrency"] == 8


def test_a_step_that_measured_nothing_never_meets_a_p99_slo():
    """Every request failed: no p99 TTFT. Nothing proves ttft_p99<=2s held."""
    assert not meets_slo(Slo(ttft_p99_ms=2000), dead(8))
    assert max_slo_load([dead(8), dead(16)], Slo(ttft_p99_ms=2000)) is None


# -- deaths and their victims ----------------------------------------------------------------

def test_last_good_never_failed_its_requests():
    """fragile: `last good C=32` had done 32 fail 32. A step whose errors are over the limit,
    or that failed every request it finished, is never last good, whatever the server did next."""
    rules = StopRules(StopSpec(plateau_gain=0.05, error_rate=0.05))
    steps = [step(8, 300), step(32, 900, completed=32, failed=32)]
    b = rules.evaluate(steps, None, server_gone=True)
    assert b.reason == "server_gone" and b.last_good_concurrency == 8
    no_error_rule = StopRules(StopSpec(plateau_gain=0.05))
    victims = [step(8, 300), step(32, 50, completed=0, failed=32)]  # tokens of requests still running, none completed
    assert no_error_rule.last_good(victims).concurrency == 8


# -- invariants over random step lists (hypothesis) ------------------------------------------

LOADS = (1, 2, 4, 8, 16, 32, 64, 128)


@st.composite
def steps_(draw, min_size=1, max_size=10):
    out = []
    for _ in range(draw(st.integers(min_size, max_size))):
        tok = draw(st.one_of(st.just(0.0), st.floats(1.0, 5000.0)))
        completed = draw(st.integers(0, 50))
        out.append(step(draw(st.sampled_from(LOADS)), tok, se=draw(st.one_of(st.none(), st.floats(0.0, 300.0))),
                        steady=draw(st.booleans()), completed=completed, failed=draw(st.integers(0, 50)),
                        p99_ttft_ms=draw(st.floats(10.0, 5000.0))))
    return out


@settings(max_examples=examples(800))
@given(steps_())
def test_the_knee_is_a_deciding_load_never_above_the_max_throughput_one(steps):
    k = session_knee(steps)
    per = one_per_load(steps)
    if k.value is not None:
        assert k.max_throughput is not None and k.value <= k.max_throughput
        assert decides(per[("C", k.value)])
    if k.reason.startswith("still rising"):
        top = per[("C", k.max_throughput)]
        assert decides(top) and top.output_throughput > 0


@settings(max_examples=examples(800))
@given(steps_(), st.lists(st.sampled_from(LOADS), min_size=1, max_size=4))
def test_zero_token_steps_never_move_the_knee(steps, dead_loads):
    """Steps that produced nothing, anywhere on the curve, never make 'still rising' nor the knee."""
    base = [s for s in steps if s.output_throughput > 0]
    dead_at = [c for c in dead_loads if c not in {s.concurrency for s in base}]
    k0, k1 = session_knee(base), session_knee(base + [dead(c) for c in dead_at])
    if base:
        assert (k1.value, k1.max_throughput) == (k0.value, k0.max_throughput)
        assert k1.reason.startswith("still rising") == k0.reason.startswith("still rising")
    elif dead_at:
        assert k1.reason == "no step produced output tokens"


@settings(max_examples=examples(800))
@given(steps_(min_size=1, max_size=8), st.floats(0.0, 0.3), st.one_of(st.none(), st.floats(0.0, 0.5)))
def test_last_good_never_fired_a_rule_nor_failed_every_request(steps, gain, error_rate):
    rules = StopRules(StopSpec(plateau_gain=gain, error_rate=error_rate, collapse=0.2, p99_ttft_ms=2500.0))
    for i, cur in enumerate(steps):
        b = rules.evaluate(steps[:i], cur)
        if b is None:
            continue
        judged = steps[: i + 1]
        good = [s for j, s in enumerate(judged) if s.concurrency == b.last_good_concurrency and decides(s)
                and not rules.fired(judged[:j], s) and not (s.failed and not s.completed)]
        assert b.last_good_concurrency is None or good, (b, judged)
    lg = rules.last_good(steps)
    if lg is not None:
        j = next(j for j, s in enumerate(steps) if s is lg)
        assert decides(lg) and not rules.fired(steps[:j], lg) and not (lg.failed > 0 and lg.completed == 0)


@settings(max_examples=examples(800))
@given(steps_(min_size=1, max_size=8))
def test_a_staircase_measured_twice_has_the_knee_of_one_per_load(steps):
    """The same staircase run twice, and once more with unsteady re-measurements: the knee
    over one_per_load is the knee over the first pass's points."""
    once = knee(one_per_load(steps).values())
    twice = session_knee(steps + steps)
    noisy = [step(s.concurrency, s.output_throughput * 3 + 1, se=1000.0, steady=False) for s in steps]
    stays = session_knee(steps + noisy)
    assert (twice.value, twice.max_throughput) == (once.value, once.max_throughput)
    if any(decides(s) for s in steps):
        assert (stays.value, stays.max_throughput) == (once.value, once.max_throughput)


# -- end to end: a run against a server that fails everything --------------------------------

def test_a_run_against_a_server_that_fails_everything_has_no_knee_and_fails_the_gate(sim_factory, tmp_path):
    """The sim answers every request with an HTTP 500: four steps at 0 tok/s. summary.json says
    no step produced output tokens; `redline report --gate knee>=64` fails (exit 4) saying so."""
    sim = sim_factory("healthy", extra_args=("--set", "error_500_rate=1.0"))
    preset = write_preset(tmp_path, "dead", concurrency=[8, 16, 32, 64], hold_s=1.5, exact=True,
                          extra="[stop]\nplateau_gain = 0.05\n[after]\nprobe_s = 0\n")
    out = tmp_path / "s"
    rc, stdout, err = finish(start_headless(sim.url, preset, out), timeout=90)
    assert rc is not None, (stdout, err)
    summary = json.loads((out / "summary.json").read_text())
    assert all(s["output_throughput"] == 0 and s["completed"] == 0 for s in summary["steps"]), summary["steps"]
    assert summary["knee_concurrency"] is None and summary["knee_reason"] == "no step produced output tokens"
    g = subprocess.run([*redline_command(), "report", str(out), "--no-plot", "--gate", "knee>=64"], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert g.returncode == 4 and "no knee (no step produced output tokens)" in g.stdout + g.stderr, (g.stdout, g.stderr)
