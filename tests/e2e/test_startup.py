"""Start-up (issue 26): the TUI draws at once while the target and the engine start beside it
(tui/run_app.py StartingHost). What `redline --help` imports: tests/unit/test_architecture.py.

The host here is a stand-in for the EngineProcess whose start the test holds and releases, so
what the app shows and sends before and after the engine is up is seen without processes.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import dataclasses
import gc
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import redline.engine.host
import redline.tui.run_app as run_app
from redline.engine.api import EngineConfig, LogLine, Snapshot, TargetUnreachable, WorkloadConfig
from redline.engine.core import commands as C
from redline.engine.load import worker_count
from redline.engine.telemetry.types import GpuSample
from redline.tui.app import RedlineApp
from redline.tui.widgets.header import StatusHeader

from helpers import ROOT

REPO = ROOT


class FakeProcess:
    """EngineProcess's surface; start() waits for the test's `go` (or raises `fail`)."""

    made: list["FakeProcess"] = []
    go = threading.Event()
    fail: BaseException | None = None

    def __init__(self, config: EngineConfig, *, url_later: bool = False) -> None:
        self.config = config
        self.url_later = url_later
        self.launched = False
        self.sent: list[object] = []
        self.stopped: list[str] = []
        self.snapshot = Snapshot(t=1.0, elapsed_s=1.0, state="running", target_c=config.concurrency, previous_c=None,
                                 in_flight=config.concurrency, max_concurrency=config.max_concurrency)
        FakeProcess.made.append(self)

    def launch(self) -> None:
        self.launched = True

    def start(self, config: EngineConfig | None = None) -> None:
        assert self.url_later == (config is not None and config is not self.config)
        self.config = config or self.config
        assert FakeProcess.go.wait(10)
        if FakeProcess.fail is not None:
            raise FakeProcess.fail

    def send(self, cmd) -> concurrent.futures.Future:
        self.sent.append(cmd)
        fut: concurrent.futures.Future = concurrent.futures.Future()
        fut.set_result(f"ok {type(cmd).__name__}")
        return fut

    def stop(self, reason: str = "quit") -> None:
        self.stopped.append(reason)


@pytest.fixture
def fake(monkeypatch, tmp_path):
    FakeProcess.made, FakeProcess.go, FakeProcess.fail = [], threading.Event(), None
    monkeypatch.setattr(redline.engine.host, "EngineProcess", FakeProcess)
    targets: list[str] = []

    @contextlib.contextmanager
    def target(cfg, args):  # the built-in sim: its url, stopped on the way out
        targets.append("started")
        try:
            yield dataclasses.replace(cfg, url="http://127.0.0.1:9")
        finally:
            targets.append("stopped")

    monkeypatch.setattr(run_app, "running_target", target)
    cfg = EngineConfig(url="", concurrency=8, workload=WorkloadConfig(), out_dir=tmp_path / "s")
    return cfg, targets


def wait(pred, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.01)
    return pred()


def test_commands_before_the_engine_is_up_wait_and_go_in_order(fake):
    cfg, targets = fake
    host = run_app.StartingHost(cfg, argparse.Namespace())
    host.begin()
    assert host.snapshot.state == "starting" and host.snapshot.target_c == 8
    first, second = host.send(C.SetConcurrency(16)), host.send(C.TogglePause())
    assert not first.done() and not second.done()
    FakeProcess.go.set()
    assert first.result(5) == "ok SetConcurrency" and second.result(5) == "ok TogglePause"
    proc = FakeProcess.made[0]
    assert [type(c).__name__ for c in proc.sent] == ["SetConcurrency", "TogglePause"]
    assert proc.config.url == "http://127.0.0.1:9" and host.config.url == "http://127.0.0.1:9"
    assert host.snapshot is proc.snapshot
    assert host.send(C.Probe()).result(5) == "ok Probe"  # straight through now
    host.stop("quit")
    assert proc.stopped == ["quit"] and targets == ["started", "stopped"]


def test_a_failed_start_ends_the_app_and_keeps_its_one_line(fake, capsys):
    cfg, targets = fake
    FakeProcess.fail = TargetUnreachable("http://127.0.0.1:9: connection refused")
    host = run_app.StartingHost(cfg, argparse.Namespace())
    host.begin()
    waiting = host.send(C.TogglePause())
    FakeProcess.go.set()
    assert wait(lambda: host.snapshot.done)
    with pytest.raises(Exception, match="did not start"):
        waiting.result(5)
    host.stop("engine stopped")
    assert FakeProcess.made[0].stopped == [] and targets == ["started", "stopped"]
    assert run_app.start_failed(host.error) == 3
    assert capsys.readouterr().err == "redline: error: http://127.0.0.1:9: connection refused\n"


async def test_the_first_frame_is_drawn_before_the_engine_is_up(fake):
    cfg, _ = fake
    host = run_app.StartingHost(cfg, argparse.Namespace())
    host.begin()
    app = RedlineApp(host, step=8)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause(0.3)
            text = app.query_one(StatusHeader).render().plain
            assert "[STARTING]" in text and "C=8" in text, text
            assert not FakeProcess.made or not FakeProcess.made[0].sent
            await pilot.press("plus")  # a key while starting: sent once the engine is up
            FakeProcess.go.set()
            for _ in range(50):
                await pilot.pause(0.1)
                if "[RUNNING]" in app.query_one(StatusHeader).render().plain:
                    break
            assert "[RUNNING]" in app.query_one(StatusHeader).render().plain
            assert [type(c).__name__ for c in FakeProcess.made[0].sent] == ["SetConcurrency"]
    finally:
        FakeProcess.go.set()
        host.stop("quit")


def test_without_a_terminal_nothing_is_drawn_before_the_engine_is_up():
    assert run_app.on_a_terminal() is False  # pytest captures: the sequential path (one line on a refused start)


def test_the_startup_benchmark_answers_help():
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "startup_bench.py"), "--help"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "--runs" in r.stdout


def test_each_command_adds_its_options_when_it_is_parsed_or_its_help_printed(capsys):
    """`redline --help` builds the top level only (tui/cli/arguments.py): a command's own options are
    there when it is used, and an option given to the wrong command is still named."""
    from redline.tui import cli

    p = cli.build_parser()
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    for name, flag in (("run", "--url"), ("run", "NAME|FILE"), ("export", "--format"), ("report", "--png"), ("preset-from", "--output")):
        assert flag in sub.choices[name].format_help(), (name, flag)
    assert cli.build_parser().parse_args(["report", "a", "b", "--no-plot"]).session_dirs == [Path("a"), Path("b")]
    for argv, named in ((["--png", "x"], "an option of redline report"), (["--search"], "an option of redline run")):
        with pytest.raises(SystemExit) as exc:
            cli.main(argv)
        assert exc.value.code == 2 and named in capsys.readouterr().err, argv


# -- the first frame: the header and the footer; the body a frame later (tui/body.py) --------
class SnapHost:
    """A host that serves one Snapshot (the app reads only host.snapshot and host.config)."""

    def __init__(self, snap: Snapshot, config: EngineConfig) -> None:
        self.snapshot = snap
        self.config = config
        self.sent: list[object] = []

    def send(self, cmd) -> concurrent.futures.Future:
        self.sent.append(cmd)
        fut: concurrent.futures.Future = concurrent.futures.Future()
        fut.set_result(None)
        return fut

    def stop(self, reason: str = "quit") -> None:
        pass


def running_snapshot() -> Snapshot:
    log = tuple(LogLine(i, 1714564800.0 + i, "notice", f"line {i}: target http://10.0.0.5:30000 C=8") for i in range(1, 6))
    row = {"output_tok_s": 900.0, "ttft_p50_ms": 80.0, "ttft_p99_ms": 120.0, "itl_p50_ms": 20.0, "errors": 0.0}
    return Snapshot(t=5.0, elapsed_s=65.0, state="running", target_c=8, previous_c=None, in_flight=8, max_concurrency=512,
                    url="http://10.0.0.5:30000", model="m", api="chat", server_kind="sglang", output_tok_s=900.0,
                    ttft_ms={"p50": 80.0, "p99": 120.0}, itl_ms={"p50": 20.0, "p99": 30.0}, completed=40,
                    gpus=(GpuSample(0, "H100", power_w=350.0, power_limit_w=700.0, util_pct=90.0),), second=3, row=row,
                    recent=(row,), log=log)


async def _screen_text(app: RedlineApp, size: tuple[int, int]) -> tuple[list, str]:
    async with app.run_test(size=size) as pilot:
        for _ in range(50):
            if app.body_up:
                break
            await pilot.pause(0.05)
        assert app.body_up
        await pilot.pause(0.3)  # a refresh (REFRESH_S) after the body is up
        # then until two screenshots agree (bounded): on CI's loaded cores one was taken
        # before the footer was drawn
        shot = app.export_screenshot()
        for _ in range(20):
            await pilot.pause(0.1)
            again = app.export_screenshot()
            if again == shot:
                break
            shot = again
        tree = [(type(w).__name__, w.id) for w in app.screen.walk_children()]
        return tree, shot


@pytest.mark.parametrize("size", [(80, 24), (160, 40)])
async def test_the_body_after_the_first_frame_ends_in_the_same_screen(tmp_path, size):
    cfg = EngineConfig(url="http://10.0.0.5:30000", concurrency=8, workload=WorkloadConfig(), out_dir=tmp_path / "s")
    at_once = await _screen_text(RedlineApp(SnapHost(running_snapshot(), cfg), step=8), size)
    later = await _screen_text(RedlineApp(SnapHost(running_snapshot(), cfg), step=8, body_after_first_frame=True), size)
    assert later[0] == at_once[0]  # the same widgets in the same order
    assert later[1] == at_once[1]  # drawn the same


async def test_the_first_frame_is_the_header_and_the_footer(fake):
    cfg, _ = fake
    host = run_app.StartingHost(cfg, argparse.Namespace())
    host.begin()
    app = RedlineApp(host, step=8, body_after_first_frame=True)
    seen: dict[str, object] = {}

    def first() -> None:
        seen["body"] = app.body_up
        seen["header"] = app.query_one(StatusHeader).render().plain
        seen["body widgets"] = len(app.query("#left > *, #right > *"))

    app.call_after_refresh(first)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("pageup", "pagedown")  # the step table's keys before it is there: nothing
            for _ in range(50):
                if app.body_up:
                    break
                await pilot.pause(0.05)
            assert app.body_up and len(app.query("#left > *, #right > *")) == 7
    finally:
        FakeProcess.go.set()
        host.stop("quit")
    assert seen["body"] is False and seen["body widgets"] == 0
    assert "[STARTING]" in seen["header"] and "C=8" in seen["header"], seen


def test_run_tui_draws_first_and_collects_garbage_again(fake, monkeypatch):
    """On a terminal: the app draws its header first, and the garbage collector, off while
    start-up makes its objects, is on again whatever happens."""
    cfg, targets = fake
    seen: dict[str, object] = {}

    def run(self, *a, **k):
        seen.update(after_first_frame=self.body_after_first_frame, collecting=gc.isenabled())
        FakeProcess.go.set()

    saved = {sig: signal.getsignal(sig) for sig in run_app.SIGNALS}  # run_tui sets its early handlers
    monkeypatch.setattr(RedlineApp, "run", run)
    monkeypatch.setattr(run_app, "on_a_terminal", lambda: True)
    try:
        assert run_app.run_tui(cfg, argparse.Namespace(step=8, rate_step=1.0)) == 0
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    assert seen == {"after_first_frame": True, "collecting": False}
    assert gc.isenabled() and targets == ["started", "stopped"]


FIRST_FRAME_IMPORTS = """
import sys
import redline.tui.run_app, redline.tui.app
print(" ".join(sorted(sys.modules)))
"""


def test_the_first_frame_imports_only_what_it_draws():
    r = subprocess.run([sys.executable, "-c", FIRST_FRAME_IMPORTS], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    loaded = set(r.stdout.split())
    later = {
        "redline.tui.body", "redline.tui.widgets.step_table", "redline.tui.widgets.curve_view", "redline.tui.widgets.dialogs",
        "redline.tui.widgets.help", "redline.tui.widgets.workload_form", "redline.tui.plots",  # the body, the dialogs
        "textual.widgets._data_table",  # the step table's Textual widget
        "redline.engine.core.commands", "redline.engine.session", "redline.engine.host",  # the engine's, sent or read later
        "httpx", "aiohttp", "polars", "plotext",
    }
    assert not loaded & later, sorted(loaded & later)


def test_a_sim_that_does_not_start_stops_the_engine_launched_beside_it(fake, monkeypatch):
    cfg, _ = fake

    @contextlib.contextmanager
    def no_sim(cfg, args):
        FakeProcess.go.wait(10)
        raise TargetUnreachable("redline sim did not start within 15 s")
        yield  # pragma: no cover

    monkeypatch.setattr(run_app, "running_target", no_sim)
    drawn = threading.Event()
    host = run_app.StartingHost(cfg, argparse.Namespace(), drawn=drawn)
    host.begin()
    drawn.set()  # the first frame: the engine's process is launched
    assert wait(lambda: FakeProcess.made and FakeProcess.made[0].launched)
    FakeProcess.go.set()
    assert wait(lambda: host.snapshot.done)
    host.stop("engine stopped")
    proc = FakeProcess.made[0]
    assert proc.url_later and proc.stopped == ["start failed"]
    assert run_app.start_failed(host.error) == 3


@pytest.mark.parametrize("cores, at_once", [(2, False), (8, True)])
def test_the_engine_waits_for_the_first_frame_on_a_small_machine(fake, monkeypatch, cores, at_once):
    cfg, _ = fake
    monkeypatch.setattr(worker_count, "usable_cores", lambda: cores)
    monkeypatch.setattr(run_app, "FRAME_WAIT_S", 60.0)  # no launch for want of a frame during the test
    drawn = threading.Event()
    host = run_app.StartingHost(cfg, argparse.Namespace(), drawn=drawn)
    host.begin()
    try:
        launched = lambda: bool(FakeProcess.made) and FakeProcess.made[0].launched  # noqa: E731
        assert wait(launched, 5.0 if at_once else 0.5) is at_once
        drawn.set()
        assert wait(launched)
    finally:
        FakeProcess.go.set()
        host.stop("quit")


@pytest.mark.server
def test_an_engine_start_that_never_finishes_ends_its_process(tmp_path):
    """A target that accepts connections and never answers: the engine's start waits past
    its limit; the start fails with one line, and the engine's process is gone (no load may
    outlive a start that never finished), ended by the parent's SIGTERM: a start in progress
    is cancelled by it rather than waited for."""
    import socket

    from redline.engine.core.config import EngineConfig
    from redline.engine.host import EngineError, EngineProcess

    with socket.socket() as silent:  # listens (the kernel completes connections), never reads
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        host = EngineProcess(EngineConfig(url=url, concurrency=2, out_dir=tmp_path / "s", use_nvml=False))
        with pytest.raises(EngineError, match=r"did not start within 1\.5 s"):
            host.start(timeout=1.5)
        assert not host._proc.is_alive()
        # ended by the SIGTERM, not killed 3 s on: its start cancelled and its load stopped (0), or
        # the signal's own default if it came before the child had imported the engine (-15:
        # under load, CI's spawn and imports can take longer than the 1.5 s start limit)
        assert host._proc.exitcode in (0, -signal.SIGTERM), host._proc.exitcode
