"""The operator's side of load shapes (issue #16): `m` switches concurrency <-> open-loop rate
mode, `+ - ] [ c` change R in rate mode, `w` changes the workload live, and the screen shows R,
the arrival process, the in-flight cap, the schedule lag and the sends held at the cap.

Pilot at 80x24 against a sim the test starts (as tests/e2e/test_tui_limits.py); the command line's
load-shape options in-process (nothing started before they are checked: tests/e2e/test_cli_errors.py
has the booby traps and the matrix); the widgets' text from hand-built Snapshots.
"""

from __future__ import annotations

import argparse
import io
from dataclasses import replace

import pytest
from rich.console import Console

from redline.engine.core import commands as C
from redline.engine.core.config import EngineConfig
from redline.engine.core.snapshot import Snapshot
from redline.engine.host import EngineThread
from redline.engine.workload.prompts import WorkloadConfig, WorkloadError
from redline.tui.app import RedlineApp
from redline.tui.load_asks import RATE_FLOOR
from redline.tui.widgets.header import StatusHeader
from redline.tui.widgets.rate_line import RateLine, rate_line
from redline.tui.widgets.workload_form import WorkloadForm, build_change, current_values

from helpers import FAST_SIM, settle

FAST = FAST_SIM


def header(app: RedlineApp) -> str:
    return app.query_one(StatusHeader).render().plain


def screen_lines(app: RedlineApp) -> list[str]:
    w, h = app.size
    console = Console(width=w, height=h, file=io.StringIO(), force_terminal=True, color_system=None, record=True, legacy_windows=False)
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    return console.export_text().splitlines()


def drawn_row(app: RedlineApp, widget_type) -> str:
    """The screen's row where the (one-line) widget is drawn; "" when it is not on screen."""
    w = app.query_one(widget_type)
    lines = screen_lines(app)
    y = w.region.y
    return lines[y] if w.display and w.region.height and 0 <= y < len(lines) else ""


async def type_text(pilot, text: str) -> None:
    for ch in text:
        await pilot.press("full_stop" if ch == "." else ch)


@pytest.fixture
def sim(sim_factory):
    return sim_factory("healthy", extra_args=FAST)


def engine(sim, tmp_path, **kw) -> EngineThread:
    cfg = dict(url=sim.url, concurrency=4, workload=WorkloadConfig(input_len=16, output_len=24),
               out_dir=tmp_path / "session", calibrate=False, use_nvml=False)
    cfg.update(kw)
    h = EngineThread(EngineConfig(**cfg))
    h.start()
    return h


# -- the keys, against the sim -----------------------------------------------------------------
async def test_m_switches_to_rate_and_the_keys_change_r(sim, tmp_path):
    host = engine(sim, tmp_path)
    try:
        app = RedlineApp(host, step=4, rate_step=0.5)
        async with app.run_test(size=(80, 24), notifications=True) as pilot:
            assert await settle(pilot, lambda: host.snapshot.target_c == 4 and "C=4" in header(app))
            assert not app.query_one(RateLine).display, "no rate line in concurrency mode"
            # m: open-loop rate mode, at a rate the engine picks
            await pilot.press("m")
            assert await settle(pilot, lambda: host.snapshot.mode == "rate" and host.snapshot.target_rate)
            assert await settle(pilot, lambda: "R=" in header(app) and "/s" in header(app) and "(cap " in header(app))
            assert app.query_one(RateLine).display
            # on screen, on the rate line's row (under the header, whose height grows with a
            # warning: a loaded machine's client-health line put it below the first 4 rows)
            assert await settle(pilot, lambda: "lag p50" in drawn_row(app, RateLine)), "\n".join(screen_lines(app))
            # the footer is redrawn at the app's next refresh (a loaded machine: a moment later)
            assert await settle(pilot, lambda: "R±" in screen_lines(app)[-1]), "the footer names what the keys change"
            r0 = host.snapshot.target_rate
            # ]: double R (not C)
            await pilot.press("right_square_bracket")
            assert await settle(pilot, lambda: host.snapshot.target_rate == pytest.approx(2 * r0))
            assert host.snapshot.mode == "rate" and host.snapshot.target_c == 4
            # + and -: by the rate step
            await pilot.press("plus")
            assert await settle(pilot, lambda: host.snapshot.target_rate == pytest.approx(2 * r0 + 0.5))
            await pilot.press("minus", "minus")
            assert await settle(pilot, lambda: host.snapshot.target_rate == pytest.approx(2 * r0 - 0.5))
            # c: an exact R, typed
            await pilot.press("c")
            await pilot.pause()
            await type_text(pilot, "7.5")
            await pilot.press("enter")
            assert await settle(pilot, lambda: host.snapshot.target_rate == 7.5)
            assert await settle(pilot, lambda: "R=7.5/s poisson" in header(app))
            # a bad one changes nothing and says why
            await pilot.press("c")
            await pilot.pause()
            await type_text(pilot, "0")
            await pilot.press("enter")
            await pilot.pause(0.3)
            assert host.snapshot.target_rate == 7.5
            assert any("rate '0'" in str(n.message) and "nothing changed" in str(n.message) for n in app._notifications)
            # below README's floor: refused, and the line says the floor (not "> 0")
            await pilot.press("c")
            await pilot.pause()
            await type_text(pilot, "0.05")
            await pilot.press("enter")
            await pilot.pause(0.3)
            assert host.snapshot.target_rate == 7.5
            assert any("rate '0.05'" in str(n.message) and "0.1" in str(n.message) for n in app._notifications)
            # [ halves, never below the floor
            for _ in range(8):
                await pilot.press("left_square_bracket")
                await pilot.pause(0.05)
            assert await settle(pilot, lambda: host.snapshot.target_rate == RATE_FLOOR)
            lines = screen_lines(app)
            assert len(lines) == 24 and all(len(line) <= 80 for line in lines)
            # m again: back to C=4, and the C keys are C keys again
            await pilot.press("m")
            assert await settle(pilot, lambda: host.snapshot.mode == "concurrency" and "C=4" in header(app))
            assert await settle(pilot, lambda: not app.query_one(RateLine).display)
            await pilot.press("right_square_bracket")
            assert await settle(pilot, lambda: host.snapshot.target_c == 8 and host.snapshot.mode == "concurrency")
    finally:
        host.stop()


