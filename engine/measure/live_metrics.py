"""Live metrics over sliding windows, fed as tokens arrive and as requests end.

- Rates (output tok/s, input tok/s, req/s, errors/s) over RATE_WINDOW_S, from 100 ms
  buckets filled when tokens arrive (not when requests end), so sparklines are smooth.
- Percentiles (TTFT, ITL, TPOT, E2E: p50/p90/p99/max) over LATENCY_WINDOW_S: TTFT from
  first tokens that arrived in the window (counted at once, not when the request ends) and
  the requests still waiting for one, at their age now (censored: a figure their wait could
  still move is a lower bound, `Percentiles.bounds`),
  E2E and TPOT from requests that ended OK in it, ITL from gaps whose closing chunk arrived
  in it. Failed requests are counted apart and kept out of them. Linear interpolation,
  exact while the window is small, from a rolling log histogram beyond (+-0.5 %).
- One row of exact per-second counts for the session timeline.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..constants import LATENCY_WINDOW_S, RATE_WINDOW_S
from . import records
from .histogram import LogHistogram, RollingDigest, censored_quantiles, quantile
from .records import RequestRecord
from .slo import Slo

BUCKET_S = 0.1


class RateWindow:
    """Sum of values added in the last `window_s`, kept as 100 ms buckets."""

    __slots__ = ("window_s", "_buckets", "_idx", "_val", "total")

    def __init__(self, window_s: float = RATE_WINDOW_S) -> None:
        self.window_s = window_s
        self._buckets: deque[tuple[int, float]] = deque()
        self._idx = -1
        self._val = 0.0
        self.total = 0.0

    def add(self, t: float, v: float) -> None:
        idx = int(t / BUCKET_S)
        if idx != self._idx:
            if self._val:
                self._buckets.append((self._idx, self._val))
            self._idx, self._val = idx, 0.0
        self._val += v
        self.total += v

    def add_many(self, ts: Sequence[float], vs: Sequence[float]) -> None:
        """add() of each (ts[i], vs[i]); a batch inside one bucket (most: a flush holds 50 ms
        at most) in one add."""
        if not ts:
            return
        hi = max(ts)
        if int(min(ts) / BUCKET_S) == int(hi / BUCKET_S):
            self.add(hi, sum(vs))
            return
        for t, v in zip(ts, vs, strict=True):
            self.add(t, v)

    def remove_many(self, items: Sequence[tuple[float, float]]) -> None:
        """Take back values added before, (time, value) each (a failed request's tokens): from
        their buckets while those are still held (never below zero), from `total` always.
        Buckets may come out of time order (workers' reports interleave): one pass over them."""
        by_idx: dict[int, float] = {}
        for t, v in items:
            self.total -= v
            idx = int(t / BUCKET_S)
            by_idx[idx] = by_idx.get(idx, 0.0) + v
        left = by_idx.pop(self._idx, 0.0)
        if left:
            take = min(left, self._val)
            self._val -= take
            if left > take:
                by_idx[self._idx] = left - take
        if not by_idx:
            return
        b = self._buckets
        for i in range(len(b) - 1, -1, -1):
            j, val = b[i]
            want = by_idx.get(j)
            if want:
                take = min(want, val)
                b[i] = (j, val - take)
                by_idx[j] = want - take

    def rate(self, now: float) -> float:
        """Per-second rate over the buckets newer than now - window_s."""
        lo = int((now - self.window_s) / BUCKET_S)
        b = self._buckets
        while b and b[0][0] <= lo:
            b.popleft()
        s = sum(v for _, v in b)
        if self._idx > lo:
            s += self._val
        return s / self.window_s


@dataclass
class Percentiles:
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    max: float | None = None
    n: int = 0
    # the figures that are lower bounds ("p50", "p99", "max"): live TTFT counts the requests
    # still waiting for a first token at their age now (censored_quantiles)
    bounds: frozenset[str] = frozenset()

    @classmethod
    def of(cls, values: list[float]) -> "Percentiles":
        if not values:
            return cls()
        s = sorted(values)
        return cls(quantile(s, 0.5), quantile(s, 0.9), quantile(s, 0.99), s[-1], len(s))

    def ms(self) -> dict[str, float | None]:
        f = lambda v: None if v is None else v * 1000.0  # noqa: E731
        return {"p50": f(self.p50), "p90": f(self.p90), "p99": f(self.p99), "max": f(self.max)}

    def bound_flags(self) -> dict[str, bool]:
        """{"p50": True, ...} for the figures that are lower bounds (only those)."""
        return {k: True for k in ("p50", "p90", "p99", "max") if k in self.bounds}


@dataclass
class LiveStats:
    ttft: Percentiles = field(default_factory=Percentiles)
    itl: Percentiles = field(default_factory=Percentiles)
    tpot: Percentiles = field(default_factory=Percentiles)
    e2e: Percentiles = field(default_factory=Percentiles)
    schedule_lag: Percentiles = field(default_factory=Percentiles)  # open loop: actual - intended send


def _window_percentiles(w: RollingDigest) -> Percentiles:
    (p50, p90, p99), vmax = w.quantiles((0.5, 0.9, 0.99))
    return Percentiles(p50, p90, p99, vmax, w.count)


def censored_window(w: RollingDigest, waiting: list[float]) -> Percentiles:
    """The window's values with `waiting`, lower bounds ("at least this": requests still
    waiting for a first token, at their age now), as a step counts its own requests still
    waiting at its close (histogram.py censored_quantiles): a figure whose rank falls among
    them, where they could move it, is a bound. With no first token in the window and 24
    requests queued 75 s, TTFT reads >=75 s, never "-". A live view counts only those that
    have waited longer than every first token the window saw (all of them when it saw none):
    a queue shows, a request a moment into its prefill is no news (it would make every
    p99 of a busy server a bound)."""
    _, vmax = w.quantiles(())
    if vmax is not None:
        waiting = [a for a in waiting if a > vmax]
    if not waiting:
        return _window_percentiles(w)
    (p50, b50), (p90, b90), (p99, b99) = censored_quantiles(w.digest(), (), waiting, (0.5, 0.9, 0.99))
    oldest = max(waiting)
    bounds = {k for k, b in (("p50", b50), ("p90", b90), ("p99", b99)) if b}
    if vmax is None or oldest >= vmax:
        vmax = oldest
        bounds.add("max")
    return Percentiles(p50, p90, p99, vmax, w.count + len(waiting), frozenset(bounds))


class LiveMetrics:
    def __init__(self) -> None:
        self.out_tokens = RateWindow()
        self.in_tokens = RateWindow()
        self.requests = RateWindow()
        self.errors = RateWindow()
        self.slo: Slo | None = None  # per-request bounds: goodput counts the requests meeting them
        # goodput counts with throughput's own counters and windows (goodput <= throughput at
        # every instant): good requests/s over requests/s' window; good tok/s = output tok/s x
        # the good requests' share of the tokens of the requests that ended lately (they end
        # in bursts: a longer window; the last share holds while none ends)
        self.good_requests = RateWindow()
        self.good_tokens = RateWindow(LATENCY_WINDOW_S)
        self.ended_tokens = RateWindow(LATENCY_WINDOW_S)
        self._good_share: float | None = None
        # sliding windows: TTFT enters when the first token arrives, E2E/TPOT when the
        # request ends, ITL when the chunk ending each gap arrives
        self._ttft = RollingDigest(LATENCY_WINDOW_S)
        self._e2e = RollingDigest(LATENCY_WINDOW_S)
        self._tpot = RollingDigest(LATENCY_WINDOW_S)
        self._itl = RollingDigest(LATENCY_WINDOW_S)
        self._schedule_lag = RollingDigest(LATENCY_WINDOW_S)
        self.completed = 0
        self.failed = 0
        self.cancelled = 0
        self.errors_by_kind: Counter[str] = Counter()
        self.output_tokens_total = 0  # of requests that have not failed (as they arrived)
        self.failed_output_tokens_total = 0  # ... of requests that failed since
        self.input_tokens_total = 0
        self._waiting: dict[int, float] = {}  # load requests sent, no first token yet: rid -> t_start
        self.lag = LogHistogram()  # receive time - server's send stamp (sim only)
        self.percentiles = LiveStats()  # recomputed once a second
        # per-second exact counts for the timeline (reset by take_second, at `_sec_t0`)
        self._sec: Counter[str] = Counter()
        self._sec_t0 = -math.inf

    # -- feeding ---------------------------------------------------------------------
    def on_tokens(self, t: float, n: int) -> None:
        self.out_tokens.add(t, n)
        self.output_tokens_total += n
        self._sec["out"] += n

    def on_token_reads(self, ts: Sequence[float], ns: Sequence[int]) -> None:
        """on_tokens of each read of a batch (engine/measure/hooks.py TokensHook.flush)."""
        n = sum(ns)
        self.out_tokens.add_many(ts, ns)
        self.output_tokens_total += n
        self._sec["out"] += n

    def unmeasure_tokens(self, credits: list[tuple[float, int]]) -> None:
        """A request failed: its tokens (RequestRecord.credits) leave the live output tok/s
        (the buckets still in its window), the totals, and the timeline's second still open."""
        if not credits:
            return
        self.out_tokens.remove_many(credits)
        n = sum(k for _, k in credits)
        self.output_tokens_total -= n
        self.failed_output_tokens_total += n
        now_n = sum(k for t, k in credits if t >= self._sec_t0)
        if now_n:
            self._sec["out"] = max(0, self._sec["out"] - now_n)
            self._sec["failed_out"] += now_n

    def on_lag(self, lag: float) -> None:
        self.lag.add(lag if lag > 0 else 0.0)

    def on_schedule_lag(self, t: float, lag: float) -> None:
        """An open-loop send went `lag` s after its intended time (at the cap, or late)."""
        self._schedule_lag.add(t, lag if lag > 0 else 0.0)

    def on_send(self, rec: RequestRecord) -> None:
        """A load request went out: it waits for its first token (live TTFT counts its age)."""
        self._waiting[rec.rid] = rec.t_start

    def forget(self, rids: list[int]) -> None:
        """Requests that will never report (lost with a worker): no longer waiting."""
        for rid in rids:
            self._waiting.pop(rid, None)

    def on_first(self, rec: RequestRecord) -> None:
        self._waiting.pop(rec.rid, None)
        if rec.ttft is not None and rec.t_first is not None:
            self._ttft.add(rec.t_first, rec.ttft)

    def on_gaps(self, t: float, itls: Sequence[float]) -> None:
        if itls:
            self._itl.add_many(t, itls)

    def unmeasure_first(self, rec: RequestRecord) -> None:
        """A request that failed after its first token: its TTFT leaves the window."""
        if rec.ttft is not None and rec.t_first is not None:
            self._ttft.remove_many(rec.t_first, (rec.ttft,))

    def unmeasure_gaps(self, t: float, itls: Sequence[float]) -> None:
        """... and so do its gaps (by the arrival of the chunk that closed them)."""
        if itls:
            self._itl.remove_many(t, itls)

    def on_request_end(self, rec: RequestRecord, measured: bool = True) -> None:
        """A request ended. Not `measured` (start-up's calibration): counted in the totals,
        kept out of the live windows."""
        t = rec.t_end if rec.t_end is not None else rec.t_send
        self._waiting.pop(rec.rid, None)
        if rec.status == records.CANCELLED:
            self.cancelled += 1
            return
        if rec.status == records.FAILED:
            self.failed += 1
            self.errors_by_kind[rec.error_kind] += 1
            if not measured:
                return
            self.errors.add(t, 1)
            self._sec["errors"] += 1
            if self.slo is not None:  # a miss, with its tokens, in goodput's share
                self.ended_tokens.add(t, rec.output_tokens)
            return
        self.completed += 1
        if not measured:
            return
        self.requests.add(t, 1)
        self.in_tokens.add(t, rec.input_tokens)
        self.input_tokens_total += rec.input_tokens
        self._sec["req"] += 1
        self._sec["in"] += rec.input_tokens
        if self.slo is not None:
            self.ended_tokens.add(t, rec.output_tokens)
            if rec.slo_met:  # its one verdict (engine/measure/step_book.py on_end, before this)
                self.good_requests.add(t, 1)
                self.good_tokens.add(t, rec.output_tokens)
                self._sec["good"] += 1
        if rec.e2e is not None:
            self._e2e.add(t, rec.e2e)
        if rec.tpot is not None:
            self._tpot.add(t, rec.tpot)

    # -- reading ---------------------------------------------------------------------
    def rates(self, now: float) -> tuple[float, float, float, float]:
        return (
            self.out_tokens.rate(now),
            self.in_tokens.rate(now),
            self.requests.rate(now),
            self.errors.rate(now),
        )

    def good_share(self, now: float) -> float | None:
        """The share of the ended requests' output tokens that met the SLO, lately (the last
        share while none ended; None before any did, or without an SLO)."""
        if self.slo is None:
            return None
        ended = self.ended_tokens.rate(now)
        if ended > 0:
            self._good_share = self.good_tokens.rate(now) / ended
        return self._good_share

    def goodput(self, now: float) -> tuple[float | None, float | None]:
        """(good req/s, good output tok/s), counted with throughput's counters (see above);
        Nones without an SLO; tok/s None until a request ended."""
        if self.slo is None:
            return None, None
        share = self.good_share(now)
        return self.good_requests.rate(now), None if share is None else self.out_tokens.rate(now) * share

    def recompute_percentiles(self, now: float) -> LiveStats:
        """Once a second (not per frame): exact while the window is small, binned beyond."""
        stats = self.percentiles
        for name in ("ttft", "e2e", "tpot", "itl", "schedule_lag"):
            w: RollingDigest = getattr(self, "_" + name)
            w.expire(now)
            setattr(stats, name, _window_percentiles(w))
        stats.ttft = censored_window(self._ttft, self.waiting_ages(now))
        return stats

    def waiting_ages(self, now: float) -> list[float]:
        """How long each load request still waiting for its first token has waited."""
        return [now - t for t in self._waiting.values() if now > t]

    def take_second(self, now: float | None = None) -> Counter:
        """Exact counts since the last call (one timeline row), taken at `now`."""
        sec, self._sec = self._sec, Counter()
        if now is not None:
            self._sec_t0 = now
        return sec
