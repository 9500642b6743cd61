"""Telemetry samples shared by every source."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU at one moment. None = the source does not report that field."""

    index: int
    name: str = ""
    power_w: float | None = None
    power_limit_w: float | None = None
    util_pct: float | None = None
    mem_used_mib: float | None = None
    mem_total_mib: float | None = None
    temp_c: float | None = None
    energy_j: float | None = None  # cumulative energy counter, joules
    driver: str = ""  # the driver's version (NVML; dcgm-exporter's DCGM_FI_DRIVER_VERSION label)

    @property
    def power_pct(self) -> float | None:
        if self.power_w is None or not self.power_limit_w:
            return None
        return 100.0 * self.power_w / self.power_limit_w


@dataclass(frozen=True, slots=True)
class ServerSample:
    """The server's own view of its load, from its /metrics."""

    t: float  # perf_counter() when sampled
    kind: str  # "sglang" | "vllm"
    running: float | None = None
    queued: float | None = None
    kv_usage: float | None = None  # 0..1
    gen_throughput: float | None = None  # tok/s as the server counts it
    # Added fields (defaults keep positional construction above unchanged):
    gen_tokens_total: float | None = None  # cumulative generated tokens (server counter)
    prompt_tokens_total: float | None = None  # cumulative prompt tokens (server counter)
    # Prefix cache: the share of prompt tokens the server found in its prefix cache, 0..1.
    # From the counters below, over the poller's recent window (None while no prompt token
    # arrived in it, or before two scrapes); a server without them: its own gauge
    # (SGLang sglang:cache_hit_rate: its last prefill batch; vLLM v0: since its start).
    prefix_hit_rate: float | None = None
    prefix_queries_total: float | None = None  # cumulative prompt tokens looked up in the cache
    prefix_hits_total: float | None = None  # cumulative prompt tokens found there
    # Preemptions: requests the server evicted from the running batch because its KV cache
    # filled (vLLM vllm:num_preemptions_total; SGLang's retractions,
    # sglang:num_retracted_requests_total), cumulative; and over the poller's recent window.
    preemptions_total: float | None = None
    preemptions_recent: float | None = None
    # Speculative decoding: tokens per verify step (accepted drafts + 1) and the share of draft
    # tokens accepted. SGLang: its gauges sglang:spec_accept_length / spec_accept_rate; vLLM:
    # from its counters over the poller's recent window (1 + accepted / drafts, accepted /
    # draft tokens). None: no speculative decoding reported.
    spec_accept_length: float | None = None
    spec_acceptance_rate: float | None = None
    spec_accepted_total: float | None = None  # vLLM counters (cumulative)
    spec_drafts_total: float | None = None
    spec_draft_tokens_total: float | None = None


@dataclass(frozen=True, slots=True)
class ClientHealthSample:
    """Is redline itself fast enough to measure the server truthfully?"""

    cpu_pct: float | None  # CPU % of redline's process tree (100 = one full core)
    loop_lag_ms: float | None  # event-loop lag p99 over the recent window
    overloaded: bool = False  # redline's measurements are suspect this second
    reason: str = ""  # one-line operator warning naming the cause when overloaded, else ""
    loop_lag_max_ms: float | None = None  # worst event-loop lag over the recent window
    busiest_cpu_pct: float | None = None  # the busiest single process of the tree
    # Why the timings are suspect: "" (they are not), "client_cpu"
    # (redline's loop busy near a core), "loop_blocked" (the loop held with little CPU of its
    # own: a blocking call, disk, descheduling) or "machine_busy" (other processes or steal).
    cause: str = ""
    loop_cpu_pct: float | None = None  # CPU % of the process running the event loop
    machine_cpu_pct: float | None = None  # the whole machine, 100 = one core (steal excluded)
    others_cpu_pct: float | None = None  # the machine less redline's process tree, 100 = one core
    steal_pct: float | None = None  # CPU stolen by the hypervisor, % of all cores
    iowait_pct: float | None = None  # CPUs idle waiting on disk, % of all cores
    loop_run_wait_ms: float | None = None  # ms per second the loop's thread waited for a CPU
    # timings suspect in this second itself (the timeline row's client_overloaded): `overloaded`
    # reads the lag's p99 over the whole window, which one stall keeps high for its length;
    # None: not known apart from `overloaded`
    suspect: bool | None = None
