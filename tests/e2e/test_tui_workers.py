"""Each worker's health on the operator's screen and in `redline report` (issue 17: "Each
worker's health is on screen: lag, CPU, node"; "A worker or node that dies is reported").

The block's text from hand-built rows; the screen from scripted Snapshots (the `workers`
story of tests/e2e/test_screen.py, FakeHost: no sim, no clock) at 80x24, 120x40 and 160x44 and with
targets beside the workers; help; the report's table from a written summary.json; and one
Pilot run at 80x24 against a sim the test starts (127.0.0.1 only) with `workers=2`, one of
them then killed.
"""

from __future__ import annotations

import os
import signal
from dataclasses import replace

import pytest

from redline.engine.core.config import EngineConfig
from redline.engine.host import EngineThread
from redline.engine.session import SessionWriter
from redline.engine.workload.prompts import WorkloadConfig
from redline.tui.app import RedlineApp
from redline.tui.cli.report import format_workers_table, report_text
from redline.tui.widgets.help import HelpScreen, worker_rows
from redline.tui.widgets.workers_panel import (
    DEAD_STYLE,
    KEEP_NARROW,
    MAX_ROWS,
    WorkersPanel,
    block_lines,
    rows_text,
    summary_text,
    workers_text,
)

from e2e.test_screen import FakeHost, make_app, play, screen_lines, targets_story, workers_story
from helpers import FAST_SIM, settle


def w(i: int, *, node: str = "gpu-a", alive: bool = True, share: int = 16, requests: int = 100, tok: float = 512.25,
      lag: float | None = 1.25, cpu: float | None = 40.0) -> dict:
    return {"worker": i, "node": node, "alive": alive, "share": share, "requests": requests,
            "output_tok_s": tok, "lag_p99_ms": lag, "cpu_pct": cpu}


FOUR = [w(0, cpu=30.0, lag=0.9), w(1, cpu=61.0, lag=1.4), w(2, node="gpu-b", alive=False, requests=40, lag=9.0, cpu=99.0),
        w(3, node="gpu-b", cpu=45.0, lag=2.1)]


pytestmark = pytest.mark.usefixtures("utc")  # times of day in UTC (tests/conftest.py)


# -- the block's text ------------------------------------------------------------------------------
def test_summary_line_names_the_worst_live_worker_and_the_dead_in_the_error_style():
    t = summary_text(FOUR, 78)
    assert t.plain == "4 workers on 2 nodes · CPU max 61% (w1) · lag p99 max 2.1 ms (w3) · 1 DEAD: w2"
    assert t.cell_len <= 78
    # the dead worker's own figures (its last CPU 99 %, lag 9 ms) are not the live maximum
    dead = t.plain.index("1 DEAD")
    assert any(sp.style == DEAD_STYLE and sp.start <= dead < sp.end for sp in t.spans), t.spans
    # narrower: whose goes first, then "max", then the dead names; never wider than asked while it can
    for width in (70, 60):
        s = summary_text(FOUR, width)
        assert s.cell_len <= width and "DEAD" in s.plain, (width, s.plain)
    assert summary_text(FOUR, 70).plain == "4 workers on 2 nodes · CPU max 61% · lag p99 max 2.1 ms · 1 DEAD: w2"
    # all alive, one node: no node count, no DEAD
    assert summary_text(FOUR[:2], 78).plain == "2 workers · CPU max 61% (w1) · lag p99 max 1.4 ms (w1)"
    # no figures yet (a worker not yet reported): just the count
    assert summary_text([w(0, lag=None, cpu=None), w(1, lag=None, cpu=None)], 78).plain == "2 workers"


def test_rows_have_a_column_each_and_dead_reads_DEAD_with_its_live_figures_dashed():
    t = rows_text(FOUR, 78, MAX_ROWS)
    lines = t.plain.splitlines()
    assert lines[0].split() == ["worker", "node", "C", "requests", "tok/s", "lag", "p99", "CPU"]
    assert lines[1].split() == ["w0", "gpu-a", "16", "100", "512", "0.9", "ms", "30%"], lines[1]
    assert lines[3].split() == ["w2", "gpu-b", "-", "40", "DEAD", "-", "-"], lines[3]
    assert all(len(line) <= 78 for line in lines)
    dead = t.plain.index("DEAD")
    assert any(sp.style == DEAD_STYLE and sp.start <= dead < sp.end for sp in t.spans)
    # the columns line up under their titles (right-aligned)
    assert len({line.index("%") for line in lines[1:] if "%" in line}) == 1
    # rate mode: the share is of the in-flight cap
    assert rows_text(FOUR, 78, MAX_ROWS, mode="rate").plain.split()[2] == "cap"


