"""Fixed-size runs, the percentiles asked for, the progress line and the summary on a signal
(issue 38): what a user of `vllm bench serve`, bench_serving, k6 and oha reaches for first.

A fixed-size run (`--num-requests N`, `--duration S`) sends and ends exactly N requests (or
stops at S seconds) and prints the whole run in bench_serving's layout; the figures there are
checked against the sim's own clock (/sim/requests). A preset step may count requests
(`[ramp] num_requests`) instead of holding. A signal prints what finished, the interrupted
step marked partial, and exits 128+N with nothing lost.
"""

from __future__ import annotations

import asyncio
import json
import signal
import statistics
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from redline.engine.api import EngineConfig, Snapshot, format_run_summary
from redline.engine.load.controller import Controller
from redline.engine.measure import records
from redline.engine.measure.records import RequestRecord
from redline.engine.measure.run_totals import RunTotals
from redline.engine.preset import PresetError, parse_toml
from redline.engine.rules.step_text import format_percentile_table

from helpers import ROOT, finish, main_in_process, redline_command, start_headless, wait_for, write_preset


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "requests.ndjson").read_text().splitlines() if line.strip()]


def _headless(url: str, out: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [*redline_command(), "--headless", "--url", url, "--out", str(out), "--no-nvml", *args],
        cwd=ROOT, env={"PATH": "/usr/bin:/bin", "CI": "true"} | _python_env(), stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )


def _python_env() -> dict:
    import os

    return {k: v for k, v in os.environ.items() if k in ("HOME", "PATH", "VIRTUAL_ENV", "PYTHONPATH", "TMPDIR")}


def _truth(url: str) -> list[dict]:
    return httpx.get(url + "/sim/requests", timeout=10.0).json()


def _summary_figure(text: str, label: str) -> float:
    line = next(ln for ln in text.splitlines() if ln.startswith(label))
    return float(line[len(label):].strip())


# -- the engine's parts, no server ------------------------------------------------------------
def test_the_controller_launches_its_budget_and_no_more():
    """C=8 with a budget of 20: exactly 20 launches, `drained` once the last one ended."""

    async def go() -> tuple[int, bool, int]:
        launched = 0

        async def launch(t, item) -> None:
            nonlocal launched
            launched += 1
            await asyncio.sleep(0.01)

        ctl = Controller(launch, 8, 64)
        ctl.budget = 20
        ctl.start()
        await asyncio.wait_for(ctl.drained.wait(), 10.0)
        await asyncio.sleep(0.1)  # nothing more goes out after the drain
        after = launched
        await ctl.stop()
        return launched, ctl.drained.is_set(), after

    launched, drained, after = asyncio.run(go())
    assert (launched, drained, after) == (20, True, 20)


def _rec(rid: int, t_send: float, ttft: float, gaps: list[float], status: str = records.OK, phase: str = "live") -> RequestRecord:
    r = RequestRecord(rid=rid, phase=phase, step=0, concurrency=4, t_send=t_send)
    r.t_first = t_send + ttft
    t = r.t_first
    r.chunk_times = [t]
    for g in gaps:
        t += g
        r.chunk_times.append(t)
    r.t_end = t
    r.output_tokens = len(gaps) + 1
    r.input_tokens = 10
    r.status = status
    return r


def test_run_totals_follow_bench_servings_definitions():
    """Mean/median/p90 of TTFT, TPOT (excluding the first token), ITL over every gap, E2E;
    duration from the first send to the last end; failures apart; start-up requests not load."""
    tot = RunTotals()
    tot.on_end(_rec(1, 100.0, 0.1, [0.02, 0.02, 0.02]))  # e2e 0.16, tpot 20 ms
    tot.on_end(_rec(2, 100.5, 0.3, [0.04, 0.04]))  # e2e 0.38, tpot 40 ms
    failed = _rec(3, 100.2, 0.1, [])
    failed.status = records.FAILED
    tot.on_end(failed)
    tot.on_end(_rec(4, 50.0, 0.1, [0.01], phase="calibration"))  # not load
    s = tot.summary((50.0, 90.0, 99.0))
    assert (s["completed"], s["failed"]) == (1 + 1, 1)
    assert s["duration"] == pytest.approx(100.88 - 100.0, abs=1e-6)
    assert s["mean_ttft_ms"] == pytest.approx(200.0)
    assert s["mean_tpot_ms"] == pytest.approx(30.0)
    assert s["mean_itl_ms"] == pytest.approx((3 * 20 + 2 * 40) / 5)
    assert s["median_e2e_latency_ms"] == pytest.approx(270.0, abs=2.0)
    assert s["total_output_tokens"] == 4 + 3
    assert s["output_throughput"] == pytest.approx(7 / 0.88, rel=1e-3)
    text = format_run_summary(s, (50.0, 90.0, 99.0))
    assert "Successful requests:" in text and "P90 TTFT (ms):" in text and "P99 E2E Latency (ms):" in text
    assert "P95" not in text  # only what was asked for
    assert all(len(line) <= 50 for line in text.splitlines())


