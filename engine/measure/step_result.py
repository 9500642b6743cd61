"""Result of one step (a period held at one concurrency), as summary.json stores it.

Field names follow SGLang's bench_serving where it has them, so its users' scripts read ours.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields
from typing import Any


@dataclass
class StepResult:
    concurrency: int
    duration_s: float
    completed: int  # of the step's own requests (sent at its C after warm-up)
    failed: int
    output_throughput: float  # output tok/s, counted as tokens arrived inside the window
    input_throughput: float  # input tok/s of the step's own requests (sent after warm-up)
    request_throughput: float  # requests completed per second inside the window (bench_serving's completed / duration)
    # output tok/s of requests that failed (their tokens counted as they arrived, taken out of
    # output_throughput, goodput and the per-second series when they failed): beside it, never in it
    failed_output_tok_s: float = 0.0
    mean_ttft_ms: float | None = None
    median_ttft_ms: float | None = None
    p99_ttft_ms: float | None = None
    median_itl_ms: float | None = None
    p99_itl_ms: float | None = None
    mean_tpot_ms: float | None = None
    median_e2e_latency_ms: float | None = None
    p99_e2e_latency_ms: float | None = None
    steady: bool = False  # its per-second tok/s settled, silent seconds counted (engine/rules/verdicts.py steadiness)
    server_max_running: float | None = None  # most requests the server reported running
    # Beyond bench_serving:
    index: int = 0
    phase: str = "measure"  # "measure" | "live" | "probe"
    t_start: float = 0.0  # epoch seconds
    errors_by_kind: dict[str, int] | None = None
    mean_power_w: float | None = None  # summed over GPUs, when telemetry exists
    tokens_per_joule: float | None = None
    joules_per_token: float | None = None
    requests_sent: int = 0  # own requests sent after warm-up
    requests_first_token: int = 0  # ... of which got a first token (the final record: ever)
    cancelled: int = 0  # ... cancelled (abort, exit) before they ended
    warmup_s: float = 0.0  # from the concurrency change to the start of measurement
    output_throughput_se: float | None = None  # standard error of the per-second tok/s (noise)
    median_chunk_gap_ms: float | None = None  # raw gap between chunks (differs from ITL on /generate)
    p99_chunk_gap_ms: float | None = None
    # the share of the window's content chunks (those closing a gap) that one socket read
    # brought with another of their stream's: they share its stamp, so their gaps are left out
    # of ITL and chunk gap (engine/measure/records.py COALESCED); None: no chunk in the window
    coalesced_chunks: float | None = None
    # how far the client's own send waits (each request's send stamp to its last byte's write:
    # its connect, redline's loop) moved the step's TTFT and E2E figures: the most any of mean,
    # median and p99 TTFT, median and p99 E2E drops when each request's wait is taken out (ms);
    # None: a wait not known (engine/telemetry/client_doubt.py reads the loop's lag instead)
    client_send_shift_ms: float | None = None
    median_ttfat_ms: float | None = None  # time to the first answer token (reasoning models)
    # with SLOs (engine/measure/slo.py): own requests that met every per-request bound
    request_goodput: float | None = None  # req/s: completions in the window that met the SLO
    output_goodput: float | None = None  # output tok/s x those completions' share of the tokens
    slo_attainment: float | None = None  # share of own finished requests that met the SLO (censored past a bound: missed)
    # the probe lane beside the load (engine/load/probe_lane.py), when it was on
    lane_median_ttft_ms: float | None = None
    lane_median_itl_ms: float | None = None
    prefix_hit_rate: float | None = None  # the server's prefix-cache hits / queries over the step (its counters)
    # prompt tokens the server reports it found cached, over the prompt tokens of the step's own
    # requests that said (usage.prompt_tokens_details.cached_tokens, meta_info.cached_tokens)
    cached_prompt_ratio: float | None = None
    cached_tokens: int | None = None  # ... their cached tokens, summed
    # the server's own view over the step's window (engine/telemetry/server_view.py)
    server_gen_throughput: float | None = None  # mean of its generation throughput, tok/s
    server_kv_usage: float | None = None  # mean KV-cache use, 0..1
    server_kv_usage_max: float | None = None
    server_preemptions: int | None = None  # requests it preempted (KV cache full) in the window
    spec_accept_length: float | None = None  # speculative decoding: tokens per verify step
    spec_acceptance_rate: float | None = None  # ... accepted / draft tokens
    # server operations during the step (engine/run/server_ops.py): profiler captures, each
    # {"load", "t_start", "t_end", "duration_s", "trace", "server_said", "stopped_by", "ok", "stop_s"};
    # and the cache flush done before it ({"t", "drain_s", "drained", "path", "ok", "tries"}), the drain in no step
    profiles: list[dict] | None = None
    cache_flush: dict | None = None
    # a profiler capture ran in the step, or its trace was written while the step was live:
    # SGLang's scheduler makes no token while it writes the trace, so the figures carry its cost
    profiled: bool = False
    # load shape (engine/load/controller.py): "concurrency" (closed loop at C), "rate" (open loop at
    # request_rate req/s, C = the in-flight cap) or "trace" (a trace replayed at trace_speed)
    mode: str = "concurrency"
    request_rate: float | None = None  # the target rate (rate steps); request_throughput is the achieved
    arrival: str | None = None  # poisson | constant | gamma:K
    trace_speed: float | None = None
    schedule_lag_p50_ms: float | None = None  # own requests' actual - intended send time (open loop)
    schedule_lag_p99_ms: float | None = None
    dropped_or_delayed: int | None = None  # sends held back at the in-flight cap during the step (open loop)
    ttft_by_turn: list[dict] | None = None  # multi-turn: [{"turn", "requests", "median_ttft_ms", "p99_ttft_ms"}]
    workload: dict | None = None  # the workload the step ran (dataset, input_len, output_len, ...)
    # censoring (docs/numbers.md#requests-that-outlive-their-step-censoring): own requests with no first token
    # (no end) when the step closed enter TTFT (E2E) as "at least their age"; a figure whose
    # rank falls among them is a lower bound (its *_bound is true, drawn "≥"). When they
    # finish later the record is completed (final); what stays censored is what the run
    # ended or aborted
    censored_ttft: int = 0
    censored_e2e: int = 0
    mean_ttft_ms_bound: bool = False
    median_ttft_ms_bound: bool = False
    p99_ttft_ms_bound: bool = False
    median_e2e_latency_ms_bound: bool = False
    p99_e2e_latency_ms_bound: bool = False
    ended_after_close: int = 0  # own requests whose outcome came after the close
    final: bool = True  # every own request's outcome is in (false: the figures at the close)
    # redline's own timings were suspect during the step's measured window (a second with a
    # client-health cause: its CPU, its loop held, the machine busy): engine/session/writer.py
    client_limited: bool = False
    # verdicts (engine/rules/verdicts.py): why the throughput rules (plateau, collapse) could not
    # judge this step ("not steady: ..."), None when they could; and a period shorter than a
    # step (MIN_LIVE_STEP_S) kept as its own row, marked short (no point of the curve)
    unjudged: str | None = None
    short: bool = False
    # no request of its own went out in its window (outputs that outlive it): the requests it
    # sent at its load during warm-up stood in for them (TTFT, E2E, TPOT, SLO)
    warmup_stand_in: bool = False
    # cut short by a signal or an operator's key (a preset's step, a search's point): its
    # figures are what it measured until then
    partial: bool = False

    @property
    def load(self) -> str:
        """The step's load: `C=64`, `R=12/s` (rate mode: the target rate) or `x2` (a trace's speed)."""
        if self.mode == "rate" and self.request_rate is not None:
            return f"R={self.request_rate:g}/s"
        if self.mode == "trace" and self.trace_speed is not None:
            return f"x{self.trace_speed:g}"
        return f"C={self.concurrency}"

    @property
    def error_rate(self) -> float:
        total = self.completed + self.failed
        return self.failed / total if total else 0.0

    def bound(self, name: str) -> bool:
        """Is figure `name` (p99_ttft_ms, ...) a lower bound (censored requests)?"""
        return bool(getattr(self, name + "_bound", False))

    # the percentiles asked for beyond the fixed fields (`--percentiles`, default 50,90,95,99:
    # p50 is median_*, p99 the fixed p99_*): {"p90_ttft_ms": v, "p90_ttft_ms_bound": b,
    # "p95_itl_ms": v, "p90_tpot_ms": v, "p90_e2e_latency_ms": v, ...}, flattened into
    # summary.json's step as bench_serving names them
    percentiles: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        extra = d.pop("percentiles") or {}
        d.update(extra)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "StepResult":
        names = {f.name for f in fields(cls)}
        extra = {k: v for k, v in d.items() if k not in names and PERCENTILE_KEY.match(k)}
        kw = {k: v for k, v in d.items() if k in names and k != "percentiles"}
        return cls(**kw, percentiles=extra or None)

    def percentile(self, q: float, what: str) -> float | None:
        """The step's q-th percentile of `what` (ttft, itl, tpot, e2e_latency) in ms, where it
        has it: p50 and p99 in the fixed fields, the others in `percentiles`."""
        key = percentile_key(q, what)
        fixed = {"p50_ttft_ms": "median_ttft_ms", "p99_ttft_ms": "p99_ttft_ms", "p50_itl_ms": "median_itl_ms",
                 "p99_itl_ms": "p99_itl_ms", "p50_e2e_latency_ms": "median_e2e_latency_ms",
                 "p99_e2e_latency_ms": "p99_e2e_latency_ms"}.get(key)
        if fixed is not None:
            return getattr(self, fixed)
        return (self.percentiles or {}).get(key)


PERCENTILE_KEY = re.compile(r"^p\d+(\.\d+)?_(ttft|itl|tpot|e2e_latency)_ms(_bound)?$")
DEFAULT_PERCENTILES = (50.0, 90.0, 95.0, 99.0)


def percentile_key(q: float, what: str) -> str:
    """bench_serving's name: p90_ttft_ms, p99.9_itl_ms, p95_e2e_latency_ms."""
    return f"p{q:g}_{what}_ms"


