"""A harvest's gaps as arrays (engine/measure/gap_batch.py) hold what RequestRecord.gaps_from's
tuples hold, value for value: harvested in any pieces, OpenAI streams (one ITL a chunk, the
arrays' road) and /generate's spread, with chunks read coalesced; cut to a step's window; split
by the second the live window keeps them in; and through a worker's report."""

from __future__ import annotations

import math
import pickle

from hypothesis import given, settings, strategies as st

from redline.engine.load.worker import BUCKET_S
from redline.engine.load.worker_messages import Report
from redline.engine.measure.gap_batch import GapBatch
from redline.engine.measure.records import COALESCED, RequestRecord


def _record(chunks: list[tuple[float, int, bool]], spread: bool) -> RequestRecord:
    rec = RequestRecord(rid=1, phase="live", step=1, concurrency=1, t_send=0.0)
    rec.spread_itl = spread
    t = 10.0
    merged = []
    for i, (dt, k, with_prev) in enumerate(chunks):
        if not (with_prev and i > 0):
            t += dt  # a chunk read with the one before shares its stamp
        elif not merged or merged[-1] != i - 1:
            merged.append(i - 1)
        if with_prev and i > 0:
            merged.append(i)
        rec.chunk_times.append(t)
        rec.chunk_tokens.append(k)
    rec.coalesced = sorted(set(merged)) or None
    return rec


def _flat(gaps: list) -> tuple[list, list, list]:
    itl = [(t, v) for t, vs, _ in gaps if vs is not COALESCED for v in vs]
    raw = [(t, g) for t, vs, g in gaps if vs is not COALESCED]
    merged = [t for t, vs, _ in gaps if vs is COALESCED]
    return itl, raw, merged


def _as_flat(b: GapBatch) -> tuple[list, list, list]:
    return list(zip(b.itl_t, b.itl, strict=True)), list(zip(b.chunk_t, b.gap, strict=True)), list(b.merged_t)


chunk_lists = st.lists(st.tuples(st.floats(0.0005, 0.7), st.integers(0, 3), st.booleans()), min_size=0, max_size=30)


@settings(max_examples=150, deadline=None)
@given(chunk_lists, st.lists(st.integers(0, 30), max_size=4), st.booleans())
def test_a_batch_holds_the_tuples_values_however_it_is_harvested(chunks, cuts, spread):
    rec = _record(chunks, spread)
    whole = rec.gaps_from(1)
    batch, start = GapBatch(), 0
    for cut in sorted(cuts) + [len(chunks)]:
        # a harvest takes what arrived up to `cut`: as if the record ended there
        part = GapBatch()
        end = min(cut, len(rec.chunk_times))
        view = RequestRecord(rid=1, phase="live", step=1, concurrency=1, t_send=0.0)
        view.spread_itl = spread
        view.chunk_times.extend(rec.chunk_times[:end])
        view.chunk_tokens.extend(rec.chunk_tokens[:end])
        view.coalesced = [i for i in (rec.coalesced or []) if i < end] or None
        if end > start:
            start = part.take(view, start)
        batch.extend(part)
    assert _as_flat(batch) == _flat(whole)
    assert batch.chunks == len(whole)
    assert list(batch.itl) == rec.itls()
    assert _as_flat(GapBatch.of_record(rec)) == _as_flat(GapBatch.of(whole))


@settings(max_examples=100, deadline=None)
@given(chunk_lists, st.booleans(), st.floats(10.0, 14.0), st.one_of(st.none(), st.floats(10.0, 16.0)))
def test_a_window_keeps_the_gaps_whose_chunk_arrived_in_it(chunks, spread, lo, hi):
    rec = _record(chunks, spread)
    gaps = rec.gaps_from(1)
    inside = [x for x in gaps if x[0] >= lo and (hi is None or x[0] <= hi)]
    assert _as_flat(GapBatch.of_record(rec).window(lo, hi)) == _flat(inside)


@settings(max_examples=100, deadline=None)
@given(chunk_lists, st.booleans())
def test_by_second_groups_each_itl_by_the_second_it_arrived_in(chunks, spread):
    rec = _record(chunks, spread)
    got = GapBatch.of_record(rec).by_second()
    want: dict[int, list[float]] = {}
    for t, vs, _ in rec.gaps_from(1):
        if vs is not COALESCED:
            for v in vs:
                want.setdefault(math.floor(t), []).append(v)
    assert [(math.floor(t), list(vs)) for t, vs in got] == sorted(want.items())


@settings(max_examples=60, deadline=None)
@given(chunk_lists, st.booleans(), st.floats(-5.0, 5.0))
def test_a_workers_report_carries_every_value_and_its_time(chunks, spread, d):
    rec = _record(chunks, spread)
    b = GapBatch.of_record(rec)
    back = pickle.loads(pickle.dumps(Report("batch", 0, 0, gaps=b))).gaps  # the pipe to the coordinator
    assert _as_flat(back) == _as_flat(b)
    moved = Report("batch", 0, 0, gaps=b).shifted(d, BUCKET_S).gaps  # another host's clock
    assert list(moved.itl) == list(b.itl) and list(moved.gap) == list(b.gap)
    assert list(moved.chunk_t) == [t + d for t in b.chunk_t] and list(moved.merged_t) == [t + d for t in b.merged_t]
    assert list(moved.itl_t) == [t + d for t in b.itl_t]
