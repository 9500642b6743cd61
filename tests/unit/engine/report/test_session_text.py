"""Text report: step lines, the step table, break and probe lines, report_session()."""

import json

import pytest

from redline.engine.measure.step_result import BreakResult, StepResult
from redline.engine.report.session_text import load_summary, report_session
from redline.engine.rules.step_text import format_step_line, format_step_table
from redline.engine.session import SessionError, SessionWriter


def _step(c, tok, **kw):
    d = dict(
        concurrency=c, duration_s=60.0, completed=10 * c, failed=0, output_throughput=tok,
        input_throughput=tok * 2, request_throughput=c / 5.0, mean_ttft_ms=55.0,
        median_ttft_ms=52.4, p99_ttft_ms=180.2, median_itl_ms=6.12, p99_itl_ms=61.0,
        mean_tpot_ms=6.5, median_e2e_latency_ms=8100.0, p99_e2e_latency_ms=9400.0,
        steady=True, server_max_running=8.0,
    )
    d.update(kw)
    return StepResult(**d)


def test_step_line():
    line = format_step_line(_step(64, 1210.44))
    assert "\n" not in line
    assert line.startswith("C=64 ")
    assert "60.0s" in line and "1210.4 tok/s" in line
    assert "TTFT p50 52.4 ms p99  180 ms" in line
    assert "ITL p99 61.0 ms" in line
    assert line.endswith("err 0  steady")
    bad = format_step_line(
        _step(128, 900.0, failed=3, steady=False, errors_by_kind={"http_503": 2, "timeout": 1})
    )
    assert "err 3 (http_503 2, timeout 1)" in bad and bad.endswith("unsteady")
    # A dict (as summary.json stores it) works the same.
    assert format_step_line(_step(64, 1210.44).to_dict()) == line


def test_step_lines_align():
    a = format_step_line(_step(8, 83.0))
    b = format_step_line(_step(256, 1316.0))
    assert a.index("tok/s") == b.index("tok/s")
    assert a.index("TTFT") == b.index("TTFT")


def test_step_table_cells():
    steps = [_step(32, 900.0), _step(64, 1210.4), _step(96, 1225.0, server_max_running=None)]
    brk = BreakResult("plateau", 96, 64, "96 gave +1.2 % tok/s over 64 (< 5 %)")
    probe = _step(1, 45.2, duration_s=30.0, median_ttft_ms=21.0, p99_ttft_ms=25.0)
    text = format_step_table(steps, brk, probe)
    lines = text.splitlines()
    header = lines[0].split()
    assert header[:6] == ["C", "dur", "s", "done", "fail", "out"]
    for col in ("TTFT p50", "TTFT p99", "ITL p50", "ITL p99", "TPOT", "E2E p50", "E2E p99",
                "srv run", "steady"):
        assert col in lines[0]
    row64 = next(ln for ln in lines if ln.lstrip().startswith("64 "))
    cells = row64.split()
    assert cells[:6] == ["64", "60.0", "640", "0", "1210.4", "12.8"]
    assert cells[6:15] == ["52.4", "180", "6.1", "61.0", "6.5", "8100", "9400", "8", "yes"]
    assert row64.endswith("<- last good")
    row96 = next(ln for ln in lines if ln.lstrip().startswith("96 "))
    assert row96.split()[13] == "-"  # no server telemetry
    assert row96.endswith("<- break: plateau")
    # Columns line up: every row's "out tok/s" cell ends under the header's.
    end = lines[0].index("out tok/s") + len("out tok/s")
    for ln in (row64, row96):
        assert ln[:end].endswith(("1210.4", "1225.0"))
    assert "break: plateau at C=96, last good C=64 (96 gave +1.2 % tok/s over 64 (< 5 %))" in lines
    assert lines[-1].startswith("probe: C=1 ") and "45.2 tok/s" in lines[-1]


def test_step_table_no_break_no_steps():
    text = format_step_table([], None, None)
    assert "(no steps)" in text
    assert "break: none" in text
    assert "probe:" not in text


def test_report_session(tmp_path):
    d = tmp_path / "s"
    w = SessionWriter(d, {"label": "ramp", "target": {"url": "http://h:30000", "model": "m"}})
    w.write_summary({
        "target": {"url": "http://h:30000", "model": "m"},
        "label": "ramp",
        "steps": [_step(32, 900.0), _step(64, 1210.4)],  # dataclasses are serialised
        "break": BreakResult("errors", 64, 32, "error rate 9 % > 5 %"),
        "probe": None,
    })
    w.close("quit")
    s = load_summary(d)
    assert [x["concurrency"] for x in s["steps"]] == [32, 64]
    assert s["break"]["reason"] == "errors" and s["probe"] is None
    text = report_session(d)
    assert "ramp" in text.splitlines()[0]
    assert "http://h:30000" in text
    assert "(quit)" in text
    assert "break: errors at C=64, last good C=32" in text
    assert "1210.4" in text


def test_load_summary_without_summary(tmp_path):
    d = tmp_path / "s"
    SessionWriter(d, {"label": "x", "target": {"url": "u"}}).close("signal SIGHUP")
    s = load_summary(d)
    assert s == {"target": {"url": "u"}, "label": "x", "steps": [], "break": None, "probe": None}
    assert "(no steps)" in report_session(d)


def test_report_errors(tmp_path):
    with pytest.raises(SessionError, match="not found"):
        report_session(tmp_path / "nope")
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "meta.json").write_text("{}")
    (tmp_path / "s" / "summary.json").write_text("{broken")
    with pytest.raises(SessionError) as e:
        load_summary(tmp_path / "s")
    assert "summary.json is not valid JSON" in str(e.value) and "\n" not in str(e.value)
    json.loads((tmp_path / "s" / "meta.json").read_text())
