"""Comparable, or said so (engine/report/comparable.py): sessions that ran different workloads
(input/output lengths, dataset, API, load shape) are named with their workloads and warned
about in one line by `redline report A B`, the gate against a baseline and a sweep's gate
(the HTML page: tests/unit/engine/report/test_html.py), and no best-at-a-load mark is drawn between them."""

from __future__ import annotations

import json
from pathlib import Path

from redline.engine.measure.step_result import StepResult
from redline.engine.report.comparable import same_workload, session_workload, workload_texts, workload_warning
from redline.engine.report.compare import align_by_load, load_sessions, session_from_steps
from redline.engine.sweep.gate import check_sweep, parse_sweep_gate

from helpers import main_in_process

LONG = {"dataset": "random", "input_len": 1024, "output_len": 2048}
SHORT = {"dataset": "random", "input_len": 32, "output_len": 128}
WARNING = ("warning: these sessions ran different workloads ([1]: 1024 in / 2048 out, chat; [2]: 32 in / 128 out, chat): "
           "figures at the same C are not comparable")


def _step(c: int, tok_s: float, workload: dict | None = None, mode: str = "concurrency", **kw) -> dict:
    d = {"concurrency": c, "duration_s": 10.0, "completed": 50, "failed": 0, "output_throughput": tok_s,
         "input_throughput": 1.0, "request_throughput": 1.0, "median_ttft_ms": 100.0, "p99_ttft_ms": 200.0,
         "median_itl_ms": 20.0, "p99_itl_ms": 40.0, "mean_tpot_ms": 21.0, "index": c, "mode": mode,
         "workload": workload}
    d.update(kw)
    return d


def _session(tmp: Path, name: str, workload: dict | None, api: str | None = "chat", steps: list[dict] | None = None,
             meta_workload: dict | None = None) -> Path:
    """A session directory: its steps record `workload` (None: an older session whose steps
    did not), meta.json `meta_workload` (by default the same)."""
    d = tmp / name
    d.mkdir()
    target = {"url": "http://127.0.0.1:1", "model": "m", **({"api": api} if api else {})}
    meta = {"label": name, "target": target, "workload": meta_workload if meta_workload is not None else (workload or {})}
    (d / "meta.json").write_text(json.dumps(meta))
    steps = steps if steps is not None else [_step(8, 800.0, workload), _step(16, 1400.0, workload)]
    (d / "summary.json").write_text(json.dumps({"label": name, "target": target, "steps": steps, "break": None, "probe": None,
                                                "knee_concurrency": 16, "knee_reason": "within 5 %",
                                                "max_throughput_concurrency": 16}))
    return d


