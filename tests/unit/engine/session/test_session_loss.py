"""The session log never lies about loss (issue 42, case 12): a write or fsync error is kept
and the run ends "session saved, N rows lost: REASON" with exit 5, N exact; readers say how
many partial lines they dropped; meta.json (and every file written whole) is complete or
absent at every instant; the directory is fsynced after a rename or a creation.

Faults are injected where the disk would give them: os.write (a short write, ENOSPC) and
os.fsync (EIO) of one named file, every other descriptor passing through."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from redline.engine.report.export import dropped_lines, export_session, read_table
from redline.engine.session import SessionError, SessionWriter, durable
from redline.engine.session.writer import recorded_loss

from helpers import ROOT, main_in_process, write_preset

ENOSPC = "No space left on device"


def _row(i: int) -> dict:
    return {"rid": i, "phase": "measure", "step": 0, "concurrency": 4, "t_send": 1.7e9 + i, "ttft_ms": 50.0,
            "e2e_ms": 900.5, "output_tokens": 16, "status": "ok", "http_status": 200, "error_kind": "", "error_text": ""}


def _path_of(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


def fault_writes(monkeypatch, name: str, policy) -> list[bytes]:
    """os.write of the file `name` (a basename) goes through policy(real_write, fd, data);
    every other descriptor writes as usual. Returns the list of buffers offered to it."""
    real = os.write
    offered: list[bytes] = []

    def write(fd, data):
        if _path_of(fd).endswith("/" + name):
            offered.append(bytes(data))
            return policy(real, fd, bytes(data))
        return real(fd, data)

    monkeypatch.setattr(os, "write", write)
    return offered


def fault_fsyncs(monkeypatch, fails) -> list[str]:
    """os.fsync raises EIO where fails(path, nth call for that path) says so; the paths fsynced, in order."""
    real = os.fsync
    seen: list[str] = []

    def fsync(fd):
        p = _path_of(fd)
        seen.append(p)
        if fails(p, seen.count(p)):
            raise OSError(errno.EIO, "Input/output error")
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return seen


def cut_after(nth_line: int, then: str = "enospc"):
    """A policy: the first write gets out its first `nth_line` whole lines and half the next,
    then the disk is full (ENOSPC); later writes go through."""
    state = {"calls": 0}

    def policy(real, fd, data):
        state["calls"] += 1
        if state["calls"] == 1:
            ends = [i for i, b in enumerate(data) if b == 0x0A]
            cut = ends[nth_line - 1] + 1 + (ends[nth_line] - ends[nth_line - 1]) // 2
            return real(fd, data[:cut])  # a short write: the writer continues with the rest ...
        if state["calls"] == 2:
            raise OSError(errno.ENOSPC, ENOSPC)  # ... which the full disk refuses
        return real(fd, data)

    return policy


# -- the writer's count -------------------------------------------------------------------

def test_a_short_write_counts_only_the_rows_it_did_not_get_out(tmp_path, monkeypatch):
    """The issue's input: 10 rows flushed, 5 reach the disk whole (and half of the 6th): the
    writer said 10 lost; it says 5, and the readers drop the cut line and say so."""
    d = tmp_path / "s"
    w = SessionWriter(d, {}, fsync=False)
    offered = fault_writes(monkeypatch, "requests.ndjson", cut_after(5))
    for i in range(10):
        w.add_request(_row(i))
    w.flush()
    assert len(offered) == 2 and offered[0].count(b"\n") == 10  # one flush: the short write, then its refused rest
    assert w.lost_rows == 5 and w.rows_written["requests"] == 5
    assert w.error == f"cannot write {d / 'requests.ndjson'}: {ENOSPC}"
    assert w.loss == f"5 rows lost: cannot write {d / 'requests.ndjson'}: {ENOSPC}"
    got: dict = {}
    assert read_table(d, "requests", got)["rid"].to_list() == [0, 1, 2, 3, 4]
    assert got == {d / "requests.ndjson": 1}  # the 6th row's half: a partial last line, for now
    # the disk has room again: the next write ends the cut line first, nothing else is lost
    for i in range(10, 13):
        w.add_request(_row(i))
    w.flush()
    assert offered[-1].startswith(b"\n{") and w.lost_rows == 5 and w.rows_written["requests"] == 8
    w.close("quit")
    got = {}
    assert read_table(d, "requests", got)["rid"].to_list() == [0, 1, 2, 3, 4, 10, 11, 12]
    assert got == {d / "requests.ndjson": 1} == dropped_lines(d)  # now a damaged line inside the file
    meta = json.loads((d / "meta.json").read_text())
    assert meta["lost_rows"] == 5 and meta["write_error"] == w.error
    assert recorded_loss(d) == (5, w.error)


def test_a_refused_write_loses_its_rows_and_leaves_no_line_behind(tmp_path, monkeypatch):
    d = tmp_path / "s"
    w = SessionWriter(d, {}, fsync=False)

    def full(real, fd, data):
        raise OSError(errno.ENOSPC, ENOSPC)

    fault_writes(monkeypatch, "events.ndjson", full)
    for i in range(4):
        w.add_event("notice", f"event {i}")
        w.add_request(_row(i))
    w.flush()
    assert w.lost_rows == 4 and w.rows_written == {"requests": 4, "timeline": 0, "events": 0}
    monkeypatch.undo()
    w.add_event("notice", "after")
    w.close("quit")
    assert (d / "events.ndjson").read_bytes().count(b"\n") == 1  # no blank line: nothing was cut
    assert read_table(d, "events")["text"].to_list() == ["after"] and dropped_lines(d) == {}
    assert w.lost_rows == 4 and "events.ndjson" in w.error


def test_the_first_error_is_kept_and_every_loss_counted(tmp_path, monkeypatch):
    d = tmp_path / "s"
    w = SessionWriter(d, {}, fsync=False)
    fault_writes(monkeypatch, "timeline.ndjson", lambda real, fd, data: (_ for _ in ()).throw(OSError(errno.ENOSPC, ENOSPC)))
    w.add_timeline({"state": "running"})
    w.flush()
    fault_writes(monkeypatch, "requests.ndjson", lambda real, fd, data: (_ for _ in ()).throw(OSError(errno.EIO, "Input/output error")))
    w.add_request(_row(1))
    w.add_request(_row(2))
    w.flush()
    assert w.lost_rows == 3 and w.error == f"cannot write {d / 'timeline.ndjson'}: {ENOSPC}"
    w.close("quit")
    w.add_event("notice", "too late")  # after close: lost, and counted
    assert w.lost_rows == 4


def test_the_reason_given_is_the_error_that_lost_rows(tmp_path, monkeypatch):
    """Seen on a full tmpfs: summary.json was refused first (no row lost), then the tables:
    the line said "128 rows lost: cannot write .../summary.json"; it names the table."""
    d = tmp_path / "s"
    w = SessionWriter(d, {}, fsync=False)

    def full(*a, **k):
        raise OSError(errno.ENOSPC, ENOSPC)

    monkeypatch.setattr(durable, "write_all", full)
    w.write_summary({"steps": []})
    assert w.loss == f"0 rows lost: cannot write {d / 'summary.json'}: {ENOSPC}"
    fault_writes(monkeypatch, "requests.ndjson", lambda real, fd, data: full())
    w.add_request(_row(1))
    w.flush()
    assert w.loss == f"1 rows lost: cannot write {d / 'requests.ndjson'}: {ENOSPC}"
    fault_writes(monkeypatch, "events.ndjson", lambda real, fd, data: full())
    w.add_event("notice", "x")
    w.flush()
    assert w.loss == f"2 rows lost: cannot write {d / 'requests.ndjson'}: {ENOSPC}"  # the first stays


def test_an_fsync_error_is_kept_and_counts_the_rows_it_did_not_confirm(tmp_path, monkeypatch):
    """fsync errors were swallowed and the run ended "session saved": the rows written since
    that file's last good fsync are lost (the disk did not confirm them), said as the write error."""
    d = tmp_path / "s"
    seen = fault_fsyncs(monkeypatch, lambda p, nth: p.endswith("/requests.ndjson") and nth >= 2)
    w = SessionWriter(d, {}, fsync=True)
    for i in range(4):
        w.add_request(_row(i))
    w.flush()
    for _ in range(200):  # the background fsync confirms the first 4 rows
        if seen.count(str(d / "requests.ndjson")) >= 1:
            break
        time.sleep(0.01)
    assert seen.count(str(d / "requests.ndjson")) == 1 and w.error is None
    for i in range(4, 11):
        w.add_request(_row(i))
    w.close("quit")  # its last fsync fails: the 7 rows since the good one are unconfirmed
    assert w.lost_rows == 7 and w.error == f"cannot fsync {d / 'requests.ndjson'}: Input/output error"
    assert recorded_loss(d) == (7, w.error)


