"""Prometheus text of the simulator: SGLang's ``/metrics`` and dcgm-exporter's GPU metrics.

The SGLang side is written by prometheus_client from a per-server registry (no global state),
exactly like SGLang itself does; the values are the model's exact state at scrape time. The
prefix cache shows as SGLang shows it: ``sglang:cache_hit_rate``, the hit rate of the last
prefill batch, and ``sglang:cached_tokens_total{cache_source="device"}``, prompt tokens found
in the cache (over ``sglang:prompt_tokens_total``, every prompt token, it is the hit rate). The
dcgm side is formatted by hand because dcgm-exporter is a Go program: its counter
``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` has no ``_total`` suffix and values are Go-formatted.
"""

from __future__ import annotations

from typing import Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .gpu import GpuReading
from .model import ModelSnapshot
from .profiles import SimProfile
from .stats import RequestCounters

__all__ = ["PROMETHEUS_CONTENT_TYPE", "SglangCollector", "make_registry", "render_sglang",
           "render_dcgm"]

PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

StateReader = Callable[[], tuple[ModelSnapshot, RequestCounters]]


class SglangCollector(Collector):
    """Yields SGLang-named metrics (plus ``redline_sim:*``) from the live server state."""

    def __init__(self, profile: SimProfile, read_state: StateReader) -> None:
        self._model_name = profile.model_name
        self._read_state = read_state

    def collect(self) -> Iterator[Metric]:
        snap, counters = self._read_state()
        labels = ["model_name"]
        values = [self._model_name]

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            g = GaugeMetricFamily(name, doc, labels=labels)
            g.add_metric(values, value)
            return g

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            c = CounterMetricFamily(name, doc, labels=labels)
            c.add_metric(values, value)
            return c

        yield gauge("sglang:num_running_reqs", "The number of running requests.",
                    snap.running)
        yield gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.",
                    snap.queued)
        yield gauge("sglang:num_used_tokens", "The number of used tokens.",
                    snap.kv_used_tokens)
        yield gauge("sglang:token_usage", "The token usage.", snap.token_usage)
        yield gauge("sglang:gen_throughput", "The generation throughput (token/s).",
                    snap.gen_throughput)
        yield counter("sglang:prompt_tokens_total", "Number of prefill tokens processed.",
                      snap.prompt_tokens_total)
        yield counter("sglang:generation_tokens_total",
                      "Number of generation tokens processed.", counters.tokens_sent)
        yield counter("sglang:num_requests_total", "Number of requests processed.",
                      snap.finished_total)
        yield gauge("sglang:cache_hit_rate", "The prefix cache hit rate.", snap.cache_hit_rate)
        cached = CounterMetricFamily("sglang:cached_tokens_total",
                                     "Number of cached prompt tokens.",
                                     labels=["model_name", "cache_source"])
        cached.add_metric([self._model_name, "device"], snap.prefix_hit_tokens)
        yield cached
        # KV budget full: requests retracted to the queue (SGLang's counter; vLLM's is
        # vllm:num_preemptions_total)
        yield counter("sglang:num_retracted_requests_total", "Total number of retracted requests.",
                      snap.preemptions_total)
        if snap.spec_accept_length is not None:  # speculative decoding on
            yield gauge("sglang:spec_accept_length",
                        "The average acceptance length of speculative decoding.",
                        snap.spec_accept_length)
            yield gauge("sglang:spec_accept_rate",
                        "The average acceptance rate of speculative decoding.",
                        snap.spec_acceptance_rate or 0.0)
        yield counter("redline_sim:requests_received_total",
                      "Requests that reached a generation endpoint.", counters.received)
        yield counter("redline_sim:requests_completed_total",
                      "Requests answered in full.", counters.completed)
        yield counter("redline_sim:requests_failed_total",
                      "Requests the server failed (error status or broken stream).",
                      counters.failed)
        yield counter("redline_sim:requests_aborted_total",
                      "Requests whose client went away before the end.", counters.aborted)
        yield gauge("redline_sim:kv_reserved_tokens",
                    "KV tokens reserved by running requests (prompt + max_tokens).",
                    snap.kv_reserved_tokens)


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
        for g, labels in zip(gpus, label_sets):
            lines.append(f"{name}{{{labels}}} {fmt(g)}")
    return "\n".join(lines) + "\n"
