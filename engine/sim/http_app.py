"""The simulator's aiohttp application: SGLang and OpenAI endpoints over the batch model.

One :class:`SimService` per server holds all state (model, GPUs, counters, guard); nothing is
module-global. The application must run with ``handler_cancellation=True`` (see
:mod:`engine.sim.serve`) so a client that goes away cancels its handler and the request leaves
the model at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import random
import time
from typing import Any, Callable

from aiohttp import web

from .faults import FaultKind, FaultPlan, OverloadGuard, draw_fault
from .gpu import GpuFleet
from .metrics import PROMETHEUS_CONTENT_TYPE, make_registry, render_dcgm, render_sglang
from .model import BatchModel, ModelSnapshot, SimRequest, SimShutdown
from .ops import SimOps
from .profiles import SimProfile
from .refusals import MIDSTREAM_FAILURE, QUEUE_FULL, Abort, abort_events
from .stats import RequestCounters, RequestTracker
from .tokens import TokenStream
from .truth import TruthLog, TruthRecord
from .wire import (
    DONE_EVENT,
    Api,
    BadRequest,
    GenerationRequest,
    ResponseShape,
    encode_event,
    error_body,
    make_shape,
    parse_request,
)

__all__ = ["SimService", "SIM_VERSION", "SERVICE_KEY"]

SIM_VERSION = "redline-sim 0.1"
#: Seconds between two checks of the crash rules.
_CRASH_CHECK_S = 0.05

SERVICE_KEY: web.AppKey[SimService] = web.AppKey("redline_sim_service")

_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


class SimService:
    """State and handlers of one simulated server."""

    def __init__(
        self,
        profile: SimProfile,
        seed: int = 0,
        on_crash: Callable[[str], None] | None = None,
    ) -> None:
        """``on_crash(reason)`` is how the hosting process dies when the profile crashes."""
        self.profile = profile
        self.seed = seed
        self.gpus = GpuFleet(profile, seed)
        self.model = BatchModel(profile, on_batch=self.gpus.set_batch)
        self.counters = RequestCounters()
        self.guard = OverloadGuard(profile, self._crashed)
        self.created = int(time.time())
        self._t0 = time.monotonic()  # for startup_s: /health answers 503 until it passed
        self._on_crash = on_crash
        self._arrivals = 0
        self.truth = TruthLog()  # per-request ground truth, /sim/requests
        self._registry = make_registry(profile, self._read_state)
        self._tasks: list[asyncio.Task[None]] = []
        self._closing = asyncio.Event()
        self.ops = SimOps(self)  # /start_profile, /stop_profile, /flush_cache, and their log

    # ---- lifecycle ------------------------------------------------------------------

    def build_app(self) -> web.Application:
        """The aiohttp application serving this simulator."""
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app[SERVICE_KEY] = self
        app.router.add_get("/health", self.health)
        app.router.add_get("/health_generate", self.health)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/get_server_info", self.server_info)
        app.router.add_get("/server_info", self.server_info)
        app.router.add_get("/get_model_info", self.model_info)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/dcgm/metrics", self.dcgm_metrics)
        app.router.add_get("/sim/state", self.sim_state)
        app.router.add_get("/sim/requests", self.sim_requests)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/generate", self.generate)
        # SGLang's server operations (engine/sim/ops.py): the profiler and the cache flush
        self.ops.add_routes(app)
        app.on_startup.append(self._start_tasks)
        app.on_shutdown.append(self._stop_tasks)
        return app

    async def _start_tasks(self, app: web.Application) -> None:
        self._tasks.append(asyncio.create_task(self.model.run(), name="redline-sim-scheduler"))
        if self.guard.watches:
            self._tasks.append(asyncio.create_task(self._watch_crash(), name="redline-sim-guard"))

    async def _stop_tasks(self, app: web.Application) -> None:
        self._closing.set()
        self.model.close()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()

    async def _watch_crash(self) -> None:
        while True:
            self.guard.observe(self.model.load)
            await asyncio.sleep(_CRASH_CHECK_S)

    def _crashed(self, reason: str) -> None:
        if self._on_crash is not None:
            self._on_crash(reason)

    # ---- state ----------------------------------------------------------------------

    def _read_state(self) -> tuple[ModelSnapshot, RequestCounters]:
        return self.model.snapshot(), self.counters

    def state(self) -> dict[str, Any]:
        """The exact snapshot served by ``/sim/state``."""
        snap = self.model.snapshot()
        c = self.counters
        return {
            "t": time.time(),
            "profile": self.profile.name,
            "running": snap.running,
            "queued": snap.queued,
            "received": c.received,
            "completed": c.completed,
            "failed": c.failed,
            "aborted": c.aborted,
            "prompt_tokens_total": snap.prompt_tokens_total,
            "generation_tokens_total": c.tokens_sent,
            "failures": dict(sorted(c.failures.items())),
            "finished_in_model": snap.finished_total,
            "running_cap": self.profile.running_cap,
            "kv_used_tokens": snap.kv_used_tokens,
            "kv_reserved_tokens": snap.kv_reserved_tokens,
            "kv_budget_tokens": snap.kv_budget_tokens,
            "gen_throughput": snap.gen_throughput,
            "prefix_cache": snap.prefix_cache_state(),
            "preemptions_total": snap.preemptions_total,
            "spec_accept_length": snap.spec_accept_length,
            "spec_verify_steps_total": snap.spec_verify_steps_total,
            **self.ops.state(),
            "overloaded": self.guard.overloaded(snap.running + snap.queued),
            "crashed": self.guard.crashed,
            "hung": self.model.hung,
        }

    def server_args(self) -> dict[str, Any]:
        """SGLang-shaped ``/get_server_info`` body."""
        p = self.profile
        snap = self.model.snapshot()
        return {
            "model_path": f"redline-sim/{p.model_name}",
            "tokenizer_path": f"redline-sim/{p.model_name}",
            "served_model_name": p.model_name,
            "context_length": p.max_model_len,
            "tp_size": p.tp_size,
            "pp_size": p.pp_size,
            "dp_size": p.dp_size,
            "max_running_requests": p.max_running_requests,
            "pp_max_micro_batch_size": p.pp_max_micro_batch_size,
            "max_total_tokens": p.kv_budget_tokens,
            "chunked_prefill_size": p.chunked_prefill_size,
            "enable_metrics": True,
            "version": SIM_VERSION,
            "redline_sim": {
                "profile": p.name,
                "gpus": p.gpus,
                "pp_max_micro_batch_size": p.pp_max_micro_batch_size,
                "running_cap": p.running_cap,
                "seed": self.seed,
                "settings": dataclasses.asdict(p),
            },
            "internal_states": [
                {
                    "max_total_num_tokens": p.kv_budget_tokens,
                    "last_gen_throughput": snap.gen_throughput,
                }
            ],
        }

    # ---- GET endpoints --------------------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:
        """200 after ``health_delay_s`` (SGLang's one-token generation); 503 while starting
        (``startup_s``), while the profile is overloaded or crashed, and, with
        ``health_watchdog_s``, after that long when the scheduler is hung (SGLang's
        HEALTH_CHECK_TIMEOUT: no output from the scheduler)."""
        p = self.profile
        if time.monotonic() - self._t0 < p.startup_s:
            return web.Response(status=503)
        if self.guard.overloaded(self.model.load):
            return web.Response(status=503, text="overloaded")
        if self.model.hung and p.health_watchdog_s is not None:
            await asyncio.sleep(p.health_watchdog_s)
            return web.Response(status=503)
        if p.health_delay_s > 0:
            await asyncio.sleep(p.health_delay_s)
        return web.Response(text="OK")

    async def models(self, request: web.Request) -> web.Response:
        """OpenAI ``/v1/models``."""
        p = self.profile
        return _json({"object": "list", "data": [{
            "id": p.model_name, "object": "model", "created": self.created,
            "owned_by": "redline-sim", "root": p.model_name, "parent": None,
            "max_model_len": p.max_model_len}]})

    async def server_info(self, request: web.Request) -> web.Response:
        """SGLang ``/get_server_info``."""
        return _json(self.server_args())

    async def model_info(self, request: web.Request) -> web.Response:
        """SGLang ``/get_model_info``."""
        name = f"redline-sim/{self.profile.model_name}"
        return _json({"model_path": name, "tokenizer_path": name, "is_generation": True})

    async def metrics(self, request: web.Request) -> web.Response:
        """SGLang-named Prometheus metrics, exact."""
        return web.Response(body=render_sglang(self._registry),
                            headers={"Content-Type": PROMETHEUS_CONTENT_TYPE})

    async def dcgm_metrics(self, request: web.Request) -> web.Response:
        """dcgm-exporter style GPU metrics."""
        text = render_dcgm(self.profile, self.gpus.readings(self.model.snapshot().kv_used_tokens))
        return web.Response(body=text.encode(), headers={"Content-Type": PROMETHEUS_CONTENT_TYPE})

    async def sim_state(self, request: web.Request) -> web.Response:
        """Exact counters for tests."""
        return _json(self.state())

    async def sim_requests(self, request: web.Request) -> web.Response:
        """The ground truth of every streamed request (``?chunks=1``: with chunk times;
        ``?text=1``: with the prompt's tail and the answer text, see :mod:`.truth`)."""
        q = request.query
        return _json(self.truth.dump(chunks=q.get("chunks") == "1", text=q.get("text") == "1"))

    # ---- generation -----------------------------------------------------------------

    async def chat(self, request: web.Request) -> web.StreamResponse:
        """OpenAI ``/v1/chat/completions``."""
        return await self._generation(request, "chat")

    async def completions(self, request: web.Request) -> web.StreamResponse:
        """OpenAI ``/v1/completions``."""
        return await self._generation(request, "completions")

    async def generate(self, request: web.Request) -> web.StreamResponse:
        """SGLang ``/generate``."""
        return await self._generation(request, "generate")

    async def _generation(self, request: web.Request, api: Api) -> web.StreamResponse:
        index = self._arrivals
        self._arrivals += 1
        rng = random.Random(f"redline-sim:{self.seed}:{index}")
        tracker = self.counters.receive()
        truth = self.truth.start(index)
        try:
            return await self._serve_generation(request, api, rng, tracker, truth)
        except asyncio.CancelledError:
            tracker.abort()
            raise
        except ConnectionError:
            # The client went away mid-write; aiohttp drops this reply quietly.
            tracker.abort()
            return web.Response()
        except SimShutdown:
            tracker.fail("shutdown")
            raise web.HTTPServiceUnavailable(text="server shutting down") from None
        finally:
            truth.end(tracker.outcome.value if tracker.outcome is not None else "aborted")

    async def _serve_generation(
        self, request: web.Request, api: Api, rng: random.Random, tracker: RequestTracker, truth: TruthRecord
    ) -> web.StreamResponse:
        try:
            try:
                body = await request.json()
            except ValueError:
                raise BadRequest("the request body is not valid JSON") from None
            req = parse_request(api, body, self.profile)
        except BadRequest as exc:
            tracker.fail("bad_request")
            return _error(400, str(exc), "BadRequestError")
        if self.profile.strict_model and api != "generate" and req.model != self.profile.model_name:
            tracker.fail("model_not_found")  # vLLM's answer to a model it does not serve
            return _json({"object": "error", "message": f"The model '{req.model}' does not exist.",
                          "type": "NotFoundError", "param": None, "code": 404}, status=404)

        plan = draw_fault(self.profile, rng, req.max_tokens)
        load = self.model.load
        if self.guard.should_reject(load, plan.reject_draw):
            tracker.fail("overloaded")
            return _error(503, f"server overloaded ({load} requests in flight)", "overloaded")
        if plan.kind is FaultKind.HTTP_500:
            tracker.fail("http_500")
            return _error(500, "simulated internal server error", "InternalServerError")
        if plan.kind is FaultKind.HTTP_429:
            tracker.fail("http_429")
            resp = _error(429, "simulated rate limit", "rate_limit_exceeded")
            resp.headers["Retry-After"] = "1"
            return resp

        limit = self.profile.max_queued_requests
        if limit is not None and self.model.queued + 1 > limit:  # SGLang's _abort_on_queued_limit
            tracker.fail("shed")
            shed = Abort(503, QUEUE_FULL)
            if not req.stream:
                return _error(503, shed.message, "SERVICE_UNAVAILABLE")
            shape = make_shape(req, f"{rng.getrandbits(64):016x}", int(time.time()), cache_report=self.profile.cache_report)
            resp = web.StreamResponse(headers=_SSE_HEADERS)
            await resp.prepare(request)
            await self._end_aborted(request, resp, shape, shed, 0, truth)
            return resp
        try:
            sim_req = self.model.submit(req.prompt_tokens, req.max_tokens)
        except ValueError as exc:
            tracker.fail("bad_request")
            return _error(400, str(exc), "BadRequestError")
        try:
            self.guard.observe(self.model.load)
            shape = make_shape(req, f"{rng.getrandbits(64):016x}", int(time.time()),
                               cache_report=self.profile.cache_report)
            tokens = TokenStream(rng, first=f" r{truth.index}")  # every answer its own text
            truth.prompt_tokens = req.prompt_tokens
            truth.set_prompt_tail(req.prompt_tail)
            if req.stream:
                return await self._stream(request, req, sim_req, shape, tokens, plan, tracker, truth)
            return await self._whole(request, req, sim_req, shape, tokens, plan, tracker, truth)
        finally:
            truth.cached_tokens = sim_req.cached_tokens
            truth.preempted = sim_req.preempted
            self.model.release(sim_req)

    async def _stream(
        self,
        request: web.Request,
        req: GenerationRequest,
        sim_req: SimRequest,
        shape: ResponseShape,
        tokens: TokenStream,
        plan: FaultPlan,
        tracker: RequestTracker,
        truth: TruthRecord,
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers=_SSE_HEADERS)
        await resp.prepare(request)
        per_chunk = self.profile.tokens_per_chunk
        chunk_all = self.profile.spec_accept_length is not None  # one chunk per verify step
        stall_at = self.profile.stall_after_tokens
        malformed_pending = plan.kind is FaultKind.MALFORMED
        midstream = plan.kind is FaultKind.MIDSTREAM
        total = req.max_tokens
        try:
            if midstream and plan.at_token == 0:  # max_tokens 1: aborted before its one token
                tracker.fail("midstream")
                await self._end_aborted(request, resp, shape, Abort(500, MIDSTREAM_FAILURE), 0, truth)
                return resp
            opening = shape.opening()
            if opening is not None:
                await _send(resp, opening)
            produced = sent = 0
            while sent < total:
                if stall_at is not None and sent >= stall_at:
                    await self._stall(sim_req, tracker)
                    return resp
                produced += await sim_req.next_tokens()
                shape.cached_tokens = sim_req.cached_tokens  # known once admitted
                while produced - sent >= per_chunk or (produced == total and sent < total) or (chunk_all and produced > sent):
                    k = produced - sent if chunk_all else min(per_chunk, produced - sent)
                    if plan.kind is FaultKind.DISCONNECT and sent + k >= plan.at_token and self.profile.disconnect_stall_s:
                        await asyncio.sleep(self.profile.disconnect_stall_s)
                    text = tokens.next_text(k)
                    chunk = shape.token_chunk(text, sent + k, sent + k == total)
                    await _send(resp, chunk)
                    truth.chunk(chunk["sim_t"], k, text)
                    sent += k
                    tracker.sent_tokens(k)
                    if plan.kind is FaultKind.DISCONNECT and sent >= plan.at_token:
                        tracker.fail("disconnect")
                        _close_connection(request)
                        return resp
                    if malformed_pending and sent >= plan.at_token:
                        malformed_pending = False
                        tracker.fail("malformed")
                        await resp.write(_malformed(chunk))
                    if midstream and sent >= plan.at_token and sent < total:
                        tracker.fail("midstream")
                        await self._end_aborted(request, resp, shape, Abort(500, MIDSTREAM_FAILURE), sent, truth)
                        return resp
                    if stall_at is not None and sent >= stall_at and sent < total:
                        await self._stall(sim_req, tracker)
                        return resp
            closing = shape.closing(sent)
            if closing is not None:
                await _send(resp, closing)
            await resp.write(DONE_EVENT)
            tracker.complete()
        except ConnectionError:
            # The client went away mid-write; aiohttp finishes quietly when we return.
            tracker.abort()
        except SimShutdown:
            # The server stops under this stream: end it the way a dying server does.
            tracker.fail("shutdown")
            _close_connection(request)
        return resp

    async def _whole(
        self,
        request: web.Request,
        req: GenerationRequest,
        sim_req: SimRequest,
        shape: ResponseShape,
        tokens: TokenStream,
        plan: FaultPlan,
        tracker: RequestTracker,
        truth: TruthRecord,
    ) -> web.StreamResponse:
        total = req.max_tokens
        stall_at = self.profile.stall_after_tokens
        produced = 0
        while produced < total:
            if plan.kind is FaultKind.MIDSTREAM and produced >= max(plan.at_token, 1):
                tracker.fail("midstream")  # a non-streaming abort is an HTTP error
                return _error(500, MIDSTREAM_FAILURE, "INTERNAL_SERVER_ERROR")
            if stall_at is not None and produced >= stall_at:
                await self._stall(sim_req, tracker)
                return web.Response()
            produced += await sim_req.next_tokens()
            shape.cached_tokens = sim_req.cached_tokens
            if plan.kind is FaultKind.DISCONNECT and produced >= plan.at_token:
                tracker.fail("disconnect")
                _close_connection(request)
                return web.Response()
        text = tokens.next_text(total)
        truth.add_answer(text)
        body = json.dumps(shape.full_body(text, total), separators=(",", ":"))
        if plan.kind is FaultKind.MALFORMED:
            tracker.fail("malformed")
            body = body[: len(body) // 2]
        resp = web.Response(body=body.encode(), content_type="application/json")
        await resp.prepare(request)
        await resp.write_eof()
        tracker.sent_tokens(total)
        tracker.complete()
        return resp

    async def _end_aborted(self, request: web.Request, resp: web.StreamResponse, shape: ResponseShape,
                           abort: Abort, sent: int, truth: TruthRecord) -> None:
        """End a prepared stream whose request the scheduler aborted after ``sent`` tokens, as
        the profile's SGLang version does (engine/sim/refusals.py): its last events and
        [DONE], or a broken connection."""
        events = abort_events(shape, self.profile.sglang_version, abort, sent, truth.t_arrive)
        if events is None:
            _close_connection(request)
            return
        for event in events:
            await _send(resp, event)
        await resp.write(DONE_EVENT)

    async def _stall(self, sim_req: SimRequest, tracker: RequestTracker) -> None:
        """Stop sending without closing: free the slot, then hold until the client leaves."""
        tracker.fail("stall")
        self.model.release(sim_req)
        await self._closing.wait()


async def _send(resp: web.StreamResponse, chunk: dict[str, Any]) -> None:
    """Stamp ``sim_t`` just before the write and send one SSE event."""
    chunk["sim_t"] = time.time()
    await resp.write(encode_event(chunk))


def _malformed(chunk: dict[str, Any]) -> bytes:
    """A truncated copy of ``chunk`` as one SSE event: JSON that cannot be parsed."""
    text = json.dumps(chunk, separators=(",", ":"))
    cut = text.find('"choices":[')
    cut = cut + len('"choices":[') if cut > 0 else max(1, len(text) // 2)
    return b"data: " + text[:cut].encode() + b"\n\n"


def _close_connection(request: web.Request) -> None:
    transport = request.transport
    if transport is not None:
        transport.close()


def _json(obj: Any, status: int = 200) -> web.Response:
    return web.Response(
        body=json.dumps(obj, separators=(",", ":")).encode(),
        status=status,
        content_type="application/json",
    )


def _error(status: int, message: str, kind: str) -> web.Response:
    return _json(error_body(message, kind, status), status=status)
