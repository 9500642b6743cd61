"""Engine configuration: one dataclass, filled by the CLI, presets, tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..constants import DEFAULT_CONCURRENCY, DEFAULT_MAX_CONCURRENCY, DEFAULT_REQUEST_TIMEOUT_S, DEFAULT_TRANSPORT
from ..measure.slo import Slo
from ..rules.guard import GuardSpec
from ..workload.prompts import WorkloadConfig


@dataclass
class EngineConfig:
    url: str
    api: str | None = None  # None = detect (chat when /v1/models answers, else generate)
    model: str | None = None  # None = first model of /v1/models
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    concurrency: int = DEFAULT_CONCURRENCY
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT_S
    api_key: str | None = field(default=None, repr=False)  # never printed or logged
    insecure: bool = False
    transport: str = DEFAULT_TRANSPORT
    out_dir: Path | None = None  # session directory; None = no session log
    label: str | None = None
    server_metrics_url: str | None = None  # None = the target's /metrics
    gpu_metrics_url: str | None = None  # dcgm-exporter; None = the sim's /dcgm/metrics if any
    use_nvml: bool = True
    telemetry: bool = True
    calibrate: bool = True
    live_steps: bool = True  # TUI: each period at one C is a step (presets manage their own)
    start_paused: bool = False
    command_line: list[str] = field(default_factory=list)
    seed: int = 0
    slo: Slo | None = None  # goodput live and per step; an SLO miss ends a preset ramp
    guard: GuardSpec | None = None  # crossed for a while: the load drops to the last good C
    # open-loop rate mode (engine/workload/arrivals.py): start at `rate` req/s instead of C requests
    # in flight; max_concurrency is then the in-flight cap (sends beyond it wait, counted)
    rate: float | None = None
    arrival: str = "poisson"  # poisson | constant | gamma:K
    # more targets (`--url` repeated: replicas behind no router, one server per node): the
    # load is split over url + more_urls by `weights` (None: evenly); engine/core/target_stats.py
    more_urls: tuple[str, ...] = ()
    weights: tuple[float, ...] | None = None
    workers: int = 1  # --workers N: the load in N worker processes (engine/load/worker_pool.py); 1 = this process
    workers_why: str = ""  # --workers auto chose them: why, in words (with the start notice)
    workers_auto: bool = False  # --workers auto (the CLI's default): the run may add worker processes (engine/core/replan.py)
    workers_peak: int = 0  # the most in flight --workers auto sized them for at start (a preset's run past it re-sizes: load_move.py)
    ray: str | None = None  # --ray auto|ADDRESS: the workers as Ray actors on that cluster (engine/load/ray_pool.py)
    # --control [HOST:]PORT: the control API in the engine's process (engine/control/http_api.py),
    # an engine.control.ControlAddress; its bearer token never printed, logged or written
    control: object | None = None
    control_token: str | None = field(default=None, repr=False)
    # looking inside the server (engine/run/server_ops.py): a profiler capture lasts at most
    # profile_s (`--profile-s`); flush_cache (`--flush-cache`) drains and flushes the prefix
    # cache before each preset step and the probe
    profile_s: float = 5.0
    flush_cache: bool = False
    # SGLang's --admin-api-key (`--admin-key`, REDLINE_ADMIN_KEY): the bearer for /flush_cache
    # and the profiler, never printed, logged or written
    admin_key: str | None = field(default=None, repr=False)
    # written into meta.json as is (a sweep's configuration: its values, label, server command,
    # startup time; engine/sweep/)
    meta_extra: dict | None = None
    # a fixed-size run: the load stops after this many requests were sent and ended, or after
    # this many seconds (`--num-requests`, `--duration`); None: until stopped
    num_requests: int | None = None
    duration_s: float | None = None
    # the percentiles a step, summary.json and the end summary carry (`--percentiles`)
    percentiles: tuple[float, ...] = (50.0, 90.0, 95.0, 99.0)
