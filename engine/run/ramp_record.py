"""A preset run's record: its steps and its break as they stand, and what it returns.

The steps are engine.book's (a step's final figures replace its closing ones there) that
this run measured; the break is engine/rules/breaks.py RampJudge's over them, taken after
each step and again whenever a step's final figures land (StepBook.rejudge), with a search's
answers (engine/run/search_run.py), so every output reads one verdict, on final figures.

Its cause: what the server-cap detector (engine/telemetry/cap.py) found while a step measured,
named beside the break ("plateau at C=16: server runs 8 of 16 in flight: pp micro-batch cap 8
(max_running_requests 64 // pp 8)"), else beside the knee (the lowest step at or above it that
found it), else at the last step that did; summary.json's `cause`, the end summary, the report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from ..measure.step_result import BreakResult, StepResult
from ..rules.breaks import Place, RampJudge, RunEvent
from ..rules.verdicts import knee_from_summary, load_key, summary_knee

if TYPE_CHECKING:
    from ..core.engine import Engine


@dataclass
class RunOutcome:
    steps: list[StepResult] = field(default_factory=list)
    break_result: BreakResult | None = None
    probe: StepResult | None = None
    search: dict | None = None  # summary.json's "search" object, after a knee search


class RampRecord:
    """This run's steps and its break as they stand (see the module docstring)."""

    def __init__(self, engine: Engine, judge: RampJudge) -> None:
        self.e = engine
        self.judge = judge
        self.indexes: set[int] = set()
        self.search: Any = None  # a knee search's engine/run/search_run.py SearchState
        self.findings: dict[int, str] = {}  # step index -> the cap detector's finding while it measured

    def add(self, res: StepResult) -> None:
        self.indexes.add(res.index)
        cap = getattr(getattr(self.e, "ticker", None), "cap", None)  # with telemetry on
        if cap is not None and cap.active and cap.holding and cap.finding:
            self.findings[res.index] = cap.finding

    def event(self, event: tuple[str, str], res: StepResult | None, place: Place, began: tuple[int, str] | None = None) -> RunEvent:
        """The run-time event that ended the step at `place` (`res`: its result, when it was
        recorded), as the judge holds it: a stall whose silence began in a step before it is
        that step's (`began`: engine/run/run_watch.py StallWatch.began)."""
        steps = self.steps()
        before = len(steps) - (res is not None)
        if event[0] == "stalled" and began is not None:
            pos = next((i for i, s in enumerate(steps) if s.index == began[0]), None)
            if pos is not None and pos < before:
                return RunEvent(event[0], event[1], Place.of(steps[pos]), before=pos)
        return RunEvent(event[0], event[1], place, before)

    def cause(self) -> str | None:
        """The cause named beside the break or the knee (see the module docstring), or None."""
        found = [s for s in self.steps() if s.index in self.findings]
        if not found:
            return None
        br = self.e.book.break_result
        if br is not None:
            at = [s for s in found if Place.of(s) == Place(br.concurrency, br.rate, br.speed)]
            if at:
                return f"{br.reason} at {br.where}: {self.findings[at[-1].index]}"
        book = self.e.book
        k = knee_from_summary(summary_knee(self.steps(), book.search, book.plateau_gain))
        if k is not None and k.value is not None:
            above = sorted((s for s in found if load_key(s)[0] == k.kind and load_key(s)[1] >= k.value), key=load_key)
            if above:
                s = above[0]
                where = "" if load_key(s)[1] == k.value else f"at {s.load} "
                return f"knee {k.label}: {where}{self.findings[s.index]}"
        s = found[-1]
        return f"at {s.load}: {self.findings[s.index]}"

    def steps(self) -> list[StepResult]:
        return [s for s in self.e.book.steps if s.index in self.indexes]

    def judge_now(self) -> BreakResult | None:
        br = self.judge.verdict(self.steps())
        self.e.book.break_result = br
        self.e.book.cause = self.cause()
        return br

    def rejudge(self) -> None:
        """A step's final figures landed: the break, last good and a search's answers again."""
        if self.search is not None:
            for s in self.steps():
                self.search.search.replace(s)
            if self.search.duration_s is not None or self.search.cancelled:
                self.e.book.search = self.search.summary()
        old = self.e.book.break_result
        new = self.judge_now()
        if new != old:
            self.e.log("break", f"judged again on the steps' final figures: {_break_text(new)}",
                       concurrency=new.concurrency if new is not None else 0)

    def announce(self, out: RunOutcome, on_line: Callable[[str], None]) -> BreakResult | None:
        """Judge now; a break is logged and said (`break: stalled at C=32; last good C=16 (...)`)."""
        br = out.break_result = self.judge_now()
        if br is not None:
            self.e.log("break", br.detail or br.reason, concurrency=br.concurrency)
            on_line(_break_text(br))
        return br


def _break_text(br: BreakResult | None) -> str:
    if br is None:
        return "no break"
    return f"break: {br.reason} at {br.where}; {br.good_text}" + (f" ({br.detail})" if br.detail else "")
