"""`redline sweep` on a terminal (issue 37): each configuration in the usual screen, a line
above the header saying which of how many and its state (starting: what it waits for /
running / stopping); every key acts on the configuration running now; its preset ending on its
own opens the next; `n` ends this one early, `q` ends the sweep after saving; a signal ends it
as it ends `redline`. The records are those of `redline sweep --headless` (tests/e2e/test_sweep.py).

The app's half with the FakeHost of tests/e2e/test_screen.py; whole sweeps on a pseudo-terminal,
the servers being redline's own sim (`redline sim --port {port}`), some behind a `sleep` that
stands for the weights loading."""

from __future__ import annotations

import json
import os
import pty
import re
import signal
import time
from dataclasses import replace
from pathlib import Path

import pytest

from redline.tui.app import RedlineApp
from redline.tui.sweep_status import NEXT_REASON, SweepStatus

from e2e.test_screen import FakeHost, Seg, play, screen_lines, story
from e2e.test_sweep import PRESET, SERVE, _sims, _tag
from helpers import ROOT, redline_command

pytestmark = pytest.mark.usefixtures("utc")


def _status(**kw) -> SweepStatus:
    return SweepStatus(**{"total": 3, "index": 1, "label": "mb8", "values": "mb=8", "phase": "running",
                          "detail": "ready in 0.7 s", "finished": ["mb4 knee C=4"], **kw})


def test_the_line_says_which_configuration_and_its_state():
    assert _status().text("running") == "sweep 2/3 mb8 (mb=8) · running: ready in 0.7 s · n next · done: mb4 knee C=4"
    starting = _status(phase="starting", detail="41 s, /health answers 503", finished=[])
    assert starting.text("waiting") == "sweep 2/3 mb8 (mb=8) · starting: 41 s, /health answers 503"
    # a key cancelled the preset: the load is the operator's until n or q
    assert "its preset is over: n next configuration, q ends the sweep" in _status().text("over")
    # --repeats: which repeat of how many, and the time left (issue 44)
    assert _status(repeats=3, repeat=2, left="about 4 min left").text("running") == (
        "sweep 2/3 mb8 (mb=8) · repeat 2 of 3 · running: ready in 0.7 s · n next · about 4 min left · done: mb4 knee C=4")


def test_the_line_fits_its_width_dropping_from_the_end():
    """At 80 columns (78 inside its padding) the state's keys stay whole: the configurations
    done shrink to a count, the values go (the label stays), then the state's long words
    (issue 46: it was cut in the middle of `q ends the sweep`)."""
    st = _status(label="tp8-pp1-mb64", values="tp=8 pp=1 mb=64", finished=["tp8-pp1-mb8 knee C=8", "tp8-pp1-mb16 knee C=16"])
    over = st.text("over", width=78)
    assert len(over) <= 78 and over == "sweep 2/3 tp8-pp1-mb64 · preset over: n next, q ends the sweep · 2 done", over
    starting = _status(phase="starting", detail="41 s, /health answers 503", finished=["wait0 stopped"]).text("waiting", width=78)
    assert starting == "sweep 2/3 mb8 (mb=8) · starting: 41 s, /health answers 503 · 1 done", starting  # what it waits for, whole
    running = st.text("running", width=78)
    assert len(running) <= 78 and "n next" in running, running
    assert st.text("running", width=200) == st.text("running")  # room: every word


# -- the app's half ------------------------------------------------------------------------------
async def test_the_line_is_above_the_header_and_n_ends_the_configuration():
    snaps = [replace(s, preset_running=True, state="preset") for s in story([Seg("run", 3, 8)])]
    host = FakeHost(snaps[0])
    app = RedlineApp(host, step=8, sweep=_status())
    async with app.run_test(size=(80, 24)) as pilot:
        await play(pilot, host, snaps)
        lines = screen_lines(app)
        assert lines[0].strip().startswith("sweep 2/3 mb8 (mb=8) · running: ready in 0.7 s · n next"), lines[:3]
        assert lines[1].strip().startswith("http://"), "the usual header under it"
        assert lines[-1].rstrip().endswith("q quit n next"), lines[-1]  # the footer's last key, whole at 80 columns
        assert " e export" not in lines[-1]  # its room went to n (e still exports: `?` lists it)
        await pilot.press("n")
        await pilot.pause()
    assert host.stopped == NEXT_REASON and app.exit_reason == NEXT_REASON and app.return_code == 0


