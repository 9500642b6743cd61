"""The TUI as a newcomer meets it (issue 27, points 3, 7, 8, 10 and 15), at 80x24.

Most tests play scripted snapshots through the FakeHost of tests/e2e/test_screen.py (no clock, no
sim); those about the engine's seconds, a preset's workload and a server that dies run the
app (Pilot) against a sim the test starts.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest
from textual import events

from redline.engine.core import commands as C
from redline.engine.core.config import EngineConfig
from redline.engine.core.snapshot import LogLine
from redline.engine.host import EngineProcess, EngineThread
from redline.engine.measure.step_result import BreakResult
from redline.engine.workload.prompts import WorkloadConfig
from redline.tui.app import RedlineApp
from redline.tui.widgets.dialogs import PresetPicker
from redline.tui.widgets.header import StatusHeader
from redline.tui.widgets.live_panels import LivePanels
from redline.tui.widgets.log_view import EventLog
from redline.tui.widgets.step_table import StepTable

from e2e.test_screen import FakeHost, make_app, play, screen_lines
from helpers import FAST_SIM, settle

pytestmark = pytest.mark.usefixtures("utc")  # times of day in UTC (tests/conftest.py)

STAMP = re.compile(r"^\d\d:\d\d:\d\d ")
MINI = (  # a preset with a workload of its own: 16 in / 24 out
    'name = "mini"\ndescription = "two short steps, 16 in / 24 out"\n'
    "[workload]\ninput_len = 16\noutput_len = 24\n"
    "[ramp]\nconcurrency = [2]\nwarmup_s = 0\nhold_s = 1\nmin_requests = 1\n"
    "[after]\nprobe_s = 0.5\n"
)


def header(app: RedlineApp) -> str:
    return app.query_one(StatusHeader).render().plain


def burst(app: RedlineApp, *keys: str) -> None:
    """Keys as a fast typist (or a paste) sends them: all read before the app handles any."""
    for key in keys:
        char = {"enter": "\r", "left_square_bracket": "[", "right_square_bracket": "]"}.get(key, key if len(key) == 1 else None)
        event = events.Key(key, char)
        event.set_sender(app)
        app._driver.send_message(event)


def presets(tmp_path, **files: str):
    d = tmp_path / "presets"
    d.mkdir()
    for name, text in files.items():
        (d / f"{name}.toml").write_text(text)
    return d


def widget_lines(app: RedlineApp, widget) -> list[str]:
    """The screen's text inside a widget's region (its padding included)."""
    r = widget.region
    return [line[r.x : r.x + r.width] for line in screen_lines(app)[r.y : r.y + r.height]]


async def frames(pilot, n: int = 4) -> None:
    for _ in range(n):
        await pilot.pause()


# -- 3: the preset picker ---------------------------------------------------------------------
async def test_picker_shows_each_presets_description_and_why_one_cannot_run(tmp_path):
    d = presets(tmp_path, mini=MINI, broken="[ramp]\nconcurrency = []\n")
    app, host, snaps = make_app("healthy")
    app.presets_dir = d
    async with app.run_test(size=(80, 24)) as pilot:
        await play(pilot, host, snaps)
        await pilot.press("p")
        await frames(pilot)
        assert isinstance(app.screen, PresetPicker)
        text = "\n".join(screen_lines(app))
        assert "mini" in text and "two short steps, 16 in / 24 out" in text
        assert "broken" in text and "concurrency" in text.split("broken", 1)[1], "the preset's error under its name"
        await pilot.press("escape")


async def test_a_picked_preset_runs_with_its_own_workload_applied_first(tmp_path):
    """FakeHost: the session runs 512 in / 128 out; the preset says 16 / 24."""
    app, host, snaps = make_app("healthy")
    app.presets_dir = presets(tmp_path, mini=MINI)
    async with app.run_test(size=(80, 24)) as pilot:
        await play(pilot, host, snaps)
        await pilot.press("p")
        await frames(pilot)
        await pilot.press("enter")
        assert await settle(pilot, lambda: any(isinstance(c, C.StartPreset) for c in host.sent), 3.0)
    kinds = [type(c).__name__ for c in host.sent]
    assert kinds.index("SetWorkload") < kinds.index("StartPreset"), kinds
    change = next(c for c in host.sent if isinstance(c, C.SetWorkload)).change
    assert (change.input_len, change.output_len, change.dataset) == (16, 24, None)


async def test_picked_preset_sends_its_output_len_and_says_when_it_finished(sim_factory, tmp_path):
    """Against a sim: a TUI started with 256-token outputs picks `mini` (24): its requests ask
    for 24 tokens; when it ends (its probe holding C=1) the log and the header say so."""
    sim = sim_factory("healthy", extra_args=FAST_SIM)
    out = tmp_path / "session"
    host = EngineThread(EngineConfig(url=sim.url, concurrency=2, workload=WorkloadConfig(input_len=16, output_len=256),
                                     out_dir=out, calibrate=False, use_nvml=False))
    host.start()
    try:
        app = RedlineApp(host, step=8, presets_dir=presets(tmp_path, mini=MINI))
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("p")
            await frames(pilot)
            await pilot.press("enter")
            assert await settle(pilot, lambda: host.snapshot.workload.get("output_len") == 24, 5.0)
            done = lambda: any(line.text == "preset mini finished (no break)" for line in host.snapshot.log)  # noqa: E731
            assert await settle(pilot, done, 20.0), [line.text for line in host.snapshot.log][-8:]
            assert await settle(pilot, lambda: "preset mini finished (no break)" in header(app), 2.0), header(app)
            assert "[PROBE] C=1 (was C=2, r returns)" in header(app), header(app)
            assert await settle(pilot, lambda: any("preset mini finished" in x for x in app.query_one(EventLog).lines_text), 2.0)
            await pilot.press("r")  # the operator moves on: the note goes
            assert await settle(pilot, lambda: "finished" not in header(app), 3.0), header(app)
    finally:
        host.stop()
    rows = [json.loads(x) for x in (out / "requests.ndjson").read_text().splitlines()]
    measured = [r for r in rows if r["phase"] == "measure" and r["status"] == "ok"]
    assert measured and {r["output_tokens"] for r in measured} == {24}


# -- 7: the screen at 80x24 -------------------------------------------------------------------
async def test_live_row_stays_in_view_when_lines_above_the_table_appear():
    """The goodput row, the probe lane's line and a search line in the header take rows from
    the step table: it still shows its live `*` row."""
    app, host, snaps = make_app("healthy")
    async with app.run_test(size=(80, 24)) as pilot:
        await play(pilot, host, snaps)
        last = snaps[-1]
        assert any("64*" in line for line in widget_lines(app, app.query_one(StepTable)))
        more = replace(last, goodput_tok_s=900.0, goodput_req_s=7.0, lane_on=True, lane_ttft_ms=50.0, lane_itl_ms=30.0,
                       preset="knee search point 3 C=64 measuring 4/10s", state="preset",
                       warnings=("server cap: client holds 64 in flight, server runs 64, queue 0",))
        await play(pilot, host, [more])
        table = app.query_one(StepTable)
        shown = widget_lines(app, table)
        assert table.size.height < 6, "the table was made shorter"
        assert any("64*" in line for line in shown), shown


async def test_log_starts_with_a_whole_entry_when_it_must_cut():
    """A two-line entry followed by as many one-line entries as the log has lines less one:
    the top line shown is the start of an entry (its time stamp), never a wrapped tail."""
    app, host, snaps = make_app("gone")
    async with app.run_test(size=(80, 24)) as pilot:
        await play(pilot, host, snaps)
        log = app.query_one(EventLog)
        h = log.content_size.height
        last = snaps[-1]
        seq, t = last.log[-1].seq, last.log[-1].t
        lines = [LogLine(seq + 1, t + 1, "warning", "guard: TTFT p99 2.5 s > 2 s for 10 s: dropped from C=64 to C=32 (raise it again with +/])")]
        lines += [LogLine(seq + 2 + i, t + 2 + i, "notice", f"line {i}") for i in range(h - 1)]
        await play(pilot, host, [replace(last, second=last.second + 1, log=last.log + tuple(lines))])
        shown = [line[1:] for line in widget_lines(app, log)]  # the padding column
    assert STAMP.match(shown[0]), shown
    assert any(f"line {h - 2}" in line for line in shown), "the newest entry is in view"


async def test_a_preset_finished_with_a_break_says_where(tmp_path):
    app, host, snaps = make_app("healthy")
    app.presets_dir = presets(tmp_path, mini=MINI.replace("output_len = 24", "output_len = 128").replace("input_len = 16", "input_len = 512"))
    async with app.run_test(size=(80, 24)) as pilot:
        await play(pilot, host, snaps)
        await pilot.press("p")
        await frames(pilot)
        await pilot.press("enter")
        assert await settle(pilot, lambda: any(isinstance(c, C.StartPreset) for c in host.sent), 3.0)
        last = snaps[-1]
        seq = last.log[-1].seq
        running = replace(last, preset_running=True, preset="mini step 1/1 C=2", state="preset")
        br = BreakResult(reason="latency", concurrency=64, last_good_concurrency=32, detail="TTFT p99 3.2 s > 2 s")
        ended = replace(last, preset_running=False, probing=True, state="probe", target_c=1, previous_c=64, break_result=br,
                        log=last.log + (LogLine(seq + 1, last.log[-1].t + 1, "break", br.detail),))
        await play(pilot, host, [running, ended])
        assert await settle(pilot, lambda: "finished" in header(app), 2.0)
        assert "[PROBE] C=1 (was C=64, r returns)" in header(app), header(app)
    logged = [c.text for c in host.sent if isinstance(c, C.Log)]
    assert logged == ["preset mini finished (break: latency at C=64; last good C=32)"], logged


async def test_a_preset_cancelled_by_a_key_is_not_said_finished(tmp_path):
    app, host, snaps = make_app("healthy")
    app.presets_dir = presets(tmp_path, mini=MINI.replace("output_len = 24", "output_len = 128").replace("input_len = 16", "input_len = 512"))
    async with app.run_test(size=(80, 24)) as pilot:
        await play(pilot, host, snaps)
        await pilot.press("p")
        await frames(pilot)
        await pilot.press("enter")
        assert await settle(pilot, lambda: any(isinstance(c, C.StartPreset) for c in host.sent), 3.0)
        await play(pilot, host, [replace(snaps[-1], preset_running=True, preset="mini step 1/1 C=2", state="preset")])
        await pilot.press("right_square_bracket")
        await play(pilot, host, [snaps[-1]])
        assert "finished" not in header(app)
    assert not [c for c in host.sent if isinstance(c, C.Log)]


async def test_server_gone_clears_the_overload_warning(sim_factory, tmp_path):
    sim = sim_factory("healthy", extra_args=FAST_SIM)
    host = EngineThread(EngineConfig(url=sim.url, concurrency=2, workload=WorkloadConfig(input_len=16, output_len=24),
                                     out_dir=tmp_path / "session", calibrate=False, use_nvml=False))
    host.start()
    try:
        app = RedlineApp(host, step=8)
        async with app.run_test(size=(80, 24)) as pilot:
            engine = host.engine
            host._loop.call_soon_threadsafe(engine.targets.overloaded, "http_503")
            assert await settle(pilot, lambda: any("overloaded" in w for w in host.snapshot.warnings), 3.0)
            sim.stop()
            assert await settle(pilot, lambda: host.snapshot.state == "server gone", 15.0)
            assert await settle(pilot, lambda: "SERVER GONE" in header(app), 2.0)
            assert not any("overloaded" in w for w in host.snapshot.warnings), host.snapshot.warnings
            assert "overloaded" not in header(app), header(app)
    finally:
        host.stop()


# -- 8: one column and one timeline row a second ----------------------------------------------
@pytest.mark.timing  # timeline rows' wall-clock spacing
async def test_timeline_rows_are_one_second_apart_under_the_tui(sim_factory, tmp_path):
    sim = sim_factory("healthy", extra_args=FAST_SIM)
    out = tmp_path / "session"
    # the engine in a process of its own, as a user's: on a thread of this one, the app's
    # drawing holds the GIL and a row slipped 175 ms in CI (the loop, not the ticker, was late)
    host = EngineProcess(EngineConfig(url=sim.url, concurrency=4, workload=WorkloadConfig(input_len=16, output_len=24),
                                      out_dir=out, calibrate=False, use_nvml=False))
    host.start()
    try:
        app = RedlineApp(host, step=8)
        async with app.run_test(size=(80, 24)) as pilot:
            assert await settle(pilot, lambda: host.snapshot.second >= 7, 12.0)
            panels = app.query_one(LivePanels)
            taken = list(panels.seconds)
            seen = host.snapshot.second
    finally:
        host.stop()
    # the rows written while the app ran (not those of the engine's stop)
    rows = [json.loads(x) for x in (out / "timeline.ndjson").read_text().splitlines()][:seen]
    # a row that slipped a frame is 0.25 s off (1.25 then 0.75); a loaded machine's late wake-up
    # is tens of ms at most
    gaps = [round(b["t"] - a["t"], 3) for a, b in zip(rows, rows[1:], strict=False)]
    assert len(gaps) >= 6 and all(abs(g - 1.0) < 0.15 for g in gaps), gaps
    assert all(abs(r["interval_s"] - 1.0) < 0.15 for r in rows), [r["interval_s"] for r in rows]
    assert taken == list(range(taken[0], taken[0] + len(taken))), taken  # a column per engine second


async def test_tick_takes_a_frame_woken_a_little_early_as_the_seconds_own(monkeypatch):
    """uvloop's timers fire up to a ms before the perf_counter deadline, now and then: the
    frame that wakes 0.5 ms early is still the second's, so rows stay one second apart
    (they were 1.25 s then 0.75 s apart)."""
    from types import SimpleNamespace

    from redline.engine.measure import timeline

    clock = [1000.0]
    wakes = [0]

    async def early_sleep(delay: float) -> None:  # every third wake-up half a ms early
        wakes[0] += 1
        clock[0] += delay - (0.0005 if wakes[0] % 3 == 0 else 0.0)

    class Done(Exception):
        pass

    frames_seen: list[float] = []
    seconds: list[float] = []

    def on_frame(now: float) -> None:
        frames_seen.append(now)
        if len(frames_seen) >= 41:
            raise Done

    monkeypatch.setattr(timeline, "asyncio", SimpleNamespace(sleep=early_sleep))
    monkeypatch.setattr(timeline, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    with pytest.raises(Done):
        await timeline.tick(1000.0, seconds.append, on_frame)
    gaps = [round(b - a, 3) for a, b in zip(seconds, seconds[1:], strict=False)]
    assert len(seconds) == 10 and all(abs(g - 1.0) < 0.01 for g in gaps), gaps


async def test_a_screen_held_past_a_second_still_draws_a_column_for_each():
    app, host, snaps = make_app("healthy")
    async with app.run_test(size=(80, 24)) as pilot:
        panels = app.query_one(LivePanels)
        shown = []
        for i, s in enumerate(snaps[:40]):
            if i % 3 == 2 or i < 1:  # the screen reads every third second only
                host.snap = replace(s, recent=tuple(x.row for x in snaps[max(0, i - 3) : i + 1]))
                app.pull_snapshot()
                shown.append(s.second)
        await frames(pilot)
    assert panels.seconds == list(range(snaps[0].second, shown[-1] + 1)), panels.seconds
    hist = list(panels._history["output_tok_s"])
    assert hist == [s.row["output_tok_s"] for s in snaps[: len(hist)]]


# -- 10: an outlier does not set the scale ----------------------------------------------------
async def test_a_flagged_outlier_row_does_not_set_the_sparkline_scale():
    """3912 tok/s in the second after a 2.5 s loop stall (flagged loop_blocked): the scale
    stays that of the other seconds, the outlier's column is drawn full."""
    app, host, snaps = make_app("healthy")
    async with app.run_test(size=(80, 24)) as pilot:
        await play(pilot, host, snaps)
        top_before = _top(app)
        last = snaps[-1]
        spike = dict(last.row, output_tok_s=3912.0, client_overloaded=True, client_cause="loop_blocked", interval_s=2.5)
        after = [replace(last, second=last.second + 1, row=spike)]
        for k in range(2, 6):
            after.append(replace(last, second=last.second + k, row=dict(last.row)))
        await play(pilot, host, after)
        line = next(x for x in screen_lines(app) if x.lstrip().startswith("out tok/s"))
        top_after = _top(app)
    assert "3912" not in line, line
    assert top_after == top_before, (line, top_before)


