"""How far the client's own send waits moved a step's TTFT and E2E (client_send_shift_ms,
engine/measure/accumulator.py): each figure less the same figure of every request's latency
less its send wait, the most of them. Checked against the figures computed here, by hand,
from the requests' own times (linear interpolation, numpy's default)."""

from __future__ import annotations

import pytest

from redline.engine.measure import records
from redline.engine.measure.accumulator import StepAccumulator
from redline.engine.measure.records import Clock, RequestRecord


def _q(vals: list[float], p: float) -> float:
    s = sorted(vals)
    k = (len(s) - 1) * p
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def _step() -> StepAccumulator:
    acc = StepAccumulator(1, 100, "measure", 0.0, Clock.now())
    acc.begin_measure(0.0)
    return acc


def _rec(i: int, ttft: float, e2e: float, wait: float | None, t_intended: float | None = None) -> RequestRecord:
    t0 = 1.0 + i * 0.001
    rec = RequestRecord(rid=i, phase="measure", step=1, concurrency=100, t_send=t0, t_intended=t_intended, max_tokens=8)
    rec.send_wait = wait
    rec.t_first, rec.t_end, rec.output_tokens, rec.status = t0 + ttft, t0 + e2e, 8, records.OK
    return rec


def _run(recs: list[RequestRecord], close_at: float, end: int | None = None) -> StepAccumulator:
    """Every request sent and answered; the first `end` of them (all: None) ended before the close."""
    acc = _step()
    for rec in recs:
        acc.on_send(rec)
        acc.on_first(rec)
    for rec in recs[:end]:
        acc.on_end(rec)
    acc.close(close_at)
    return acc


def test_the_shift_is_the_most_any_ttft_or_e2e_figure_drops_without_the_send_waits():
    # 100 requests: TTFT 100..199 ms, E2E 1 s more; 98 waited 0.2 ms to send, the two slowest 60 ms
    # (a connect burst)
    ttft = [0.100 + i * 0.001 for i in range(100)]
    wait = [0.0002] * 98 + [0.060, 0.060]
    recs = [_rec(i, t, t + 1.0, w) for i, (t, w) in enumerate(zip(ttft, wait, strict=True))]
    res = _run(recs, 5.0).result(5.0)
    net = [t - w for t, w in zip(ttft, wait, strict=True)]
    moves = [_q(ttft, p) - _q(net, p) for p in (0.5, 0.99)] + [sum(ttft) / 100 - sum(net) / 100]
    moves += [_q([t + 1.0 for t in ttft], p) - _q([t + 1.0 for t in net], p) for p in (0.5, 0.99)]
    assert res.client_send_shift_ms == pytest.approx(max(moves) * 1000, abs=0.002)
    # two 60 ms waits move the p99 only down to the next-slowest requests' TTFT (2.2 ms): the
    # shift is what the waits did to the figures, not the longest wait
    assert 1.0 < res.client_send_shift_ms < 5.0
    assert res.p99_ttft_ms == pytest.approx(_q(ttft, 0.99) * 1000, abs=0.002)  # the figure itself is unchanged


def test_requests_in_flight_at_the_close_count_their_first_tokens_less_their_waits():
    recs = [_rec(i, 0.050, 9.0, 0.005) for i in range(40)]  # every wait 5 ms; 30 still out at the close
    res = _run(recs, 2.0, end=10).result(2.0)
    assert res.client_send_shift_ms == pytest.approx(5.0, abs=0.002)


def test_a_wait_not_known_or_an_open_loops_send_leaves_the_shift_unknown():
    known = [_rec(i, 0.050, 1.0, 0.001) for i in range(20)]
    assert _run(known, 5.0).result(5.0).client_send_shift_ms == pytest.approx(1.0, abs=0.002)
    unknown = known[:19] + [_rec(19, 0.050, 1.0, None)]  # a transport that does not say
    assert _run(unknown, 5.0).result(5.0).client_send_shift_ms is None
    late = [_rec(i, 0.050, 1.0, 0.001, t_intended=1.0 + i * 0.001 - 0.010) for i in range(20)]  # latencies from the intended time
    assert _run(late, 5.0).result(5.0).client_send_shift_ms is None
