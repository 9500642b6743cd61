"""Issue 38, the habits users bring, on the screen: Ctrl-C exits 130 as SIGINT does (`q` 0);
the step table keeps following the live row when something above it takes a line (the probe
lane's); rows out of view are said in words, not with a scrollbar that reads like a sparkline;
a notice (an error too) is short-lived and never over the header; line 1 is cut at the same
place while the clock and the counts grow.

No sim: the FakeHost and the scripted sessions of tests/e2e/test_screen.py."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from redline.tui.app import RedlineApp, exit_status
from redline.tui.widgets.step_table import StepTable

from e2e.test_screen import FakeHost, Seg, _open, play, screen_lines, story

pytestmark = pytest.mark.usefixtures("utc")

EIGHTHS = set("▁▂▃▄▅▆▇▉▊▋▌▍▎▏")


def many_steps() -> list:
    return story([Seg("run", 12, c) for c in (8, 16, 24, 32, 40, 48, 56, 64, 72)])


def table_lines(app: RedlineApp) -> list[str]:
    """The step table's lines on screen: its header, then its rows."""
    lines = screen_lines(app)
    top = next(i for i, line in enumerate(lines) if line.split()[:2] == ["C", "dur"])
    rows = [line for line in lines[top + 1 :] if line[:6].strip().rstrip("*").isdigit()]
    return [lines[top], *rows]


# -- 4. Ctrl-C ---------------------------------------------------------------------------------
@pytest.mark.parametrize("key, code, reason", [("ctrl+c", 130, "signal SIGINT"), ("q", 0, "quit")])
async def test_ctrl_c_exits_130_and_q_exits_0(key, code, reason):
    snaps = story([Seg("run", 5, 8)])
    host = FakeHost(snaps[0])
    app = RedlineApp(host, step=8)
    async with app.run_test(size=(80, 24)) as pilot:
        await play(pilot, host, snaps)
        await pilot.press(key)
        await pilot.pause()
    assert host.stopped == reason, "the load stopped and the session log completed first"
    assert app.return_code == code


def test_exit_status_of_each_ending():
    assert exit_status("quit") == 0 and exit_status("engine stopped") == 0
    assert (exit_status("signal SIGINT"), exit_status("signal SIGTERM"), exit_status("signal SIGHUP")) == (130, 143, 129)


# -- 6a. the table keeps following the live row ----------------------------------------------
async def test_step_table_keeps_following_after_the_lane_key():
    snaps = many_steps()
    host = FakeHost(snaps[0])
    app = RedlineApp(host, step=8)
    async with app.run_test(size=(80, 24)) as pilot:
        await play(pilot, host, snaps[:-4])
        table = app.query_one(StepTable)
        assert table_lines(app)[-1].split()[0] == "72*"
        await pilot.press("l")  # the lane line takes a row above the table
        lane = [replace(s, lane_on=True, lane_ttft_ms=50.0, lane_itl_ms=30.0) for s in snaps[-4:]]
        await play(pilot, host, lane[:1])
        assert table_lines(app)[-1].split()[0] == "72*", "\n".join(screen_lines(app))
        # a layout change that leaves the table short of its end, and then nothing in it changes
        # (the same snapshot again): it goes back to the live row by itself
        table.scroll_to(y=0, animate=False, immediate=True)
        await pilot.pause()
        # still following (the app's own refresh, 4 a second, may already have taken it back
        # during the pause on a slow machine: the short scroll is this test's set-up, not a claim)
        assert table.following
        await play(pilot, host, lane[:1])
        assert table.scroll_y == table.max_scroll_y
        assert table_lines(app)[-1].split()[0] == "72*"
        await play(pilot, host, lane[1:])
        assert table_lines(app)[-1].split()[0] == "72*" and table.live_row() == table.row_count - 1


# -- 6c. rows out of view in words -----------------------------------------------------------
async def test_rows_out_of_view_are_said_in_words():
    snaps = many_steps()
    host = FakeHost(snaps[0])
    app = RedlineApp(host, step=8)
    async with app.run_test(size=(80, 24)) as pilot:
        await play(pilot, host, snaps)
        table = app.query_one(StepTable)
        head = table_lines(app)[0]
        assert head.split()[-3:] == ["at", "↑", "more"], head  # following: older rows above
        assert table.scroll_mark() == "↑ more"
        await pilot.press("pageup", "pageup", "pageup")
        await pilot.pause()
        assert table_lines(app)[0].rstrip().endswith("↓ more") and table.scroll_mark() == "↓ more"
        await pilot.press("pagedown")
        await pilot.pause()
        if 0 < table.scroll_y < table.max_scroll_y:
            assert table_lines(app)[0].rstrip().endswith("↑↓ more")
        for line in table_lines(app):
            assert not set(line) & EIGHTHS, line  # no scrollbar thumb beside the rows


async def test_few_rows_say_nothing_of_scrolling():
    snaps = story([Seg("run", 12, 8), Seg("run", 12, 16)])
    host = FakeHost(snaps[0])
    app = RedlineApp(host, step=8)
    async with app.run_test(size=(80, 24)) as pilot:
        await play(pilot, host, snaps)
        assert "more" not in table_lines(app)[0]
        assert app.query_one(StepTable).scroll_mark() is None


# -- 6b. notices: short-lived, never over the header ------------------------------------------
async def test_an_error_notice_is_at_the_bottom_and_gone_in_4_seconds():
    assert RedlineApp.NOTIFICATION_TIMEOUT <= 4
    app, host, snaps, ctx = await _open("healthy")
    async with ctx as pilot:
        await play(pilot, host, snaps)
        header = screen_lines(app)[:2]
        await pilot.press("c", "x", "y", "enter")
        await pilot.pause(0.3)
        lines = screen_lines(app)
        hit = [i for i, line in enumerate(lines) if "concurrency 'xy'" in line]
        assert hit == [len(lines) - 2], lines  # just above the footer
        assert lines[:2] == header, "the target and the state lines stay in view"
        assert "q quit" in lines[-1], "the footer's keys stay in view"
        t0 = time.monotonic()
        while time.monotonic() - t0 < 6 and any("concurrency 'xy'" in line for line in screen_lines(app)):
            await pilot.pause(0.25)
        assert not any("concurrency 'xy'" in line for line in screen_lines(app))
        assert time.monotonic() - t0 < 5.0


# -- 6d. line 1's cut does not move with the clock ------------------------------------------
async def test_line_1_is_cut_at_the_same_place_as_the_clock_and_counts_grow():
    app, host, snaps, ctx = await _open("healthy")
    async with ctx as pilot:
        await play(pilot, host, snaps)
        seen = []
        for elapsed, done, failed in ((5, 9, 0), (59, 99, 0), (600, 4321, 3), (3599, 12345, 12), (36000, 99999, 999)):
            host.snap = replace(snaps[-1], elapsed_s=float(elapsed), completed=done, failed=failed)
            app.pull_snapshot()
            await pilot.pause()
            line = screen_lines(app)[0]
            assert len(line) <= 80 and f"done {done} fail {failed}" in line, line
            seen.append(line[: line.index("…") + 1])
        assert len(set(seen)) == 1, seen  # the target's cut did not move
        assert seen[0].startswith(" http://10.0.0.5:30000  llama-3.1-70b-instruct")
