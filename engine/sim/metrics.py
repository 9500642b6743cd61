"""Prometheus text of the simulator: SGLang's ``/metrics`` and dcgm-exporter's GPU metrics.

The SGLang side is written by prometheus_client from a per-server registry (no global state)
with the names, label sets and timing of each SGLang version (read from 0.5.9
``srt/metrics/collector.py`` and 0.5.23 ``srt/observability/metrics_collector.py``; the
fixtures in tests/fixtures/sglang/ hold the same shapes and a test keeps them together):

- **scheduler gauges**, one series per scheduler that logs (``tp_rank`` 0 of each pp rank and
  data-parallel rank; labels ``model_name, engine_type, tp_rank, pp_rank, moe_ep_rank`` +
  ``dp_rank`` with dp, + ``priority=""`` on 0.5.23 with ``--enable-priority-scheduling``, the
  request counts then also one series per priority): the values the scheduler last *wrote*
  (engine/sim/sched_log.py: at prefill, every 40 decode iterations, when idle), not the live
  state. Under pp each rank's ``num_running_reqs`` is one micro-batch. Spec gauges are 0.0
  without speculative decoding. ``sglang:num_retracted_requests_total`` has no series before
  the first retraction.
- **tokenizer counters** (``prompt_tokens_total``, ``generation_tokens_total``,
  ``num_requests_total``; ``cached_tokens_total{cache_source="device"}``; the
  ``time_to_first_token_seconds`` histogram) move when a request *finishes*
  (``TokenizerMetricsCollector.observe_one_finished_request``; TTFT at the first token), and a
  series appears with its first increment. 0.5.9 labels them ``model_name``; 0.5.23 adds
  ``engine_type`` and, on the token counters, ``is_streaming`` (and the request's ``priority``
  with priority scheduling). SGLang's own warm-up request (8 tokens, non-streaming, at start)
  is in them from the start.

The sim's exact state stays in ``/sim/state`` and its ``redline_sim:*`` counters. The dcgm
side is formatted by hand because dcgm-exporter is a Go program: its counter
``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` has no ``_total`` suffix and values are Go-formatted.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from .gpu import GpuReading
from .profiles import SimProfile
from .sched_log import LoggedStats
from .stats import RequestCounters

__all__ = ["PROMETHEUS_CONTENT_TYPE", "FinishedCounters", "SglangCollector", "make_registry", "render_sglang",
           "render_dcgm"]

PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: SGLang's TTFT histogram buckets (metrics_collector.py bucket_time_to_first_token)
TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0, 400.0)
#: SGLang's warm-up request (http_server.py _execute_server_warmup): "The capital city of
#: France is", 8 new tokens, not streamed
WARMUP_PROMPT_TOKENS = 7
WARMUP_NEW_TOKENS = 8


@dataclass
class FinishedCounters:
    """The tokenizer's counters: what finished requests added, by (is_streaming, priority)."""

    prompt: collections.Counter = field(default_factory=collections.Counter)
    generated: collections.Counter = field(default_factory=collections.Counter)
    requests: collections.Counter = field(default_factory=collections.Counter)
    cached: int = 0
    ttft: list[int] = field(default_factory=lambda: [0] * (len(TTFT_BUCKETS) + 1))
    ttft_sum: float = 0.0

    def finished(self, prompt: int, generated: int, cached: int, streaming: bool, priority: int | None) -> None:
        key = (streaming, priority)
        self.prompt[key] += prompt
        self.generated[key] += generated
        self.requests[key] += 1
        self.cached += cached

    def first_token(self, seconds: float) -> None:
        i = next((k for k, b in enumerate(TTFT_BUCKETS) if seconds <= b), len(TTFT_BUCKETS))
        self.ttft[i] += 1
        self.ttft_sum += seconds


StateReader = Callable[[], tuple[LoggedStats, int, RequestCounters, FinishedCounters]]


