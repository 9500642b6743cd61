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

    def text(self, preset: str = "running", width: int | None = None) -> str:
        """The line above the header; `preset`: waiting | running | over (the app knows).
        `width`: the columns it has; what does not fit goes, the keys last: the configurations
        done (to a count), the configuration's values (its label stays), then the state's long
        words (what a start waits for)."""
        short_head = head = f"sweep {self.index + 1}/{self.total} {self.label}"
        if self.values and self.values != self.label:
            head += f" ({self.values})"
        if self.repeats > 1:  # which repeat stays in every form
            head += f" · repeat {self.repeat} of {self.repeats}"
            short_head += f" · repeat {self.repeat} of {self.repeats}"
        if self.phase == "running" and preset == "over":  # cancelled by a key: the load is the operator's
            long, short = "its preset is over: n next configuration, q ends the sweep", "preset over: n next, q ends the sweep"
        else:
            detail = f": {self.detail}" if self.detail else ""
            keys = " · n next" if self.phase == "running" else ""
            long, short = self.phase + detail + keys, self.phase + keys
        done, few = (f" · done: {', '.join(self.finished)}", f" · {len(self.finished)} done") if self.finished else ("", "")
        left = f" · {self.left}" if self.left else ""  # the time left: the first to go
        fits = [f"{head} · {long}{left}{done}", f"{head} · {long}{left}{few}", f"{short_head} · {long}{left}{few}",
                f"{head} · {long}{done}", f"{head} · {long}{few}", f"{short_head} · {long}{few}", f"{short_head} · {long}",
                f"{head} · {short}{done}", f"{head} · {short}{few}", f"{short_head} · {short}{few}", f"{short_head} · {short}"]
        if width is None:
            return fits[0]
        return next((t for t in fits if len(t) <= width), fits[-1])


__all__ = ["NEXT_REASON", "StartAbandoned", "SweepStatus"]
