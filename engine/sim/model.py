"""The continuous-batching performance model: a scheduler loop of decode iterations.

Pure asyncio, no HTTP. Handlers :meth:`BatchModel.submit` a request, await its tokens with
:meth:`SimRequest.next_tokens` and :meth:`BatchModel.release` it when they are done (finished,
failed or cancelled because the client went away): a released request leaves the queue or the
running batch at once and frees its KV reservation.

Each iteration admits queued requests (FIFO) while the running cap, the KV budget (each request
reserves prompt + max_tokens tokens) and the chunked-prefill size allow; it then lasts
:meth:`SimProfile.step_time` for the batch and the admitted prompt tokens, and gives every
running request one new token. Requests that reach their max tokens leave the batch.
"""

from __future__ import annotations

import asyncio
import collections
import time
from dataclasses import dataclass
from enum import Enum
from typing import Callable

from .profiles import SimProfile

__all__ = ["BatchModel", "ModelSnapshot", "RequestState", "SimRequest", "SimShutdown"]

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

    __slots__ = ("rid", "prompt_tokens", "max_tokens", "generated", "state",
                 "_available", "_waiter", "_error")

    def __init__(self, rid: int, prompt_tokens: int, max_tokens: int) -> None:
        self.rid = rid
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
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

    @property
    def token_usage(self) -> float:
        """KV tokens in use over the budget, 0..1."""
        return self.kv_used_tokens / self.kv_budget_tokens


class BatchModel:
    """Continuous-batching scheduler driven by :meth:`run` (one task per server)."""

    def __init__(
        self,
        profile: SimProfile,
        on_batch: Callable[[int], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``on_batch(n)`` is told the batch size at each change (the GPU model listens)."""
        self._profile = profile
        self._cap = profile.running_cap
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
        self._recent: collections.deque[tuple[float, int]] = collections.deque()
        self._started = clock()
        self._batch_reported = -1
        self._closed = False

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
    def load(self) -> int:
        """Requests inside the server: running + queued."""
        return len(self._running) + len(self._queue)

    def submit(self, prompt_tokens: int, max_tokens: int) -> SimRequest:
        """Queue a request; ValueError if it could never fit in the KV budget."""
        if self._closed:
            raise SimShutdown("the model is closed")
        if prompt_tokens < 1 or max_tokens < 1:
            raise ValueError("prompt_tokens and max_tokens must be >= 1")
        if prompt_tokens + max_tokens > self._profile.kv_budget_tokens:
            raise ValueError(
                f"prompt + max_tokens = {prompt_tokens + max_tokens} exceeds the KV budget "
                f"of {self._profile.kv_budget_tokens} tokens"
            )
        req = SimRequest(self._next_rid, prompt_tokens, max_tokens)
        self._next_rid += 1
        self._queue.append(req)
        self._wake.set()
        return req

    def release(self, req: SimRequest) -> None:
        """Remove a request wherever it is (no-op once finished or released)."""
        if req.state is RequestState.QUEUED:
            self._queue.remove(req)
        elif req.state is RequestState.RUNNING:
            del self._running[req]
            self._kv_reserved -= req.kv_reserved
            self._kv_used -= req.kv_used
            self._report_batch(len(self._running))
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
        )

    def close(self) -> None:
        """Fail every waiting request with SimShutdown and refuse new ones."""
        self._closed = True
        for req in list(self._queue) + list(self._running):
            req._fail(SimShutdown("the server is shutting down"))
            self.release(req)
        self._report_batch(0)
        self._wake.set()

    # ---- scheduler side -------------------------------------------------------------

    async def run(self) -> None:
        """The scheduler loop; runs until cancelled."""
        loop = asyncio.get_running_loop()
        next_start: float | None = None
        while not self._closed:
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
            self._emit()

    def _admit(self) -> int:
        """Admit queued requests for this iteration; return their prompt tokens."""
        budget = self._profile.kv_budget_tokens
        chunk = self._profile.chunked_prefill_size
        prefill = 0
        while self._queue and len(self._running) < self._cap:
            head = self._queue[0]
            if self._kv_reserved + head.kv_reserved > budget:
                break
            if prefill and prefill + head.prompt_tokens > chunk:
                break
            self._queue.popleft()
            head.state = RequestState.RUNNING
            self._running[head] = None
            self._kv_reserved += head.kv_reserved
            self._kv_used += head.kv_used
            self._prompt_total += head.prompt_tokens
            prefill += head.prompt_tokens
        return prefill

    def _emit(self) -> None:
        """End of an iteration: one token to every running request."""
        self._iterations += 1
        n = len(self._running)
        if not n:
            return
        finished: list[SimRequest] = []
        for req in self._running:
            req.generated += 1
            req._push(1)
            if req.generated >= req.max_tokens:
                finished.append(req)
        self._kv_used += n
        self._generated_total += n
        for req in finished:
            del self._running[req]
            req.state = RequestState.FINISHED
            self._kv_reserved -= req.kv_reserved
            self._kv_used -= req.kv_used
        self._finished_total += len(finished)
        if finished:
            self._report_batch(len(self._running))
        now = self._clock()
        self._recent.append((now, n))
        self._trim_recent(now)

    def _trim_recent(self, now: float) -> None:
        cutoff = now - _THROUGHPUT_WINDOW_S
        while self._recent and self._recent[0][0] < cutoff:
            self._recent.popleft()

    def _gen_throughput(self) -> float:
        now = self._clock()
        self._trim_recent(now)
        span = min(_THROUGHPUT_WINDOW_S, max(now - self._started, 1e-3))
        return sum(n for _, n in self._recent) / span

    def _report_batch(self, batch: int) -> None:
        if batch != self._batch_reported:
            self._batch_reported = batch
            if self._on_batch is not None:
                self._on_batch(batch)
