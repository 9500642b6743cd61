"""Detects a server-side running-request cap: the client holds C requests, the server runs
far fewer and queues the rest.

This is the failure redline was born from (SGLang pipeline parallelism capping each
micro-batch at ``max_running_requests // pp_size`` = 8 while the client sent 64): GPUs idle
at 40 % power, throughput flat, and nothing on screen said why.

The condition, per observation:

- the client holds its concurrency: ``in_flight >= IN_FLIGHT_HELD * target_c``;
- the server runs clearly fewer: ``running < RUNNING_SHORT * in_flight`` and ``running < target_c``;
- the server's queue is non-empty, or (SGLang pipeline parallelism) its running gauge sits at
  the micro-batch cap while the client holds enough to fill every micro-batch.

The server's running count is the most it reported over the last RUNNING_WINDOW_S seconds:
SGLang writes the gauge only at a prefill batch (the batch before the new requests join it: 0
when they replace a micro-batch whose requests all just ended) and every 40 decode batches
(``log_prefill_stats`` / ``log_decode_stats``; engine/sim/sched_log.py), so one scrape may read
an empty micro-batch beside a queue of hundreds.

Under pipeline parallelism SGLang keeps ``pp_size + pp_async_batch_depth`` micro-batches in
flight, each of at most ``pp_max_micro_batch_size`` requests (``scheduler_pp_mixin.py``
``pp_loop_size``, ``scheduler.py`` ``get_num_allocatable_reqs``), and the running gauge of a
``pp_rank`` is the micro-batch it last logged (``log_decode_stats`` reads ``self.running_batch``,
one of ``running_mbs``). With pp 8 and max_running_requests 64 the gauge reads 8 while 64 run,
and the queue is empty: the GPUs are underfed by micro-batches of 8, not held back by a queue.
The gauge is read as one micro-batch, and that is the cause named, once the client holds as
many as the micro-batches hold (``pp_micro_batches`` x the cap) or the server queues: with fewer
in flight the micro-batches are not what limits (fill them: more concurrency). The cure it names is a
larger ``--max-running-requests``: every micro-batch draws on one request pool of that many
(``get_num_allocatable_reqs``: the micro-batch's budget and the pool's free slots; the pool is
sized by max_running_requests, 0.5.9 ``model_runner_kv_cache_mixin.py``, 0.5.23
``kv_cache_configurator.py`` ``resolve_max_num_reqs``), so a larger micro-batch alone runs no
more requests, it only packs them into fewer micro-batches (engine/sim/pipeline.py).

The cause named first: preemptions in the poller's recent window (requests the server sent back
to its queue because its KV cache filled: "KV cache full: the server preempts"), then the pp
micro-batch, then a cap the server info names (times its data-parallel schedulers, attention DP
included), then a full KV cache.

It must hold for SUSTAIN_S seconds across at least MIN_SERVER_SAMPLES distinct server
samples (a stale sample repeated does not count), restarting whenever the target changes,
so the ramp-up after a concurrency change (the server still admitting/prefilling new
requests) stays silent. With 1 s telemetry it fires ~3 s after the condition starts. It fires
once per episode and re-arms after the condition has been false for CLEAR_S seconds.
"""

from __future__ import annotations

import dataclasses
from collections import deque

from ..fmt import num
from .server_info import ServerInfo
from .server_metrics import PREFIX_WINDOW_S
from .types import ServerSample

__all__ = ["CapDetector", "cap_cause", "cap_finding", "cap_warning", "micro_batch_bound", "micro_batch_text"]

IN_FLIGHT_HELD = 0.9
RUNNING_SHORT = 0.75
SUSTAIN_S = 3.0
MIN_SERVER_SAMPLES = 3
CLEAR_S = 3.0
MAX_GAP_S = 5.0  # observations further apart than this do not make one episode
KV_FULL = 0.9  # KV-cache usage at which a short running count is the token budget's doing
PREEMPT_WINDOW_S = PREFIX_WINDOW_S  # the poller counts preemptions over this window
RUNNING_WINDOW_S = 5.0  # the running count read: the most the server reported over this window


def _near(running: float, cap: int) -> bool:
    return abs(running - cap) <= max(1.0, 0.1 * cap)


