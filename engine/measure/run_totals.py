"""The whole run at once, as `vllm bench serve` and SGLang's `bench_serving` report it: every
load request that ended (start-up's and the probe lane's apart), for the end summary of a
headless run (a fixed-size run's, and what finished when a signal stops one).

Definitions are bench_serving's (docs/numbers.md): TTFT, TPOT and E2E per completed request;
ITL over every gap of every completed request; duration from the first send to the last end;
throughputs over it. Failed requests count apart; cancelled ones (the run's end) are neither,
but their output tokens are counted beside (`all_output_throughput`: every output token that
arrived, as a step's out tok/s counts them, where bench_serving's counts completed requests).
A worker process's request carries its figures, not its chunk times: its gaps are not in ITL.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from . import records
from .histogram import Digest
from .records import RequestRecord
from .step_result import DEFAULT_PERCENTILES

NOT_LOAD = ("calibration", "lane")


class _Series:
    """A Digest for the percentiles, and the sum of squares for the standard deviation."""

    __slots__ = ("d", "sumsq")

    def __init__(self) -> None:
        self.d = Digest()
        self.sumsq = 0.0

    def add(self, v: float) -> None:
        self.d.add(v)
        self.sumsq += v * v

    def add_many(self, vs: Sequence[float]) -> None:
        self.d.add_many(vs)
        self.sumsq += math.fsum(v * v for v in vs)

    def std(self) -> float | None:
        n = self.d.count
        if not n:
            return None
        m = self.d.total / n
        return math.sqrt(max(0.0, self.sumsq / n - m * m))  # numpy's std (ddof 0), as bench_serving


class RunTotals:
    def __init__(self) -> None:
        self.completed = 0
        self.failed = 0
        self.cancelled = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self.cancelled_output_tokens = 0  # what the cancelled requests had streamed: throughput of no completed request
        self.ttft = _Series()
        self.tpot = _Series()
        self.itl = _Series()
        self.e2e = _Series()
        self.t_first_send: float | None = None
        self.t_last_end: float | None = None

    def on_end(self, rec: RequestRecord) -> None:
        if rec.phase in NOT_LOAD:
            return
        if self.t_first_send is None or rec.t_send < self.t_first_send:
            self.t_first_send = rec.t_send
        t_end = rec.t_end if rec.t_end is not None else rec.t_send
        if self.t_last_end is None or t_end > self.t_last_end:
            self.t_last_end = t_end
        if rec.status == records.FAILED:
            self.failed += 1
            return
        if rec.status == records.CANCELLED:
            self.cancelled += 1
            self.cancelled_output_tokens += rec.output_tokens
            return
        self.completed += 1
        self.input_tokens += rec.input_tokens
        self.output_tokens += rec.output_tokens
        if rec.ttft is not None:
            self.ttft.add(rec.ttft)
        if rec.tpot is not None:
            self.tpot.add(rec.tpot)
        if rec.e2e is not None:
            self.e2e.add(rec.e2e)
        if rec.remote is None and len(rec.chunk_times) > 1:
            self.itl.add_many(rec.itls())

    def summary(self, percentiles: Sequence[float] = DEFAULT_PERCENTILES) -> dict[str, Any]:
        """bench_serving's result keys: completed, failed, duration, totals, throughputs, and
        mean/median/std/pN of TTFT, TPOT, ITL and E2E in ms."""
        d = (self.t_last_end - self.t_first_send) if self.t_first_send is not None and self.t_last_end is not None else 0.0
        dd = d if d > 0 else math.nan
        out: dict[str, Any] = {
            "completed": self.completed, "failed": self.failed, "cancelled": self.cancelled,
            "duration": round(d, 3),
            "total_input_tokens": self.input_tokens, "total_output_tokens": self.output_tokens,
            "request_throughput": _r(self.completed / dd), "output_throughput": _r(self.output_tokens / dd),
            "total_token_throughput": _r((self.input_tokens + self.output_tokens) / dd),
            "all_output_throughput": _r((self.output_tokens + self.cancelled_output_tokens) / dd),
        }
        for name, series in (("ttft", self.ttft), ("tpot", self.tpot), ("itl", self.itl), ("e2e_latency", self.e2e)):
            dig = series.d
            out[f"mean_{name}_ms"] = _ms(dig.mean() if dig.count else None)
            out[f"median_{name}_ms"] = _ms(dig.quantile(0.5))
            out[f"std_{name}_ms"] = _ms(series.std())
            for q, v in zip(percentiles, dig.quantiles([q / 100.0 for q in percentiles]), strict=False):
                out[f"p{q:g}_{name}_ms"] = _ms(v)
        return out


def _ms(v: float | None) -> float | None:
    return None if v is None else round(v * 1000.0, 3)


def _r(v: float) -> float | None:
    return None if math.isnan(v) else round(v, 3)
