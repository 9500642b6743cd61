"""Start-up (issue 26): the TUI draws at once while the target and the engine start beside it
(tui/run_app.py StartingHost). What `redline --help` imports: tests/test_architecture.py.

The host here is a stand-in for the EngineProcess whose start the test holds and releases, so
what the app shows and sends before and after the engine is up is seen without processes.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import dataclasses
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import redline.engine.host
import redline.tui.run_app as run_app
from redline.engine import commands as C
from redline.engine.api import EngineConfig, Snapshot, TargetUnreachable, WorkloadConfig
from redline.tui.app import RedlineApp
from redline.tui.widgets.header import StatusHeader

REPO = Path(__file__).resolve().parents[1]


class FakeProcess:
    """EngineProcess's surface; start() waits for the test's `go` (or raises `fail`)."""

    made: list["FakeProcess"] = []
    go = threading.Event()
    fail: BaseException | None = None

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.sent: list[object] = []
        self.stopped: list[str] = []
        self.snapshot = Snapshot(t=1.0, elapsed_s=1.0, state="running", target_c=config.concurrency, previous_c=None,
                                 in_flight=config.concurrency, max_concurrency=config.max_concurrency)
        FakeProcess.made.append(self)

    def start(self) -> None:
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
