"""The live view shows waiting (issue 42 case 20): in 2048-token steps the live TTFT read "-"
for the whole step while 24 requests waited over 75 s, and the probe lane read "TTFT -" while
its request was queued. Live TTFT now counts the requests still waiting for a first token at
their age, as lower bounds (">=75 s"), the way a step counts its own at its close."""

from __future__ import annotations

from collections import Counter

import pytest

from redline.engine.core.snapshot import Snapshot
from redline.engine.load.probe_lane import LaneStats
from redline.engine.measure import records
from redline.engine.measure.live_metrics import LiveMetrics
from redline.engine.measure.records import RequestRecord
from redline.engine.measure.timeline import timeline_row
from redline.tui.widgets.live_panels import lane_text


def _rec(rid: int, t_send: float) -> RequestRecord:
    return RequestRecord(rid=rid, phase="measure", step=1, concurrency=32, t_send=t_send, max_tokens=2048)


def _row(m: LiveMetrics) -> dict:
    return timeline_row(t_wall=0.0, interval_s=1.0, sec=Counter(), stats=m.percentiles, state="running", target_c=32,
                        in_flight=32, backing_off=0, server=None, health=None, gpus=[])


def test_a_queue_with_no_first_token_in_the_window_reads_its_age_as_a_bound():
    m = LiveMetrics()
    recs = [_rec(i, 100.0 + 0.01 * i) for i in range(24)]
    for r in recs:
        m.on_send(r)
    st = m.recompute_percentiles(175.5)
    assert st.ttft.p50 == pytest.approx(75.5 - 0.115, abs=0.01) and {"p50", "p99", "max"} <= st.ttft.bounds
    assert st.ttft.max == pytest.approx(75.5)
    row = _row(m)
    assert row["ttft_p50_ms"] == pytest.approx(75385.0, abs=10) and row["ttft_p50_ms_bound"] and row["ttft_p99_ms_bound"]
    assert st.ttft.bound_flags() == {"p50": True, "p90": True, "p99": True, "max": True}
    # the first tokens come: what answered is a figure; the rest are still at least their age
    for r in recs[:20]:
        r.t_first = 176.0
        m.on_first(r)
    st = m.recompute_percentiles(176.0)
    assert "p50" not in st.ttft.bounds and st.ttft.p50 == pytest.approx(75.9, abs=0.1)
    for r in recs[20:]:
        r.t_end, r.status = 176.5, records.CANCELLED
        m.on_request_end(r)
    st = m.recompute_percentiles(177.0)
    assert not st.ttft.bounds and "ttft_p50_ms_bound" not in _row(m)


def test_a_request_a_moment_into_its_prefill_is_no_bound():
    """A busy, healthy server: 200 first tokens at 40-60 ms in the window and three requests
    sent 10 ms ago. They are younger than every TTFT seen: no figure is a bound."""
    m = LiveMetrics()
    for i in range(200):
        r = _rec(i, 100.0 + i * 0.04)
        m.on_send(r)
        r.t_first = r.t_send + 0.04 + 0.0001 * i
        m.on_first(r)
    now = 100.0 + 200 * 0.04
    for i in range(3):
        m.on_send(_rec(1000 + i, now - 0.01))
    st = m.recompute_percentiles(now)
    assert not st.ttft.bounds and st.ttft.p99 == pytest.approx(0.04 + 0.0001 * 198.01, abs=1e-4)


def test_the_probe_lane_reads_its_queued_request_as_a_bound():
    lane = LaneStats()
    lane.waiting[7] = 100.0
    ttft, itl = lane.p50_ms(175.0)
    assert ttft == pytest.approx(75000.0) and lane.ttft_bound and itl is None
    snap = Snapshot(t=175.0, elapsed_s=75.0, state="running", target_c=32, previous_c=None, in_flight=32, lane_on=True,
                    lane_ttft_ms=ttft, lane_ttft_bound=lane.ttft_bound, ttft_ms={"p50": 75000.0}, ttft_bound={"p50": True})
    assert lane_text(snap) == "lane C=1  TTFT ≥75.0 s  ITL -"
    del lane.waiting[7]
    lane.ttft.add(176.0, 0.5)
    assert lane.p50_ms(176.0)[0] == pytest.approx(500.0) and not lane.ttft_bound


async def test_the_live_ttft_of_a_capped_server_reads_the_queue_against_the_sims_clock(sim_factory):
    """A cap of 8 (pp-capped's numbers without pp: tests/helpers/sim.py CAP8_SIM), C=32, 2048-token answers: 8 answer at once, 24 wait in the
    server's queue for minutes. The live TTFT p50 is a bound, and it is their wait: within
    1.5 s (a snapshot is up to a second old) of the median of the 32 requests' TTFTs (first
    token, else age) on the sim's clock."""
    import time

    import httpx

    from redline.engine.core.config import EngineConfig
    from redline.engine.core.engine import Engine
    from redline.engine.workload.prompts import WorkloadConfig

    from helpers import CAP8_SIM, until

    sim = sim_factory("pp-capped", extra_args=CAP8_SIM)
    e = Engine(EngineConfig(url=sim.url, concurrency=32, workload=WorkloadConfig(input_len=16, output_len=2048), calibrate=False, use_nvml=False))
    await e.start()
    try:
        assert await until(lambda: (e.snapshot.ttft_bound or {}).get("p50") and e.snapshot.ttft_ms["p50"] > 3000, 15.0), e.snapshot.ttft_ms
        snap = e.snapshot
        recs = httpx.get(sim.url + "/sim/requests", timeout=10).json()
        now = time.time()
    finally:
        await e.stop()
    live = [r for r in recs if r["t_first"] is not None or r["t_end"] is None]
    waits = sorted(((r["t_first"] if r["t_first"] is not None else now) - r["t_arrive"]) * 1000 for r in live)
    assert len(live) == 32 and sum(r["t_first"] is None for r in live) == 24
    truth = (waits[15] + waits[16]) / 2
    assert abs(snap.ttft_ms["p50"] - truth) < 1500, (snap.ttft_ms, truth)  # the snapshot is up to a second old
    assert snap.ttft_bound.get("p99")


def test_a_binned_window_counts_the_waiting_as_an_exact_one_does():
    """Past the exact limit the window's values are log bins: the waiting requests join them
    (RollingDigest.digest) and give the figures an exact window gives, within the bins' 0.5 %."""
    from redline.engine.measure.histogram import RollingDigest
    from redline.engine.measure.live_metrics import censored_window

    waiting = [2.0 + 0.01 * i for i in range(40)]
    got = []
    for limit in (4096, 8):
        w = RollingDigest(10.0, limit=limit)
        for i in range(60):
            w.add(100.0 + i * 0.1, 0.05 + 0.001 * i)
        got.append(censored_window(w, waiting))
    exact, binned = got
    assert exact.n == binned.n == 100 and exact.bounds == binned.bounds == {"p90", "p99", "max"}  # p50 falls among the 60 answered
    for q in ("p50", "p90", "p99", "max"):
        assert getattr(binned, q) == pytest.approx(getattr(exact, q), rel=0.006), q
