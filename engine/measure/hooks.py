"""The measurement path's named events, its hooks, with their typed payloads, listed in one
module as Locust lists its own: one request's way and a step's record. Hooks, not "events":
the engine's event log (engine/core/event_log.py) is another thing.

    hook         payload                   fired by
    sent         RequestRecord             Sender.send (engine/load/sender.py), as the request goes
    first_token  RequestRecord             run_request (engine/client/request.py), once: rec.t_first was just set
    tokens       t: float, n: int          run_request: n output tokens arrived at t (one read's, in one call)
    ended        RequestRecord             Sender.send, once the request's fate is known (its watch judged it)
    lag          seconds: float            run_request: a chunk's receive wall time - the server's send stamp
    overloaded   error kind: str           Sender.slot_request: the server said 429/503/shed; the slot backs off
    step closed  StepResult                StepBook.record (engine/measure/step_book.py): a step's row, as it closed
    step final   StepResult                StepBook: a recorded step completed with its late requests' truth

Each is a `Hook`: its subscribers, called in the order they were added, each with the hook's
payload; a subscriber that raises stops the hook there (run_request then fails the
request, as a bug of the listener's). Subscriptions are made in one place: the engine's in
engine/core/wiring.py, a worker process's in engine/load/worker.py (its Batch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Generic, Protocol, TypeVar

if TYPE_CHECKING:
    from .records import RequestRecord
    from .step_result import StepResult

T = TypeVar("T")

__all__ = ["Hook", "RequestHooks", "RequestListener", "StepHooks", "TokensHook"]


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
    of the hot path, fired with its two values as they are (no payload object per read)."""

    __slots__ = ("name", "subscribers")

    def __init__(self, *subscribers: Callable[[float, int], None]) -> None:
        self.name = "tokens"
        self.subscribers: tuple[Callable[[float, int], None], ...] = subscribers

    def add(self, fn: Callable[[float, int], None]) -> None:
        self.subscribers = (*self.subscribers, fn)

    def fire(self, t: float, n: int) -> None:
        for fn in self.subscribers:
            fn(t, n)

    def __bool__(self) -> bool:
        return bool(self.subscribers)


class RequestListener(Protocol):
    """A subscriber of a request's four hooks at once (RequestHooks.subscribe)."""

    def on_send(self, rec: RequestRecord) -> None: ...
    def on_first(self, rec: RequestRecord) -> None: ...
    def on_tokens(self, t: float, n: int) -> None: ...
    def on_end(self, rec: RequestRecord) -> None: ...


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
        """`listener` hears sent, first_token, tokens and ended (after those already subscribed)."""
        self.sent.add(listener.on_send)
        self.first_token.add(listener.on_first)
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
