"""Coalesced reads (issue 47): where one socket read brings several of a stream's chunks, they
share that read's stamp (the kernel's is the newest packet's), so their gaps read ~0 and ~k
intervals where the server wrote k of one. The step says so (`coalesced_chunks`) and those
gaps never enter ITL or chunk gap; the gaps measured around them stay the server's own.

- one request, against what the server really sent: a loop held past a few of the server's
  writes reads them in one read; they are marked, the rest of the ITLs are the server's gaps;
- the record's ITLs (OpenAI APIs and /generate's spread) leave the coalesced chunks out and
  start measuring again from the read's own (true) stamp;
- a worker's report carries the count through its 10 ms buckets;
- a step's result: coalesced_chunks is the window's share, p99 ITL and chunk gap are of the
  rest, and a failed request takes its coalesced chunks back out with its gaps.
"""

from __future__ import annotations

import pickle
import time

from redline.engine.client.api_formats import CHAT, PATHS
from redline.engine.client.http import make_client
from redline.engine.client.request import run_request
from redline.engine.load.worker_messages import Report
from redline.engine.measure import records
from redline.engine.measure.accumulator import StepAccumulator
from redline.engine.measure.gap_batch import GapBatch
from redline.engine.measure.hooks import RequestHooks
from redline.engine.measure.records import COALESCED, Clock, RequestRecord
from redline.engine.measure.step_result import StepResult

from helpers import ThreadServer
from unit.engine.client.test_token_path import END, SSE_HEAD, event, frame, new_rec

GAP_S = 0.03  # the server's write interval
HOLD_S = 0.1  # the client's loop held this long after the 3rd token: 3 or 4 writes queue meanwhile


async def test_a_held_loop_reads_several_chunks_at_once_they_are_marked_and_the_rest_is_the_servers():
    sent: list[float] = []

    def handler(c, head, body, i):
        c.sendall(SSE_HEAD)
        for k in range(12):
            sent.append(time.perf_counter())
            c.sendall(frame(event(k, usage=k + 1)))
            time.sleep(GAP_S)
        c.sendall(frame(b"data: [DONE]\n\n") + END)
        return True

    got = [0]

    def on_tokens(t: float, n: int) -> None:
        got[0] += n
        if got[0] == 3:
            time.sleep(HOLD_S)  # the loop held (a busy client): the next writes queue in the socket

    with ThreadServer(handler) as srv:
        client = make_client(transport="lean")
        try:
            rec = new_rec()
            await run_request(client, srv.url + PATHS[CHAT], CHAT, {}, rec, RequestHooks(tokens=on_tokens))
        finally:
            await client.aclose()
    assert rec.status == records.OK and len(rec.chunk_times) == 12, rec.error_text
    ts = list(rec.chunk_times)
    merged = rec.coalesced or []
    # the writes made while the loop was held came in one read: one stamp for all of them
    assert len(merged) >= 2 and merged == list(range(merged[0], merged[-1] + 1)) and merged[0] == 3, merged
    assert len({ts[i] for i in merged}) == 1
    raw = [ts[i] - ts[i - 1] for i in merged]
    assert min(raw) < 0.001  # what would have entered ITL unmarked: a gap of ~0 ...
    assert max(raw) > 1.5 * GAP_S  # ... and one of about two intervals or more
    # what enters ITL: every gap but the coalesced chunks', each the server's own write gap
    entries = rec.gaps_from(1)
    assert [i for i, (_, vs, _) in enumerate(entries, start=1) if vs is COALESCED] == merged
    kept = [(i, vs[0]) for i, (_, vs, _) in enumerate(entries, start=1) if vs is not COALESCED]
    assert len(kept) == 11 - len(merged) == len(rec.itls())
    for i, itl in kept:
        assert abs(itl - (sent[i] - sent[i - 1])) < 0.010, (i, itl, sent[i] - sent[i - 1])


def _rec(times: list[float], coalesced: list[int] | None = None, spread: bool = False, tokens: list[int] | None = None) -> RequestRecord:
    rec = RequestRecord(rid=1, phase="live", step=0, concurrency=1, t_send=0.0, spread_itl=spread, coalesced=coalesced)
    rec.chunk_times.extend(times)
    rec.chunk_tokens.extend(tokens or [1] * len(times))
    return rec