def _top(app: RedlineApp) -> str:
    line = next(x for x in screen_lines(app) if x.lstrip().startswith("out tok/s"))
    return line.split("↑")[-1].strip()


# -- 15: keys ---------------------------------------------------------------------------------
async def test_keys_typed_right_after_c_go_into_the_prompt():
    app, host, snaps = make_app("healthy")
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await play(pilot, host, snaps)
        burst(app, "c", "1", "6", "enter")
        await frames(pilot, 6)
        notes = [str(n.message) for n in app._notifications]
    sent = [c for c in host.sent if isinstance(c, C.SetConcurrency)]
    assert [c.n for c in sent] == [16], (sent, notes)


async def test_keys_typed_right_after_w_go_into_the_workload_form():
    app, host, snaps = make_app("healthy")
    async with app.run_test(size=(80, 24)) as pilot:
        await play(pilot, host, snaps)
        burst(app, "w", "6", "4", "enter")  # the field's value is selected: typing replaces it
        await frames(pilot, 6)
    sent = [c for c in host.sent if isinstance(c, C.SetWorkload)]
    assert len(sent) == 1 and sent[0].change.output_len == 64, host.sent


async def test_typed_slo_letters_never_act_as_keys():
    """`o` then `e2e=60s` typed fast: the `e` (export) and `q` never act; the text is the SLO."""
    app, host, snaps = make_app("healthy")
    async with app.run_test(size=(80, 24)) as pilot:
        await play(pilot, host, snaps)
        burst(app, "o", *"e2e=60s", "enter")
        await frames(pilot, 6)
    assert not any(isinstance(c, C.Flush) for c in host.sent)
    slo = [c for c in host.sent if isinstance(c, C.SetSlo)]
    assert len(slo) == 1 and slo[0].slo is not None, host.sent


