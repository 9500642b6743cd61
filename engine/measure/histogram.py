"""Percentiles: one method everywhere, linear interpolation (numpy's default, as bench_serving).

The q-quantile of n values is the interpolation between the order statistics at
floor(q*(n-1)) and ceil(q*(n-1)) (0-based), weighted by the fractional part of q*(n-1):
49 gaps of 30 ms and one of 500 ms give a p99 of 30 + 0.51 * 470 = 269.7 ms.

Three holders answer it:

- `quantile(sorted_values, q)`: on a sorted list, exact.
- `Digest`: a series (a step's TTFTs, its ITLs). Exact while it holds at most EXACT_LIMIT
  values (kept in an array('d'), sorted at most once per batch of additions); beyond, every
  value moves into a `LogHistogram` and the answer comes from it. Memory stays bounded
  (EXACT_LIMIT floats, then NBINS ints) whatever the count.
- `RollingDigest(window_s)`: the live sliding window. Exact while the window holds at most
  EXACT_LIMIT values; beyond, from sparse log bins kept per second (a call costs a sort of
  the bins in use, not of every value).

Precision. Below the limit: exact (the same arithmetic as `quantile`; numpy agrees to about
1e-15 relative). Beyond it, each of the two order statistics is estimated by the geometric
middle of its bin, clamped to the recorded min and max. Bins grow by HIST_RATIO (1.01), so
for values in [HIST_MIN_S, HIST_MAX_S] each estimate is within sqrt(HIST_RATIO) - 1 = 0.499 %
(about half a bin, +-0.5 %) of the exact order statistic, and the interpolated value, a
weighted mean of the two, is within that same relative bound of the exact linear-interpolated
quantile (for non-negative values). At or below HIST_MIN_S (bin 0) the error is at most
HIST_MIN_S absolute (10 us); above HIST_MAX_S the last bin is open-ended and the estimate is
only bounded by the recorded min and max. The smallest and largest order statistics are the
recorded min and max themselves, so q = 0 and q = 1 are exact, and so is a sample of one
distinct value.

Where: log_bins.py holds `quantile`, the log bins and `LogHistogram`; this module holds
`Digest`, `RollingDigest` and `censored_quantiles` and re-exports the rest, so every name is
importable from here.
"""

from __future__ import annotations

import math
from array import array
from collections import deque
from typing import Iterable, Sequence

from ..constants import BOUND_TOLERANCE, EXACT_LIMIT, HIST_MIN_S
from .log_bins import (
    HIST_PRECISION,
    LAST_BIN,
    LOG_MIN,
    LOG_RATIO,
    NBINS,
    LogHistogram,
    bin_index,
    bin_value,
    binned_quantiles,
    clamp_q,
    count_bins_dicts,
    quantile,
)

__all__ = [
    "HIST_PRECISION",
    "NBINS",
    "Digest",
    "LogHistogram",
    "RollingDigest",
    "RollingHistogram",
    "bin_index",
    "bin_value",
    "censored_quantiles",
    "quantile",
]

_log = math.log