def test_a_file_system_that_cannot_fsync_loses_nothing(tmp_path, monkeypatch):
    def unsupported(fd):
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(os, "fsync", unsupported)
    w = SessionWriter(tmp_path / "s", {}, fsync=True)
    w.add_request(_row(1))
    w.write_summary({"steps": []})
    w.close("quit")
    assert w.error is None and w.lost_rows == 0 and recorded_loss(tmp_path / "s") is None


def test_a_failed_summary_write_is_kept(tmp_path, monkeypatch):
    d = tmp_path / "s"
    w = SessionWriter(d, {}, fsync=False)

    def full(*a, **k):
        raise OSError(errno.ENOSPC, ENOSPC)

    monkeypatch.setattr(durable, "write_all", full)
    w.write_summary({"steps": [{"concurrency": 4}]})
    monkeypatch.undo()
    w.close("quit")
    assert w.loss == f"0 rows lost: cannot write {d / 'summary.json'}: {ENOSPC}"
    assert not (d / "summary.json").exists() and not [p for p in d.iterdir() if p.name.endswith(".tmp")]


# -- files written whole, directories fsynced ---------------------------------------------

_KILLED_AT = textwrap.dedent("""
    import os, signal, sys
    from redline.engine.session import SessionWriter
    where = sys.argv[2]
    real = getattr(os, where)
    def killed(*a, **k):
        if where != "unlink" or ".meta.json." in str(a[0]):
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*a, **k)
    setattr(os, where, killed)
    SessionWriter(sys.argv[1], {"label": "killed"}, fsync=False)
""")


