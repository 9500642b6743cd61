"""The server's own view of its load, from SGLang's or vLLM's Prometheus /metrics.

Aggregation over label sets:

- Series that differ only in ``tp_rank`` / ``pp_rank`` / ``moe_ep_rank`` / ``attn_tp_rank`` are
  views of one scheduler (SGLang may report from several ranks of the same replica): the
  largest value is taken, never the sum.
- Everything else (vLLM ``engine``, SGLang ``dp_rank``, several models) is a separate
  replica: request counts and throughputs are summed across them.
- KV-cache usage is a ratio: the fullest replica is reported (max), since that is the one
  that queues first.

Prefix cache: the counters of prompt tokens looked up and found (vLLM v1
``vllm:prefix_cache_queries_total`` / ``vllm:prefix_cache_hits_total``; SGLang
``sglang:prompt_tokens_total`` / ``sglang:cached_tokens_total``, summed over its
``cache_source`` labels) give the hit rate between scrapes: :class:`ServerMetricsPoller` reports
it over its last ``PREFIX_WINDOW_S`` seconds. Without them, the server's own gauge (SGLang
``sglang:cache_hit_rate``: its last prefill batch; vLLM v0 ``vllm:gpu_prefix_cache_hit_rate``),
averaged over replicas.

Beyond load and the prefix cache: preemptions (vLLM ``vllm:num_preemptions_total``, SGLang's
retractions ``sglang:num_retracted_requests_total``: the KV cache filled and running requests
went back to the queue), counted over the poller's recent window too; speculative decoding
(SGLang's gauges ``sglang:spec_accept_length`` and ``sglang:spec_accept_rate``; vLLM's counters
``vllm:spec_decode_num_accepted_tokens_total`` / ``num_drafts_total`` /
``num_draft_tokens_total``, turned into the same two figures over the recent window).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import deque
from collections.abc import Callable

import httpx

from .poller import PromPoller
from .prom_text import PromParser, PromSamples, parse_prometheus
from .types import ServerSample

__all__ = [
    "CounterWindow",
    "PREFIX_LOOKBACK_S",
    "PREFIX_WINDOW_S",
    "SGLANG_METRICS",
    "VLLM_METRICS",
    "PrefixRateWindow",
    "ServerMetricsPoller",
    "parse_server_metrics",
    "server_metrics_parser",
    "server_sample_from_samples",
    "spec_from_counters",
]

# Labels that name a rank *inside* one scheduler replica (replicated views, not shards).
_REPLICA_VIEW_LABELS = frozenset({"tp_rank", "pp_rank", "moe_ep_rank", "attn_tp_rank"})

SGLANG_METRICS = {
    "running": "sglang:num_running_reqs",
    "queued": "sglang:num_queue_reqs",
    "kv_usage": "sglang:token_usage",
    "gen_throughput": "sglang:gen_throughput",
    "gen_tokens_total": "sglang:generation_tokens_total",
    "prompt_tokens_total": "sglang:prompt_tokens_total",
    "prefix_hit_rate": "sglang:cache_hit_rate",  # gauge: the last prefill batch
    "prefix_hits_total": "sglang:cached_tokens_total",  # prompt tokens found in the cache
    "preemptions_total": "sglang:num_retracted_requests_total",  # retractions: KV cache full
    "spec_accept_length": "sglang:spec_accept_length",  # gauge: tokens per verify step
    "spec_accept_rate": "sglang:spec_accept_rate",  # gauge: accepted / draft tokens
}

VLLM_METRICS = {
    "running": "vllm:num_requests_running",
    "queued": "vllm:num_requests_waiting",
    "kv_usage": "vllm:kv_cache_usage_perc",
    "kv_usage_old": "vllm:gpu_cache_usage_perc",  # vLLM v0 name, also a 0..1 ratio
    "gen_throughput": "vllm:avg_generation_throughput_toks_per_s",  # vLLM v0 only
    "gen_tokens_total": "vllm:generation_tokens_total",
    "prompt_tokens_total": "vllm:prompt_tokens_total",
    "prefix_queries_total": "vllm:prefix_cache_queries_total",  # in tokens (v1)
    "prefix_hits_total": "vllm:prefix_cache_hits_total",  # in tokens (v1)
    "prefix_hit_rate_old": "vllm:gpu_prefix_cache_hit_rate",  # vLLM v0 gauge, 0..1
    "preemptions_total": "vllm:num_preemptions_total",
    "spec_accepted_total": "vllm:spec_decode_num_accepted_tokens_total",
    "spec_drafts_total": "vllm:spec_decode_num_drafts_total",
    "spec_draft_tokens_total": "vllm:spec_decode_num_draft_tokens_total",
}

#: Seconds of scrapes the poller's prefix-cache hit rate covers (at least two scrapes) ...
PREFIX_WINDOW_S = 10.0
#: ... reaching back this far when no prompt token was counted in it (SGLang counts at a finish)
PREFIX_LOOKBACK_S = 60.0

_WANTED = tuple(SGLANG_METRICS.values()) + tuple(VLLM_METRICS.values())


def _finite(series: list[tuple[dict[str, str], float]] | None) -> list[tuple[dict[str, str], float]]:
    return [(lab, v) for lab, v in (series or ()) if math.isfinite(v)]


def _totals(series: list[tuple[dict[str, str], float]] | None) -> list[tuple[dict[str, str], float]] | None:
    """A request count's totals only. Under ``--enable-priority-scheduling`` (0.5.23) SGLang
    writes a queue count's total under ``priority=""`` and one series per priority beside it
    (observability/metrics_collector.py ``_log_gauge_queue_count``): those are left out. (Its
    counters are split by the request's priority instead, ``tokenizer_manager.collect_metrics``:
    their series are parts, summed as any.)"""
    if not series or not any("priority" in lab for lab, _ in series):
        return series
    return [(lab, v) for lab, v in series if not lab.get("priority")]


def _per_replica(series: list[tuple[dict[str, str], float]] | None) -> list[float]:
    """One value per replica: the max over its rank views (labels in _REPLICA_VIEW_LABELS)."""
    groups: dict[tuple[tuple[str, str], ...], float] = {}
    for labels, v in _finite(series):
        key = tuple(sorted((k, val) for k, val in labels.items() if k not in _REPLICA_VIEW_LABELS))
        groups[key] = max(groups.get(key, v), v)
    return list(groups.values())


def _sum_replicas(series: list[tuple[dict[str, str], float]] | None) -> float | None:
    """Max within one replica (rank views), summed across replicas. None if absent."""
    values = _per_replica(series)
    return float(sum(values)) if values else None


def _max(series: list[tuple[dict[str, str], float]] | None) -> float | None:
    rows = _finite(series)
    return max(v for _, v in rows) if rows else None


def _mean_replicas(series: list[tuple[dict[str, str], float]] | None) -> float | None:
    """A ratio per replica (max within one replica's rank views), averaged across replicas."""
    values = _per_replica(series)
    return float(sum(values) / len(values)) if values else None


def _ratio(value: float | None) -> float | None:
    return min(1.0, max(0.0, value)) if value is not None else None


def server_sample_from_samples(samples: PromSamples, t: float) -> ServerSample | None:
    """Build a ServerSample from parsed /metrics samples; None when neither SGLang's nor
    vLLM's load gauges are present."""
    sg = SGLANG_METRICS
    if any(samples.get(sg[k]) for k in ("running", "queued", "kv_usage", "gen_throughput")):
        prompts = _sum_replicas(samples.get(sg["prompt_tokens_total"]))
        hits = _sum_replicas(samples.get(sg["prefix_hits_total"]))
        if hits is None and prompts is not None:
            # both counted when a request finishes (TokenizerMetricsCollector
            # observe_one_finished_request), cached_tokens_total only when it is > 0: a series
            # absent beside its prompt tokens is 0 cached so far
            hits = 0.0
        # the last prefill batch's hit rate; 0.5.9 writes 0 at every decode log
        # (scheduler_metrics_mixin.py log_decode_stats), so a 0 says nothing
        gauge = _mean_replicas(samples.get(sg["prefix_hit_rate"]))
        length, rate = _spec_gauges(samples)
        return ServerSample(
            t=t,
            kind="sglang",
            running=_sum_replicas(_totals(samples.get(sg["running"]))),
            queued=_sum_replicas(_totals(samples.get(sg["queued"]))),
            kv_usage=_max(samples.get(sg["kv_usage"])),
            gen_throughput=_sum_replicas(samples.get(sg["gen_throughput"])),
            gen_tokens_total=_sum_replicas(samples.get(sg["gen_tokens_total"])),
            prompt_tokens_total=prompts,
            prefix_hit_rate=_ratio(gauge) if gauge else None,
            prefix_queries_total=prompts if hits is not None else None,
            prefix_hits_total=hits,
            preemptions_total=_sum_replicas(samples.get(sg["preemptions_total"])),
            spec_accept_length=length,
            spec_acceptance_rate=rate,
        )
    vl = VLLM_METRICS
    if any(samples.get(vl[k]) for k in ("running", "queued", "kv_usage", "kv_usage_old")):
        kv = _max(samples.get(vl["kv_usage"]))
        if kv is None:
            kv = _max(samples.get(vl["kv_usage_old"]))
        queries = _sum_replicas(samples.get(vl["prefix_queries_total"]))
        hits = _sum_replicas(samples.get(vl["prefix_hits_total"]))
        return ServerSample(
            t=t,
            kind="vllm",
            running=_sum_replicas(samples.get(vl["running"])),
            queued=_sum_replicas(samples.get(vl["queued"])),
            kv_usage=kv,
            gen_throughput=_sum_replicas(samples.get(vl["gen_throughput"])),
            gen_tokens_total=_sum_replicas(samples.get(vl["gen_tokens_total"])),
            prompt_tokens_total=_sum_replicas(samples.get(vl["prompt_tokens_total"])),
            prefix_hit_rate=_ratio(_mean_replicas(samples.get(vl["prefix_hit_rate_old"]))),
            prefix_queries_total=queries if hits is not None else None,
            prefix_hits_total=hits if queries is not None else None,
            preemptions_total=_sum_replicas(samples.get(vl["preemptions_total"])),
            spec_accepted_total=_sum_replicas(samples.get(vl["spec_accepted_total"])),
            spec_drafts_total=_sum_replicas(samples.get(vl["spec_drafts_total"])),
            spec_draft_tokens_total=_sum_replicas(samples.get(vl["spec_draft_tokens_total"])),
        )
    return None


def _spec_gauges(samples: PromSamples) -> tuple[float | None, float | None]:
    """SGLang's speculative-decoding gauges, None when it is off. SGLang exports them always,
    0.0 without speculative decoding (both versions: ``spec_accept_length = 0`` when
    ``spec_algorithm.is_none()``); on, a verify step yields at least one token, so a length
    below 1 (0 before its first decode log too) is no reading."""
    length = _mean_replicas(samples.get(SGLANG_METRICS["spec_accept_length"]))
    if length is None or length < 1.0:
        return None, None
    return length, _ratio(_mean_replicas(samples.get(SGLANG_METRICS["spec_accept_rate"])))


def server_metrics_parser() -> PromParser:
    """A caching parser restricted to the metrics read here (one per scraped endpoint)."""
    return PromParser(names=_WANTED)


def parse_server_metrics(text: str, t: float, *, parser: PromParser | None = None) -> ServerSample | None:
    """Parse an SGLang or vLLM /metrics body taken at ``t`` (perf_counter seconds).

    Returns None when neither family is present (e.g. SGLang started without
    --enable-metrics, or another server). Only the metrics used here are parsed; raises
    TelemetryParseError when those lines are malformed. ``parser`` (from
    ``server_metrics_parser()``) makes repeated scrapes of one endpoint cheap.
    """
    samples = parser.parse(text) if parser is not None else parse_prometheus(text, names=_WANTED)
    return server_sample_from_samples(samples, t)


class PrefixRateWindow:
    """The prefix-cache hit rate over the last ``window_s`` seconds of samples, from the
    server's cumulative counters of prompt tokens looked up and found.

    SGLang counts both when a request *finishes* (TokenizerMetricsCollector
    ``observe_one_finished_request``): with long outputs a 10 s window may hold no finish. The
    window then reaches further back, up to ``lookback_s``, to the last prompt tokens counted."""

    def __init__(self, window_s: float = PREFIX_WINDOW_S, lookback_s: float = PREFIX_LOOKBACK_S) -> None:
        self.window_s = window_s
        self.lookback_s = max(lookback_s, window_s)
        self._points: deque[tuple[float, float, float]] = deque()  # (t, queries, hits)
        self._seen = False  # the counters have been in a sample of this server

    def update(self, sample: ServerSample) -> ServerSample:
        """``sample`` with ``prefix_hit_rate`` from its counters: hits over queries since the
        oldest sample of the window (the latest one at or before ``t - window_s`` where there
        is one; further back while no prompt token came since). None until two samples, and
        while no prompt token came in the lookback. A counter absent from a sample counts 0 (SGLang's
        series appear with their first increment: the first hits are counted); until the
        counters were ever there, the server's gauge stays. A counter going back (a restarted
        server) starts the window again."""
        q, h = sample.prefix_queries_total, sample.prefix_hits_total
        points = self._points
        self._seen = self._seen or (q is not None and h is not None)
        q, h = q or 0.0, h or 0.0
        if points and (q < points[-1][1] or h < points[-1][2]):
            points.clear()
        points.append((sample.t, q, h))
        while len(points) >= 2 and points[1][0] <= sample.t - self.lookback_s:
            points.popleft()
        if not self._seen:
            return sample
        cut = sample.t - self.window_s
        start = max((i for i, p in enumerate(points) if p[0] <= cut), default=0)
        rate = None
        for i in range(start, -1, -1):  # a window with no prompt token counted reaches back
            _, q0, h0 = points[i]
            if q - q0 > 0:
                rate = _ratio((h - h0) / (q - q0))
                break
        return dataclasses.replace(sample, prefix_hit_rate=rate)


class CounterWindow:
    """Deltas of some cumulative counters over the last ``window_s`` seconds of samples (the
    oldest point kept is the latest at or before ``t - window_s``). A counter absent from a
    sample counts 0: SGLang's counters have no series until their first increment
    (``sglang:num_retracted_requests_total`` appears with the first retraction), so the first
    burst is counted, not taken for the baseline. Nothing is reported until the counters have
    been seen; a counter going back (a restarted server) starts the window again."""

    def __init__(self, names: tuple[str, ...], window_s: float = PREFIX_WINDOW_S) -> None:
        self.names = names
        self.window_s = window_s
        self._points: deque[tuple[float, tuple[float, ...]]] = deque()
        self._seen = False

    def update(self, sample: ServerSample) -> tuple[float, ...] | None:
        """The counters' increase over the window, None until two samples and until they
        were first seen."""
        raw = tuple(getattr(sample, n) for n in self.names)
        self._seen = self._seen or any(v is not None for v in raw)
        values = tuple(v or 0.0 for v in raw)
        points = self._points
        if points and any(v < p for v, p in zip(values, points[-1][1], strict=False)):
            points.clear()
        points.append((sample.t, values))
        while len(points) >= 2 and points[1][0] <= sample.t - self.window_s:
            points.popleft()
        if len(points) < 2 or not self._seen:
            return None
        first = points[0][1]
        return tuple(v - f for v, f in zip(values, first, strict=False))


def spec_from_counters(accepted: float, drafts: float, draft_tokens: float) -> tuple[float | None, float | None]:
    """vLLM's speculative-decoding counters (their increase over some time) -> (accept length:
    1 + accepted / drafts, acceptance rate: accepted / draft tokens)."""
    length = 1.0 + accepted / drafts if drafts > 0 else None
    rate = _ratio(accepted / draft_tokens) if draft_tokens > 0 else None
    return length, rate


class ServerMetricsPoller(PromPoller):
    """Fetches and parses a server's /metrics; never raises on network or parse errors.

    When the server gives no throughput gauge (vLLM v1), ``gen_throughput`` is derived
    from the generated-tokens counter between consecutive polls. The prefix-cache hit rate
    comes from the server's counters over the last ``PREFIX_WINDOW_S`` seconds of polls
    (:class:`PrefixRateWindow`).
    """

    def __init__(
        self,
        client: httpx.AsyncClient,
        url: str,
        *,
        timeout_s: float = 2.0,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        super().__init__(client, url, _WANTED, timeout_s=timeout_s, clock=clock)
        self.last: ServerSample | None = None
        self._prev_counter: tuple[float, float] | None = None  # (t, gen_tokens_total)
        self._prefix = PrefixRateWindow()
        self._preempt = CounterWindow(("preemptions_total",))
        self._spec = CounterWindow(("spec_accepted_total", "spec_drafts_total", "spec_draft_tokens_total"))

    async def poll(self) -> ServerSample | None:
        """One GET + parse. None on any failure, with the reason in ``.last_error``."""
        got = await self._scrape()
        if got is None:
            return None
        samples, text, t = got
        sample = server_sample_from_samples(samples, t)
        if sample is None:
            self._prev_counter = None
            self._nothing(text, "no SGLang or vLLM metrics (SGLang needs --enable-metrics)")
            return None
        sample = self._with_windows(self._prefix.update(self._with_rate(sample)))
        self.last_error = None
        self.last = sample
        return sample

    def _with_windows(self, sample: ServerSample) -> ServerSample:
        """Preemptions over the recent window; vLLM's speculative-decoding figures from its
        counters over it (SGLang gives them as gauges)."""
        out = sample
        d = self._preempt.update(sample)
        if d is not None:
            out = dataclasses.replace(out, preemptions_recent=d[0])
        d = self._spec.update(sample)
        if d is not None and sample.spec_accept_length is None:
            length, rate = spec_from_counters(*d)
            out = dataclasses.replace(out, spec_accept_length=length, spec_acceptance_rate=rate)
        return out

    def _with_rate(self, sample: ServerSample) -> ServerSample:
        counter = sample.gen_tokens_total
        prev, self._prev_counter = self._prev_counter, (
            (sample.t, counter) if counter is not None else None
        )
        if sample.gen_throughput is not None or counter is None or prev is None:
            return sample
        dt = sample.t - prev[0]
        dn = counter - prev[1]
        if dt <= 0 or dn < 0:  # counter reset (server restart): wait for the next poll
            return sample
        return dataclasses.replace(sample, gen_throughput=dn / dt)