def test_a_preset_step_may_count_requests_instead_of_holding():
    p = parse_toml("[ramp]\nconcurrency = [2, 4]\nnum_requests = 30\n", "count.toml")
    plans = p.ramp.steps()
    assert [(s.hold_s, s.min_requests, s.num_requests) for s in plans] == [(0.0, 30, 30)] * 2
    assert plans[0].max_hold_s == 600.0
    with pytest.raises(PresetError, match=r"\[ramp\]\.hold_s.*not used with num_requests"):
        parse_toml("[ramp]\nconcurrency = [2]\nnum_requests = 30\nhold_s = 10\n", "count.toml")
    with pytest.raises(PresetError, match=r"num_requests.*0"):
        parse_toml("[ramp]\nconcurrency = [2]\nnum_requests = 0\n", "count.toml")
    with pytest.raises(PresetError, match=r"\[ramp\]\.num_requests.*search"):
        parse_toml('[ramp]\nmode = "search"\nstart = 2\nmax = 8\nnum_requests = 5\n', "count.toml")


def test_the_percentile_table_marks_bounds_and_fits_80_columns():
    step = {"concurrency": 8, "duration_s": 10, "completed": 5, "failed": 0, "output_throughput": 1.0, "input_throughput": 1.0,
            "request_throughput": 1.0, "median_ttft_ms": 80.0, "p99_ttft_ms": 120.0, "p99_ttft_ms_bound": True,
            "p90_ttft_ms": 100.0, "p95_ttft_ms": 110.0, "p95_ttft_ms_bound": True, "p90_tpot_ms": 20.0}
    text = format_percentile_table([step], (50.0, 90.0, 95.0, 99.0))
    lines = text.splitlines()
    assert lines[0] == "percentiles (ms)"
    ttft = next(ln for ln in lines if "TTFT" in ln).split()
    assert ttft[-4:] == ["80.0", "100", "≥110", "≥120"]
    assert all(len(ln) <= 80 for ln in lines)
    assert format_percentile_table([step], (50.0, 99.0)) == ""  # the step table has those


