"""Reading session tables back and exporting them: schema, formats, damaged files, errors."""

import json

import polars as pl
import pytest

import redline.engine.report.export as export_mod
from redline.engine.report.export import (
    EVENTS_SCHEMA,
    REQUESTS_SCHEMA,
    TIMELINE_SCHEMA,
    concurrency_timeline,
    export_session,
    read_table,
)
from redline.engine.session import STATES, SessionError, SessionWriter, gpu_columns


def _row(i, **kw):
    r = {
        "rid": i, "phase": "measure", "step": i // 10, "concurrency": 64, "t_send": 1.7e9 + i,
        "ttft_ms": 50.0 + i, "e2e_ms": 900.5, "itl_mean_ms": 6.0, "itl_max_ms": 30.0,
        "tpot_ms": 6.1, "input_tokens": 100, "output_tokens": 128, "chunks": 127,
        "status": "ok", "http_status": 200, "error_kind": "", "error_text": "",
    }
    r.update(kw)
    return r


def _tl(sec, c, gpus=0, state="running", **kw):
    r = {"t": 1.7e9 + sec, "elapsed_s": float(sec), "state": state, "target_c": c,
         "in_flight": c, "output_tok_s": 100.0 * c, "input_tok_s": 10, "req_s": 1.5,
         "errors": 0, "ttft_p50_ms": 40.0, "server_running": 8, "client_overloaded": False}
    for g in range(gpus):
        r.update({f"gpu{g}_power_w": 300 + g, f"gpu{g}_power_limit_w": 700,
                  f"gpu{g}_util_pct": 90, f"gpu{g}_mem_used_mib": 70000.5, f"gpu{g}_temp_c": 60})
    r.update(kw)
    return r


@pytest.fixture
def session(tmp_path):
    d = tmp_path / "s"
    w = SessionWriter(d, {"label": "t"})
    for i in range(30):
        w.add_request(_row(i))
    w.add_request(_row(30, status="failed", http_status=503, error_kind="http_503",
                       error_text="busy", ttft_ms=None, itl_mean_ms=None, itl_max_ms=None,
                       tpot_ms=None, chunks=0, output_tokens=0))
    # seconds 0-1 without telemetry (columns absent), 2-4 with two GPUs, 5 with null values
    w.add_timeline(_tl(0, 8))
    w.add_timeline(_tl(1, 8, server_running=None))
    for s in (2, 3, 4):
        w.add_timeline(_tl(s, 16, gpus=2))
    w.add_timeline(_tl(5, 16, gpus=1, gpu0_power_w=None, client_overloaded=True))
    w.add_event("key", "C 8 -> 16", concurrency=16)
    w.add_event("preset", "step 2 of 6")
    w.add_event("warning", "client overloaded", detail="cpu 97 %")
    w.close("quit")
    return d


def _base_schema_ok(df, schema):
    assert list(df.columns[: len(schema)]) == list(schema)
    for name, dtype in schema.items():
        assert df.schema[name] == dtype, (name, df.schema[name], dtype)


def test_read_table_schema(session):
    req = read_table(session, "requests")
    _base_schema_ok(req, REQUESTS_SCHEMA)
    assert req.width == len(REQUESTS_SCHEMA) and req.height == 31
    assert req.filter(pl.col("status") == "failed")["ttft_ms"].to_list() == [None]
    tl = read_table(session, "timeline")
    _base_schema_ok(tl, TIMELINE_SCHEMA)
    assert tl.columns[len(TIMELINE_SCHEMA):] == gpu_columns(2)
    for c in gpu_columns(2):
        assert tl.schema[c] == pl.Float64
    assert tl["gpu0_power_w"].to_list() == [None, None, 300.0, 300.0, 300.0, None]
    assert tl["gpu1_util_pct"].to_list() == [None, None, 90.0, 90.0, 90.0, None]
    assert tl["server_running"].to_list() == [8.0, None, 8.0, 8.0, 8.0, 8.0]
    assert tl["itl_p99_ms"].null_count() == 6  # never written: all null, still typed
    assert tl["client_overloaded"].to_list() == [False] * 5 + [True]
    ev = read_table(session, "events")
    _base_schema_ok(ev, EVENTS_SCHEMA)
    assert ev["concurrency"].to_list() == [16, None, None]
    assert ev["detail"].to_list() == [None, None, "cpu 97 %"]


def test_parquet_round_trip(session, tmp_path):
    out = tmp_path / "out"
    paths = export_session(session, "parquet", out)
    assert paths == [out / "requests.parquet", out / "timeline.parquet", out / "events.parquet"]
    for p, table, schema in zip(paths, ("requests", "timeline", "events"),
                                (REQUESTS_SCHEMA, TIMELINE_SCHEMA, EVENTS_SCHEMA), strict=False):
        back = pl.read_parquet(p)
        _base_schema_ok(back, schema)
        assert back.equals(read_table(session, table))


def test_empty_session_has_fixed_schema(tmp_path):
    d = tmp_path / "s"
    SessionWriter(d, {}).close("quit")
    paths = export_session(d, "parquet")
    assert paths[0].parent == d / "export"
    for p, schema in zip(paths, (REQUESTS_SCHEMA, TIMELINE_SCHEMA, EVENTS_SCHEMA), strict=False):
        back = pl.read_parquet(p)
        assert back.height == 0
        _base_schema_ok(back, schema)
    for fmt in ("csv", "ndjson"):
        for p in export_session(d, fmt):
            assert p.exists()