async def test_workload_form_changes_the_running_workload(sim, tmp_path):
    host = engine(sim, tmp_path)
    try:
        app = RedlineApp(host, step=4)
        async with app.run_test(size=(80, 24)) as pilot:
            assert await settle(pilot, lambda: host.snapshot.workload.get("output_len") == 24)
            # a bad value: its one-line error in the form, which stays open; nothing sent
            await pilot.press("w")
            await pilot.pause()
            form = app.screen
            assert isinstance(form, WorkloadForm)
            assert form.values() == {"output_len": "24", "input_len": "16", "dataset": "random", "prefix_ratio": "0"}
            await pilot.press("ctrl+a", "ctrl+k")  # clear the field (Input: home, delete to end)
            await type_text(pilot, "abc")
            await pilot.press("enter")
            await pilot.pause()
            assert app.screen is form
            err = form.query_one("#workload-error")
            assert err.display and "output_len 'abc'" in str(err.render()) and "whole number" in str(err.render())
            text = " ".join(" ".join(screen_lines(app)).split())
            assert "output_len 'abc': expected a whole number of tokens" in text.replace("█", "")
            # Escape cancels: the workload is as it was
            await pilot.press("escape")
            await pilot.pause()
            assert not isinstance(app.screen, WorkloadForm)
            assert host.snapshot.workload.get("output_len") == 24
            # a good value: sent, the engine runs it from now on
            await pilot.press("w")
            await pilot.pause()
            await pilot.press("ctrl+a", "ctrl+k")
            await type_text(pilot, "40")
            await pilot.press("enter")
            assert await settle(pilot, lambda: host.snapshot.workload.get("output_len") == 40)
            assert not isinstance(app.screen, WorkloadForm)
            assert host.engine.config.workload.output_len == 40 and host.engine.config.workload.input_len == 16
            assert await settle(pilot, lambda: any(line.kind == "workload" and "output_len=40" in line.text for line in host.snapshot.log))
            # a value only the engine can refuse (a dataset file it cannot read): in the form too
            await pilot.press("w")
            await pilot.pause()
            form = app.screen
            form.query_one("#wl-dataset").value = f"jsonl:{tmp_path}/missing.jsonl"
            form.query_one("#wl-dataset").focus()
            await pilot.press("enter")
            assert await settle(pilot, lambda: form.query_one("#workload-error").display)
            err = str(form.query_one("#workload-error").render())
            assert "missing.jsonl" in err and "Error:" not in err, err
            assert app.screen is form
            await pilot.press("escape")
            await pilot.pause()
            assert host.snapshot.workload.get("dataset") == "random"
    finally:
        host.stop()


