"""The server's own request counters and the one-outcome-per-request rule.

Every request that reaches a generation endpoint is *received* and ends in exactly one of:

- *completed*: its final chunk and ``[DONE]`` (or its whole JSON body) were written;
- *failed*: the server answered an error status, or broke the stream on purpose (faults);
- *aborted*: the client went away before the end.

So ``received == running + queued + completed + failed + aborted`` once handlers have settled
(a request between arrival and admission counts as queued).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from enum import Enum

__all__ = ["Outcome", "RequestCounters", "RequestTracker"]


class Outcome(Enum):
    """How a request ended."""

    COMPLETED = "completed"
    FAILED = "failed"
    ABORTED = "aborted"


@dataclass
class RequestCounters:
    """Counters of one simulated server (owned by its app, never module-global)."""

    received: int = 0
    completed: int = 0
    failed: int = 0
    aborted: int = 0
    tokens_sent: int = 0
    failures: collections.Counter[str] = field(default_factory=collections.Counter)

    def receive(self) -> RequestTracker:
        """Count a new request and return its tracker."""
        self.received += 1
        return RequestTracker(self)


class RequestTracker:
    """Records the single outcome of one request; later calls are ignored."""

    __slots__ = ("_counters", "outcome", "failure")

    def __init__(self, counters: RequestCounters) -> None:
        self._counters = counters
        self.outcome: Outcome | None = None
        self.failure: str | None = None

    @property
    def settled(self) -> bool:
        """Whether the outcome is known."""
        return self.outcome is not None

    def complete(self) -> None:
        """The request was answered in full."""
        if self.outcome is None:
            self.outcome = Outcome.COMPLETED
            self._counters.completed += 1

    def fail(self, kind: str) -> None:
        """The server failed the request on purpose or by error; ``kind`` names why."""
        if self.outcome is None:
            self.outcome = Outcome.FAILED
            self.failure = kind
            self._counters.failed += 1
            self._counters.failures[kind] += 1

    def abort(self) -> None:
        """The client went away first."""
        if self.outcome is None:
            self.outcome = Outcome.ABORTED
            self._counters.aborted += 1

    def sent_tokens(self, n: int) -> None:
        """``n`` generated tokens were written to the client."""
        self._counters.tokens_sent += n
