"""Gates for CI (engine/report/gate.py; docs/comparing.md, "Gates for CI"): the spec
parser and its one-line errors, the evaluator on synthetic summary.json files, regression gates
between two sessions, the JUnit XML, a preset's [gate], and the commands end to end:
`redline run PRESET --headless --gate ...` (exit 4 / 0 / 2 before any load) and
`redline report FAST SLOW --gate "tok_s>=-5%"` on real sessions, SLOW from a sim with half the
capacity."""

from __future__ import annotations

import json
import os
import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from redline.engine.preset import PresetError, parse_toml
from redline.engine.report.gate import (
    EXIT_GATE_FAILED,
    GateError,
    GateSession,
    compare,
    evaluate,
    format_outcomes,
    gate_dict,
    junit_xml,
    parse_gate,
    passed,
)
from redline.engine.sim.serve import spawn_sim_process

from helpers import FAST_SIM, finish, main_in_process, redline_command, sim_state, start_headless, write_preset

# -- synthetic sessions --------------------------------------------------------------------

def _step(c: int, tok_s: float, **kw) -> dict:
    d = {"concurrency": c, "duration_s": 10.0, "completed": 100, "failed": 0, "output_throughput": tok_s,
         "input_throughput": 1.0, "request_throughput": 1.0, "median_ttft_ms": 100.0, "p99_ttft_ms": 200.0,
         "median_itl_ms": 20.0, "p99_itl_ms": 40.0, "mean_tpot_ms": 21.0, "median_e2e_latency_ms": 1000.0,
         "p99_e2e_latency_ms": 1500.0, "index": c, "phase": "measure", "steady": True, "output_throughput_se": 0.0}
    d.update(kw)
    return d


def make_session(tmp_path: Path, name: str, steps: list[dict], **summary) -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "meta.json").write_text(json.dumps({"label": name, "redline_version": "0.1.0", "format_version": 1}))
    (d / "summary.json").write_text(json.dumps({"label": name, "steps": steps, "break": None, "probe": None, **summary}))
    return d


BASE_STEPS = [_step(8, 800.0), _step(16, 1500.0), _step(32, 2600.0, p99_ttft_ms=900.0), _step(64, 2700.0, p99_ttft_ms=2500.0)]


@pytest.fixture
def base(tmp_path) -> GateSession:
    return GateSession.load(make_session(tmp_path, "base", BASE_STEPS))


def _one(spec: str, s: GateSession):
    (o,) = evaluate(parse_gate(spec), s)
    return o


# -- parsing -------------------------------------------------------------------------------

@pytest.mark.parametrize("spec, figure, op, value, at, relative", [
    ("knee>=64", "knee", ">=", 64, None, None),
    ("max_slo>=32", "max_slo", ">=", 32, None, None),
    ("tok_s@C=64>=2500", "tok_s", ">=", 2500, ("C", 64.0), None),
    ("ttft_p99@C=64<=2s", "ttft_p99", "<=", 2000, ("C", 64.0), None),
    ("ttft_p99@C=64<=250ms", "ttft_p99", "<=", 250, ("C", 64.0), None),
    ("errors<=1%", "errors", "<=", 0.01, None, None),
    ("attainment@C=32>=95%", "attainment", ">=", 0.95, ("C", 32.0), None),
    ("tok_s@R=8/s>=100", "tok_s", ">=", 100, ("R", 8.0), None),
    ("tok_s>=-5%", "tok_s", ">=", -0.05, None, "%"),
    ("ttft_p99<=+10%", "ttft_p99", "<=", 0.10, None, "%"),
    ("knee>=-1step", "knee", ">=", -1, None, "step"),
    (" ttft_p99 <= +200ms ", "ttft_p99", "<=", 200, None, "abs"),
])
def test_every_documented_form_parses(spec, figure, op, value, at, relative):
    (c,) = parse_gate(spec)
    assert (c.figure, c.op, c.at, c.relative) == (figure, op, at, relative)
    assert c.value == pytest.approx(value)


def test_a_spec_is_comma_separated_and_a_list_is_accepted():
    assert [c.text for c in parse_gate("knee>=64, errors<=1%")] == ["knee>=64", "errors<=1%"]
    assert [c.text for c in parse_gate(["knee>=64", "tok_s@C=8>=1,errors<=2"])] == ["knee>=64", "tok_s@C=8>=1", "errors<=2"]


