"""Nothing recorded is lost: signals, a vanished terminal, SIGKILL; no load survives redline."""

from __future__ import annotations

import json
import os
import pty
import signal
import socket
import time
from pathlib import Path

import pytest

from redline.engine.report.export import export_session, read_table

from helpers import (
    ROOT,
    finish,
    redline_command,
    sim_running as running,
    sim_state,
    start_headless,
    wait_for,
    write_preset,
)

SECRET = "sk-redline-test-5ecret-0f-the-day"


def long_preset(tmp_path: Path) -> Path:
    """C=12 for a minute (the test ends it), in short requests: many complete each second."""
    return write_preset(tmp_path, "long", concurrency=[12, 24], output_len=16)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_signal_stops_load_and_completes_log(healthy_sim, tmp_path, sig):
    out = tmp_path / "s"
    proc = start_headless(healthy_sim.url, long_preset(tmp_path), out)
    try:
        assert wait_for(lambda: running(healthy_sim.url) == 12, 20), proc.stderr
        assert wait_for(lambda: sim_state(healthy_sim.url)["completed"] >= 12, 10)  # some complete
        os.kill(proc.pid, sig)
        t0 = time.monotonic()
        assert wait_for(lambda: running(healthy_sim.url) == 0, 2.0), "load kept running after the signal"
        rc = proc.wait(10)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rc == 128 + sig.value
    assert took < 5
    assert f"stopped by {sig.name}; all load stopped, session saved in {out}" in proc.stderr.read()
    meta = json.loads((out / "meta.json").read_text())
    assert meta["ended_at"] and meta["end_reason"] == f"signal {sig.name}"
    events = read_table(out, "events")
    assert f"stopped (signal {sig.name})" in " ".join(events["text"].to_list())
    # every request the sim received is a row: completed, failed or cancelled by the stop
    reqs = read_table(out, "requests")
    st = sim_state(healthy_sim.url)
    assert reqs.height == st["received"]
    ok, cancelled = (reqs["status"] == "ok").sum(), (reqs["status"] == "cancelled").sum()
    assert ok + cancelled == st["completed"] + st["aborted"]
    # a request whose [DONE] the sim wrote as the stop came, but which redline had not yet read,
    # is cancelled for redline and completed for the sim: never the other way, and at most the
    # 12 that were in flight
    assert st["completed"] - 12 <= ok <= st["completed"]


def test_a_signal_while_the_engine_starts_says_nothing_was_recorded(tmp_path):
    """A server that accepts and never answers: the engine is still starting (no session
    directory yet) when SIGTERM comes. The exit must not point at a session that is not there."""
    out = tmp_path / "s"
    with socket.create_server(("127.0.0.1", 0)) as silent:
        silent.settimeout(20)
        proc = start_headless(f"http://127.0.0.1:{silent.getsockname()[1]}", long_preset(tmp_path), out)
        try:
            conn, _ = silent.accept()  # the engine's first look at the server: it is starting
            os.kill(proc.pid, signal.SIGTERM)
            rc, _, err = finish(proc, 20)
            conn.close()
        finally:
            if proc.poll() is None:
                proc.kill()
    assert rc == 128 + signal.SIGTERM, err
    assert "nothing recorded (stopped before the session began)" in err, err
    assert "session saved" not in err and not out.exists()


def test_sigkill_loses_at_most_the_last_second(healthy_sim, tmp_path):
    out = tmp_path / "s"
    proc = start_headless(healthy_sim.url, long_preset(tmp_path), out)
    try:
        assert wait_for(lambda: running(healthy_sim.url) == 12, 20)
        assert wait_for(lambda: sim_state(healthy_sim.url)["completed"] >= 20, 20)
        done_before = sim_state(healthy_sim.url)["completed"]
        time.sleep(1.2)  # > one flush interval
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)
    finally:
        if proc.poll() is None:
            proc.kill()
    meta = json.loads((out / "meta.json").read_text())
    assert meta["ended_at"] is None  # killed: the log was not closed ...
    reqs = read_table(out, "requests")  # ... but everything flushed reads back
    assert (reqs["status"] == "ok").sum() >= done_before
    assert read_table(out, "timeline").height >= 2
    paths = export_session(out, "parquet", tmp_path / "export")
    assert {p.name for p in paths} == {"requests.parquet", "timeline.parquet", "events.parquet"}
    # the built-in-sim rule does not apply here (the test owns the sim), but the load died with it
    assert wait_for(lambda: running(healthy_sim.url) == 0, 2.0)


def test_api_key_leaves_no_trace(healthy_sim, tmp_path):
    out = tmp_path / "s"
    f = write_preset(tmp_path, "short", concurrency=[4], output_len=16, hold_s=2, exact=True)
    proc = start_headless(healthy_sim.url, f, out, env={"OPENAI_API_KEY": SECRET})
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert SECRET not in stdout + stderr
    export_session(out, "csv", out / "export")
    for p in out.rglob("*"):
        if p.is_file():
            assert SECRET.encode() not in p.read_bytes(), p


@pytest.mark.parametrize("how", ["close", "SIGTERM", "SIGINT", "Ctrl-C"])
def test_tui_stops_load_and_completes_log(healthy_sim, tmp_path, how):
    """The SSH link drops (the terminal goes away: SIGHUP), a signal, or Ctrl-C typed (a key
    in the terminal's raw mode, read as SIGINT): load stops, log completes, exit 128+N."""
    out = tmp_path / "s"
    pid, fd = pty.fork()
    if pid == 0:  # child: redline's TUI on a pseudo-terminal
        os.chdir(ROOT)
        env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "80", "LINES": "24"}
        cmd = redline_command()
        os.execvpe(cmd[0], [*cmd, "--url", healthy_sim.url, "--concurrency", "6", "--out", str(out), "--no-nvml"], env)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and running(healthy_sim.url) != 6:
            try:
                os.read(fd, 65536)  # keep the terminal drained, as a real one would be
            except OSError:
                break
            time.sleep(0.05)
        assert running(healthy_sim.url) == 6
        if how == "close":
            os.close(fd)  # the terminal goes away
        elif how == "Ctrl-C":
            os.write(fd, b"\x03")  # typed: the key, no signal (raw mode)
        else:
            os.kill(pid, getattr(signal, how))
        assert wait_for(lambda: running(healthy_sim.url) == 0, 3.0), f"load kept running after {how}"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if how != "close":
                try:
                    os.read(fd, 65536)
                except OSError:
                    pass
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.05)
        assert done, f"redline did not exit after {how}"
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    meta = json.loads((out / "meta.json").read_text())
    assert meta["ended_at"] is not None, meta
    sig = {"close": signal.SIGHUP, "Ctrl-C": signal.SIGINT}.get(how) or getattr(signal, how)
    assert meta["end_reason"] == f"signal {sig.name}"
    assert os.waitstatus_to_exitcode(status) == 128 + sig.value  # 129 / 143 / 130 (docs/cli.md)
