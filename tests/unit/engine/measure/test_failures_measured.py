"""A failing server measured (issue 42, the measure side), on a step book fed crafted requests:
a failure is a miss whatever bounds are set (case 1), its tokens are no throughput (case 3), an
end stamped before the close but delivered after it counts once (case 10), attainment and
goodput read one verdict per request (case 11), and a censored bound stops when its request
stops (case 15). Times are perf_counter seconds, chosen by hand."""

from __future__ import annotations

import pytest

from redline.engine.measure import records
from redline.engine.measure.gap_batch import GapBatch
from redline.engine.measure.live_metrics import LiveMetrics
from redline.engine.measure.records import Clock, RequestRecord
from redline.engine.measure.slo import Slo
from redline.engine.measure.step_book import StepBook
from redline.engine.rules.verdicts import STEP_JUDGE


def _book(slo: Slo | None = None) -> StepBook:
    book = StepBook(Clock.now(), judge=STEP_JUDGE)
    book.slo = slo
    return book


def _rec(rid: int, step: int, t_send: float, phase: str = "measure") -> RequestRecord:
    return RequestRecord(rid=rid, phase=phase, step=step, concurrency=10, t_send=t_send, max_tokens=100)


def _stream(book: StepBook, rec: RequestRecord, t_first: float, itl: float, n: int, *, metrics: LiveMetrics | None = None) -> float:
    """`n` chunks of one token, `itl` apart from `t_first`, each counted as it arrives (the
    step's tok/s, the live window); returns the last chunk's time."""
    rec.t_first = t_first
    book.on_first(rec)
    t = t_first
    for i in range(n):
        t = t_first + i * itl
        rec.chunk_times.append(t)
        rec.chunk_tokens.append(1)
        rec.output_tokens += 1
        book.on_tokens(t, 1)
        if metrics is not None:
            metrics.on_tokens(t, 1)
    return t


def _end(book: StepBook, rec: RequestRecord, t_end: float, status: str = records.OK, *, metrics: LiveMetrics | None = None) -> None:
    """The request's end as the engine's measurements delivers it (engine/core/measurements.py)."""
    rec.t_end = t_end
    rec.status = status
    if status == records.FAILED:
        rec.error_kind = records.ERR_DISCONNECT
        book.remove_gaps(GapBatch.of_record(rec))
        book.remove_tokens(rec.credits())
        if metrics is not None:
            metrics.unmeasure_tokens(rec.credits())
    book.on_end(rec)
    if metrics is not None:
        metrics.on_request_end(rec)


# -- case 1: a failure is a miss, whatever bounds are set -------------------------------------

@pytest.mark.parametrize("slo", [Slo(tpot_ms=50), Slo(itl_ms=100), Slo(ttft_ms=2000), Slo(tpot_ms=50, ttft_ms=2000)])
def test_one_ok_and_nine_failed_attain_a_tenth_whatever_bounds_are_set(slo):
    """The review's crafted step: one request completes well inside every bound, nine fail
    (five half-way through their output, four before any token). With `--slo tpot=50ms` the
    step read attainment 1.0 and met its SLO: the failures were "not judged"."""
    book = _book(slo)
    acc = book.open_step(10, "measure", 0.0)
    good = _rec(0, acc.index, 1.0)
    book.on_send(good)
    _stream(book, good, 1.2, 0.02, 50)
    _end(book, good, 2.2)
    for i in range(1, 10):
        r = _rec(i, acc.index, 1.0)
        book.on_send(r)
        if i <= 5:
            _stream(book, r, 1.3, 0.02, 25)
        _end(book, r, 1.9, records.FAILED)
    res = book.close_step(acc, 5.0)
    assert (res.completed, res.failed) == (1, 9)
    assert res.slo_attainment == pytest.approx(0.1)
    assert res.request_goodput == pytest.approx(1 / 5.0)