@pytest.mark.parametrize("spec, names", [
    ("nonsense", ["'nonsense'", "expected FIGURE", "knee>=64"]),
    ("foo>=3", ["unknown figure 'foo'", "accepted: knee, max_slo, tok_s"]),
    ("tok_s@X=3>=1", ["load 'X=3'", "C=N", "R=N/s"]),
    ("tok_s@C=1.5>=1", ["load 'C=1.5'"]),
    ("knee@C=3>=1", ["knee is the session's"]),
    ("ttft_p99<=fast", ["value 'fast'", "a duration such as 2s"]),
    ("errors<=200%", ["value '200%'", "a share such as 1%"]),
    ("tok_s>=-1step", ["a change in steps is for knee and max_slo"]),
    ("tok_s>=", ["no value after >="]),
    ("", ["at least one condition"]),
    ("knee=>64", ["unknown figure 'knee='"]),
])
def test_a_bad_spec_is_one_line_naming_the_bad_part(spec, names):
    with pytest.raises(GateError) as e:
        parse_gate(spec)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("--gate")
    for n in names:
        assert n in msg


# -- one session ---------------------------------------------------------------------------

def test_absolute_conditions_pass_and_fail_with_their_measured_values(base):
    o = _one("tok_s@C=32>=2500", base)
    assert o.passed and o.value == 2600.0 and "2600.0 tok/s at C=32" in o.detail
    o = _one("tok_s@C=32>=3000", base)
    assert not o.passed and "2600.0 tok/s" in o.detail and "needs >= 3000" in o.detail
    assert _one("tok_s>=2700", base).passed  # without @: the session's most
    o = _one("ttft_p99<=2s", base)  # without @: the worst step
    assert not o.passed and "at C=64" in o.detail and "2.5 s" in o.detail
    assert _one("ttft_p99@C=32<=1s", base).passed
    o = _one("tok_s@C=48>=1", base)
    assert not o.passed and "no step at C=48" in o.detail and "C=8, C=16, C=32, C=64" in o.detail


def test_knee_from_the_curve_a_search_and_a_rising_curve(tmp_path):
    brk = {"reason": "plateau", "concurrency": 64, "last_good_concurrency": 32, "detail": "gain 4 %"}
    s = GateSession.load(make_session(tmp_path, "brk", BASE_STEPS, **{"break": brk}))
    o = _one("knee>=64", s)  # 2600 at C=32 is within 5 % of 2700 at C=64 (engine/rules/verdicts.py)
    assert not o.passed and o.value == 32 and "knee C=32" in o.detail and "needs >= 64" in o.detail
    assert _one("knee>=32", s).passed
    search = {"knee_concurrency": 48, "knee_reason": "within 5 %", "max_slo_concurrency": 24, "points": [8, 16, 32, 64, 48, 24]}
    s = GateSession.load(make_session(tmp_path, "search", BASE_STEPS, search=search, slo={"ttft_ms": 500.0}))
    assert _one("knee>=48", s).passed and not _one("knee>=49", s).passed
    assert _one("max_slo>=24", s).passed and not _one("max_slo>=32", s).passed
    rising = {"knee_concurrency": None, "knee_reason": "still rising at max C=64", "max_slo_concurrency": None, "points": [8, 16, 32, 64]}
    s = GateSession.load(make_session(tmp_path, "rising", BASE_STEPS, search=rising))
    o = _one("knee>=64", s)
    assert o.passed and o.bound and "C≥64" in o.detail
    o = _one("knee>=100000", s)  # a lower bound under the limit proves nothing
    assert not o.passed and "knee>=100000" in o.lines()[0] and "C≥64" in o.detail
    o = _one("max_slo>=1", s)
    assert not o.passed and "no SLO recorded" in o.detail


