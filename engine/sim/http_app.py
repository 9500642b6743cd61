"""The simulator's aiohttp application: SGLang and OpenAI endpoints over the batch model.

One :class:`SimService` per server holds all state (model, GPUs, counters, guard); nothing is
module-global. The application must run with ``handler_cancellation=True`` (see
:mod:`engine.sim.serve`) so a client that goes away cancels its handler and the request leaves
the model at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from typing import Any, Callable

from aiohttp import web

from .chunks import ResponseShape, make_shape
from .faults import FaultKind, FaultPlan, OverloadGuard, draw_fault
from .gpu import GpuFleet
from .metrics import (
    PROMETHEUS_CONTENT_TYPE,
    WARMUP_NEW_TOKENS,
    WARMUP_PROMPT_TOKENS,
    FinishedCounters,
    make_registry,
    render_dcgm,
    render_sglang,
)
from .model import BatchModel, SimRequest, SimShutdown
from .ops import SimOps
from .profiles import SimProfile
from .refusals import MIDSTREAM_FAILURE, QUEUE_FULL, Abort, abort_events
from .sched_log import LoggedStats
from .sglang_info import server_info
from .stats import RequestCounters, RequestTracker
from .tokens import TokenStream
from .truth import TruthLog, TruthRecord
from .wire import DONE_EVENT, Api, BadRequest, ContextTooLong, GenerationRequest, error_body, parse_request

__all__ = ["SimService", "SIM_VERSION", "SERVICE_KEY"]

SIM_VERSION = "redline-sim 0.1"
#: Seconds between two checks of the crash rules.
_CRASH_CHECK_S = 0.05
_LOG = logging.getLogger("redline.sim")

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
        # the tokenizer's counters (at each request's finish), SGLang's warm-up request in them
        self.finished = FinishedCounters()
        self.finished.finished(WARMUP_PROMPT_TOKENS, WARMUP_NEW_TOKENS, 0, False, None)
        self.finished.first_token(profile.step_time(1, WARMUP_PROMPT_TOKENS))
        self.deprecated_info_calls = 0  # /get_server_info asked (SGLang logs a warning each time)
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
        app.router.add_get("/get_server_info", self.get_server_info)
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

    def _read_state(self) -> tuple[LoggedStats, int, RequestCounters, FinishedCounters]:
        return self.model.gauges(), self.model.snapshot().preemptions_total, self.counters, self.finished

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
            "micro_batches": list(snap.micro_batches),
            "sglang_version": self.profile.sglang_version,
            "deprecated_info_calls": self.deprecated_info_calls,
            **self.ops.state(),
            "overloaded": self.guard.overloaded(snap.running + snap.queued),
            "crashed": self.guard.crashed,
            "hung": self.model.hung,
        }

    def server_args(self) -> dict[str, Any]:
        """SGLang's ``/server_info`` body, by the profile's version (engine/sim/sglang_info.py)."""
        return server_info(self.profile, gen_throughput=self.model.gauges().gen_throughput,
                           startup_time=self.profile.startup_s, seed=self.seed)

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
        """SGLang ``/server_info``."""
        return _json(self.server_args())

    async def get_server_info(self, request: web.Request) -> web.Response:
        """SGLang's deprecated ``/get_server_info``: the same body, a warning logged each time."""
        self.deprecated_info_calls += 1
        _LOG.warning("Endpoint '/get_server_info' is deprecated and will be removed in a future version. "
                     "Please use '/server_info' instead.")
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
        p = self.profile
        try:
            try:
                body = await request.json()
            except ValueError:
                raise BadRequest("the request body is not valid JSON") from None
            req = parse_request(api, body, p)
        except ContextTooLong as exc:
            tracker.fail("bad_request")
            return await self._refuse_invalid(request, api, bool(isinstance(body, dict) and body.get("stream")), str(exc))
        except BadRequest as exc:
            tracker.fail("bad_request")
            return _error(400, str(exc), "BadRequestError")
        if p.strict_model and api != "generate" and req.model != p.model_name:
            tracker.fail("model_not_found")  # vLLM's answer to a model it does not serve
            return _json({"object": "error", "message": f"The model '{req.model}' does not exist.",
                          "type": "NotFoundError", "param": None, "code": 404}, status=404)

        plan = draw_fault(p, rng, req.max_tokens)
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

        shape = make_shape(req, rng, int(time.time()), p.sglang_version, cache_report=p.cache_report,
                           reasoning=p.reasoning_tokens if api == "chat" else 0,
                           incremental=p.incremental_streaming_output)
        limit = p.max_queued_requests
        if limit is not None and self.model.queued + 1 > limit:  # SGLang's _abort_on_queued_limit
            tracker.fail("shed")
            shed = Abort(503, QUEUE_FULL)
            if not req.stream:
                return _error(503, shed.message, "SERVICE_UNAVAILABLE")
            stream = web.StreamResponse(headers=_SSE_HEADERS)
            await stream.prepare(request)
            await self._end_aborted(request, stream, shape, shed, 0, truth)
            return resp
        try:
            sim_req = self.model.submit(req.prompt_tokens, req.max_tokens, req.priority)
        except ValueError as exc:
            tracker.fail("bad_request")
            return _error(400, str(exc), "BadRequestError")
        try:
            self.guard.observe(self.model.load)
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
            # the tokenizer counts a request when it finishes (observe_one_finished_request)
            self.finished.finished(req.prompt_tokens, sim_req.generated, sim_req.cached_tokens, req.stream,
                                   req.priority)

    async def _refuse_invalid(self, request: web.Request, api: Api, stream: bool, message: str) -> web.StreamResponse:
        """SGLang's answer to a request its tokenizer refuses (a ValueError: too long for the
        context), by route and version: 0.5.23's OpenAI routes HTTP 400 with an ErrorResponse
        (serving_chat.py primes the stream before the 200); 0.5.9's OpenAI streams a 200 with an
        error event; /generate a 200 with ``{"error": ...}`` when streaming (http_server.py
        generate_request), else HTTP 400 ``{"error": {"message": ...}}``."""
        v9 = self.profile.sglang_version == "0.5.9"
        if api == "generate":
            if not stream:
                return _json({"error": {"message": message}}, status=400)
            err: dict[str, Any] = {"message": message}
            if not v9:
                err.update(type="invalid_request_error", code=400, retryable=False)
            event = b"data: " + json.dumps({"error": err}, separators=(",", ":")).encode() + b"\n\n"
        else:
            body = {"object": "error", "message": message, "type": "BadRequestError", "param": None, "code": 400}
            if not (v9 and stream):
                return _json(body, status=400)
            event = b"data: " + json.dumps({"error": body}).encode() + b"\n\n"
        resp = web.StreamResponse(headers=_SSE_HEADERS)
        await resp.prepare(request)
        await resp.write(event)
        await resp.write(DONE_EVENT)
        return resp

    def _first_token(self, shape: ResponseShape, sim_req: SimRequest) -> None:
        """The request's first token: its TTFT into the tokenizer's histogram, its queue time."""
        now = time.time()
        shape.first_token_s = now - shape.t_arrive
        self.finished.first_token(shape.first_token_s)
        if sim_req.t_admit is not None:
            shape.queue_time = max(0.0, sim_req.t_admit - (time.monotonic() - shape.first_token_s))

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
        if not shape.headers_at_first_token:
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
            produced = sent = 0
            while sent < total:
                if stall_at is not None and sent >= stall_at:
                    await self._stall(sim_req, tracker)
                    return resp
                produced += await sim_req.next_tokens()
                shape.cached_tokens = sim_req.cached_tokens  # known once admitted
                shape.retractions = sim_req.preempted
                while produced - sent >= per_chunk or (produced == total and sent < total) or (chunk_all and produced > sent):
                    if sent == 0:  # the first output: the headers (0.5.23), the role chunk
                        self._first_token(shape, sim_req)
                        if not resp.prepared:
                            await resp.prepare(request)
                        for event in shape.first_events():
                            await _send(resp, event)
                    k = produced - sent if chunk_all else min(per_chunk, produced - sent)
                    if plan.kind is FaultKind.DISCONNECT and sent + k >= plan.at_token and self.profile.disconnect_stall_s:
                        await asyncio.sleep(self.profile.disconnect_stall_s)
                    text = tokens.next_text(k)
                    events = shape.token_events(text, k, sent + k, sent + k == total)
                    t = await _send(resp, events[0])
                    truth.chunk(t, k, text)
                    sent += k
                    tracker.sent_tokens(k)
                    if plan.kind is FaultKind.DISCONNECT and sent >= plan.at_token:
                        tracker.fail("disconnect")
                        _close_connection(request)
                        return resp
                    if malformed_pending and sent >= plan.at_token:
                        malformed_pending = False
                        tracker.fail("malformed")
                        await resp.write(_malformed(events[0]))
                    if midstream and sent >= plan.at_token and sent < total:
                        tracker.fail("midstream")
                        await self._end_aborted(request, resp, shape, Abort(500, MIDSTREAM_FAILURE), sent, truth)
                        return resp
                    for event in events[1:]:  # chat: the finish_reason chunk
                        await _send(resp, event)
                    if stall_at is not None and sent >= stall_at and sent < total:
                        await self._stall(sim_req, tracker)
                        return resp
            for event in shape.closing(sent):
                await _send(resp, event)
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
            if produced and shape.first_token_s is None:
                self._first_token(shape, sim_req)
            shape.cached_tokens = sim_req.cached_tokens
            shape.retractions = sim_req.preempted
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
        """End a stream whose request the scheduler aborted after ``sent`` tokens, as the
        profile's SGLang version does (engine/sim/refusals.py): its last events and [DONE],
        or a broken connection."""
        events = abort_events(shape, self.profile.sglang_version, abort, sent, truth.t_arrive)
        if not resp.prepared:
            await resp.prepare(request)
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


async def _send(resp: web.StreamResponse, event: bytes) -> float:
    """Write one SSE event (a JSON object's bytes without its closing brace, engine/sim/chunks.py)
    with the sim's send time ``sim_t`` stamped just before the write; returns that time."""
    t = time.time()
    await resp.write(b"data: " + event + b',"sim_t":' + repr(t).encode() + b"}\n\n")
    return t


def _malformed(event: bytes) -> bytes:
    """A truncated copy of ``event`` as one SSE event: JSON that cannot be parsed."""
    cut = event.find(b'"choices":[')
    cut = cut + len(b'"choices":[') if cut > 0 else max(1, len(event) // 2)
    return b"data: " + event[:cut] + b"\n\n"


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