async def test_without_a_sweep_n_is_nothing():
    snaps = story([Seg("run", 3, 8)])
    host = FakeHost(snaps[0])
    app = RedlineApp(host, step=8)
    async with app.run_test(size=(80, 24)) as pilot:
        await play(pilot, host, snaps)
        assert not screen_lines(app)[-1].rstrip().endswith(" n next") and " e export" in screen_lines(app)[-1]
        await pilot.press("n")
        await pilot.pause()
        assert host.stopped is None and app.is_running


async def test_a_preset_that_ends_on_its_own_ends_the_configuration():
    snaps = story([Seg("run", 3, 8)])
    running = [replace(s, preset_running=True, state="preset") for s in snaps]
    host = FakeHost(running[0])
    app = RedlineApp(host, step=8, sweep=_status())
    async with app.run_test(size=(80, 24)) as pilot:
        app.live.presets.watch.start("sweep-short", 0)  # as run_preset leaves it
        await play(pilot, host, running)
        assert app.is_running
        await play(pilot, host, [replace(snaps[-1], preset_running=False, state="probe")])
        await pilot.pause()
    assert host.stopped == "preset finished" and app.return_code == 0


# -- whole sweeps on a pseudo-terminal -----------------------------------------------------------
ESCAPES = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-B]|\x1b[=>]|\x1b\][^\x07]*\x07")


