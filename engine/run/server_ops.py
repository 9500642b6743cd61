"""Looking inside the server at the load redline holds: the profiler and the cache flush.

- **Profiler capture** (key `P`, `[ramp] profile = [C, ...]`, the control API's
  `POST /v1/profile`): `POST /start_profile` (SGLang's body `{"output_dir", "activities",
  "profile_prefix"}`, which vLLM ignores), then `POST /stop_profile` after `profile_s` seconds
  (`--profile-s`, default 5) or at the end of the step it started in, whichever comes first.
  SGLang's `/stop_profile` answers "Stop profiling. This will take some time." only once the
  scheduler wrote the trace (`tokenizer_manager` awaits the scheduler's `stop_profile`, which
  exports the chrome trace inside its loop): no token is made meanwhile, and on a busy 8-GPU
  server that takes minutes, so the stop waits up to PROFILE_STOP_TIMEOUT_S. The steps it
  stalled are marked `profiled`. The answer names no path: the trace is
  `<dir>/<profile_prefix>-<profile_id>-TP-<rank>[-PP-<rank>...].trace.json.gz` in the directory
  asked for, else SGLang's default, `SGLANG_TORCH_PROFILER_DIR` or `/tmp`
  (`scheduler_profiler_mixin.py`, 0.5.23 `scheduler_components/profiler_manager.py`); redline
  sends its own `profile_prefix` and, when the server runs on this host, finds the files there
  (engine/run/trace_place.py). A refusal or failure is HTTP 500 (a RuntimeError of the
  scheduler's message, which only the server's log shows).
- **Cache flush** (`[ramp] flush_cache = true`, `--flush-cache`): the load drains to zero (its
  own requests end), then the prefix cache is flushed, by what the server said it is: SGLang
  `/flush_cache`, vLLM `/reset_prefix_cache`. The flush is driven by the server's own answer:
  SGLang answers 400 while it holds a request (0.5.9 with the same text as a success,
  "Cache flushed. ... (When there are running or waiting requests, the operation will not be
  performed.)"; 0.5.23 "Flush cache failed." or "Timed out waiting for idle state."), and
  redline asks again until FLUSH_MAX_S. It sends `?timeout=` (0.5.23 waits for idle itself,
  `scheduler_components/flush_wrapper.py`; 0.5.9 ignores it). It never waits on /metrics:
  0.5.9's gauges keep the last decode log's batch for 30 s of idle. The drain belongs to no step.
- **Admin key**: a server started with `--admin-api-key` answers 401 to both without it;
  `--admin-key` (REDLINE_ADMIN_KEY) is sent as their bearer (`utils/auth.py` ADMIN_OPTIONAL),
  never written anywhere.

A server without an endpoint (404, 405, 501) gets one warning line, once per operation, not an
error; later calls to that operation are skipped quietly. So does a 401/403.

The endpoints themselves (ServerOps) are engine/client/server_admin.py; the engine keeps its
first target's (engine/core/targets.py server_ops).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import httpx

from ..client.server_admin import (
    DEFAULT_PROFILE_S,
    OPS_TIMEOUT_S,
    PROFILE_STOP_TIMEOUT_S,
    FlushResult,
    ProfileCapture,
    ServerOps,
    answer_line,
)
from .trace_place import find_traces, trace_pattern

if TYPE_CHECKING:
    from ..core.engine import Engine
    from ..measure.accumulator import StepAccumulator

__all__ = [
    "DEFAULT_PROFILE_S", "FlushResult", "ProfileCapture", "ServerOps", "capture_started", "drain_and_flush",
    "server_ops", "start_capture", "trace_being_written",
]

DRAIN_MAX_S = 600.0  # the longest redline waits for its requests to end before a flush
POLL_S = 0.05


def server_ops(engine: Engine) -> ServerOps:
    """The engine's ServerOps: its first target's (engine/core/targets.py), made on first use."""
    return engine.targets.server_ops()


def trace_being_written(engine: Engine) -> bool:
    """A /stop_profile awaits its answer: SGLang's scheduler is writing the trace and makes no
    token meanwhile (a silence of redline's own making, not a stall)."""
    return engine.targets.trace_being_written


def _step_now(engine: Engine) -> StepAccumulator | None:
    book = engine.book
    return book.live or book.current


def start_capture(engine: Engine, seconds: float | None = None, acc: StepAccumulator | None = None) -> asyncio.Task | None:
    """Start a profiler capture at the load held now, stopped after `seconds` (the engine's
    --profile-s) or at the end of the step it started in. None when one already runs."""
    ops = server_ops(engine)
    if ops.task is not None and not ops.task.done():
        engine.log("notice", "profiler: a capture is already running; this one is skipped")
        return None
    if seconds is None:
        seconds = float(engine.config.profile_s or DEFAULT_PROFILE_S)
    acc = acc or _step_now(engine)
    ops.started = asyncio.get_running_loop().create_future()
    ops.task = asyncio.ensure_future(_capture(engine, ops, seconds, acc))
    return ops.task


async def capture_started(engine: Engine) -> str:
    """How the capture just asked for started: "started", or why not (one line)."""
    ops = server_ops(engine)
    fut = ops.started
    if fut is None:
        return "not started"
    ok = await asyncio.shield(fut)
    if ok:
        return "started"
    return "not started: the server has no profiler endpoint" if "profile" in ops.unsupported else "not started: the server refused (see the log)"


def _mark_profiled(acc: StepAccumulator | None) -> None:
    """The step's figures include the profiler's cost (its export stalls the scheduler)."""
    if acc is not None:
        acc.profiled = True


async def _capture(engine: Engine, ops: ServerOps, seconds: float, acc: StepAccumulator | None) -> ProfileCapture | None:
    load = engine.load_text if acc is None else _load_of(engine, acc)
    prefix = ops.new_prefix()
    try:
        ok, said = await ops.start_profile(prefix)
    except BaseException:
        if ops.started is not None and not ops.started.done():
            ops.started.set_result(False)
        raise
    if ops.started is not None and not ops.started.done():
        ops.started.set_result(ok)
    if not ok:
        return None
    cap = ProfileCapture(load=load, step=acc.index if acc is not None else 0, t_start=time.time(), prefix=prefix)
    ops.capture = cap
    _mark_profiled(acc)
    engine.log("notice", f"profiler started at {load} for up to {seconds:g} s ({answer_line(said) or 'started'})")
    t_end = time.monotonic() + seconds
    stopped_by = "profile_s"
    try:
        while time.monotonic() < t_end:
            if acc is not None and acc.closed:
                stopped_by = "step end"
                break
            if engine.closed:
                stopped_by = "stop"
                break
            await asyncio.sleep(POLL_S)
    finally:
        await _stop(engine, ops, cap, acc, stopped_by)
    return cap


async def _stop(engine: Engine, ops: ServerOps, cap: ProfileCapture, acc: StepAccumulator | None, stopped_by: str) -> None:
    """/stop_profile, waited for while the server writes the trace; the steps it stalls marked."""
    cap.t_end = time.time()
    cap.stopped_by = stopped_by
    live = _step_now(engine)
    if live is not None and not live.closed:
        _mark_profiled(live)
    t0 = time.monotonic()
    status, said = await ops.stop_profile(OPS_TIMEOUT_S if stopped_by == "stop" else PROFILE_STOP_TIMEOUT_S)
    cap.stop_s = time.monotonic() - t0
    after = _step_now(engine)
    if after is not None and after is not live:
        _mark_profiled(after)  # a step that opened while the trace was written
    cap.ok = status == 200
    cap.server_said = answer_line(said)
    cap.trace = _trace_place(ops, cap, said if cap.ok else "")
    ops.capture = None
    ops.captures.append(cap)
    if acc is not None:
        acc.profiles.append(cap.to_dict())
    window = f"{time.strftime('%H:%M:%S', time.localtime(cap.t_start))}–{time.strftime('%H:%M:%S', time.localtime(cap.t_end))}"
    if cap.ok:
        took = f"; the server took {cap.stop_s:.1f} s to write it" if cap.stop_s >= 1.0 else ""
        engine.log("notice", f"profiler stopped: {cap.load}, {window} ({cap.t_end - cap.t_start:.1f} s, {stopped_by}); trace on the server: {cap.trace}{took}")
    elif status == 0:
        engine.warn(f"profiler: /stop_profile at {cap.load}: {cap.server_said} (the server may still be writing the trace: {cap.trace})", key="profiler stop")
    else:
        hint = " (SGLang answers 500 when its scheduler fails to stop or write the trace: its log says why)" if status == 500 else ""
        engine.warn(f"profiler: /stop_profile failed at {cap.load}: HTTP {status}: {cap.server_said or 'no text'}{hint}", key="profiler stop")


def _load_of(engine: Engine, acc: StepAccumulator) -> str:
    if acc.mode == "rate" and acc.rate is not None:
        return f"R={acc.rate:g}/s"
    if acc.mode == "trace" and acc.rate is not None:
        return f"trace x{acc.rate:g}"
    return f"C={acc.concurrency}"


def _trace_place(ops: ServerOps, cap: ProfileCapture, said: str) -> str:
    """Where the trace is: a path the server named in its answer; else the files found in the
    profiler's directory (a server on this host); else the pattern its files follow there."""
    for word in said.split():
        if "/" in word and ("trace" in word or word.endswith((".json", ".gz", ".pt"))):
            return word.rstrip(".,;")
    local = cap.ok and httpx.URL(ops.base).host in ("127.0.0.1", "localhost", "::1")  # a failed stop wrote nothing
    found = find_traces(ops.kind, ops.output_dir, ops.info_raw, cap.prefix, cap.t_start) if local else []
    if found:
        more = f" (and {len(found) - 1} more: one per rank)" if len(found) > 1 else ""
        return f"{found[0]}{more}"
    return trace_pattern(ops.kind, ops.output_dir, ops.info_raw, cap.prefix)


async def drain_and_flush(engine: Engine, label: str) -> dict | None:
    """Drain the load to zero (sending paused: the caller's next step resumes it), then flush
    the server's prefix cache, asking again while it refuses. Returns the step's `cache_flush`
    record (None when skipped). Never flushes while a request of redline's is in flight."""
    ops = server_ops(engine)
    ctl = engine.controller
    if ctl is None:
        return None
    t0 = time.perf_counter()
    was = engine.in_flight
    ctl.pause()
    while ctl.in_flight > 0 and time.perf_counter() - t0 < DRAIN_MAX_S and not engine.server_gone:
        await asyncio.sleep(POLL_S)
    if ctl.in_flight > 0:
        engine.warn(f"cache flush before {label}: {ctl.in_flight} requests still in flight after {DRAIN_MAX_S:.0f} s; not flushed")
        return None
    drain_s = time.perf_counter() - t0
    res = await ops.flush_cache()
    if res.skipped:
        return None
    rec = {"t": round(time.time(), 3), "drain_s": round(drain_s, 3), "drained": was, "path": res.path, "ok": res.ok,
           "tries": res.tries}
    if res.ok:
        refused = f", refused {res.tries - 1}× first (the server still held requests)" if res.tries > 1 else ""
        engine.log("notice", f"cache flushed before {label} ({res.path}; drained {was} in flight in {drain_s:.1f} s{refused}, no step's time)")
    elif res.status == 400:
        engine.warn(f"cache flush before {label}: {res.path} refused {res.tries}× over {res.waited_s:.0f} s (HTTP 400: the server "
                    f"holds requests; it said: {res.said}); not flushed", key="cache flush refused")
    else:
        engine.warn(f"cache flush before {label}: {res.path} answered {f'HTTP {res.status}' if res.status else 'nothing'}: {res.said}; not flushed", key="cache flush refused")
    return rec