def test_max_slo_of_a_ramp_is_the_largest_load_meeting_the_recorded_slo(tmp_path):
    steps = [_step(8, 800.0, slo_attainment=1.0), _step(16, 1500.0, slo_attainment=0.97),
             _step(32, 2600.0, slo_attainment=0.6)]
    s = GateSession.load(make_session(tmp_path, "slo", steps, slo={"ttft_ms": 500.0, "attainment": 0.95}))
    o = _one("max_slo>=16", s)
    assert o.passed and o.value == 16
    assert not _one("max_slo>=32", s).passed
    assert _one("attainment@C=16>=95%", s).passed
    o = _one("attainment@C=32>=95%", s)
    assert not o.passed and "60.0 %" in o.detail
    o = _one("attainment>=90%", s)  # without @: the lowest
    assert not o.passed and "at C=32" in o.detail


def test_errors_as_a_share_or_a_count(tmp_path):
    steps = [_step(8, 800.0, completed=98, failed=2), _step(16, 1500.0, completed=100, failed=0)]
    s = GateSession.load(make_session(tmp_path, "err", steps))
    o = _one("errors<=1%", s)
    assert o.passed and o.value == pytest.approx(0.01) and "2 of 200 requests" in o.detail
    assert not _one("errors<0.5%", s).passed
    assert _one("errors<=2", s).passed and not _one("errors<=1", s).passed
    o = _one("errors@C=8<=1%", s)
    assert not o.passed and "2.00 %" in o.detail


def test_rate_steps_are_placed_by_their_rate_not_their_cap(tmp_path):
    steps = [_step(64, 300.0, mode="rate", request_rate=2.0), _step(64, 550.0, mode="rate", request_rate=4.0),
             _step(64, 570.0, mode="rate", request_rate=8.0, p99_ttft_ms=3000.0)]
    brk = {"reason": "latency", "concurrency": 64, "last_good_concurrency": None, "detail": "", "rate": 8.0, "last_good_rate": 4.0}
    s = GateSession.load(make_session(tmp_path, "rate", steps, **{"break": brk}))
    o = _one("tok_s@R=4/s>=500", s)
    assert o.passed and "at R=4/s" in o.detail
    assert not _one("ttft_p99@R=8/s<=2s", s).passed
    o = _one("tok_s@C=64>=1", s)
    assert not o.passed and "no step at C=64" in o.detail and "R=2/s" in o.detail
    o = _one("knee>=4", s)
    assert o.passed and "R=4/s" in o.detail


def test_a_censored_latency_never_proves_an_upper_limit(tmp_path):
    steps = [_step(8, 800.0, p99_ttft_ms=1500.0, p99_ttft_ms_bound=True)]
    s = GateSession.load(make_session(tmp_path, "cens", steps))
    o = _one("ttft_p99@C=8<=2s", s)
    assert not o.passed and o.bound and "≥1.5 s" in o.detail and "a lower bound" in o.detail
    assert not _one("ttft_p99@C=8<=1s", s).passed
    assert _one("ttft_p99@C=8>=1s", s).passed  # already above: proven


# -- two sessions --------------------------------------------------------------------------

def test_regressions_are_named_by_step_figure_baseline_candidate_and_change(tmp_path, base):
    slow = [_step(8, 790.0), _step(16, 1200.0), _step(32, 1300.0, p99_ttft_ms=1200.0), _step(64, 2700.0, p99_ttft_ms=2500.0)]
    cand = GateSession.load(make_session(tmp_path, "cand", slow))
    out = compare(parse_gate("tok_s>=-5%,ttft_p99<=+10%"), base, cand)
    tok, ttft = out
    assert not tok.passed and [r.load for r in tok.regressions] == ["C=16", "C=32"]
    r = tok.regressions[1]
    assert (r.figure, r.baseline, r.candidate) == ("tok_s", "2600.0 tok/s", "1300.0 tok/s")
    assert r.change.startswith("-50.0 %") and "allowed >= -5 %" in r.change
    assert "C=32 tok_s: baseline 2600.0 tok/s, candidate 1300.0 tok/s, change -50.0 %" in "\n".join(tok.lines())
    assert not ttft.passed and [r.load for r in ttft.regressions] == ["C=32"]
    assert "+33.3 %" in ttft.regressions[0].change
    back = compare(parse_gate("tok_s>=-5%,ttft_p99<=+10%"), cand, base)
    assert passed(back), format_outcomes(back)


