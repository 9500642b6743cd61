"""The continuous-batching performance model: a scheduler loop of decode iterations.

Pure asyncio, no HTTP. Handlers :meth:`BatchModel.submit` a request, await its tokens with
:meth:`SimRequest.next_tokens` and :meth:`BatchModel.release` it when they are done (finished,
failed or cancelled because the client went away): a released request leaves the queue or the
running batch at once and frees its KV reservation.

Each iteration admits queued requests (FIFO) while the running cap, the KV budget (each request
reserves prompt + max_tokens tokens) and the chunked-prefill size allow; it then lasts
:meth:`SimProfile.step_time` for the batch and the admitted prompt tokens, and gives every
running request one new token. Requests that reach their max tokens leave the batch.

Prefix cache (SGLang's RadixAttention, vLLM's automatic prefix caching, kept simple and exact):
a prompt is cut into fixed blocks of ``prefix_block_tokens`` tokens, each keyed by a hash
chained over every block before it (:func:`prompt_blocks`), so a key names the whole prefix
up to the end of its block. At admission a request's leading blocks found in the cache are
hits: those tokens skip prefill (at least one token is always computed). Then all its blocks
enter the cache, an LRU capped at ``prefix_cache_capacity`` tokens that evicts the deepest
blocks of a prefix first, as a radix tree evicts leaves. Blocks enter when their request is
admitted (its prefill runs in that iteration), so two requests of one group admitted in the
same iteration: the second hits. Counters: prompt tokens queried (every admitted prompt) and
hit; the gauge ``cache_hit_rate`` is, as in SGLang, the hit rate of the last prefill batch.
The KV reservation of a request is unchanged by hits. A request's ``cached_tokens`` are its
hits at admission (served as /generate's ``meta_info.cached_tokens`` and the OpenAI usage's
``prompt_tokens_details.cached_tokens``), so the requests' cached tokens add up to the
``prefix_hit_tokens`` counter. :meth:`BatchModel.flush_cache` empties the cache, and refuses
(returns False) while any request is queued or running, as SGLang's ``/flush_cache`` does.

Preemption (``kv_reserve_output = False``): admission needs only the tokens a request holds now
(prompt + generated + 1); before an iteration's tokens are written, while they would not fit
in the KV budget, the most recently admitted running request is retracted to the front of the
queue (``preemptions_total``), its KV freed. Readmitted, it prefills its prompt and what it had
generated again (no second prefix lookup: its cached tokens and the cache counters count its
first admission only).

Speculative decoding (``spec_accept_length = L``): each iteration verifies draft tokens for
every running request and gives it L tokens on average (a running credit: floor of the credit
each iteration, the rest carried), at most what it still needs. Counters: verify steps (one per
request per iteration) and the tokens they emitted; ``spec_accept_length`` is their ratio over
the last seconds (SGLang's gauge), and the acceptance rate (accept length - 1) / draft tokens.
"""

from __future__ import annotations

import asyncio
import collections
import math
import time
from dataclasses import dataclass
from enum import Enum
from typing import Callable

from .pipeline import run_pipeline
from .prefix_cache import PrefixCache, PromptTokens, prompt_blocks
from .profiles import SimProfile
from .sched_log import LoggedStats, SchedulerLog

__all__ = ["BatchModel", "ModelSnapshot", "PrefixCache", "PromptTokens", "RequestState",
           "SimRequest", "SimShutdown", "prompt_blocks"]

#: Seconds of scheduling lag the loop tolerates before it stops catching up.
_MAX_LAG_S = 0.05
#: Window of sglang:gen_throughput.
_THROUGHPUT_WINDOW_S = 5.0


class SimShutdown(Exception):
    """Raised to a request waiting for tokens when the model is closed."""


class RequestState(Enum):
    """Where a request is in the model."""

    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"
    RELEASED = "released"