def test_a_request_judged_good_at_the_close_that_fails_after_it_is_a_miss():
    """It answered and decoded well inside the window (judged good at the close, on it), then
    failed under the next load: its step's final attainment counts it a miss."""
    book = _book(Slo(tpot_ms=50))
    acc = book.open_step(2, "measure", 0.0)
    a, b = _rec(1, acc.index, 0.5), _rec(2, acc.index, 0.5)
    for r in (a, b):
        book.on_send(r)
        _stream(book, r, 0.7, 0.02, 100)
    _end(book, a, 0.7 + 99 * 0.02)
    closing = book.close_step(acc, 10.0)  # b is out, judged good on its window
    book.record(closing)
    assert closing.slo_attainment == 1.0 and not closing.final
    _end(book, b, 12.0, records.FAILED)
    final = book.steps[-1]
    assert final.final and (final.completed, final.failed) == (1, 1)
    assert final.slo_attainment == pytest.approx(0.5)


# -- case 10: an end stamped before the close, delivered after it -------------------------------

def test_an_end_stamped_before_the_close_but_delivered_after_it_counts_once():
    """Two own requests. A ends inside the window and misses `tpot=30ms`; B answers, decodes at
    20 ms a token and ends at 9.5 s by its stamp, but its end is delivered after the step closed
    at 10 s (the loop caught up late). It was counted at the close from its window figures
    (judged, its TPOT in); its end then counted it again: 2 own requests, 3 judged."""
    book = _book(Slo(tpot_ms=30))
    acc = book.open_step(2, "measure", 0.0)
    a, b = _rec(1, acc.index, 1.0), _rec(2, acc.index, 1.0)
    for r in (a, b):
        book.on_send(r)
    _stream(book, a, 1.5, 0.04, 50)  # TPOT 40 ms: a miss
    _end(book, a, 1.5 + 49 * 0.04)
    last = _stream(book, b, 1.5, 0.02, 400)  # TPOT 20 ms: good (to 9.48 s)
    closing = book.close_step(acc, 10.0)
    book.record(closing)
    assert closing.requests_sent == 2 and closing.slo_attainment == pytest.approx(0.5)
    assert last < 9.5
    _end(book, b, 9.5)  # stamped inside the window, delivered now
    final = book.steps[-1]
    assert final.final and final.completed == 2 and final.ended_after_close == 1
    assert acc.judged == 2 and acc.tpot.count == 2
    assert final.slo_attainment == pytest.approx(0.5)
    assert final.median_e2e_latency_ms == pytest.approx(((1.5 + 49 * 0.04 - 1.0) + 8.5) / 2 * 1000, abs=0.01)
    assert not final.median_e2e_latency_ms_bound and final.censored_e2e == 0  # B's E2E is its truth, not its age at the close
    assert final.mean_tpot_ms == pytest.approx(30.0, abs=0.05)  # (40 + 20) / 2, each once


# -- case 11: one verdict per request for attainment and goodput --------------------------------

def test_attainment_and_goodput_agree_at_the_bound():
    """TTFT 10.141 - 10.0 s against `ttft=141ms`: in floating point 0.14100000000000001 s.
    Goodput's own comparison (seconds against 0.141) called it a miss while attainment's judge
    (milliseconds against 141) called it met: attainment 1.0 with goodput 0. One verdict now."""
    book = _book(Slo(ttft_ms=141))
    metrics = LiveMetrics()
    metrics.slo = book.slo
    acc = book.open_step(1, "measure", 10.0)
    r = _rec(1, acc.index, 10.0)
    book.on_send(r)
    _stream(book, r, 10.141, 0.01, 20, metrics=metrics)
    _end(book, r, 10.141 + 19 * 0.01, metrics=metrics)
    res = book.close_step(acc, 12.0)
    assert r.ttft == 0.14100000000000001
    assert res.slo_attainment == 1.0
    assert res.request_goodput == pytest.approx(1 / 2.0)
    assert res.output_goodput == pytest.approx(res.output_throughput)
    good_req, good_tok = metrics.goodput(10.5)
    out = metrics.rates(10.5)[0]
    assert good_req > 0 and good_tok == pytest.approx(out)