def test_rows_beyond_the_room_are_counted_on_the_title_line_with_their_dead():
    many = [w(i, alive=i != 5) for i in range(12)]
    lines = rows_text(many, 78, 3).plain.splitlines()
    assert len(lines) == 4
    assert lines[0].rstrip().endswith("+9 more (1 DEAD)"), lines[0]
    assert all(len(line) <= 78 for line in lines)
    # a long Ray node name is cut in its middle, the columns stay
    long = [w(0, node="ip-10-0-0-5.us-west-2.compute.internal"), w(1)]
    lines = rows_text(long, 78, 2).plain.splitlines()
    assert all(len(line) <= 78 for line in lines) and "…" in lines[1]
    assert lines[1].split()[-1] == "40%"


def test_block_lines_prefers_rows_then_the_summary_then_nothing():
    # 80x24, no targets, 8 GPUs: 21 lines of body, 8 of panels, 3 of GPUs -> 10 spare: the line
    assert block_lines(2, 10, wide=False) == 1
    # the same at 80x40: room for a title and both rows, the step table and log keep theirs
    assert block_lines(2, 26, wide=False) == 3
    assert block_lines(4, 1 + 4 + KEEP_NARROW, wide=False) == 5
    # rows as many as fit (at least two), the rest `+N more`
    assert block_lines(16, 1 + 5 + KEEP_NARROW, wide=False) == 6
    assert block_lines(16, 60, wide=False) == 1 + MAX_ROWS
    # no room even for the line (targets and a tall header at 80x24): nothing; the warnings say it
    assert block_lines(4, 6, wide=False) == 0
    assert block_lines(4, 7, wide=False) == 1
    assert block_lines(0, 60, wide=False) == 0
    # one worker: one row is "all of them"
    assert block_lines(1, 1 + 1 + KEEP_NARROW, wide=False) == 2
    assert workers_text(FOUR, 78, 0).plain == ""
    assert workers_text(FOUR, 78, 1).plain == summary_text(FOUR, 78).plain


# -- the screen, scripted ----------------------------------------------------------------------------
async def _screen(name_or_snaps, size):
    if isinstance(name_or_snaps, str):
        app, host, snaps = make_app(name_or_snaps)
    else:
        snaps = name_or_snaps
        host = FakeHost(snaps[0])
        app = RedlineApp(host, step=8)
    async with app.run_test(size=size) as pilot:
        await play(pilot, host, snaps)
        await play(pilot, host, snaps[-1:])  # one refresh more: the block's room from the last layout
        return screen_lines(app), app.query_one(WorkersPanel).size.height


async def test_80x24_one_summary_line_under_the_gpus_and_every_line_fits():
    lines, height = await _screen("workers", (80, 24))
    assert len(lines) == 24 and all(len(line) <= 80 for line in lines)
    assert height == 1
    i = next(i for i, line in enumerate(lines) if line.strip().startswith("4 workers"))
    assert lines[i].strip() == "4 workers on 2 nodes · CPU max 41% (w3) · lag p99 max 2.7 ms (w3) · 1 DEAD: w2"
    assert lines[i - 1].strip().startswith("GPU W / % of limit"), "under the GPU panel"
    assert "workers" not in lines[i - 1], "the GPU foot no longer counts them"
    steps = next(j for j, line in enumerate(lines) if line.split()[:2] == ["C", "dur"])
    assert steps == i + 1 and lines[steps + 2].startswith(" 64*"), "the step table keeps its rows"


async def test_taller_and_wide_screens_list_a_row_per_worker():
    for size in ((120, 40), (160, 44), (80, 40)):
        lines, height = await _screen("workers", size)
        assert height == 5, size
        assert all(len(line) <= size[0] for line in lines)
        top = next(i for i, line in enumerate(lines) if line.split()[:3] == ["worker", "node", "C"])
        rows = [line.split() for line in lines[top + 1 : top + 5]]
        assert [r[:2] for r in rows] == [["w0", "gpu-node-a"], ["w1", "gpu-node-a"], ["w2", "gpu-node-b"], ["w3", "gpu-node-b"]], size
        assert rows[2][2:5] == ["-", "39", "DEAD"] and [r[2] for r in rows if r[0] != "w2"] == ["22", "21", "21"], rows