async def test_a_key_acts_when_the_app_reads_it(monkeypatch):
    """`[` sends its command while the app handles the key as read from the terminal, before
    the key is queued to any widget: a key that first went to a widget came back to the app
    through every container's queue, each a wait behind that widget's drawing on a busy
    machine (`[` during a knee search took 1.4 s)."""
    from textual.message_pump import MessagePump

    posted: list[str] = []
    post = MessagePump.post_message

    def record(self, message):
        if isinstance(message, events.Key):
            posted.append(type(self).__name__)
        return post(self, message)

    monkeypatch.setattr(MessagePump, "post_message", record)
    app, host, snaps = make_app("healthy")
    seen_at_send: list[list[str]] = []
    send = host.send

    def send_and_note(cmd):
        seen_at_send.append(list(posted))
        return send(cmd)

    host.send = send_and_note
    async with app.run_test(size=(80, 24)) as pilot:
        await play(pilot, host, snaps)
        posted.clear()
        burst(app, "left_square_bracket")
        await frames(pilot)
    assert [c.n for c in host.sent if isinstance(c, C.SetConcurrency)] == [32]
    assert seen_at_send[-1] == ["RedlineApp"], seen_at_send[-1]


async def test_main_keys_do_nothing_under_a_dialog():
    """Under the help (or any dialog) `+` and `]` are the dialog's, not the load's."""
    app, host, snaps = make_app("healthy")
    async with app.run_test(size=(80, 24)) as pilot:
        await play(pilot, host, snaps)
        await pilot.press("question_mark")
        await frames(pilot)
        await pilot.press("plus", "right_square_bracket", "down")
        await frames(pilot)
        assert app.screen is not app.screen_stack[0]
        await pilot.press("escape")
        await frames(pilot)
    assert not [c for c in host.sent if isinstance(c, C.SetConcurrency)]
    assert isinstance(host, FakeHost)