@pytest.mark.parametrize("where", ["link", "unlink"])
def test_a_kill_while_meta_json_is_created_leaves_it_whole_or_absent(tmp_path, where):
    """meta.json was created empty, then written: a kill between left a directory `report`
    refused. Killed just before meta.json's name appears (link) or just after (unlink of the
    temporary file): absent (the directory is free for a new run), or complete (report reads it)."""
    d = tmp_path / "s"
    p = subprocess.run([sys.executable, "-c", _KILLED_AT, str(d), where], cwd=ROOT, timeout=60,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert p.returncode == -signal.SIGKILL
    if where == "link":
        assert not (d / "meta.json").exists()
        SessionWriter(d, {}, fsync=False).close("quit")  # --out can be given again
    else:
        assert json.loads((d / "meta.json").read_text())["label"] == "killed"
        assert main_in_process(["report", str(d), "--no-plot"]) == 0


def test_meta_json_is_claimed_whole_even_without_hard_links(tmp_path, monkeypatch):
    def no_links(src, dst):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    w = SessionWriter(tmp_path / "s", {"label": "x"}, fsync=False)
    assert json.loads((tmp_path / "s" / "meta.json").read_text())["label"] == "x"
    with pytest.raises(SessionError, match="already holds a redline session"):
        SessionWriter(tmp_path / "s", {}, fsync=False)
    w.close("quit")
    assert not [p for p in (tmp_path / "s").iterdir() if p.name.endswith(".tmp")]


def test_directories_are_fsynced_after_each_creation_and_rename(tmp_path, monkeypatch):
    events: list[tuple[str, str]] = []
    real_fsync, real_replace, real_link = os.fsync, os.replace, os.link

    def fsync(fd):
        events.append(("fsync", _path_of(fd)))
        return real_fsync(fd)

    def replace(a, b):
        events.append(("rename", str(b)))
        return real_replace(a, b)

    def link(a, b):
        events.append(("rename", str(b)))
        return real_link(a, b)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "link", link)
    d = tmp_path / "new" / "s"
    w = SessionWriter(d, {}, fsync=True)
    dirs = [p for kind, p in events if kind == "fsync" and Path(p).is_dir()]
    # meta.json's and the table files' names (one fsync once all are made), and the two new directories' own names
    assert dirs.count(str(d)) == 1 and str(tmp_path / "new") in dirs and str(tmp_path) in dirs
    for name in ("meta.json", "summary.json"):
        if name == "summary.json":
            w.write_summary({"steps": []})
        i = events.index(("rename", str(d / name)))
        assert ("fsync", str(d)) in events[i + 1 :], f"no directory fsync after {name} was renamed"
        j = max(k for k, e in enumerate(events[:i]) if e[0] == "fsync")
        assert ".tmp" in events[j][1], f"{name}'s temporary file was not fsynced before its rename"
    n = len(events)
    w.close("quit")
    i = events.index(("rename", str(d / "meta.json")), n)
    assert ("fsync", str(d)) in events[i + 1 :]


def test_a_failed_directory_fsync_is_kept(tmp_path, monkeypatch):
    d = tmp_path / "s"
    fault_fsyncs(monkeypatch, lambda p, nth: p == str(d))
    w = SessionWriter(d, {}, fsync=True)
    w.close("quit")
    assert w.error == f"cannot fsync directory {d}: Input/output error" and w.lost_rows == 0


