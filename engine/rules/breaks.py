"""Where a ramp broke, judged again whenever its steps' figures change.

A ramp (a preset's staircase, or a knee search's points) breaks in one of two ways:

- a step's own figures fire a `[stop]` rule (engine/rules/verdicts.py StopRules): judged when
  the step closes, and again when its final figures land (its late requests ended: a TTFT
  bound became a figure, a late failure was counted);
- something happens while a step runs that no step's figures hold (`RunEvent`): the server
  went (`server_gone`), it stopped producing tokens (`stalled`), or its requests failed N in
  a row (`errors`). The event is the break unless a step before it fired a rule.

Last good: the best step before the break on which no rule fired (StopRules.last_good). In a
staircase each step is judged against the steps before it; a knee search's points against
the points at lower loads (one per load: verdicts.one_per_load), by the `[stop]` rules but the
plateau (SEARCH_BOUNDS): the plateau is what a search looks for (its knee), and an SLO is its
other answer (the largest load meeting it), not a bound.
A break is placed by its step's load: `C=64`, `12 req/s` or `x2` (a trace's speed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..measure.step_result import BreakResult, StepResult
from .verdicts import StopRules, load_key, one_per_load

SEARCH_BOUNDS = ("errors", "latency", "collapse")  # the [stop] rules that bound a knee search


@dataclass(frozen=True)
class Place:
    """A step's load, as a break names it."""

    concurrency: int
    rate: float | None = None  # an open loop's req/s
    speed: float | None = None  # a trace replay's speed

    @classmethod
    def of(cls, s: StepResult) -> Place:
        return cls(s.concurrency, s.request_rate if s.mode == "rate" else None, s.trace_speed if s.mode == "trace" else None)

    @property
    def key(self) -> tuple[str, float]:
        """Where it stands on the curve (verdicts.load_key's order)."""
        if self.speed is not None:
            return "x", float(self.speed)
        if self.rate is not None:
            return "R", float(self.rate)
        return "C", float(self.concurrency)


@dataclass(frozen=True)
class RunEvent:
    """A break that no step's figures hold, seen while the step at `place` ran."""

    reason: str  # server_gone | stalled | errors
    detail: str
    place: Place
    before: int  # how many of the ramp's steps were recorded before the step it happened in


def make_break(reason: str, detail: str, place: Place, good: StepResult | None) -> BreakResult:
    g = Place.of(good) if good is not None else None
    return BreakResult(
        reason=reason, concurrency=place.concurrency,
        last_good_concurrency=g.concurrency if g is not None else None, detail=detail,
        rate=place.rate, last_good_rate=g.rate if g is not None else None,
        speed=place.speed, last_good_speed=g.speed if g is not None else None,
    )


def _first(fired: list[tuple[str, str]]) -> tuple[str, str]:
    reason, detail = fired[0]
    if len(fired) > 1:
        detail += " (also: " + ", ".join(r for r, _ in fired[1:]) + ")"
    return reason, detail


class RampJudge:
    """A ramp's break and last good over its steps as they stand (see the module docstring).
    `search`: the steps are a knee search's points."""

    def __init__(self, rules: StopRules, search: bool = False) -> None:
        self.rules = rules
        self.search = search
        self.events: list[RunEvent] = []  # a staircase ends at its first; a search's lowest bounds it

    @property
    def event(self) -> RunEvent | None:
        if not self.events:
            return None
        return min(self.events, key=lambda e: e.place.key) if self.search else self.events[0]

    def fired(self, history: Sequence[StepResult], step: StepResult) -> list[tuple[str, str]]:
        """The rules `step` fires against `history` (a search: the points below it; the
        plateau rule is not the search's)."""
        out = self.rules.fired(history, step)
        return [f for f in out if f[0] in SEARCH_BOUNDS] if self.search else out

    def verdict(self, steps: Sequence[StepResult]) -> BreakResult | None:
        """The break over `steps` (the ramp's, in the order measured; the probe left out)."""
        steps = [s for s in steps if s.phase != "probe"]
        return self._search(steps) if self.search else self._staircase(steps)

    def _staircase(self, steps: list[StepResult]) -> BreakResult | None:
        ev = self.event
        for i, s in enumerate(steps):
            if ev is not None and i >= ev.before:
                break  # the event came first
            fired = self.fired(steps[:i], s)
            if fired:
                reason, detail = _first(fired)
                return make_break(reason, detail, Place.of(s), self.rules.last_good(steps[: i + 1]))
        if ev is None:
            return None
        return make_break(ev.reason, ev.detail, ev.place, self.rules.last_good(steps[: ev.before]))

    def points(self, steps: Sequence[StepResult]) -> list[StepResult]:
        """A search's points, one per load, in increasing load."""
        return list(one_per_load(steps).values())

    def bound(self, steps: Sequence[StepResult]) -> tuple[StepResult, str, str] | None:
        """A search's lowest point that fired a rule, judged against the points below it:
        (point, reason, detail)."""
        pts = self.points(steps)
        for i, s in enumerate(pts):
            fired = self.fired(pts[:i], s)
            if fired:
                return (s, *_first(fired))
        return None

    def good_below(self, steps: Sequence[StepResult], key: tuple[str, float] | None) -> StepResult | None:
        """A search's best point below load `key` (None: all) on which no bounding rule fired."""
        pts = [s for s in self.points(steps) if key is None or load_key(s) < key]
        good = [s for i, s in enumerate(pts) if not self.fired(pts[:i], s)]
        return max(good, key=lambda s: (s.output_throughput, -load_key(s)[1]), default=None)

    def _search(self, steps: list[StepResult]) -> BreakResult | None:
        b, ev = self.bound(steps), self.event
        if ev is not None and (b is None or ev.place.key <= load_key(b[0])):
            return make_break(ev.reason, ev.detail, ev.place, self.good_below(steps, ev.place.key))
        if b is None:
            return None
        s, reason, detail = b
        return make_break(reason, detail, Place.of(s), self.good_below(steps, load_key(s)))
