"""Issue 27, reports as a newcomer reads them: rate sessions placed by R (never at the
in-flight cap), no Python repr in any line, client-limited steps flagged."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from redline.engine.measure.step_result import BreakResult, StepResult
from redline.engine.report.compare import align_by_load, knee, knee_load, load_session, session_from_steps, step_load

CAP = 256  # every rate step's in-flight cap: the same for all of them
RATES = (2.0, 4.0, 8.0, 16.0, 32.0)


def rate_step(i: int, r: float, tok: float, **kw) -> StepResult:
    return StepResult(
        concurrency=CAP, duration_s=30.0, completed=int(r * 30), failed=0, output_throughput=tok,
        input_throughput=tok / 4, request_throughput=r, median_ttft_ms=50.0 + r, p99_ttft_ms=80.0 + 4 * r,
        p99_itl_ms=20.0, steady=True, output_throughput_se=0.0, index=i, phase="measure", mean_power_w=200.0 + 10 * r,
        tokens_per_joule=tok / (200.0 + 10 * r), mode="rate", request_rate=r, arrival="poisson", **kw,
    )


def write_session(d: Path, steps: list[StepResult], br: BreakResult | None, label: str) -> Path:
    d.mkdir(parents=True)
    (d / "meta.json").write_text(json.dumps({"label": label, "target": {"url": "http://127.0.0.1:1", "model": "m"},
                                             "started_at": "2026-12-01T00:00:00.000Z", "ended_at": "2026-12-01T00:03:00.000Z",
                                             "end_reason": "preset finished"}))
    (d / "summary.json").write_text(json.dumps({"target": {}, "label": label, "steps": [s.to_dict() for s in steps],
                                                "break": None if br is None else br.to_dict(), "probe": None}))
    return d


@pytest.fixture
def rate_session(tmp_path) -> Path:
    toks = (200.0, 400.0, 780.0, 1500.0, 1510.0)
    steps = [rate_step(i + 1, r, t) for i, (r, t) in enumerate(zip(RATES, toks, strict=False))]
    br = BreakResult("plateau", CAP, CAP, "32 req/s gave +0.7 % over 16 req/s", rate=32.0, last_good_rate=16.0)
    return write_session(tmp_path / "rate", steps, br, "rates")


# -- 9. rate steps are placed by R ---------------------------------------------------------
def test_rate_steps_are_aligned_by_rate_not_by_the_cap(rate_session):
    s = load_session(rate_session)
    rows = align_by_load([s])
    assert [r.load.label for r in rows] == ["R=2/s", "R=4/s", "R=8/s", "R=16/s", "R=32/s"]
    assert all(r.concurrency is None for r in rows)
    assert s.by_concurrency() == {}  # nothing placed at C=256
    assert knee_load(s).label == "R=16/s" and knee(s) == 16.0


def test_report_of_a_rate_session_says_the_knee_in_req_s(rate_session):
    from redline.tui.cli.report import report_text

    text, _ = report_text([rate_session])
    assert "knee R=16/s (within 5 % of the most output tok/s (1510.0 at R=32/s)); max throughput R=32/s" in text, text
    assert "knee C=256" not in text
    assert "last good R=16/s" in text or "last good 16 req/s" in text
    eff = text[text.index("efficiency"):]
    lines = [ln for ln in eff.splitlines() if re.match(r"\s*R req/s|\s*\d", ln)]
    assert [ln.split()[0] for ln in lines] == ["R", "2", "4", "8", "16", "32"], eff  # one row per rate, not one C=256 row


def test_comparison_of_rate_sessions_rows_by_rate(rate_session, tmp_path):
    from redline.tui.cli.report import report_text

    other = write_session(tmp_path / "other", [rate_step(1, 4.0, 380.0), rate_step(2, 8.0, 700.0)], None, "other")
    text, _ = report_text([rate_session, other])
    table = text.split("break and knee")[0]
    assert "R req/s" in table and "\n  256" not in table
    assert "most tok/s at that rate" in table
    assert "knee R=16/s (within 5 %" in text


def test_curves_of_a_rate_session_are_drawn_against_r(rate_session):
    from redline.tui.plots import render_curves

    s = load_session(rate_session)
    out = render_curves([s], 100, 24, color=False)
    assert "vs R (req/s)" in out and "vs C" not in out
    assert "knee R=16/s" in out and "knee C=" not in out
    assert "256" not in out and "1024" not in out


def test_a_session_mixing_c_and_rate_steps_keeps_them_apart():
    c_steps = [StepResult(concurrency=c, duration_s=10, completed=10, failed=0, output_throughput=100.0 * c,
                          input_throughput=1, request_throughput=1, index=i) for i, c in enumerate((8, 16, 32))]
    s = session_from_steps("mixed", [*c_steps, rate_step(4, 5.0, 300.0)])
    keys = [step_load(st).label for st in s.steps]
    assert keys == ["C=8", "C=16", "C=32", "R=5/s"]
    assert list(s.by_concurrency()) == [8, 16, 32]  # the rate step is not a C=256 point
    assert s.kind == "C"


def test_png_of_a_rate_session(rate_session, tmp_path):
    pytest.importorskip("matplotlib")
    from redline.tui.plots import write_png

    out = write_png([load_session(rate_session)], tmp_path / "c.png")
    assert out.stat().st_size > 1000


# -- 6. no Python repr in what a person reads ----------------------------------------------
PY_REPR = re.compile(r"None|\[['\d]|\{'|\(\d+,|True|False")


def test_break_line_with_no_good_step_says_so():
    from redline.engine.rules.step_text import format_break_line

    line = format_break_line(BreakResult("latency", 8, None, "p99 TTFT 9 s at C=8"))
    assert "no step passed" in line and not PY_REPR.search(line), line


def test_runner_lines_have_no_python_repr(monkeypatch):
    """The ramp's log line lists its steps as text, and a break with no good step says
    `no step passed` (was `4 steps ['C=8', ...]` and `last good C=None`)."""
    import asyncio
    from types import SimpleNamespace

    from redline.engine.preset import load_preset, resolve_preset
    from redline.engine.rules.breaks import RampJudge
    from redline.engine.run import preset_runner as runner

    preset = load_preset(resolve_preset("quick"))
    logged: list[str] = []
    lines: list[str] = []
    first = StepResult(concurrency=preset.ramp.concurrency[0], duration_s=5, completed=1, failed=0,
                       output_throughput=10.0, input_throughput=1.0, request_throughput=1.0)
    engine = SimpleNamespace(log=lambda kind, text, **k: logged.append(text), book=SimpleNamespace(break_result=None, cause=None, steps=[first]))

    async def one_step(engine, plan, label, watch, preset=None):
        return first, None

    class Rules:  # every step fires the latency rule
        def fired(self, history, cur):
            return [("latency", "p99 TTFT over the limit")]

        def last_good(self, steps):
            return None

    monkeypatch.setattr(runner, "run_step", one_step)
    asyncio.run(runner._ramp(engine, preset, runner.RampRecord(engine, RampJudge(Rules())), None, runner.RunOutcome(), lines.append))
    plans = preset.ramp.steps()
    assert logged[0] == f"preset quick: {len(plans)} steps: " + ", ".join(p.label for p in plans)
    assert lines[-1].startswith("break: latency at C=") and "no step passed" in lines[-1]
    for text in logged + lines:
        assert not PY_REPR.search(text), text


# -- 11. client-health warnings headless, and client-limited steps -------------------------
def test_writer_flags_steps_measured_over_a_suspect_second(tmp_path):
    from redline.engine.session import SessionWriter

    w = SessionWriter(tmp_path / "s", {"label": "x"}, fsync=False)
    t0 = w.t0
    for k in range(10):  # seconds 3 and 4 were suspect
        w.add_timeline({"t": t0 + k + 1, "interval_s": 1.0, "client_overloaded": k in (3, 4), "client_cause": "machine_busy" if k in (3, 4) else ""})
    clean = StepResult(concurrency=8, duration_s=2.0, completed=1, failed=0, output_throughput=1, input_throughput=1,
                       request_throughput=1, t_start=t0 + 0.5, index=1)
    busy = StepResult(concurrency=16, duration_s=3.0, completed=1, failed=0, output_throughput=1, input_throughput=1,
                      request_throughput=1, t_start=t0 + 3.0, index=2)
    w.write_summary({"steps": [clean.to_dict(), busy.to_dict()], "break": None, "probe": None})
    w.close()
    steps = json.loads((tmp_path / "s" / "summary.json").read_text())["steps"]
    assert [s["client_limited"] for s in steps] == [False, True]


def test_report_shows_client_limited_steps():
    from redline.engine.rules.step_text import format_step_line, format_step_table

    st = StepResult(concurrency=64, duration_s=6, completed=9, failed=0, output_throughput=900.0, input_throughput=1,
                    request_throughput=1.5, client_limited=True)
    assert "client-limited" in format_step_line(st)
    table = format_step_table([st])
    assert "(client-limited)" in table and "redline's own timings were suspect" in table
    assert "client-limited" not in format_step_table([StepResult(concurrency=8, duration_s=6, completed=9, failed=0,
                                                                 output_throughput=9.0, input_throughput=1, request_throughput=1)])


def test_event_log_calls_on_warning_once_per_episode():
    from redline.engine.core.event_log import EventLog

    ev, got = EventLog(), []
    ev.on_warning = lambda key, text: got.append(key)
    for i in range(5):
        ev.warn(f"machine busy: {i}", key="client machine_busy")
    assert got == ["client machine_busy"]
    ev.clear("client machine_busy")
    ev.warn("machine busy again", key="client machine_busy")
    assert got == ["client machine_busy"] * 2  # a new episode; the headless printer shows each key once


@pytest.mark.server
@pytest.mark.parametrize("transport", ["httpx", "lean"])
def test_headless_prints_client_health_warning_once_and_flags_steps(tmp_path, monkeypatch, capsys, transport):
    """A headless run on a machine too busy to measure: the warning is printed once (not
    once per episode), and every step measured under it says so in summary.json and the table,
    where the 80 ms lag the health reports could be in its figures: on httpx's own transport
    (neither its send waits nor its reads' stamps known). On the lean one each request's send
    wait is measured (small: the lag here is the health's word, not the loop's) and plain
    http:// reads carry the kernel's stamps, so no step is marked. Each step closes at 2.5 s
    (max_hold_s); the run still spans several episodes (a new one every 3 s)."""
    from redline.engine.client import kstamp
    from redline.engine.telemetry import client_health
    from redline.engine.telemetry.types import ClientHealthSample
    from redline.tui import cli

    reason = "machine busy: other processes keep redline's loop waiting; latencies may be too high"
    calls = {"n": 0}

    def busy(self):
        calls["n"] += 1  # flapping: a new episode every other second
        on = calls["n"] % 3 != 0
        return ClientHealthSample(cpu_pct=20.0, loop_lag_ms=80.0, overloaded=on, reason=reason if on else "",
                                  cause="machine_busy" if on else "")

    monkeypatch.setattr(client_health.ClientHealth, "status", busy)
    preset = tmp_path / "p.toml"
    preset.write_text('name = "p"\n[workload]\ninput_len = 16\noutput_len = 16\n'
                      '[ramp]\nconcurrency = [2, 4]\nwarmup_s = 0.5\nhold_s = 2.5\nmin_requests = 1\nmax_hold_s = 2.5\n')
    out = tmp_path / "s"
    rc = cli.main(["run", str(preset), "--headless", "--out", str(out), "--transport", transport])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    warned = [ln for ln in cap.err.splitlines() if "machine busy" in ln]
    assert len(warned) == 1 and warned[0].startswith("redline: warning: "), cap.err
    events = [json.loads(ln) for ln in (out / "events.ndjson").read_text().splitlines()]
    assert sum(1 for e in events if e["kind"] == "warning" and "machine busy" in e["text"]) >= 2  # episodes, printed once
    steps = json.loads((out / "summary.json").read_text())["steps"]
    if transport == "lean" and kstamp.ENABLED:
        # the health's 80 ms is no measurement: a step is marked only by what was measured of
        # it, its send waits' shift or its reads coalesced (a machine busy for real, as a
        # suite on every core: then rightly so); on a quiet machine none is
        from redline.engine.telemetry.client_doubt import COALESCED_DOUBT, DOUBT_SHARE, SEND_STAMPED
        assert steps
        for s in steps:
            shift = s["client_send_shift_ms"]
            assert isinstance(shift, float)
            measured = s["coalesced_chunks"] > COALESCED_DOUBT or any(
                shift > DOUBT_SHARE * s[k] for k in SEND_STAMPED if s.get(k) is not None)
            assert s["client_limited"] == measured, {k: s.get(k) for k in ("client_limited", "coalesced_chunks", *SEND_STAMPED)}
        if any(s["client_limited"] for s in steps):
            return
        assert "(client-limited)" not in cap.out
        return
    assert steps and all(s["client_limited"] for s in steps)
    assert transport == "lean" or all(s["client_send_shift_ms"] is None for s in steps)
    assert "(client-limited)" in cap.out
