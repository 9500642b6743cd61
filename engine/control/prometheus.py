"""`GET /metrics` of the control API (`--control`): redline's own figures as Prometheus text.

Exposition is prometheus_client's (`generate_latest` over a CollectorRegistry of one custom
collector); nothing here writes the text format by hand. Names are `redline_*`, base units:

    redline_ttft_seconds, redline_e2e_seconds        histograms: each request that ended OK,
                                                     at its end (failed and cancelled requests
                                                     stay out, as in every redline figure), so
                                                     their counts equal the session's `ok` rows
    redline_itl_seconds                              histogram: inter-token latencies as they
                                                     arrive (docs/numbers.md)
    redline_requests_total{outcome}                  counter: ok | failed | cancelled
    redline_errors_total{kind}                       counter: failed requests by error kind
    redline_output_tokens_total, redline_input_tokens_total   counters, at each request's end
                                                     (output: requests that did not fail)
    redline_failed_output_tokens_total               counter: output tokens of failed requests
                                                     (never throughput: docs/numbers.md)
    redline_concurrency, redline_target_rate_requests_per_second, redline_in_flight,
    redline_output_tokens_per_second, redline_goodput_requests_per_second, ... gauges

Request-level series carry `target` (with several --url) and `worker` (with --workers N)
labels; ITL carries `target` in one process (workers report ITLs binned by arrival time,
not by request). The buckets resolve 1 ms to 10 min (1, 1.5, 2, 3, 5, 7.5 per decade).

Feeding costs the engine's loop little: a request's end ~4 us, an ITL ~0.5 us (a bisect
into plain lists; prometheus_client's Histogram.observe takes ~3.5 us, too much at 10 k
tokens/s on the loop that stamps bytes). Gauges are read from the engine's latest Snapshot.
A scrape copies the figures on the loop and renders the text on a thread (`freeze`, `render`):
~1 ms for one series, ~25 ms for 3 targets x 4 workers, never a stall of the loop.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import TYPE_CHECKING, Iterable, Iterator, Sequence

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from ..load.probe_lane import is_lane
from ..measure import records

if TYPE_CHECKING:
    from ..core.engine import Engine
    from ..core.snapshot import Snapshot
    from ..measure.gap_batch import GapBatch
    from ..measure.records import RequestRecord

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def latency_buckets() -> tuple[float, ...]:
    """Upper bounds in seconds: 1 ms .. 10 min, 1 / 1.5 / 2 / 3 / 5 / 7.5 per decade (35)."""
    out: list[float] = []
    for exp in range(-3, 3):
        for m in (1.0, 1.5, 2.0, 3.0, 5.0, 7.5):
            v = round(m * 10.0**exp, 6)
            if v < 600.0:
                out.append(v)
    out.append(600.0)
    return tuple(out)


BUCKETS = latency_buckets()


class Hist:
    """One histogram series: per-bucket counts (not cumulative), sum and count."""

    __slots__ = ("counts", "sum", "count")

    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS) + 1)  # the last is +Inf
        self.sum = 0.0
        self.count = 0

    def observe(self, v: float) -> None:
        if v != v:  # NaN: never a latency
            return
        self.counts[bisect_left(BUCKETS, v)] += 1
        self.sum += v
        self.count += 1

    def observe_many(self, vs: Iterable[float]) -> None:
        counts, b = self.counts, BUCKETS
        n, s = 0, 0.0
        for v in vs:
            if v != v:
                continue
            counts[bisect_left(b, v)] += 1
            s += v
            n += 1
        self.sum += s
        self.count += n

    def copy(self) -> Hist:
        h = Hist.__new__(Hist)
        h.counts, h.sum, h.count = list(self.counts), self.sum, self.count
        return h

    def buckets(self) -> list[tuple[str, float]]:
        out, acc = [], 0
        for bound, c in zip(BUCKETS, self.counts, strict=False):
            acc += c
            out.append((_le(bound), float(acc)))
        out.append(("+Inf", float(acc + self.counts[-1])))
        return out


def _le(bound: float) -> str:
    return repr(float(bound))


class PromMetrics:
    """The engine's Prometheus figures: fed by the engine's listener path, read by /metrics."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        cfg = engine.config
        several_targets = bool(cfg.more_urls)
        several_workers = cfg.workers > 1 or cfg.ray is not None
        self.req_labels: tuple[str, ...] = (("target",) if several_targets else ()) + (("worker",) if several_workers else ())
        self.itl_labels: tuple[str, ...] = ("target",) if several_targets and not several_workers else ()
        self.ttft: dict[tuple, Hist] = {}
        self.e2e: dict[tuple, Hist] = {}
        self.itl: dict[tuple, Hist] = {}
        self.requests: dict[tuple, int] = {}  # labels + (outcome,)
        self.errors: dict[tuple, int] = {}  # labels + (kind,)
        self.out_tokens: dict[tuple, int] = {}
        self.failed_out_tokens: dict[tuple, int] = {}
        self.in_tokens: dict[tuple, int] = {}
        if not self.req_labels:  # one series each from the start: a scrape before any request has them at 0
            for d in (self.ttft, self.e2e):
                d[()] = Hist()
            for outcome in (records.OK, records.FAILED, records.CANCELLED):
                self.requests[(outcome,)] = 0
            self.out_tokens[()] = self.failed_out_tokens[()] = self.in_tokens[()] = 0
        if not self.itl_labels:
            self.itl[()] = Hist()

    # -- feeding (the engine's loop) ----------------------------------------------------
    def _labels(self, rec: RequestRecord) -> tuple:
        if not self.req_labels:
            return ()
        return tuple(rec.target if n == "target" else str(rec.worker) for n in self.req_labels)

    def on_end(self, rec: RequestRecord) -> None:
        """A load request ended (calibration and probe-lane requests are not the load's)."""
        if rec.phase == "calibration" or is_lane(rec):
            return
        key = self._labels(rec)
        k = key + (rec.status,)
        self.requests[k] = self.requests.get(k, 0) + 1
        out = self.failed_out_tokens if rec.status == records.FAILED else self.out_tokens
        out[key] = out.get(key, 0) + rec.output_tokens
        self.in_tokens[key] = self.in_tokens.get(key, 0) + rec.input_tokens
        if rec.status == records.OK:
            if rec.ttft is not None:
                _get(self.ttft, key).observe(rec.ttft)
            if rec.e2e is not None:
                _get(self.e2e, key).observe(rec.e2e)
        elif rec.status == records.FAILED:
            k = key + (rec.error_kind or records.ERR_OTHER,)
            self.errors[k] = self.errors.get(k, 0) + 1

    def on_itls(self, rec: RequestRecord | None, itls: Sequence[float]) -> None:
        """Inter-token latencies that arrived (a local request's, or a worker's report)."""
        if not itls:
            return
        key = (rec.target,) if self.itl_labels and rec is not None else ("",) if self.itl_labels else ()
        _get(self.itl, key).observe_many(itls)

    def on_gaps(self, gaps: GapBatch) -> None:
        """A worker's gaps (engine/load/worker_pool.py)."""
        self.on_itls(None, gaps.itl)

    def freeze(self) -> Frozen:
        """A copy of every figure now (on the engine's loop: microseconds), to be rendered
        off it: the text of a few series takes ~1 ms, of dozens (targets x workers) tens."""
        def hists(d: dict[tuple, Hist]) -> dict[tuple, Hist]:
            return {k: h.copy() for k, h in d.items()}

        return Frozen(self.req_labels, self.itl_labels, hists(self.ttft), hists(self.e2e), hists(self.itl),
                      dict(self.requests), dict(self.errors), dict(self.out_tokens), dict(self.in_tokens), self.engine.snapshot,
                      dict(self.failed_out_tokens))

    def exposition(self) -> bytes:
        return render(self.freeze())