def micro_batch_bound(info: ServerInfo | None, server: ServerSample, in_flight: int | None = None) -> bool:
    """The running gauge sits at SGLang's pp micro-batch cap: it reads one micro-batch. With
    ``in_flight`` (the condition's test) and an empty queue, only when the client holds enough to
    fill every micro-batch: with fewer, the micro-batches are not what limits."""
    if info is None or not info.pp_micro_batch_cap or server.running is None:
        return False
    cap = info.pp_micro_batch_cap
    if info.max_running_requests and cap >= info.max_running_requests:
        return False  # a micro-batch as large as the whole cap: that cap is the one met
    if in_flight is not None and not server.queued and info.pp_micro_batches:
        full = min(info.pp_micro_batches * cap, info.max_running_requests or info.pp_micro_batches * cap)
        if in_flight < IN_FLIGHT_HELD * full * max(1, info.dp_ranks):
            return False
    return _near(server.running, cap) or info.dp_ranks > 1 and _near(server.running, cap * info.dp_ranks)


def micro_batch_text(info: ServerInfo) -> str:
    """``micro-batches of 8 from max_running_requests 64 / pp 8: GPUs underfed; raise
    --max-running-requests (--pp-max-micro-batch-size alone runs no more)`` (SGLang's default derivation), else the cap as set."""
    cap, mrr, pp = info.pp_micro_batch_cap, info.max_running_requests, info.pp_size
    if mrr and pp and pp > 1 and cap == max(mrr // pp, 1):
        return (f"micro-batches of {cap} from max_running_requests {mrr} / pp {pp}: GPUs underfed; "
                "raise --max-running-requests (--pp-max-micro-batch-size alone runs no more)")
    n = info.pp_micro_batches
    return f"micro-batches of {cap} (pp_max_micro_batch_size {cap}{f', {n} micro-batches' if n else ''})"


def _dp_text(info: ServerInfo) -> str:
    n = info.dp_ranks
    attn = info.attn_dp_size if info.attn_dp_size and info.attn_dp_size > 1 else 0
    return f" × dp {n}" + (" (attention DP)" if attn and n == attn else f" (dp {info.dp_size} × attention DP {attn})" if attn else "")


def cap_cause(info: ServerInfo | None, server: ServerSample) -> str:
    """The likely reason the server runs only ``server.running`` requests."""
    running = server.running or 0.0
    if server.preemptions_recent:  # requests sent back to the queue: the KV cache is the limit
        kv = f", KV {100 * server.kv_usage:.0f} % used" if server.kv_usage is not None else ""
        return f"KV cache full: the server preempts ({num(server.preemptions_recent)} preempted in the last {PREEMPT_WINDOW_S:.0f} s{kv})"
    if info is not None and micro_batch_bound(info, server):
        return micro_batch_text(info)
    if info is not None:
        dp = info.dp_ranks
        candidates: list[tuple[int, str]] = []
        if info.max_num_seqs:
            candidates.append((info.max_num_seqs, f"vLLM max-num-seqs {info.max_num_seqs}"))
        if info.max_running_requests:
            candidates.append((info.max_running_requests, f"max_running_requests {info.max_running_requests}"))
        for cap, why in candidates:
            if _near(running, cap):
                return why
        if dp > 1:
            for cap, why in candidates:
                if _near(running, cap * dp):
                    return f"{why}{_dp_text(info)}"
    if server.kv_usage is not None and server.kv_usage >= KV_FULL:
        return f"KV cache full ({100 * server.kv_usage:.0f} % used): the token budget limits the batch"
    if server.kind == "vllm" and (info is None or not info.max_num_seqs):
        return f"likely vLLM --max-num-seqs {num(running)} (vLLM does not report it)"
    if info is None:
        return "unknown cause (no server info)"
    caps = info.caps_text()
    return f"unknown cause (server info: {caps})" if caps else "unknown cause (server info names no cap)"


def _runs(info: ServerInfo | None, server: ServerSample) -> str:
    """"8", or under pp "8 a micro-batch" (the gauge is one of its micro-batches)."""
    runs = num(server.running or 0.0)
    if info is not None and not server.preemptions_recent and micro_batch_bound(info, server):
        runs += " a micro-batch"
    return runs


def cap_finding(info: ServerInfo | None, in_flight: int, server: ServerSample) -> str:
    """What a run's answer names as its cause: ``"server runs 8 a micro-batch: micro-batches of
    8 from max_running_requests 64 / pp 8: GPUs underfed; raise --max-running-requests (--pp-max-micro-batch-size alone runs no more)"``,
    ``"server runs 32 of 64 in flight: max_running_requests 32"``."""
    runs = _runs(info, server)
    of = "" if runs.endswith("micro-batch") else f" of {in_flight} in flight"
    return f"server runs {runs}{of}: {cap_cause(info, server)}"


def cap_warning(info: ServerInfo | None, in_flight: int, server: ServerSample) -> str:
    """``"server cap: client holds 64 in flight, server runs 8, queue 56 — <cause>"``; under
    pp, ``server runs 8 a micro-batch`` (the gauge is one of its micro-batches; the cause says
    how many run)."""
    return f"server cap: client holds {in_flight} in flight, server runs {_runs(info, server)}, queue {num(server.queued or 0.0)} — {cap_cause(info, server)}"


class CapDetector:
    """Feed it one observation per telemetry tick; it returns a warning once per episode.

    ``info`` may be None (no server info: the warning then says the cause is unknown).
    """

    def __init__(self, info: ServerInfo | None) -> None:
        self.info = info
        self.active = False  # a warning has fired and the condition has not cleared since
        self.last_warning: str | None = None
        self.holding = False  # the condition held at the last observation
        self.finding: str | None = None  # while active: cap_finding with the latest numbers
        self._start: float | None = None  # when the pending episode began
        self._target: int | None = None
        self._last_true: float = 0.0
        self._server_ts: set[float] = set()
        self._false_since: float | None = None
        self._recent: deque[tuple[float, float]] = deque()  # (server sample time, running)
        self.server: ServerSample | None = None  # the last reading (most running over the window)

    @staticmethod
    def condition(target_c: int, in_flight: int, server: ServerSample, info: ServerInfo | None = None) -> bool:
        """The per-observation test (see the module docstring)."""
        if server.running is None or server.queued is None:
            return False
        return (
            target_c >= 2
            and in_flight >= 2
            and in_flight >= IN_FLIGHT_HELD * target_c
            and server.running < RUNNING_SHORT * in_flight
            and server.running < target_c
            and (server.queued > 0 or micro_batch_bound(info, server, in_flight))
        )

    def _reading(self, server: ServerSample) -> ServerSample:
        """``server`` with the most running it reported over the last RUNNING_WINDOW_S seconds."""
        recent = self._recent
        if not recent or recent[-1][0] != server.t:
            recent.append((server.t, server.running or 0.0))
        while recent and recent[0][0] < server.t - RUNNING_WINDOW_S:
            recent.popleft()
        most = max(r for _, r in recent)
        return server if most == server.running else dataclasses.replace(server, running=most)

    def update(self, t: float, target_c: int, in_flight: int, server: ServerSample | None) -> str | None:
        """One observation at time ``t`` (seconds, any monotonic clock). Returns the warning
        text the moment a sustained cap is established, else None."""
        if server is None or server.running is None or server.queued is None:
            return None  # no evidence either way
        server = self.server = self._reading(server)
        self.holding = self.condition(target_c, in_flight, server, self.info)
        if not self.holding:
            self._start = None
            self._server_ts.clear()
            if self.active:
                if self._false_since is None:
                    self._false_since = t
                elif t - self._false_since >= CLEAR_S:
                    self.active = False
                    self.finding = None
                    self._false_since = None
            return None
        self._false_since = None
        if self.active:
            self.finding = cap_finding(self.info, in_flight, server)
            return None
        if self._start is None or target_c != self._target or t - self._last_true > MAX_GAP_S:
            self._start = t
            self._target = target_c
            self._server_ts = set()
        self._server_ts.add(server.t)
        self._last_true = t
        if t - self._start >= SUSTAIN_S and len(self._server_ts) >= MIN_SERVER_SAMPLES:
            self.active = True
            self._start = None
            self.finding = cap_finding(self.info, in_flight, server)
            self.last_warning = cap_warning(self.info, in_flight, server)
            return self.last_warning
        return None
