"""The control API (`--control`): HTTP/JSON under /v1/, server-sent events, /metrics.

It runs on the engine's own event loop, in the engine's process (under the TUI: the engine's
child process), and sends the same typed commands (engine/core/commands.py) through the same entry
point as the keys and the presets (Engine.execute, by the engine's one command table), with the same checks. Each
command is logged on screen and in events.ndjson as an `api` line naming the client, and the
engine's own lines for it carry `source: api` and `client` in events.ndjson.

    GET  /v1/status                 state, load, live figures (timeline names), step, preset, ...
    GET  /v1/events                 server-sent events: `log` lines and `step` results
    POST /v1/concurrency {"value": N[, "raise_max": true]}
    POST /v1/rate {"value": R}
    POST /v1/probe | /v1/restore | /v1/pause | /v1/resume
    POST /v1/preset {"name": NAME} | {"toml": TEXT}
    POST /v1/search [{"start": C, "max": C}]
    POST /v1/slo {"spec": "ttft=2s,itl=100ms" | "off"}
    POST /v1/workload {"output_len": N, "input_len": N, "dataset": SPEC, "prefix_ratio": X} | {"spec": "output_len=512"}
    POST /v1/lane [{"on": true|false}]
    POST /v1/export [{"format": "parquet"|"csv"|"ndjson"}]
    POST /v1/stop                   ends the session as `q` does
    GET  /metrics                   Prometheus text (engine/control/prometheus.py)

Replies: 200 {"ok": true, "line": "...", ...}; a refusal {"ok": false, "error": "one line"}
with 400 (bad JSON, a bad value), 401 (token), 404 (path), 405 (method), 409 (not now: no
probe to restore, the engine stopping), 413 (body over 64 kB). Nothing a client sends can
raise out of a handler: an unexpected error is a 500 and a log line, and the load goes on.

This module is the server and its handlers; replies.py holds the wire (replies,
refusals, bodies, SSE framing) and status_json.py what GET /v1/status answers. Their
names are importable from here too.
"""

from __future__ import annotations

import asyncio
import hmac
import time
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from aiohttp import web

from ..core import commands
from ..core.wiring import with_prometheus
from ..loop import wait_within
from .address import MAX_BODY, ControlAddress
from .prometheus import CONTENT_TYPE, PromMetrics
from .replies import Refused, clean, client, describe, flag, read_json, refusal, reply, sse, value
from .status_json import status_of, step_of

if TYPE_CHECKING:
    from ..core.engine import Engine
    from ..load.controller import LoadControl
    from ..preset import Preset

__all__ = [
    "ControlServer", "Refused", "clean", "client", "describe", "flag", "read_json",
    "refusal", "reply", "request_stop", "sse", "status_of", "step_of", "value",
]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
SSE_POLL_S = 0.25
SSE_KEEPALIVE_S = 15.0
SOURCE = "api"