def test_openai_itls_leave_the_coalesced_chunks_out_and_measure_again_after_them():
    # chunks 2 and 3 came in one read at 0.09 (the server wrote them at 0.06 and 0.09)
    rec = _rec([0.0, 0.03, 0.09, 0.09, 0.12], coalesced=[2, 3])
    entries = rec.gaps_from(1)
    assert [vs is COALESCED for _, vs, _ in entries] == [False, True, True, False]
    assert [round(v, 6) for v in rec.itls()] == [0.03, 0.03]  # 0.00-0.03 and 0.09-0.12: the read's stamp is true
    assert rec.figures().itl_p99 is not None and abs(rec.figures().itl_p99 - 0.03) < 1e-9
    # a harvest from the middle sees the same marks
    assert [vs is COALESCED for _, vs, _ in rec.gaps_from(3)] == [True, False]
    assert [vs is COALESCED for _, vs, _ in rec.gaps_from(4)] == [False]


def test_generate_spread_restarts_from_the_coalesced_reads_stamp():
    # /generate: chunk 1 brought 2 tokens, chunks 2-3 came in one read, chunk 4 brought 3 tokens
    rec = _rec([0.0, 0.04, 0.10, 0.10, 0.16], coalesced=[2, 3], spread=True, tokens=[1, 2, 1, 1, 3])
    itls = [round(v, 6) for v in rec.itls()]
    assert itls == [0.02, 0.02, 0.02, 0.02, 0.02]  # 0.04 / 2 tokens, then (0.16 - 0.10) / 3
    assert [vs is COALESCED for _, vs, _ in rec.gaps_from(1)] == [False, True, True, False]


def test_a_worker_report_carries_the_coalesced_count():
    gaps = [(1.001, [0.03], 0.03), (1.002, COALESCED, 0.0), (1.003, COALESCED, 0.06), (1.051, [0.02, 0.02], 0.04),
            (1.052, COALESCED, 0.0)]
    back = pickle.loads(pickle.dumps(Report("batch", 0, 0, gaps=GapBatch.of(gaps)))).gaps  # as the pipe carries it
    assert len(back.merged_t) == 3 and back.chunks == 5
    assert sorted(back.itl) == [0.02, 0.02, 0.03]
    assert sorted(back.gap) == [0.03, 0.04]  # no coalesced chunk gap travels


def _step() -> StepAccumulator:
    acc = StepAccumulator(0, 8, "live", 0.0, Clock.now())
    acc.begin_measure(0.0)
    return acc


def test_a_step_says_what_share_it_read_coalesced_and_keeps_those_gaps_out_of_itl():
    acc = _step()
    good = [(1.0 + i * 0.01, [0.030], 0.030) for i in range(96)]
    merged = [(2.0, COALESCED, 0.0), (2.0, COALESCED, 0.0), (2.0, COALESCED, 0.120), (2.0, COALESCED, 0.0)]
    acc.on_gaps(GapBatch.of(good + merged))
    res = acc.result(3.0)
    assert res.coalesced_chunks == 0.04
    assert res.p99_itl_ms == 30.0 and res.p99_chunk_gap_ms == 30.0  # the 120 ms and the zeros are not in them
    assert StepResult.from_dict(res.to_dict()).coalesced_chunks == 0.04
    acc.remove_gaps(GapBatch.of(merged[:2]))  # a failed request's gaps leave, its coalesced chunks with them
    assert acc.result(3.0).coalesced_chunks == round(2 / 98, 6)


def test_a_step_with_no_coalesced_read_says_zero_and_one_without_chunks_says_nothing():
    acc = _step()
    assert acc.result(1.0).coalesced_chunks is None
    acc.on_gaps(GapBatch.of([(0.5, [0.02], 0.02)]))
    assert acc.result(1.0).coalesced_chunks == 0.0


def test_the_loop_stamps_of_another_transport_are_marked_too(monkeypatch):
    """aiohttp's reads reach the per-read path one at a time: a read with two events is marked."""
    from redline.engine.client.api_formats import make_decoder
    from redline.engine.client.request import _Stream

    rec = new_rec()
    s = _Stream(rec, make_decoder(CHAT), False, None, lambda t, n: None, None, 0.0, None)  # type: ignore[arg-type]
    assert s.feed([(0.1, event(0, usage=1))])
    assert s.feed([(0.2, event(1, usage=2) + event(2, usage=3))])  # two events, one read
    assert s.feed([(0.3, event(3, usage=4))])
    assert rec.coalesced == [1, 2] and list(rec.chunk_times) == [0.1, 0.2, 0.2, 0.3]
    # a role chunk and the first token in one read: one content chunk, nothing coalesced
    rec2 = new_rec()
    s2 = _Stream(rec2, make_decoder(CHAT), False, None, lambda t, n: None, None, 0.0, None)  # type: ignore[arg-type]
    role = b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
    assert s2.feed([(0.1, role + event(0, usage=1))])
    assert rec2.coalesced is None