class SimRequest:
    """One generation request inside the model."""

    __slots__ = ("rid", "prompt_tokens", "max_tokens", "generated", "state", "blocks",
                 "cached_tokens", "admitted", "preempted", "spec_credit", "slot", "priority", "t_admit", "_available",
                 "_waiter", "_error")

    def __init__(self, rid: int, prompt_tokens: int, max_tokens: int,
                 blocks: tuple[int, ...] = (), priority: int | None = None) -> None:
        self.rid = rid
        self.slot = -1  # its micro-batch under pipeline parallelism, while it runs
        self.priority = priority  # the request's "priority" (--enable-priority-scheduling)
        self.t_admit: float | None = None  # when it was first admitted (time.monotonic)
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.blocks = blocks  # prefix-cache block keys of the prompt (dropped at admission)
        self.cached_tokens = 0  # prompt tokens found in the prefix cache at admission
        self.admitted = False  # admitted once (a retracted request is not looked up again)
        self.preempted = 0  # times it was retracted to the queue (KV budget full)
        self.spec_credit = 0.0  # speculative decoding: tokens owed beyond whole ones
        self.generated = 0
        self.state = RequestState.QUEUED
        self._available = 0
        self._waiter: asyncio.Future[None] | None = None
        self._error: BaseException | None = None

    @property
    def kv_reserved(self) -> int:
        """KV tokens reserved for this request while it runs."""
        return self.prompt_tokens + self.max_tokens

    @property
    def kv_used(self) -> int:
        """KV tokens this request occupies now."""
        return self.prompt_tokens + self.generated

    async def next_tokens(self) -> int:
        """Wait for new tokens and return how many were generated since the last call."""
        while not self._available:
            if self._error is not None:
                raise self._error
            if self._waiter is None or self._waiter.done():
                self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        n, self._available = self._available, 0
        return n

    def _push(self, n: int) -> None:
        self._available += n
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _fail(self, exc: BaseException) -> None:
        self._error = exc
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)


@dataclass(frozen=True)
class ModelSnapshot:
    """Exact state of the model at one moment."""

    running: int
    queued: int
    kv_used_tokens: int
    kv_reserved_tokens: int
    kv_budget_tokens: int
    prompt_tokens_total: int
    generated_tokens_total: int
    finished_total: int
    iterations_total: int
    gen_throughput: float
    # Prefix cache (defaults keep positional construction above unchanged):
    prefix_queried_tokens: int = 0  # prompt tokens looked up (every admitted prompt token)
    prefix_hit_tokens: int = 0  # of those, found in the cache (their prefill skipped)
    cache_hit_rate: float = 0.0  # hit rate of the last prefill batch (sglang:cache_hit_rate)
    prefix_cache_held_tokens: int = 0  # tokens the cache holds now
    preemptions_total: int = 0  # requests retracted to the queue because the KV budget filled
    spec_accept_length: float | None = None  # tokens per verify step over the last seconds
    spec_acceptance_rate: float | None = None  # (accept length - 1) / draft tokens
    spec_verify_steps_total: int = 0  # one per running request per iteration (spec decoding)
    flushes_total: int = 0  # prefix-cache flushes done (refused ones not counted)
    micro_batches: tuple[int, ...] = ()  # pipeline parallelism: the requests in each micro-batch

    @property
    def token_usage(self) -> float:
        """KV tokens in use over the budget, 0..1."""
        return self.kv_used_tokens / self.kv_budget_tokens

    @property
    def prefix_hit_rate(self) -> float | None:
        """Hit tokens over queried tokens since the start (None before any prompt)."""
        q = self.prefix_queried_tokens
        return self.prefix_hit_tokens / q if q else None

    def prefix_cache_state(self) -> dict[str, float | int | None]:
        """The prefix cache's exact numbers, as ``/sim/state`` serves them."""
        return {
            "queried_tokens": self.prefix_queried_tokens,
            "hit_tokens": self.prefix_hit_tokens,
            "hit_rate": self.prefix_hit_rate,
            "last_batch_hit_rate": self.cache_hit_rate,
            "held_tokens": self.prefix_cache_held_tokens,
            "flushes": self.flushes_total,
        }