class Digest:
    """A series' values: exact while it holds at most `limit` values, binned beyond.

    While exact, values are kept in an array('d'); a sorted copy is made on the first
    quantile after an addition and reused until the next (`sorts` counts them). When the
    count passes `limit` every value moves into a LogHistogram, for good. Two Digests
    merged answer as one Digest fed both series (exact when the total fits the limit).
    """

    __slots__ = ("limit", "count", "total", "_min", "_max", "_exact", "_sorted", "_hist", "sorts")

    def __init__(self, limit: int = EXACT_LIMIT) -> None:
        self.limit = limit
        self.count = 0
        self.total = 0.0
        self._min = 0.0
        self._max = 0.0
        self._exact: array | None = array("d")
        self._sorted: list[float] | None = None
        self._hist: LogHistogram | None = None
        self.sorts = 0  # how many times the exact values were sorted

    # -- feeding -------------------------------------------------------------------------
    def add(self, v: float) -> None:
        if not self.count:
            self._min = self._max = v
        elif v > self._max:
            self._max = v
        elif v < self._min:
            self._min = v
        self.count += 1
        self.total += v
        if self._exact is not None:
            self._exact.append(v)
            self._sorted = None
            if self.count > self.limit:
                self._spill()
        else:
            h = self._hist
            assert h is not None  # not exact: binned
            h.add(v)

    def add_many(self, values: Iterable[float]) -> None:
        vals = values if isinstance(values, (list, tuple, array)) else list(values)
        if not vals:
            return
        lo, hi = min(vals), max(vals)
        if not self.count:
            self._min, self._max = lo, hi
        else:
            self._min = min(self._min, lo)
            self._max = max(self._max, hi)
        self.count += len(vals)
        self.total += math.fsum(vals)
        if self._exact is not None:
            self._exact.extend(vals)
            self._sorted = None
            if self.count > self.limit:
                self._spill()
        else:
            h = self._hist
            assert h is not None  # not exact: binned
            h.add_many(vals)

    def merge(self, other: "Digest") -> None:
        if not other.count:
            return
        ovals = other._exact
        if other is self and ovals is not None:
            ovals = array("d", ovals)
        if not self.count:
            self._min, self._max = other._min, other._max
        else:
            self._min = min(self._min, other._min)
            self._max = max(self._max, other._max)
        self.count += other.count
        self.total += other.total
        if self._exact is not None and ovals is not None and self.count <= self.limit:
            self._exact.extend(ovals)
            self._sorted = None
            return
        if self._exact is not None:
            self._spill()
        h = self._hist
        assert h is not None  # spilled, or binned before
        if ovals is not None:
            h.add_many(ovals)
        else:
            oh = other._hist
            assert oh is not None  # the other is binned
            h.merge(oh if other is not self else oh.copy())

    def remove_many(self, values: Iterable[float]) -> None:
        """Take values added before back out (a request that failed after its gaps were
        counted: failed requests stay out of every latency figure). Values never added are
        ignored while exact; binned, each decrements its bin (never below zero)."""
        vals = list(values)
        if not vals or not self.count:
            return
        if self._exact is not None:
            left = list(self._exact)
            for v in vals:
                try:
                    left.remove(v)
                except ValueError:
                    continue
            removed = len(self._exact) - len(left)
            if not removed:
                return
            self._exact = array("d", left)
            self._sorted = None
            self.count = len(left)
            self.total = math.fsum(left)
            if left:
                self._min, self._max = min(left), max(left)
            return
        h = self._hist
        assert h is not None  # not exact: binned
        bins = h.bins
        n = 0
        for v in vals:
            b = bin_index(v)
            if bins[b] > 0:
                bins[b] -= 1
                n += 1
                h.total -= v
        if not n:
            return
        h.count -= n
        self.count = h.count
        self.total = h.total
        if self.count:  # an extreme's bin emptied: the nearest bin in use stands in
            used = [i for i, c in enumerate(bins) if c]
            if not bins[bin_index(self._min)]:
                self._min = bin_value(used[0])
            if not bins[bin_index(self._max)]:
                self._max = bin_value(used[-1])
            h.vmin, h.vmax = self._min, self._max

    def _spill(self) -> None:
        h = LogHistogram()
        h.add_many(self._exact or ())
        self._hist = h
        self._exact = None
        self._sorted = None

    # -- reading -------------------------------------------------------------------------
    @property
    def values_exact(self) -> bool:
        """True while the quantiles are exact (count <= limit)."""
        return self._exact is not None

    @property
    def max(self) -> float | None:
        return self._max if self.count else None

    @property
    def min(self) -> float | None:
        return self._min if self.count else None

    def mean(self) -> float | None:
        return self.total / self.count if self.count else None

    def sorted_values(self) -> list[float] | None:
        """The values, sorted, while exact (the cached copy: do not modify); else None."""
        if self._exact is None:
            return None
        if self._sorted is None:
            self._sorted = sorted(self._exact)
            self.sorts += 1
        return self._sorted

    def quantiles(self, qs: Sequence[float]) -> list[float | None]:
        """Linear-interpolated value at each q (0..1); Nones when empty."""
        if not self.count:
            return [None] * len(qs)
        s = self.sorted_values()
        if s is not None:
            return [quantile(s, clamp_q(q)) for q in qs]
        assert self._hist is not None  # not exact: binned
        items = ((i, n) for i, n in enumerate(self._hist.bins) if n)
        return binned_quantiles(items, self.count, qs, self._min, self._max)

    def quantile(self, q: float) -> float | None:
        return self.quantiles((q,))[0]

    def __repr__(self) -> str:
        mode = "exact" if self.values_exact else "binned"
        return f"Digest(count={self.count}, {mode})"