def _targets_and_workers(worker_warning: bool = True):
    """The targets story (three, one gone) with the workers story's four workers (one dead)."""
    ws = {s.second: s for s in workers_story()}
    out = []
    for s in targets_story():
        mine = ws[s.second]
        extra = tuple(x for x in mine.warnings if x.startswith("worker")) if worker_warning else ()
        out.append(replace(s, workers=mine.workers, warnings=s.warnings + extra))
    return out


async def test_targets_keep_their_rows_beside_the_workers_at_80x24():
    lines, height = await _screen(_targets_and_workers(), (80, 24))
    assert len(lines) == 24 and all(len(line) <= 80 for line in lines)
    top = next(i for i, line in enumerate(lines) if line.split()[:3] == ["target", "tok/s", "err/s"])
    assert [line.split()[0] for line in lines[top + 1 : top + 4]] == ["10.0.0.5:30000", "10.0.0.6:30000", "10.0.0.7:30000"]
    # two warnings (a target gone, a worker dead) take the header to 5 lines: no room left for the
    # workers' line at 80x24; the step table and the log keep their least
    steps = next(j for j, line in enumerate(lines) if line.split()[:2] == ["C", "dur"])
    assert height == 0 and steps == top + 4
    assert lines[4].strip() == "⚠ 1 more warning: the log has them all", lines[:5]
    assert sum(1 for line in lines[steps + 1 : -1] if line.strip()) >= 4
    # one warning less: the line fits under the targets
    lines, height = await _screen(_targets_and_workers(worker_warning=False), (80, 24))
    assert height == 1 and len(lines) == 24 and all(len(line) <= 80 for line in lines)
    top = next(i for i, line in enumerate(lines) if line.split()[:3] == ["target", "tok/s", "err/s"])
    assert lines[top + 4].strip().startswith("4 workers on 2 nodes"), lines[top + 4]
    assert lines[top + 5].split()[:2] == ["C", "dur"]


async def test_no_workers_no_block():
    lines, height = await _screen("healthy", (120, 40))
    assert height == 0 and not any("worker" in line for line in lines)


async def test_help_lists_every_worker_with_node_and_share():
    app, host, snaps = make_app("workers")
    seen: list[str] = []
    async with app.run_test(size=(80, 24)) as pilot:
        await play(pilot, host, snaps)
        await pilot.press("question_mark")
        for _ in range(4):  # the settings are on the second page at 80x24
            await pilot.pause()
            assert isinstance(app.screen, HelpScreen)
            seen += screen_lines(app)
            await pilot.press("pagedown")
    text = [" ".join(line.strip(" │▁▂▃▄▅▆▇█▉▊▋▌▍▎▏").split()) for line in seen]  # no border, no scrollbar
    assert "workers 4 processes on 2 nodes, each its share of the load" in text
    for want in ("w0 gpu-node-a C 22", "w1 gpu-node-a C 21", "w2 gpu-node-b DEAD (its share went to the others)", "w3 gpu-node-b C 21"):
        assert want in text, want


def test_help_rows_say_ray_and_the_cap_in_rate_mode():
    snap = replace(workers_story()[-1], mode="rate")
    cfg = EngineConfig(url="http://10.0.0.5:30000", workers=4, ray="10.0.0.1:6379")
    rows = worker_rows(snap, cfg)
    assert rows[0] == ("workers", "4 Ray actors (10.0.0.1:6379) on 2 nodes, each its share of the load")
    assert rows[1] == ("  w0", "gpu-node-a  cap 22")
    # before the first snapshot with workers: how many were asked for; none without workers
    assert worker_rows(None, EngineConfig(url="http://x:1", workers=3)) == [("workers", "3 processes, each its share of the load")]
    assert worker_rows(None, EngineConfig(url="http://x:1")) == []


