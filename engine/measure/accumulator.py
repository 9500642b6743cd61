"""Step accumulation: what one period held at one load measured (docs/numbers.md).

A step is opened when its load is set; requests sent from then on carry its index (open loop:
requests whose *intended* send time fell in it, held at the in-flight cap or not). Its warm-up
ends (begin_measure) once the batch has settled; requests sent during warm-up are phase
`warmup` and are not its own. Two kinds of figures:

- **Its own requests** (sent at its load after warm-up): TTFT, E2E, TPOT and input tokens;
  how many were sent, got a first token, completed, failed or were cancelled. A request that
  outlives the step still belongs to it. At the close, own requests still waiting for a first
  token (or an end), and open-loop sends still held at the cap, are **censored**: they enter
  TTFT (E2E) as "at least their age now", and a percentile whose rank falls among them is a
  lower bound (`*_bound`). The step stays fed after its close: when those requests answer,
  the recorded result is completed with their true TTFT (they waited behind this step's
  queue) and counts (`final`). Their decoding is this step's only inside its window
  (`WindowCut`, taken at the close): TPOT and their own ITL p99 from their chunks by the
  close, E2E as a bound (their age at the close); decoding under the next load never enters
  this step's verdict (the request's row keeps its whole truth). Failed requests stay out of
  every latency figure; a cancelled one (aborted, the run ended) keeps what it had: a TTFT it
  got, else its age as a censored value, and its age as a censored E2E.
  A step that sent no request of its own (outputs that outlive it: no slot freed in its
  window) takes the requests it sent at its load during warm-up as its own at the close
  (`warmup_stand_in`), so that its TTFT and SLO still describe its load.
- **SLO attainment** (engine/rules/verdicts.py judge_request): each own request is judged once, on
  what it did in the window: when it ends inside it, at the close when it answered by then,
  else when it answers; a failed one misses every bound, whatever bounds are set (one judged
  good at the close that fails after it becomes a miss). (The own-request half lives in
  engine/measure/own_requests.py.)
- **Its window** [t0, t_end] (what arrived, whoever sent it: the server's state at that
  load): output tokens, counted when they arrive; inter-token latencies, by the arrival time
  of the chunk that ends each gap (a request that fails takes its gaps back out, and its
  tokens, which become failed_output_tok_s: `remove_tokens`; a cancelled one keeps what the
  server served it); completions (request throughput) and those that met the SLO (goodput,
  by each request's one verdict, `RequestRecord.slo_met`; a failure that ends in the window
  is a miss with its tokens in goodput's share).

Percentiles are linear interpolations (numpy's default, as bench_serving), exact while a
series is small and from a log histogram beyond (engine/measure/histogram.py Digest), so a long step
stays small and its live result costs no sort of every value.
"""

from __future__ import annotations

import math
from typing import Sequence

from ..constants import STEADY_MIN_S
from ..telemetry.server_view import ServerStepView
from ..telemetry.types import ServerSample
from . import records
from .gap_batch import GapBatch
from .histogram import Digest, censored_quantiles
from .own_requests import PROBE, WARMUP, OwnRequests, StepJudge, WindowCut, window_cut
from .records import Clock, RequestRecord
from .slo import Slo
from .step_result import DEFAULT_PERCENTILES, StepResult, percentile_key

NOT_OWN = (WARMUP, "calibration", "lane")  # the probe lane's requests are never the load's
__all__ = ["NOT_OWN", "PROBE", "WARMUP", "StepAccumulator", "StepJudge", "WindowCut", "new_gaps", "per_second_noise", "window_cut"]


def _ms(v: float | None) -> float | None:
    return None if v is None else round(v * 1000.0, 3)


def new_gaps(rec: RequestRecord, start: int) -> tuple[int, GapBatch]:
    """The gaps of `rec` closed by chunks from index `start` on, and the next start."""
    b = GapBatch()
    return b.take(rec, start), b


def per_second_noise(per_second: Sequence[float]) -> float | None:
    """Standard error of the mean per-second rate (None with fewer than 2 seconds)."""
    n = len(per_second)
    if n < 2:
        return None
    mean = sum(per_second) / n
    var = sum((x - mean) ** 2 for x in per_second) / (n - 1)
    return math.sqrt(var / n)


