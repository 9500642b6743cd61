"""Issue 46, cases 9 and 10, the screen at 80x24: the `p` picker's wrapped lines keep their
indent, the sweep's end table fits 80 columns, an export notice covers no log line, a step's
progress never passes its total; `?` explains every figure the screen can show, `cached`
says why it has no value, the concurrency prompt states what it accepts, and a short step is
marked `short` in the TUI's table too. (The sweep's footer and line: tests/e2e/test_sweep_tui.py.)"""

from __future__ import annotations

from dataclasses import replace

import pytest

from redline.engine.core import commands as C
from redline.engine.preset import builtin_presets
from redline.engine.run.step_run import elapsed_text
from redline.engine.sweep.table import format_sweep
from redline.engine.telemetry.types import ServerSample
from redline.tui.app import RedlineApp
from redline.tui.widgets.dialogs import ConcurrencyPrompt, ConfirmScreen
from redline.tui.widgets.help import FIGURES
from redline.tui.widgets.live_panels import server_text
from redline.tui.widgets.step_table import step_cells

from e2e.test_screen import FakeHost, Seg, _open, play, screen_lines, story

pytestmark = pytest.mark.usefixtures("utc")


# -- 9. 80x24 -------------------------------------------------------------------------------------
async def test_the_pickers_wrapped_lines_keep_their_indent_at_80x24():
    names = {b.name for b in builtin_presets()}
    app, host, snaps, ctx = await _open("healthy")
    seen: list[str] = []
    async with ctx as pilot:
        await play(pilot, host, snaps)
        await pilot.press("p")
        await pilot.pause(0.3)
        for _ in range(len(names) * 4):  # down the whole list: every preset's lines on screen once
            seen += screen_lines(app)
            await pilot.press("down")
            await pilot.pause(0.05)
    inside = [line[line.index("▊") + 1:line.rindex("▎")] for line in seen if "▊" in line and "▎" in line]
    texts = [t for t in inside if t.strip() and not set(t.strip()) <= {"▔", "▁", "▄", "▀"}]
    assert {t.strip() for t in texts} & names == names, "every preset's name was on screen"
    for t in texts:
        body = t.rstrip(" ▄▀▐▌█").rstrip()
        if body.strip() in names:
            assert body.startswith(" ") and not body.startswith("  "), repr(t)  # a name: one column in
        else:
            assert body.startswith("   "), repr(t)  # every description line under it: indented (never `expected:` alone)


def _sweep_doc() -> dict:
    long = {"label": "tp8-pp1-mb64", "status": "completed", "startup_s": 118.4, "knee_concurrency": 128,
            "knee_reason": "within 5 % of the most output tok/s (1978.7 at C=192)", "last_good_concurrency": 128,
            "break_reason": "server_gone", "break_concurrency": 256, "max_output_throughput": 1978.7,
            "max_throughput_concurrency": 192, "max_slo_concurrency": 64, "probe_ttft_ms": 45.2, "probe_itl_ms": 12.3}
    failed = {"label": "tp1-pp8-mb8", "status": "failed_to_start", "why": "exited with status 1", "log_tail": ["boom"]}
    return {"sweep": {"preset": "until-it-breaks", "end_reason": "sweep finished"}, "configurations": [long, failed]}


def test_the_sweeps_end_table_fits_80_columns_and_keeps_every_figure():
    text = format_sweep(_sweep_doc())
    lines = text.splitlines()
    table = lines[1:5]
    assert all(len(line) <= 80 for line in table), "\n".join(table)
    row = table[2].split()
    assert row == ["tp8-pp1-mb64", "done", "118.4", "128", "128", "server_gone", "256", "1979", "192"]
    assert table[3].split()[:2] == ["tp1-pp8-mb8", "no"]  # no start
    # what the table has no room for: a line under it, the probe and the SLO's largest C included
    assert ("tp8-pp1-mb64: knee C=128 (within 5 % of the most output tok/s (1978.7 at C=192)); "
            "probe C=1 TTFT 45.2 ms, ITL 12.3 ms; largest C meeting the SLO 64") in lines
    assert "tp1-pp8-mb8: failed to start: exited with status 1" in lines


