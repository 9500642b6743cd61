"""Looking inside the server at the load redline holds: the profiler and the cache flush.

- **Profiler capture** (key `P`, `[ramp] profile = [C, ...]`, the control API's
  `POST /v1/profile`): `POST /start_profile` (SGLang's body `{"output_dir", "num_steps",
  "activities"}`, which vLLM ignores), then `POST /stop_profile` after `profile_s` seconds
  (`--profile-s`, default 5) or at the end of the step it started in, whichever comes first.
  The capture names the load it covered and its window, and the trace's place as the server
  said it (its answer's text) or as redline asked (`output_dir`): a path on the server's host,
  not this one (`trace on the server: PATH`); it is logged and lands in the step's `profiles`
  in summary.json.
- **Cache flush** (`[ramp] flush_cache = true`, `--flush-cache`): the load drains to zero,
  then the prefix cache is flushed, by what the server said it is: SGLang `/flush_cache`, vLLM
  `/reset_prefix_cache`. SGLang refuses a flush while requests run, so it is never called
  then: redline waits for its own requests to end and for the server to report none running
  or queued (a fresh /metrics scrape) first. The drain belongs to no step.

A server without an endpoint (404, 405, 501) or with its profiler off gets one warning line,
once per operation, not an error; later calls to that operation are skipped quietly.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import httpx

from ..telemetry.server_metrics import parse_server_metrics

if TYPE_CHECKING:
    from ..measure.accumulator import StepAccumulator
    from ..run.engine import Engine

__all__ = [
    "DEFAULT_PROFILE_S", "FlushResult", "ProfileCapture", "ServerOps", "capture_started", "drain_and_flush",
    "server_ops", "start_capture",
]

DEFAULT_PROFILE_S = 5.0
OPS_TIMEOUT_S = 30.0  # a profiler stop may take a while (SGLang writes the trace then)
DRAIN_MAX_S = 600.0  # the longest redline waits for its requests to end before a flush
SERVER_IDLE_MAX_S = 10.0  # ... and for the server to report nothing running or queued
POLL_S = 0.05
FLUSH_TRIES = 3  # a flush refused (400: requests still running or queued) is asked again ...
FLUSH_RETRY_S = 0.2  # ... this long later, once the server's metrics say it holds none
UNSUPPORTED = (404, 405, 501)
FLUSH_PATHS = {"sglang": "/flush_cache", "vllm": "/reset_prefix_cache"}
PROFILE_ACTIVITIES = ["CPU", "GPU"]


def _said(text: str) -> str:
    """The server's answer in one short line."""
    return " ".join(text.split())[:200]


@dataclass
class FlushResult:
    ok: bool
    path: str = ""
    status: int = 0
    said: str = ""
    skipped: bool = False  # not supported (warned once) or no path for this server kind


@dataclass
class ProfileCapture:
    """One profiler capture, as the log and summary.json name it."""

    load: str  # "C=8", "R=12/s", ...
    step: int  # the step it started in
    t_start: float  # epoch seconds, when /start_profile answered
    t_end: float | None = None  # when /stop_profile was sent
    trace: str | None = None  # where the trace is: the server's word, else the output_dir asked
    server_said: str = ""  # /stop_profile's answer, one line
    stopped_by: str = ""  # "profile_s" | "step end" | "stop"
    ok: bool = True
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "load": self.load, "step": self.step, "t_start": round(self.t_start, 3),
            "t_end": None if self.t_end is None else round(self.t_end, 3),
            "duration_s": None if self.t_end is None else round(self.t_end - self.t_start, 3),
            "trace": self.trace, "server_said": self.server_said, "stopped_by": self.stopped_by,
            "ok": self.ok,
        }


