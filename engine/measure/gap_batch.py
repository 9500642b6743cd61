"""A harvest's inter-token gaps as parallel arrays: what RequestRecord.gaps_from gives as one
tuple (arrival, ITLs, chunk gap) per chunk, here as five arrays, so a harvest of thousands of
chunks builds no tuple and no list per chunk and every histogram takes its values in one call
(issue 47: the tuples and the walks over them were a sixth of an unpaced token's CPU).

    itl_t, itl      each inter-token latency, and the arrival of the chunk that closed it
    chunk_t, gap    each chunk measured (its raw chunk gap: a /generate chunk that brought no
                    token has one, and no ITL)
    merged_t        each chunk read coalesced (counted, no gap: records.COALESCED)

The same figures as the tuples, value for value (tests/unit/engine/measure/test_gap_batch.py).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from .records import COALESCED, chunk_gaps

if TYPE_CHECKING:
    from .records import RequestRecord

__all__ = ["GapBatch"]


def _keep(ts: array[float], vs: array[float] | None, lo: float, hi: float | None) -> tuple[array[float], array[float] | None]:
    if hi is None:
        keep = [i for i, t in enumerate(ts) if t >= lo]
    else:
        keep = [i for i, t in enumerate(ts) if lo <= t <= hi]
    return array("d", [ts[i] for i in keep]), None if vs is None else array("d", [vs[i] for i in keep])


class GapBatch:
    """Gaps of any number of requests, by the arrival of the chunk that closed each."""

    __slots__ = ("itl_t", "itl", "chunk_t", "gap", "merged_t")

    def __init__(self) -> None:
        self.itl_t: array[float] = array("d")
        self.itl: array[float] = array("d")
        self.chunk_t: array[float] = array("d")
        self.gap: array[float] = array("d")
        self.merged_t: array[float] = array("d")

    @classmethod
    def of(cls, gaps: Iterable[tuple[float, Sequence[float], float]]) -> GapBatch:
        """From (arrival, ITLs, chunk gap) entries (RequestRecord.gaps_from's)."""
        b = cls()
        for t, vs, raw in gaps:
            b._add(t, vs, raw)
        return b

    @classmethod
    def of_record(cls, rec: RequestRecord) -> GapBatch:
        """Every gap of `rec`."""
        b = cls()
        b.take(rec, 1)
        return b

    def _add(self, t: float, vs: Sequence[float], raw: float) -> None:
        if vs is COALESCED:
            self.merged_t.append(t)
            return
        self.chunk_t.append(t)
        self.gap.append(raw)
        if vs:
            self.itl_t.extend([t] * len(vs))
            self.itl.extend(vs)

    def take(self, rec: RequestRecord, start: int) -> int:
        """Add the gaps of `rec` closed by its chunks from index `start` on (gaps_from's);
        returns where the next take starts."""
        ts = rec.chunk_times
        n = len(ts)
        start = max(start, 1)
        if start >= n:
            return n
        if rec.spread_itl:
            for t, vs, raw in rec.gaps_from(start):
                self._add(t, vs, raw)
            return n
        seg, g, merged_t = chunk_gaps(ts, start, rec.coalesced)  # one ITL per chunk: the arrays whole
        self.merged_t.extend(merged_t)
        self.itl_t += seg
        self.chunk_t += seg
        self.itl += g
        self.gap += g
        return n

    def extend(self, other: GapBatch) -> None:
        self.itl_t += other.itl_t
        self.itl += other.itl
        self.chunk_t += other.chunk_t
        self.gap += other.gap
        self.merged_t += other.merged_t

    def shifted(self, d: float) -> GapBatch:
        """A copy with every arrival moved by `d` seconds (a worker on another host's clock)."""
        out = GapBatch()
        out.itl_t = array("d", [t + d for t in self.itl_t])
        out.chunk_t = array("d", [t + d for t in self.chunk_t])
        out.merged_t = array("d", [t + d for t in self.merged_t])
        out.itl, out.gap = array("d", self.itl), array("d", self.gap)
        return out

    @property
    def chunks(self) -> int:
        """Chunks closing a gap, coalesced ones too."""
        return len(self.chunk_t) + len(self.merged_t)

    def __bool__(self) -> bool:
        return bool(self.chunk_t or self.merged_t)

    def span(self) -> tuple[float, float] | None:
        """The first and last arrival of a chunk closing a gap (an ITL's is its chunk's), or None."""
        ts = [a for a in (self.chunk_t, self.merged_t) if a]
        if not ts:
            return None
        return min(min(a) for a in ts), max(max(a) for a in ts)

    def window(self, lo: float, hi: float | None) -> GapBatch:
        """The gaps whose closing chunk arrived in [lo, hi] (hi None: open): this batch itself
        where all did (a harvest inside an open step: most)."""
        span = self.span()
        if span is None or (span[0] >= lo and (hi is None or span[1] <= hi)):
            return self
        out = GapBatch()
        out.itl_t, itl = _keep(self.itl_t, self.itl, lo, hi)
        out.chunk_t, gap = _keep(self.chunk_t, self.gap, lo, hi)
        out.merged_t, _ = _keep(self.merged_t, None, lo, hi)
        assert itl is not None and gap is not None
        out.itl, out.gap = itl, gap
        return out

    def by_second(self) -> list[tuple[float, array[float]]]:
        """The ITLs as (an arrival time, ITLs) per whole second of arrival, oldest first: the
        live window keeps values by their second (histogram.py RollingDigest)."""
        ts = self.itl_t
        span = self.span()
        if not ts or span is None:
            return []
        if math.floor(span[0]) == math.floor(span[1]):
            return [(ts[0], self.itl)]
        by_s: dict[int, tuple[float, array[float]]] = {}
        for t, v in zip(ts, self.itl, strict=True):
            sec = math.floor(t)
            got = by_s.get(sec)
            if got is None:
                by_s[sec] = (t, array("d", (v,)))
            else:
                got[1].append(v)
        return [by_s[k] for k in sorted(by_s)]