def test_knee_steps_and_only_aligned_loads_are_compared(tmp_path):
    def brk(last):  # the knee summary.json recorded
        return {"knee_concurrency": last, "knee_reason": "within 5 %", "max_throughput_concurrency": 64,
                "break": {"reason": "plateau", "concurrency": 64, "last_good_concurrency": last, "detail": ""}}

    b = GateSession.load(make_session(tmp_path, "b", BASE_STEPS, **brk(32)))
    one_down = GateSession.load(make_session(tmp_path, "c1", BASE_STEPS, **brk(16)))
    two_down = GateSession.load(make_session(tmp_path, "c2", BASE_STEPS, **brk(8)))
    assert passed(compare(parse_gate("knee>=-1step"), b, one_down))
    (o,) = compare(parse_gate("knee>=-1step"), b, two_down)
    assert not o.passed and o.regressions[0].change.startswith("-2 steps")
    assert "baseline C=32, candidate C=8" in o.lines()[1]
    # a candidate that measured other loads: only the shared ones are compared
    other = GateSession.load(make_session(tmp_path, "other", [_step(8, 400.0), _step(12, 1.0)]))
    (o,) = compare(parse_gate("tok_s>=-5%"), b, other)
    assert not o.passed and [r.load for r in o.regressions] == ["C=8"] and "of 1 compared" in o.detail
    (o,) = compare(parse_gate("tok_s@C=12>=-5%"), b, other)
    assert not o.passed and "nothing to compare" in o.detail


def test_gate_dict_and_junit_xml(tmp_path, base):
    slow = GateSession.load(make_session(tmp_path, "slow", [_step(8, 400.0), _step(16, 1500.0)]))
    outcomes = compare(parse_gate("tok_s>=-5%,tok_s@C=16>=1,errors<=1%"), base, slow)
    d = gate_dict(outcomes)
    assert d["passed"] is False and d["conditions"] == ["tok_s>=-5%", "tok_s@C=16>=1", "errors<=1%"]
    assert d["results"][0]["regressions"][0]["load"] == "C=8"
    json.dumps(d)  # what summary.json holds
    root = ET.fromstring(junit_xml(outcomes, "gate: slow"))
    suite = root.find("testsuite")
    assert suite is not None and suite.get("tests") == "3" and suite.get("failures") == "1"
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == ["tok_s>=-5%", "tok_s@C=16>=1", "errors<=1%"]
    fail = cases[0].find("failure")
    assert fail is not None and "C=8 tok_s: baseline 800.0 tok/s, candidate 400.0 tok/s" in (fail.text or "")
    assert cases[2].find("failure") is None


# -- presets -------------------------------------------------------------------------------

RAMP = '[ramp]\nconcurrency = [1, 2]\nhold_s = 1\n'


def test_a_preset_gate_is_a_table_a_string_or_a_list():
    assert parse_toml(RAMP + '[gate]\nconditions = ["knee>=64", "errors<=1%"]\n', "x.toml").gate == ("knee>=64", "errors<=1%")
    assert parse_toml('gate = "knee>=64,errors<=1%"\n' + RAMP, "x.toml").gate == ("knee>=64", "errors<=1%")
    assert parse_toml(RAMP, "x.toml").gate is None


@pytest.mark.parametrize("text, names", [
    ('[gate]\nconditions = "nonsense"\n', ["x.toml: [gate].conditions 'nonsense': expected FIGURE"]),
    ('[gate]\nconditions = 3\n', ["x.toml: [gate].conditions: expected a string of conditions", "got 3"]),
    ('[gate]\nknee = ">=64"\n', ["unknown key [gate].knee (accepted: conditions)"]),
    ('[gate]\n', ["x.toml: [gate]: expected conditions ="]),
])
def test_a_bad_preset_gate_is_one_line(text, names):
    with pytest.raises(PresetError) as e:
        parse_toml(RAMP + text, "x.toml")
    assert "\n" not in str(e.value)
    for n in names:
        assert n in str(e.value)


# -- redline report --gate (in process, synthetic sessions) --------------------------------

