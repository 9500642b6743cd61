"""Named performance and fault profiles of the simulated server.

A :class:`SimProfile` holds every number the simulator uses: the parallel layout reported by
``/get_server_info``, the continuous-batching performance model, the simulated GPUs and the
fault knobs. The shipped profiles live in :data:`PROFILES`; tests build their own with
``dataclasses.replace(get_profile("healthy"), ...)`` or the ``--set FIELD=VALUE`` option.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from typing import Any, Mapping

__all__ = ["SimProfile", "PROFILES", "SGLANG_ARG_NAMES", "SGLANG_VERSIONS", "get_profile", "profile_names", "apply_overrides"]

#: SGLang versions whose answers the sim can give (engine/sim/refusals.py: how each ends a
#: request its scheduler refuses or aborts inside a 200 stream).
SGLANG_VERSIONS = ("0.5.9", "0.5.23")

#: Profile fields that are SGLang launch arguments, by the argument's name (ServerArgs): one
#: set with --set counts as typed on SGLang's command line (SimProfile.typed_args).
SGLANG_ARG_NAMES = {
    "model_name": "served_model_name", "max_model_len": "context_length", "tp_size": "tp_size",
    "pp_size": "pp_size", "dp_size": "dp_size", "max_running_requests": "max_running_requests",
    "pp_max_micro_batch_size": "pp_max_micro_batch_size", "pp_async_batch_depth": "pp_async_batch_depth",
    "chunked_prefill_size": "chunked_prefill_size", "kv_budget_tokens": "max_total_tokens",
    "max_queued_requests": "max_queued_requests", "cache_report": "enable_cache_report",
    "decode_log_interval": "decode_log_interval", "enable_priority_scheduling": "enable_priority_scheduling",
    "incremental_streaming_output": "incremental_streaming_output",
}


@dataclass(frozen=True)
class SimProfile:
    """Everything that defines one simulated server.

    Times are seconds, power is watts, memory is MiB. ``None`` disables an optional limit.
    """

    name: str
    model_name: str = "redline-sim-70b"
    max_model_len: int = 32768

    # Parallel layout (reported by /server_info). Pipeline parallelism (pp_size > 1) runs as
    # SGLang schedules it (engine/sim/pipeline.py): pp_size + pp_async_batch_depth micro-batches
    # of at most pp_max_micro_batch_size requests each (None: max_running_requests // pp_size,
    # SGLang's default), max_running_requests in all (its request pool).
    gpus: int = 8
    tp_size: int = 8
    pp_size: int = 1
    dp_size: int = 1
    max_running_requests: int = 256
    pp_max_micro_batch_size: int | None = None
    pp_async_batch_depth: int = 0
    chunked_prefill_size: int = 8192
    kv_budget_tokens: int = 800_000
    # SGLang's arguments the operator typed, comma-separated (each --set of one counts too):
    # /server_info's top level holds them; the rest stay SGLang's defaults there (None for a
    # limit the scheduler derives), the effective values in internal_states (sglang_info.py).
    typed_args: str = "tp_size,max_running_requests"

    # Performance model: one decode iteration of a batch of B requests takes
    # max(decode_base_s + decode_per_seq_s * B, B / ceiling_tok_s)
    #   + collapse_per_seq_s * max(0, B - collapse_above_batch)
    #   + prefill_per_token_s * (prompt tokens admitted in this iteration).
    # Under pipeline parallelism each is one stage's time (a GPU holding 1/pp of the layers).
    decode_base_s: float = 0.040
    decode_per_seq_s: float = 0.0002
    ceiling_tok_s: float | None = 2000.0
    prefill_per_token_s: float = 0.00002
    collapse_above_batch: int | None = None
    collapse_per_seq_s: float = 0.0
    # Scales every iteration's time (decode, collapse and prefill alike): 0.25 runs the same
    # batch dynamics four times faster, for tests that need the shape of time, not its length.
    time_scale: float = 1.0
    tokens_per_chunk: int = 1
    default_max_tokens: int = 128
    chat_template_tokens: int = 7
    # Prefix cache (see engine/sim/model.py): prompts are cached in blocks of
    # ``prefix_block_tokens``; cached tokens skip prefill. ``prefix_cache_tokens`` is its
    # capacity in tokens (None: the KV budget, as the radix cache lives in the KV pool; 0: off).
    prefix_cache_tokens: int | None = None
    prefix_block_tokens: int = 16
    # Cached tokens per request: /generate's meta_info.cached_tokens always; with
    # ``cache_report`` the OpenAI usage also carries prompt_tokens_details.cached_tokens
    # (SGLang --enable-cache-report, vLLM --enable-prompt-tokens-details).
    cache_report: bool = True
    # KV admission: ``kv_reserve_output`` reserves prompt + max_tokens per request at admission
    # (never preempts). False admits on the tokens in use now (prompt + generated), as SGLang's
    # and vLLM's schedulers do: when the budget fills, the newest running requests are
    # retracted (preempted) to the front of the queue and recomputed when readmitted.
    kv_reserve_output: bool = True
    # Speculative decoding: each decode iteration verifies ``spec_draft_tokens`` draft tokens
    # per request and emits ``spec_accept_length`` tokens on average (accepted + 1), in one
    # chunk (None: no speculative decoding, one token per iteration).
    spec_accept_length: float | None = None
    spec_draft_tokens: int = 3
    # The torch profiler endpoints (/start_profile, /stop_profile): False answers 404 (vLLM
    # started without VLLM_TORCH_PROFILER_DIR). SGLang's /stop_profile answers once its
    # scheduler wrote the trace, and makes no token meanwhile: that takes profile_export_s.
    profiler: bool = True
    profile_export_s: float = 0.0
    # SGLang's scheduler writes its /metrics gauges at each prefill batch and every
    # decode_log_interval decode iterations (--decode-log-interval, 40), and when idle
    # (0.5.9: 30 s after the last write; 0.5.23: at once if the running gauge is stale):
    # engine/sim/sched_log.py. 1 writes them at every iteration.
    decode_log_interval: int = 40
    # --enable-priority-scheduling: a request's "priority" counts in the request gauges' series
    # of its own beside the total under priority="" (0.5.23).
    enable_priority_scheduling: bool = False
    # Chat answers begin with this many reasoning tokens (delta.reasoning_content: SGLang with
    # --reasoning-parser); they are output tokens and end TTFT, not answer text.
    reasoning_tokens: int = 0
    # --incremental-streaming-output (0.5.23): /generate's text is each chunk's delta, not the
    # whole text so far.
    incremental_streaming_output: bool = False
    # SGLang's uvicorn closes a connection idle this long (SGLANG_TIMEOUT_KEEP_ALIVE, 5 s, in
    # 0.5.23's http_server.py; timeout_keep_alive=5 in 0.5.9's launch_server).
    keepalive_s: float = 5.0

    # Simulated GPUs: util = min(1, B / saturation_batch) * util_ceiling;
    # power = idle_w + (peak_w - idle_w) * util.
    gpu_model_name: str = "NVIDIA H100 80GB HBM3 (simulated)"
    gpu_memory_mib: int = 81559
    gpu_idle_w: float = 80.0
    gpu_peak_w: float = 690.0
    gpu_limit_w: float = 700.0
    saturation_batch: int = 128
    util_ceiling: float = 1.0
    weights_mib_per_gpu: int = 17_920
    kv_mib_per_token: float = 0.3125  # whole model, split evenly over the GPUs

    # Faults drawn per request from the seeded generator (fractions of requests).
    error_500_rate: float = 0.0
    error_429_rate: float = 0.0
    disconnect_rate: float = 0.0
    malformed_rate: float = 0.0
    # A disconnecting stream first stalls this long before its last chunk (a server that
    # hangs, answers once more and drops: the stall must not count as a served gap).
    disconnect_stall_s: float = 0.0
    # Stop sending after this many tokens without closing the connection (every request).
    stall_after_tokens: int | None = None

    # Overload: with ``overload_above`` or more requests in the server (running + queued), so
    # that a new one would exceed it, /health answers 503 and this fraction of new
    # generation requests is refused with 503 (the rest still get in: load can grow).
    overload_above: int | None = None
    overload_reject_fraction: float = 1.0
    # Which SGLang's answers the sim gives where versions differ (engine/sim/refusals.py):
    # how a request the scheduler sheds or aborts ends inside its 200 stream.
    sglang_version: str = "0.5.23"
    # SGLang --max-queued-requests: a request that finds this many already waiting in the
    # queue is shed inside a 200 stream (status 503, "The request queue is full.").
    max_queued_requests: int | None = None
    # This fraction of requests fails half-way (after max_tokens // 2 tokens) as SGLang ends a
    # request its scheduler aborts with status 500 (the version's in-stream shape).
    fail_midstream_rate: float = 0.0
    # A hung scheduler: after this many completed requests no token is produced again
    # (connections accepted, requests queued, /health still answers 200). None: never.
    hang_after: int | None = None
    # /health (and /health_generate): answers after this many seconds (SGLang runs a
    # one-token generation and answers after >= 1 s), 503 for ``startup_s`` after the start
    # (SGLang while it starts); with ``health_watchdog_s`` (SGLang's HEALTH_CHECK_TIMEOUT,
    # 20 s) a /health asked while the scheduler is hung waits that long and answers 503.
    health_delay_s: float = 0.0
    startup_s: float = 0.0
    health_watchdog_s: float | None = None
    # vLLM's check of the request's model: a chat or completions request naming a model the
    # sim does not serve gets HTTP 404 "The model 'X' does not exist." (False: any name).
    strict_model: bool = False

    # Crash: the server dies when its load stays above ``crash_sustained_above`` for
    # ``crash_sustain_s`` seconds, or at once when it passes ``crash_above``.
    crash_sustained_above: int | None = None
    crash_sustain_s: float = 2.0
    crash_above: int | None = None

    def __post_init__(self) -> None:
        problems: list[str] = []
        for attr in ("gpus", "tp_size", "pp_size", "dp_size", "max_running_requests",
                     "kv_budget_tokens", "max_model_len", "tokens_per_chunk",
                     "default_max_tokens", "saturation_batch", "decode_log_interval"):
            if getattr(self, attr) < 1:
                problems.append(f"{attr} must be >= 1")
        if self.spec_accept_length is not None and not 1.0 <= self.spec_accept_length <= self.spec_draft_tokens + 1:
            problems.append("spec_accept_length must be within 1..spec_draft_tokens + 1 or None")
        if self.spec_draft_tokens < 1:
            problems.append("spec_draft_tokens must be >= 1")
        if self.prefix_block_tokens < 1:
            problems.append("prefix_block_tokens must be >= 1")
        if self.prefix_cache_tokens is not None and self.prefix_cache_tokens < 0:
            problems.append("prefix_cache_tokens must be >= 0 (0 turns the cache off) or None")
        if self.pp_max_micro_batch_size is not None and self.pp_max_micro_batch_size < 1:
            problems.append("pp_max_micro_batch_size must be >= 1 or None")
        if self.pp_async_batch_depth < 0:
            problems.append("pp_async_batch_depth must be >= 0")
        if self.reasoning_tokens < 0:
            problems.append("reasoning_tokens must be >= 0")
        if not 0.0 <= self.profile_export_s < float("inf"):
            problems.append("profile_export_s must be >= 0")
        if not 0.0 < self.keepalive_s < float("inf"):
            problems.append("keepalive_s must be > 0")
        if self.incremental_streaming_output and self.sglang_version == "0.5.9":
            problems.append("incremental_streaming_output needs sglang_version 0.5.23 (0.5.9 has no such option)")
        for attr in ("error_500_rate", "error_429_rate", "disconnect_rate", "malformed_rate",
                     "fail_midstream_rate", "overload_reject_fraction", "util_ceiling"):
            if not 0.0 <= getattr(self, attr) <= 1.0:
                problems.append(f"{attr} must be within 0..1")
        if (self.error_500_rate + self.error_429_rate + self.disconnect_rate
                + self.malformed_rate + self.fail_midstream_rate) > 1.0:
            problems.append("the fault rates must add up to at most 1")
        if self.sglang_version not in SGLANG_VERSIONS:
            problems.append(f"sglang_version {self.sglang_version!r} must be one of: {', '.join(SGLANG_VERSIONS)}")
        if self.max_queued_requests is not None and self.max_queued_requests < 0:
            problems.append("max_queued_requests must be >= 0 or None")
        if self.hang_after is not None and self.hang_after < 0:
            problems.append("hang_after must be >= 0 or None")
        for attr in ("health_delay_s", "startup_s"):
            if not 0.0 <= getattr(self, attr) < float("inf"):
                problems.append(f"{attr} must be >= 0")
        if self.health_watchdog_s is not None and not 0.0 <= self.health_watchdog_s < float("inf"):
            problems.append("health_watchdog_s must be >= 0 or None")
        if self.decode_base_s < 0 or self.decode_per_seq_s < 0 or self.prefill_per_token_s < 0:
            problems.append("step times must be >= 0")
        if not self.time_scale > 0:
            problems.append("time_scale must be > 0")
        if self.ceiling_tok_s is not None and self.ceiling_tok_s <= 0:
            problems.append("ceiling_tok_s must be > 0 or None")
        if problems:
            raise ValueError(f"profile {self.name!r}: " + "; ".join(problems))

    @property
    def running_cap(self) -> int:
        """The number of requests the server really runs at once, in all: max_running_requests
        (under pipeline parallelism its request pool holds that many, whatever the micro-batch
        size); without pp a pp_max_micro_batch_size below it caps the one batch (SGLang's
        get_num_allocatable_reqs)."""
        if self.pp_size > 1 or self.pp_max_micro_batch_size is None:
            return self.max_running_requests
        return min(self.max_running_requests, self.pp_max_micro_batch_size)

    @property
    def micro_batches(self) -> int:
        """Micro-batches in flight: pp_size + pp_async_batch_depth under pp (SGLang's
        pp_loop_size), else 1."""
        return self.pp_size + self.pp_async_batch_depth if self.pp_size > 1 else 1

    @property
    def micro_batch_cap(self) -> int:
        """Requests one micro-batch holds at most: pp_max_micro_batch_size, by default
        max(max_running_requests // pp_size, 1) (scheduler.py); without pp, the running cap."""
        if self.pp_size <= 1:
            return self.running_cap
        if self.pp_max_micro_batch_size is not None:
            return self.pp_max_micro_batch_size
        return max(self.max_running_requests // self.pp_size, 1)

    def typed(self) -> frozenset[str]:
        """The SGLang arguments the operator typed (``typed_args``)."""
        return frozenset(a.strip() for a in self.typed_args.split(",") if a.strip())

    @property
    def has_faults(self) -> bool:
        """Whether any fault knob is set: errors, disconnects, malformed events, stalls, mid-stream
        aborts, shedding, overload, a crash or a hang (the performance model alone cannot
        forecast how such a server breaks: engine/run/estimate.py)."""
        return bool(
            self.error_500_rate or self.error_429_rate or self.disconnect_rate or self.malformed_rate
            or self.fail_midstream_rate or self.stall_after_tokens is not None or self.max_queued_requests is not None
            or self.overload_above is not None or self.crash_above is not None
            or self.crash_sustained_above is not None or self.hang_after is not None
        )

    @property
    def prefix_cache_capacity(self) -> int:
        """Tokens the prefix cache may hold (0: no prefix cache)."""
        if self.prefix_cache_tokens is None:
            return self.kv_budget_tokens
        return self.prefix_cache_tokens

    def step_time(self, batch: int, prefill_tokens: int = 0) -> float:
        """Seconds one iteration takes for ``batch`` running requests."""
        if batch <= 0 and prefill_tokens <= 0:
            return 0.0
        t = self.decode_base_s + self.decode_per_seq_s * batch
        if self.ceiling_tok_s is not None:
            t = max(t, batch / self.ceiling_tok_s)
        if self.collapse_above_batch is not None and batch > self.collapse_above_batch:
            t += self.collapse_per_seq_s * (batch - self.collapse_above_batch)
        t += self.prefill_per_token_s * prefill_tokens
        return t if self.time_scale == 1.0 else t * self.time_scale

    def token_interval(self, running: int) -> float:
        """Seconds between two tokens of one request while ``running`` requests run (no
        prefill). Under pp they fill micro-batches of up to ``micro_batch_cap`` (k of them);
        each needs pp_size stage times for a token and the first stage serves the k in turn:
        max(pp_size, k) stage times of its batch."""
        running = min(max(running, 1), self.running_cap)
        if self.pp_size <= 1:
            return self.step_time(running)
        b = min(self.micro_batch_cap, running)
        k = -(-running // b)
        return max(self.pp_size, k) * self.step_time(b)

    def steady_throughput(self, batch: int) -> float:
        """Output tokens/s of ``batch`` running requests with no prefill (the model's ideal
        curve; past the running cap, the cap's)."""
        if batch <= 0:
            return 0.0
        return min(batch, self.running_cap) / self.token_interval(batch)


_HEALTHY = SimProfile(name="healthy")

PROFILES: dict[str, SimProfile] = {
    "healthy": _HEALTHY,
    # The story: pipeline parallelism, `--tp 1 --pp-size 8 --max-running-requests 64`: 8
    # micro-batches of 64 // 8 = 8 (SGLang's default micro-batch size), 64 running in all,
    # each GPU a stage (1/8 of the layers: ~10 ms a pass) running a batch of 8: ~600 tok/s from
    # C=64 on, underfed (~40 % utilisation, ~320 W). With --set max_running_requests=512
    # --set pp_max_micro_batch_size=64: ~1400 tok/s at C=256 and climbing.
    "pp-capped": dataclasses.replace(
        _HEALTHY,
        name="pp-capped",
        tp_size=1,
        pp_size=8,
        max_running_requests=64,
        typed_args="tp_size,pp_size,max_running_requests",
        decode_base_s=0.010,
        decode_per_seq_s=0.0004,
        ceiling_tok_s=None,
        saturation_batch=20,
    ),
    # Latency collapses above 32 running, 503 above 48 in flight, dies above 96 for 2 s.
    "fragile": dataclasses.replace(
        _HEALTHY,
        name="fragile",
        collapse_above_batch=32,
        collapse_per_seq_s=0.002,
        overload_above=48,
        overload_reject_fraction=0.5,
        crash_sustained_above=96,
        crash_sustain_s=2.0,
        crash_above=128,
    ),
    "flaky": dataclasses.replace(
        _HEALTHY,
        name="flaky",
        error_500_rate=0.05,
        disconnect_rate=0.03,
        malformed_rate=0.02,
    ),
    # Serves 200 requests, then its scheduler hangs: connections are accepted and queued, no
    # token ever comes again, and /health still answers 200 (a hang SGLang's own health check
    # does not see).
    "hung": dataclasses.replace(_HEALTHY, name="hung", hang_after=200),
    # SGLang with --max-running-requests 32 --max-queued-requests 16: a request that finds 16
    # waiting is shed inside its 200 stream (503, "The request queue is full."); /health takes
    # 1 s, as SGLang's one-token health generation does.
    "shedding": dataclasses.replace(
        _HEALTHY,
        name="shedding",
        max_running_requests=32,
        max_queued_requests=16,
        health_delay_s=1.0,
    ),
}


def profile_names() -> list[str]:
    """The shipped profile names, in their documented order."""
    return list(PROFILES)


def get_profile(name: str) -> SimProfile:
    """Return the named profile or raise ValueError with the one-line user message."""
    try:
        return PROFILES[name]
    except KeyError:
        import difflib  # only on a refusal

        near = difflib.get_close_matches(str(name), list(PROFILES), n=1, cutoff=0.7)
        hint = f"; did you mean {near[0]}?" if near else f" (expected one of: {', '.join(PROFILES)})"
        raise ValueError(f"unknown profile {name!r}{hint}") from None


def _coerce(name: str, hint: Any, raw: str) -> Any:
    """Convert the text of a ``--set`` value to the field's declared type."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        if type(None) in args and raw.strip().lower() in ("none", "null", ""):
            return None
        hint = next(a for a in args if a is not type(None))
    kind = getattr(hint, "__name__", str(hint))
    if hint is bool:
        low = raw.strip().lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"bad value {raw!r} for profile field {name!r} (expected true or false)")
    try:
        if hint is int:
            return int(raw)
        if hint is float:
            return float(raw)
        if hint is str:
            return raw
    except ValueError:
        raise ValueError(
            f"bad value {raw!r} for profile field {name!r} (expected {kind})"
        ) from None
    raise ValueError(f"profile field {name!r} cannot be set from the command line")


def apply_overrides(profile: SimProfile, overrides: Mapping[str, str]) -> SimProfile:
    """Return ``profile`` with fields replaced from ``FIELD -> text`` pairs (``--set``)."""
    if not overrides:
        return profile
    hints = typing.get_type_hints(SimProfile)
    settable = [f.name for f in dataclasses.fields(SimProfile)]
    changes: dict[str, Any] = {}
    for key, raw in overrides.items():
        if key not in settable:
            raise ValueError(
                f"unknown profile field {key!r} (expected one of: {', '.join(settable)})"
            )
        changes[key] = _coerce(key, hints[key], raw)
    typed = [a for a in profile.typed_args.split(",") if a] if "typed_args" not in changes else []
    for key in changes:
        if key in SGLANG_ARG_NAMES and key not in typed:
            typed.append(key)  # set on the command line: what SGLang's /server_info top level shows
    if typed:
        changes["typed_args"] = ",".join(typed)
    return dataclasses.replace(profile, **changes)