class SglangCollector(Collector):
    """Yields SGLang's metrics (plus ``redline_sim:*``) from the server's state."""

    def __init__(self, profile: SimProfile, read_state: StateReader) -> None:
        self._p = profile
        self._read_state = read_state
        p = profile
        self._v23 = p.sglang_version != "0.5.9"
        self._prio = p.enable_priority_scheduling and self._v23
        ranks = []
        for dp in range(p.dp_size):
            for pp in range(p.pp_size):
                labels = {"model_name": p.model_name, "engine_type": "unified", "tp_rank": "0", "pp_rank": str(pp),
                          "moe_ep_rank": "0"}
                if p.dp_size > 1:
                    labels["dp_rank"] = str(dp)
                if self._prio:
                    labels["priority"] = ""
                ranks.append(labels)
        self._ranks = ranks
        self._sched_names = list(ranks[0])
        tok = {"model_name": p.model_name}
        if self._v23:
            tok["engine_type"] = "unified"
        self._tok = tok

    def _sched(self, name: str, doc: str, value: float, by_priority: dict | None = None) -> GaugeMetricFamily:
        g = GaugeMetricFamily(name, doc, labels=self._sched_names)
        for labels in self._ranks:
            g.add_metric(list(labels.values()), value)
            if by_priority is not None:
                for prio, n in by_priority.items():
                    g.add_metric([*(v for k, v in labels.items() if k != "priority"), str(prio)], n)
        return g

    def collect(self) -> Iterator[Metric]:
        stats, retracted_total, counters, fin = self._read_state()
        s = stats
        prio = self._prio
        sched = self._sched
        yield sched("sglang:num_running_reqs", "The number of running requests.", s.running,
                    s.running_by_priority if prio else None)
        yield sched("sglang:num_queue_reqs", "The number of requests in the waiting queue.", s.queued,
                    s.queued_by_priority if prio else None)
        yield sched("sglang:num_used_tokens", "The number of used tokens.", s.used_tokens)
        yield sched("sglang:token_usage", "The token usage.", round(s.token_usage, 4))
        yield sched("sglang:gen_throughput", "The generation throughput (token/s).", s.gen_throughput)
        yield sched("sglang:cache_hit_rate", "The prefix cache hit rate.", s.cache_hit_rate)
        yield sched("sglang:max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.",
                    self._p.kv_budget_tokens)
        yield sched("sglang:spec_accept_length", "The average acceptance length of speculative decoding.",
                    s.spec_accept_length)
        yield sched("sglang:spec_accept_rate", "The average acceptance rate of speculative decoding "
                    "(`accepted tokens / total draft tokens` in batch).", s.spec_accept_rate)
        yield sched("sglang:num_retracted_reqs", "The number of retracted requests.", s.retracted)
        if retracted_total:  # no series before the first retraction (increment_retracted_reqs)
            c = CounterMetricFamily("sglang:num_retracted_requests_total", "Total number of retracted requests.",
                                    labels=self._sched_names)
            for labels in self._ranks:
                c.add_metric(list(labels.values()), retracted_total)
            yield c
        yield from self._tokenizer(fin)
        yield from self._sim_counters(counters)

    def _tokenizer(self, fin: FinishedCounters) -> Iterator[Metric]:
        tok = self._tok
        for name, doc, values in (("sglang:prompt_tokens_total", "Number of prefill tokens processed.", fin.prompt),
                                  ("sglang:generation_tokens_total", "Number of generation tokens processed.", fin.generated),
                                  ("sglang:num_requests_total", "Number of requests processed.", fin.requests)):
            if not values:
                continue
            if not self._v23:  # 0.5.9: one series, model_name only
                c = CounterMetricFamily(name, doc, labels=list(tok))
                c.add_metric(list(tok.values()), sum(values.values()))
                yield c
                continue
            names = [*tok, "is_streaming"] + (["priority"] if self._prio else [])
            c = CounterMetricFamily(name, doc, labels=names)
            merged: collections.Counter = collections.Counter()
            for (streaming, prio), n in values.items():
                merged[(streaming, prio if self._prio else None)] += n
            for (streaming, prio), n in sorted(merged.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
                c.add_metric([*tok.values(), "true" if streaming else "false"] + ([str(prio)] if self._prio else []), n)
            yield c
        if fin.cached:  # its series appears with the first cached token
            c = CounterMetricFamily("sglang:cached_tokens_total", "Number of cached prompt tokens.",
                                    labels=[*tok, "cache_source"])
            c.add_metric([*tok.values(), "device"], fin.cached)
            yield c
        n = sum(fin.ttft)
        if n:
            h = HistogramMetricFamily("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                                      labels=list(tok))
            acc, buckets = 0, []
            for b, k in zip((*(str(float(x)) for x in TTFT_BUCKETS), "+Inf"), fin.ttft, strict=False):
                acc += k
                buckets.append((b, acc))
            h.add_metric(list(tok.values()), buckets, fin.ttft_sum)
            yield h

    def _sim_counters(self, counters: RequestCounters) -> Iterator[Metric]:
        for name, doc, value in (
            ("redline_sim:requests_received_total", "Requests that reached a generation endpoint.", counters.received),
            ("redline_sim:requests_completed_total", "Requests answered in full.", counters.completed),
            ("redline_sim:requests_failed_total", "Requests the server failed (error status or broken stream).",
             counters.failed),
            ("redline_sim:requests_aborted_total", "Requests whose client went away before the end.", counters.aborted),
        ):
            c = CounterMetricFamily(name, doc, labels=["model_name"])
            c.add_metric([self._p.model_name], value)
            yield c


def make_registry(profile: SimProfile, read_state: StateReader) -> CollectorRegistry:
    """A fresh registry holding one :class:`SglangCollector`."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SglangCollector(profile, read_state))
    return registry


def render_sglang(registry: CollectorRegistry) -> bytes:
    """The ``/metrics`` body."""
    return generate_latest(registry)


_DCGM_FIELDS: tuple[tuple[str, str, str, Callable[[GpuReading], str]], ...] = (
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).",
     lambda g: str(g.util_pct)),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).",
     lambda g: str(g.fb_free_mib)),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).",
     lambda g: str(g.fb_used_mib)),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).",
     lambda g: f"{g.power_w:.6f}"),
    ("DCGM_FI_DEV_POWER_MGMT_LIMIT", "gauge", "Power management limit (in W).",
     lambda g: f"{g.limit_w:.6f}"),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter",
     "Total energy consumption since boot (in mJ).", lambda g: str(g.energy_mj)),
)


def render_dcgm(profile: SimProfile, gpus: list[GpuReading], hostname: str = "redline-sim") -> str:
    """dcgm-exporter style text for ``gpus``."""
    lines: list[str] = []
    model = profile.gpu_model_name.replace("\\", "\\\\").replace('"', '\\"')
    label_sets = [
        f'gpu="{g.index}",UUID="{g.uuid}",pci_bus_id="{g.pci_bus_id}",'
        f'device="nvidia{g.index}",modelName="{model}",Hostname="{hostname}"'
        for g in gpus
    ]
    for name, kind, doc, fmt in _DCGM_FIELDS:
        lines.append(f"# HELP {name} {doc}")
        lines.append(f"# TYPE {name} {kind}")
        for g, labels in zip(gpus, label_sets, strict=False):
            lines.append(f"{name}{{{labels}}} {fmt(g)}")
    return "\n".join(lines) + "\n"