def _report(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main_in_process(["report", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


# -- redline report A B ----------------------------------------------------------------------

def test_report_of_different_workloads_names_them_warns_once_and_marks_no_best(tmp_path, capsys):
    a = _session(tmp_path, "long", LONG)
    b = _session(tmp_path, "short", SHORT, steps=[_step(8, 900.0, SHORT), _step(16, 1500.0, SHORT)])
    rc, out, err = _report(capsys, str(a), str(b), "--no-plot")
    assert rc == 0 and err == ""
    lines = out.splitlines()
    assert lines.count(WARNING) == 1 and sum("warning" in ln for ln in lines) == 1
    assert lines[1].startswith("  [1] long ") and lines[1].endswith("workload: 1024 in / 2048 out, chat")
    assert lines[2].startswith("  [2] short ") and lines[2].endswith("workload: 32 in / 128 out, chat")
    assert lines[3] == WARNING  # under the sessions, above the table
    table = out.split("\n\n")[1]
    assert table.endswith("latencies in ms; err = failed requests; no *: the sessions ran different workloads")
    # no best-at-a-load mark on any row across different workloads
    assert not any(c.endswith("*") for row in table.splitlines()[3:-1] for c in row.split())
    assert all(r.best is None for r in align_by_load(load_sessions([a, b])))


def test_report_of_the_same_workload_has_no_warning_and_marks_the_best(tmp_path, capsys):
    a = _session(tmp_path, "one", LONG)
    b = _session(tmp_path, "two", LONG, steps=[_step(8, 900.0, LONG), _step(16, 1500.0, LONG)])
    rc, out, err = _report(capsys, str(a), str(b), "--no-plot")
    assert rc == 0 and "warning" not in out
    assert out.count("workload: 1024 in / 2048 out, chat") == 2
    table = out.split("\n\n")[1]
    assert "900.0*" in table and "1500.0*" in table and "* = most tok/s at that C" in table


# -- the gate against a baseline ---------------------------------------------------------------

def test_the_gate_against_a_baseline_warns_above_its_results(tmp_path, capsys):
    a = _session(tmp_path, "base", LONG)
    b = _session(tmp_path, "cand", SHORT)
    rc, out, err = _report(capsys, str(a), str(b), "--no-plot", "--gate", "tok_s>=-5%")
    assert rc == 0, err
    gate = out[out.index("\ngate: ") - 400:]  # the gate's block, the line above its title
    want = ("warning: these sessions ran different workloads (baseline base: 1024 in / 2048 out, chat; "
            "candidate cand: 32 in / 128 out, chat): figures at the same C are not comparable\n"
            "gate: cand against baseline base: PASS")
    assert want in gate
    assert out.count("warning: these sessions ran different workloads") == 2  # the report's and the gate's


def test_the_gate_names_the_one_workload_both_ran(tmp_path, capsys):
    a = _session(tmp_path, "base", LONG)
    b = _session(tmp_path, "cand", LONG, steps=[_step(8, 500.0, LONG), _step(16, 1400.0, LONG)])
    rc, out, err = _report(capsys, str(a), str(b), "--no-plot", "--gate", "tok_s>=-5%")
    assert rc == 4  # C=8: 800 -> 500
    assert "workload: 1024 in / 2048 out, chat, the same for both\ngate: cand against baseline base: FAIL" in out
    assert "warning" not in out


# -- a sweep's gate ------------------------------------------------------------------------------

def test_a_sweep_gate_best_says_when_the_configurations_are_not_comparable(tmp_path):
    a = _session(tmp_path, "mb8", LONG)
    b = _session(tmp_path, "mb64", SHORT)
    doc = {"configurations": [
        {"label": "mb8", "status": "completed", "session_dir": str(a), "max_output_throughput": 1400.0},
        {"label": "mb64", "status": "completed", "session_dir": str(b), "max_output_throughput": 1500.0}]}
    lines, ok = check_sweep(parse_sweep_gate("best:mb64"), doc)
    assert ok
    warn = [ln for ln in lines if "warning" in ln]
    assert warn == ["  warning: these sessions ran different workloads (mb8: 1024 in / 2048 out, chat; "
                    "mb64: 32 in / 128 out, chat): figures at the same C are not comparable"]
    assert lines[-1].endswith("(not comparable: different workloads, above)")
    # the same workload: the verdict alone
    c = _session(tmp_path, "mb16", LONG)
    doc["configurations"][1]["session_dir"] = str(c)
    lines, ok = check_sweep(parse_sweep_gate("best:mb64"), doc)
    assert not any("warning" in ln or "not comparable" in ln for ln in lines)


# -- what a workload is ------------------------------------------------------------------------

def test_each_part_of_the_workload_counts_and_is_named(tmp_path):
    made = iter(range(100))

    def pair(wa, wb, api_b="chat", mode_b="concurrency"):
        where = tmp_path / str(next(made))
        where.mkdir()
        a = _session(where, "a", wa)
        b = _session(where, "b", wb, api=api_b, steps=[_step(8, 800.0, wb, mode=mode_b)])
        return load_sessions([a, b])

    same = pair(LONG, dict(LONG))
    assert same_workload(same) and workload_warning(same) is None
    # the dataset: named for both when it differs
    s = pair(LONG, {**LONG, "dataset": "sharegpt:/data/sg.json"})
    # (a ShareGPT session's lengths are its conversations', not input_len / output_len: issue 46)
    assert workload_texts(s) == ["1024 in / 2048 out, random, chat", "sharegpt:sg.json (the conversations' lengths), chat"]
    s = pair(LONG, {**LONG, "dataset": "sharegpt:/data/sg.json", "sharegpt_output_len": 64})
    assert workload_texts(s)[1] == "sharegpt:sg.json (64 out), chat"
    # one data set at two paths (two machines) is the same data set
    assert same_workload(pair({**LONG, "dataset": "sharegpt:/a/sg.json"}, {**LONG, "dataset": "sharegpt:/b/sg.json"}))
    # the API
    s = pair(LONG, LONG, api_b="generate")
    assert workload_texts(s) == ["1024 in / 2048 out, chat", "1024 in / 2048 out, generate"]
    # the load shape: named for both when it differs
    s = pair(LONG, LONG, mode_b="rate")
    assert not same_workload(s)
    assert workload_texts(s) == ["1024 in / 2048 out, chat, concurrency", "1024 in / 2048 out, chat, rate"]
    # multi-turn settings are named
    s = pair(LONG, {**LONG, "turns": 3, "think_s": 0.5})
    assert workload_texts(s)[1] == "1024 in / 2048 out, think_s 0.5, turns 3, chat"


def test_the_workload_comes_from_the_steps_else_meta_and_what_is_unrecorded_is_not_held_against(tmp_path):
    # an older session: its steps recorded no workload; meta.json's stands
    old = _session(tmp_path, "old", None, meta_workload=SHORT)
    w = session_workload(load_sessions([old])[0])
    assert w.text() == "32 in / 128 out, chat"
    # a live change of workload in one session: both, in order
    live = session_from_steps("live", [StepResult.from_dict(_step(8, 1.0, LONG)), StepResult.from_dict(_step(16, 1.0, SHORT))])
    assert session_workload(live).text() == "1024 in / 2048 out then 32 in / 128 out"
    # a session that did not record its API is not warned about for it
    a = _session(tmp_path, "noapi", LONG, api=None)
    b = _session(tmp_path, "chat", LONG)
    assert same_workload(load_sessions([a, b]))