def test_report_gate_exit_codes_and_junit(tmp_path, capsys):
    b = make_session(tmp_path, "b", BASE_STEPS)
    c = make_session(tmp_path, "c", [_step(8, 400.0), _step(16, 1500.0), _step(32, 2600.0), _step(64, 2700.0)])
    junit = tmp_path / "gate.xml"
    rc = main_in_process(["report", str(b), str(c), "--no-plot", "--gate", "tok_s>=-5%", "--junit", str(junit)])
    out, err = capsys.readouterr()
    assert rc == EXIT_GATE_FAILED == 4
    assert "FAIL  tok_s>=-5%" in out and "C=8 tok_s: baseline 800.0 tok/s, candidate 400.0 tok/s, change -50.0 %" in out
    assert err.strip().startswith("redline: gate failed: tok_s>=-5%") and "C=8" in err
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite.get("failures") == "1"
    # the workload line the terminal printed above the results, where a CI page shows it
    (ahead,) = [ln for ln in out.splitlines() if ln.startswith("workload: ")]
    assert suite.find("properties/property[@name='workload']").get("value") == ahead == suite.find("system-out").text
    assert main_in_process(["report", str(c), str(b), "--no-plot", "--gate", "tok_s>=-5%"]) == 0
    assert main_in_process(["report", str(b), "--no-plot", "--gate", "tok_s@C=8>=500"]) == 0
    assert main_in_process(["report", str(c), "--no-plot", "--gate", "tok_s@C=8>=500"]) == 4
    capsys.readouterr()


@pytest.mark.parametrize("argv, names", [
    (["--gate", "nonsense"], ["--gate 'nonsense'"]),
    (["--gate", "tok_s>=-5%", "ONE"], ["a change compares two sessions", "got 1"]),
    (["--junit", "x.xml"], ["--junit x.xml: there is no gate"]),
    (["--gate", "knee>=1", "--junit", "/nonexistent-dir/x.xml"], ["directory /nonexistent-dir does not exist"]),
])
def test_report_gate_bad_input_is_one_line_exit_2(tmp_path, capsys, argv, names):
    b = make_session(tmp_path, "b", BASE_STEPS)
    c = make_session(tmp_path, "c", BASE_STEPS)
    dirs = [str(b)] if "ONE" in argv else [str(b), str(c)]
    argv = [a for a in argv if a != "ONE"]
    rc = main_in_process(["report", *dirs, "--no-plot", *argv])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    for n in names:
        assert n in err


# -- end to end against simulated servers --------------------------------------------------

RUN_TIMEOUT_S = 90
SLOW_SIM = ("--set", "decode_base_s=0.02", "--set", "decode_per_seq_s=0.0002")  # half FAST_SIM's tok/s at every C


def _preset(tmp_path: Path, name: str) -> Path:
    """Each step holds 4 s, at most 6 (max_hold_s): the gates here read a knee, which only
    steady steps decide (STEADY_MIN_S = 4 whole seconds), and each step's tok/s."""
    return write_preset(tmp_path, name, concurrency=[1, 2, 4], output_len=24, hold_s=4, max_hold_s=6)


@pytest.mark.server
@pytest.mark.slow
def test_headless_run_gate_exits_4_naming_the_condition_0_when_met_and_2_before_any_load(tmp_path):
    sim = spawn_sim_process(extra_args=FAST_SIM)
    try:
        preset = _preset(tmp_path, "gate-run")
        junit = tmp_path / "junit.xml"
        before = sim_state(sim.url)["received"]
        t0 = time.monotonic()
        bad = start_headless(sim.url, preset, tmp_path / "bad", "--gate", "nonsense")
        rc, out, err = finish(bad, 30)
        assert rc == 2, (out, err)
        assert err.strip() == ("redline: error: --gate 'nonsense': expected FIGURE[@C=N|@R=N/s] OP VALUE, e.g. knee>=64, "
                               "tok_s@C=64>=2500, ttft_p99@C=64<=2s, errors<=1%, tok_s>=-5% (operators: >= <= > <)")
        assert out == "" and not (tmp_path / "bad").exists()
        assert sim_state(sim.url)["received"] == before, "a bad gate must be refused before any request"
        assert time.monotonic() - t0 < 15
        # the two real runs, at the same time against the same sim
        fail = start_headless(sim.url, preset, tmp_path / "fail", "--gate", "knee>=100000", "--junit", str(junit))
        ok = start_headless(sim.url, preset, tmp_path / "ok", "--gate", "knee>=1,errors<=1%")
        rc_f, out_f, err_f = finish(fail, RUN_TIMEOUT_S)
        rc_o, out_o, err_o = finish(ok, RUN_TIMEOUT_S)
    finally:
        sim.stop()
    assert rc_f == 4, (out_f, err_f)
    assert "FAIL  knee>=100000  knee " in out_f
    assert "redline: gate failed: knee>=100000 (knee " in err_f
    summ = json.loads((tmp_path / "fail" / "summary.json").read_text())
    g = summ["gate"]
    assert g["passed"] is False and g["conditions"] == ["knee>=100000"]
    assert g["results"][0]["measured"] in (1, 2, 4)  # the knee it measured, named with its value
    assert f"C{'≥' if g['results'][0]['bound'] else '='}{g['results'][0]['measured']:g}" in out_f
    assert ET.parse(junit).getroot().find("testsuite/testcase/failure") is not None
    assert rc_o == 0, (out_o, err_o)
    assert "PASS  knee>=1" in out_o and "PASS  errors<=1%" in out_o and "gate: PASS (2 of 2" in out_o
    assert json.loads((tmp_path / "ok" / "summary.json").read_text())["gate"]["passed"] is True


