"""Where a sweep on a terminal is (tui/sweep_view.py runs it): the state the loop, the app's
start thread and the app share, and the line above the header it makes
(widgets/sweep_line.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

NEXT_REASON = "next configuration"  # `n`: the app's exit reason that goes on to the next


class StartAbandoned(Exception):
    """The configuration's server did not get ready (its entry says why), or its start was
    given up (`q`, a signal): not an error of redline's, nothing more to print."""


@dataclass
class SweepStatus:
    """Where the sweep is, shared by the loop (main thread), the start thread and the app."""

    total: int
    index: int = 0  # the configuration now, from 0
    label: str = ""
    values: str = ""  # "tp=1 pp=8 mb=8"
    phase: str = "starting"  # starting | running | stopping
    detail: str = ""  # what the start waits for; "ready in 41.2 s"
    finished: list[str] = field(default_factory=list)  # "mb8 knee C=8" of each configuration done
    ended_by: str = ""  # the app's exit reason for the configuration now
    repeats: int = 1  # --repeats
    repeat: int = 1  # the repeat now, from 1
    left: str = ""  # "about 12 min left" (engine/sweep/runner.py TimeLeft)

    def text(self, preset: str = "running") -> str:
        """The line above the header; `preset`: waiting | running | over (the app knows)."""
        head = f"sweep {self.index + 1}/{self.total} {self.label}"
        if self.values and self.values != self.label:
            head += f" ({self.values})"
        if self.repeats > 1:
            head += f" · repeat {self.repeat} of {self.repeats}"
        if self.phase == "running" and preset == "over":  # cancelled by a key: the load is the operator's
            state = "its preset is over: n next configuration, q ends the sweep"
        else:
            state = self.phase + (f": {self.detail}" if self.detail else "") + (" · n next" if self.phase == "running" else "")
        left = f" · {self.left}" if self.left else ""
        done = f" · done: {', '.join(self.finished)}" if self.finished else ""
        return f"{head} · {state}{left}{done}"


__all__ = ["NEXT_REASON", "StartAbandoned", "SweepStatus"]