# -- readers ----------------------------------------------------------------------------------

def _session_with_partial_lines(d: Path) -> None:
    w = SessionWriter(d, {"label": "cut"}, fsync=False)
    for i in range(3):
        w.add_request(_row(i))
    w.add_event("notice", "x")
    w.close("quit")
    with open(d / "requests.ndjson", "ab") as f:  # a kill mid-write: a partial last line
        f.write(b'{"rid": 3, "phase": "mea')
    with open(d / "events.ndjson", "ab") as f:  # a cut line a later write ended, then a whole one
        f.write(b'{"t": 1.7e9, "kind": "no\n{"t": 1.7e9, "elapsed_s": 1.0, "kind": "notice", "text": "y"}\n')


def test_readers_say_how_many_partial_lines_they_dropped(tmp_path, capsys):
    """A truncated last line was dropped silently on read: export and report now say it, one
    line per file naming it and the count."""
    d = tmp_path / "s"
    _session_with_partial_lines(d)
    got: dict = {}
    assert read_table(d, "requests", got).height == 3 and read_table(d, "events", got).height == 2
    assert got == {d / "requests.ndjson": 1, d / "events.ndjson": 1} == dropped_lines(d)
    assert main_in_process(["export", str(d), "--format", "csv"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == [f"redline: warning: {d / 'requests.ndjson'}: 1 partial line dropped (a write cut short: a kill, or a write error)",
                   f"redline: warning: {d / 'events.ndjson'}: 1 partial line dropped (a write cut short: a kill, or a write error)"]
    assert main_in_process(["report", str(d), "--no-plot"]) == 0
    assert capsys.readouterr().err.splitlines() == err
    dropped: dict = {}
    export_session(d, "ndjson", tmp_path / "x", dropped)
    assert dropped == got


def test_report_says_what_the_writer_lost(tmp_path, monkeypatch, capsys):
    d = tmp_path / "s"
    w = SessionWriter(d, {}, fsync=False)
    fault_writes(monkeypatch, "requests.ndjson", cut_after(2))
    for i in range(6):
        w.add_request(_row(i))
    w.flush()
    monkeypatch.undo()
    w.close("quit")
    assert main_in_process(["report", str(d), "--no-plot"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"redline: warning: {d}: its log lost rows as it ran: 4 rows lost: cannot write {d / 'requests.ndjson'}: {ENOSPC}"
    assert err[1].startswith(f"redline: warning: {d / 'requests.ndjson'}: 1 partial line dropped") and len(err) == 2


def test_a_clean_session_gets_no_warning(tmp_path, capsys):
    d = tmp_path / "s"
    w = SessionWriter(d, {}, fsync=False)
    w.add_request(_row(1))
    w.close("quit")
    assert main_in_process(["report", str(d), "--no-plot"]) == 0
    assert main_in_process(["export", str(d), "--format", "ndjson"]) == 0
    assert capsys.readouterr().err == ""


# -- exit 5 ------------------------------------------------------------------------------------

def _count_offered(monkeypatch) -> dict:
    """Every row redline hands its session writer, counted before the writer sees it."""
    from redline.engine.session import writer as writer_mod

    n = {"rows": 0}
    for name in ("add_request", "add_timeline", "add_event"):
        real = getattr(writer_mod.SessionWriter, name)

        def counted(self, *a, _real=real, **k):
            n["rows"] += 1
            return _real(self, *a, **k)

        monkeypatch.setattr(writer_mod.SessionWriter, name, counted)
    return n


@pytest.mark.parametrize("how", ["run", "held"])
def test_a_headless_run_whose_log_write_fails_exits_5_with_the_exact_count(healthy_sim, tmp_path, monkeypatch, capsys, how):
    """End to end: a run (`redline run PRESET --headless`; `redline --headless --num-requests`)
    in which the disk cuts a requests.ndjson write short (ENOSPC half-way through its second
    row) ends "session saved, N rows lost: REASON", exit 5, N exactly the rows redline
    produced that are not on disk."""
    monkeypatch.setenv("CI", "true")
    out = tmp_path / "s"
    if how == "run":
        preset = write_preset(tmp_path, "short", concurrency=[3], input_len=8, output_len=4, hold_s=2.5, exact=True)
        argv = ["run", str(preset), "--headless"]
    else:
        argv = ["--headless", "-c", "3", "--num-requests", "60", "--input-len", "8", "--output-len", "4"]
    offered = _count_offered(monkeypatch)

    def cut_first_big_write(real, fd, data, seen=[]):  # noqa: B006 - the policy's own state
        if not seen and data.count(b"\n") >= 3:
            seen.append(1)
            return cut_after(1)(real, fd, data)
        if len(seen) == 1:
            seen.append(2)
            raise OSError(errno.ENOSPC, ENOSPC)
        return real(fd, data)

    fault_writes(monkeypatch, "requests.ndjson", cut_first_big_write)
    rc = main_in_process([*argv, "--url", healthy_sim.url, "--out", str(out), "--no-nvml"])
    monkeypatch.undo()
    err = capsys.readouterr().err
    on_disk = sum(read_table(out, t).height for t in ("requests", "timeline", "events"))
    lost = offered["rows"] - on_disk
    assert lost >= 2, (offered, on_disk)  # the cut write's rows after its first
    line = f"redline: session saved, {lost} rows lost: cannot write {out / 'requests.ndjson'}: {ENOSPC}"
    assert rc == 5, err
    assert line in err.splitlines(), err
    assert recorded_loss(out) == (lost, f"cannot write {out / 'requests.ndjson'}: {ENOSPC}")
    assert dropped_lines(out) == {out / "requests.ndjson": 1}


def test_the_tui_exit_says_the_loss_and_exits_5(healthy_sim, tmp_path, monkeypatch, capsys):
    """The TUI's exit reads the engine's last snapshot (its own process in the TUI): the loss
    travels in it (session_error, session_lost_rows)."""
    from redline.engine.core.config import EngineConfig
    from redline.engine.host import EngineThread
    from redline.engine.workload.prompts import WorkloadConfig
    from redline.tui.run_app import saved

    def full(real, fd, data):
        raise OSError(errno.ENOSPC, ENOSPC)

    out = tmp_path / "s"
    host = EngineThread(EngineConfig(url=healthy_sim.url, concurrency=2, workload=WorkloadConfig(input_len=8, output_len=4),
                                     out_dir=out, use_nvml=False))
    host.start()
    fault_writes(monkeypatch, "timeline.ndjson", full)
    try:
        time.sleep(1.5)
    finally:
        host.stop("quit")
    monkeypatch.undo()
    snap = host.snapshot
    assert snap.done and snap.session_lost_rows == host.engine.session.lost_rows >= 1
    assert saved(host, 0) == 5
    assert capsys.readouterr().err.strip() == (f"redline: session saved, {snap.session_lost_rows} rows lost: "
                                              f"cannot write {out / 'timeline.ndjson'}: {ENOSPC}")
    assert saved(host, 130) == 130  # a signal's status stands; the line is said all the same
    clean = type("Host", (), {"snapshot": type(snap)(t=0, elapsed_s=0, state="stopped", target_c=1, previous_c=None,
                                                     in_flight=0, max_concurrency=1), "config": host.config})()
    assert saved(clean, 0) == 0 and capsys.readouterr().out.strip() == f"redline: session saved in {out}"


def test_a_sweep_configuration_that_lost_rows_says_so_and_the_sweep_exits_5(tmp_path, monkeypatch, capsys):
    from redline.engine.sweep.runner import ConfigServer
    from redline.engine.sweep.spec import Config
    from redline.engine.sweep.sweep_file import COMPLETED, entry
    from redline.tui.cli.sweep_cmd import _rows_lost

    d = tmp_path / "tp=1"
    w = SessionWriter(d, {}, fsync=False)
    fault_writes(monkeypatch, "requests.ndjson", cut_after(1))
    for i in range(3):
        w.add_request(_row(i))
    w.flush()
    monkeypatch.undo()
    w.close("preset finished")
    reason = f"cannot write {d / 'requests.ndjson'}: {ENOSPC}"
    cfg = Config(values={"tp": "1"}, label="tp=1", url="http://127.0.0.1:1")
    e = ConfigServer(cfg, d, 1.0).run_entry(5)
    assert e["status"] == COMPLETED and e["lost_rows"] == 2 and e["write_error"] == reason
    assert e["why"] == f"session saved, 2 rows lost: {reason}"
    clean = entry(Config(values={"tp": "2"}, label="tp=2"), COMPLETED, session_dir=tmp_path / "none")
    assert "lost_rows" not in clean and "write_error" not in clean
    doc = {"configurations": [clean, e]}
    assert _rows_lost(doc, 0) == 5
    assert capsys.readouterr().err.splitlines() == [f"redline: sweep tp=1: session saved, 2 rows lost: {reason}"]
    assert _rows_lost(doc, 4) == 4  # a failed gate's status stands
    assert _rows_lost({"configurations": [clean]}, 0) == 0
    assert _rows_lost({"configurations": [clean]}, 0, ("tp=2",)) == 5  # exit 5 with nothing in sweep.json (disk full)