class Frozen:
    """The figures of one scrape; read by the collector on any thread."""

    def __init__(self, req_labels: Sequence[str], itl_labels: Sequence[str], ttft: dict[tuple, Hist], e2e: dict[tuple, Hist],
                 itl: dict[tuple, Hist], requests: dict[tuple, int], errors: dict[tuple, int], out_tokens: dict[tuple, int],
                 in_tokens: dict[tuple, int], snapshot: Snapshot, failed_out_tokens: dict[tuple, int] | None = None) -> None:
        self.req_labels, self.itl_labels = req_labels, itl_labels
        self.failed_out_tokens = failed_out_tokens or {}
        self.ttft, self.e2e, self.itl = ttft, e2e, itl
        self.requests, self.errors, self.out_tokens, self.in_tokens = requests, errors, out_tokens, in_tokens
        self.snapshot = snapshot


def render(frozen: Frozen) -> bytes:
    """Prometheus text of a frozen scrape (prometheus_client's generate_latest)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(frozen))
    return generate_latest(registry)


def _get(d: dict, key: tuple) -> Hist:
    h = d.get(key)
    if h is None:
        h = d[key] = Hist()
    return h


class _Collector:
    def __init__(self, m: Frozen) -> None:
        self.m = m

    def collect(self) -> Iterator[Metric]:
        m = self.m
        rl, il = list(m.req_labels), list(m.itl_labels)
        for name, doc, series, labels in (
            ("redline_ttft_seconds", "Time to first token of each request that ended OK (from its intended send time in rate mode).", m.ttft, rl),
            ("redline_e2e_seconds", "End-to-end latency of each request that ended OK.", m.e2e, rl),
            ("redline_itl_seconds", "Inter-token latencies as they arrive (bench_serving's definition for the API).", m.itl, il),
        ):
            fam = HistogramMetricFamily(name, doc, labels=labels)
            for key, h in sorted(series.items()):
                fam.add_metric(list(key), h.buckets(), h.sum)
            yield fam
        counted = CounterMetricFamily("redline_requests", "Load requests ended, by outcome (ok, failed, cancelled).", labels=rl + ["outcome"])
        for key, n in sorted(m.requests.items()):
            counted.add_metric(list(key), n)
        yield counted
        counted = CounterMetricFamily("redline_errors", "Failed load requests, by error kind.", labels=rl + ["kind"])
        for key, n in sorted(m.errors.items()):
            counted.add_metric(list(key), n)
        yield counted
        for name, doc, tokens in (
            ("redline_output_tokens", "Output tokens of ended load requests that did not fail (the server's usage).", m.out_tokens),
            ("redline_failed_output_tokens", "Output tokens of failed load requests (not throughput).", m.failed_out_tokens),
            ("redline_input_tokens", "Input tokens of ended load requests (the server's usage).", m.in_tokens),
        ):
            counted = CounterMetricFamily(name, doc, labels=rl)
            for key, n in sorted(tokens.items()):
                counted.add_metric(list(key), n)
            yield counted
        yield from _gauges(m.snapshot)


def _gauge(name: str, doc: str, value: float | None, labels: dict | None = None) -> GaugeMetricFamily | None:
    if value is None:
        return None
    fam = GaugeMetricFamily(name, doc, labels=list(labels or {}))
    fam.add_metric(list((labels or {}).values()), float(value))
    return fam


def _gauges(s: Snapshot) -> Iterator[GaugeMetricFamily]:
    open_loop = s.mode != "concurrency"
    pairs = [
        ("redline_concurrency", "The set concurrency C (in rate mode: the in-flight cap).", s.max_concurrency if open_loop else s.target_c),
        ("redline_target_rate_requests_per_second", "The open loop's target request rate (rate mode only; a trace's speed factor in trace mode).", s.target_rate if open_loop else None),
        ("redline_in_flight", "Requests on the wire now.", s.in_flight),
        ("redline_backing_off", "Load slots waiting after an overload answer (429/503).", s.backing_off),
        ("redline_output_tokens_per_second", "Output tokens/s over the live window, counted as tokens arrive.", s.output_tok_s),
        ("redline_input_tokens_per_second", "Input tokens/s over the live window.", s.input_tok_s),
        ("redline_requests_per_second", "Completed requests/s over the live window.", s.req_s),
        ("redline_errors_per_second", "Failed requests/s over the live window.", s.errors_s),
        ("redline_goodput_requests_per_second", "Requests/s meeting every per-request SLO (with --slo only).", s.goodput_req_s),
        ("redline_goodput_tokens_per_second", "Output tokens/s of requests meeting every per-request SLO (with --slo only).", s.goodput_tok_s),
        ("redline_paused", "1 while the load is paused.", 1.0 if s.state == "paused" else 0.0),
        ("redline_probing", "1 during the C=1 probe.", 1.0 if s.probing else 0.0),
        ("redline_server_gone", "1 while every target is gone.", 1.0 if s.state == "server gone" else 0.0),
        ("redline_elapsed_seconds", "Seconds since the load started.", s.elapsed_s),
        ("redline_step", "Index of the step running now.", s.current_step.index if s.current_step is not None else None),
    ]
    for name, doc, v in pairs:
        fam = _gauge(name, doc, v)
        if fam is not None:
            yield fam
    fam = GaugeMetricFamily("redline_info", "The session: redline's target, model and load mode (value 1).", labels=["url", "model", "server", "mode", "state"])
    fam.add_metric([s.url, s.model, s.server_kind, s.mode, s.state], 1.0)
    yield fam
    if s.targets:
        fam = GaugeMetricFamily("redline_target_output_tokens_per_second", "Output tokens/s per target (live window).", labels=["target"])
        for row in s.targets:
            fam.add_metric([str(row.get("url", ""))], float(row.get("output_tok_s") or 0.0))
        yield fam
    if s.workers:
        fam = GaugeMetricFamily("redline_worker_output_tokens_per_second", "Output tokens/s per worker process (its session average).", labels=["worker"])
        share = GaugeMetricFamily("redline_worker_share", "Each worker's share of C (or of the in-flight cap).", labels=["worker"])
        for row in s.workers:
            fam.add_metric([str(row.get("worker"))], float(row.get("output_tok_s") or 0.0))
            share.add_metric([str(row.get("worker"))], float(row.get("share") or 0))
        yield fam
        yield share