@pytest.mark.server
@pytest.mark.slow
def test_a_preset_gate_fails_the_run_and_gate_replaces_it(tmp_path):
    sim = spawn_sim_process(extra_args=FAST_SIM)
    try:
        preset = write_preset(tmp_path, "pgate", concurrency=[2], output_len=16, hold_s=1,
                              extra='[gate]\nconditions = ["tok_s@C=2>=1000000"]\n')
        p1 = start_headless(sim.url, preset, tmp_path / "p1")
        p2 = start_headless(sim.url, preset, tmp_path / "p2", "--gate", "tok_s@C=2>=1")
        rc1, out1, err1 = finish(p1, RUN_TIMEOUT_S)
        rc2, out2, err2 = finish(p2, RUN_TIMEOUT_S)
    finally:
        sim.stop()
    assert rc1 == 4 and "FAIL  tok_s@C=2>=1000000  tok_s " in out1, (out1, err1)
    assert rc2 == 0 and "PASS  tok_s@C=2>=1" in out2 and "1000000" not in out2, (out2, err2)


@pytest.fixture(scope="module")
def fast_slow(tmp_path_factory) -> tuple[Path, Path]:
    """Two real sessions of the same preset: FAST against a sim, SLOW against one with half
    its capacity (each decode step twice as long), run at the same time."""
    base = tmp_path_factory.mktemp("fastslow")
    preset = _preset(base, "fs")
    sims = [spawn_sim_process(extra_args=FAST_SIM), spawn_sim_process(extra_args=SLOW_SIM)]
    try:
        procs = [start_headless(s.url, preset, base / name, "--label", name) for s, name in zip(sims, ("FAST", "SLOW"), strict=False)]
        for p in procs:
            rc, out, err = finish(p, RUN_TIMEOUT_S)
            assert rc == 0, (out, err)
    finally:
        for s in sims:
            s.stop()
    return base / "FAST", base / "SLOW"


@pytest.mark.server
@pytest.mark.slow
@pytest.mark.xdist_group("test_gate")
def test_report_fast_slow_regression_exits_4_naming_steps_and_reversed_exits_0(fast_slow):
    fast, slow = fast_slow
    env = {**os.environ, "CI": "true"}
    r = subprocess.run([*redline_command(), "report", str(fast), str(slow), "--no-plot", "--gate", "tok_s>=-5%"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 4, (r.stdout, r.stderr)
    assert "gate: SLOW against baseline FAST: FAIL" in r.stdout
    for c in (1, 2, 4):  # half the capacity: every step regressed, each named
        assert f"C={c} tok_s: baseline " in r.stdout, r.stdout
    assert "redline: gate failed: tok_s>=-5% (3 regressions of 3 compared: C=1, C=2, C=4)" in r.stderr
    back = subprocess.run([*redline_command(), "report", str(slow), str(fast), "--no-plot", "--gate", "tok_s>=-5%"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert back.returncode == 0, (back.stdout, back.stderr)
    assert "PASS  tok_s>=-5%  no regression over 3 compared" in back.stdout