def test_a_request_that_outlives_its_step_is_judged_once_for_both_steps():
    """Its own step judges it at the close on its window (TPOT 20 ms, good against 30 ms);
    under the next load it decodes at 60 ms a token and ends there: the next step's goodput
    counts its completion with that same verdict, not a second judgement of its whole record."""
    book = _book(Slo(tpot_ms=30))
    first = book.open_step(1, "measure", 0.0)
    r = _rec(1, first.index, 1.0)
    book.on_send(r)
    t = _stream(book, r, 1.2, 0.02, 400)  # to 9.18 s
    book.record(book.close_step(first, 10.0))
    assert r.slo_met is True
    second = book.open_step(2, "measure", 10.0)
    while t < 19.0:
        t += 0.06
        r.chunk_times.append(t)
        r.chunk_tokens.append(1)
        r.output_tokens += 1
        book.on_tokens(t, 1)
    _end(book, r, t)
    assert r.tpot > 0.030  # its whole record would miss
    res = book.close_step(second, 20.0)
    assert res.request_goodput == pytest.approx(0.1) and res.output_goodput == pytest.approx(res.output_throughput)
    assert book.steps[-1].slo_attainment == 1.0


# -- case 3: tokens of failed requests are not throughput ---------------------------------------

def test_eight_of_eight_failing_half_way_read_no_throughput():
    """The review's step: 8 requests each stream 400 tokens at 100 tok/s, then fail half-way
    through their 800. The step read 800 tok/s and steady; its tokens are failed_output_tok_s
    now, its output tok/s, goodput and per-second series (steadiness, SE) hold none of them,
    and the live tok/s drops once the failures are known."""
    book = _book(Slo(tpot_ms=50))
    metrics = LiveMetrics()
    metrics.slo = book.slo
    acc = book.open_step(8, "measure", 100.0)
    recs = [_rec(i, acc.index, 100.0) for i in range(8)]
    for r in recs:
        book.on_send(r)
        _stream(book, r, 100.05, 0.01, 400, metrics=metrics)
    assert metrics.rates(104.0)[0] == pytest.approx(8 * 400 / 3.0, rel=0.05)  # live: counted as they arrive
    for r in recs:
        _end(book, r, 104.1, records.FAILED, metrics=metrics)
    assert metrics.rates(104.2)[0] == 0.0  # known failed: out of the live window
    assert metrics.output_tokens_total == 0 and metrics.failed_output_tokens_total == 8 * 400
    res = book.close_step(acc, 108.0)
    assert res.failed == 8 and res.completed == 0
    assert res.output_throughput == 0.0
    assert res.failed_output_tok_s == pytest.approx(8 * 400 / 8.0)
    assert res.output_goodput == 0.0 and res.request_goodput == 0.0 and res.slo_attainment == 0.0
    assert acc.seconds(108.0) == [0] * 8
    assert not res.steady and res.output_throughput_se == 0.0
    from redline.engine.rules.step_text import format_step_line

    line = format_step_line(res)  # the step's line says them beside its 0 tok/s
    assert "0.0 tok/s" in line and "400.0 tok/s of failed requests" in line, line


