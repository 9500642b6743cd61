"""Properties of the step figures under failure (issue 42, the measure side), on a step book
fed generated requests: a failed request never raises attainment, goodput or output tok/s;
goodput never exceeds throughput; attainment stays a share. Each request streams one token per
chunk, `itl` apart from its first token; the step's window is [100, 110]; what ends after the
close is delivered after it (its step completes its record then)."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings, strategies as st

from redline.engine.measure import records
from redline.engine.measure.gap_batch import GapBatch
from redline.engine.measure.records import Clock, RequestRecord
from redline.engine.measure.slo import Slo
from redline.engine.measure.step_book import StepBook
from redline.engine.measure.step_result import StepResult
from redline.engine.rules.verdicts import STEP_JUDGE

from helpers import examples

T0, T1 = 100.0, 110.0
SLOS = (Slo(tpot_ms=50), Slo(ttft_ms=1000), Slo(itl_ms=100, e2e_ms=6000), Slo(ttft_ms=2000, tpot_ms=40, itl_ms=120))


@dataclass(frozen=True)
class Spec:
    send: float  # seconds after the window opened
    ttft: float
    itl: float
    tokens: int
    failed: bool


specs = st.builds(Spec, st.floats(0.0, 9.0), st.floats(0.01, 3.0), st.floats(0.005, 0.2), st.integers(1, 300), st.booleans())


def _run(requests: list[Spec], slo: Slo) -> tuple[StepResult, StepResult]:
    """(the closing result, the final one) of a step fed `requests`."""
    book = StepBook(Clock.now(), judge=STEP_JUDGE)
    book.slo = slo
    acc = book.open_step(len(requests), "measure", T0)
    recs = []
    for i, s in enumerate(requests):
        r = RequestRecord(rid=i, phase="measure", step=acc.index, concurrency=len(requests), t_send=T0 + s.send, max_tokens=s.tokens)
        r.t_first = r.t_send + s.ttft
        r.chunk_times.extend(r.t_first + k * s.itl for k in range(s.tokens))
        r.chunk_tokens.extend([1] * s.tokens)
        r.output_tokens = s.tokens
        r.t_end = r.chunk_times[-1] + 0.001
        recs.append((r, s))
        book.on_send(r)
    events = sorted(((t, k, r) for r, _ in recs for k, t in enumerate(r.chunk_times) if t <= T1), key=lambda x: (x[0], x[2].rid, x[1]))
    ends = sorted(((r.t_end, r.rid, r, s) for r, s in recs), key=lambda x: x[:2])

    def end(r: RequestRecord, s: Spec) -> None:
        if s.failed:
            r.status, r.error_kind = records.FAILED, records.ERR_DISCONNECT
            book.remove_gaps(GapBatch.of_record(r))
            book.remove_tokens(r.credits())
        book.on_end(r)

    firsts = {r.rid for r, _ in recs}
    pending = iter(ends)
    nxt = next(pending, None)
    for t, k, r in events:  # chunks and ends in time order, up to the close
        while nxt is not None and nxt[0] <= t:
            end(nxt[2], nxt[3])
            nxt = next(pending, None)
        if k == 0 and r.rid in firsts:
            firsts.discard(r.rid)
            book.on_first(r)
        book.on_tokens(t, 1)
    while nxt is not None and nxt[0] <= T1:
        end(nxt[2], nxt[3])
        nxt = next(pending, None)
    closing = book.close_step(acc, T1)
    book.record(closing)
    for r, _ in recs:  # first tokens after the close
        if r.rid in firsts:
            book.on_first(r)
    while nxt is not None:
        end(nxt[2], nxt[3])
        nxt = next(pending, None)
    return closing, book.steps[-1]


def _goodput_within_throughput(res: StepResult) -> None:
    assert res.output_goodput is not None and res.output_goodput <= res.output_throughput + 1e-6, res
    assert res.request_goodput is not None and res.request_goodput <= res.request_throughput + 1e-6, res
    assert res.slo_attainment is None or 0.0 <= res.slo_attainment <= 1.0
    assert res.output_throughput >= 0 and res.failed_output_tok_s >= 0


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(specs, min_size=1, max_size=12), st.sampled_from(SLOS), st.data())
def test_a_failed_request_never_raises_attainment_goodput_or_tok_s(requests, slo, data):
    closing, final = _run(requests, slo)
    for res in (closing, final):
        _goodput_within_throughput(res)
    assert final.final and final.failed == sum(s.failed for s in requests)
    ok = [i for i, s in enumerate(requests) if not s.failed]
    if not ok:
        assert final.output_throughput == 0.0 and final.output_goodput == 0.0 and final.request_goodput == 0.0
        assert final.slo_attainment in (None, 0.0)
        return
    i = data.draw(st.sampled_from(ok))
    worse = list(requests)
    worse[i] = Spec(requests[i].send, requests[i].ttft, requests[i].itl, requests[i].tokens, True)
    closing2, final2 = _run(worse, slo)
    for res in (closing2, final2):
        _goodput_within_throughput(res)
    eps = 1e-6
    assert final2.output_throughput <= final.output_throughput + eps
    assert final2.output_goodput <= final.output_goodput + eps
    assert final2.request_goodput <= final.request_goodput + eps
    assert final2.failed_output_tok_s >= final.failed_output_tok_s - eps
    if final.slo_attainment is not None:
        assert final2.slo_attainment is not None and final2.slo_attainment <= final.slo_attainment + eps