def test_bad_fixed_size_and_percentile_values_are_one_line_errors(capsys):
    for argv, named in ((["--num-requests", "0"], "'0'"), (["--duration", "soon"], "'soon'"),
                        (["--percentiles", "50,101"], "101"), (["--percentiles", "ninety"], "'ninety'")):
        assert main_in_process(["--headless", *argv]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert named in err[-1], err


def test_the_tui_closes_when_a_fixed_size_run_is_done():
    from redline.tui.app import RedlineApp

    from e2e.test_startup import SnapHost, running_snapshot

    async def go() -> tuple[str, list[str]]:
        host = SnapHost(running_snapshot(), EngineConfig(url="http://127.0.0.1:1"))
        stopped: list[str] = []
        host.stop = stopped.append  # type: ignore[method-assign]
        app = RedlineApp(host, step=8)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause(0.3)
            assert not stopped  # a running session is held
            host.snapshot = replace(host.snapshot, finished="100 requests sent and ended")
            for _ in range(50):
                await pilot.pause(0.1)
                if stopped:
                    break
        return app.exit_reason, stopped

    reason, stopped = asyncio.run(go())
    assert reason == "fixed-size run done: 100 requests sent and ended" and stopped == [reason]


# -- against the sim ---------------------------------------------------------------------------
@pytest.mark.server
def test_num_requests_sends_and_ends_exactly_n_and_prints_the_run(shared_sim, tmp_path):
    """`redline --headless -c 8 --num-requests 100`: the sim received exactly 100 load requests
    (beside start-up's), each ended; the summary's figures are the sim's clock's."""
    sim = shared_sim("healthy")
    before = len(_truth(sim.url))
    out = tmp_path / "s"
    proc = _headless(sim.url, out, "-c", "8", "--num-requests", "100", "--input-len", "32", "--output-len", "16",
                     "--progress-s", "1")
    rc, stdout, stderr = finish(proc, 120)
    assert rc == 0, stderr
    rows = _rows(out)
    live = [r for r in rows if r["phase"] != "calibration"]
    assert len(live) == 100 and all(r["status"] == "ok" for r in live)
    truth = _truth(sim.url)[before:]
    assert len(truth) == len(rows)  # nothing sent but what was recorded
    assert _summary_figure(stdout, "Successful requests:") == 100
    assert _summary_figure(stdout, "Failed requests:") == 0
    for label in ("P90 TTFT (ms):", "P95 TTFT (ms):", "P90 E2E Latency (ms):", "P95 ITL (ms):", "P99 TPOT (ms):"):
        assert _summary_figure(stdout, label) > 0
    # against the sim's clock: the client sees each request a little later than the server sent it
    load_truth = sorted(truth, key=lambda t: t["t_arrive"])[-100:]
    e2e_truth = statistics.median((t["t_end"] - t["t_arrive"]) * 1000 for t in load_truth)
    ttft_truth = statistics.median((t["t_first"] - t["t_arrive"]) * 1000 for t in load_truth)
    assert 0 <= _summary_figure(stdout, "Median E2E Latency (ms):") - e2e_truth < 40
    assert 0 <= _summary_figure(stdout, "Median TTFT (ms):") - ttft_truth < 40
    summ = json.loads((out / "summary.json").read_text())
    assert summ["run"]["completed"] == 100 and "p95_e2e_latency_ms" in summ["run"]
    assert {"p90_ttft_ms", "p95_itl_ms", "p90_tpot_ms", "p95_e2e_latency_ms"} <= set(summ["steps"][0])
    meta = json.loads((out / "meta.json").read_text())
    assert meta["percentiles"] == [50.0, 90.0, 95.0, 99.0] and "fixed-size run done" in meta["end_reason"]
    progress = [ln for ln in stdout.splitlines() if ln.startswith("redline: C=8")]
    assert progress and "/100 requests" in progress[-1]  # no terminal: a line each --progress-s


@pytest.mark.server
def test_duration_ends_within_a_second(shared_sim, tmp_path):
    sim = shared_sim("healthy")
    out = tmp_path / "d"
    proc = _headless(sim.url, out, "-c", "4", "--duration", "3s", "--output-len", "16")
    t0 = time.monotonic()
    rc, stdout, stderr = finish(proc, 60)
    assert rc == 0, stderr
    events = [json.loads(line) for line in (out / "events.ndjson").read_text().splitlines()]
    done = next(e for e in events if e["text"].startswith("fixed-size run done"))
    started = next(e for e in events if e["kind"] in ("start", "notice", "step"))["elapsed_s"]
    assert done["text"] == "fixed-size run done: 3 s"
    assert 3.0 <= done["elapsed_s"] - started < 4.0 + 1.0  # the start-up's calibration comes before the clock starts
    assert time.monotonic() - t0 < 30
    assert "Serving Benchmark Result" in stdout


@pytest.mark.server
def test_percentiles_asked_for_are_the_steps_own(shared_sim, tmp_path):
    """--percentiles 50,90,99.9: each step's p90 TTFT is its own requests' (within the digest's
    accuracy); p95 is not carried."""
    sim = shared_sim("healthy")
    out = tmp_path / "p"
    rc, stdout, stderr = finish(_headless(sim.url, out, "-c", "6", "--num-requests", "60", "--output-len", "16",
                                          "--percentiles", "50,90,99.9"), 120)
    assert rc == 0, stderr
    step = json.loads((out / "summary.json").read_text())["steps"][0]
    assert "p95_ttft_ms" not in step and "p99.9_itl_ms" in step
    ttfts = sorted(r["ttft_ms"] for r in _rows(out) if r["phase"] == "live" and r["step"] == step["index"])
    assert step["p90_ttft_ms"] == pytest.approx(statistics.quantiles(ttfts, n=10, method="inclusive")[8], rel=0.05, abs=1.0)
    assert "P99.9 ITL (ms):" in stdout and "P95" not in stdout


@pytest.mark.server
def test_a_signal_prints_what_finished_with_the_step_marked_partial(shared_sim, tmp_path):
    """Ctrl-C during a preset's step: the run so far in bench_serving's layout, the step table
    with the interrupted step partial, exit 130; every request ended is in the log."""
    sim = shared_sim("healthy")
    preset = write_preset(tmp_path, "long", concurrency=[4], output_len=16, hold_s=60)
    out = tmp_path / "i"
    proc = start_headless(sim.url, preset, out)
    assert wait_for(lambda: (out / "requests.ndjson").exists() and sum(r["phase"] == "measure" for r in _rows(out)) >= 10, 60)
    proc.send_signal(signal.SIGINT)
    rc, stdout, stderr = finish(proc, 30)
    assert rc == 130, stderr
    assert "Serving Benchmark Result (so far)" in stdout
    table = stdout[stdout.index("C  dur s"):]
    assert "partial" in table.splitlines()[2]
    summ = json.loads((out / "summary.json").read_text())
    assert summ["steps"][-1]["partial"] is True
    ok = [r for r in _rows(out) if r["phase"] != "calibration" and r["status"] == "ok"]
    assert _summary_figure(stdout, "Successful requests:") == len(ok) == summ["run"]["completed"]
    assert "session saved" in stderr


def test_snapshot_says_why_a_fixed_size_run_ended():
    assert Snapshot(t=0.0, elapsed_s=0.0, state="running", target_c=1, previous_c=None, in_flight=0, max_concurrency=1).finished == ""