class StepAccumulator(OwnRequests):
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
        judge: StepJudge | None = None,
    ) -> None:
        self.index = index
        self.judge = judge  # the verdicts (steadiness, one request's SLO): engine/rules/verdicts.py STEP_JUDGE
        self.percentiles: tuple[float, ...] = DEFAULT_PERCENTILES  # what the result carries (`--percentiles`)
        self.mode = mode  # concurrency | rate | trace (the load shape it was opened with)
        self.rate = rate  # the target req/s (rate), the speed factor (trace)
        self.arrival = arrival
        self.workload = workload
        self._init_own(slo, phase)
        self.lag = Digest()  # own requests' schedule lag (actual - intended send), open loop
        self.held = 0  # sends held back at the in-flight cap while measuring
        self.ttft_turn: dict[int, Digest] = {}  # multi-turn: TTFT per turn index
        self._prefix: list[tuple[float, float]] = []  # (queries, hits) counter samples while measuring
        self.server_view = ServerStepView()  # the server's own figures over the window
        self.cached_tokens = 0  # own requests that said: prompt tokens the server found cached
        self.cached_prompt_tokens = 0  # ... and their prompt tokens
        self.cached_reports = 0  # own requests whose server said how many were cached
        self.profiles: list[dict] = []  # profiler captures during the step (engine/run/server_ops.py)
        self.profiled = False  # ... or one whose trace the server wrote while the step was live
        self.cache_flush: dict | None = None  # the flush done before it (engine/run/server_ops.py)
        self.lane_ttft = Digest()  # the probe lane beside the load (engine/load/probe_lane.py), in the window
        self.lane_itl = Digest()
        self.concurrency = concurrency
        self.phase = phase
        self.clock = clock
        self.t_open = t_open  # the step's concurrency was set (warm-up starts)
        self.t0: float | None = t_open if measure else None  # measurement starts
        self.t_end: float | None = None
        self.warmup_ended = 0  # requests of this step that ended (or answered: probe) during warm-up
        self.warmup_requests = warmup_requests  # measuring starts once this many ended (0: told)
        self.warmup_on_first = False  # ... or got a first token (the probe: the server answers again)
        # turnover: the requests in flight when this load began that were sent at another load
        # (StepBook.open_step counts them; a step at the same load as the one before it
        # inherits what is left), and how many of them have ended since
        self.foreign = 0
        self.foreign_ended = 0
        self.level_index = index  # the first step of this run of steps at one load
        self.steady_min_s = STEADY_MIN_S  # steady needs this many whole measured seconds (the runner's plan)
        self.short = False  # a period shorter than a step, kept as its own row (StepResult.short)
        self.partial = False  # cut short by a signal or a key (StepResult.partial)
        # its window
        self.out_tokens = 0  # output tokens that arrived in the window, of requests that have not failed
        self.per_second: list[float] = []  # ... in each second of the window
        self.failed_tokens = 0  # output tokens that arrived in the window, of requests that failed since
        self.itl = Digest()
        self.chunk_gap = Digest()
        self.chunks = 0  # content chunks in the window that closed a gap ...
        self.coalesced = 0  # ... of which were read coalesced (records.COALESCED): out of ITL and chunk gap
        self.win_completed = 0  # requests that completed inside the window, whoever sent them
        self.win_tokens = 0  # ... their output tokens
        self.win_good = 0  # ... of which met every per-request SLO bound
        self.win_good_tokens = 0
        self.win_failed = 0  # requests that failed inside the window (misses, for goodput's share)
        self.win_failed_tokens = 0  # ... their output tokens
        self.server_max_running: float | None = None
        self._power_sum = 0.0
        self._power_n = 0
        self._late: list[RequestRecord] = []  # own ends stamped after the close, read before its result
        self._reported = False  # the closing result is taken: later ends came in late
        self.ended_after_close = 0  # own requests that ended after the close (their truth came late)

    # -- phases -----------------------------------------------------------------------
    @property
    def measuring(self) -> bool:
        return self.t0 is not None and self.t_end is None

    @property
    def closed(self) -> bool:
        return self.t_end is not None

    @property
    def send_phase(self) -> str:
        """The phase stamped on a request sent now."""
        return self.phase if self.t0 is not None else WARMUP

    @property
    def outstanding(self) -> int:
        """Own requests (and held sends) whose outcome is not known yet."""
        return len(self._own) + len(self._held_t)

    @property
    def turned_over(self) -> bool:
        """Every request in flight when this load began, sent at another load, has ended:
        what is in flight now was all sent at this step's load."""
        return self.foreign_ended >= self.foreign

    def begin_measure(self, t: float) -> None:
        if self.t0 is None:
            self.t0 = t

    def close(self, t: float) -> None:
        if self.t0 is None:
            self.t0 = t  # closed during warm-up: an empty window
        if self.t_end is None:
            self.t_end = t

    def took_closing(self) -> None:
        """The closing result is taken (StepBook.close_step): what it counted stays the
        close's (steady's count), and the ends it left out, stamped after the close though read
        before the result was taken (the loop or a worker's report caught up), now count, late."""
        if self._reported:
            return
        self._reported = True
        late, self._late = self._late, []
        for rec in late:
            self.on_end(rec)

    def owns(self, rec: RequestRecord) -> bool:
        return rec.step == self.index and rec.phase not in NOT_OWN

    def _in_window(self, t: float) -> bool:
        return self.t0 is not None and t >= self.t0 and (self.t_end is None or t <= self.t_end)

    # -- feeding ----------------------------------------------------------------------
    def _before_end(self, t: float) -> bool:
        """Did `t` happen while the step was open? (A worker's report of it may come later:
        engine/load/worker_pool.py replays it after the step closed.)"""
        return self.t_end is None or t <= self.t_end

    def on_send(self, rec: RequestRecord) -> None:
        # open loop: a send held at the cap goes out later, but it is the step's if its
        # intended time was (t_start); the stamp (StepBook.stamp_at) chose the step by it
        if self.owns(rec) and self._before_end(rec.t_start):
            self.sent += 1
            self.in_tokens += rec.expected_input_tokens
            lag = rec.schedule_lag
            if lag is not None and rec.t_intended is not None:  # (a lag is there with its intended time)
                self.lag.add(max(0.0, lag))
                self._unhold(rec.t_intended)
            self._own[rec.rid] = rec
            self._warm = None  # one of its own went: no stand-ins
        elif self._warm is not None and rec.step == self.index and rec.phase == WARMUP:
            self._warm[rec.rid] = rec

    def on_first(self, rec: RequestRecord) -> None:
        if rec.rid in self._own:
            self.first_token += 1
        elif (self.warmup_on_first and rec.step == self.index and rec.phase == WARMUP
              and (t := rec.t_first) is not None and self._before_end(t)):
            self._warmup_done(t)

    def _warmup_done(self, t: float) -> None:
        self.warmup_ended += 1
        if self.warmup_requests and self.warmup_ended >= self.warmup_requests:
            self.begin_measure(t)

    def on_tokens(self, t: float, n: int) -> None:
        t0 = self.t0
        if t0 is None or not self._in_window(t):
            return
        self._add_tokens(int(t - t0), n)

    def _add_tokens(self, second: int, n: int) -> None:
        """n output tokens in the window's second `second` (from 0)."""
        self.out_tokens += n
        ps = self.per_second
        while len(ps) <= second:
            ps.append(0)
        ps[second] += n

    def on_token_reads(self, ts: Sequence[float], ns: Sequence[int]) -> None:
        """on_tokens of each read of a batch; one inside the window and one second of it
        (most batches: a flush holds 50 ms at most) in one add."""
        t0 = self.t0
        if t0 is None or not ts:
            return
        lo, hi = min(ts), max(ts)
        t_end = self.t_end
        if lo < t0 or (t_end is not None and hi > t_end) or int(lo - t0) != int(hi - t0):
            for t, n in zip(ts, ns, strict=True):
                self.on_tokens(t, n)
            return
        self._add_tokens(int(hi - t0), sum(ns))

    def remove_tokens(self, credits: Sequence[tuple[float, int]]) -> None:
        """A request failed: its tokens that arrived in the window (RequestRecord.credits) move
        from output tok/s (and its per-second series) to failed_output_tok_s."""
        ps, t0 = self.per_second, self.t0
        for t, n in credits:
            if t0 is None or not self._in_window(t):
                continue
            self.out_tokens -= n
            self.failed_tokens += n
            i = int(t - t0)
            if i < len(ps):
                ps[i] = max(0, ps[i] - n)

    def _inside(self, gaps: GapBatch) -> GapBatch | None:
        """The gaps whose closing chunk arrived in the window (`_in_window`)."""
        return None if self.t0 is None else gaps.window(self.t0, self.t_end)

    def on_gaps(self, gaps: GapBatch) -> None:
        inside = self._inside(gaps)
        if inside:
            self.itl.add_many(inside.itl)
            self.chunk_gap.add_many(inside.gap)  # a chunk read coalesced: counted, no gap
            self.chunks += inside.chunks
            self.coalesced += len(inside.merged_t)

    def remove_gaps(self, gaps: GapBatch) -> None:
        """A request failed: its gaps that were counted here go back out."""
        inside = self._inside(gaps)
        if inside:
            self.itl.remove_many(inside.itl)
            self.chunk_gap.remove_many(inside.gap)
            self.chunks -= inside.chunks
            self.coalesced -= len(inside.merged_t)

    def on_lane_first(self, rec: RequestRecord) -> None:
        if rec.t_first is not None and rec.ttft is not None and self._in_window(rec.t_first):
            self.lane_ttft.add(rec.ttft)

    def on_lane_gaps(self, gaps: GapBatch) -> None:
        inside = self._inside(gaps)
        if inside:
            self.lane_itl.add_many(inside.itl)

    def on_end(self, rec: RequestRecord) -> None:
        t_end = rec.t_end if rec.t_end is not None else rec.t_send
        if rec.step < self.level_index and rec.phase not in ("calibration", "lane") and self.t_end is None:
            self.foreign_ended += 1  # one of the previous load's requests left (turnover)
        self._ended(rec, t_end)  # an own request's verdict is in before the window counts it
        if rec.status == records.OK and rec.phase not in ("calibration", "lane") and self._in_window(t_end):
            self.win_completed += 1
            self.win_tokens += rec.output_tokens
            if self.slo is not None and rec.slo_met:
                self.win_good += 1
                self.win_good_tokens += rec.output_tokens
        elif rec.status == records.FAILED and rec.phase not in ("calibration", "lane") and self._in_window(t_end):
            self.win_failed += 1
            self.win_failed_tokens += rec.output_tokens

    def holds(self, rec: RequestRecord) -> bool:
        """`rec` is one of its own requests, not ended yet (its verdict is this step's)."""
        return rec.rid in self._own

    def _ended(self, rec: RequestRecord, t_end: float) -> None:
        if rec.step == self.index and rec.phase == WARMUP:
            if not self.warmup_on_first and self._before_end(t_end):
                self._warmup_done(t_end)
            return
        if rec.rid not in self._own:
            return
        if self.t_end is not None and not self._reported and t_end > self.t_end:
            # after the close by its stamp: outstanding in the closing result; its window
            # figures (and verdict) are the close's, taken now
            self._late.append(rec)
            if rec.rid not in self._cut and (rec.remote is None or rec.rid in self.remote_cuts):
                self._cut_one(rec, self.t_end)  # (a worker's request: with its worker's figures, else at the cut)
            return
        self._end_own(rec, t_end)

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

    def note_server(self, server: ServerSample | None) -> None:
        """A server sample, once a second: the step's own view of the server (its window)."""
        if server is not None and self.measuring and self.t0 is not None and server.t >= self.t0:
            self.server_view.note(server)

    def _cached(self) -> dict:
        if not self.cached_reports:
            return {}
        p = self.cached_prompt_tokens
        return {"cached_tokens": self.cached_tokens, "cached_prompt_ratio": round(self.cached_tokens / p, 4) if p else None}

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

    def request_time_estimate(self, now: float) -> float | None:
        """About how long one own request takes at this load, in seconds (the runner's
        completions_can_come): the median E2E of those that completed, else TTFT plus the
        rest of the output at the window's median ITL; None with neither figure."""
        if self.e2e.count:
            return self.e2e.quantile(0.5)
        itl = self.itl.quantile(0.5)
        out_len = (self.workload or {}).get("output_len") or max((r.max_tokens for r in self._own.values()), default=0)
        if itl is None or not out_len:
            return None
        seen, waiting, _ = self.censored(now)
        firsts = sorted([*seen, *waiting])
        ttft = self.ttft.quantile(0.5) if self.ttft.count else (firsts[len(firsts) // 2] if firsts else 0.0)
        return (ttft or 0.0) + (out_len - 1) * itl

    def steadiness(self, now: float) -> str | None:
        """None when the window's per-second tok/s has settled over at least `steady_min_s`
        whole seconds (STEADY_MIN_S unless its plan says; never under 2; silent ones count),
        else why not (engine/rules/verdicts.py steadiness). Completions play no part: a step whose
        requests all outlive it is judged like any other."""
        if self.judge is None:
            return "not steady: not judged (no verdicts given)"
        return self.judge.steadiness(self.seconds(now), self.steady_min_s)

    def steady(self, now: float) -> bool:
        return self.steadiness(now) is None

    def result(self, now: float) -> StepResult:
        d = self.duration(now)
        dd = max(d, 1e-9)
        # the figures of own requests still outstanding are taken at the close (or now, live)
        at = self.t_end if self.t_end is not None and self.outstanding else now
        seen, c_ttft, c_e2e = self.censored(at)
        (ttft_mean, ttft_mean_b), (ttft_p50, ttft_p50_b), (ttft_p99, ttft_p99_b) = censored_quantiles(self.ttft, seen, c_ttft, (None, 0.5, 0.99))
        (e2e_p50, e2e_p50_b), (e2e_p99, e2e_p99_b) = censored_quantiles(self.e2e, (), c_e2e, (0.5, 0.99))
        extra = self._percentiles(seen, c_ttft, c_e2e)
        shift = self._send_shift(at, c_ttft, c_e2e, (ttft_mean, ttft_p50, ttft_p99, e2e_p50, e2e_p99))
        mean_power = self._power_sum / self._power_n if self._power_n else None
        out_tps = self.out_tokens / dd if d > 0 else 0.0
        tpj = out_tps / mean_power if mean_power else None
        se = per_second_noise(self.seconds(now))
        unjudged = self.steadiness(now)
        return StepResult(
            concurrency=self.concurrency,
            duration_s=round(d, 3),
            completed=self.completed,
            failed=self.failed,
            output_throughput=round(out_tps, 3),
            input_throughput=round(self.in_tokens / dd, 3) if d > 0 else 0.0,
            request_throughput=round(self.win_completed / dd, 4) if d > 0 else 0.0,
            failed_output_tok_s=round(self.failed_tokens / dd, 3) if d > 0 else 0.0,
            mean_ttft_ms=_ms(ttft_mean),
            median_ttft_ms=_ms(ttft_p50),
            p99_ttft_ms=_ms(ttft_p99),
            median_itl_ms=_ms(self.itl.quantile(0.5)),
            p99_itl_ms=_ms(self.itl.quantile(0.99)),
            mean_tpot_ms=_ms(self.tpot.mean()),
            median_e2e_latency_ms=_ms(e2e_p50),
            p99_e2e_latency_ms=_ms(e2e_p99),
            steady=unjudged is None,
            unjudged=unjudged,
            warmup_stand_in=self.warmup_stand_in,
            short=self.short,
            partial=self.partial,
            percentiles=extra or None,
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
            coalesced_chunks=round(self.coalesced / self.chunks, 6) if self.chunks else None,
            client_send_shift_ms=shift,
            p99_chunk_gap_ms=_ms(self.chunk_gap.quantile(0.99)),
            median_ttfat_ms=_ms(self.ttfat.quantile(0.5)),
            **self._goodput(d, out_tps, at),
            lane_median_ttft_ms=_ms(self.lane_ttft.quantile(0.5)),
            lane_median_itl_ms=_ms(self.lane_itl.quantile(0.5)),
            prefix_hit_rate=self._prefix_hit_rate(),
            **self._cached(),
            **self.server_view.result(),
            profiles=[dict(p) for p in self.profiles] or None,
            cache_flush=dict(self.cache_flush) if self.cache_flush else None,
            profiled=self.profiled,
            **self._shape(),
            censored_ttft=len(c_ttft),
            censored_e2e=len(c_e2e),
            mean_ttft_ms_bound=ttft_mean_b,
            median_ttft_ms_bound=ttft_p50_b,
            p99_ttft_ms_bound=ttft_p99_b,
            median_e2e_latency_ms_bound=e2e_p50_b,
            p99_e2e_latency_ms_bound=e2e_p99_b,
            ended_after_close=self.ended_after_close,
            final=self.closed and not self.outstanding,
        )

    def _send_shift(self, at: float, c_ttft: list[float], c_e2e: list[float], figures: tuple[float | None, ...]) -> float | None:
        """StepResult.client_send_shift_ms: `figures` (mean, median, p99 TTFT, median, p99 E2E, in
        s) less the same figures of the observed values each less its request's send wait
        (censored values as they are), the most of them; None where a wait is not known."""
        seen = self.seen_net(at)
        if seen is None or self.ttft_net.count != self.ttft.count or self.e2e_net.count != self.e2e.count:
            return None
        net = [v for v, _ in censored_quantiles(self.ttft_net, seen, c_ttft, (None, 0.5, 0.99))]
        net += [v for v, _ in censored_quantiles(self.e2e_net, (), c_e2e, (0.5, 0.99))]
        moves = [a - b for a, b in zip(figures, net, strict=True) if a is not None and b is not None]
        return _ms(max(0.0, *moves)) if moves else None

    def _percentiles(self, seen: list[float], c_ttft: list[float], c_e2e: list[float]) -> dict:
        """The asked-for percentiles beyond the fixed p50/p99 fields, as bench_serving names
        them (TPOT: every one asked, it has no fixed p50/p99); TTFT and E2E censored as the
        fixed ones are (their `_bound` beside)."""
        qs = [q for q in self.percentiles if q not in (50.0, 99.0)]
        out: dict = {}
        if qs:
            fr = [q / 100.0 for q in qs]
            for (what, vals) in (("ttft", censored_quantiles(self.ttft, seen, c_ttft, fr)),
                                 ("e2e_latency", censored_quantiles(self.e2e, (), c_e2e, fr))):
                for q, (v, b) in zip(qs, vals, strict=False):
                    out[percentile_key(q, what)] = _ms(v)
                    if b:
                        out[percentile_key(q, what) + "_bound"] = True
            for q, v in zip(qs, self.itl.quantiles(fr) if self.itl.count else [None] * len(qs), strict=False):
                out[percentile_key(q, "itl")] = _ms(v)
        for q, v in zip(self.percentiles, self.tpot.quantiles([q / 100.0 for q in self.percentiles]) if self.tpot.count else [None] * len(self.percentiles), strict=False):
            out[percentile_key(q, "tpot")] = _ms(v)
        return out

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

    def _goodput(self, d: float, out_tps: float, at: float) -> dict:
        """Goodput counts like throughput: the window's completions that met every
        per-request bound, per second (request_goodput), and output tok/s scaled by their
        share of the completions' tokens (output_goodput; with no completion in the window,
        by the share of the judged own requests' tokens inside it), so that goodput never
        exceeds throughput and equals it at 100 % attainment. Attainment is over the step's
        own requests, each judged on its window (engine/rules/verdicts.py judge_request); those
        still waiting that already missed a TTFT/E2E bound count as misses (a step whose
        requests all wait in a queue has not met a TTFT bound)."""
        if self.slo is None:
            return {}
        late = sum(1 for rid, rec in self._own.items() if not (rid in self._cut and self._cut[rid].judged) and self.slo.missed_by(rec, at))
        late += sum(1 for t in self._held_t if self.slo.missed_wait(at - t))
        judged = self.judged + late
        ended = self.win_tokens + self.win_failed_tokens  # a failure is a miss with its tokens
        if ended:
            share = self.win_good_tokens / ended
        elif self.win_completed + self.win_failed:
            share = 1.0 if self.win_good == self.win_completed + self.win_failed else 0.0
        else:
            share = self.good_tokens / self.judged_tokens if self.judged_tokens else 0.0
        return {
            "request_goodput": round(self.win_good / d, 4) if d > 0 else 0.0,
            "output_goodput": round(out_tps * share, 3) if d > 0 else 0.0,
            "slo_attainment": self.good / judged if judged else None,  # unrounded: the 0.9 comparison reads it (verdicts.slo_rule)
        }
