"""The server's own view of its load, from SGLang's or vLLM's Prometheus /metrics.

Aggregation over label sets:

- Series that differ only in ``tp_rank`` / ``pp_rank`` / ``moe_ep_rank`` / ``attn_tp_rank`` are
  views of one scheduler (SGLang may report from several ranks of the same replica): the
  largest value is taken, never the sum.
- Everything else (vLLM ``engine``, SGLang ``dp_rank``, several models) is a separate
  replica: request counts and throughputs are summed across them.
- KV-cache usage is a ratio: the fullest replica is reported (max), since that is the one
  that queues first.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable

import httpx

from .prom import (
    PromParser,
    PromSamples,
    parse_prometheus,
)
from .poller import PromPoller
from .types import ServerSample

__all__ = [
    "SGLANG_METRICS",
    "VLLM_METRICS",
    "ServerMetricsPoller",
    "parse_server_metrics",
    "server_metrics_parser",
    "server_sample_from_samples",
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
}

VLLM_METRICS = {
    "running": "vllm:num_requests_running",
    "queued": "vllm:num_requests_waiting",
    "kv_usage": "vllm:kv_cache_usage_perc",
    "kv_usage_old": "vllm:gpu_cache_usage_perc",  # vLLM v0 name, also a 0..1 ratio
    "gen_throughput": "vllm:avg_generation_throughput_toks_per_s",  # vLLM v0 only
    "gen_tokens_total": "vllm:generation_tokens_total",
    "prompt_tokens_total": "vllm:prompt_tokens_total",
}

_WANTED = tuple(SGLANG_METRICS.values()) + tuple(VLLM_METRICS.values())


def _finite(series: list[tuple[dict[str, str], float]] | None) -> list[tuple[dict[str, str], float]]:
    return [(lab, v) for lab, v in (series or ()) if math.isfinite(v)]


def _sum_replicas(series: list[tuple[dict[str, str], float]] | None) -> float | None:
    """Max within one replica (rank views), summed across replicas. None if absent."""
    rows = _finite(series)
    if not rows:
        return None
    groups: dict[tuple[tuple[str, str], ...], float] = {}
    for labels, v in rows:
        key = tuple(sorted((k, val) for k, val in labels.items() if k not in _REPLICA_VIEW_LABELS))
        groups[key] = max(groups.get(key, v), v)
    return float(sum(groups.values()))


def _max(series: list[tuple[dict[str, str], float]] | None) -> float | None:
    rows = _finite(series)
    return max(v for _, v in rows) if rows else None


def server_sample_from_samples(samples: PromSamples, t: float) -> ServerSample | None:
    """Build a ServerSample from parsed /metrics samples; None when neither SGLang's nor
    vLLM's load gauges are present."""
    sg = SGLANG_METRICS
    if any(samples.get(sg[k]) for k in ("running", "queued", "kv_usage", "gen_throughput")):
        return ServerSample(
            t=t,
            kind="sglang",
            running=_sum_replicas(samples.get(sg["running"])),
            queued=_sum_replicas(samples.get(sg["queued"])),
            kv_usage=_max(samples.get(sg["kv_usage"])),
            gen_throughput=_sum_replicas(samples.get(sg["gen_throughput"])),
            gen_tokens_total=_sum_replicas(samples.get(sg["gen_tokens_total"])),
            prompt_tokens_total=_sum_replicas(samples.get(sg["prompt_tokens_total"])),
        )
    vl = VLLM_METRICS
    if any(samples.get(vl[k]) for k in ("running", "queued", "kv_usage", "kv_usage_old")):
        kv = _max(samples.get(vl["kv_usage"]))
        if kv is None:
            kv = _max(samples.get(vl["kv_usage_old"]))
        return ServerSample(
            t=t,
            kind="vllm",
            running=_sum_replicas(samples.get(vl["running"])),
            queued=_sum_replicas(samples.get(vl["queued"])),
            kv_usage=kv,
            gen_throughput=_sum_replicas(samples.get(vl["gen_throughput"])),
            gen_tokens_total=_sum_replicas(samples.get(vl["gen_tokens_total"])),
            prompt_tokens_total=_sum_replicas(samples.get(vl["prompt_tokens_total"])),
        )
    return None


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


class ServerMetricsPoller(PromPoller):
    """Fetches and parses a server's /metrics; never raises on network or parse errors.

    When the server gives no throughput gauge (vLLM v1), ``gen_throughput`` is derived
    from the generated-tokens counter between consecutive polls.
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

    async def poll(self) -> ServerSample | None:
        """One GET + parse. None on any failure, with the reason in ``.last_error``."""
        got = await self._scrape()
        if got is None:
            return None
        samples, text, t = got
        sample = server_sample_from_samples(samples, t)
        if sample is None:
            self._prev_counter = None
            return self._nothing(text, "no SGLang or vLLM metrics (SGLang needs --enable-metrics)")
        sample = self._with_rate(sample)
        self.last_error = None
        self.last = sample
        return sample

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
