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


@dataclass(frozen=True, slots=True)
class ClientHealthSample:
    """Is redline itself fast enough to measure the server truthfully?"""

    cpu_pct: float | None  # CPU % of redline's process tree (100 = one full core)
    loop_lag_ms: float | None  # event-loop lag p99 over the recent window
    overloaded: bool = False
    reason: str = ""  # one-line operator warning when overloaded, else ""
    loop_lag_max_ms: float | None = None  # worst event-loop lag over the recent window
    busiest_cpu_pct: float | None = None  # the busiest single process of the tree
