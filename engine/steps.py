"""Step accumulation: everything measured while one concurrency was held.

A step's window is [t0, t_end]. Output tokens count when they arrive inside it; requests
count when they end inside it (completed for latencies and input tokens, failed apart).
ITLs go into a fixed-size histogram (exact to +-0.5 %) so an hour-long step stays small.
"""

from __future__ import annotations

from array import array
from collections import Counter

from . import records as R
from .constants import STEADY_TOLERANCE
from .histogram import LogHistogram, quantile
from .records import Clock, RequestRecord
from .stepresult import StepResult


def _ms(v: float | None) -> float | None:
    return None if v is None else round(v * 1000.0, 3)


class StepAccumulator:
    def __init__(self, index: int, concurrency: int, phase: str, t0: float, clock: Clock) -> None:
        self.index = index
        self.concurrency = concurrency
        self.phase = phase
        self.t0 = t0
        self.clock = clock
        self.t_end: float | None = None
        self.out_tokens = 0
        self.in_tokens = 0
        self.completed = 0
        self.failed = 0
        self.errors: Counter[str] = Counter()
        # one float per request (8 bytes each: an hour at 100 req/s is ~3 MB per series)
        self.ttft = array("d")
        self.e2e = array("d")
        self.tpot = array("d")
        self.itl = LogHistogram()
        self.per_second: list[int] = []  # output tokens per second of the step
        self.server_max_running: float | None = None
        self._power_sum = 0.0
        self._power_n = 0

    def on_tokens(self, t: float, n: int) -> None:
        if t < self.t0 or (self.t_end is not None and t > self.t_end):
            return
        self.out_tokens += n
        i = int(t - self.t0)
        ps = self.per_second
        while len(ps) <= i:
            ps.append(0)
        ps[i] += n

    def on_request_end(self, rec: RequestRecord) -> None:
        t = rec.t_end
        if t is None or t < self.t0 or (self.t_end is not None and t > self.t_end):
            return
        if rec.status == R.FAILED:
            self.failed += 1
            self.errors[rec.error_kind] += 1
        elif rec.status == R.OK:
            self.completed += 1
            self.in_tokens += rec.input_tokens
            if rec.ttft is not None:
                self.ttft.append(rec.ttft)
            if rec.e2e is not None:
                self.e2e.append(rec.e2e)
            if rec.tpot is not None:
                self.tpot.append(rec.tpot)
            for g in rec.itls():
                self.itl.add(g)

    def note_server_running(self, running: float | None) -> None:
        if running is not None and (self.server_max_running is None or running > self.server_max_running):
            self.server_max_running = running

    def note_power(self, watts: float | None) -> None:
        if watts is not None:
            self._power_sum += watts
            self._power_n += 1

    def close(self, t: float) -> None:
        self.t_end = t

    def duration(self, now: float) -> float:
        return (self.t_end if self.t_end is not None else now) - self.t0

    def steady(self, now: float) -> bool:
        """Both halves of the window produced tokens at rates within STEADY_TOLERANCE."""
        full = self.per_second[: int(self.duration(now))]  # whole seconds only
        if len(full) < 4:
            return False
        h = len(full) // 2
        a, b = sum(full[:h]) / h, sum(full[h : 2 * h]) / h
        if max(a, b) == 0:
            return False
        return abs(a - b) / max(a, b) <= STEADY_TOLERANCE

    def result(self, now: float) -> StepResult:
        d = max(self.duration(now), 1e-9)
        tt = sorted(self.ttft)
        ee = sorted(self.e2e)
        mean_power = self._power_sum / self._power_n if self._power_n else None
        out_tps = self.out_tokens / d
        tpj = out_tps / mean_power if mean_power else None
        return StepResult(
            concurrency=self.concurrency,
            duration_s=round(d, 3),
            completed=self.completed,
            failed=self.failed,
            output_throughput=round(out_tps, 3),
            input_throughput=round(self.in_tokens / d, 3),
            request_throughput=round(self.completed / d, 4),
            mean_ttft_ms=_ms(sum(tt) / len(tt)) if tt else None,
            median_ttft_ms=_ms(quantile(tt, 0.5)),
            p99_ttft_ms=_ms(quantile(tt, 0.99)),
            median_itl_ms=_ms(self.itl.quantile(0.5)),
            p99_itl_ms=_ms(self.itl.quantile(0.99)),
            mean_tpot_ms=_ms(sum(self.tpot) / len(self.tpot)) if self.tpot else None,
            median_e2e_latency_ms=_ms(quantile(ee, 0.5)),
            p99_e2e_latency_ms=_ms(quantile(ee, 0.99)),
            steady=self.steady(now),
            server_max_running=self.server_max_running,
            index=self.index,
            phase=self.phase,
            t_start=round(self.clock.wall(self.t0), 3),
            errors_by_kind=dict(self.errors) or None,
            mean_power_w=round(mean_power, 1) if mean_power else None,
            tokens_per_joule=round(tpj, 4) if tpj else None,
            joules_per_token=round(1 / tpj, 4) if tpj else None,
        )
