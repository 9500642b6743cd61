"""The measurement path's named events, its hooks, with their typed payloads, listed in one
module as Locust lists its own: one request's way and a step's record. Hooks, not "events":
the engine's event log (engine/core/event_log.py) is another thing.

    hook         payload                   fired by
    sent         RequestRecord             Sender.send (engine/load/sender.py), as the request goes
    first_token  RequestRecord             run_request (engine/client/request.py), once: rec.t_first was just set
    tokens       t: float, n: int          run_request: n output tokens arrived at t (one read's, in one call; or batched, flushed)
    ended        RequestRecord             Sender.send, once the request's fate is known (its watch judged it)
    lag          seconds: float            run_request: a chunk's receive wall time - the server's send stamp
    overloaded   error kind: str           Sender.slot_request: the server said 429/503/shed; the slot backs off
    step closed  StepResult                StepBook.record (engine/measure/step_book.py): a step's row, as it closed
    step final   StepResult                StepBook: a recorded step completed with its late requests' truth

Each is a `Hook`: its subscribers, called in the order they were added, each with the hook's
payload; a subscriber that raises stops the hook there (run_request then fails the
request, as a bug of the listener's; a batched `tokens` subscriber raises where its batch is
flushed instead). Subscriptions are made in one place: the engine's in
engine/core/wiring.py, a worker process's in engine/load/worker.py (its Batch).
"""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING, Callable, Generic, Protocol, TypeVar

if TYPE_CHECKING:
    from .records import RequestRecord
    from .step_result import StepResult

T = TypeVar("T")

__all__ = ["BatchedTokens", "Hook", "RequestHooks", "RequestListener", "StepHooks", "TokensHook"]


class Hook(Generic[T]):
    """One named event with one payload: its subscribers, in the order added."""

    __slots__ = ("name", "subscribers")

    def __init__(self, name: str, *subscribers: Callable[[T], None]) -> None:
        self.name = name
        self.subscribers: tuple[Callable[[T], None], ...] = subscribers

    def add(self, fn: Callable[[T], None]) -> None:
        self.subscribers = (*self.subscribers, fn)

    def fire(self, payload: T) -> None:
        for fn in self.subscribers:
            fn(payload)

    def __bool__(self) -> bool:
        """Whether anyone listens (a request computes a chunk's lag only then)."""
        return bool(self.subscribers)

    def __repr__(self) -> str:
        return f"Hook({self.name!r}, {len(self.subscribers)} subscribers)"


class TokensHook:
    """`tokens`: n output tokens arrived at t (perf_counter), a read's in one call: the event
    of the hot path, fired with its two values as they are (no payload object per read).

    Two kinds of subscriber. Per read (`add`): called at each read, on the loop that read it.
    Batched (`add_batched`): the reads are kept in two arrays (times, tokens) and handed over
    together by `flush`, one call per batch where a chain of calls per read cost ~1.2 us (the
    engine's own listeners: a tenth of an unpaced token's CPU). A batched subscriber reads
    the arrays during its call only (they are cleared after). Its figures are behind by what
    is not flushed yet, so whoever reads them flushes first: the Sender before a request's
    `ended` (engine/load/sender.py), the engine's harvest twenty times a second and every
    snapshot it publishes (engine/core/measurements.py flush_tokens). Each read keeps its
    own time: a window or a second counts a batch's reads exactly as it counted them one by one."""

    __slots__ = ("name", "subscribers", "batched", "_ts", "_ns")

    def __init__(self, *subscribers: Callable[[float, int], None]) -> None:
        self.name = "tokens"
        self.subscribers: tuple[Callable[[float, int], None], ...] = subscribers
        self.batched: tuple[Callable[[array[float], array[int]], None], ...] = ()
        self._ts: array[float] = array("d")
        self._ns: array[int] = array("q")

    def add(self, fn: Callable[[float, int], None]) -> None:
        self.subscribers = (*self.subscribers, fn)

    def add_batched(self, fn: Callable[[array[float], array[int]], None]) -> None:
        self.batched = (*self.batched, fn)

    def fire(self, t: float, n: int) -> None:
        for fn in self.subscribers:
            fn(t, n)
        if self.batched:
            self._ts.append(t)
            self._ns.append(n)

    @property
    def sink(self) -> Callable[[float, int], None]:
        """What a request calls at each read: `fire`, or where only batched subscribers
        listen, the two appends alone."""
        if self.subscribers or not self.batched:
            return self.fire
        put_t, put_n = self._ts.append, self._ns.append

        def put(t: float, n: int) -> None:
            put_t(t)
            put_n(n)

        return put

    def flush(self) -> None:
        """Hand the reads kept since the last flush to the batched subscribers, in order."""
        ts = self._ts
        if not ts:
            return
        ns = self._ns
        try:
            for fn in self.batched:
                fn(ts, ns)
        finally:
            del ts[:]
            del ns[:]

    def __bool__(self) -> bool:
        return bool(self.subscribers or self.batched)


class RequestListener(Protocol):
    """A subscriber of a request's four hooks at once (RequestHooks.subscribe)."""

    def on_send(self, rec: RequestRecord) -> None: ...
    def on_first(self, rec: RequestRecord) -> None: ...
    def on_tokens(self, t: float, n: int) -> None: ...
    def on_end(self, rec: RequestRecord) -> None: ...


class BatchedTokens(Protocol):
    """A listener that takes its reads' tokens in batches (TokensHook.add_batched): subscribe()
    gives it those instead of each read's on_tokens."""

    def on_token_reads(self, ts: array[float], ns: array[int]) -> None: ...


class RequestHooks:
    """What the requests of one Sender tell as they go (the table above). Built with its
    subscribers, or given them before the first request: a request takes the hooks' `fire`
    as it starts."""

    __slots__ = ("sent", "first_token", "tokens", "ended", "lag", "overloaded")

    def __init__(
        self,
        *,
        tokens: Callable[[float, int], None] | None = None,
        first_token: Callable[[RequestRecord], None] | None = None,
        lag: Callable[[float], None] | None = None,
    ) -> None:
        self.sent: Hook[RequestRecord] = Hook("sent")
        self.first_token: Hook[RequestRecord] = Hook("first_token", *(() if first_token is None else (first_token,)))
        self.tokens = TokensHook(*(() if tokens is None else (tokens,)))
        self.ended: Hook[RequestRecord] = Hook("ended")
        self.lag: Hook[float] = Hook("lag", *(() if lag is None else (lag,)))
        self.overloaded: Hook[str] = Hook("overloaded")

    def subscribe(self, listener: RequestListener) -> RequestHooks:
        """`listener` hears sent, first_token, tokens and ended (after those already subscribed);
        its tokens in batches where it has `on_token_reads` (BatchedTokens)."""
        self.sent.add(listener.on_send)
        self.first_token.add(listener.on_first)
        batched = getattr(listener, "on_token_reads", None)
        if batched is not None:
            self.tokens.add_batched(batched)
        else:
            self.tokens.add(listener.on_tokens)
        self.ended.add(listener.on_end)
        return self


class StepHooks:
    """What a step book tells of its steps: `closed` (a step's row recorded as it closed) and
    `final` (a recorded step completed with its late requests' truth)."""

    __slots__ = ("closed", "final")

    def __init__(self, closed: Callable[[StepResult], None] | None = None, final: Callable[[StepResult], None] | None = None) -> None:
        self.closed: Hook[StepResult] = Hook("step closed", *(() if closed is None else (closed,)))
        self.final: Hook[StepResult] = Hook("step final", *(() if final is None else (final,)))