async def test_started_in_rate_mode_shows_sends_held_at_the_cap(sim, tmp_path):
    """--rate with a small --max-concurrency: the cap fills, the sends held back are counted and
    shown in the warning style, latencies count from the intended send times."""
    host = engine(sim, tmp_path, rate=60.0, max_concurrency=2, concurrency=2,
                  workload=WorkloadConfig(input_len=16, output_len=40))
    try:
        app = RedlineApp(host, step=4)
        async with app.run_test(size=(80, 24)) as pilot:
            assert await settle(pilot, lambda: host.snapshot.mode == "rate" and host.snapshot.dropped_or_delayed > 0)
            ok = await settle(pilot, lambda: "dropped or delayed" in " ".join(screen_lines(app)[:8]), 3.0)
            assert ok, "\n".join(screen_lines(app))
            lines = screen_lines(app)
            assert "[RUNNING] R=60/s poisson  in-flight " in lines[1] and "(cap 2)" in lines[1], lines[:4]
            line = app.query_one(RateLine).render()
            held = [span for span in line.spans if "yellow" in str(span.style)]
            assert held, "held / dropped in the warning style"
            assert all(len(x) <= 80 for x in lines)
    finally:
        host.stop()


# -- the widgets' text ---------------------------------------------------------------------------
def snap(**kw) -> Snapshot:
    base = dict(t=0.0, elapsed_s=10.0, state="running", target_c=8, previous_c=None, in_flight=5, max_concurrency=64,
                url="http://h:1", model="m", api="chat", server_kind="sglang")
    base.update(kw)
    return Snapshot(**base)


def test_header_load_line_per_mode():
    rate = snap(mode="rate", target_rate=12.5, arrival="gamma:0.5", in_flight=64, held_at_cap=3)
    t = StatusHeader._load_line(rate)
    assert t.plain.startswith("[RUNNING] R=12.5/s gamma:0.5  in-flight 64 (cap 64)"), t.plain
    assert any("yellow" in str(s.style) for s in t.spans), "a full cap in the warning style"
    assert "(cap 64)" in StatusHeader._load_line(replace(rate, in_flight=5, held_at_cap=0)).plain
    trace = snap(mode="trace", target_rate=2.0, workload={"trace": "/x/example.jsonl"})
    assert StatusHeader._load_line(trace).plain.startswith("[RUNNING] trace ×2  in-flight 5 (cap 64)")
    turns = snap(turns=4)
    assert StatusHeader._load_line(turns).plain.startswith("[RUNNING] C=8 sessions of 4 turns  in-flight 5")
    assert StatusHeader._load_line(snap()).plain.startswith("[RUNNING] C=8  in-flight 5")


def test_rate_line_shows_lag_and_what_the_cap_held():
    s = snap(mode="rate", target_rate=5.0, schedule_lag_ms={"p50": 0.4, "p99": 12.0}, req_s=4.9)
    assert rate_line(s).plain == "lag p50 0.4 ms p99 12.0 ms  done 4.90 req/s"
    s = replace(s, held_at_cap=3, dropped_or_delayed=1234)
    t = rate_line(s)
    assert t.plain == "lag p50 0.4 ms p99 12.0 ms  held 3  dropped or delayed 1234  done 4.90 req/s"
    assert [t.plain[span.start:span.end] for span in t.spans if "yellow" in str(span.style)] == ["held 3", "dropped or delayed 1234"]
    assert rate_line(s, 60).plain == "lag p50 0.4 ms p99 12.0 ms  held 3  dropped or delayed 1234"  # the least first out
    tr = snap(mode="trace", target_rate=2.0, workload={"trace": "/data/traces/mooncake.jsonl"}, schedule_lag_ms={})
    assert rate_line(tr).plain.startswith("trace mooncake.jsonl  lag p50 - p99 -")


def test_workload_form_change_is_only_what_changed():
    wl = {"dataset": "random", "input_len": 32, "output_len": 128}
    before = current_values(wl)
    assert build_change(before, dict(before), wl).empty
    assert build_change(before, dict(before, output_len=" 256 "), wl) == build_change(before, dict(before, output_len="256"))
    ch = build_change(before, dict(before, output_len="256", prefix_ratio="0.5"), wl)
    assert (ch.output_len, ch.input_len, ch.dataset, ch.prefix_ratio) == (256, None, None, 0.5)
    path = build_change(before, dict(before, dataset="jsonl:/data/my prompts.jsonl"), wl)
    assert path.dataset == "jsonl:/data/my prompts.jsonl"  # spaces in a path survive
    for field, value, needle in (("output_len", "0", "output_len '0'"), ("input_len", "1.5", "input_len '1.5'"),
                                 ("prefix_ratio", "1", "prefix_ratio '1'"), ("prefix_ratio", "x", "prefix_ratio 'x'"),
                                 ("dataset", "csv:x", "dataset 'csv:x'"), ("output_len", "", "output_len is empty")):
        with pytest.raises(WorkloadError) as exc:
            build_change(before, dict(before, **{field: value}), wl)
        assert needle in str(exc.value) and "\n" not in str(exc.value)
    prefix = {"dataset": "prefix:groups=8,prefix_len=300,suffix_len=100", "input_len": 400, "output_len": 64}
    assert current_values(prefix)["prefix_ratio"] == "0.75"


