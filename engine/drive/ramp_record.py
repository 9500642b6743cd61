"""A preset run's record: its steps and its break as they stand, and what it returns.

The steps are engine.book's (a step's final figures replace its closing ones there) that
this run measured; the break is engine/rules/breaks.py RampJudge's over them, taken after
each step and again whenever a step's final figures land (StepBook.rejudge), with a search's
answers (engine/drive/search_run.py), so every output reads one verdict, on final figures.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from ..measure.step_result import BreakResult, StepResult
from ..rules.breaks import RampJudge

if TYPE_CHECKING:
    from ..run.engine import Engine


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
        self.search: Any = None  # a knee search's engine/drive/search_run.py SearchState

    def add(self, res: StepResult) -> None:
        self.indexes.add(res.index)

    def steps(self) -> list[StepResult]:
        return [s for s in self.e.book.steps if s.index in self.indexes]

    def judge_now(self) -> BreakResult | None:
        br = self.judge.verdict(self.steps())
        self.e.book.break_result = br
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