class _Second:
    """One second of a RollingDigest: its sparse bins, its values (while at most the limit)
    and their sorted copy (made once the second is read)."""

    __slots__ = ("sec", "bins", "vals", "sorted", "vmin", "vmax", "n")

    def __init__(self, sec: int) -> None:
        self.sec = sec
        self.bins: dict[int, int] = {}
        self.vals: array | None = array("d")
        self.sorted: list[float] | None = None
        self.vmin = math.inf
        self.vmax = -math.inf
        self.n = 0


class RollingDigest:
    """Values of the last `window_s` seconds: exact while the window holds at most `limit`
    values, binned beyond.

    Values are grouped by the whole second of their time t (floor(t)); `expire(now)` drops
    the seconds before floor(now - window_s), so a value is in the window while
    floor(t) >= floor(now - window_s). Each second keeps sparse log bins (summed over the
    window as values come and go) and, while it holds at most `limit`, its values. Reading
    the exact case merges the seconds' sorted runs (each second sorted once), cached until
    the next addition or expiry; the binned case sorts the bins in use, not the values.
    Memory: at most `limit` floats per second of the window plus the bins in use.
    Times should not go backwards: a value older than the newest second joins that second.
    """

    __slots__ = ("window_s", "limit", "_secs", "_total", "count", "_cache", "sorts")

    def __init__(self, window_s: float, limit: int = EXACT_LIMIT) -> None:
        self.window_s = window_s
        self.limit = limit
        self._secs: deque[_Second] = deque()
        self._total: dict[int, int] = {}
        self.count = 0
        self._cache: list[float] | None = None
        self.sorts = 0  # how many times the window's sorted values were rebuilt

    def add(self, t: float, v: float) -> None:
        self.add_many(t, (v,))

    def add_many(self, t: float, values: Iterable[float]) -> None:
        vals = values if isinstance(values, (list, tuple, array)) else list(values)
        if not vals:
            return
        sec = math.floor(t)
        secs = self._secs
        if not secs or secs[-1].sec < sec:
            secs.append(_Second(sec))
        s = secs[-1]
        bins, total = s.bins, self._total
        lmin, lr, mn = LOG_MIN, LOG_RATIO, HIST_MIN_S
        if count_bins_dicts is not None:
            count_bins_dicts(bins, total, vals, mn, lmin, lr, NBINS)
        else:
            for v in vals:  # bin_index, inlined
                if v <= mn:
                    b = 0
                else:
                    b = int((_log(v) - lmin) / lr) + 1
                    if b >= NBINS:
                        b = LAST_BIN
                bins[b] = bins.get(b, 0) + 1
                total[b] = total.get(b, 0) + 1
        lo, hi = min(vals), max(vals)
        if lo < s.vmin:
            s.vmin = lo
        if hi > s.vmax:
            s.vmax = hi
        s.n += len(vals)
        if s.vals is not None:
            if s.n <= self.limit:
                s.vals.extend(vals)
            else:  # this second alone keeps the window binned while it is in it
                s.vals = None
        s.sorted = None
        self.count += len(vals)
        self._cache = None

    def remove_many(self, t: float, values: Iterable[float]) -> None:
        """Take values added at time `t` back out (a failed request's gaps or TTFT); a
        second already expired has nothing to take."""
        vals = list(values)
        sec = math.floor(t)
        s = next((x for x in self._secs if x.sec == sec), None)
        if s is None or not vals:
            return
        total = self._total
        n = 0
        for v in vals:
            b = bin_index(v)
            if s.bins.get(b, 0) <= 0:
                continue
            s.bins[b] -= 1
            if not s.bins[b]:
                del s.bins[b]
            left = total[b] - 1
            if left:
                total[b] = left
            else:
                del total[b]
            if s.vals is not None:
                try:
                    s.vals.remove(v)
                except ValueError:
                    pass
            n += 1
        s.n -= n
        self.count -= n
        s.sorted = None
        self._cache = None

    def expire(self, now: float) -> None:
        lo = math.floor(now - self.window_s)
        secs, total = self._secs, self._total
        while secs and secs[0].sec < lo:
            s = secs.popleft()
            for b, c in s.bins.items():
                left = total[b] - c
                if left:
                    total[b] = left
                else:
                    del total[b]
            self.count -= s.n
            self._cache = None

    @property
    def values_exact(self) -> bool:
        return self.count <= self.limit

    def sorted_values(self) -> list[float] | None:
        """The window's values, sorted, while exact (cached: do not modify); else None."""
        if self.count > self.limit:
            return None
        if self._cache is None:
            runs: list[float] = []
            for s in self._secs:
                if s.sorted is None:  # (each second's values are kept while the window is exact)
                    s.sorted = sorted(s.vals or ())
                runs.extend(s.sorted)
            # sorted runs: Timsort merges them in about n log(seconds), not n log n
            self._cache = sorted(runs) if len(self._secs) > 1 else runs
            self.sorts += 1
        return self._cache

    def digest(self) -> Digest:
        """The window's values as one Digest (exact while the window is, else its bins; the
        sum of binned values estimated from the bins): for censored_quantiles."""
        d = Digest(self.limit)
        vals = self.sorted_values()
        if vals is not None:
            d.add_many(vals)
            return d
        h = LogHistogram()
        for b, c in self._total.items():
            h.bins[b] = c
        h.count = self.count
        h.vmin = min(s.vmin for s in self._secs)
        h.vmax = max(s.vmax for s in self._secs)
        h.total = math.fsum(bin_value(b) * c for b, c in self._total.items())
        d.count, d.total, d._min, d._max = h.count, h.total, h.vmin, h.vmax
        d._exact, d._hist = None, h
        return d

    def quantiles(self, qs: Sequence[float]) -> tuple[list[float | None], float | None]:
        """([value at each q], max) over the window; Nones when empty."""
        if not self.count:
            return [None] * len(qs), None
        vmax = max(s.vmax for s in self._secs)
        vals = self.sorted_values()
        if vals is not None:
            return [quantile(vals, clamp_q(q)) for q in qs], vmax
        vmin = min(s.vmin for s in self._secs)
        items = sorted(self._total.items())
        return binned_quantiles(items, self.count, qs, vmin, vmax), vmax