async def test_an_export_notice_covers_no_log_line(tmp_path, monkeypatch):
    import redline.engine.report.export as export_mod

    out = tmp_path / "session"
    (out / "export").mkdir(parents=True)
    monkeypatch.setattr(export_mod, "export_session", lambda d, fmt, o: [out / "export" / f"{t}.parquet" for t in ("requests", "timeline")])
    app, host, snaps, ctx = await _open("healthy")
    host.config.out_dir = out
    async with ctx as pilot:
        await play(pilot, host, snaps)
        before = screen_lines(app)
        await pilot.press("e")
        await pilot.pause(0.3)
        after = screen_lines(app)
    log = [line for line in before if line.startswith(" 12:")]  # the log's lines: a time of day first
    notice = next(i for i, line in enumerate(after) if "exported 2 tables" in line)
    assert notice == len(after) - 2 and not after[notice].split("▌")[0].strip(), after[notice]  # a line of its own
    shown = [line for line in after if line.startswith(" 12:")]
    assert shown and all(line in log for line in shown), "every log line on screen is whole"
    assert shown[-1] == log[-1], "the newest log line stays in view, above the notice"


@pytest.mark.parametrize("el, hold, text", [(4, 10, "4/10s"), (10.2, 10, "10/10s"), (26, 10, "26 s (hold 10 s)"),
                                            (4.4, 3, "4 s (hold 3 s)")])
def test_a_steps_progress_never_passes_its_total(el, hold, text):
    assert elapsed_text(el, hold) == text


# -- 10. what the screen shows, said --------------------------------------------------------------
@pytest.mark.parametrize("figure", ["server gen", "KV %", "cache hit", "cached", "GPU bar", "dur", "≥", "short", "↑ more"])
def test_help_explains_every_figure_the_screen_can_show(figure):
    assert any(figure in name for name, _ in FIGURES), figure


def _with_cache(snap, live_ratio, earlier_ratio):
    srv = ServerSample(t=snap.t, kind="sglang", running=8, queued=0, gen_throughput=1200.0, kv_usage=0.42, prefix_hit_rate=0.0)
    steps = tuple(replace(s, cached_prompt_ratio=earlier_ratio) for s in snap.steps)
    live = replace(snap.current_step, cached_prompt_ratio=live_ratio) if snap.current_step is not None else None
    return replace(snap, server=srv, steps=steps, current_step=live)


def test_cached_says_why_it_has_no_value():
    snap = story([Seg("run", 12, 8), Seg("run", 12, 16)])[-1]
    assert snap.current_step is not None and snap.steps
    assert "gen 1200 tok/s  KV 42 %" in server_text(_with_cache(snap, 0.0, 0.0))
    assert "cache hit 0 %, cached 0 %" in server_text(_with_cache(snap, 0.0, 0.0))
    # a new step, none of its requests ended yet, on a server that said it: pending, not "-"
    assert "cache hit 0 %, cached …" in server_text(_with_cache(snap, None, 0.0))
    assert "cache hit 0 %, cached -" in server_text(_with_cache(snap, None, None))  # it never said


async def test_the_concurrency_prompt_states_what_it_accepts_and_asks_above_max():
    app, host, snaps, ctx = await _open("healthy")
    async with ctx as pilot:
        await play(pilot, host, snaps)
        await pilot.press("c")
        await pilot.pause()
        assert isinstance(app.screen, ConcurrencyPrompt)
        text = "\n".join(screen_lines(app))
        assert "a whole number, 1 or more (now C=64)" in text and "above --max-concurrency 1024 it asks first" in text
        assert "1-1024" not in text
        await pilot.press("2", "0", "0", "0", "enter")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        assert "C=2000 is above --max-concurrency 1024" in "\n".join(screen_lines(app))
        await pilot.press("y")
        await pilot.pause()
    assert any(isinstance(c, C.SetConcurrency) and c.n == 2000 and c.raise_max for c in host.sent)


async def test_a_short_step_is_marked_short_in_the_tui_table():
    snaps = story([Seg("run", 12, 8), Seg("run", 12, 16)])
    last = snaps[-1]
    one_s = replace(last.steps[-1], duration_s=1.0, short=True)
    snaps[-1] = replace(last, steps=(*last.steps[:-1], one_s))
    assert "short" in step_cells(one_s)[0] and "short" not in step_cells(last.steps[0])[0]
    host = FakeHost(snaps[0])
    app = RedlineApp(host, step=8)
    async with app.run_test(size=(80, 24)) as pilot:
        await play(pilot, host, snaps)
        rows = [line.split() for line in screen_lines(app)]
    assert any(r[:3] == [str(one_s.concurrency), "short", "1s"] for r in rows), rows
