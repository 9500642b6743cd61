"""The log bins and the one interpolation rule (engine/measure/histogram.py tells the whole story).

`quantile(sorted_values, q)` is the linear interpolation every percentile in redline uses;
`LogHistogram` counts values in bins growing by HIST_RATIO, and `binned_quantiles` reads
the same interpolation off (bin, count) pairs, each order statistic its bin's geometric
middle clamped to the recorded min and max. Digest and RollingDigest use both.
"""

from __future__ import annotations

import math
import os
from array import array
from typing import Iterable, Sequence

from ..constants import HIST_MAX_S, HIST_MIN_S, HIST_RATIO, SPEEDUPS_ENV, SPEEDUPS_OFF

try:  # the counting loops in C (engine/measure/_bins.c), where it was built
    from ._bins import count_bins, count_bins_dicts  # type: ignore[import-not-found]
except ImportError:
    count_bins = count_bins_dicts = None
if os.environ.get(SPEEDUPS_ENV, "1").strip().lower() in SPEEDUPS_OFF:
    count_bins = count_bins_dicts = None

LOG_RATIO = math.log(HIST_RATIO)
LOG_MIN = math.log(HIST_MIN_S)
NBINS = int(math.ceil((math.log(HIST_MAX_S) - LOG_MIN) / LOG_RATIO)) + 2
LAST_BIN = NBINS - 1
_log = math.log

#: Relative bound of a histogram estimate against the exact value (values in range).
HIST_PRECISION = math.sqrt(HIST_RATIO) - 1.0


def bin_index(v: float) -> int:
    """The bin holding v (bin 0 holds everything at or below HIST_MIN_S)."""
    if v <= HIST_MIN_S:
        return 0
    i = int((math.log(v) - LOG_MIN) / LOG_RATIO) + 1
    return i if i < NBINS else NBINS - 1


def bin_value(i: int) -> float:
    """The value a bin stands for: its geometric middle."""
    if i == 0:
        return HIST_MIN_S
    return math.exp(LOG_MIN + (i - 1) * LOG_RATIO) * math.sqrt(HIST_RATIO)


def quantile(sorted_values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated quantile of sorted values (numpy's default, as bench_serving)."""
    n = len(sorted_values)
    if not n:
        return None
    pos = q * (n - 1)
    lo = int(pos)
    hi = min(lo + 1, n - 1)
    frac = pos - lo
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac


def clamp_q(q: float) -> float:
    """q limited to 0..1."""
    return 0.0 if q < 0.0 else 1.0 if q > 1.0 else q


def binned_quantiles(
    items: Iterable[tuple[int, int]], n: int, qs: Sequence[float], vmin: float, vmax: float
) -> list[float | None]:  # (never None: typed as its callers' answers, which are None when empty)
    """Linear-interpolated quantiles from (bin, count) pairs in ascending bin order (n in
    all): each of the order statistics at floor/ceil(q*(n-1)) is its bin's value, clamped
    to [vmin, vmax]. One pass over the bins for all qs."""
    plan = []  # (q, lo rank, hi rank, frac)
    ranks = set()
    for q in qs:
        pos = clamp_q(q) * (n - 1)
        lo = int(pos)
        hi = min(lo + 1, n - 1)
        plan.append((lo, hi, pos - lo))
        ranks.add(lo)
        ranks.add(hi)
    want = sorted(ranks)
    est: dict[int, float] = {}
    k = 0
    seen = 0
    for b, c in items:
        seen += c
        while k < len(want) and want[k] < seen:  # rank want[k] lies in bin b
            v = bin_value(b)
            est[want[k]] = vmin if v < vmin else vmax if v > vmax else v
            k += 1
        if k == len(want):
            break
    for r in want[k:]:  # counts short of n (should not happen): the max stands in
        est[r] = vmax
    if 0 in est:  # the extreme order statistics are known exactly
        est[0] = vmin
    if n - 1 in est:
        est[n - 1] = vmax
    out: list[float | None] = []
    for lo, hi, frac in plan:
        a = est[lo]
        out.append(a + (est[hi] - a) * frac if hi != lo else a)
    return out


class LogHistogram:
    """Counts of values in log bins growing by HIST_RATIO (NBINS ints), plus count, total,
    min and max. Quantiles are linear interpolations between bin values (module docstring)."""

    __slots__ = ("bins", "count", "total", "vmax", "vmin")

    def __init__(self) -> None:
        self.bins = [0] * NBINS
        self.count = 0
        self.total = 0.0
        self.vmax = 0.0  # 0.0 while empty
        self.vmin = 0.0  # 0.0 while empty

    def add(self, v: float) -> None:
        self.bins[bin_index(v)] += 1
        if not self.count:
            self.vmin = self.vmax = v
        elif v > self.vmax:
            self.vmax = v
        elif v < self.vmin:
            self.vmin = v
        self.count += 1
        self.total += v

    def add_many(self, values: Iterable[float]) -> None:
        vals = values if isinstance(values, (list, tuple, array)) else list(values)
        if not vals:
            return
        bins = self.bins
        lmin, lr, mn = LOG_MIN, LOG_RATIO, HIST_MIN_S
        if count_bins is not None:
            count_bins(bins, vals, mn, lmin, lr)
        else:
            for v in vals:  # bin_index, inlined
                if v <= mn:
                    bins[0] += 1
                else:
                    i = int((_log(v) - lmin) / lr) + 1
                    bins[i if i < NBINS else LAST_BIN] += 1
        lo, hi = min(vals), max(vals)
        if not self.count:
            self.vmin, self.vmax = lo, hi
        else:
            self.vmin = min(self.vmin, lo)
            self.vmax = max(self.vmax, hi)
        self.count += len(vals)
        self.total += math.fsum(vals)

    def merge(self, other: "LogHistogram") -> None:
        if not other.count:
            return
        b = self.bins
        for i, n in enumerate(other.bins):
            if n:
                b[i] += n
        if not self.count:
            self.vmin, self.vmax = other.vmin, other.vmax
        else:
            self.vmin = min(self.vmin, other.vmin)
            self.vmax = max(self.vmax, other.vmax)
        self.count += other.count
        self.total += other.total

    def copy(self) -> "LogHistogram":
        h = LogHistogram()
        h.bins = list(self.bins)
        h.count, h.total, h.vmin, h.vmax = self.count, self.total, self.vmin, self.vmax
        return h

    def mean(self) -> float | None:
        return self.total / self.count if self.count else None

    def quantiles(self, qs: Sequence[float]) -> list[float | None]:
        """Linear-interpolated value at each q (0..1); Nones when empty."""
        if not self.count:
            return [None] * len(qs)
        items = ((i, n) for i, n in enumerate(self.bins) if n)
        return binned_quantiles(items, self.count, qs, self.vmin, self.vmax)

    def quantile(self, q: float) -> float | None:
        """Linear-interpolated value at quantile q (0..1); None when empty."""
        return self.quantiles((q,))[0]
