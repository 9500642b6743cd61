"""What the UI sees: an immutable picture of the engine, published a few times a second.

The UI never reads engine internals; it reads the latest Snapshot (built in engine/core/publisher.py).
Every number here is computed in engine/measure/live_metrics.py (live windows), engine/measure/accumulator.py (step
results) or engine/telemetry (server, GPUs, client health).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..measure.step_result import BreakResult, StepResult
from ..rules.knee import Knee
from ..telemetry.types import GpuSample, ServerSample


@dataclass(frozen=True)
class LogLine:
    seq: int
    t: float  # epoch
    kind: str  # key | preset | step | warning | error | break | notice | probe
    text: str


@dataclass(frozen=True)
class Snapshot:
    t: float  # perf_counter
    elapsed_s: float
    state: str  # running | paused | probe | preset | stopped | server gone
    target_c: int
    previous_c: int | None
    in_flight: int  # requests on the wire
    backing_off: int = 0  # slots waiting after an overload answer (429/503), not in flight
    max_concurrency: int = 0  # in rate mode: the in-flight cap
    # load shape: "concurrency" (closed loop: C requests in flight), "rate" (open loop:
    # arrivals at target_rate req/s, latencies from each intended send time) or "trace"
    mode: str = "concurrency"
    target_rate: float | None = None  # req/s, rate mode
    arrival: str = ""  # poisson | constant | gamma:K, rate mode
    schedule_lag_ms: dict = field(default_factory=dict)  # {"p50","p99"}: actual - intended send, live window
    held_at_cap: int = 0  # sends waiting now for a free slot under the in-flight cap
    dropped_or_delayed: int = 0  # sends held back at the cap, this session
    workload: dict = field(default_factory=dict)  # the current workload (WorkloadConfig.describe())
    previous_rate: float | None = None  # the probe's `was`: the open loop's rate before it (None: it was C)
    turns: int = 1  # multi-turn: turns per session (concurrency then counts sessions)
    trace_progress: tuple[int, int] | None = None  # trace replay: (rows sent, rows in the trace)
    # many targets (--url repeated, engine/core/target_stats.py): one row each, live: url, output_tok_s,
    # errors_s, ttft/e2e p50/p99 ms, gone, the server's running and queued; () with one target
    targets: tuple[dict, ...] = ()
    # --workers N (engine/load/worker_pool.py): one row each: worker, node, alive, share, requests,
    # output_tok_s, lag_p99_ms, cpu_pct; () when the load runs in the engine's own process
    workers: tuple[dict, ...] = ()
    probing: bool = False
    preset_running: bool = False
    url: str = ""
    model: str = ""
    api: str = ""
    server_kind: str = ""
    caps: str = ""
    # live rates (RATE_WINDOW_S)
    output_tok_s: float = 0.0
    input_tok_s: float = 0.0
    req_s: float = 0.0
    errors_s: float = 0.0
    # goodput (engine/measure/slo.py): requests meeting every per-request SLO bound; None without one
    goodput_req_s: float | None = None
    goodput_tok_s: float | None = None
    # the probe lane (engine/load/probe_lane.py): a lone request's p50 TTFT / ITL beside the load's
    lane_on: bool = False
    lane_ttft_ms: float | None = None
    lane_ttft_bound: bool = False  # its TTFT is at least that: its request still waits for a first token
    lane_itl_ms: float | None = None
    slo: str = ""  # the SLO as one line ("TTFT≤2 s, ITL p99≤100 ms (90 % of requests)")
    # live percentiles in ms (LATENCY_WINDOW_S): {"p50","p90","p99","max"}
    ttft_ms: dict = field(default_factory=dict)
    # ... those that are lower bounds ({"p50": True, ...}): live TTFT counts the requests still
    # waiting for a first token at their age (engine/measure/live_metrics.py censored_window)
    ttft_bound: dict = field(default_factory=dict)
    itl_ms: dict = field(default_factory=dict)
    tpot_ms: dict = field(default_factory=dict)
    e2e_ms: dict = field(default_factory=dict)
    # totals
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    errors_by_kind: dict = field(default_factory=dict)
    # the load's failed requests in a row (a completed one resets it) and the server's reason for
    # the last one (engine/core/measurements.py FailureStreak)
    failures_in_a_row: int = 0
    last_failure: str = ""
    output_tokens_total: int = 0
    # steps
    steps: tuple[StepResult, ...] = ()
    current_step: StepResult | None = None
    break_result: BreakResult | None = None
    probe_result: StepResult | None = None
    # the session's knee as summary.json records it (engine/rules/verdicts.py summary_knee: its
    # search, its preset's plateau_gain, its last workload's); the TUI's curve draws this one
    knee: Knee | None = None
    preset: str = ""  # preset progress line, when a preset runs
    # telemetry
    server: ServerSample | None = None
    gpus: tuple[GpuSample, ...] = ()
    client_cpu_pct: float | None = None
    loop_lag_ms: float | None = None
    client_overloaded: bool = False
    warnings: tuple[str, ...] = ()  # active warnings (cap, client overload, server gone)
    tok_per_joule: float | None = None
    # per-second history for sparklines: (second index, timeline row)
    second: int = 0
    row: dict = field(default_factory=dict)
    # the last few timeline rows, oldest first, `row` last (seconds second-len+1 .. second):
    # a screen held past a second still draws a column for each (tui/widgets/live_panels.py)
    recent: tuple[dict, ...] = ()
    log: tuple[LogLine, ...] = ()  # the most recent event lines
    session_dir: str = ""
    session_error: str | None = None  # the session log's first write error (disk full, ...)
    session_lost_rows: int = 0  # rows the session log could not save (engine/session/writer.py lost_rows)
    done: bool = False  # the engine stopped (preset finished or stop())
    finished: str = ""  # a fixed-size run ended: why ("100 requests sent and ended", "20 s")