def test_throughput_counts_completed_and_still_running_requests_only():
    """One request completes inside the window (100 tokens), one is still running at the
    close (200 of its tokens in the window), one fails (150 tokens): 300 tokens of output
    over the 10 s window, 150 failed beside it. The running one failing after the close takes
    its in-window tokens out of the step's final figure."""
    book = _book()
    acc = book.open_step(3, "measure", 100.0)
    done, running, failed = (_rec(i, acc.index, 100.0) for i in range(3))
    for r in (done, running, failed):
        book.on_send(r)
    _stream(book, done, 100.1, 0.05, 100)
    _end(book, done, 105.1)
    _stream(book, running, 100.05, 0.05, 200)  # to 109.99: by the close at 110
    _stream(book, failed, 100.1, 0.02, 150)
    _end(book, failed, 103.1, records.FAILED)
    closing = book.close_step(acc, 110.0)
    book.record(closing)
    assert closing.output_throughput == pytest.approx(30.0)
    assert closing.failed_output_tok_s == pytest.approx(15.0)
    assert sum(acc.per_second) == 300  # the steadiness series counts the same
    for i in range(1, 21):  # 20 more under the next load, then it fails after all
        running.chunk_times.append(110.0 + i * 0.05)
        running.chunk_tokens.append(1)
        running.output_tokens += 1
        book.on_tokens(110.0 + i * 0.05, 1)
    _end(book, running, 111.05, records.FAILED)
    final = book.steps[-1]
    assert final.final and final.failed == 2
    assert final.output_throughput == pytest.approx(10.0) and final.failed_output_tok_s == pytest.approx(35.0)


def test_a_failed_requests_credits_are_what_was_counted():
    """RequestRecord.credits: each content chunk's tokens at its arrival, and what the server's
    final count added at the end (engine/client/request.py `_settle_tokens`)."""
    r = _rec(1, 1, 0.0)
    r.chunk_times.extend([1.0, 1.5, 2.0])
    r.chunk_tokens.extend([2, 0, 3])
    r.output_tokens, r.t_end = 9, 2.5
    assert r.credits() == [(1.0, 2), (2.0, 3), (2.5, 4)]
    r.output_tokens = 5
    assert r.credits() == [(1.0, 2), (2.0, 3)]


# -- case 15: a bound stops when its request stops ------------------------------------------

def _queued_step(book: StepBook, n: int = 4) -> tuple[list[RequestRecord], object]:
    """A step open from 100 s whose own requests (sent at 100.5) are all still queued when it
    closes at 175.5: each waited 75 s."""
    acc = book.open_step(32, "measure", 100.0)
    recs = [_rec(i, acc.index, 100.5) for i in range(n)]
    for r in recs:
        book.on_send(r)
    closing = book.close_step(acc, 175.5)
    book.record(closing)
    return recs, closing


@pytest.mark.parametrize("how", ["cancelled in the probe", "the run ended"])
def test_a_censored_bound_is_the_age_at_the_close_not_at_the_cancel(how):
    """pp-capped until-it-breaks: the step line said TTFT >=75.0 s, while summary.json, the
    report, HTML and gate said >=198501 ms (the requests were cancelled after the probe, at
    298.5 s: their bound kept counting through it) and E2E p50 >=75042, below its TTFT."""
    book = _book(Slo(ttft_ms=10000))
    recs, closing = _queued_step(book)
    assert closing.median_ttft_ms == pytest.approx(75000.0) and closing.median_ttft_ms_bound
    if how == "the run ended":
        book.finalize_all(298.5)
    else:
        for r in recs:
            _end(book, r, 298.5, records.CANCELLED)
    final = book.steps[-1]
    assert final.final and final.cancelled == (4 if how.startswith('cancelled') else 0)  # lost: censored, not cancelled
    for name in ("median_ttft_ms", "p99_ttft_ms", "median_e2e_latency_ms", "p99_e2e_latency_ms"):
        assert getattr(final, name) == pytest.approx(75000.0), name
        assert final.bound(name), name
    assert (final.median_ttft_ms, final.p99_ttft_ms) == (closing.median_ttft_ms, closing.p99_ttft_ms)
    assert final.slo_attainment == 0.0  # past the 10 s TTFT bound: misses


