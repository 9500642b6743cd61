"""The verdicts, one definition each (engine/rules/verdicts.py), on crafted steps and on a step book
fed requests whose outputs outlive every step: the knee, steadiness, the window a request's
decoding counts in, SLO attainment, goodput and the stand-ins of a step with no own send."""

from __future__ import annotations

import pytest

from redline.engine.measure.live_metrics import LiveMetrics
from redline.engine.measure.records import Clock, RequestRecord
from redline.engine.measure.slo import Slo
from redline.engine.measure.step_book import StepBook
from redline.engine.measure.step_result import StepResult
from redline.engine.rules.verdicts import (
    STEP_JUDGE,
    judge_request,
    knee_from_summary,
    one_per_load,
    session_knee,
    steadiness,
    summary_knee,
)


def step(c, tps, *, se=0.0, rate=None, short=False, phase="measure", steady=True, completed=10, failed=0,
         workload=None) -> StepResult:
    """A steady step whose noise was measured (se: the standard error of its per-second tok/s)."""
    return StepResult(concurrency=c, duration_s=30, completed=completed, failed=failed, output_throughput=tps, input_throughput=0,
                      request_throughput=1, steady=steady, output_throughput_se=se, short=short, phase=phase,
                      mode="rate" if rate is not None else "concurrency", request_rate=rate, workload=workload)


# -- the knee -------------------------------------------------------------------------------

def test_knee_is_the_smallest_load_within_the_gain_of_the_best_not_the_best():
    """A server capped at 16: C=32 gives +2.4 % over C=16 (the queue's noise), so the knee is
    16 and the most tok/s is at 32, the same for every reader."""
    k = session_knee([step(4, 250), step(8, 500), step(16, 1000), step(32, 1024)])
    assert (k.value, k.max_throughput, k.kind) == (16, 32, "C")
    assert k.reason == "within 5 % of the most output tok/s (1024.0 at C=32)"
    assert k.describe() == "knee C=16 (within 5 % of the most output tok/s (1024.0 at C=32)); max throughput C=32"
    assert k.summary_fields() == {"knee_concurrency": 16, "knee_reason": k.reason, "max_throughput_concurrency": 32}


def test_the_shipped_staircase_on_the_sim_curve_has_its_knee_at_128():
    sim = [step(32, 690), step(64, 1212), step(96, 1622), step(128, 1951), step(192, 2000)]
    assert session_knee(sim).value == 128  # 1951 is within 5 % of 2000; 1622 is not
    finer = session_knee(sim, plateau_gain=0.01)  # +2.5 % at the top clears a 1 % gain: still rising
    assert finer.value is None and finer.reason == "still rising at max C=192"


def test_no_knee_while_the_top_still_gains_and_none_on_one_load():
    k = session_knee([step(8, 100), step(16, 200), step(32, 390)])
    assert k.value is None and k.reason == "still rising at max C=32" and k.max_throughput == 32
    assert k.describe() == "no knee: still rising at max C=32; max throughput C=32"
    one = session_knee([step(8, 100)])
    assert one.value is None and "one load measured (C=8)" in one.reason
    assert session_knee([]).reason == "no step measured"


def test_a_gain_lost_in_the_noise_is_no_rise_and_noise_pulls_the_knee_down():
    noisy = [step(8, 500, se=10), step(16, 900, se=10), step(32, 1000, se=30)]  # +11 % over 900, but 2σ = 63
    k = session_knee(noisy, plateau_gain=0.05)
    assert k.value == 16  # within 5 % of 1000 once 900's noise is counted in its favour (900 + 63 >= 950)
    quiet = [step(8, 500, se=1), step(16, 900, se=1), step(32, 1000, se=1)]
    assert session_knee(quiet).value is None  # a clear +11 %: still rising


def test_repeated_loads_short_periods_and_the_probe_are_no_points():
    steps = [step(8, 500), step(16, 700), step(16, 990), step(24, 3000, short=True), step(32, 1000), step(1, 40, phase="probe")]
    k = session_knee(steps)
    assert (k.value, k.max_throughput) == (16, 32)  # C=16 is stood for by its later 990; the short C=24 is no point
    # an unsteady re-measurement never stands for a load a steady step measured
    k = session_knee([*steps, step(16, 400, steady=False)])
    assert (k.value, k.max_throughput) == (16, 32)


