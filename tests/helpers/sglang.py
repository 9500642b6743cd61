"""A small server on 127.0.0.1 that answers as SGLang 0.5.9 or 0.5.23 does, from the fixtures in
tests/fixtures/sglang/ (written from the wheels' code: README there): its /server_info, its
/metrics body, its /flush_cache and profiler answers, its admin-key middleware. Not redline's
sim: it keeps its own record of what redline asked and when.

- `/flush_cache` refuses (400, the version's text) while a stream runs and for `hold_s` after the
  last one ended (SGLang still holds a request whose handler outlives the client's stream);
- `/stop_profile` answers after `export_s` (the scheduler writes the trace meanwhile: streams
  pause), having written `<dir>/<profile_prefix>-<profile_id>-TP-0.trace.json.gz` where `<dir>` is
  the `output_dir` asked for, else `$SGLANG_TORCH_PROFILER_DIR`, else `/tmp`; `fail_stop`: 500;
- with `admin_key`, /flush_cache and the profiler answer 401 `{"error": "Unauthorized"}` without
  it as the bearer (utils/auth.py ADMIN_OPTIONAL).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

from aiohttp import web

from .paths import FIXTURES
from .servers import ThreadedServer

SGLANG = FIXTURES / "sglang"


class SglangFixture(ThreadedServer):
    def __init__(self, version: str, *, info: str = "server_info_default", metrics: str | None = None,
                 admin_key: str | None = None, hold_s: float = 0.0, export_s: float = 0.0, fail_stop: bool = False,
                 chunks: int = 8, delay_s: float = 0.02) -> None:
        self.version = version
        self.dir = SGLANG / version
        self.info = json.loads((self.dir / f"{info}.json").read_text())
        self.metrics = (self.dir / f"{metrics}.txt").read_text() if metrics else ""
        self.answers = json.loads((self.dir / "answers.json").read_text())
        self.admin_key = admin_key
        self.hold_s = hold_s
        self.export_s = export_s
        self.fail_stop = fail_stop
        self.chunks = chunks
        self.delay_s = delay_s
        self.running = 0
        self.last_end = 0.0
        self.exporting = False
        self.info_paths: list[str] = []
        self.flushes: list[dict] = []
        self.profile_calls: list[dict] = []
        self.auth_seen: dict[str, set[str]] = {}
        self.traces: list[str] = []
        self._profile: dict | None = None
        super().__init__()

    # -- helpers ---------------------------------------------------------------------------
    def _answer(self, key: str) -> web.Response:
        a = self.answers[key]
        if isinstance(a["body"], dict):
            return web.json_response(a["body"], status=a["status"])
        return web.Response(status=a["status"], text=a["body"])

    def _denied(self, request: web.Request) -> bool:
        self.auth_seen.setdefault(request.path, set()).add(request.headers.get("Authorization", ""))
        return bool(self.admin_key) and request.headers.get("Authorization") != f"Bearer {self.admin_key}"

    # -- endpoints -------------------------------------------------------------------------
    async def _server_info(self, request: web.Request) -> web.Response:
        self.info_paths.append(request.path)
        return web.json_response(self.info)

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        self.auth_seen.setdefault(request.path, set()).add(request.headers.get("Authorization", ""))
        body = await request.json()
        self.running += 1
        try:
            n = int(body["sampling_params"]["max_new_tokens"])
            prompt = len(str(body.get("text", "")).split())
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            last = min(n, self.chunks)
            for i in range(1, last + 1):
                await asyncio.sleep(self.delay_s)
                while self.exporting:  # the scheduler writes the trace: no token
                    await asyncio.sleep(0.01)
                meta = {"id": "x", "prompt_tokens": prompt, "completion_tokens": i, "cached_tokens": 0,
                        "finish_reason": {"type": "length", "length": last} if i == last else None}
                await resp.write(b"data: " + json.dumps({"text": "x" * i, "output_ids": list(range(i)), "meta_info": meta}).encode() + b"\n\n")
            await resp.write(b"data: [DONE]\n\n")
            return resp
        finally:
            self.running -= 1
            self.last_end = time.monotonic()

    async def _flush(self, request: web.Request) -> web.Response:
        if self._denied(request):
            self.flushes.append({"t": time.time(), "running": self.running, "ok": False, "status": 401})
            return self._answer("unauthorized")
        ok = self.running == 0 and time.monotonic() - self.last_end >= self.hold_s
        self.flushes.append({"t": time.time(), "running": self.running, "ok": ok, "status": 200 if ok else 400,
                             "query": dict(request.query)})
        return self._answer("flush_ok" if ok else "flush_refused")

    async def _start_profile(self, request: web.Request) -> web.Response:
        if self._denied(request):
            return self._answer("unauthorized")
        body = await request.json() if request.can_read_body else {}
        self.profile_calls.append({"path": request.path, "t": time.time(), "running": self.running, "body": body})
        self._profile = {"id": str(time.time()), **(body or {})}
        return self._answer("start_profile")

    async def _stop_profile(self, request: web.Request) -> web.Response:
        if self._denied(request):
            return self._answer("unauthorized")
        self.profile_calls.append({"path": request.path, "t": time.time(), "running": self.running, "body": None})
        p, self._profile = self._profile, None
        self.exporting = True
        try:
            await asyncio.sleep(self.export_s)
        finally:
            self.exporting = False
        if self.fail_stop or p is None:
            return self._answer("profile_failed")
        d = Path(p.get("output_dir") or os.environ.get("SGLANG_TORCH_PROFILER_DIR", "/tmp")).expanduser()
        prefix = f"{p['profile_prefix']}-" if p.get("profile_prefix") else ""
        f = d / f"{prefix}{p['id']}-TP-0.trace.json.gz"
        d.mkdir(parents=True, exist_ok=True)
        f.write_bytes(b"\x1f\x8b")
        self.traces.append(str(f))
        self.profile_calls[-1]["t_answer"] = time.time()
        return self._answer("stop_profile")

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(text=self.metrics, content_type="text/plain")

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/server_info", self._server_info)
        app.router.add_get("/get_server_info", self._server_info)
        app.router.add_get("/health", self._health)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_post("/generate", self._generate)
        app.router.add_route("*", "/flush_cache", self._flush)
        app.router.add_route("*", "/start_profile", self._start_profile)
        app.router.add_route("*", "/stop_profile", self._stop_profile)
        return app

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="")
