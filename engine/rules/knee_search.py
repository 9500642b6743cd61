"""Adaptive knee search: which concurrency to measure next, given the steps measured so far.

Two answers, from the same steps:
- the **throughput knee**: the smallest C whose output tok/s is within `plateau_gain` of the
  most the server gave (more C past it buys no tokens);
- the **largest C that meets the SLOs** (maximum goodput), when SLOs are set.

Each point is judged by the preset's `[stop]` rules as a staircase's step is
(engine/rules/breaks.py RampJudge: against the points at lower C; every rule but the plateau,
which is what the search looks for; an SLO is its second answer, not a bound): the lowest
point that fires one **bounds** the search.
No knee is above it, the search grows no further, and it narrows below it: the bracket
between the highest point below the bound (every point below it fired nothing) and the bound
is halved to `resolution`, so a curve still rising where a latency limit cuts it answers a knee where the
limit still holds (the knee over the points below the bound, "cut" there: engine/rules/verdicts.py
knee). A point that ended on an event (N failures in a row: `bound_at`) bounds it the same way.

From `start` the search grows C by `factor` while the steps still gain more than the plateau
gain and meet the SLOs, and keeps growing until each answer is bracketed between a good C
and a bad C (or `max` is reached, or a point bounds it). Then it narrows each bracket, the
widest first, until its width is at most `resolution` x C (or 1): the SLO and the bound's
brackets by halving; the knee bracket where the tok/s measured at its two ends say the curve
crosses the saturation line (linear interpolation, half a resolution below the crossing, so
the next point can close it from the other side), halving once whenever a point lands far
from its prediction and when the bracket is within two resolutions. Every point is a full
step (warm-up, hold until steady), measured by engine/run/search_run.py; the search only chooses C.
It knows no engine: the runner feeds it StepResults.

Noise: a gain counts only when it clears the plateau gain by more than the two steps' noise
(engine/rules/verdicts.py noise_margin) and the step was steady; a doubling that does not gain is
measured once more before the search believes it (one noisy step never stops the growth
for good), unless that step proved it: steady, and short of the gain with its noise counted
in its favour. Below max, an unsteady step that cleared the gain beyond its noise is grown on
from without a second look (a false gain costs one doubling, whose stall shows it); at max
it is looked at again, as today. "No knee below max" is an answer: when the top point still gained, the knee
is None and `knee_reason` says "still rising at max C=64".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from ..measure.slo import Slo
from ..measure.step_result import StepResult
from .breaks import RampJudge
from .verdicts import StopRules, knee, meets_slo, noise_margin

GUESS_NEAR = 0.1  # an interpolated knee point landed near the crossing: within this share of its bracket's spread


@dataclass
class SearchResult:
    knee_concurrency: int | None
    max_slo_concurrency: int | None
    duration_s: float
    points: list[int] = field(default_factory=list)
    knee_reason: str = ""  # why the knee is where it is, or why there is none
    max_throughput_concurrency: int | None = None  # the point that gave the most output tok/s
    cancelled: bool = False  # the operator (or a signal) ended it before it answered: no knee

    def to_dict(self) -> dict:
        return {
            "knee_concurrency": self.knee_concurrency,
            "knee_reason": self.knee_reason,
            "max_throughput_concurrency": self.max_throughput_concurrency,
            "max_slo_concurrency": self.max_slo_concurrency,
            "duration_s": round(self.duration_s, 3),
            "points": list(self.points),
            **({"cancelled": True} if self.cancelled else {}),
        }


class KneeSearch:
    def __init__(
        self,
        start: int,
        max_c: int,
        *,
        resolution: float = 0.05,
        factor: float = 2.0,
        plateau_gain: float = 0.05,
        slo: Slo | None = None,
        rules: StopRules | None = None,
        label: Callable[[int], str] = lambda c: f"C={c}",
    ) -> None:
        self.start = start
        self.max_c = max_c
        self.resolution = resolution
        self.factor = factor
        self.gain = plateau_gain
        self.slo = slo if slo is not None and slo.any else None
        # the preset's [stop] rules judge each point (engine/rules/breaks.py SEARCH_BOUNDS)
        self.judge = RampJudge(rules if rules is not None else StopRules(), search=True)
        self.steps: list[StepResult] = []  # every measurement, in order (a point measured twice: both)
        self._level: dict[int, int] = {}  # id(step) -> its C
        self.points: list[int] = []
        self._growing = True
        self._stopped: set[int] = set()  # points that ended on an event (bound_at): no knee above them
        self._confirmed: set[int] = set()  # points measured twice (a stall is believed once confirmed)
        self._guess: tuple[int, float] | None = None  # the last knee point placed by interpolation, and its bracket's spread
        self._guess_ok = True  # ... and whether it landed near the predicted crossing
        self._below: int | None = None  # ... and it, when it landed near it, below: the next point closes from above
        self.label = label  # how a level reads: "C=64", "32 req/s"

    # -- the points ----------------------------------------------------------------------
    @property
    def all_results(self) -> dict[int, StepResult]:
        """Each measured C and the step that stands for it (verdicts.one_per_load's choice)."""
        return {self._level[id(s)]: s for s in self.judge.points(self.steps)}

    def bound(self) -> tuple[int, str] | None:
        """(the lowest C that fired a [stop] rule or ended on an event, why), or None."""
        b = self.judge.bound(self.steps)
        cands = [(self._level[id(b[0])], b[1])] if b is not None else []
        cands += [(c, "errors") for c in self._stopped]
        return min(cands, default=None)

    @property
    def results(self) -> dict[int, StepResult]:
        """The points below the bound (all, unbounded): the ones the knee is judged on."""
        b = self.bound()
        return {c: s for c, s in self.all_results.items() if b is None or c < b[0]}

    # -- judging one point -----------------------------------------------------------
    def slo_ok(self, s: StepResult) -> bool:
        return self.slo is None or meets_slo(self.slo, s)

    def _best_tps(self) -> float:
        return max((s.output_throughput for s in self.results.values()), default=0.0)

    def _best(self, below: int | None = None) -> StepResult | None:
        cands = [s for c, s in self.results.items() if below is None or c < below]
        return max(cands, key=lambda s: s.output_throughput, default=None)

    def saturated(self, c: int) -> bool:
        """C gives within plateau_gain of the most tok/s seen (or more), noise allowed for."""
        cur, best = self.results[c], self._best()
        assert best is not None
        return cur.output_throughput + noise_margin(cur, best) >= (1 - self.gain) * best.output_throughput

    def gained(self, c: int) -> bool:
        """C's step gained more than the plateau gain over the best point below it, by more
        than the noise, and was steady (or, measured a second time, the noise margin alone
        judges: an open loop's Poisson seconds are rarely steady)."""
        cur, best = self.results[c], self._best(below=c)
        if best is None:
            return True
        return self._clear_gain(c) and (cur.steady or c in self._confirmed)  # measured twice: the noise margin judges

    def _clear_gain(self, c: int) -> bool:
        """C's tok/s cleared the plateau gain over the best point below it by more than the noise."""
        cur, best = self.results[c], self._best(below=c)
        if best is None:
            return True
        return cur.output_throughput - noise_margin(cur, best) >= best.output_throughput * (1 + self.gain)

    # -- brackets ---------------------------------------------------------------------
    def knee_bracket(self) -> tuple[int | None, int | None]:
        """(largest C not saturated, smallest C saturated), among measured points."""
        cs = sorted(self.results)
        sat = [c for c in cs if self.saturated(c)]
        hi = sat[0] if sat else None
        below = [c for c in cs if hi is not None and c < hi]
        return (below[-1] if below else None), hi

    def slo_bracket(self) -> tuple[int | None, int | None]:
        """(largest C meeting the SLO below the first miss, smallest C missing it; the bound
        is a miss)."""
        res, b = self.results, self.bound()
        cs = sorted(res)
        bad = [c for c in cs if not self.slo_ok(res[c])] + ([b[0]] if b is not None else [])
        hi = min(bad) if bad else None
        good = [c for c in cs if self.slo_ok(res[c]) and (hi is None or c < hi)]
        return (good[-1] if good else None), hi

    def bound_bracket(self) -> tuple[int | None, int | None]:
        """(the highest point below the bound, the bound): every point below the lowest that
        fired a rule fired none. (None, None) unbounded."""
        b = self.bound()
        if b is None:
            return None, None
        return max(self.results, default=None), b[0]

    def _stalled(self) -> bool:
        """The top point did not gain over the ones below it."""
        cs = sorted(self.results)
        return len(cs) >= 2 and not self.gained(cs[-1])

    def _stall_proven(self, c: int) -> bool:
        """C's step was steady and fell short of the plateau gain over the best below it even
        with the noise counted in its favour: one measurement is enough to believe the stall."""
        cur, best = self.results[c], self._best(below=c)
        if best is None or not cur.steady:
            return False
        return cur.output_throughput + noise_margin(cur, best) < best.output_throughput * (1 + self.gain)

    def _knee_found(self) -> bool:
        """Growing has shown the curve flattening: the top point did not gain, twice (or once,
        when that step proved it: steady and short of the gain beyond its noise)."""
        top = max(self.results) if self.results else None
        return top is not None and self._stalled() and (top in self._confirmed or self._stall_proven(top))

    def rising_at_max(self) -> bool:
        """The search reached max unbounded and the top point still gained: no knee below max."""
        res = self.results
        return self.bound() is None and bool(res) and max(res) >= self.max_c and len(res) >= 2 and self.gained(max(res))

    def _narrow(self, lo: int | None, hi: int | None) -> bool:
        if lo is None or hi is None:
            return True
        return hi - lo <= max(1, math.ceil(self.resolution * hi))

    # -- the plan -----------------------------------------------------------------------
    def observe(self, c: int, res: StepResult) -> None:
        if c in self.all_results:  # measured again: the confirmation of a stall
            self._confirmed.add(c)
        self.steps.append(res)
        self._level[id(res)] = c
        self.points.append(c)
        if self._guess is not None and self._guess[0] == c:  # an interpolated knee point: did it land near the crossing?
            excess = self._excess(c) if c in self.results else math.inf
            self._guess_ok = abs(excess) <= GUESS_NEAR * self._guess[1]
            self._below = c if self._guess_ok and excess < 0 else None
            self._guess = None

    def replace(self, res: StepResult) -> None:
        """A point's final figures (its late requests ended) replace its closing ones: the
        same step (StepResult.index), judged again."""
        for i, old in enumerate(self.steps):
            if old.index == res.index:
                self._level[id(res)] = self._level.pop(id(old))
                self.steps[i] = res

    def bound_at(self, c: int) -> None:
        """The point at C ended on an event that no figure holds (its requests failed N in a
        row: engine/run/run_watch.py): it bounds the search as a fired rule does."""
        self._stopped.add(c)

    def next(self) -> int | None:
        """The next C to measure, or None when both answers are narrow enough."""
        if not self.steps:
            return self.start
        res, bound = self.results, self.bound()
        if not res:  # every point measured is at or above the bound: below it, by the factor
            assert bound is not None
            lower = max(1, math.floor(bound[0] / self.factor))
            return None if bound[0] in self._stopped or lower >= bound[0] or lower in self.all_results else lower
        top = max(res)
        if self._growing:
            need_knee = not self._knee_found()
            need_slo = self.slo is not None and self.slo_bracket()[1] is None
            if bound is not None or not (need_knee or need_slo):
                self._growing = False
            elif need_knee and self._stalled() and top not in self._confirmed and not (top < self.max_c and self._clear_gain(top)):
                return top  # a stall is measured once more before it is believed
            # (an unsteady step that cleared the gain beyond its noise, below max, is grown on
            # from: were the gain false, the next doubling's stall shows it; at max it is
            # measured again, as "still rising at max" is said only on a steady or second look)
            elif top >= self.max_c:
                self._growing = False
            else:
                return min(self.max_c, max(top + 1, round(top * self.factor)))
        # bisect the widest bracket that is not narrow yet (none for the knee while the
        # curve still rises at max)
        knee_first = not self.rising_at_max()
        brackets = [self.knee_bracket()] if knee_first else []
        if self.slo is not None:
            brackets.append(self.slo_bracket())
        if bound is not None:
            brackets.append(self.bound_bracket())
        open_ = [(hi - lo, lo, hi, i == 0 and knee_first) for i, (lo, hi) in enumerate(brackets)
                 if lo is not None and hi is not None and not self._narrow(lo, hi)]
        if not open_:
            return None
        _, lo, hi, knee = max(open_)
        mid = (lo + hi) // 2
        if knee and (guess := self._knee_point(lo, hi)) is not None:
            return guess
        if mid in self.all_results or mid <= lo or mid >= hi:
            return None
        return mid

    # -- placing a knee point -----------------------------------------------------------
    def _excess(self, c: int) -> float:
        """How far C's tok/s (noise counted in its favour) is above the saturation line: C is
        saturated when this is >= 0 (see saturated)."""
        cur, best = self.results[c], self._best()
        assert best is not None
        return cur.output_throughput + noise_margin(cur, best) - (1 - self.gain) * best.output_throughput

    def _knee_point(self, lo: int, hi: int) -> int | None:
        """The next point in the knee bracket (lo, hi), placed where the measured tok/s of its
        two ends say the curve crosses the saturation line (linear interpolation), half the
        resolution below it; when that point landed just below the crossing (it is lo now), one
        resolution above it, which closes the bracket if it saturates. None (bisect) when the
        bracket is within two resolutions (halving closes it), when the last interpolated point
        landed far from its prediction (a curve that bends sharply: halving is safer once), or
        when the point was measured already."""
        w = max(1, math.ceil(self.resolution * hi))
        if hi - lo <= 2 * w or not self._guess_ok:
            self._guess_ok = True  # one halving, then interpolate again
            return None
        e_lo, e_hi = self._excess(lo), self._excess(hi)
        spread = e_hi - e_lo
        if spread <= 0:
            return None
        if self._below == lo:
            p = lo + max(1, math.ceil(self.resolution * lo))
        else:
            x = lo + (-e_lo) / spread * (hi - lo)
            p = round(x - w / 2)
        p = min(hi - 1, max(lo + 1, p))
        if p in self.results:
            return None
        self._guess = (p, spread)
        return p

    def result(self, duration_s: float, cancelled: bool = False) -> SearchResult:
        """The answers over the points measured (the knee: engine/rules/verdicts.py knee, the one
        definition). A cancelled search answers no knee and no SLO level."""
        level = {id(s): c for c, s in self.results.items()}
        b = self.bound()
        cut = None if b is None else f"{self.label(b[0])} broke a [stop] rule ({b[1]})"
        k = knee(self.results.values(), self.gain, at=lambda s: level[id(s)], label=lambda s: self.label(level[id(s)]), cut=cut)
        top = None if k.max_throughput is None else int(k.max_throughput)
        if cancelled:
            return SearchResult(None, None, duration_s, list(self.points), f"search cancelled after {len(self.points)} points",
                                top, cancelled=True)
        max_slo = self.slo_bracket()[0] if self.slo is not None else None
        return SearchResult(None if k.value is None else int(k.value), max_slo, duration_s, list(self.points), k.reason, top)
