"""Step accumulation: what one period held at one concurrency measured (README
"What the numbers mean").

A step is opened when its concurrency is set; requests sent from then on carry its index.
Its warm-up ends (begin_measure) once the batch has settled; requests sent during warm-up
are phase `warmup` and are not its own. Two kinds of figures:

- **Its own requests** (sent at its concurrency after warm-up): TTFT (counted when the first
  token arrives), E2E, TPOT, request rate and input tokens; how many were sent, got a first
  token, completed or failed. A request that outlives the step still belongs to it; what
  it had not done when the step closed is simply not in the result.
- **Its window** [t0, t_end] (what arrived, whoever sent it: the server's state at that
  load): output tokens, counted when they arrive, and inter-token latencies, by the arrival
  time of the chunk that ends each gap.

Percentiles are linear interpolations (numpy's default, as bench_serving), exact while a
series is small and from a log histogram beyond (engine/histogram.py Digest), so a long step
stays small and its live result costs no sort of every value.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Sequence

from . import records as R
from .constants import STEADY_MIN_S, STEADY_TOLERANCE
from .histogram import Digest
from .records import Clock, RequestRecord
from .slo import Slo
from .stepresult import StepResult

WARMUP = "warmup"
NOT_OWN = (WARMUP, "calibration", "lane")  # the probe lane's requests are never the load's


def _ms(v: float | None) -> float | None:
    return None if v is None else round(v * 1000.0, 3)


Gaps = list[tuple[float, list[float], float]]  # RequestRecord.gaps_from: (arrival, ITLs, chunk gap)


def new_gaps(rec: RequestRecord, start: int) -> tuple[int, Gaps]:
    """The gaps of `rec` closed by chunks from index `start` on, and the next start."""
    return len(rec.chunk_times), rec.gaps_from(start)


def per_second_noise(per_second: Sequence[float]) -> float | None:
    """Standard error of the mean per-second rate (None with fewer than 2 seconds)."""
    n = len(per_second)
    if n < 2:
        return None
    mean = sum(per_second) / n
    var = sum((x - mean) ** 2 for x in per_second) / (n - 1)
    return math.sqrt(var / n)


class StepAccumulator:
    def __init__(
        self,
        index: int,
        concurrency: int,
        phase: str,
        t_open: float,
        clock: Clock,
        *,
        measure: bool = True,
        warmup_requests: int = 0,
        slo: Slo | None = None,
        mode: str = "concurrency",
        rate: float | None = None,
        arrival: str | None = None,
        workload: dict | None = None,
    ) -> None:
        self.index = index
        self.mode = mode  # concurrency | rate | trace (the load shape it was opened with)
        self.rate = rate  # the target req/s (rate), the speed factor (trace)
        self.arrival = arrival
        self.workload = workload
        self.lag = Digest()  # own requests' schedule lag (actual - intended send), open loop
        self.held = 0  # sends held back at the in-flight cap while measuring
        self.ttft_turn: dict[int, Digest] = {}  # multi-turn: TTFT per turn index
        self.slo = slo if slo is not None and slo.per_request else None
        self.good = 0  # own requests that met every per-request SLO bound
        self.good_tokens = 0
        self._own_live: dict[int, RequestRecord] = {}  # own requests in flight (SLO: already missed?)
        self._prefix: list[tuple[float, float]] = []  # (queries, hits) counter samples while measuring
        self.lane_ttft = Digest()  # the probe lane beside the load (engine/lane.py), in the window
        self.lane_itl = Digest()
        self.concurrency = concurrency
        self.phase = phase
        self.clock = clock
        self.t_open = t_open  # the step's concurrency was set (warm-up starts)
        self.t0: float | None = t_open if measure else None  # measurement starts
        self.t_end: float | None = None
        self.warmup_ended = 0  # requests of this step that ended during warm-up
        self.warmup_requests = warmup_requests  # measuring starts once this many ended (0: told)
        # its window
        self.out_tokens = 0
        self.per_second: list[float] = []  # output tokens in each second of the window
        self.itl = Digest()
        self.chunk_gap = Digest()
        self.server_max_running: float | None = None
        self._power_sum = 0.0
        self._power_n = 0
        # its own requests
        self.sent = 0
        self.first_token = 0
        self.completed = 0
        self.failed = 0
        self.cancelled = 0
        self.in_tokens = 0
        self.errors: Counter[str] = Counter()
        self.ttft = Digest()
        self.ttfat = Digest()
        self.e2e = Digest()
        self.tpot = Digest()

    # -- phases -----------------------------------------------------------------------
    @property
    def measuring(self) -> bool:
        return self.t0 is not None and self.t_end is None

    @property
    def send_phase(self) -> str:
        """The phase stamped on a request sent now."""
        return self.phase if self.t0 is not None else WARMUP

    def begin_measure(self, t: float) -> None:
        if self.t0 is None:
            self.t0 = t

    def close(self, t: float) -> None:
        if self.t0 is None:
            self.t0 = t  # closed during warm-up: an empty window
        self.t_end = t

    def owns(self, rec: RequestRecord) -> bool:
        return rec.step == self.index and rec.phase not in NOT_OWN

    def _in_window(self, t: float) -> bool:
        return self.t0 is not None and t >= self.t0 and (self.t_end is None or t <= self.t_end)

    # -- feeding ----------------------------------------------------------------------
    def _before_end(self, t: float) -> bool:
        """Did `t` happen while the step was open? (A worker's report of it may come later:
        engine/pool.py replays it after the step closed.)"""
        return self.t_end is None or t <= self.t_end

    def on_send(self, rec: RequestRecord) -> None:
        if self.owns(rec) and self._before_end(rec.t_send):
            self.sent += 1
            self.in_tokens += rec.expected_input_tokens
            lag = rec.schedule_lag
            if lag is not None:
                self.lag.add(max(0.0, lag))
            if self.slo is not None:
                self._own_live[rec.rid] = rec

    def on_first(self, rec: RequestRecord) -> None:
        if rec.ttft is not None and self.owns(rec) and self._before_end(rec.t_first):  # type: ignore[arg-type]
            self.first_token += 1
            self.ttft.add(rec.ttft)
            if rec.turn:
                d = self.ttft_turn.get(rec.turn)
                if d is None:
                    d = self.ttft_turn[rec.turn] = Digest()
                d.add(rec.ttft)

    def note_held(self) -> None:
        """A send was held back at the in-flight cap (open loop)."""
        if self.measuring:
            self.held += 1

    def on_tokens(self, t: float, n: int) -> None:
        if not self._in_window(t):
            return
        self.out_tokens += n
        i = int(t - self.t0)  # type: ignore[operator]
        ps = self.per_second
        while len(ps) <= i:
            ps.append(0)
        ps[i] += n

    def on_gaps(self, gaps: Gaps) -> None:
        inside = [x for x in gaps if self._in_window(x[0])]
        if inside:
            self.itl.add_many([v for _, vs, _ in inside for v in vs])
            self.chunk_gap.add_many([g for _, _, g in inside])

    def on_lane_first(self, rec: RequestRecord) -> None:
        if rec.t_first is not None and rec.ttft is not None and self._in_window(rec.t_first):
            self.lane_ttft.add(rec.ttft)

    def on_lane_gaps(self, gaps: Gaps) -> None:
        self.lane_itl.add_many([v for t, vs, _ in gaps if self._in_window(t) for v in vs])

    def on_end(self, rec: RequestRecord) -> None:
        if rec.step != self.index or not self._before_end(rec.t_end if rec.t_end is not None else rec.t_send):
            return
        if rec.phase == WARMUP:
            self.warmup_ended += 1
            if self.warmup_requests and self.warmup_ended >= self.warmup_requests and rec.t_end is not None:
                self.begin_measure(rec.t_end)
            return
        if not self.owns(rec):
            return
        self._own_live.pop(rec.rid, None)
        if rec.status == R.FAILED:
            self.failed += 1
            self.errors[rec.error_kind] += 1
        elif rec.status == R.CANCELLED:
            self.cancelled += 1
        else:
            self.completed += 1
            if self.slo is not None and self.slo.met(rec):
                self.good += 1
                self.good_tokens += rec.output_tokens
            if rec.usage_reported:
                self.in_tokens += rec.input_tokens - rec.expected_input_tokens
            if rec.e2e is not None:
                self.e2e.add(rec.e2e)
            if rec.tpot is not None:
                self.tpot.add(rec.tpot)
            ttfat = getattr(rec, "ttfat", None)
            if ttfat is not None:
                self.ttfat.add(ttfat)

    def note_server_running(self, running: float | None) -> None:
        if self.measuring and running is not None and (self.server_max_running is None or running > self.server_max_running):
            self.server_max_running = running

    def note_prefix(self, queries: float | None, hits: float | None) -> None:
        if not self.measuring or queries is None or hits is None:
            return
        if self._prefix and queries < self._prefix[-1][0]:  # the server restarted: count anew
            self._prefix.clear()
        self._prefix.append((queries, hits))
        if len(self._prefix) > 2:
            del self._prefix[1]  # the first and the latest are all the rate needs

    def _prefix_hit_rate(self) -> float | None:
        if len(self._prefix) < 2:
            return None
        (q0, h0), (q1, h1) = self._prefix[0], self._prefix[-1]
        return round((h1 - h0) / (q1 - q0), 4) if q1 > q0 else None

    def note_power(self, watts: float | None) -> None:
        if self.measuring and watts is not None:
            self._power_sum += watts
            self._power_n += 1

    # -- reading ----------------------------------------------------------------------
    def duration(self, now: float) -> float:
        if self.t0 is None:
            return 0.0
        return (self.t_end if self.t_end is not None else now) - self.t0

    def seconds(self, now: float) -> list[float]:
        """Output tokens of each whole second of the window, silent seconds included."""
        n = int(self.duration(now))
        ps = self.per_second[:n]
        return ps + [0] * (n - len(ps))

    def steady(self, now: float) -> bool:
        """The window's two halves produced tokens at rates within STEADY_TOLERANCE, over
        at least STEADY_MIN_S whole seconds (silent ones count)."""
        full = self.seconds(now)
        if len(full) < STEADY_MIN_S:
            return False
        h = len(full) // 2
        a, b = sum(full[:h]) / h, sum(full[h : 2 * h]) / h
        if max(a, b) == 0:
            return False
        return abs(a - b) / max(a, b) <= STEADY_TOLERANCE

    def result(self, now: float) -> StepResult:
        d = self.duration(now)
        dd = max(d, 1e-9)
        mean_power = self._power_sum / self._power_n if self._power_n else None
        out_tps = self.out_tokens / dd if d > 0 else 0.0
        tpj = out_tps / mean_power if mean_power else None
        se = per_second_noise(self.seconds(now))
        return StepResult(
            concurrency=self.concurrency,
            duration_s=round(d, 3),
            completed=self.completed,
            failed=self.failed,
            output_throughput=round(out_tps, 3),
            input_throughput=round(self.in_tokens / dd, 3) if d > 0 else 0.0,
            request_throughput=round(self.sent / dd, 4) if d > 0 else 0.0,
            mean_ttft_ms=_ms(self.ttft.mean()),
            median_ttft_ms=_ms(self.ttft.quantile(0.5)),
            p99_ttft_ms=_ms(self.ttft.quantile(0.99)),
            median_itl_ms=_ms(self.itl.quantile(0.5)),
            p99_itl_ms=_ms(self.itl.quantile(0.99)),
            mean_tpot_ms=_ms(self.tpot.mean()),
            median_e2e_latency_ms=_ms(self.e2e.quantile(0.5)),
            p99_e2e_latency_ms=_ms(self.e2e.quantile(0.99)),
            steady=self.steady(now),
            server_max_running=self.server_max_running,
            index=self.index,
            phase=self.phase,
            t_start=round(self.clock.wall(self.t0 if self.t0 is not None else self.t_open), 3),
            errors_by_kind=dict(self.errors) or None,
            mean_power_w=round(mean_power, 1) if mean_power else None,
            tokens_per_joule=round(tpj, 4) if tpj else None,
            joules_per_token=round(1 / tpj, 4) if tpj else None,
            requests_sent=self.sent,
            requests_first_token=self.first_token,
            cancelled=self.cancelled,
            warmup_s=round((self.t0 if self.t0 is not None else now) - self.t_open, 3),
            output_throughput_se=round(se, 3) if se is not None else None,
            median_chunk_gap_ms=_ms(self.chunk_gap.quantile(0.5)),
            p99_chunk_gap_ms=_ms(self.chunk_gap.quantile(0.99)),
            median_ttfat_ms=_ms(self.ttfat.quantile(0.5)),
            **self._goodput(d),
            lane_median_ttft_ms=_ms(self.lane_ttft.quantile(0.5)),
            lane_median_itl_ms=_ms(self.lane_itl.quantile(0.5)),
            prefix_hit_rate=self._prefix_hit_rate(),
            **self._shape(),
        )

    def _shape(self) -> dict:
        """The load shape's own figures: open loop (rate, trace) and multi-turn."""
        out: dict = {"mode": self.mode, "workload": self.workload}
        if self.mode != "concurrency":
            out.update(
                schedule_lag_p50_ms=_ms(self.lag.quantile(0.5)),
                schedule_lag_p99_ms=_ms(self.lag.quantile(0.99)),
                dropped_or_delayed=self.held,
            )
            if self.mode == "trace":
                out["trace_speed"] = self.rate
            else:
                out.update(request_rate=self.rate, arrival=self.arrival)
        if self.ttft_turn:
            out["ttft_by_turn"] = [
                {"turn": k, "requests": d.count, "median_ttft_ms": _ms(d.quantile(0.5)), "p99_ttft_ms": _ms(d.quantile(0.99))}
                for k, d in sorted(self.ttft_turn.items())
            ]
        return out

    def _goodput(self, d: float) -> dict:
        if self.slo is None:
            return {}
        # own requests still in flight that already missed a bound count as missing it: a
        # step whose requests all wait in a queue has not met a TTFT bound
        end = self.t_end if self.t_end is not None else (self.t0 or 0.0) + d
        late = sum(1 for rec in self._own_live.values() if self.slo.missed_by(rec, end))
        finished = self.completed + self.failed + late
        return {
            "request_goodput": round(self.good / d, 4) if d > 0 else 0.0,
            "output_goodput": round(self.good_tokens / d, 3) if d > 0 else 0.0,
            "slo_attainment": round(self.good / finished, 4) if finished else None,
        }