def test_ttft_is_never_above_e2e_when_the_first_token_comes_after_the_close():
    """Queued through its step (closed at 175.5 s, 75 s after the send), it answers at 200.5 s
    and ends at 220.5 s: its TTFT is the step's, 100 s; its E2E is a bound, at least its age at
    the close, and never below its own TTFT."""
    book = _book()
    recs, _ = _queued_step(book, 1)
    (r,) = recs
    _stream(book, r, 200.5, 0.1, 200)
    _end(book, r, 220.5)
    final = book.steps[-1]
    assert final.median_ttft_ms == pytest.approx(100000.0) and not final.median_ttft_ms_bound
    assert final.median_e2e_latency_ms >= final.median_ttft_ms and final.median_e2e_latency_ms_bound
    assert r.step_e2e == pytest.approx(100.0)


def test_a_held_send_given_up_after_the_close_is_censored_at_the_close():
    """An open loop's send held at the cap, due at 101 s, never sent; the step closed at 175.5
    and the loop gave it up at 298.5: its bound is its wait at the close, 74.5 s."""
    book = _book()
    acc = book.open_step(32, "measure", 100.0)
    book.on_held(101.0)
    book.record(book.close_step(acc, 175.5))
    book.abandon_held([101.0], 298.5)
    final = book.steps[-1]
    assert final.final and final.median_ttft_ms == pytest.approx(74500.0) and final.median_ttft_ms_bound


def test_a_queued_steps_bound_is_the_same_at_its_close_and_after_the_probe(sim_factory, tmp_path):
    """Case 15 on a server, until-it-breaks on a cap of 8 (pp-capped's old numbers, CAP8_SIM) at a twentieth of its time (8 running,
    2048-token answers of ~6 s): C=32 closes with 24 requests queued, its TTFT a bound, and
    breaks on `p99_ttft_ms`; the requests are still queued through the C=1 probe and cancelled
    when the run ends. The step line (the close) said >=15.0 s while summary.json (the final
    record, which the end table, report, HTML and gate read) said >=39759 ms: the bound kept
    counting through the probe. One bound now, the ages at the close; E2E never below TTFT."""
    import json

    from redline.engine.core.config import EngineConfig
    from redline.engine.measure.step_result import StepResult
    from redline.engine.preset import parse_preset
    from redline.engine.workload.prompts import WorkloadConfig

    from helpers import CAP8_SIM, run_preset_headless

    sim = sim_factory("pp-capped", extra_args=(*CAP8_SIM, "--set", "time_scale=0.05"))
    d = {"workload": {"api": "chat", "input_len": 64, "output_len": 2048},
         "ramp": {"concurrency": [32], "warmup_s": 1, "hold_s": 2, "min_requests": 20, "max_hold_s": 3},
         "stop": {"p99_ttft_ms": 1000}, "after": {"probe_s": 2}}
    cfg = EngineConfig(url=sim.url, concurrency=32, workload=WorkloadConfig(input_len=64, output_len=2048), out_dir=tmp_path / "s",
                       live_steps=False, use_nvml=False)
    outcome = run_preset_headless(cfg, parse_preset(d, "probe.toml"))
    (closing,) = outcome.steps
    assert closing.concurrency == 32 and closing.p99_ttft_ms_bound and outcome.probe is not None
    assert outcome.probe.duration_s >= 2
    final = StepResult.from_dict(json.loads((tmp_path / "s" / "summary.json").read_text())["steps"][-1])
    assert final.final and final.p99_ttft_ms_bound and final.censored_ttft >= 16
    assert final.p99_ttft_ms == pytest.approx(closing.p99_ttft_ms, rel=0.02), (closing.p99_ttft_ms, final.p99_ttft_ms)
    assert final.median_ttft_ms == pytest.approx(closing.median_ttft_ms, rel=0.02), (closing.median_ttft_ms, final.median_ttft_ms)
    assert final.median_e2e_latency_ms >= final.median_ttft_ms and final.p99_e2e_latency_ms >= final.p99_ttft_ms