#: The old name: the live window, now exact while small.
RollingHistogram = RollingDigest


def censored_quantiles(
    d: Digest, seen: Sequence[float], censored: Sequence[float], qs: Sequence[float | None]
) -> list[tuple[float | None, bool]]:
    """(value, is a lower bound) at each q (None: the mean) of a series with censored values.

    `d` and `seen` hold observed values; `censored` holds lower bounds ("at least this": a
    request still waiting at a step's close, its age then). The value is the quantile of all
    of them as numbers (linear interpolation, as everywhere): since a censored value can
    only be larger in truth, it is never above the true quantile. It is a **lower bound**
    when the censored values could still move it: taken as endlessly late instead, they
    give a quantile more than BOUND_TOLERANCE higher (or beyond every observed value). A
    busy step's requests sent a moment before its close do not make a bound; requests
    queued behind the load do. The mean is a bound as soon as one value is censored.
    """
    n_obs = d.count + len(seen)
    n = n_obs + len(censored)
    if not n:
        return [(None, False)] * len(qs)
    if not censored and not seen:
        vals = d.quantiles([q for q in qs if q is not None])
        it = iter(vals)
        return [((d.mean(), False) if q is None else (next(it), False)) for q in qs]
    total = d.total + math.fsum(seen) + math.fsum(censored)
    base = d.sorted_values()
    if base is not None or d.count == 0:
        obs = sorted([*(base or ()), *seen])
        low: list[float] | None = sorted([*obs, *censored])

        def order_stat(r: int) -> float:  # of the observed values, censored ones endlessly late
            return obs[r] if r < n_obs else math.inf
    else:
        assert d._hist is not None  # not exact: binned
        h = d._hist.copy()
        h.add_many(list(seen))
        h.vmin, h.vmax = min(h.vmin, *seen) if seen else h.vmin, max(h.vmax, *seen) if seen else h.vmax
        merged = h.copy()
        merged.add_many(list(censored))
        low = None

        def order_stat(r: int) -> float:
            if r >= n_obs:
                return math.inf
            v = h.quantile(r / (n_obs - 1)) if n_obs > 1 else h.vmax
            assert v is not None  # h holds the n_obs > 0 observed values
            return v
    out: list[tuple[float | None, bool]] = []
    for q in qs:
        if q is None:
            out.append((total / n, bool(censored)))
            continue
        qq = clamp_q(q)
        v = quantile(low, qq) if low is not None else merged.quantile(qq)
        if v is None or not censored:  # (None only for no values: n > 0 here)
            out.append((v, False))
            continue
        pos = qq * (n - 1)
        lo = int(pos)
        hi = min(lo + 1, n - 1)
        frac = pos - lo
        a, b = order_stat(lo), order_stat(hi)
        worst = a if frac == 0 else (math.inf if math.isinf(b) else a + (b - a) * frac)
        out.append((v, worst > v * (1 + BOUND_TOLERANCE) + 1e-9))
    return out