class Terminal:
    """redline on a pseudo-terminal of 80x24; `text` is what it drew, escapes taken out."""

    def __init__(self, argv: list[str]) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: redline on the terminal
            os.chdir(ROOT)
            os.execvpe(argv[0], argv, {**os.environ, "TERM": "xterm-256color", "COLUMNS": "80", "LINES": "24"})
        self.raw = b""
        self.status: int | None = None

    @property
    def text(self) -> str:
        return ESCAPES.sub(b"", self.raw).decode("utf-8", "replace")

    def pump(self, until, timeout: float) -> bool:
        """Read what it draws until `until()` holds, it exits, or `timeout` passes."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if until():
                return True
            try:
                self.raw += os.read(self.fd, 65536)
            except OSError:  # it exited and the terminal closed
                time.sleep(0.05)
            self._reap()
        return until()

    def _reap(self) -> None:
        if self.status is None:
            done, st = os.waitpid(self.pid, os.WNOHANG)
            if done:
                self.status = os.waitstatus_to_exitcode(st)

    def key(self, k: bytes) -> None:
        os.write(self.fd, k)

    def exited(self, timeout: float) -> int | None:
        self.pump(lambda: self.status is not None, timeout)
        return self.status

    def kill(self) -> None:
        if self.status is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        os.close(self.fd)


def _sweep_on_a_terminal(tmp_path: Path, serve: str, *grids: str) -> Terminal:
    preset = tmp_path / "p.toml"
    preset.write_text(PRESET)
    return Terminal([*redline_command(), "sweep", "--serve", serve, *[a for g in grids for a in ("--grid", g)],
                     "--preset", str(preset), "--no-nvml", "--out", str(tmp_path / "out")])


def _doc(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "out" / "sweep.json").read_text())


@pytest.mark.server
def test_a_sweep_on_a_terminal_runs_every_configuration(tmp_path):
    """mb=oops|8|64: the line says each configuration in turn; the same records as headless:
    oops failed_to_start, mb8's knee 64 (8 micro-batches of 8) and mb64 still rising at C=256,
    each with its startup time; no sim left."""
    t = _sweep_on_a_terminal(tmp_path, f"{SERVE} --seed {_tag(tmp_path)}", "mb=oops|8|64")
    try:
        assert t.pump(lambda: "sweep 2/3 mb8 (mb=8)" in t.text, 60), t.text[-2000:]
        assert t.pump(lambda: "sweep 3/3 mb64 (mb=64)" in t.text, 90), t.text[-2000:]
        assert t.exited(90) == 0, t.text[-2000:]
    finally:
        t.kill()
    bad, capped, free = _doc(tmp_path)["configurations"]
    assert bad["status"] == "failed_to_start" and "exited with status" in bad["why"] and bad["log_tail"]
    assert capped["status"] == free["status"] == "completed"
    assert capped["knee_concurrency"] == 64 and free["knee_concurrency"] is None, (capped, free)
    assert 0 < capped["startup_s"] < 30 and 0 < free["startup_s"] < 30
    meta = json.loads((tmp_path / "out" / "mb64" / "meta.json").read_text())
    assert meta["sweep"]["values"] == {"mb": "64"} and round(meta["sweep"]["startup_s"], 3) == free["startup_s"]
    assert _doc(tmp_path)["sweep"]["end_reason"] == "sweep finished"
    assert "mb8: knee C=64" in t.text  # the comparison printed once the screen is gone
    assert _sims(tmp_path) == []


SLOW = "sh -c 'sleep {wait}; exec redline sim --port {port} --sim-profile pp-capped --set time_scale=0.25 --seed TAG'"


@pytest.mark.server
@pytest.mark.parametrize("how", ["q", "Ctrl-C"])
def test_n_then_q_or_ctrl_c_while_the_next_server_starts(tmp_path, how):
    """`n` during the first ends it (stopped, 'ended early by n', its session saved) and the
    second opens at once, its line saying what its start waits for; `q` then ends the sweep
    (exit 0), Ctrl-C too (exit 130); the second's whole group (the sh and its sleep) is gone."""
    tag = _tag(tmp_path)
    wait = 3000 + int(tag) % 1000  # this test's own `sleep N`
    t = _sweep_on_a_terminal(tmp_path, SLOW.replace("TAG", tag), f"wait=0|{wait}")
    try:
        assert t.pump(lambda: "sweep 1/2 wait0 (wait=0) · running" in t.text and "[PRESET]" in t.text, 60), t.text[-2000:]
        t.key(b"n")
        # at 80 columns the values give way to what the start waits for (the label stays)
        starting = rf"sweep 2/2 wait{wait}( \(wait={wait}\))? · starting: \d+ s, no answer yet"
        assert t.pump(lambda: re.search(starting, t.text), 30), t.text[-2000:]
        t.key(b"q" if how == "q" else b"\x03")
        code = t.exited(30)
    finally:
        t.kill()
    first, second = _doc(tmp_path)["configurations"]
    assert first["status"] == "stopped" and first["why"] == "ended early by n"
    assert (tmp_path / "out" / "wait0" / "summary.json").is_file() and first["session_dir"]
    assert second["status"] == "stopped" and second["startup_s"] is None
    if how == "q":
        assert code == 0 and second["why"] == "ended by q while its server started"
        assert _doc(tmp_path)["sweep"]["end_reason"] == "ended by q"
    else:
        assert code == 130 and _doc(tmp_path)["sweep"]["end_reason"] == "stopped by SIGINT"
    ps = os.popen("ps -ww -eo args").read()
    assert f"--seed {tag}" not in ps and f"sleep {wait}" not in ps, ps


@pytest.mark.server
def test_the_terminal_going_away_ends_the_sweep_and_its_server(tmp_path):
    """The SSH link drops (SIGHUP) during the first configuration: its session is complete,
    sweep.json says it stopped and why, the second never ran, and neither redline nor any sim
    is left."""
    tag = _tag(tmp_path)
    t = _sweep_on_a_terminal(tmp_path, f"{SERVE} --seed {tag}", "mb=8|64")
    try:
        assert t.pump(lambda: "[PRESET]" in t.text, 60), t.text[-2000:]
        os.close(t.fd)
        end = time.monotonic() + 20
        while time.monotonic() < end and t.status is None:
            t._reap()
            time.sleep(0.05)
        assert t.status == 129, t.status
    finally:
        t.fd = os.open(os.devnull, os.O_RDONLY)  # kill() closes it
        t.kill()
    doc = _doc(tmp_path)
    first, second = doc["configurations"]
    assert (first["status"], first["why"], second["status"]) == ("stopped", "SIGHUP", "not_run")
    assert doc["sweep"]["end_reason"] == "stopped by SIGHUP"
    assert json.loads((tmp_path / "out" / "mb8" / "meta.json").read_text())["end_reason"] == "signal SIGHUP"
    assert _sims(tmp_path) == []
