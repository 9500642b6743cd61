"""Issue 46, cases 3 to 7, headless: Ctrl-C on a held or fixed-size run prints the step table
with the cut step `partial`; the benchmark block and the step row count the same tokens under
one name (or say what each counts); the live status line is cleared before a warning; an
error's changing numbers do not make it another error in the one-line-per-error log."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import time
from types import SimpleNamespace

import pytest

from redline.engine.core.event_log import EventLog
from redline.tui.cli.progress import CLEAR, Progress

from helpers import FAST_SIM, ROOT, finish, main_in_process, redline_command, wait_for


def _figure(text: str, label: str) -> float:
    m = re.search(rf"^{re.escape(label)}\s+([0-9.]+)$", text, re.M)
    assert m, (label, text)
    return float(m.group(1))


def _step_rows(text: str) -> list[dict[str, str]]:
    """The end table's rows as {header: cell} (headers split on two spaces or more)."""
    lines = text.splitlines()
    i = next(k for k, line in enumerate(lines) if re.match(r"^\s*(load\s+)?C\s+dur s", line))
    head = lines[i]
    starts = [m.start() for m in re.finditer(r"\S+(?: \S+)*", head)]
    names = re.findall(r"\S+(?: \S+)*", head)
    rows = []
    for line in lines[i + 2:]:
        if not line.strip() or line.startswith(("latencies", "done =")):
            break
        cells = line.split()
        rows.append(dict(zip(names, cells, strict=False)))
    assert starts and rows
    return rows


