"""A log-bucketed histogram for inter-token latencies.

ITLs arrive at thousands per second and steps can last an hour, so they are binned:
bins grow by HIST_RATIO, so a percentile is exact to within half a bin (+-0.5 %).
Memory is fixed (about 2,300 ints) whatever the count.
"""

from __future__ import annotations

import math
from collections import deque

from .constants import HIST_MAX_S, HIST_MIN_S, HIST_RATIO

_LOG_RATIO = math.log(HIST_RATIO)
_LOG_MIN = math.log(HIST_MIN_S)
NBINS = int(math.ceil((math.log(HIST_MAX_S) - _LOG_MIN) / _LOG_RATIO)) + 2


def bin_index(v: float) -> int:
    """The bin holding v (bin 0 holds everything at or below HIST_MIN_S)."""
    if v <= HIST_MIN_S:
        return 0
    i = int((math.log(v) - _LOG_MIN) / _LOG_RATIO) + 1
    return i if i < NBINS else NBINS - 1


def bin_value(i: int) -> float:
    """The value a bin stands for: its geometric middle."""
    if i == 0:
        return HIST_MIN_S
    return math.exp(_LOG_MIN + (i - 1) * _LOG_RATIO) * math.sqrt(HIST_RATIO)


class LogHistogram:
    __slots__ = ("bins", "count", "total", "vmax")

    def __init__(self) -> None:
        self.bins = [0] * NBINS
        self.count = 0
        self.total = 0.0
        self.vmax = 0.0

    def add(self, v: float) -> None:
        self.bins[bin_index(v)] += 1
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
                    return min(bin_value(i), self.vmax)
        return self.vmax


class RollingHistogram:
    """Log-binned values of the last `window_s` seconds, kept sparse (only bins in use).

    Values are added as they come and a whole second is subtracted when it leaves the
    window, so a percentile costs a sort of the bins in use (tens), not of every value:
    the live ITL percentiles no longer stall the loop that stamps bytes.
    """

    __slots__ = ("window_s", "_secs", "_total", "count")

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._secs: deque[tuple[int, dict[int, int], float]] = deque()
        self._total: dict[int, int] = {}
        self.count = 0

    def add_many(self, t: float, values) -> None:
        if not values:
            return
        sec = int(t)
        if not self._secs or self._secs[-1][0] != sec:
            self._secs.append((sec, {}, 0.0))
        sec, bins, vmax = self._secs[-1]
        total = self._total
        for v in values:
            b = bin_index(v)
            bins[b] = bins.get(b, 0) + 1
            total[b] = total.get(b, 0) + 1
            if v > vmax:
                vmax = v
        self._secs[-1] = (sec, bins, vmax)
        self.count += len(values)

    def expire(self, now: float) -> None:
        lo = int(now - self.window_s)
        total = self._total
        while self._secs and self._secs[0][0] < lo:
            _, bins, _ = self._secs.popleft()
            for b, c in bins.items():
                left = total[b] - c
                if left:
                    total[b] = left
                else:
                    del total[b]
                self.count -= c

    def quantiles(self, qs: tuple[float, ...]) -> tuple[list[float | None], float | None]:
        """([value at each q], max) over the window; Nones when empty."""
        if not self.count:
            return [None] * len(qs), None
        vmax = max(v for _, _, v in self._secs)
        out: list[float | None] = []
        items = sorted(self._total.items())
        for q in qs:
            rank = q * (self.count - 1)
            seen = 0
            for b, c in items:
                seen += c
                if seen > rank:
                    out.append(min(bin_value(b), vmax))
                    break
            else:
                out.append(vmax)
        return out, vmax


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
