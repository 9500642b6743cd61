"""What ends a preset's step (or its probe) before its figures do: the events no step's
figures hold (engine/rules/breaks.py RunEvent). Checked every poll of the step's warm-up and
hold (engine/run/step_run.py), so each is said within a poll of happening:

- `server_gone`: every target stopped answering (engine/core/targets.py);
- `stalled`: requests in flight and no output token for `stall_s` (default STALL_S; `[stop]
  stall_s`). A hung server accepts requests, holds them and streams nothing; nothing fails
  and nothing ends, so no rule on the step's figures would ever fire. Watched on the count of
  the load's tokens received (engine/core/measurements.py Measurements.tokens_received: worker
  processes report theirs late, on their own clocks, but a count only grows) against this
  process's clock: the silence starts at the first poll that saw requests in flight and no
  new token. While a profiler capture's trace is being written (engine/run/server_ops.py:
  SGLang's scheduler makes no token then) the silence is not counted;
- `errors`: CONSECUTIVE_FAILURES_END (20) of the step's requests failed in a row, no request
  completing between them (engine/core/measurements.py FailureStreak, counted from the step's or
  the probe's start): a server that refuses everything (a model it does not serve, a 404 for
  every request) is not hammered until the step's hold ends. Its detail carries the server's
  own reason: `errors: 20 requests failed in a row at C=8 (HTTP 404: The model 'llama-3-70b'
  does not exist.)`. Failures because the server went (kind `server_gone`) are that event's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..constants import CONSECUTIVE_FAILURES_END, STALL_S
from .server_ops import trace_being_written

if TYPE_CHECKING:
    from ..core.engine import Engine

WARMING = "'s warm-up"  # "during C=128's warm-up"


@dataclass
class StallWatch:
    """Seconds with requests in flight and no new token (see the module docstring)."""

    stall_s: float = STALL_S
    _tokens: int = -1
    _since: float | None = None  # when the silence began (None: none now)
    began: tuple[int, str] | None = None  # ... in which step (its index, its load): a silence outlives a step's close

    def quiet(self, now: float, in_flight: int, tokens: int, step: tuple[int, str] | None = None) -> float:
        if in_flight <= 0 or tokens != self._tokens:
            self._tokens = tokens
            self._since, self.began = (now, step) if in_flight > 0 else (None, None)
            return 0.0
        if self._since is None:
            self._since, self.began = now, step
        return now - self._since

    def reset(self) -> None:
        """What was in flight is gone (an abort): the next poll starts afresh."""
        self._tokens, self._since, self.began = -1, None, None


class RunWatch:
    """The run-time events of one preset run, over its engine."""

    def __init__(self, engine: Engine, stall_s: float | None = None, failures_end: int = CONSECUTIVE_FAILURES_END) -> None:
        self.e = engine
        self.stall = StallWatch(stall_s if stall_s is not None else STALL_S)
        self.failures_end = failures_end
        self._base = 0  # the streak when the step began: only its own failures count
        self.step: tuple[int, str] = (0, "")  # the step running now (StepResult.index, its load)

    def begin(self, index: int = 0, where: str = "") -> None:
        """The step `index` at load `where` (or the probe) begins: its failures in a row count
        from here; a silence that began in the step before it is still that step's."""
        self._base = self.e.failure_streak.count
        self.step = (index, where)

    def failed_in_a_row(self) -> int:
        """The step's own requests that failed in a row, now."""
        n = self.e.failure_streak.count
        if n < self._base:  # a request completed since: a new streak
            self._base = 0
        return n - self._base

    def check(self, where: str, warming: bool = False) -> tuple[str, str] | None:
        """(reason, detail) of the event that ends the step at `where` ("C=32"; `warming`:
        in its warm-up), or None."""
        e = self.e
        if e.server_gone:
            return "server_gone", f"server_gone: the target stopped answering during {where}{WARMING if warming else ''}"
        streak = e.failure_streak
        failed = self.failed_in_a_row()
        if failed >= self.failures_end and streak.kind != "server_gone":
            return "errors", f"errors: {failed} requests failed in a row at {where} ({streak.reason or streak.kind})"
        n = e.in_flight
        if trace_being_written(e):  # the server writes a profiler trace: its silence is not a stall
            self.stall.reset()
        quiet = self.stall.quiet(time.perf_counter(), n, e.measurements.tokens_received, self.step)
        if quiet >= self.stall.stall_s:
            began = self.stall.began
            since = f" since {began[1]} (at {where})" if began is not None and began != self.step and began[1] else f" at {where}"
            return "stalled", f"stalled: {n} request{'s' if n != 1 else ''} in flight, no token for {quiet:.1f} s{since}"
        return None