# -- 3. Ctrl-C on a held or fixed-size headless run -----------------------------------------------
@pytest.mark.parametrize("size", [("--duration", "5m"), ("--num-requests", "100000")])
def test_ctrl_c_on_a_held_run_prints_the_step_table_with_the_cut_step_partial(sim_factory, tmp_path, size):
    sim = sim_factory("healthy", 0, FAST_SIM)
    out = tmp_path / "s"
    proc = subprocess.Popen([*redline_command(), "--headless", "--url", sim.url, "--no-nvml", "-c", "8", "--output-len", "16",
                             *size, "--out", str(out)], cwd=ROOT, env={**os.environ, "CI": "true"},
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    assert wait_for(lambda: (out / "requests.ndjson").exists() and (out / "requests.ndjson").read_text().count('"live"') >= 20, 60)
    time.sleep(1.2)  # a second of the step measured
    proc.send_signal(signal.SIGINT)
    rc, stdout, stderr = finish(proc, 30)
    assert rc == 130, stderr
    assert "Serving Benchmark Result (so far)" in stdout
    rows = _step_rows(stdout)
    assert len(rows) == 1 and rows[0]["C"] == "8" and stdout.splitlines()[
        next(i for i, line in enumerate(stdout.splitlines()) if line.startswith("C  dur s")) + 2].rstrip().endswith("partial")
    assert json.loads((out / "summary.json").read_text())["steps"][-1]["partial"] is True
    assert "stopped by SIGINT" in stderr and "session saved" in stderr


# -- 4, 5. one name, one figure ------------------------------------------------------------------------
def test_the_benchmark_block_and_the_step_row_agree_on_output_tok_s_and_say_what_they_count(sim_factory, tmp_path, capsys):
    """An open-loop run whose end cancels requests in flight: bench_serving's throughput counts
    the successful ones only; the row `incl. cancelled` counts every token that arrived, and is
    the step's out tok/s; the footnotes say what done, req/s and out tok/s count. The summary
    is also written where --result-filename says."""
    sim = sim_factory("healthy", 0, ("--set", "decode_base_s=0.02", "--set", "decode_per_seq_s=0.0001"))
    result = tmp_path / "result.json"
    rc = main_in_process(["--headless", "--url", sim.url, "--no-nvml", "--rate", "20", "--arrival", "constant",
                          "--max-concurrency", "256", "--duration", "4s", "--out", str(tmp_path / "s"),
                          "--result-filename", str(result)])
    text = capsys.readouterr()
    assert rc == 0, text.err
    stdout = text.out
    cancelled = _figure(stdout, "Cancelled at the end (not counted):")
    assert cancelled >= 10  # 2.6 s answers, sends until the end: the last ones are cut
    completed_only = _figure(stdout, "Output token throughput (tok/s):")
    every_token = _figure(stdout, "Output tok/s incl. cancelled (tok/s):")
    step = float(_step_rows(stdout)[0]["out tok/s"])
    assert every_token > completed_only * 1.3
    assert abs(every_token - step) <= 0.05 * step, (every_token, step)
    assert "throughputs: of the successful requests, as bench_serving counts them" in stdout
    assert "incl. cancelled: every output token that arrived, as the step table's out tok/s" in stdout
    for note in ("done = the step's own requests (sent at its load) that completed",
                 "req/s = requests completed per second inside its window, whichever step sent them",
                 "out tok/s = every output token that arrived in its window, of requests still running too"):
        assert note in stdout
    summary = json.loads((tmp_path / "s" / "summary.json").read_text())
    assert summary["run"]["all_output_throughput"] == pytest.approx(every_token, abs=0.01)
    assert json.loads(result.read_text()) == summary  # --result-filename: the summary itself
    assert f"summary written to {result}" in text.err


# -- 6. the status line is cleared before a warning ------------------------------------------------
class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_warning_clears_the_live_status_line_first():
    stream = _Tty()
    events = SimpleNamespace(on_warning=lambda key, text: stream.write(f"redline: warning: {text}\n"))
    snap = SimpleNamespace(ttft_ms={"p50": 10.0, "p99": 20.0}, in_flight=3, output_tok_s=100.0)
    engine = SimpleNamespace(events=events, snapshot=snap, load_text="C=8", preset_line="",
                             totals=SimpleNamespace(completed=4, failed=0), config=SimpleNamespace(num_requests=None))
    p = Progress(engine, stream=stream)
    p.show()
    engine.events.on_warning("cap", "server cap: 8 running of 64 sent")
    text = stream.getvalue()
    status = text.index("done 4")
    warning = text.index("redline: warning: server cap")
    assert status < text.index(CLEAR, status) < warning, repr(text)  # cleared between the two: never `done 4 redline: warning`
    p.show()  # the next tick draws it again, after the warning
    assert stream.getvalue().rindex("done 4") > warning


# -- 7. one line per distinct error, whatever its numbers ------------------------------------------
def test_an_errors_changing_numbers_do_not_make_it_another_error():
    log = EventLog()
    for n in range(48, 88):
        log.failed("http_503", f"HTTP 503: server overloaded ({n} requests in flight)")
    log.failed("http_500", "HTTP 500: simulated internal server error")
    log.failed("http_500", "HTTP 500: simulated internal server error")
    log.failed("read_error", "stream of request 3f2a9c0d1e2b4a5f dropped after 12 chunks")
    log.failed("read_error", "stream of request 9c0d1e2b4a5f3f2a dropped after 3 chunks")
    log.each_second(0.0)
    lines = [line.text for line in log.lines]
    assert lines == [
        "40 × http_503: HTTP 503: server overloaded (48-87 requests in flight)",
        "2 × http_500: HTTP 500: simulated internal server error",
        "2 × read_error: stream of request … dropped after 3-12 chunks",
    ]
    log.failed("http_503", "HTTP 503: server overloaded (48 requests in flight)")
    log.failed("http_500", "HTTP 503: server overloaded (48 requests in flight)")  # another kind stays apart
    log.each_second(1.0)
    assert [line.text for line in log.lines][3:] == ["http_503: HTTP 503: server overloaded (48 requests in flight)",
                                                     "http_500: HTTP 503: server overloaded (48 requests in flight)"]


def test_fragiles_overload_is_one_error_line_a_second(sim_factory, tmp_path):
    """The fragile sim above 48 in flight rejects half its requests with `(N requests in
    flight)`, N changing with every one: events.ndjson has one http_503 line a second."""
    sim = sim_factory("fragile", 0, FAST_SIM)
    out = tmp_path / "s"
    rc = main_in_process(["--headless", "--url", sim.url, "--no-nvml", "-c", "72", "--output-len", "64",
                          "--duration", "3s", "--out", str(out)])
    assert rc == 0
    errors = [json.loads(line) for line in (out / "events.ndjson").read_text().splitlines() if '"error"' in line]
    errors = [e for e in errors if e["kind"] == "error" and "http_503" in e["text"]]
    assert errors, "fragile rejected nothing at C=72"
    per_second: dict[int, int] = {}
    for e in errors:
        per_second[int(e["t"])] = per_second.get(int(e["t"]), 0) + 1
    assert max(per_second.values()) <= 2, errors  # one a second (two where a second's line lands astride a wall second)
    assert sum(int(m.group(1)) if (m := re.match(r"(\d+) × ", e["text"])) else 1 for e in errors) >= 5
    assert any(re.search(r"\(\d+-\d+ requests in flight\)", e["text"]) for e in errors)