class BatchModel:
    """Continuous-batching scheduler driven by :meth:`run` (one task per server)."""

    def __init__(
        self,
        profile: SimProfile,
        on_batch: Callable[[float], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``on_batch(n)`` is told the batch size at each change (the GPU model listens; under
        pp the batch a GPU runs on average, engine/sim/pipeline.py)."""
        self._profile = profile
        self._cap = profile.running_cap
        # pipeline parallelism: the running requests of each micro-batch (pipeline.py)
        self._slots: list[dict[SimRequest, None]] = [{} for _ in range(profile.micro_batches)] if profile.pp_size > 1 else []
        self.log = SchedulerLog(profile.sglang_version, profile.decode_log_interval, profile.kv_budget_tokens,
                                spec_draft_tokens=profile.spec_draft_tokens,
                                priority=profile.enable_priority_scheduling, clock=clock)
        self._on_batch = on_batch
        self._clock = clock
        self._queue: collections.deque[SimRequest] = collections.deque()
        self._running: dict[SimRequest, None] = {}
        self._wake = asyncio.Event()
        self._next_rid = 0
        self._kv_reserved = 0
        self._kv_used = 0
        self._prompt_total = 0
        self._generated_total = 0
        self._finished_total = 0
        self._iterations = 0
        self._cache = PrefixCache(profile.prefix_cache_capacity, profile.prefix_block_tokens)
        self._prefix_queried = 0
        self._prefix_hit = 0
        self._last_batch_hit_rate = 0.0
        self._preemptions = 0
        self._flushes = 0
        self._spec_steps = 0
        self._recent: collections.deque[tuple[float, int]] = collections.deque()
        self._recent_steps: collections.deque[tuple[float, int, int]] = collections.deque()  # (t, verify steps, tokens)
        self._started = clock()
        self._batch_reported = -1.0
        self._closed = False
        self._stopped = asyncio.Event()  # set by close(): a hung scheduler waits for it alone
        self._go = asyncio.Event()  # cleared while paused (the profiler's trace export)
        self._go.set()

    # ---- handler side ---------------------------------------------------------------

    @property
    def running(self) -> int:
        """Requests in the running batch."""
        return len(self._running)

    @property
    def queued(self) -> int:
        """Requests waiting for admission."""
        return len(self._queue)

    @property
    def hung(self) -> bool:
        """Whether the scheduler hangs now (``hang_after`` completions reached): no token is
        produced again; requests are still accepted, queued, and released when they leave."""
        n = self._profile.hang_after
        return n is not None and self._finished_total >= n

    @property
    def load(self) -> int:
        """Requests inside the server: running + queued."""
        return len(self._running) + len(self._queue)

    def submit(self, prompt_tokens: int, max_tokens: int, priority: int | None = None) -> SimRequest:
        """Queue a request; ValueError if it could never fit in the KV budget.

        ``prompt_tokens`` may be a :class:`PromptTokens` carrying the prompt's prefix blocks;
        a plain int is a prompt that shares nothing with any other."""
        if self._closed:
            raise SimShutdown("the model is closed")
        if prompt_tokens < 1 or max_tokens < 1:
            raise ValueError("prompt_tokens and max_tokens must be >= 1")
        if prompt_tokens + max_tokens > self._profile.kv_budget_tokens:
            raise ValueError(
                f"prompt + max_tokens = {prompt_tokens + max_tokens} exceeds the KV budget "
                f"of {self._profile.kv_budget_tokens} tokens"
            )
        blocks: tuple[int, ...] = ()
        if isinstance(prompt_tokens, PromptTokens):
            blocks, prompt_tokens.blocks = prompt_tokens.blocks, ()
        req = SimRequest(self._next_rid, int(prompt_tokens), max_tokens, blocks, priority)
        self._next_rid += 1
        self._queue.append(req)
        self._wake.set()
        return req

    def release(self, req: SimRequest) -> None:
        """Remove a request wherever it is (no-op once finished or released)."""
        if req.state is RequestState.QUEUED:
            self._queue.remove(req)
        elif req.state is RequestState.RUNNING:
            self._leave(req)
            self._report_running()
        else:
            return
        req.state = RequestState.RELEASED

    def snapshot(self) -> ModelSnapshot:
        """Exact counters and gauges of the model now."""
        return ModelSnapshot(
            running=len(self._running),
            queued=len(self._queue),
            kv_used_tokens=self._kv_used,
            kv_reserved_tokens=self._kv_reserved,
            kv_budget_tokens=self._profile.kv_budget_tokens,
            prompt_tokens_total=self._prompt_total,
            generated_tokens_total=self._generated_total,
            finished_total=self._finished_total,
            iterations_total=self._iterations,
            gen_throughput=self._gen_throughput(),
            prefix_queried_tokens=self._prefix_queried,
            prefix_hit_tokens=self._prefix_hit,
            cache_hit_rate=self._last_batch_hit_rate,
            prefix_cache_held_tokens=self._cache.held_tokens,
            preemptions_total=self._preemptions,
            spec_accept_length=self._spec_accept_length(),
            spec_acceptance_rate=self._spec_acceptance_rate(),
            spec_verify_steps_total=self._spec_steps,
            flushes_total=self._flushes,
            micro_batches=tuple(len(s) for s in self._slots),
        )

    def gauges(self) -> LoggedStats:
        """The /metrics gauges: what the scheduler last wrote (engine/sim/sched_log.py)."""
        return self.log.read(not self._running, [r.priority for r in self._queue], self._kv_used)

    def flush_cache(self) -> bool:
        """Empty the prefix cache; refused (False, nothing changes) while any request is
        queued or running."""
        if self._queue or self._running:
            return False
        self._cache.clear()
        self._flushes += 1
        self.log.flushed()
        return True

    def pause(self) -> None:
        """Stop making tokens (SGLang's scheduler exporting a trace) until :meth:`resume`."""
        self._go.clear()

    def resume(self) -> None:
        self._go.set()

    async def wait_go(self) -> bool:
        """Wait while paused; True when it was (the loop's clock starts again)."""
        if self._go.is_set():
            return False
        await self._go.wait()
        return True

    def close(self) -> None:
        """Fail every waiting request with SimShutdown and refuse new ones."""
        self._closed = True
        for req in list(self._queue) + list(self._running):
            req._fail(SimShutdown("the server is shutting down"))
            self.release(req)
        self._report_batch(0)
        self._wake.set()
        self._stopped.set()
        self._go.set()

    # ---- scheduler side -------------------------------------------------------------

    async def run(self) -> None:
        """The scheduler loop; runs until cancelled."""
        if self._slots:
            await run_pipeline(self, self._profile)
            return
        loop = asyncio.get_running_loop()
        next_start: float | None = None
        while not self._closed:
            if self.hung:
                await self._stopped.wait()
                continue
            if await self.wait_go():
                next_start = None
            prefill = self._admit()
            batch = len(self._running)
            if batch == 0:
                self._report_batch(0)
                self._wake.clear()
                if not self._queue:
                    next_start = None
                await self._wake.wait()
                continue
            self._report_batch(batch)
            now = loop.time()
            if next_start is None or now - next_start > _MAX_LAG_S:
                next_start = now
            end = next_start + self._profile.step_time(batch, prefill)
            delay = end - loop.time()
            await asyncio.sleep(delay if delay > 0 else 0)
            next_start = end
            if await self.wait_go():  # paused meanwhile (a trace export): its tokens come after it
                next_start = None
            self._emit()

    def _admit(self, slot: int = -1) -> int:
        """Admit queued requests for this iteration (under pp: into micro-batch ``slot``, up to
        its cap); return the prompt tokens to prefill (those not found in the prefix cache)."""
        budget = self._profile.kv_budget_tokens
        reserve = self._profile.kv_reserve_output
        chunk = self._profile.chunked_prefill_size
        cache = self._cache
        into = self._slots[slot] if slot >= 0 else self._running
        room = self._profile.micro_batch_cap if slot >= 0 else self._cap
        before = [r.priority for r in into] if self._queue else []
        prefill = queried = hit = 0
        while self._queue and len(self._running) < self._cap and len(into) < room:
            head = self._queue[0]
            if reserve:
                if self._kv_reserved + head.kv_reserved > budget:
                    break
            elif self._kv_used + head.kv_used + 1 > budget:
                break
            if head.admitted:  # readmitted after a retraction: recompute what it held
                new = head.kv_used
                if prefill and prefill + new > chunk:
                    break
                self._queue.popleft()
                self._start_running(head, slot)
                prefill += new
                continue
            cached = 0
            if head.blocks and cache.enabled:
                cached = min(cache.match(head.blocks) * cache.block_tokens, head.prompt_tokens - 1)
            new = head.prompt_tokens - cached
            if prefill and prefill + new > chunk:
                break
            self._queue.popleft()
            cache.insert(head.blocks)
            head.blocks = ()
            head.cached_tokens = cached
            head.admitted = True
            head.t_admit = time.monotonic()
            self._start_running(head, slot)
            self._prompt_total += head.prompt_tokens
            queried += head.prompt_tokens
            hit += cached
            prefill += new
        if queried:
            self._prefix_queried += queried
            self._prefix_hit += hit
            self._last_batch_hit_rate = hit / queried
        if prefill:  # SGLang logs each prefill batch (sched_log.py)
            self.log.prefill(before, [r.priority for r in self._queue], self._kv_used, hit, queried)
        return prefill

    def _start_running(self, req: SimRequest, slot: int = -1) -> None:
        req.state = RequestState.RUNNING
        self._running[req] = None
        if slot >= 0:
            req.slot = slot
            self._slots[slot][req] = None
        self._kv_reserved += req.kv_reserved
        self._kv_used += req.kv_used

    def _leave(self, req: SimRequest) -> None:
        """Take a running request out of the batch (and its micro-batch), its KV freed."""
        del self._running[req]
        if req.slot >= 0:
            del self._slots[req.slot][req]
            req.slot = -1
        self._kv_reserved -= req.kv_reserved
        self._kv_used -= req.kv_used

    def _retract(self, req: SimRequest) -> None:
        """Preempt a running request: back to the front of the queue, its KV freed."""
        self._leave(req)
        req.state = RequestState.QUEUED
        req.preempted += 1
        self._queue.appendleft(req)
        self._preemptions += 1
        self.log.retracted(1)

    def _make_room(self, per_request: int, batch: dict[SimRequest, None]) -> None:
        """Without output reservations: retract the newest requests of ``batch`` while this
        iteration's tokens would not fit in the KV budget (one always stays)."""
        budget = self._profile.kv_budget_tokens
        while len(batch) > 1 and self._kv_used + per_request * len(batch) > budget:
            self._retract(next(reversed(batch)))
        if self._running and self._preemptions:
            self._report_running()

    def _emit(self, slot: int = -1) -> None:
        """End of an iteration: one token to every running request (under pp: to those of
        micro-batch ``slot``; speculative decoding: its accepted tokens)."""
        self._iterations += 1
        batch = self._slots[slot] if slot >= 0 else self._running
        if not batch:
            return
        spec = self._profile.spec_accept_length
        if not self._profile.kv_reserve_output:
            self._make_room(1 if spec is None else int(math.ceil(spec)), batch)
        n = len(batch)
        prios = [r.priority for r in batch]
        finished: list[SimRequest] = []
        made = 0
        for req in batch:
            k = 1
            if spec is not None:
                req.spec_credit += spec
                k = int(req.spec_credit)
                req.spec_credit -= k
                k = max(1, min(k, req.max_tokens - req.generated))
            req.generated += k
            made += k
            req._push(k)
            if req.generated >= req.max_tokens:
                finished.append(req)
        self._kv_used += made
        self._generated_total += made
        if spec is not None:
            self._spec_steps += n
            self._recent_steps.append((self._clock(), n, made))
        for req in finished:
            self._leave(req)
            req.state = RequestState.FINISHED
        self._finished_total += len(finished)
        self.log.decode(prios, [r.priority for r in self._queue], self._kv_used, made,
                        n if spec is not None else 0, made if spec is not None else 0)
        if finished:
            self._report_running()
        now = self._clock()
        self._recent.append((now, made))
        self._trim_recent(now)

    def _trim_recent(self, now: float) -> None:
        cutoff = now - _THROUGHPUT_WINDOW_S
        while self._recent and self._recent[0][0] < cutoff:
            self._recent.popleft()
        while self._recent_steps and self._recent_steps[0][0] < cutoff:
            self._recent_steps.popleft()

    def _spec_accept_length(self) -> float | None:
        """Tokens per verify step over the last seconds (0 steps there: None)."""
        if self._profile.spec_accept_length is None:
            return None
        self._trim_recent(self._clock())
        steps = sum(s for _, s, _ in self._recent_steps)
        return sum(m for _, _, m in self._recent_steps) / steps if steps else None

    def _spec_acceptance_rate(self) -> float | None:
        length = self._spec_accept_length()
        if length is None:
            return None
        return (length - 1.0) / self._profile.spec_draft_tokens

    def _gen_throughput(self) -> float:
        now = self._clock()
        self._trim_recent(now)
        span = min(_THROUGHPUT_WINDOW_S, max(now - self._started, 1e-3))
        return sum(n for _, n in self._recent) / span

    def _report_running(self) -> None:
        """The batch changed (a request left or joined): the GPUs run it now; under pp the
        pipeline's loop tells them what a GPU runs (engine/sim/pipeline.py)."""
        if not self._slots:
            self._report_batch(len(self._running))

    def _report_batch(self, batch: float) -> None:
        if batch != self._batch_reported:
            self._batch_reported = batch
            if self._on_batch is not None:
                self._on_batch(batch)