class ControlServer:
    def __init__(self, engine: Engine, addr: ControlAddress, token: str | None) -> None:
        self.engine = engine
        self.addr = addr
        self._token = token
        self.metrics = PromMetrics(engine)
        self._runner: web.AppRunner | None = None
        self._closing = asyncio.Event()
        self.port = addr.port
        self._unauthorized = 0
        if token is not None:  # what a client sends is logged: the token never shows, on screen either
            engine.events.scrub = lambda text: text.replace(token, "***")

    @property
    def url(self) -> str:
        return ControlAddress(self.addr.host, self.port).url

    # -- life cycle -----------------------------------------------------------------------
    async def start(self) -> None:
        app = web.Application(client_max_size=MAX_BODY, middlewares=[self._guard])
        r = app.router
        r.add_get("/v1/status", self.status)
        r.add_get("/v1/events", self.events)
        r.add_get("/metrics", self.prometheus)
        for name, fn in (
            ("concurrency", self.concurrency), ("rate", self.rate), ("probe", self.probe), ("restore", self.restore),
            ("pause", self.pause), ("resume", self.resume), ("preset", self.preset), ("search", self.search),
            ("slo", self.slo), ("workload", self.workload), ("lane", self.lane), ("export", self.export), ("stop", self.stop),
            ("profile", self.profile),
        ):
            r.add_post(f"/v1/{name}", self._command(name, fn))
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, self.addr.host, self.addr.port, reuse_address=True)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            from ..client.target import TargetError

            raise TargetError(f"--control {self.addr.host}:{self.addr.port}: cannot listen: {exc.strerror or exc}") from None
        self._runner = runner
        for s in runner.addresses:  # the port the OS picked for port 0
            if isinstance(s, tuple) and len(s) >= 2:
                self.port = int(s[1])
                break
        self.engine.log("notice", f"control API on {self.url} (/v1/status, /metrics){'' if self._token is None else ', bearer token required'}")

    async def close(self) -> None:
        self._closing.set()
        runner, self._runner = self._runner, None
        if runner is not None:
            await asyncio.sleep(0)  # the event streams see `end` first
            await runner.cleanup()

    # -- every request ----------------------------------------------------------------------
    @web.middleware
    async def _guard(self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        try:
            if self._token is not None and not self._authorized(request):
                self._unauthorized += 1
                self.engine.warn(f"control API: request without a valid bearer token from {client(request)} (401)", key="api unauthorized")
                resp = refusal(401, "unauthorized: send Authorization: Bearer TOKEN")
                resp.headers["WWW-Authenticate"] = 'Bearer realm="redline"'
                return resp
            n = request.content_length
            if n is not None and n > MAX_BODY:
                return refusal(413, f"request body of {n} bytes: at most {MAX_BODY} accepted")
            return await handler(request)
        except Refused as exc:
            return refusal(exc.status, exc.text)
        except web.HTTPRequestEntityTooLarge:
            return refusal(413, f"request body over {MAX_BODY} bytes")
        except web.HTTPNotFound:
            return refusal(404, f"no such endpoint: {request.method} {request.path[:200]} (see /v1/status, /metrics; commands are POST /v1/...)")
        except web.HTTPMethodNotAllowed as exc:
            return refusal(405, f"{request.method} not allowed on {request.path[:200]}; use {', '.join(sorted(exc.allowed_methods))}")
        except web.HTTPException as exc:
            return refusal(exc.status if 400 <= exc.status < 600 else 400, exc.reason or "refused")
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - nothing a client sends may end the engine
            self.engine.log("error", f"control API: {request.method} {request.path[:80]}: {type(exc).__name__}: {exc}")
            return refusal(500, f"internal error: {type(exc).__name__}: {exc}")

    def _authorized(self, request: web.Request) -> bool:
        got = request.headers.get("Authorization", "")
        want = f"Bearer {self._token}"
        return hmac.compare_digest(got.encode("utf-8", "surrogateescape"), want.encode())

    def _command(self, name: str, fn: Callable[[web.Request, dict], Awaitable[dict | web.StreamResponse]]) -> Handler:
        async def handle(request: web.Request) -> web.StreamResponse:
            body = await read_json(request)
            e = self.engine
            if e.closed or e.controller is None or e.controller.stopped:
                raise Refused(409, "the engine is stopping: no commands now")
            who = client(request)
            what = f"{name}{describe(body)}"
            e.log(SOURCE, f"api {who}: {what}", source=SOURCE, client=who)
            try:
                out = await fn(request, body)
            except Refused as exc:
                e.log(SOURCE, f"api {who}: {name} refused: {exc.text}", source=SOURCE, client=who)
                raise
            if isinstance(out, web.StreamResponse):
                return out
            return reply({"ok": True, **out})

        return handle

    async def _run(self, request: web.Request, cmd: commands.Command) -> Any:
        """The command through the engine's one command table (the host's: with the preset
        runner's commands, engine/run/preset_runner.py new_engine); its log lines carry the API as source.
        A refusal of the engine (a ValueError: a value it does not take) is a 400; a command
        that cannot apply now (RuntimeError) a 409."""
        e = self.engine
        ev = e.events
        ev.source = {"source": SOURCE, "client": client(request)}
        try:
            res = e.execute(cmd)
            if asyncio.iscoroutine(res):
                res = await asyncio.shield(res)
            return res
        except ValueError as exc:
            raise Refused(400, str(exc)) from None
        except RuntimeError as exc:
            raise Refused(409, str(exc)) from None
        finally:
            ev.source = None

    # -- reading ------------------------------------------------------------------------------
    async def status(self, request: web.Request) -> web.Response:
        return reply(status_of(self.engine, self.url))

    async def prometheus(self, request: web.Request) -> web.Response:
        from .prometheus import render

        body = await asyncio.to_thread(render, self.metrics.freeze())  # the text off the loop that stamps bytes
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})

    async def events(self, request: web.Request) -> web.StreamResponse:
        """Server-sent events: each log line (`event: log`) and each step result (`event:
        step`) from now on (`?since=SEQ`: the lines after SEQ still in memory too); `end` when
        the session ends."""
        e = self.engine
        since = request.query.get("since")
        try:
            last = int(since) if since is not None else (e.events.lines[-1].seq if e.events.lines else 0)
        except ValueError:
            raise Refused(400, f"since {str(since)[:40]!r}: expected a log line's seq, a whole number") from None
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        await resp.prepare(request)
        steps = len(e.book.steps) if since is None else 0
        probe = e.book.probe_result if since is None else None
        beat = time.monotonic()
        try:
            while True:
                out: list[str] = []
                for line in list(e.events.lines):
                    if line.seq > last:
                        last = line.seq
                        out.append(sse("log", {"seq": line.seq, "t": line.t, "kind": line.kind, "text": line.text}, line.seq))
                book = e.book
                for st in book.steps[steps:]:
                    out.append(sse("step", st.to_dict()))
                steps = len(book.steps)
                if book.probe_result is not None and book.probe_result is not probe:
                    probe = book.probe_result
                    if probe not in book.steps:
                        out.append(sse("step", probe.to_dict()))
                if self._closing.is_set() or e.closed:
                    out.append(sse("end", {"state": e.state}))
                    await resp.write("".join(out).encode())
                    break
                if not out and time.monotonic() - beat > SSE_KEEPALIVE_S:
                    out.append(": keep-alive\n\n")
                if out:
                    beat = time.monotonic()
                    await resp.write("".join(out).encode())
                try:
                    await wait_within(self._closing.wait(), SSE_POLL_S)
                except asyncio.TimeoutError:
                    pass
        except (ConnectionResetError, ConnectionError, asyncio.CancelledError):
            return resp
        try:
            await resp.write_eof()
        except (ConnectionResetError, ConnectionError):
            pass
        return resp

    # -- commands -----------------------------------------------------------------------------
    def _controller(self) -> LoadControl:
        """The load's controller: there from the engine's start on, before any command
        (handle() refuses every command once the engine stops)."""
        ctl = self.engine.controller
        if ctl is None:
            raise Refused(409, "the engine is stopping: no commands now")
        return ctl

    async def concurrency(self, request: web.Request, body: dict) -> dict:
        from ..load.controller import check_concurrency

        raise_max = flag(body, "raise_max")
        v = value(body, "value")
        ctl = self._controller()
        limit = 10**9 if raise_max else ctl.max_concurrency
        try:
            n = check_concurrency(v, limit)
        except ValueError as exc:  # the way past --max-concurrency only for a whole number above it
            try:
                above = not isinstance(v, bool) and int(str(v).strip()) > limit
            except ValueError:
                above = False
            hint = ' (above --max-concurrency: add "raise_max": true)' if above and not raise_max else ""
            raise Refused(400, f"{exc}{hint}") from None
        c = await self._run(request, commands.SetConcurrency(n, raise_max=raise_max and n > ctl.max_concurrency))
        return {"line": f"C={c}", "concurrency": c}

    async def rate(self, request: web.Request, body: dict) -> dict:
        from ..workload.arrivals import check_rate

        v = value(body, "value")
        if isinstance(v, bool) or not isinstance(v, (int, float, str)):
            raise Refused(400, f"value {v!r}: expected requests per second, a number > 0")
        try:
            r = check_rate(v)
        except ValueError as exc:
            raise Refused(400, str(exc)) from None
        got = await self._run(request, commands.SetRate(r))
        return {"line": self.engine.load_text, "rate": got}

    async def probe(self, request: web.Request, body: dict) -> dict:
        n = await self._run(request, commands.Probe())
        return {"line": f"C=1 probe ({n} in-flight requests cancelled)", "cancelled": n}

    async def restore(self, request: web.Request, body: dict) -> dict:
        ctl = self._controller()
        if not ctl.probing:
            raise Refused(409, "not in the C=1 probe: nothing to restore")
        c = await self._run(request, commands.Restore())
        if c is None:
            raise Refused(409, "no load to go back to")
        return {"line": f"back to {self.engine.load_text}", "concurrency": c}

    async def pause(self, request: web.Request, body: dict) -> dict:
        if self._controller().paused:
            return {"line": "already paused", "changed": False}
        await self._run(request, commands.TogglePause())
        return {"line": "paused", "changed": True}

    async def resume(self, request: web.Request, body: dict) -> dict:
        if not self._controller().paused:
            return {"line": f"already running at {self.engine.load_text}", "changed": False}
        await self._run(request, commands.TogglePause())
        return {"line": f"resumed at {self.engine.load_text}", "changed": True}

    async def preset(self, request: web.Request, body: dict) -> dict:
        from ..preset import PresetError, load_preset, parse_toml, resolve_preset

        name, toml = body.get("name"), body.get("toml")
        if (name is None) == (toml is None):
            raise Refused(400, 'expected {"name": NAME} (a shipped preset or a file) or {"toml": TEXT}')
        try:
            if name is not None:
                if not isinstance(name, str) or not name.strip():
                    raise Refused(400, f"name {name!r}: expected a preset's name or a file path")
                preset = await asyncio.to_thread(lambda: load_preset(resolve_preset(name)))
            else:
                if not isinstance(toml, str):
                    raise Refused(400, "toml: expected the preset's TOML text as a string")
                preset = parse_toml(toml, "preset")
        except PresetError as exc:
            raise Refused(400, str(exc)) from None
        return await self._start_preset(request, preset)

    async def search(self, request: web.Request, body: dict) -> dict:
        from ..preset import PresetError
        from ..preset.knee import knee_search_preset

        e = self.engine
        ctl = self._controller()
        start = body.get("start", ctl.concurrency)
        top = body.get("max", ctl.max_concurrency)
        for k, v in (("start", start), ("max", top)):
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= ctl.max_concurrency:
                raise Refused(400, f"{k} {v!r}: expected a whole number from 1 to {ctl.max_concurrency}")
        try:
            preset = knee_search_preset(start, top, e.config.workload)  # the `k` key's search, the one definition
        except PresetError as exc:
            raise Refused(400, str(exc)) from None
        out = await self._start_preset(request, preset)
        out["line"] = f"knee search from C={start} up to {max(start, top)}"
        return out

    async def _start_preset(self, request: web.Request, preset: Preset) -> dict:
        from ..preset import PresetError
        from ..preset.workload_fit import preset_workload_change

        e = self.engine
        top = max(preset.ramp.concurrency, default=0)
        if top > (limit := self._controller().max_concurrency):
            raise Refused(400, f"preset {preset.name} steps up to C={top}, above --max-concurrency {limit}")
        try:  # what the TUI's p refuses, in its words: a trace, turns, request shaping that differs
            change = preset_workload_change(preset, e.config.workload.describe())
        except PresetError as exc:
            raise Refused(409, str(exc)) from None
        if change is not None:
            await self._run(request, commands.SetWorkload(change))
        await self._run(request, commands.StartPreset(preset))
        steps = len(preset.ramp.concurrency)
        return {"line": f"preset {preset.name} started" + (f" ({steps} steps)" if steps else ""), "preset": preset.name}

    async def slo(self, request: web.Request, body: dict) -> dict:
        from ..measure.slo import parse_slo

        spec = body.get("spec")
        if not isinstance(spec, str):
            raise Refused(400, 'expected {"spec": "ttft=2s,itl=100ms"} (or "off")')
        if spec.strip().lower() in ("", "off", "none"):
            await self._run(request, commands.SetSlo(None))
            return {"line": "SLO off", "slo": None}
        try:
            slo = parse_slo(spec, flag="SLO")
        except ValueError as exc:
            raise Refused(400, str(exc)) from None
        await self._run(request, commands.SetSlo(slo))
        return {"line": f"SLO {slo.describe()}", "slo": slo.describe()}

    async def workload(self, request: web.Request, body: dict) -> dict:
        from ..workload.change import KEYS, WorkloadChange, parse_workload_change

        if self.engine.config.workload.trace is not None:
            raise Refused(409, "a trace sets each request's lengths: no workload to change")
        try:
            if "spec" in body:
                if not isinstance(body["spec"], str) or len(body) > 1:
                    raise Refused(400, 'expected {"spec": "output_len=512 input_len=1024"} or the fields themselves')
                change = parse_workload_change(body["spec"])
            else:
                unknown = [k for k in body if k not in KEYS]
                if unknown or not body:
                    raise Refused(400, f"workload {sorted(body)[:8]!r}: expected any of {', '.join(KEYS)}")
                vals = {}
                for k in KEYS:
                    v = body.get(k)
                    if v is None:
                        continue
                    ok = isinstance(v, str) if k == "dataset" else (isinstance(v, (int, float)) and not isinstance(v, bool)) if k == "prefix_ratio" else (isinstance(v, int) and not isinstance(v, bool))
                    if not ok:
                        raise Refused(400, f"{k} {v!r}: expected {'a dataset spec' if k == 'dataset' else 'a number' if k == 'prefix_ratio' else 'a whole number of tokens'}")
                    vals[k] = v
                change = WorkloadChange(**vals)
                change.apply(self.engine.config.workload)  # checked before it is sent
        except ValueError as exc:
            raise Refused(400, str(exc)) from None
        got = await self._run(request, commands.SetWorkload(change))
        return {"line": f"workload {change.describe()}", "workload": got}

    async def profile(self, request: web.Request, body: dict) -> dict:
        """The server's profiler at the load held now (engine/run/server_ops.py), for `seconds`
        (default --profile-s) or until the step ends."""
        secs = body.get("seconds")
        if secs is not None and (isinstance(secs, bool) or not isinstance(secs, (int, float)) or not 0 < secs <= 3600):
            raise Refused(400, f"seconds {secs!r}: expected a number of seconds > 0 (at most 3600)")
        got = await self._run(request, commands.StartProfile(float(secs) if secs is not None else None))
        return {"line": f"profiler {got} at {self.engine.load_text}", "started": got == "started"}

    async def lane(self, request: web.Request, body: dict) -> dict:
        e = self.engine
        want = body.get("on")
        if want is not None and not isinstance(want, bool):
            raise Refused(400, f"on {want!r}: expected true or false")
        now = e.load.lane is not None and e.load.lane.on
        if want is not None and want == now:
            return {"line": f"probe lane already {'on' if now else 'off'}", "on": now}
        on = await self._run(request, commands.ToggleLane())
        return {"line": f"probe lane {'on' if on else 'off'}", "on": on}

    async def export(self, request: web.Request, body: dict) -> dict:
        from ..report.export import export_session
        from ..session import SessionError

        e = self.engine
        fmt = body.get("format", "parquet")
        if fmt not in ("parquet", "csv", "ndjson"):
            raise Refused(400, f"format {fmt!r}: expected parquet, csv or ndjson")
        d = e.config.out_dir
        if d is None or e.session is None:
            raise Refused(409, "no session directory")
        err = await self._run(request, commands.Flush())
        try:
            paths = await asyncio.to_thread(export_session, d, fmt, None)
        except SessionError as exc:
            raise Refused(409, str(exc)) from None
        where = paths[0].parent if paths else d
        e.log("notice", f"exported {fmt} to {where}")
        return {"line": f"exported {len(paths)} tables to {where}", "paths": [str(p) for p in paths], "session_error": err}

    async def stop(self, request: web.Request, body: dict) -> web.StreamResponse:
        """Answer first, then end the session as `q` does (the host stops the engine, writes
        the summary, ends its processes; a held headless run exits 0)."""
        e = self.engine
        who = client(request)
        reason = f"api stop from {who}"
        resp = reply({"ok": True, "line": f"stopping; session {e.config.out_dir or '(none)'}", "session_dir": str(e.config.out_dir or "")})
        await resp.prepare(request)
        await resp.write_eof()
        asyncio.get_running_loop().call_soon(request_stop, e, reason)
        return resp


def request_stop(engine: Engine, reason: str) -> None:
    """The host's way to end the session (engine.steering.on_stop_request), else stop the engine here."""
    cb = engine.steering.on_stop_request
    if cb is not None:
        cb(reason)
    else:
        asyncio.ensure_future(engine.stop(reason))


async def start_engine(engine: Engine) -> None:
    """Start the engine, then, with --control, its control API: every entry point (the engine
    host, the headless runner) starts an engine through here, and the engine itself knows
    nothing of the API that steers it. A control API that cannot start (its port taken) stops
    the engine, as a target that refuses does; a cancel (a signal) is its canceller's to stop."""
    await engine.start()
    cfg = engine.config
    if cfg.control is None:
        return
    try:
        if not isinstance(cfg.control, ControlAddress):  # EngineConfig.control is an `object`: core/ names nothing of control/
            raise TypeError(f"EngineConfig.control {cfg.control!r}: expected a ControlAddress (engine/control/address.py)")
        control = engine.steering.control = ControlServer(engine, cfg.control, cfg.control_token)
        with_prometheus((t.sender.hooks for t in engine.targets), engine.measurements, control.metrics)
        await control.start()
    except asyncio.CancelledError:
        raise
    except BaseException:
        await engine.stop("start failed")
        raise