class ServerOps:
    """The profiler and cache endpoints of one target (its base URL and kind)."""

    def __init__(self, client: httpx.AsyncClient, base: str, kind: str, log: Callable[..., None], warn: Callable[[str], None], *, output_dir: str | None = None) -> None:
        self.client = client
        self.base = base.rstrip("/")
        self.kind = kind
        self.log = log
        self.warn = warn
        self.output_dir = output_dir  # None: the server's default (SGLANG_TORCH_PROFILER_DIR, /tmp)
        self.unsupported: set[str] = set()  # operations a 404 told us the server lacks
        self.capture: ProfileCapture | None = None  # the capture running now
        self.captures: list[ProfileCapture] = []
        self._task: asyncio.Task | None = None
        self.started: asyncio.Future | None = None  # the running capture's start: True / False

    # -- the endpoints -----------------------------------------------------------------
    async def _post(self, path: str, body: dict | None = None) -> tuple[int, str]:
        try:
            r = await self.client.post(self.base + path, json=body, timeout=OPS_TIMEOUT_S)
        except httpx.HTTPError as exc:
            return 0, f"{type(exc).__name__}: {exc}"
        return r.status_code, r.text

    def _lacks(self, op: str, status: int, what: str) -> bool:
        """A 404-like answer: warn once, remember."""
        if status in UNSUPPORTED:
            if op not in self.unsupported:
                self.unsupported.add(op)
                self.warn(f"{what}: the server has no such endpoint (HTTP {status}); skipped from now on")
            return True
        return False

    async def start_profile(self) -> tuple[bool, str]:
        """(started, the server's answer)."""
        if "profile" in self.unsupported:
            return False, ""
        body: dict[str, Any] = {"activities": PROFILE_ACTIVITIES}
        if self.output_dir:
            body["output_dir"] = self.output_dir
        status, text = await self._post("/start_profile", body)
        if self._lacks("profile", status, "profiler (POST /start_profile)"):
            return False, text
        if status != 200:
            self.warn(f"profiler: /start_profile answered HTTP {status or 'no answer'}: {_said(text)} (is the server's profiler on? SGLang: SGLANG_TORCH_PROFILER_DIR, vLLM: VLLM_TORCH_PROFILER_DIR)")
            return False, text
        return True, text

    async def stop_profile(self) -> tuple[bool, str]:
        status, text = await self._post("/stop_profile")
        if self._lacks("profile", status, "profiler (POST /stop_profile)"):
            return False, text
        return status == 200, text

    async def server_idle(self, max_s: float = SERVER_IDLE_MAX_S) -> bool | None:
        """Wait until the server's /metrics report nothing running or queued (True), the wait
        passes max_s (False), or the server has no such metrics (None)."""
        t_end = time.monotonic() + max_s
        while True:
            try:
                r = await self.client.get(self.base + "/metrics", timeout=2.0)
                s = parse_server_metrics(r.text, time.perf_counter()) if r.status_code == 200 else None
            except Exception:  # noqa: BLE001 - no metrics: the caller judges by its own count
                s = None
            if s is None or s.running is None:
                return None
            if not s.running and not s.queued:
                return True
            if time.monotonic() >= t_end:
                return False
            await asyncio.sleep(0.1)

    async def flush_cache(self) -> FlushResult:
        """Flush the prefix cache (call only with nothing in flight)."""
        path = FLUSH_PATHS.get(self.kind)
        if path is None:
            if "flush" not in self.unsupported:
                self.unsupported.add("flush")
                self.warn(f"cache flush: the server is {self.kind!r}, not SGLang or vLLM: no flush endpoint known; skipped")
            return FlushResult(False, skipped=True)
        if "flush" in self.unsupported:
            return FlushResult(False, path, skipped=True)
        for attempt in range(FLUSH_TRIES):
            if attempt:  # refused: the server still held a request (a handler ending after our
                await asyncio.sleep(FLUSH_RETRY_S)  # stream did): wait for it to say it holds none
                await self.server_idle()
            status, text = await self._post(path)
            if self._lacks("flush", status, f"cache flush (POST {path}{'; vLLM serves it with VLLM_SERVER_DEV_MODE=1' if self.kind == 'vllm' else ''})"):
                return FlushResult(False, path, status, _said(text), skipped=True)
            if status != 400:
                break
        return FlushResult(status == 200, path, status, _said(text))


def server_ops(engine: Engine) -> ServerOps:
    """The engine's ServerOps (its first target), made on first use."""
    ops = getattr(engine, "_server_ops", None)
    if ops is None:
        assert engine.client is not None and engine.target is not None, "engine not started"
        kind = engine.target.info.kind
        srv = engine.telemetry.server if engine.telemetry is not None else None
        if kind not in FLUSH_PATHS and srv is not None:
            kind = srv.kind  # what its /metrics say it is
        ops = ServerOps(
            engine.client, engine.target.url, kind, engine.log,
            lambda text: engine.warn(text, key=f"server ops {text[:40]}"),
            output_dir=getattr(engine.config, "profile_dir", None),
        )
        engine._server_ops = ops  # type: ignore[attr-defined]
    return ops


