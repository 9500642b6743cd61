"""The knee, one definition (DESIGN.md "Verdicts"; docs/finding-the-limit.md): the points a
curve has, which step stands for a load measured more than once, which steps may decide, the
noise of two steps, the knee itself, one per workload, and what summary.json records of it.
engine/rules/verdicts.py gives every name here too (the one place the readers import from).

**Points** (`one_per_load`): one step per load, in increasing load (concurrencies, then rates,
then trace speeds). The probe and short periods (StepResult.short) are no points. A load
measured more than once is stood for by its latest step that decides, else by its latest step
(`stand_for`: the knee search keeps its points by the same rule).

**Decides** (`decides`): a step decides a throughput verdict (the knee, still rising, the
plateau and collapse rules, last good) only when it produced output tokens, was steady, and its
noise is known (StepResult.output_throughput_se; a step under 2 s has none). Unknown noise is
unknown, not zero: it can carry neither a knee nor a gain, so such a step decides nothing (the
engine never calls a step steady without it; a hand-made or old one may be). A step with no
completed request and 0 tok/s is never "still rising" and never the knee.

**Knee** (`knee`): over the points that decide, the smallest load whose output tok/s is within
`plateau_gain` (default DEFAULT_PLATEAU_GAIN, 5 %) of the most any of them gave, the noise of
the two counted in its favour (`within_gain`); "no knee: still rising at max" when the top one
still gained more than `plateau_gain` over the best below it, beyond the noise (`gains_over`).
`max_throughput` is the point that decides with the most tok/s, so the knee is never above it.
No knee, saying why: no step measured; no step produced output tokens; no steady step; one load.

**One knee per workload** (`session_knees`): a session whose workload changed (`w`) has a
knee per workload (StepResult.workload), each named by it, never one across two; the session's
knee (summary.json's top-level fields) is its last workload's, the others are listed in
`knees`. **A search** that finished gives a one-workload session's knee (its own answer); one
that did not finish (cancelled, or `in_progress` when the session ended: a kill) gives none,
and no interim answer of it ever becomes the session's knee.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable

from ..constants import DEFAULT_PLATEAU_GAIN, NOISE_SIGMAS
from ..measure.step_result import StepResult
from .workloads import WorkloadKey, workload_key, workload_text

KINDS = ("C", "R", "x")  # concurrency, offered request rate (req/s), trace speed


# -- which steps decide, and their noise -----------------------------------------------------

def noise_known(*steps: StepResult) -> bool:
    """Every one of `steps` measured the spread of its per-second tok/s."""
    return all(s.output_throughput_se is not None for s in steps)


def decides(s: StepResult) -> bool:
    """`s` may decide a throughput verdict: it produced output tokens, was steady, and its
    noise is known (see the module docstring)."""
    return s.output_throughput > 0 and s.steady and noise_known(s)


def why_not(s: StepResult) -> str | None:
    """Why `s` decides nothing ("no output token", "not steady", "noise unknown"), None when it decides."""
    if s.output_throughput <= 0:
        return "no output token"
    if not s.steady:
        return "not steady"
    return None if noise_known(s) else "noise unknown"


def noise_margin(cur: StepResult, best: StepResult) -> float:
    """NOISE_SIGMAS standard errors of the difference of two steps' mean tok/s. An unknown
    noise reads 0.0 here: callers that decide check noise_known first (within_gain and
    gains_over do, and only steps that decide reach the stop rules)."""
    a = cur.output_throughput_se or 0.0
    b = best.output_throughput_se or 0.0
    return NOISE_SIGMAS * math.sqrt(a * a + b * b)


def within_gain(cur: StepResult, best: StepResult, gain: float) -> bool:
    """`cur` gives within `gain` of `best`'s tok/s (or more), the noise counted in its favour;
    an unknown noise counts nothing in its favour."""
    margin = noise_margin(cur, best) if noise_known(cur, best) else 0.0
    return cur.output_throughput + margin >= (1 - gain) * best.output_throughput


def gains_over(cur: StepResult, best: StepResult, gain: float) -> bool:
    """`cur` gives more than `gain` over `best`'s tok/s, beyond the noise of the two; a step
    that produced no token never gains, and an unknown noise proves no gain."""
    if cur.output_throughput <= 0 or not noise_known(cur, best):
        return False
    return cur.output_throughput - noise_margin(cur, best) >= best.output_throughput * (1 + gain)


# -- points ----------------------------------------------------------------------------------

def load_key(s: StepResult) -> tuple[str, float]:
    """Where a step stands on the curve: ("C", concurrency), ("R", offered req/s) or ("x",
    a trace's speed); a rate step is never placed at its in-flight cap."""
    if s.mode == "rate" and s.request_rate is not None:
        return "R", float(s.request_rate)
    if s.mode == "trace" and s.trace_speed is not None:
        return "x", float(s.trace_speed)
    return "C", float(s.concurrency)


def load_label(key: tuple[str, float]) -> str:
    kind, v = key
    return f"R={v:g}/s" if kind == "R" else f"x{v:g}" if kind == "x" else f"C={v:g}"


def stand_for(old: StepResult | None, new: StepResult) -> StepResult:
    """The step that stands for a load measured again (`old` before, `new` now): the latest
    that decides, else the latest. One rule for one_per_load and the knee search."""
    if old is None or decides(new) or not decides(old):
        return new
    return old


def one_per_load(steps: Iterable[StepResult]) -> dict[tuple[str, float], StepResult]:
    """One step per load, in increasing load (concurrencies, then rates, then speeds), each
    stood for by stand_for. The probe and short periods (StepResult.short) are no points."""
    out: dict[tuple[str, float], StepResult] = {}
    for s in steps:
        if s.phase == "probe" or s.short:
            continue
        key = load_key(s)
        out[key] = stand_for(out.get(key), s)
    return dict(sorted(out.items(), key=lambda kv: (KINDS.index(kv[0][0]), kv[0][1])))


# -- the knee --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Knee:
    """The knee of one curve (see the module docstring)."""

    kind: str  # "C", "R" (req/s) or "x" (trace speed)
    value: float | None  # the knee's load; None: no knee (reason says why)
    reason: str
    max_throughput: float | None = None  # the load, among those that decide, that gave the most output tok/s
    workload: str = ""  # the workload it is the knee of, in words, when the session ran more than one

    @property
    def label(self) -> str:
        return "none" if self.value is None else load_label((self.kind, self.value))

    def describe(self) -> str:
        """"knee C=128 (within 5 % of ...); max throughput C=192" or "no knee: ...", and
        "; workload 32 in / 64 out" after it when the session ran more than one."""
        top = "" if self.max_throughput is None else f"; max throughput {load_label((self.kind, self.max_throughput))}"
        wl = f"; workload {self.workload}" if self.workload else ""
        if self.value is None:
            return f"no knee: {self.reason}{top}{wl}"
        return f"knee {self.label} ({self.reason}){top}{wl}"

    def summary_fields(self) -> dict:
        """summary.json's knee_concurrency, knee_reason, max_throughput_concurrency (over
        rates: knee_rate and max_throughput_rate beside them; over trace speeds, *_speed)."""
        def num(v: float | None) -> float | int | None:
            return None if v is None else (int(v) if self.kind == "C" else v)

        out: dict = {"knee_concurrency": num(self.value) if self.kind == "C" else None, "knee_reason": self.reason,
                     "max_throughput_concurrency": num(self.max_throughput) if self.kind == "C" else None}
        if self.kind == "R":
            out.update(knee_rate=self.value, max_throughput_rate=self.max_throughput)
        elif self.kind == "x":
            out.update(knee_speed=self.value, max_throughput_speed=self.max_throughput)
        return out


def knee(points: Iterable[StepResult], plateau_gain: float | None = None,
         at: Callable[[StepResult], float] | None = None, label: Callable[[StepResult], str] | None = None,
         cut: str | None = None) -> Knee:
    """The knee of `points`, one step per load of one kind (see one_per_load). `at` places
    a point (by default its load; the knee search passes its own levels) and `label` names it
    in the reason. `cut`: the loads above `points` broke a rule (a knee search bounded by its
    [stop] rules, engine/rules/knee_search.py: "C=32 broke a [stop] rule (latency)"): the curve
    ends at its top point, so a top that still gains is not "still rising" but the most the
    server gives within the rules, and the reason says where it was cut."""
    gain = DEFAULT_PLATEAU_GAIN if plateau_gain is None else plateau_gain
    pos = at or (lambda s: load_key(s)[1])
    name = label or (lambda s: load_label(load_key(s)))
    pts = sorted(points, key=pos)
    kind = load_key(pts[0])[0] if pts else "C"
    if not pts:
        return Knee(kind, None, "no step measured")
    if all(s.output_throughput <= 0 for s in pts):
        return Knee(kind, None, "no step produced output tokens")
    judged = [s for s in pts if decides(s)]
    left = ", ".join(f"{name(s)} {why_not(s)}" for s in pts if not decides(s))
    note = f" (left out: {left})" if left and judged else ""
    if not judged:
        return Knee(kind, None, f"no step steady with its noise known ({left})")
    best = max(judged, key=lambda s: (s.output_throughput, -pos(s)))
    if len(judged) == 1:
        if cut is not None:  # the one load that held the rules is the most the server gives within them
            return Knee(kind, pos(best), f"the only load measured below the break; {cut}{note}", pos(best))
        what = "one load measured" if len(pts) == 1 else "one steady load"
        return Knee(kind, None, f"{what} ({name(judged[0])}): nothing to compare{note}", pos(best))
    top, below = judged[-1], max(judged[:-1], key=lambda s: s.output_throughput)
    if cut is None and gains_over(top, below, gain):
        return Knee(kind, None, f"still rising at max {name(top)}{note}", pos(best))
    first = next(s for s in judged if within_gain(s, best, gain))
    # a knee that is within the gain only once the noise of the two is counted says so
    noisy = "" if first.output_throughput >= (1 - gain) * best.output_throughput else \
        f", counting the noise of both (±{noise_margin(first, best):.1f} tok/s)"
    where = "" if cut is None else f"; {cut}"
    return Knee(kind, pos(first), f"within {gain * 100:g} % of the most output tok/s ({best.output_throughput:.1f} at {name(best)}){noisy}{where}{note}", pos(best))


def main_kind(per: Iterable[tuple[str, float]]) -> str:
    """The kind of load measured most (C on a tie)."""
    keys = list(per)
    counts = {k: sum(1 for key in keys if key[0] == k) for k in KINDS}
    return max(KINDS, key=lambda k: (counts[k], -KINDS.index(k)))


def session_knee(steps: Iterable[StepResult], plateau_gain: float | None = None) -> Knee:
    """The knee over one step per load (one_per_load) of the main kind (the kind measured
    most loads of; C on a tie), of one workload's steps."""
    per = one_per_load(steps)
    kind = main_kind(per)
    return knee([s for key, s in per.items() if key[0] == kind], plateau_gain)


def by_workload(steps: Iterable[StepResult]) -> dict[WorkloadKey, list[StepResult]]:
    """The measured steps (no probe) of each workload, in the order the workloads were first run."""
    out: dict[WorkloadKey, list[StepResult]] = {}
    for s in steps:
        if s.phase != "probe":
            out.setdefault(workload_key(s.workload), []).append(s)
    return out


def session_knees(steps: Iterable[StepResult], plateau_gain: float | None = None) -> list[Knee]:
    """One knee per workload, in the order they were run (the last is the session's); each named
    by its workload when there is more than one."""
    groups = by_workload(steps)
    if len(groups) <= 1:
        return [session_knee(next(iter(groups.values()), []), plateau_gain)]
    return [replace(session_knee(g, plateau_gain), workload=workload_text(key)) for key, g in groups.items()]


# -- summary.json ----------------------------------------------------------------------------

SUMMARY_KNEE_KEYS = ("knee_concurrency", "knee_reason", "max_throughput_concurrency", "knee_rate", "max_throughput_rate",
                     "knee_speed", "max_throughput_speed")


def unfinished_search(search: dict | None) -> str | None:
    """Why a knee search gives no knee (cancelled, or still in progress: a session killed during
    it), None when it finished or there is none."""
    if not isinstance(search, dict):
        return None
    n = len(search.get("points") or ())
    if search.get("cancelled"):
        return f"the knee search was cancelled after {n} point{'s' if n != 1 else ''}"
    if search.get("in_progress"):
        return f"the knee search did not finish ({n} point{'s' if n != 1 else ''} measured; in progress when this was written)"
    return None


def summary_knee(steps: Iterable[StepResult], search: dict | None = None, plateau_gain: float | None = None) -> dict:
    """summary.json's knee fields for a session: its last workload's knee (top-level fields, the
    names old readers know) and, when it ran more than one workload, `knees`: [{"workload",
    "workload_text", knee fields...}] for each. A finished knee search's own answer (its points,
    its levels) is a one-workload session's knee; an unfinished one (cancelled, in_progress)
    gives no knee at all."""
    steps = list(steps)
    why = unfinished_search(search)
    if why is not None:
        return Knee("C", None, why).summary_fields()
    groups = by_workload(steps)
    if len(groups) <= 1:
        if search is not None and "knee_reason" in search:
            return {k: search.get(k) for k in SUMMARY_KNEE_KEYS if k in search}
        return session_knee(steps, plateau_gain).summary_fields()
    knees = [(key, session_knee(g, plateau_gain)) for key, g in groups.items()]
    out = knees[-1][1].summary_fields()
    out["knees"] = [{"workload": dict(key), "workload_text": workload_text(key), **k.summary_fields()} for key, k in knees]
    return out


def knee_from_summary(d: dict[str, Any]) -> Knee | None:
    """The knee summary.json recorded (a session written before the top-level fields: its
    finished knee search's answer); None when it recorded none."""
    if not isinstance(d, dict):
        return None
    if "knee_reason" not in d:
        search = d.get("search")
        if isinstance(search, dict) and "knee_reason" in search and unfinished_search(search) is None:
            return knee_from_summary({k: search.get(k) for k in SUMMARY_KNEE_KEYS if k in search})
        return None
    for kind, value, top in (("R", "knee_rate", "max_throughput_rate"), ("x", "knee_speed", "max_throughput_speed")):
        if d.get(value) is not None or d.get(top) is not None:
            return Knee(kind, d.get(value), str(d.get("knee_reason") or ""), d.get(top), str(d.get("workload_text") or ""))
    return Knee("C", d.get("knee_concurrency"), str(d.get("knee_reason") or ""), d.get("max_throughput_concurrency"),
                str(d.get("workload_text") or ""))


def knees_from_summary(d: dict[str, Any]) -> list[Knee]:
    """Every knee summary.json recorded: one per workload (`knees`), else its one knee; [] when
    it recorded none. The last is the session's."""
    if isinstance(d, dict) and isinstance(d.get("knees"), list):
        out = [k for e in d["knees"] if (k := knee_from_summary(e)) is not None]
        if out:
            return out
    k = knee_from_summary(d)
    return [] if k is None else [k]