@dataclass
class BreakResult:
    reason: str  # "plateau" | "latency" | "errors" | "collapse" | "slo" | "server_gone" | "stalled"
    concurrency: int  # the step where a rule fired (an open loop's, a trace's: its in-flight cap)
    last_good_concurrency: int | None  # highest-throughput step that broke no rule
    detail: str = ""  # one line: which rule, the numbers
    rate: float | None = None  # open loop: the rate of the step where it fired (concurrency: its cap)
    last_good_rate: float | None = None
    speed: float | None = None  # a trace replay: the speed of the step where it fired
    last_good_speed: float | None = None

    @property
    def where(self) -> str:
        """The load it broke at: `C=64`, `12 req/s` or `x2` (a trace's speed)."""
        return _load_text(self.concurrency, self.rate, self.speed)

    @property
    def last_good(self) -> str:
        """The last good load (`C=32`, `8 req/s`, `x1`), or "none" when no step passed."""
        if self.last_good_concurrency is None and self.last_good_rate is None and self.last_good_speed is None:
            return "none"
        return _load_text(self.last_good_concurrency, self.last_good_rate, self.last_good_speed)

    @property
    def good_text(self) -> str:
        """"last good C=32", or "no step passed"."""
        return "no step passed" if self.last_good == "none" else f"last good {self.last_good}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _load_text(concurrency: int | None, rate: float | None, speed: float | None) -> str:
    if speed is not None:
        return f"x{speed:g}"
    if rate is not None:
        return f"{rate:g} req/s"
    return f"C={concurrency}"