def test_rates_have_their_own_fields():
    k = session_knee([step(256, 100, rate=2.0), step(256, 200, rate=4.0), step(256, 205, rate=8.0)])
    assert (k.kind, k.value, k.max_throughput) == ("R", 4.0, 8.0)
    f = k.summary_fields()
    assert f["knee_rate"] == 4.0 and f["max_throughput_rate"] == 8.0 and f["knee_concurrency"] is None
    assert knee_from_summary(f) == k


def test_summary_takes_a_finished_search_and_never_an_unfinished_one():
    """A finished search answers for a one-workload session; a cancelled one, or one summary.json
    caught in progress (the session was killed during it), answers nothing, and its interim knee
    never becomes the session's: no knee, saying why (issue 42 case 7)."""
    steps = [step(8, 500), step(16, 990), step(32, 1000)]
    done = {"knee_concurrency": 12, "knee_reason": "within 5 % ...", "max_throughput_concurrency": 32, "points": [8, 16, 32, 12]}
    assert summary_knee(steps, done)["knee_concurrency"] == 12
    cancelled = {"knee_concurrency": None, "knee_reason": "search cancelled after 2 points", "cancelled": True, "points": [8, 16]}
    got = summary_knee(steps, cancelled)
    assert got["knee_concurrency"] is None and got["knee_reason"] == "the knee search was cancelled after 2 points"
    interim = {**done, "knee_concurrency": 16, "in_progress": True, "points": [8, 16, 32]}  # the answer so far: 16
    got = summary_knee(steps, interim)
    assert got["knee_concurrency"] is None and got["knee_reason"].startswith("the knee search did not finish (3 points measured")
    after_kill = {"steps": [st.to_dict() for st in steps], "search": interim, **got}
    assert knee_from_summary(after_kill).value is None and knee_from_summary({"search": interim}) is None
    assert knee_from_summary({"steps": []}) is None  # a session written before the knee was recorded
    assert knee_from_summary(summary_knee(steps)) == session_knee(steps)


def test_the_knee_search_and_a_staircase_answer_alike():
    """A curve rising 62.5 tok/s per C to 1000 at C=16, then +30 tok/s up to C=64. A staircase
    over every C from 1 to 64 puts the knee at 16 (1000 is within 5 % of 1030; 15's 937.5 is
    not). The search lands within its resolution of it, and its answer is the staircase's over
    the points it measured, repeats included. A load measured twice is stood for by the same
    step in both (the later one, here the lower): were one reader to keep the higher, the knee
    would move."""
    from redline.engine.rules.knee_search import KneeSearch

    def curve(c: int) -> float:
        return 62.5 * c if c <= 16 else 1000.0 + (c - 16) * 30.0 / 48.0

    staircase = session_knee([step(c, curve(c)) for c in range(1, 65)])
    assert (staircase.value, staircase.max_throughput) == (16, 64)
    s = KneeSearch(4, 64, resolution=0.1)
    seen: list[StepResult] = []
    while (c := s.next()) is not None:
        seen.append(step(c, curve(c)))
        s.observe(c, seen[-1])
    res = s.result(1.0)
    assert abs(res.knee_concurrency - 16) <= 2 and res.max_throughput_concurrency == max(res.points), res
    assert session_knee(seen).value == res.knee_concurrency  # the search's own points, read as a staircase
    # re-measured: the knee first gave its curve's tok/s, then 5 % less (short of the gain): the later decides
    k = res.knee_concurrency
    again = [*seen, step(k, curve(k) * 0.95)]
    assert one_per_load(again)[("C", float(k))].output_throughput == curve(k) * 0.95
    assert session_knee(again).value != k  # (were the higher kept, the knee would stay at k)
    assert s.result(1.0, cancelled=True).to_dict()["cancelled"] is True and s.result(1.0, cancelled=True).knee_concurrency is None


# -- steadiness -----------------------------------------------------------------------------

def test_steadiness_reads_tokens_per_second_and_says_why_not():
    assert steadiness([1000, 1010, 990, 1005, 995, 1000], 4) is None
    assert steadiness([1000, 1010], 4) == "not steady: 2 s measured, needs 4"
    assert steadiness([0, 0, 0, 0], 4) == "not steady: no output token in its window"
    drift = steadiness([800, 820, 810, 1000, 1010, 1005], 4)
    assert drift is not None and drift.startswith("not steady: tok/s moved 19 % between the window's halves (810 -> 1005")
    noisy = steadiness([100, 900, 50, 1000, 120, 950], 4)
    assert noisy is not None and "standard error" in noisy