async def test_m_in_multi_turn_says_why_and_sends_nothing():
    from e2e.test_screen import make_app, play

    app, host, snaps = make_app("healthy")
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await play(pilot, host, [replace(s, turns=3) for s in snaps])
        assert "C=64 sessions of 3 turns" in screen_lines(app)[1]
        await pilot.press("m")
        await pilot.pause()
    assert not any(isinstance(c, C.ToggleMode) for c in host.sent)
    assert any("closed-loop" in str(n.message) for n in app._notifications)


async def test_workload_form_on_a_fake_host_sends_one_change():
    """No sim: the form sends SetWorkload with the fields changed, then closes."""
    from e2e.test_screen import FakeHost, make_app, play

    app, host, snaps = make_app("healthy")
    async with app.run_test(size=(80, 24)) as pilot:
        await play(pilot, host, snaps)
        await pilot.press("w")
        await pilot.pause()
        assert isinstance(app.screen, WorkloadForm)
        await pilot.press("tab")  # to input len
        await pilot.press("ctrl+a", "ctrl+k", "6", "4", "enter")
        await pilot.pause()
        assert not isinstance(app.screen, WorkloadForm)
    sent = [c for c in host.sent if isinstance(c, C.SetWorkload)]
    assert len(sent) == 1 and sent[0].change.input_len == 64 and sent[0].change.output_len is None
    assert isinstance(host, FakeHost)


# -- the command line --------------------------------------------------------------------------
def parse(argv: list[str]) -> argparse.Namespace:
    from redline.tui.cli.arguments import build_parser

    a = build_parser().parse_args(argv)
    a.argv = ["redline", *argv]
    return a


def test_rate_trace_and_turns_reach_the_engine_config(tmp_path):
    from redline.tui.cli.launch import checked_config

    cfg = checked_config(parse(["--url", "http://127.0.0.1:9", "--rate", "12.5", "--arrival", "Gamma:0.50", "--max-concurrency", "64", "--out", str(tmp_path / "a")]))
    assert (cfg.rate, cfg.arrival, cfg.max_concurrency, cfg.workload.trace) == (12.5, "gamma:0.5", 64, None)
    cfg = checked_config(parse(["--url", "http://127.0.0.1:9", "--out", str(tmp_path / "b")]))
    assert (cfg.rate, cfg.arrival) == (None, "poisson")
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 100, "output_length": 10}\n{"timestamp": 500, "input_length": 50, "output_length": 5}\n')
    cfg = checked_config(parse(["--url", "http://127.0.0.1:9", "--trace", str(trace), "--speed", "2", "--out", str(tmp_path / "c")]))
    assert (cfg.workload.trace, cfg.rate) == (str(trace), 2.0), "the trace's speed factor travels as EngineConfig.rate"
    cfg = checked_config(parse(["--url", "http://127.0.0.1:9", "--trace", str(trace), "--out", str(tmp_path / "d")]))
    assert cfg.rate == 1.0
    cfg = checked_config(parse(["--url", "http://127.0.0.1:9", "--turns", "3", "--think-s", "1.5", "--out", str(tmp_path / "e")]))
    assert (cfg.workload.turns, cfg.workload.think_s, cfg.rate) == (3, 1.5, None)
    assert parse(["--rate-step", "0.25"]).rate_step == 0.25 and parse([]).rate_step == 1.0


@pytest.mark.parametrize("argv, needles", [
    (["--rate", "0"], ("--rate '0'", "requests per second", "> 0")),
    (["--rate", "fast"], ("--rate 'fast'", "> 0")),
    (["--arrival", "foo"], ("--arrival 'foo'", "poisson, constant or gamma:K")),
    (["--trace", "{D}/bad.jsonl"], ("bad.jsonl", "line 2", "timestamp")),
])
def test_bad_shape_options_are_one_line_exit_2_before_anything_starts(tmp_path, monkeypatch, capsys, argv, needles):
    """With no --url (the built-in sim would start): refused first, one line, exit 2."""
    import redline.engine.sim.serve
    import redline.tui.run_app
    from redline.tui import cli

    started = []
    monkeypatch.setattr(redline.engine.sim.serve, "spawn_sim_process", lambda *a, **k: started.append("sim"))
    monkeypatch.setattr(redline.tui.run_app, "run_tui", lambda *a, **k: started.append("tui"))
    (tmp_path / "bad.jsonl").write_text('{"timestamp": 0, "input_length": 10, "output_length": 5}\n{"input_length": 10}\n')
    try:
        rc = cli.main([a.replace("{D}", str(tmp_path)) for a in argv])
    except SystemExit as exc:
        rc = exc.code
    err = capsys.readouterr().err
    assert rc == 2 and started == [], err
    assert len(err.splitlines()) == 1 and err.startswith("redline: error: "), err
    assert all(n in err for n in needles), err
