"""The simulator's server operations, as SGLang serves them, and their ground truth.

- ``POST /start_profile`` (SGLang's body ``{"output_dir", "num_steps", "activities"}``, every
  key optional; vLLM sends none): starts the (pretend) torch profiler. ``400`` while one runs.
  ``num_steps``: it stops by itself after that many scheduler iterations, as SGLang's does.
- ``POST /stop_profile``: stops it; the answer names the trace file it "wrote". ``400`` when
  none runs.
- ``GET|POST /flush_cache``: empties the prefix cache; refused with ``400`` while any request
  is queued or running (SGLang's answer text), so a client must drain first.

With the profile's ``profiler = False`` the two profiler endpoints do not exist (``404``), as on
vLLM started without ``VLLM_TORCH_PROFILER_DIR``.

Every call is logged with what the model held at that moment (``/sim/state``: ``profiles``,
``flush_calls``): the tests judge redline against it (a flush while a request ran, a profile
window that covered the step it names).
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web

if TYPE_CHECKING:
    from .model import BatchModel
    from .profiles import SimProfile


class _Service(Protocol):
    """What the operations read of the sim's service (engine/sim/http_app.py SimService)."""

    model: BatchModel
    profile: SimProfile

__all__ = ["SimOps", "DEFAULT_PROFILE_DIR"]

#: Where the pretend profiler writes when no ``output_dir`` is given (SGLang: /tmp).
DEFAULT_PROFILE_DIR = "/tmp"

_FLUSHED = ("Cache flushed.\nPlease check backend logs for more details. (When there are running "
            "or waiting requests, the operation will not be performed.)\n")


class SimOps:
    """Profiler and cache-flush endpoints of one simulated server, with their call log."""

    def __init__(self, service: _Service) -> None:
        self.service = service
        self.profiles: list[dict[str, Any]] = []  # every capture, the running one last
        self.flush_calls: list[dict[str, Any]] = []  # every /flush_cache call, refused too
        self._active: dict[str, Any] | None = None
        self._stop_at_iteration: int | None = None

    def add_routes(self, app: web.Application) -> None:
        r = app.router
        r.add_post("/start_profile", self.start_profile)
        r.add_post("/stop_profile", self.stop_profile)
        r.add_route("GET", "/flush_cache", self.flush_cache)
        r.add_post("/flush_cache", self.flush_cache)

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
            self._active = None
            self._stop_at_iteration = None

    async def start_profile(self, request: web.Request) -> web.Response:
        if not self.service.profile.profiler:
            raise web.HTTPNotFound()
        self._auto_stop()
        body: dict[str, Any] = {}
        if request.can_read_body:
            try:
                got = await request.json()
            except (ValueError, json.JSONDecodeError):
                return web.Response(status=400, text="the request body is not valid JSON\n")
            if isinstance(got, dict):
                body = got
        if self._active is not None:
            return web.Response(status=400, text="Profiling is already in progress. Call /stop_profile first.\n")
        out_dir = body.get("output_dir") if isinstance(body.get("output_dir"), str) and body.get("output_dir") else DEFAULT_PROFILE_DIR
        steps = body.get("num_steps")
        steps = steps if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0 else None
        activities = body.get("activities") if isinstance(body.get("activities"), list) else ["CPU", "GPU"]
        running, queued = self._load()
        t = time.time()
        rec = {
            "t_start": t, "t_stop": None, "output_dir": out_dir, "num_steps": steps,
            "activities": activities, "running_at_start": running, "queued_at_start": queued,
            "running_at_stop": None, "trace": f"{out_dir.rstrip('/')}/{t:.3f}-TP-0.trace.json.gz",
            "stopped_by": None,
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
            return web.Response(status=400, text="Profiling is not in progress. Call /start_profile first.\n")
        a["t_stop"] = time.time()
        a["running_at_stop"] = self._load()[0]
        a["stopped_by"] = "stop_profile"
        self._active = None
        self._stop_at_iteration = None
        return web.Response(text=f"Stop profiling. This will take some time. Trace: {a['trace']}\n")

    async def flush_cache(self, request: web.Request) -> web.Response:
        running, queued = self._load()
        ok = self.service.model.flush_cache()
        self.flush_calls.append({"t": time.time(), "ok": ok, "running": running, "queued": queued,
                                 "method": request.method})
        return web.Response(status=200 if ok else 400, text=_FLUSHED)