# -- one request's verdict ------------------------------------------------------------------

def test_judge_request_on_window_figures():
    slo = Slo(ttft_ms=1000, tpot_ms=40, e2e_ms=60000)
    assert judge_request(slo, 0.5, 0.030, None, 100.0, e2e_bound=True) is False  # a bound past 60 s is a miss
    assert judge_request(slo, 0.5, 0.030, None, 20.0, e2e_bound=True) is True  # below: the window shows no miss
    assert judge_request(slo, 0.5, 0.041, None, 20.0) is False
    assert judge_request(slo, None, None, None, None) is False  # never answered
    assert judge_request(Slo(tpot_ms=40), 0.5, None, None, 9.0, e2e_bound=True) is None  # queued through the window: not judged
    assert judge_request(Slo(tpot_ms=40, ttft_ms=1000), 0.5, None, None, 9.0, e2e_bound=True) is True  # its TTFT is judged


# -- a step whose requests outlive it (a deterministic step book) ---------------------------

def _rec(rid, step_index, t_send, phase="measure", max_tokens=2048) -> RequestRecord:
    return RequestRecord(rid=rid, phase=phase, step=step_index, concurrency=4, t_send=t_send, max_tokens=max_tokens)


def _stream(book, rec, t_first, itl, until, tokens_end=None):
    """Chunks of one token every `itl` s from t_first up to `until` (not ended)."""
    rec.t_first = t_first
    book.on_first(rec)
    t = t_first
    while t <= until + 1e-9:
        rec.chunk_times.append(t)
        rec.chunk_tokens.append(1)
        rec.output_tokens += 1
        t += itl
    return t


def test_decoding_after_the_close_never_enters_the_step():
    """Step 1 at C=2 from t=10 to 20; its two own requests (sent at 11) decode at 20 ms a token
    inside it, then at 100 ms under the next load, and end at 40. Their TPOT is the window's
    20 ms, their E2E a bound (9 s, their age at the close), their TTFT their own; with
    tpot<=40 ms both meet the SLO (judged at the close), though their whole TPOT is ~ 47 ms."""
    book = StepBook(Clock.now(), judge=STEP_JUDGE)
    book.slo = Slo(tpot_ms=40)
    acc = book.open_step(2, "measure", 10.0)
    recs = [_rec(i, acc.index, 11.0) for i in (1, 2)]
    for r in recs:
        book.on_send(r)
        t = _stream(book, r, 11.5, 0.020, 20.0)
    closing = book.close_step(acc, 20.0)
    book.record(closing)
    assert closing.mean_tpot_ms == pytest.approx(20.0, abs=0.01)
    assert closing.slo_attainment == 1.0 and not closing.final
    for r in recs:  # under the next load: 100 ms a token, then the end
        tt = t
        while tt < 40.0:
            r.chunk_times.append(tt)
            r.chunk_tokens.append(1)
            r.output_tokens += 1
            tt += 0.1
        r.t_end = 40.0
        assert r.tpot > 0.040  # its whole truth: slower than the bound
        book.on_end(r)
    final = book.steps[-1]
    assert final.final and final.completed == 2 and final.ended_after_close == 2
    assert final.mean_tpot_ms == pytest.approx(20.0, abs=0.01)  # not the next load's decoding
    assert final.slo_attainment == 1.0
    assert final.median_e2e_latency_ms == pytest.approx(9000.0) and final.median_e2e_latency_ms_bound
    assert final.median_ttft_ms == pytest.approx(500.0) and not final.median_ttft_ms_bound


