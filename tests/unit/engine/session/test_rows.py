"""request_row(): the requests.ndjson row computed from a RequestRecord."""

from array import array

import pytest

from redline.engine.measure.records import CANCELLED, ERR_HTTP_503, FAILED, OK, Clock, RequestRecord
from redline.engine.report.export import REQUESTS_SCHEMA
from redline.engine.session import request_row


def _rec(**kw):
    base = dict(rid=7, phase="measure", step=3, concurrency=64, t_send=100.0)
    base.update(kw)
    return RequestRecord(**base)


def test_request_row_exact_figures():
    clock = Clock(wall0=1_700_000_000.0, perf0=90.0)
    rec = _rec(
        t_first=100.050,  # TTFT 50 ms
        t_end=100.250,  # E2E 250 ms
        input_tokens=512,
        output_tokens=5,
        usage_reported=True,
        http_status=200,
        chunk_times=array("d", [100.050, 100.060, 100.100, 100.130, 100.250]),
        chunk_tokens=array("l", [1, 1, 1, 1, 1]),
    )
    row = request_row(rec, clock)
    assert list(row) == list(REQUESTS_SCHEMA)
    assert row["rid"] == 7 and row["phase"] == "measure" and row["step"] == 3
    assert row["concurrency"] == 64
    assert row["t_send"] == pytest.approx(1_700_000_010.0, abs=1e-6)
    assert row["ttft_ms"] == pytest.approx(50.0, abs=1e-3)
    assert row["e2e_ms"] == pytest.approx(250.0, abs=1e-3)
    # gaps 10, 40, 30, 120 ms
    assert row["itl_mean_ms"] == pytest.approx(50.0, abs=1e-3)
    assert row["itl_max_ms"] == pytest.approx(120.0, abs=1e-3)
    # (E2E - TTFT) / (out - 1) = 200 / 4
    assert row["tpot_ms"] == pytest.approx(50.0, abs=1e-3)
    assert row["tpot_ms"] == pytest.approx(rec.tpot * 1000, abs=1e-3)
    assert row["input_tokens"] == 512 and row["output_tokens"] == 5
    assert row["chunks"] == 5
    assert row["status"] == OK and row["http_status"] == 200
    assert row["error_kind"] == "" and row["error_text"] == ""


def test_multi_token_chunk_is_one_gap():
    clock = Clock(wall0=0.0, perf0=0.0)
    rec = _rec(
        t_send=0.0, t_first=0.1, t_end=0.4, output_tokens=7,
        chunk_times=array("d", [0.1, 0.2, 0.4]), chunk_tokens=array("l", [1, 4, 2]),
    )
    row = request_row(rec, clock)
    assert row["itl_mean_ms"] == pytest.approx(150.0, abs=1e-3)  # gaps 100, 200
    assert row["itl_max_ms"] == pytest.approx(200.0, abs=1e-3)
    assert row["tpot_ms"] == pytest.approx(50.0, abs=1e-3)  # 300 / 6
    assert row["chunks"] == 3


def test_failed_before_first_token_has_nulls():
    clock = Clock(wall0=0.0, perf0=0.0)
    rec = _rec(
        t_end=100.5, status=FAILED, http_status=503, error_kind=ERR_HTTP_503,
        error_text="Service\nUnavailable",
    )
    row = request_row(rec, clock)
    assert row["ttft_ms"] is None and row["itl_mean_ms"] is None and row["itl_max_ms"] is None
    assert row["tpot_ms"] is None
    assert row["e2e_ms"] == pytest.approx(500.0, abs=1e-3)
    assert row["status"] == FAILED and row["http_status"] == 503
    assert row["error_kind"] == "http_503"
    assert row["error_text"] == "Service Unavailable"  # one line


def test_single_chunk_and_one_token():
    row = request_row(
        _rec(t_first=100.1, t_end=100.1, output_tokens=1, chunk_times=array("d", [100.1])),
        Clock(0.0, 0.0),
    )
    assert row["itl_mean_ms"] is None and row["itl_max_ms"] is None and row["tpot_ms"] is None
    assert row["chunks"] == 1


def test_cancelled_without_end():
    row = request_row(_rec(status=CANCELLED), Clock(0.0, 0.0))
    assert row["status"] == "cancelled" and row["e2e_ms"] is None and row["ttft_ms"] is None


def test_error_text_scrubbed_before_truncation():
    secret = "sk-abcdefghijklmnopqrstuvwxyz0123456789"
    # The secret straddles the 200-character cut: cutting first would leave a fragment.
    text = "x" * 180 + secret + " tail"
    row = request_row(_rec(status=FAILED, error_text=text), Clock(0.0, 0.0), [secret])
    assert len(row["error_text"]) <= 200
    assert row["error_text"].startswith("x" * 180 + "***")
    assert secret[:10] not in row["error_text"]
    row = request_row(_rec(status=FAILED, error_text="e" * 500), Clock(0.0, 0.0))
    assert row["error_text"] == "e" * 200