# -- redline report ----------------------------------------------------------------------------------
def test_report_prints_the_workers_after_the_step_and_target_tables(tmp_path):
    from unit.engine.report.test_session_text import _step

    d = tmp_path / "s"
    wr = SessionWriter(d, {"label": "w", "target": {"url": "http://10.0.0.5:30000"}})
    wr.write_summary({
        "target": {"url": "http://10.0.0.5:30000"}, "label": "w", "steps": [_step(8, 400.0), _step(16, 700.0)],
        "break": None, "probe": None,
        "targets": [{"url": "http://10.0.0.5:30000", "requests": 90, "errors": 0, "output_tok_s": 300.0},
                    {"url": "http://10.0.0.6:30000", "requests": 50, "errors": 0, "output_tok_s": 200.0}],
        "workers": [w(0, node="gpu-node-a", share=8, requests=80, tok=281.125, lag=1.234, cpu=35.5),
                    w(1, node="gpu-node-b", alive=False, share=8, requests=60, tok=219.0, lag=None, cpu=30.25)],
    })
    wr.close("quit")
    text, _ = report_text([d])
    lines = text.splitlines()
    steps = next(i for i, line in enumerate(lines) if line.split()[:1] == ["C"])
    targets = next(i for i, line in enumerate(lines) if line.startswith("targets (2"))
    head = next(i for i, line in enumerate(lines) if line.startswith("workers ("))
    assert steps < targets < head
    assert lines[head] == "workers (2 on 2 nodes, 1 dead)"
    assert lines[head + 1].split() == ["worker", "node", "share", "requests", "tok/s", "lag", "p99", "CPU", "%"]
    assert lines[head + 2].split() == ["w0", "gpu-node-a", "8", "80", "281.1", "1.2", "35.5"], lines[head + 2]
    assert lines[head + 3].split() == ["w1", "gpu-node-b", "-", "60", "219.0", "-", "30.2", "DEAD"], lines[head + 3]
    assert lines[head + 4].startswith("share = its part of C")
    # without workers: no table
    d2 = tmp_path / "one"
    wr = SessionWriter(d2, {"label": "x", "target": {"url": "u"}})
    wr.write_summary({"target": {"url": "u"}, "label": "x", "steps": [_step(8, 400.0)], "break": None, "probe": None})
    wr.close("quit")
    assert "workers (" not in report_text([d2])[0]
    assert format_workers_table([]) == ""


# -- live: two worker processes against a sim ---------------------------------------------------------
async def test_two_workers_live_at_80x24_then_one_killed(sim_factory, tmp_path):
    sim = sim_factory("healthy", extra_args=FAST_SIM)
    host = EngineThread(EngineConfig(
        url=sim.url, workers=2, concurrency=8, workload=WorkloadConfig(input_len=16, output_len=24),
        out_dir=tmp_path / "session", calibrate=False, use_nvml=False,
    ))
    host.start()
    try:
        app = RedlineApp(host, step=4)
        async with app.run_test(size=(80, 24)) as pilot:
            def line() -> str:
                return next((x.strip() for x in screen_lines(app) if x.strip().startswith("2 workers")), "")

            assert await settle(pilot, lambda: len(host.snapshot.workers) == 2 and all(
                x["alive"] and x["requests"] > 0 for x in host.snapshot.workers), 20), host.snapshot.workers
            assert await settle(pilot, lambda: "CPU max" in line(), 5), screen_lines(app)
            lines = screen_lines(app)
            assert len(lines) == 24 and all(len(x) <= 80 for x in lines)
            assert "DEAD" not in line() and app.query_one(WorkersPanel).size.height == 1
            assert [x["share"] for x in host.snapshot.workers] == [4, 4]
            # a worker dies: DEAD on its line, the other carries the whole C
            os.kill(host.engine.pool._procs[1].pid, signal.SIGKILL)
            assert await settle(pilot, lambda: "1 DEAD: w1" in line(), 15), screen_lines(app)
            assert await settle(pilot, lambda: host.snapshot.workers[0]["share"] == 8, 5), host.snapshot.workers
            # said as a warning (on screen WARNING_HOLD_S; a loaded machine's waits above can
            # outlast that: the event log keeps the line)
            assert any(x.kind == "warning" and "worker 1 died" in x.text for x in host.snapshot.log), host.snapshot.log
            assert all(len(x) <= 80 for x in screen_lines(app))
    finally:
        host.stop()
