"""What ends a preset's step (or its probe) before its figures do: the events no step's
figures hold (engine/rules/breaks.py RunEvent). Checked every poll of the step's warm-up and
hold (engine/drive/step_run.py), so each is said within a poll of happening:

- `server_gone`: every target stopped answering (engine/run/target_set.py);
- `stalled`: requests in flight and no output token for `stall_s` (default STALL_S; `[stop]
  stall_s`). A hung server accepts requests, holds them and streams nothing; nothing fails
  and nothing ends, so no rule on the step's figures would ever fire. Watched on the count of
  the load's tokens received (engine/run/recording.py Recorder.tokens_received: worker
  processes report theirs late, on their own clocks, but a count only grows) against this
  process's clock: the silence starts at the first poll that saw requests in flight and no
  new token. While a profiler capture's trace is being written (engine/drive/server_ops.py:
  SGLang's scheduler makes no token then) the silence is not counted.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ..constants import STALL_S
from .server_ops import trace_being_written

WARMING = "'s warm-up"  # "during C=128's warm-up"


@dataclass
class StallWatch:
    """Seconds with requests in flight and no new token (see the module docstring)."""

    stall_s: float = STALL_S
    _tokens: int = -1
    _since: float | None = None  # when the silence began (None: none now)

    def quiet(self, now: float, in_flight: int, tokens: int) -> float:
        if in_flight <= 0 or tokens != self._tokens:
            self._tokens = tokens
            self._since = now if in_flight > 0 else None
            return 0.0
        if self._since is None:
            self._since = now
        return now - self._since

    def reset(self) -> None:
        """What was in flight is gone (an abort): the next poll starts afresh."""
        self._tokens, self._since = -1, None


class RunWatch:
    """The run-time events of one preset run, over its engine."""

    def __init__(self, engine: Any, stall_s: float | None = None) -> None:
        self.e = engine
        self.stall = StallWatch(stall_s if stall_s is not None else STALL_S)

    def check(self, where: str, warming: bool = False) -> tuple[str, str] | None:
        """(reason, detail) of the event that ends the step at `where` ("C=32"; `warming`:
        in its warm-up), or None."""
        e = self.e
        if e.server_gone:
            return "server_gone", f"server_gone: the target stopped answering during {where}{WARMING if warming else ''}"
        n = e.in_flight
        if trace_being_written(e):  # the server writes a profiler trace: its silence is not a stall
            self.stall.reset()
        quiet = self.stall.quiet(time.perf_counter(), n, e.recorder.tokens_received)
        if quiet >= self.stall.stall_s:
            return "stalled", f"stalled: {n} request{'s' if n != 1 else ''} in flight, no token for {quiet:.1f} s at {where}"
        return None