def test_a_step_with_no_own_send_takes_its_warm_up_sends_as_stand_ins():
    """C=4 opened at t=0 from nothing: its four sends go out in warm-up; measuring starts at
    t=2; the outputs outlive the step (closed at 10), so none of its own went out. Its TTFT,
    TPOT and E2E bound come from those four, and it says so."""
    book = StepBook(Clock.now(), judge=STEP_JUDGE)
    acc = book.open_step(4, "measure", 0.0, measure=False)
    recs = [_rec(i, acc.index, 0.0 + i * 0.01, phase="warmup") for i in range(4)]
    for i, r in enumerate(recs):
        book.on_send(r)
        _stream(book, r, 0.2 + 0.1 * i, 0.030, 9.99)
    acc.begin_measure(2.0)
    res = book.close_step(acc, 10.0)
    assert res.warmup_stand_in and res.requests_sent == 4 and res.requests_first_token == 4
    assert res.median_ttft_ms == pytest.approx(335.0, abs=0.01)  # TTFTs 200, 290, 380, 470 ms
    assert res.mean_tpot_ms == pytest.approx(30.0, abs=0.5)
    assert res.censored_e2e == 4 and res.median_e2e_latency_ms_bound


def test_a_probe_has_no_stand_ins():
    book = StepBook(Clock.now(), judge=STEP_JUDGE)
    acc = book.open_step(1, "probe", 0.0, measure=False, warmup_requests=1)
    r = _rec(1, acc.index, 0.0, phase="warmup")
    book.on_send(r)
    _stream(book, r, 0.1, 0.012, 3.9)
    res = book.close_step(acc, 4.0)
    assert not res.warmup_stand_in and res.requests_sent == 0 and res.median_ttft_ms is None


def test_a_short_outputs_step_keeps_its_own_requests():
    book = StepBook(Clock.now(), judge=STEP_JUDGE)
    acc = book.open_step(2, "measure", 0.0, measure=False)
    w = _rec(1, acc.index, 0.0, phase="warmup")
    book.on_send(w)
    acc.begin_measure(1.0)
    own = _rec(2, acc.index, 1.5)
    book.on_send(own)
    res = book.close_step(acc, 3.0)
    assert not res.warmup_stand_in and res.requests_sent == 1


# -- goodput --------------------------------------------------------------------------------

def test_live_goodput_never_exceeds_live_throughput():
    """Tokens arrive as they stream; a request ends with all its tokens at once. Goodput counts
    with throughput's counter: never above it, at any instant, and the good requests' share of
    it once they end. Each burst ends 4 requests of 500 tokens: three streamed 21 ms apart meet
    `ttft=2s,itl=100ms`, the fourth stalled 1.1 s nine times (its own ITL p99 misses). (The test
    this replaces fed requests of one 10.45 s gap: none met itl=100ms, goodput read 0.0 at all
    26 readings and could never exceed throughput.) Each end reaches the step book first, for
    its one verdict, then the live window (engine/core/measurements.py)."""
    m = LiveMetrics()
    book = StepBook(Clock.now(), judge=STEP_JUDGE)
    m.slo = book.slo = Slo(ttft_ms=2000, itl_ms=100)
    t = 100.0
    rid = 0
    seen_good = 0
    for second in range(30):
        for k in range(10):
            m.on_tokens(t + second + k / 10, 40)
        if second % 5 == 4:  # a burst of ends
            for j in range(4):
                rid += 1
                t_first, t_end = t + second - 9.5, t + second + 0.95
                r = RequestRecord(rid=rid, phase="live", step=1, concurrency=8, t_send=t + second - 10, t_first=t_first,
                                  t_end=t_end, output_tokens=500)
                if j < 3:  # 21 ms apart
                    r.chunk_times.extend(t_first + i * (t_end - t_first) / 499 for i in range(500))
                else:  # 491 chunks 1 ms apart, then 9 gaps of 1.1 s: 1.8 % of its gaps, its own p99
                    r.chunk_times.extend([t_first + i * 0.001 for i in range(491)])
                    r.chunk_times.extend(t_first + 0.49 + (k + 1) * (t_end - t_first - 0.49) / 9 for k in range(9))
                book.on_end(r)
                m.on_request_end(r)
                assert r.slo_met is (j != 3), (j, r.figures().itl_p99)
        now = t + second + 0.99
        good_req, good_tok = m.goodput(now)
        out, _, req, _ = m.rates(now)
        assert good_req <= req + 1e-9
        assert good_tok is None or good_tok <= out + 1e-9, (second, good_tok, out)
        if second >= 4:  # once the first burst ended: three requests of four met the SLO, and their tokens' share
            assert good_tok == pytest.approx(0.75 * out), (second, good_tok, out)
            seen_good += good_tok > 0
    assert seen_good == 26
