"""Session writer: layout, flushing, crash safety (SIGKILL), bounded memory, secrets."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from array import array
from pathlib import Path

import polars as pl
import pytest

from redline.engine.measure.records import FAILED, Clock, RequestRecord
from redline.engine.report.export import export_session, read_table
from redline.engine.session import SessionError, SessionWriter, default_session_dir

from helpers import ROOT


def _row(i, **kw):
    r = {
        "rid": i, "phase": "measure", "step": 0, "concurrency": 64, "t_send": 1.7e9 + i,
        "ttft_ms": 50.0, "e2e_ms": 900.5, "itl_mean_ms": 6.0, "itl_max_ms": 30.0,
        "tpot_ms": 6.1, "input_tokens": 100, "output_tokens": 128, "chunks": 127,
        "status": "ok", "http_status": 200, "error_kind": "", "error_text": "",
    }
    r.update(kw)
    return r


def test_layout_and_meta(tmp_path):
    d = tmp_path / "a" / "b" / "session"  # parents are created
    w = SessionWriter(
        d,
        {"label": "lbl", "target": {"url": "http://h:1", "api": "chat", "model": "m", "kind": "sglang"},
         "command_line": ["redline", "--url", "http://h:1"], "server_info": {"tp_size": 8},
         "workload": {"input_len": 1024}},
    )
    for name in ("meta.json", "requests.ndjson", "timeline.ndjson", "events.ndjson"):
        assert (d / name).is_file()
    meta = json.loads((d / "meta.json").read_text())
    for key in ("redline_version", "command_line", "label", "target", "server_info", "workload",
                "started_at", "ended_at", "end_reason", "host"):
        assert key in meta
    assert meta["ended_at"] is None and meta["end_reason"] is None
    assert meta["started_at"].endswith("Z") and meta["target"]["kind"] == "sglang"
    w.update_meta(server_info={"tp_size": 4})
    assert json.loads((d / "meta.json").read_text())["server_info"] == {"tp_size": 4}
    w.close("signal SIGINT")
    meta = json.loads((d / "meta.json").read_text())
    assert meta["end_reason"] == "signal SIGINT" and meta["ended_at"].endswith("Z")
    w.close("quit")  # idempotent
    assert json.loads((d / "meta.json").read_text())["end_reason"] == "signal SIGINT"
    assert not [p for p in d.iterdir() if p.name.endswith(".tmp")]


def test_dir_errors(tmp_path):
    SessionWriter(tmp_path / "s", {}).close("quit")
    with pytest.raises(SessionError) as e:
        SessionWriter(tmp_path / "s", {})
    assert str(tmp_path / "s") in str(e.value) and "meta.json" in str(e.value)
    assert "\n" not in str(e.value)
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(SessionError, match="is a file"):
        SessionWriter(f, {})
    # An existing empty directory is fine.
    (tmp_path / "empty").mkdir()
    SessionWriter(tmp_path / "empty", {}).close("quit")


def test_default_session_dir(tmp_path):
    t = 1_796_031_481.0  # 2026-11-30T09:38:01Z
    p = default_session_dir(tmp_path / "redline-sessions", t=t)
    assert p == tmp_path / "redline-sessions" / "20261130T093801Z"
    p.mkdir(parents=True)
    assert default_session_dir(tmp_path / "redline-sessions", t=t).name == "20261130T093801Z-2"
    (p.parent / "20261130T093801Z-2").mkdir()
    assert default_session_dir(tmp_path / "redline-sessions", t=t).name == "20261130T093801Z-3"
    assert default_session_dir().parent == Path("redline-sessions")


def test_rows_reach_disk_only_on_flush(tmp_path):
    w = SessionWriter(tmp_path / "s", {})
    for i in range(10):
        w.add_request(_row(i))
    w.add_timeline({"state": "running", "target_c": 4})
    w.add_event("key", "C 4 -> 8", concurrency=8)
    assert (tmp_path / "s" / "requests.ndjson").stat().st_size == 0
    assert read_table(tmp_path / "s", "requests").height == 0
    w.flush()
    assert read_table(tmp_path / "s", "requests")["rid"].to_list() == list(range(10))
    assert read_table(tmp_path / "s", "timeline")["target_c"].to_list() == [4]
    ev = read_table(tmp_path / "s", "events")
    assert ev["kind"].to_list() == ["key"] and ev["concurrency"].to_list() == [8]
    assert ev["elapsed_s"][0] >= 0
    w.close("quit")
    w.add_request(_row(99))  # after close: dropped and counted, never raises
    assert w.lost_rows == 1


def test_auto_flush_when_buffer_grows(tmp_path):
    w = SessionWriter(tmp_path / "s", {}, max_buffer=100)
    for i in range(250):
        w.add_request(_row(i))
    assert w.buffered() == 50
    assert read_table(tmp_path / "s", "requests").height == 200
    w.close("quit")
    assert read_table(tmp_path / "s", "requests").height == 250


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="needs /proc")
def test_memory_bounded_over_200k_rows(tmp_path):
    w = SessionWriter(tmp_path / "s", {}, fsync=False)
    peak_buffer = 0
    base = None
    row = _row(0)
    for i in range(200_000):
        row["rid"] = i
        w.add_request(row)
        b = w.buffered()
        if b > peak_buffer:
            peak_buffer = b
        if i == 20_000:
            base = _rss_bytes()
    grown = _rss_bytes() - base
    assert peak_buffer <= w.max_buffer
    # Between row 20k and row 200k memory must not grow with the rows: each encoded row is
    # ~300 bytes, so keeping 180k of them would add > 50 MB.
    assert grown < 20_000_000, grown
    w.flush()
    assert w.buffered() == 0
    w.close("quit")
    assert w.rows_written["requests"] == 200_000
    assert read_table(tmp_path / "s", "requests").height == 200_000


def test_threads_lose_no_rows(tmp_path):
    w = SessionWriter(tmp_path / "s", {}, fsync=False, max_buffer=1000)
    stop = threading.Event()

    def flusher():
        while not stop.is_set():
            w.flush()

    def producer(k):
        for i in range(5000):
            w.add_request(_row(k * 10_000 + i))

    ft = threading.Thread(target=flusher)
    ft.start()
    ps = [threading.Thread(target=producer, args=(k,)) for k in range(4)]
    for p in ps:
        p.start()
    for p in ps:
        p.join()
    stop.set()
    ft.join()
    w.close("quit")
    rids = read_table(tmp_path / "s", "requests")["rid"]
    assert rids.len() == 20_000 and rids.n_unique() == 20_000


def test_nan_and_odd_values(tmp_path):
    w = SessionWriter(tmp_path / "s", {})
    w.add_request(_row(0, ttft_ms=float("nan"), e2e_ms=float("inf")))
    w.add_timeline({"state": "running", "target_c": 1, "loop_lag_ms": float("nan"), "path": Path("/x")})
    w.add_event("notice", "multi\nline\ttext", detail={"k": [1, 2]})
    w.close("quit")
    r = read_table(tmp_path / "s", "requests")
    assert r["ttft_ms"][0] is None and r["e2e_ms"][0] is None
    assert read_table(tmp_path / "s", "timeline")["path"].to_list() == ["/x"]
    ev = read_table(tmp_path / "s", "events")
    assert ev["text"][0] == "multi line text"
    assert json.loads(ev["detail"][0]) == {"k": [1, 2]}


def test_summary_rewritten_atomically(tmp_path):
    d = tmp_path / "s"
    w = SessionWriter(d, {})
    w.write_summary({"target": {}, "label": "", "steps": [], "break": None, "probe": None})
    m1 = (d / "summary.json").stat().st_mtime_ns
    w.write_summary({"target": {}, "label": "", "steps": [], "break": None, "probe": None})
    assert (d / "summary.json").stat().st_mtime_ns == m1  # unchanged: not rewritten
    w.write_summary({"target": {}, "label": "", "steps": [{"concurrency": 1}], "break": None, "probe": None})
    assert json.loads((d / "summary.json").read_text())["steps"] == [{"concurrency": 1}]
    w.close("quit")


# -- crash safety --------------------------------------------------------------------------

_CHILD = textwrap.dedent(
    """
    import sys, time
    from redline.engine.session import SessionWriter
    w = SessionWriter(sys.argv[1], {"label": "child"}, secrets=["sk-child-SECRET"])
    i = 0
    last = time.monotonic()
    while True:
        for _ in range(50):
            w.add_request({"rid": i, "phase": "live", "step": 0, "concurrency": 8,
                           "t_send": time.time(), "ttft_ms": 10.0, "e2e_ms": 100.0,
                           "status": "ok", "http_status": 200, "error_kind": "",
                           "error_text": "key sk-child-SECRET", "input_tokens": 1,
                           "output_tokens": 2, "chunks": 2})
            i += 1
        w.add_timeline({"state": "running", "target_c": 8, "in_flight": 8,
                        "gpu0_power_w": 300.0 + i % 7})
        time.sleep(0.02)
        if time.monotonic() - last >= 0.4:
            w.add_event("notice", f"flushed through rid {i - 1}")
            w.flush()
            last = time.monotonic()
            print(i, flush=True)
    """
)


@pytest.mark.server
def test_sigkill_mid_run_keeps_everything_flushed(tmp_path):
    d = tmp_path / "s"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.Popen([sys.executable, "-c", _CHILD, str(d)], stdout=subprocess.PIPE,
                         text=True, cwd=ROOT, env=env)
    try:
        flushed = []
        deadline = time.monotonic() + 60
        while len(flushed) < 3 and time.monotonic() < deadline:
            line = p.stdout.readline()
            if not line:
                break
            flushed.append(int(line))
        assert len(flushed) == 3, "writer child did not report three flushes"
        time.sleep(0.2)  # kill it between flushes, with rows buffered in memory
        p.send_signal(signal.SIGKILL)
        p.wait(10)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    # A write cut mid-line (SIGKILL inside write()) leaves a partial last line.
    with open(d / "requests.ndjson", "ab") as f:
        f.write(b'{"rid": 999999, "phase": "li')
    req = read_table(d, "requests")
    rids = req["rid"].to_list()
    n = flushed[-1]
    assert rids[:n] == list(range(n))  # everything flushed is there, in order
    assert 999999 not in rids
    meta = json.loads((d / "meta.json").read_text())
    assert meta["ended_at"] is None  # it never closed
    paths = export_session(d, "parquet")
    back = pl.read_parquet(paths[0])
    assert back.height == req.height and back["rid"].to_list() == rids
    assert pl.read_parquet(paths[1]).height == read_table(d, "timeline").height >= 3
    for path in d.rglob("*"):
        if path.is_file():
            assert b"sk-child-SECRET" not in path.read_bytes(), path


# -- secrets -------------------------------------------------------------------------------

SECRETS = ["sk-live-Zq8vN3p0K1", 'we"ird\\key-é', "tok/en+with=chars"]


def _all_bytes(root: Path) -> list[tuple[Path, bytes]]:
    return [(p, p.read_bytes()) for p in root.rglob("*") if p.is_file()]


def test_secrets_never_written(tmp_path):
    import urllib.parse

    d = tmp_path / "s"
    s0, s1, s2 = SECRETS
    w = SessionWriter(
        d,
        {
            "label": f"run {s0}",
            "target": {"url": f"http://user:{s0}@h:1/v1?key={urllib.parse.quote(s2, safe='')}",
                       "model": "m"},
            "command_line": ["redline", "--api-key", s0, f"--token={s1}", "--url", "http://h:1"],
            "server_info": {"args": f"--api-key {s0}"},
        },
        secrets=SECRETS + [""],
    )
    rec = RequestRecord(rid=1, phase="measure", step=0, concurrency=1, t_send=1.0, t_end=2.0,
                        status=FAILED, http_status=401, error_kind="http_4xx",
                        error_text="x" * 150 + f"invalid key {s0} ({s1})",
                        chunk_times=array("d"))
    w.add_record(rec, Clock.now())
    w.add_request(_row(2, error_text=f"Bearer {s0}", **{s0: s1}))
    w.add_timeline({"state": "running", "target_c": 1, "note": s1, "gpu0_power_w": 100.0})
    w.add_event("warning", f"auth failed with {s0}", detail={"header": f"Authorization: Bearer {s2}"})
    w.write_summary({"target": {"url": f"http://h?k={s0}"}, "label": s1, "steps": [],
                     "break": None, "probe": None})
    w.update_meta(end_note=s2)
    w.close("quit")
    outs = []
    for fmt in ("parquet", "csv", "ndjson"):
        outs += export_session(d, fmt)
    assert len(outs) == 9
    variants = set()
    for s in SECRETS:
        variants |= {s, json.dumps(s)[1:-1], json.dumps(s, ensure_ascii=False)[1:-1],
                     urllib.parse.quote(s, safe=""), urllib.parse.quote_plus(s)}
    files = _all_bytes(d)
    assert len(files) >= 14
    for path, data in files:
        for v in variants:
            assert v.encode() not in data, (path, v)
            assert v[:12].encode() not in data or len(v) <= 12, (path, v)
    # parquet is compressed: check its decoded values too
    for p in outs:
        if p.suffix == ".parquet":
            text = pl.read_parquet(p).write_ndjson()
            for v in variants:
                assert v not in text, (p, v)
    # the rows are still valid and masked
    req = read_table(d, "requests")
    assert req.height == 2
    assert "***" in req["error_text"][0] and "***" in req["error_text"][1]
    meta = json.loads((d / "meta.json").read_text())
    assert meta["command_line"][2] == "***" and meta["command_line"][3] == "--token=***"


def test_writer_side_does_not_import_polars_or_textual():
    code = (
        "import sys; import redline.engine.session as s; from redline.engine.session import SessionWriter, "
        "request_row; from redline.engine.rules.step_text import format_step_table; "
        "assert 'polars' not in sys.modules and 'textual' not in sys.modules, 'imported'"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
