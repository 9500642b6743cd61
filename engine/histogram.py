"""A log-bucketed histogram for inter-token latencies.

ITLs arrive at thousands per second and steps can last an hour, so they are binned:
bins grow by HIST_RATIO, so a percentile is exact to within half a bin (+-0.5 %).
Memory is fixed (about 2,300 ints) whatever the count.
"""

from __future__ import annotations

import math

from .constants import HIST_MAX_S, HIST_MIN_S, HIST_RATIO

_LOG_RATIO = math.log(HIST_RATIO)
_LOG_MIN = math.log(HIST_MIN_S)
NBINS = int(math.ceil((math.log(HIST_MAX_S) - _LOG_MIN) / _LOG_RATIO)) + 2


class LogHistogram:
    __slots__ = ("bins", "count", "total", "vmax")

    def __init__(self) -> None:
        self.bins = [0] * NBINS
        self.count = 0
        self.total = 0.0
        self.vmax = 0.0

    def add(self, v: float) -> None:
        if v <= HIST_MIN_S:
            i = 0
        else:
            i = int((math.log(v) - _LOG_MIN) / _LOG_RATIO) + 1
            if i >= NBINS:
                i = NBINS - 1
        self.bins[i] += 1
        self.count += 1
        self.total += v
        if v > self.vmax:
            self.vmax = v

    def merge(self, other: "LogHistogram") -> None:
        b = self.bins
        for i, n in enumerate(other.bins):
            if n:
                b[i] += n
        self.count += other.count
        self.total += other.total
        self.vmax = max(self.vmax, other.vmax)

    def mean(self) -> float | None:
        return self.total / self.count if self.count else None

    def quantile(self, q: float) -> float | None:
        """Value at quantile q (0..1): the geometric middle of the bin holding it."""
        if not self.count:
            return None
        rank = q * (self.count - 1)
        seen = 0
        for i, n in enumerate(self.bins):
            if n:
                seen += n
                if seen > rank:
                    if i == 0:
                        return HIST_MIN_S
                    lo = math.exp(_LOG_MIN + (i - 1) * _LOG_RATIO)
                    return min(lo * math.sqrt(HIST_RATIO), self.vmax)
        return self.vmax


def quantile(sorted_values: list[float], q: float) -> float | None:
    """Linear-interpolated quantile of sorted values (numpy's default, as bench_serving)."""
    n = len(sorted_values)
    if not n:
        return None
    pos = q * (n - 1)
    lo = int(pos)
    hi = min(lo + 1, n - 1)
    frac = pos - lo
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac
