"""The simulator's server operations, as SGLang serves them, and their ground truth.

Read from the wheels (``srt/entrypoints/http_server.py`` ``start_profile_async``,
``stop_profile_async``, ``flush_cache``; 0.5.23 ``managers/tokenizer_control_mixin.py``
``_execute_profile``, ``managers/scheduler_components/profiler_manager.py``,
``managers/scheduler_components/flush_wrapper.py``; 0.5.9 ``managers/scheduler_profiler_mixin.py``,
``managers/scheduler.py`` ``flush_cache``):

- ``GET|POST /start_profile`` (body ``{"output_dir", "num_steps", "activities",
  "profile_prefix"}``, every key optional): "Start profiling.\\n". ``num_steps``: it stops by
  itself after that many scheduler iterations. A refusal (one already runs) is the
  scheduler's RuntimeError: HTTP 500, Starlette's plain "Internal Server Error".
- ``GET|POST /stop_profile``: answers "Stop profiling. This will take some time.\\n" (no path)
  only once the scheduler exported the trace, which it does inside its loop: no token is made
  for ``profile_export_s`` seconds. The trace is written as SGLang names it,
  ``<dir>/<profile_prefix>-<profile_id>-TP-<tp>[-PP-<pp>].trace.json.gz``, one file per rank,
  in the ``output_dir`` asked for, else ``$SGLANG_TORCH_PROFILER_DIR``, else ``/tmp``. Not
  running: 500 as above.
- ``GET|POST /flush_cache``: empties the prefix cache; refused with HTTP 400 while a request is
  queued or running, 0.5.9 with the same text as a success (its handler writes one text for
  both), 0.5.23 "Flush cache failed.\\n"; 0.5.23 takes ``?timeout=S``: it waits up to S seconds
  for the scheduler to be idle, then flushes, else "Timed out waiting for idle state.", and
  refuses a second flush while one waits ("Another flush_cache is already in progress.").

With the profile's ``profiler = False`` the two profiler endpoints do not exist (``404``), as on
vLLM started without ``VLLM_TORCH_PROFILER_DIR``.

Every call is logged with what the model held at that moment (``/sim/state``: ``profiles``,
``flush_calls``): the tests judge redline against it (a flush while a request ran, a profile
window that covered the step it names).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web

if TYPE_CHECKING:
    from .model import BatchModel
    from .profiles import SimProfile


class _Service(Protocol):
    """What the operations read of the sim's service (engine/sim/http_app.py SimService)."""

    model: BatchModel
    profile: SimProfile

__all__ = ["SimOps", "DEFAULT_PROFILE_DIR", "FLUSHED"]

#: Where SGLang's profiler writes when no ``output_dir`` is given and SGLANG_TORCH_PROFILER_DIR
#: is not set (srt/environ.py).
DEFAULT_PROFILE_DIR = "/tmp"

FLUSHED = ("Cache flushed.\nPlease check backend logs for more details. (When there are running "
           "or waiting requests, the operation will not be performed.)\n")
_FLUSH_FAILED = "Flush cache failed.\n"
_FLUSH_TIMED_OUT = "Timed out waiting for idle state."
_FLUSH_BUSY = "Another flush_cache is already in progress."
_SERVER_ERROR = "Internal Server Error"  # an exception in a handler: Starlette's plain 500
_IDLE_POLL_S = 0.01


class SimOps:
    """Profiler and cache-flush endpoints of one simulated server, with their call log."""

    def __init__(self, service: _Service) -> None:
        self.service = service
        self.profiles: list[dict[str, Any]] = []  # every capture, the running one last
        self.flush_calls: list[dict[str, Any]] = []  # every /flush_cache call, refused too
        self._active: dict[str, Any] | None = None
        self._stop_at_iteration: int | None = None
        self._flush_waiting = False

    def add_routes(self, app: web.Application) -> None:
        r = app.router
        for path, handler in (("/start_profile", self.start_profile), ("/stop_profile", self.stop_profile),
                              ("/flush_cache", self.flush_cache)):
            r.add_route("GET", path, handler)
            r.add_post(path, handler)

    def state(self) -> dict[str, Any]:
        """For ``/sim/state``."""
        self._auto_stop()
        return {"profiling": self._active is not None, "profiles": [dict(p) for p in self.profiles],
                "flush_calls": [dict(f) for f in self.flush_calls]}

    def _load(self) -> tuple[int, int]:
        m = self.service.model
        return m.running, m.queued

    def _auto_stop(self) -> None:
        """A capture with num_steps ends by itself after that many iterations."""
        a = self._active
        if a is None or self._stop_at_iteration is None:
            return
        if self.service.model.snapshot().iterations_total >= self._stop_at_iteration:
            a["t_stop"] = time.time()
            a["stopped_by"] = "num_steps"
            self._write_traces(a)
            self._active = None
            self._stop_at_iteration = None

    def _trace_names(self, out_dir: str, prefix: str, profile_id: str) -> list[str]:
        """One file per rank, as SGLang's profiler names them (profiler_manager.py)."""
        p = self.service.profile
        stage = f"{prefix}-" if prefix else ""
        names = []
        for pp in range(p.pp_size):
            for tp in range(p.tp_size):
                parts = [profile_id, f"TP-{tp}"] + ([f"PP-{pp}"] if p.pp_size > 1 else [])
                names.append(os.path.join(out_dir, stage + "-".join(parts) + ".trace.json.gz"))
        return names

    def _write_traces(self, rec: dict[str, Any]) -> None:
        """Write the capture's (empty) trace files where SGLang would; a directory that cannot
        be written is said in the record."""
        try:
            Path(rec["output_dir"]).expanduser().mkdir(parents=True, exist_ok=True)
            for name in rec["traces"]:
                Path(name).expanduser().write_bytes(b"\x1f\x8b")
        except OSError as exc:
            rec["write_error"] = str(exc)

    async def start_profile(self, request: web.Request) -> web.Response:
        if not self.service.profile.profiler:
            raise web.HTTPNotFound()
        self._auto_stop()
        body: dict[str, Any] = {}
        if request.can_read_body:
            try:
                got = await request.json()
            except (ValueError, json.JSONDecodeError):
                return web.json_response({"detail": [{"type": "json_invalid", "msg": "JSON decode error"}]}, status=422)
            if isinstance(got, dict):
                body = got
        if self._active is not None:
            # "Profiling is already in progress. Call /stop_profile first." in the scheduler's log only
            return web.Response(status=500, text=_SERVER_ERROR)
        asked = body.get("output_dir")
        out_dir = asked if isinstance(asked, str) and asked else os.environ.get("SGLANG_TORCH_PROFILER_DIR") or DEFAULT_PROFILE_DIR
        steps = body.get("num_steps")
        steps = steps if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0 else None
        activities = body.get("activities") if isinstance(body.get("activities"), list) else ["CPU", "GPU"]
        prefix = named if isinstance(named := body.get("profile_prefix"), str) else ""
        running, queued = self._load()
        t = time.time()
        traces = self._trace_names(out_dir, prefix, str(t))
        rec = {
            "t_start": t, "t_stop": None, "output_dir": out_dir, "num_steps": steps,
            "activities": activities, "profile_prefix": prefix, "running_at_start": running, "queued_at_start": queued,
            "running_at_stop": None, "trace": traces[0], "traces": traces, "stopped_by": None,
            "export_s": None,
        }
        self.profiles.append(rec)
        self._active = rec
        self._stop_at_iteration = (self.service.model.snapshot().iterations_total + steps) if steps else None
        return web.Response(text="Start profiling.\n")

    async def stop_profile(self, request: web.Request) -> web.Response:
        if not self.service.profile.profiler:
            raise web.HTTPNotFound()
        self._auto_stop()
        a = self._active
        if a is None:
            # "Profiling is not in progress. Call /start_profile first." in the scheduler's log only
            return web.Response(status=500, text=_SERVER_ERROR)
        a["t_stop"] = time.time()
        a["running_at_stop"] = self._load()[0]
        a["stopped_by"] = "stop_profile"
        self._active = None
        self._stop_at_iteration = None
        export = self.service.profile.profile_export_s
        model = self.service.model
        t0 = time.monotonic()
        if export > 0:  # the scheduler exports the chrome trace inside its loop: no token meanwhile
            model.pause()
            try:
                await asyncio.sleep(export)
            finally:
                model.resume()
        self._write_traces(a)
        a["export_s"] = time.monotonic() - t0
        return web.Response(text="Stop profiling. This will take some time.\n")

    async def flush_cache(self, request: web.Request) -> web.Response:
        version = self.service.profile.sglang_version
        model = self.service.model
        timeout = 0.0
        if version != "0.5.9" and "timeout" in request.query:
            try:
                timeout = float(request.query["timeout"])
            except ValueError:
                timeout = -1.0
            if not timeout >= 0.0:
                return web.json_response({"detail": [{"type": "greater_than_equal", "loc": ["query", "timeout"],
                                                      "msg": "Input should be greater than or equal to 0"}]}, status=422)
        running, queued = self._load()
        call = {"t": time.time(), "ok": False, "running": running, "queued": queued, "method": request.method}
        self.flush_calls.append(call)
        if version != "0.5.9" and self._flush_waiting:
            call["said"] = _FLUSH_BUSY
            return web.Response(status=400, text=_FLUSH_BUSY)
        ok = model.flush_cache()
        if not ok and timeout > 0:  # 0.5.23 flush_wrapper: deferred until idle or the deadline
            self._flush_waiting = True
            deadline = time.monotonic() + timeout
            try:
                while not ok and time.monotonic() < deadline:
                    await asyncio.sleep(_IDLE_POLL_S)
                    ok = model.flush_cache()
            finally:
                self._flush_waiting = False
            if not ok:
                call["said"] = _FLUSH_TIMED_OUT
                return web.Response(status=400, text=_FLUSH_TIMED_OUT)
        call["ok"] = ok
        if ok:
            call["t_done"] = time.time()
        text = FLUSHED if ok or version == "0.5.9" else _FLUSH_FAILED
        return web.Response(status=200 if ok else 400, text=text)