def _step_now(engine: Engine) -> StepAccumulator | None:
    book = engine.book
    return book.live or book.current


def start_capture(engine: Engine, seconds: float | None = None, acc: StepAccumulator | None = None) -> asyncio.Task | None:
    """Start a profiler capture at the load held now, stopped after `seconds` (the engine's
    --profile-s) or at the end of the step it started in. None when one already runs."""
    ops = server_ops(engine)
    if ops._task is not None and not ops._task.done():
        engine.log("notice", "profiler: a capture is already running; this one is skipped")
        return None
    if seconds is None:
        seconds = float(getattr(engine.config, "profile_s", DEFAULT_PROFILE_S) or DEFAULT_PROFILE_S)
    acc = acc or _step_now(engine)
    ops.started = asyncio.get_running_loop().create_future()
    ops._task = asyncio.ensure_future(_capture(engine, ops, seconds, acc))
    return ops._task


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


async def _capture(engine: Engine, ops: ServerOps, seconds: float, acc: StepAccumulator | None) -> ProfileCapture | None:
    load = engine.load_text if acc is None else _load_of(engine, acc)
    try:
        ok, said = await ops.start_profile()
    except BaseException:
        if ops.started is not None and not ops.started.done():
            ops.started.set_result(False)
        raise
    if ops.started is not None and not ops.started.done():
        ops.started.set_result(ok)
    if not ok:
        return None
    cap = ProfileCapture(load=load, step=acc.index if acc is not None else 0, t_start=time.time())
    ops.capture = cap
    engine.log("notice", f"profiler started at {load} for up to {seconds:g} s ({_said(said) or 'started'})")
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
        cap.t_end = time.time()
        cap.stopped_by = stopped_by
        ok, said = await ops.stop_profile()
        cap.ok = ok
        cap.server_said = _said(said)
        cap.trace = _trace_place(said, ops.output_dir)
        ops.capture = None
        ops.captures.append(cap)
        if acc is not None:
            acc.profiles.append(cap.to_dict())
        window = f"{time.strftime('%H:%M:%S', time.localtime(cap.t_start))}–{time.strftime('%H:%M:%S', time.localtime(cap.t_end))}"
        if ok:
            engine.log("notice", f"profiler stopped: {load}, {window} ({cap.t_end - cap.t_start:.1f} s, {stopped_by}); trace on the server: {cap.trace}")
        else:
            engine.warn(f"profiler: /stop_profile failed at {load} ({cap.server_said or 'no answer'})", key="profiler stop")
    return cap


def _load_of(engine: Engine, acc: StepAccumulator) -> str:
    if acc.mode == "rate" and acc.rate is not None:
        return f"R={acc.rate:g}/s"
    if acc.mode == "trace" and acc.rate is not None:
        return f"trace x{acc.rate:g}"
    return f"C={acc.concurrency}"


def _trace_place(said: str, output_dir: str | None) -> str:
    """Where the trace is: the path the server named in its answer, else the directory
    redline asked for, else the server's default."""
    for word in said.split():
        if "/" in word and ("trace" in word or word.endswith((".json", ".gz", ".pt"))):
            return word.rstrip(".,;")
    if output_dir:
        return output_dir
    text = _said(said)
    return f"the server's profiler directory (SGLANG_TORCH_PROFILER_DIR / VLLM_TORCH_PROFILER_DIR){f'; it said: {text}' if text else ''}"


async def drain_and_flush(engine: Engine, label: str) -> dict | None:
    """Drain the load to zero (sending paused: the caller's next step resumes it), wait for
    the server to hold nothing, flush its prefix cache. Returns the step's `cache_flush`
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
    idle = await ops.server_idle()
    if idle is False:
        engine.warn(f"cache flush before {label}: the server still reports requests running or queued; not flushed")
        return None
    drain_s = time.perf_counter() - t0
    res = await ops.flush_cache()
    if res.skipped:
        return None
    rec = {"t": round(time.time(), 3), "drain_s": round(drain_s, 3), "drained": was, "path": res.path, "ok": res.ok}
    if res.ok:
        engine.log("notice", f"cache flushed before {label} ({res.path}; drained {was} in flight in {drain_s:.1f} s, no step's time)")
    else:
        engine.warn(f"cache flush before {label}: {res.path} answered HTTP {res.status or 'nothing'}: {res.said}", key="cache flush refused")
    return rec