def test_csv_and_ndjson_row_counts(session):
    counts = {"requests": 31, "timeline": 6, "events": 3}
    for p in export_session(session, "csv"):
        df = pl.read_csv(p)
        assert df.height == counts[p.stem]
    csv_req = pl.read_csv(session / "export" / "requests.csv")
    assert csv_req.columns == list(REQUESTS_SCHEMA)
    for p in export_session(session, "ndjson"):
        lines = p.read_text().splitlines()
        assert len(lines) == counts[p.stem]
        json.loads(lines[0])


def test_truncated_and_damaged_lines(session):
    with open(session / "requests.ndjson", "ab") as f:
        f.write(b'{"rid": 31, "phase": "measure", "st')  # SIGKILL mid-write
    assert read_table(session, "requests").height == 31
    # A damaged line in the middle (disk-full write) is skipped, the rest is kept.
    data = (session / "timeline.ndjson").read_bytes().splitlines(keepends=True)
    data.insert(2, b'{"t": 1, "elapsed_s": \n')
    (session / "timeline.ndjson").write_bytes(b"".join(data))
    tl = read_table(session, "timeline")
    assert tl.height == 6
    # Only a partial line: empty table with its schema.
    (session / "events.ndjson").write_bytes(b'{"t": 1')
    ev = read_table(session, "events")
    assert ev.height == 0 and list(ev.schema) == list(EVENTS_SCHEMA)
    assert len(export_session(session, "parquet")) == 3


def test_large_requests_file_path(session, monkeypatch):
    """A requests file over FULL_INFER_BYTES is read with an explicit schema from a sample;
    a value of another type than the sample suggested falls back to full inference.
    Timeline files always infer over every row (GPU columns that come and go)."""
    monkeypatch.setattr(export_mod, "FULL_INFER_BYTES", 100)
    monkeypatch.setattr(export_mod, "SAMPLE_BYTES", 400)
    tl = read_table(session, "timeline")
    assert tl.height == 6 and tl.columns[len(TIMELINE_SCHEMA):] == gpu_columns(2)
    req = read_table(session, "requests")
    assert req.height == 31 and req["rid"].to_list() == list(range(31))
    assert req.schema == pl.Schema(REQUESTS_SCHEMA)
    with open(session / "requests.ndjson", "a") as f:
        f.write(json.dumps(_row(31, http_status="n/a", extra="x")) + "\n")
    req = read_table(session, "requests")
    assert req.height == 32 and req["http_status"][31] is None
    assert req["extra"].to_list() == [None] * 31 + ["x"]


def test_type_drift_is_cast(tmp_path):
    d = tmp_path / "s"
    w = SessionWriter(d, {})
    w.add_timeline(_tl(0, 4, server_running=3, client_overloaded=0))
    w.add_timeline(_tl(1, 4, server_running=3.5, client_overloaded=1, target_c="8"))
    w.close("quit")
    tl = read_table(d, "timeline")
    assert tl["server_running"].to_list() == [3.0, 3.5]
    assert tl["client_overloaded"].to_list() == [False, True]
    assert tl["target_c"].to_list() == [4, 8]


def test_errors_are_one_line(tmp_path, session):
    with pytest.raises(SessionError) as e:
        export_session(session, "xlsx")
    msg = str(e.value)
    assert "'xlsx'" in msg and "parquet, csv, ndjson" in msg and "\n" not in msg
    with pytest.raises(SessionError, match="session directory not found"):
        export_session(tmp_path / "missing", "csv")
    (tmp_path / "plain").mkdir()
    with pytest.raises(SessionError) as e:
        read_table(tmp_path / "plain", "requests")
    assert str(e.value) == f"not a redline session directory: {tmp_path / 'plain'} (no meta.json)"
    with pytest.raises(SessionError, match="unknown session table"):
        read_table(session, "gpus")
    (tmp_path / "f").write_text("x")
    with pytest.raises(SessionError, match="-o takes a directory"):
        export_session(session, "csv", tmp_path / "f")
    assert export_session(session, " Parquet ")[0].suffix == ".parquet"


def test_concurrency_timeline(tmp_path):
    d = tmp_path / "s"
    w = SessionWriter(d, {})
    sec = 0
    for c, n, state in ((32, 5, "preset"), (64, 3, "preset"), (64, 2, "paused"),
                        (1, 4, "probe"), (8, 2, "running")):
        for _ in range(n):
            w.add_timeline(_tl(sec, c, state=state))
            sec += 1
    w.add_timeline({"t": 1.7e9 + sec, "elapsed_s": float(sec), "state": "running"})  # no target_c
    w.close("quit")
    assert concurrency_timeline(d) == [(5.0, 32), (3.0, 64), (2.0, 0), (4.0, 1), (2.0, 8)]
    d2 = tmp_path / "e"
    SessionWriter(d2, {}).close("quit")
    assert concurrency_timeline(d2) == []


def test_server_gone_seconds_replay_as_no_load(tmp_path):
    """While the server was gone redline sent nothing (target_c stays at the set C): preset-from
    must replay those seconds as C=0, as it does paused and stopped ones, not as load."""
    assert {"server gone", "paused", "stopped"} <= set(STATES)
    d = tmp_path / "s"
    w = SessionWriter(d, {})
    sec = 0
    for c, n, state in ((64, 2, "preset"), (64, 3, "server gone"), (64, 2, "preset"),
                        (64, 1, "stopped")):
        for _ in range(n):
            w.add_timeline(_tl(sec, c, state=state))
            sec += 1
    w.close("quit")
    assert read_table(d, "timeline")["state"].to_list()[2:5] == ["server gone"] * 3
    assert concurrency_timeline(d) == [(2.0, 64), (3.0, 0), (2.0, 64), (1.0, 0)]
