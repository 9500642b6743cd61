"""Comparing configurations: two real sessions built against the sim (healthy and pp-capped
profiles), loaded, aligned by concurrency, best per row, knees, and `redline report A B`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from redline.engine.measure.step_result import BreakResult, StepResult
from redline.engine.report.compare import (
    SessionSummary,
    align_by_concurrency,
    best_index,
    best_per_row,
    joules_per_token,
    knee,
    load_session,
    load_sessions,
    session_from_steps,
    tokens_per_watt,
)
from redline.engine.session import SessionError
from redline.tui.cli.arguments import main

from helpers import FIXTURES, redline_command

SESSIONS = FIXTURES / "sessions"


# Three steps; plateau at +10 %: pp-capped (64 run, as 8 micro-batches of 8: SGLang's pp) climbs
# to C=64 and gains nothing to 128, so it breaks at 128 with last good 64; healthy gains >= 50 %
# per step and never breaks.
PRESET = """
name = "compare-test"
[workload]
input_len = 16
output_len = 24
[ramp]
concurrency = [16, 64, 128]
warmup_s = 0.5
hold_s = 2
min_requests = 2
[stop]
plateau_gain = 0.1
[after]
probe_s = 1
"""
RUN_TIMEOUT_S = 60



@pytest.fixture(scope="module")
def compare_runs(tmp_path_factory) -> dict[str, tuple[Path, str, float]]:
    """Both sessions through the CLI (`redline run PRESET --headless --sim-profile P`), at the same
    time, each against its own built-in sim: {profile: (session dir, stdout, seconds)}."""
    base = tmp_path_factory.mktemp("compare")
    preset = base / "compare.toml"
    preset.write_text(PRESET)
    procs, dirs, outs = {}, {}, {}
    t0 = time.monotonic()
    for profile in ("healthy", "pp-capped"):
        dirs[profile] = base / profile
        procs[profile] = subprocess.Popen(
            [*redline_command(), "run", str(preset), "--headless", "--out", str(dirs[profile]), "--sim-profile", profile],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "CI": "true"}, cwd=base,
        )
    try:
        for profile, p in procs.items():
            out, err = p.communicate(timeout=RUN_TIMEOUT_S)
            assert p.returncode == 0, f"{profile} run failed:\n{out}\n{err}"
            outs[profile] = (dirs[profile], out, time.monotonic() - t0)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait(5)
    return outs


@pytest.fixture(scope="module")
def built(compare_runs) -> dict[str, Path]:
    return {profile: d for profile, (d, _, _) in compare_runs.items()}


@pytest.fixture(scope="module")
def sessions(built) -> list[SessionSummary]:
    return load_sessions([built["healthy"], built["pp-capped"]])


def _report(monkeypatch, capsys, *argv: str) -> tuple[int, str, str]:
    """`redline report ...` in-process, through the real CLI and its one-line error handling."""
    rc = main(["report", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


# -- against the sim -----------------------------------------------------------------------

def test_sessions_load_with_labels_steps_break_probe(sessions):
    healthy, capped = sessions
    assert healthy.label != capped.label
    assert "pp8" in capped.label and "tp8" in healthy.label  # default label: model and tp/pp
    assert [s.concurrency for s in healthy.steps] == [16, 64, 128]
    assert capped.steps and all(s.phase != "probe" for s in capped.steps)
    assert capped.break_result is not None and capped.break_result.reason == "plateau"
    # each pp rank's running gauge is one micro-batch: 8 at most, while up to 64 run
    assert [s.server_max_running for s in capped.steps][1:] == [8, 8]  # the micro-batch cap
    assert healthy.probe is not None and healthy.probe.concurrency == 1
    assert capped.probe is not None and capped.probe.concurrency == 1


def test_headless_cli_prints_steps_break_and_probe_and_completes_the_log(compare_runs):
    """What an operator sees from `redline run ... --headless`: a line per step, the break,
    the probe, exit 0 (checked by the fixture), and a session whose log is complete."""
    d, out, took = compare_runs["pp-capped"]
    assert took < RUN_TIMEOUT_S
    lines = out.splitlines()
    assert any(l.startswith("C=16 ") for l in lines) and any(l.startswith("C=64 ") for l in lines), out
    assert any(l.startswith("break: plateau at C=128") for l in lines), out
    assert any(l.startswith("probe: C=1 ") for l in lines), out
    summary = json.loads((d / "summary.json").read_text())
    assert summary["break"] == {**summary["break"], "reason": "plateau", "concurrency": 128, "last_good_concurrency": 64}
    assert summary["probe"]["concurrency"] == 1
    meta = json.loads((d / "meta.json").read_text())
    assert meta["ended_at"] and meta["end_reason"] == "preset finished"
    # the report command prints the same table from the directory (a process of its own)
    rep = subprocess.run([*redline_command(), "report", str(d), "--no-plot"], capture_output=True, text=True, timeout=30)
    assert rep.returncode == 0 and "last good C=64" in rep.stdout, rep.stderr


def test_rows_aligned_by_concurrency(sessions):
    healthy, capped = sessions
    rows = align_by_concurrency(sessions)
    cs = [r.concurrency for r in rows]
    assert cs == sorted(set(healthy.concurrencies) | set(capped.concurrencies))
    for r in rows:
        assert len(r.cells) == 2
        for i, s in enumerate(sessions):
            cell = r.cells[i]
            if r.concurrency in s.concurrencies:
                assert cell is not None and cell.concurrency == r.concurrency
            else:
                assert cell is None
    # both ran every step: pp-capped broke on the last (plateau at C=128)
    assert capped.break_result.concurrency == 128
    assert rows[-1].concurrency == 128 and rows[-1].best == 0


def test_best_session_per_row_is_healthy_from_16(sessions):
    rows = align_by_concurrency(sessions)
    both = [r for r in rows if all(c is not None for c in r.cells)]
    assert any(r.concurrency >= 16 for r in both)
    for r in both:
        if r.concurrency >= 16:
            assert r.best == 0, f"C={r.concurrency}: {[c.output_throughput for c in r.cells]}"
    assert best_per_row(rows) == [r.best for r in rows]


def test_each_knee_at_its_own_last_good_concurrency(sessions):
    healthy, capped = sessions
    b = capped.break_result
    assert knee(capped) == b.last_good_concurrency
    assert knee(capped) == 64  # 64 run in all (max_running_requests); the rest queue
    # healthy never breaks (it gains >= 50 % per step) and its top step still gains: its knee
    # lies above the concurrencies measured, so none is named
    assert healthy.break_result is None
    assert knee(healthy) is None
    assert healthy.steps[-1].output_throughput > 2 * max(s.output_throughput for s in capped.steps)


def test_efficiency_from_sim_telemetry(sessions):
    healthy, capped = sessions
    assert healthy.has_power and capped.has_power
    s = healthy.by_concurrency()[16]
    assert tokens_per_watt(s) == pytest.approx(s.tokens_per_joule)
    assert joules_per_token(s) == pytest.approx(s.joules_per_token)


def test_multi_session_report(sessions, built, monkeypatch, capsys, tmp_path):
    png = tmp_path / "curves.png"
    rc, out, err = _report(monkeypatch, capsys, str(built["healthy"]), str(built["pp-capped"]), "--png", str(png))
    assert rc == 0, err
    healthy, capped = sessions
    assert healthy.label in out and capped.label in out
    assert out.count("break: ") == 2
    assert "break: none (no stop rule fired)" in out
    assert f"break: plateau at C={capped.break_result.concurrency}, last good C={knee(capped)}" in out
    assert f"knee C={knee(capped)}" in out and "no knee: still rising at max C=" in out  # healthy: still climbing
    assert "C=1 probe" in out and out.count("C=1 ") >= 2
    assert "tok/s/W" in out and "J/tok" in out  # the sim reports GPU power
    # the table: healthy's tok/s cell is marked best on the rows from C=16 on
    table = out.split("\n\n")[1].splitlines()
    for line in table:
        cells = line.split()
        if cells and cells[0].isdigit() and int(cells[0]) >= 16 and cells[6] != "-":
            assert cells[1].endswith("*") and not cells[6].endswith("*"), line
    # the curves follow, and the PNG was written
    assert "output tok/s vs C" in out and "knee" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert err == ""


def test_single_session_report_keeps_step_table(built, monkeypatch, capsys):
    rc, out, err = _report(monkeypatch, capsys, str(built["pp-capped"]), "--no-plot")
    assert rc == 0, err
    assert out.startswith(f"session {built['pp-capped']}")
    assert "<- last good" in out and "break: plateau" in out
    assert "knee C=" in out and "output tok/s vs C" not in out


# -- errors: one line, exit 2 --------------------------------------------------------------

def test_missing_dir_is_one_line_exit_2(monkeypatch, capsys, tmp_path):
    rc, out, err = _report(monkeypatch, capsys, str(SESSIONS / "healthy"), str(tmp_path / "nope"))
    assert rc == 2
    assert out == ""
    assert err.count("\n") == 1 and "session directory not found" in err and "nope" in err


def test_not_a_session_is_one_line_exit_2(monkeypatch, capsys, tmp_path):
    rc, out, err = _report(monkeypatch, capsys, str(tmp_path))
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and "not a redline session directory" in err


def test_malformed_summary_is_one_line_exit_2(monkeypatch, capsys, tmp_path):
    d = tmp_path / "bad"
    d.mkdir()
    (d / "meta.json").write_text(json.dumps({"label": "bad"}))
    (d / "summary.json").write_text(json.dumps({"steps": [{"concurrency": "eight"}]}))
    rc, out, err = _report(monkeypatch, capsys, str(d))
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and "summary.json" in err


def test_png_without_matplotlib_names_the_extra(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    rc, out, err = _report(monkeypatch, capsys, str(SESSIONS / "healthy"), "--png", str(tmp_path / "c.png"))
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and "pip install 'redline[png]'" in err
    assert not (tmp_path / "c.png").exists()


def test_png_into_missing_directory_is_one_line(monkeypatch, capsys, tmp_path):
    rc, out, err = _report(monkeypatch, capsys, str(SESSIONS / "healthy"), "--png", str(tmp_path / "no" / "c.png"))
    assert rc == 2 and out == "" and err.count("\n") == 1 and "does not exist" in err


# -- pure data, crafted --------------------------------------------------------------------

def _st(c: int, tok: float, ttft: float | None = 100.0, failed: int = 0, **kw) -> StepResult:
    kw = {"steady": True, "output_throughput_se": 0.0, **kw}  # a step that decides (engine/rules/knee.py)
    return StepResult(concurrency=c, duration_s=10, completed=10, failed=failed, output_throughput=tok,
                      input_throughput=0, request_throughput=1, p99_ttft_ms=ttft, **kw)


def test_best_ties_go_to_lower_p99_ttft_then_fewer_errors():
    assert best_index([_st(8, 100.0, 300), _st(8, 100.04, 200)]) == 1  # equal to 0.1 tok/s
    assert best_index([_st(8, 100.0, 200, failed=3), _st(8, 100.0, 200)]) == 1
    assert best_index([_st(8, 100.0, None), _st(8, 100.0, 900)]) == 1
    assert best_index([_st(8, 150.0, 900), _st(8, 100.0, 10)]) == 0
    assert best_index([_st(8, 150.0), None]) is None  # nothing to compare


def test_knee_without_break_and_edge_cases():
    s = session_from_steps("x", [_st(8, 100), _st(16, 300), _st(32, 300), _st(64, 250)])
    assert knee(s) == 16  # the smallest load within 5 % of the most tok/s (engine/rules/verdicts.py)
    assert knee(session_from_steps("x", [_st(8, 100), _st(16, 290), _st(32, 300)])) == 16  # -3.3 %: within 5 %
    assert knee(session_from_steps("x", [])) is None
    broke_first = session_from_steps("x", [_st(8, 100)], BreakResult("errors", 8, None))
    assert knee(broke_first) is None
    # the knee is the curve's, not the break's: one load measured is no curve, whatever broke
    assert knee(session_from_steps("x", [_st(8, 100)], BreakResult("plateau", 16, 8))) is None


def test_repeated_concurrency_keeps_the_best_step_and_probe_is_excluded():
    s = session_from_steps("x", [_st(8, 100, index=0), _st(16, 200, index=1), _st(8, 120, index=2),
                                 _st(1, 30, phase="probe")])
    assert s.by_concurrency()[8].index == 2
    assert s.concurrencies == [8, 16]


def test_efficiency_from_power_when_fields_missing():
    s = _st(8, 500.0, mean_power_w=1000.0)
    assert tokens_per_watt(s) == pytest.approx(0.5)
    assert joules_per_token(s) == pytest.approx(2.0)
    assert tokens_per_watt(_st(8, 500.0)) is None and joules_per_token(_st(8, 0.0, mean_power_w=5.0)) is None


def test_duplicate_labels_made_unique(tmp_path):
    for name in ("a", "b"):
        d = tmp_path / name
        d.mkdir()
        (d / "meta.json").write_text(json.dumps({"label": "same"}))
    a, b = load_sessions([tmp_path / "a", tmp_path / "b"])
    assert (a.label, b.label) == ("same (a)", "same (b)")
    a, b = load_sessions([tmp_path / "a", tmp_path / "a"])
    assert a.label != b.label
    nolabel = tmp_path / "run7"
    nolabel.mkdir()
    (nolabel / "meta.json").write_text("{}")
    assert load_session(nolabel).label == "run7" and load_session(nolabel).steps == ()


def test_missing_dir_raises_session_error(tmp_path):
    with pytest.raises(SessionError):
        load_sessions([tmp_path / "nope"])


def test_compare_flag_loads_or_fails_in_one_line(tmp_path):
    from redline.tui.cli.arguments import UsageError
    from redline.tui.cli.report import load_compare_session

    assert load_compare_session(None) is None
    assert load_compare_session(SESSIONS / "pp-capped").label == "redline-sim-70b tp1 pp8"
    with pytest.raises(UsageError, match="--compare: session directory not found"):
        load_compare_session(tmp_path / "nope")
