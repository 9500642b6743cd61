"""Where every measurement lands: the load's requests' hooks, the harvest of in-flight
requests' gaps, the workers' replayed reports and the probe lane's own subscriber.

Each target's Sender fires its requests' hooks (engine/measure/hooks.py) to its TargetStats
(engine/core/target_stats.py) and here (subscribed in engine/core/wiring.py); worker processes'
reports are replayed into the same hooks (engine/load/worker_pool.py). From here each value
goes to the live windows (engine/measure/live_metrics.py), the steps (engine/measure/step_book.py),
the run's totals, the Prometheus figures (engine/control/prometheus.py, with --control: the
harvest's gaps here, ended requests subscribed beside) and the session log (engine/session/writer.py).

- A failed request leaves every latency figure (its first token and its gaps are taken back)
  and the output tok/s (its tokens, counted as they arrived, move to failed_output_tok_s);
  a cancelled one (the client's abort, the run's end) keeps what the server served it.
- Start-up's own requests (phase "calibration") are counted, never measured.
- The probe lane's requests have their own live window and rows, never the load's figures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, Sequence

from ..load.probe_lane import LaneStats, is_lane
from ..load.sender import Sender
from ..measure import records
from ..measure.accumulator import new_gaps
from ..measure.gap_batch import GapBatch
from ..measure.live_metrics import LiveMetrics
from ..measure.records import Clock, RequestRecord
from ..measure.run_totals import RunTotals
from ..measure.step_book import StepBook

if TYPE_CHECKING:
    from ..measure.hooks import TokensHook
    from ..session import SessionWriter
    from .event_log import EventLog


class GapExport(Protocol):
    """What takes the load's inter-token gaps as they are harvested (engine/control/prometheus.py
    PromMetrics, with --control)."""

    def on_itls(self, rec: RequestRecord | None, itls: Sequence[float]) -> None: ...
    def on_gaps(self, gaps: GapBatch) -> None: ...


@dataclass
class FailureStreak:
    """The load's failed requests in a row (a completed one ends the streak; a cancelled one and
    start-up's own requests change nothing) and the server's reason for the last one: its status
    and message where it gave them (`HTTP 404: The model 'llama-3-70b' does not exist.`,
    `in-stream 503: The request queue is full.`), else what went wrong (`connection refused`).
    CONSECUTIVE_FAILURES_END of them (engine/constants.py) end a preset's step or probe as
    `errors`, and a headless run."""

    count: int = 0
    kind: str = ""  # the last failure's kind (records.ERROR_KINDS)
    reason: str = ""

    def on_end(self, rec: RequestRecord) -> None:
        if rec.phase == "calibration":
            return
        if rec.status == records.OK:
            self.count = 0
        elif rec.status == records.FAILED:
            self.count += 1
            self.kind = rec.error_kind
            self.reason = rec.error_text or rec.error_kind


class Measurements:
    """A subscriber of every load request's hooks (engine/core/wiring.py), and the harvest."""

    def __init__(self, metrics: LiveMetrics, book: StepBook, events: EventLog, clock: Clock) -> None:
        self.metrics = metrics
        self.book = book
        self.events = events
        self.clock = clock
        self.lane_stats = LaneStats()
        self.session: SessionWriter | None = None  # set once the session directory is open
        self.prom: GapExport | None = None  # with --control (engine/core/wiring.py with_prometheus)
        self.load_sender: Sender | None = None  # every load Sender shares its in-flight records and cursor
        self.lane_sender: Sender | None = None
        self.ended = 0  # the load's requests that ended (start-up's own not counted)
        self.totals = RunTotals()  # the whole run (engine/measure/run_totals.py), for the end summary
        self.streak = FailureStreak()  # the load's failed requests in a row, and the server's last reason
        # the load's output tokens received, and the arrival of the latest (a preset's stall
        # rule, engine/run/run_watch.py, watches the count: worker processes report it late)
        self.tokens_received = 0
        self.last_token_t: float | None = None
        # every load Sender's tokens hook (engine/core/wiring.py load_hooks): this is batched on
        # them, and flush_tokens hands what they hold to every batched listener
        self.token_hooks: list[TokensHook] = []

    # -- the load's requests' hooks -----------------------------------------------------------
    def on_send(self, rec: RequestRecord) -> None:
        self.book.on_send(rec)
        if rec.phase != "calibration":
            self.metrics.on_send(rec)
        if rec.t_intended is not None:
            self.metrics.on_schedule_lag(rec.t_send, rec.t_send - rec.t_intended)

    def on_first(self, rec: RequestRecord) -> None:
        if rec.phase != "calibration":  # start-up's own requests are not the load's
            self.metrics.on_first(rec)
        self.book.on_first(rec)

    def on_tokens(self, t: float, n: int) -> None:
        self.metrics.on_tokens(t, n)
        self.book.on_tokens(t, n)
        self.tokens_received += n
        if self.last_token_t is None or t > self.last_token_t:
            self.last_token_t = t

    def on_token_reads(self, ts: Sequence[float], ns: Sequence[int]) -> None:
        """on_tokens of each read of a batch (engine/measure/hooks.py TokensHook.flush)."""
        self.metrics.on_token_reads(ts, ns)
        self.book.on_token_reads(ts, ns)
        self.tokens_received += sum(ns)
        t = max(ts)
        if self.last_token_t is None or t > self.last_token_t:
            self.last_token_t = t

    def flush_tokens(self) -> None:
        """The reads' tokens every load Sender's hook holds, to its listeners now (this one
        and each target's TargetStats): before a harvest, a step's close, a snapshot."""
        for hook in self.token_hooks:
            hook.flush()

    def on_end(self, rec: RequestRecord) -> None:
        self.harvest(rec)
        # failed requests stay out of every latency figure; a cancelled one (the client's abort,
        # the run's end) keeps what the server served it
        if rec.status == records.FAILED and not is_lane(rec):
            self.unmeasure_gaps(GapBatch.of_record(rec))
            if rec.phase != "calibration":
                self.metrics.unmeasure_first(rec)
            # ... and its tokens are no throughput: they move to failed_output_tok_s
            credits = rec.credits()
            self.metrics.unmeasure_tokens(credits)
            self.book.remove_tokens(credits)
        self.book.on_end(rec)  # first: the request's one SLO verdict (rec.slo_met), which the live goodput reads
        self.metrics.on_request_end(rec, measured=rec.phase != "calibration")  # start-up's requests: counted, not measured
        self.streak.on_end(rec)
        self.totals.on_end(rec)
        if rec.phase != "calibration":
            self.ended += 1
        if self.session is not None:
            self.session.add_record(rec, self.clock)  # scrubs error text before cutting it
        if rec.status == records.FAILED:
            self.events.failed(rec.error_kind, rec.error_text)  # its target's watch: TargetStats.on_end

    # -- gaps ---------------------------------------------------------------------------------
    def unmeasure_gaps(self, gaps: GapBatch) -> None:
        """A failed request's gaps leave the live window and the steps' ITL."""
        if not gaps:
            return
        for t, itls in gaps.by_second():
            self.metrics.unmeasure_gaps(t, itls)
        self.book.remove_gaps(gaps)

    def on_remote_gaps(self, gaps: GapBatch) -> None:
        """Gaps measured in a worker (engine/load/worker_pool.py), by the arrival of their closing chunk."""
        self._feed_load(gaps)
        if self.prom is not None:
            self.prom.on_gaps(gaps)

    def _feed_load(self, gaps: GapBatch) -> None:
        """The load's gaps, from any number of requests, into the live window (one call per
        second they arrived in) and the open steps (one call)."""
        for t, itls in gaps.by_second():
            self.metrics.on_gaps(t, itls)
        self.book.on_gaps(gaps)

    def harvest_all(self) -> None:
        """Feed every in-flight request's gaps that arrived since the last harvest. The load's
        go in together (engine/measure/gap_batch.py), one call per histogram rather than one
        per request: at C=256 a harvest every 0.05 s finds a chunk or two per request, and the
        per-call cost was most of its time (the loop is held meanwhile)."""
        self.flush_tokens()
        load = GapBatch()
        for sender in (self.load_sender, self.lane_sender):
            if sender is not None:
                for rec in list(sender.in_flight.values()):
                    self._take(rec, sender, load)
        if load:
            self._feed_load(load)

    def harvest(self, rec: RequestRecord, sender: Sender | None = None) -> None:
        """Feed the gaps of `rec` that arrived since the last harvest (by arrival time)."""
        sender = sender or self.load_sender
        assert sender is not None
        load = GapBatch()
        self._take(rec, sender, load)
        if load:
            self._feed_load(load)

    def _take(self, rec: RequestRecord, sender: Sender, load: GapBatch) -> None:
        """`rec`'s gaps since its cursor (the cursor moves past them): a probe's to the lane
        now; the load's into `load`, which the caller feeds (and Prometheus, with its
        target, now)."""
        cursor = sender.cursor
        start = cursor.get(rec.rid, 0)
        if start == len(rec.chunk_times):
            return  # nothing new (most requests, most harvests)
        if is_lane(rec):
            cursor[rec.rid], gaps = new_gaps(rec, start)
            if gaps:
                self._feed_lane(gaps)
            return
        n0 = len(load.itl)
        cursor[rec.rid] = load.take(rec, start)
        if self.prom is not None and len(load.itl) > n0:
            self.prom.on_itls(rec, load.itl[n0:])

    def _feed_lane(self, gaps: GapBatch) -> None:
        if gaps.itl:
            self.lane_stats.itl.add_many(gaps.itl_t[-1], gaps.itl)
        self.book.on_lane_gaps(gaps)


class LaneListener:
    """The probe lane's requests' subscriber: their own live window and step figures, their own
    rows, never the load's tokens or latencies."""

    def __init__(self, measurements: Measurements) -> None:
        self.r = measurements

    def on_send(self, rec: RequestRecord) -> None:
        self.r.lane_stats.waiting[rec.rid] = rec.t_start

    def on_first(self, rec: RequestRecord) -> None:
        r = self.r
        r.lane_stats.waiting.pop(rec.rid, None)
        if rec.t_first is not None and rec.ttft is not None:
            r.lane_stats.ttft.add(rec.t_first, rec.ttft)
        r.book.on_lane_first(rec)

    def on_tokens(self, t: float, n: int) -> None:
        pass  # not the load's throughput

    def on_end(self, rec: RequestRecord) -> None:
        r = self.r
        r.lane_stats.waiting.pop(rec.rid, None)
        if r.lane_sender is not None:
            r.harvest(rec, r.lane_sender)
        if rec.status == records.OK:
            r.lane_stats.completed += 1
        elif rec.status == records.FAILED:
            r.lane_stats.failed += 1
        if r.session is not None:
            r.session.add_record(rec, r.clock)
