"""Verdicts: the knee, steadiness, the stop rules, last good and the step's SLO, one
definition each (DESIGN.md "Verdicts"; docs: "Finding the limit"). Everything that names a
verdict calls here: the preset runner and the knee search, summary.json, the report, the
HTML page, the gate, the TUI and the control API.

**Knee** (`knee`): the smallest load whose output tok/s is within `plateau_gain` (default
5 %) of the most any load gave, noise counted in its favour (`within_gain`); "no knee: still
rising at max" when the top load still gained more than `plateau_gain` over the best below
it, beyond the noise (`gains_over`). `max_throughput` is the load with the most tok/s. The
same for a staircase, a search, a report, a gate and a sweep; over rates (req/s) and trace
speeds alike.

**Steady** (`steadiness`): the step's per-second output tok/s in its window, silent seconds
included, has settled: at least `min_s` whole seconds, its standard error within
STEADY_MAX_SE of its mean, and its two halves within STEADY_TOLERANCE of each other (no
drift). It reads tokens as they arrive, so it exists seconds after warm-up whether or not
any request finished: 2048-token outputs that outlive every step are judged like short
ones. A step that is not steady says why (StepResult.unjudged).

**Stop rules** (`StopRules`; each off unless its [stop] key is set, except server_gone
which is always on); "best earlier" is the highest output_throughput among the steps
before the current one:

- server_gone: the target stopped answering (connection refused, health failing).
- errors:      failed / (completed + failed) of the step > error_rate.
               A step with no finished request has no error rate and does not fire.
- latency:     the step's p99_ttft_ms > p99_ttft_ms, or its p99_itl_ms > p99_itl_ms
               (window figures, censored bounds included: a bound above a limit is a breach).
               A step without that percentile (no data) does not fire.
- collapse:    output_throughput + margin < best earlier x (1 - collapse). Needs an earlier step.
- plateau:     output_throughput - margin < best earlier x (1 + plateau_gain). Needs an earlier step.

`margin` is the noise of the two measurements: NOISE_SIGMAS standard errors of their
per-second throughput (StepResult.output_throughput_se). A collapse must be a drop larger
than the noise; a gain counts only when it clears the threshold by more than the noise (a
step whose gain is lost in the noise has not shown that more load buys more tokens). A
step that was not steady is never judged by them (the runner held it as long as it could;
it says why); the error and latency rules still apply to it.

- slo:         the step misses its SLO (`slo_rule`: too few of its own requests met the
               per-request bounds, or a p99 bound is exceeded).

When several fire on the same step, one is reported, in this order of precedence:
server_gone, errors, latency, slo, collapse, plateau (the most severe first; a collapse is also
always a plateau).

**Last good**: the highest-output-throughput step, among the history and the current step,
on which no rule fired (each step judged against the steps before it). The step that fired
is therefore never the last good one, whatever the rule; for a plateau this makes it the best
step before the plateau. Ties go to the lower concurrency. None when no step qualifies.

**SLO attainment** (`judge_request`): the share of the step's own requests meeting every
per-request bound, judged on what they did in the step's window: TTFT (completed when the
first token comes after the close: it waited behind the step's queue), TPOT and the
request's own p99 ITL from its chunks inside the window, E2E (a bound when it ended after
the close: past the E2E limit it is a miss, below it the window shows none). A request
censored past a TTFT or E2E bound is a miss; a failed one misses every bound; one that did
nothing inside the window a bound reads (queued through it, with only a TPOT bound set) is
not judged.

`history` holds the ramp's earlier measured steps in order (not the current one; leave out
the C=1 probe).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from .. import fmt
from ..constants import DEFAULT_PLATEAU_GAIN, NOISE_SIGMAS, STEADY_MAX_SE, STEADY_TOLERANCE
from ..measure.slo import LABELS, PER_REQUEST, Slo, ms_text
from ..measure.step_result import BreakResult, StepResult

__all__ = ["PRECEDENCE", "Knee", "StopRules", "gains_over", "judge_request", "knee", "last_good", "load_key",
           "noise_margin", "one_per_load", "session_knee", "slo_rule", "steadiness", "within_gain"]


@dataclass(frozen=True)
class StopSpec:
    """Stop rules; None = that rule is off. "Server gone" is always on (below)."""

    plateau_gain: float | None = None  # fire when tok/s < best earlier x (1 + gain)
    p99_ttft_ms: float | None = None  # fire when the step's p99 TTFT is over this
    p99_itl_ms: float | None = None  # fire when the step's p99 ITL is over this
    error_rate: float | None = None  # fire when failed / (completed + failed) is over this
    collapse: float | None = None  # fire when tok/s < best earlier x (1 - collapse)
    # requests in flight and no token for this long ends the ramp as "stalled" (None: STALL_S;
    # always on, like server gone; engine/drive/stall.py watches it while a step runs)
    stall_s: float | None = None



PRECEDENCE = ("server_gone", "errors", "latency", "slo", "collapse", "plateau")


def _rate(x: float) -> str:
    """tok/s as a person reads it: 1985, 83.4, 4.27."""
    return fmt.rate(x)


def _pct(frac: float) -> str:
    return f"{frac * 100:g}"


def _ms(x: float) -> str:
    return fmt.ms(x, unit=False)


def _best(steps: Sequence[StepResult]) -> StepResult | None:
    """Highest output_throughput; ties go to the lower concurrency."""
    best = None
    for s in steps:
        if best is None or s.output_throughput > best.output_throughput or (
            s.output_throughput == best.output_throughput and s.concurrency < best.concurrency
        ):
            best = s
    return best


class StopRules:
    """The [stop] rules of a preset, applied step by step."""

    def __init__(self, spec: StopSpec | None = None, slo: Slo | None = None) -> None:
        self.spec = spec if spec is not None else StopSpec()
        self.slo = slo if slo is not None and slo.any else None

    # -- the rules, one at a time; each returns a detail line or None

    def _errors(self, cur: StepResult) -> str | None:
        limit = self.spec.error_rate
        total = cur.completed + cur.failed
        if limit is None or total <= 0:
            return None
        rate = cur.failed / total
        if rate <= limit:
            return None
        return (
            f"errors: {cur.failed} of {total} requests failed ({rate * 100:.1f} %) "
            f"at {cur.load}, limit {_pct(limit)} %"
        )

    def _latency(self, cur: StepResult) -> str | None:
        parts = []
        for label, value, limit in (
            ("TTFT", cur.p99_ttft_ms, self.spec.p99_ttft_ms),
            ("ITL", cur.p99_itl_ms, self.spec.p99_itl_ms),
        ):
            if limit is not None and value is not None and value > limit:
                parts.append(f"p99 {label} {_ms(value)} ms over limit {_ms(limit)} ms")
        if not parts:
            return None
        return f"latency: {', '.join(parts)} at {cur.load}"

    def _collapse(self, history: Sequence[StepResult], cur: StepResult) -> str | None:
        frac = self.spec.collapse
        best = _best(history)
        if frac is None or best is None or not cur.steady:
            return None
        if not cur.output_throughput + noise_margin(cur, best) < best.output_throughput * (1 - frac):
            return None
        change = _change(cur.output_throughput, best.output_throughput)
        return (
            f"collapse: {_rate(cur.output_throughput)} tok/s at {cur.load} is "
            f"{change} from best {_rate(best.output_throughput)} tok/s ({best.load}), "
            f"threshold -{_pct(frac)} %"
        )

    def _plateau(self, history: Sequence[StepResult], cur: StepResult) -> str | None:
        gain = self.spec.plateau_gain
        best = _best(history)
        if gain is None or best is None or not cur.steady:
            return None
        if not cur.output_throughput - noise_margin(cur, best) < best.output_throughput * (1 + gain):
            return None
        change = _change(cur.output_throughput, best.output_throughput)
        return (
            f"plateau: {_rate(cur.output_throughput)} tok/s at {cur.load} is "
            f"{change} over best {_rate(best.output_throughput)} tok/s ({best.load}), "
            f"threshold +{_pct(gain)} %"
        )

    def fired(self, history: Sequence[StepResult], current: StepResult) -> list[tuple[str, str]]:
        """Every rule that fires on `current` (server_gone aside), as (reason, detail),
        in order of precedence."""
        out = []
        for reason, detail in (
            ("errors", self._errors(current)),
            ("latency", self._latency(current)),
            ("slo", slo_rule(self.slo, current) if self.slo is not None else None),
            ("collapse", self._collapse(history, current)),
            ("plateau", self._plateau(history, current)),
        ):
            if detail is not None:
                out.append((reason, detail))
        return out

    def good_steps(self, steps: Sequence[StepResult]) -> list[StepResult]:
        """The steps on which no rule fired, each judged against the steps before it."""
        steps = list(steps)
        return [s for i, s in enumerate(steps) if not self.fired(steps[:i], s)]

    def last_good(self, steps: Sequence[StepResult]) -> StepResult | None:
        """The highest-throughput step on which no rule fired (ties: lower concurrency)."""
        return _best(self.good_steps(steps))

    def evaluate(
        self,
        history: Sequence[StepResult],
        current: StepResult | None,
        server_gone: bool = False,
    ) -> BreakResult | None:
        """A BreakResult when a rule fires on `current`, else None.

        `current` may be None only with server_gone (the server went before a step
        finished); the break is then reported at the last step's concurrency (0 if none).
        """
        history = list(history)
        if server_gone:
            if current is None:
                conc = history[-1].concurrency if history else 0
                steps = history
                where = history[-1].load if history else "the start"
            else:
                conc = current.concurrency
                steps = history  # the step the server died in is not good
                where = current.load
            good = self.last_good(steps)
            last = current if current is not None else (history[-1] if history else None)
            return BreakResult(
                reason="server_gone",
                concurrency=conc,
                last_good_concurrency=good.concurrency if good else None,
                detail=f"server_gone: the target stopped answering during {where}",
                rate=last.request_rate if last is not None else None,
                last_good_rate=good.request_rate if good else None,
            )
        if current is None:
            raise ValueError("evaluate: current step is None (allowed only with server_gone)")
        fired = self.fired(history, current)
        if not fired:
            return None
        reason, detail = fired[0]
        if len(fired) > 1:
            detail += " (also: " + ", ".join(r for r, _ in fired[1:]) + ")"
        good = self.last_good(history + [current])
        return BreakResult(
            reason=reason,
            concurrency=current.concurrency,
            last_good_concurrency=good.concurrency if good else None,
            detail=detail,
            rate=current.request_rate,
            last_good_rate=good.request_rate if good else None,
        )


def noise_margin(cur: StepResult, best: StepResult) -> float:
    """NOISE_SIGMAS standard errors of the difference of two steps' mean tok/s (0 when
    neither step measured its spread)."""
    a = cur.output_throughput_se or 0.0
    b = best.output_throughput_se or 0.0
    return NOISE_SIGMAS * math.sqrt(a * a + b * b)


def _change(cur: float, best: float) -> str:
    if best <= 0:
        return "+0.0 %" if cur <= 0 else "+inf %"
    return f"{(cur / best - 1) * 100:+.1f} %"


def last_good(
    history: Sequence[StepResult], rules: StopRules | StopSpec | None = None
) -> StepResult | None:
    """The highest-throughput step of `history` on which no rule of `rules` fired (each
    step judged against the ones before it). With no rules: simply the highest-throughput
    step. Ties go to the lower concurrency. None for an empty history."""
    if not isinstance(rules, StopRules):
        rules = StopRules(rules)
    return rules.last_good(history)


# -- steadiness ------------------------------------------------------------------------------

def steadiness(per_second: Sequence[float], min_s: int) -> str | None:
    """None when the window's per-second output tok/s has settled (see the module docstring),
    else why not, in one line ("not steady: ...")."""
    n = len(per_second)
    need = max(2, min_s)
    if n < need:
        return f"not steady: {n} s measured, needs {need}"
    mean = sum(per_second) / n
    if mean <= 0:
        return "not steady: no output token in its window"
    se = math.sqrt(sum((x - mean) ** 2 for x in per_second) / (n - 1) / n)
    if se > STEADY_MAX_SE * mean:
        return f"not steady: tok/s {mean:.0f} ± {se / mean * 100:.0f} % (standard error over {n} s; needs ≤ {STEADY_MAX_SE * 100:g} %)"
    h = n // 2
    a, b = sum(per_second[:h]) / h, sum(per_second[h : 2 * h]) / h
    drift = abs(a - b) / max(a, b)
    if drift > STEADY_TOLERANCE:
        return f"not steady: tok/s moved {drift * 100:.0f} % between the window's halves ({a:.0f} -> {b:.0f}; needs ≤ {STEADY_TOLERANCE * 100:g} %)"
    return None


# -- the knee --------------------------------------------------------------------------------

KINDS = ("C", "R", "x")  # concurrency, offered request rate (req/s), trace speed


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


def one_per_load(steps: Iterable[StepResult]) -> dict[tuple[str, float], StepResult]:
    """One step per load, in increasing load (concurrencies, then rates, then speeds). A load
    measured more than once is stood for by its step with the most output tok/s (the later
    on a tie). The probe and short periods (StepResult.short) are no point of the curve."""
    out: dict[tuple[str, float], StepResult] = {}
    for s in steps:
        if s.phase == "probe" or s.short:
            continue
        key = load_key(s)
        old = out.get(key)
        if old is None or s.output_throughput >= old.output_throughput:
            out[key] = s
    return dict(sorted(out.items(), key=lambda kv: (KINDS.index(kv[0][0]), kv[0][1])))


def within_gain(cur: StepResult, best: StepResult, gain: float) -> bool:
    """`cur` gives within `gain` of `best`'s tok/s (or more), the noise counted in its favour."""
    return cur.output_throughput + noise_margin(cur, best) >= (1 - gain) * best.output_throughput


def gains_over(cur: StepResult, best: StepResult, gain: float) -> bool:
    """`cur` gives more than `gain` over `best`'s tok/s, beyond the noise of the two."""
    return cur.output_throughput - noise_margin(cur, best) >= best.output_throughput * (1 + gain)


@dataclass(frozen=True)
class Knee:
    """The knee of one curve (see the module docstring)."""

    kind: str  # "C", "R" (req/s) or "x" (trace speed)
    value: float | None  # the knee's load; None: no knee (reason says why)
    reason: str
    max_throughput: float | None = None  # the load that gave the most output tok/s

    @property
    def label(self) -> str:
        return "none" if self.value is None else load_label((self.kind, self.value))

    def describe(self) -> str:
        """"knee C=128 (within 5 % of ...); max throughput C=192" or "no knee: ..."."""
        top = "" if self.max_throughput is None else f"; max throughput {load_label((self.kind, self.max_throughput))}"
        if self.value is None:
            return f"no knee: {self.reason}{top}"
        return f"knee {self.label} ({self.reason}){top}"

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
    best = max(pts, key=lambda s: (s.output_throughput, -pos(s)))
    if len(pts) == 1:
        if cut is not None:  # the one load that held the rules is the most the server gives within them
            return Knee(kind, pos(best), f"the only load measured below the break; {cut}", pos(best))
        return Knee(kind, None, f"one load measured ({name(pts[0])}): nothing to compare", pos(best))
    top, below = pts[-1], max(pts[:-1], key=lambda s: s.output_throughput)
    if cut is None and gains_over(top, below, gain):
        return Knee(kind, None, f"still rising at max {name(top)}", pos(best))
    first = next(s for s in pts if within_gain(s, best, gain))
    # a knee that is within the gain only once the noise of the two is counted says so
    noisy = "" if first.output_throughput >= (1 - gain) * best.output_throughput else \
        f", counting the noise of both (±{noise_margin(first, best):.1f} tok/s)"
    where = "" if cut is None else f"; {cut}"
    return Knee(kind, pos(first), f"within {gain * 100:g} % of the most output tok/s ({best.output_throughput:.1f} at {name(best)}){noisy}{where}", pos(best))


def session_knee(steps: Iterable[StepResult], plateau_gain: float | None = None) -> Knee:
    """A session's knee: over one step per load (one_per_load) of its main kind (the kind it
    measured most loads of; C on a tie)."""
    per = one_per_load(steps)
    counts = {k: sum(1 for key in per if key[0] == k) for k in KINDS}
    kind = max(KINDS, key=lambda k: (counts[k], -KINDS.index(k)))
    return knee([s for key, s in per.items() if key[0] == kind], plateau_gain)


def summary_knee(steps: Iterable[StepResult], search: dict | None = None, plateau_gain: float | None = None) -> dict:
    """summary.json's knee fields for a session: a finished knee search's own answer (its
    points, its levels), else the knee over the session's steps (session_knee). A cancelled
    search answers nothing: the steps do."""
    if search is not None and not search.get("cancelled") and "knee_reason" in search:
        return {k: search.get(k) for k in SUMMARY_KNEE_KEYS if k in search}
    return session_knee(steps, plateau_gain).summary_fields()


SUMMARY_KNEE_KEYS = ("knee_concurrency", "knee_reason", "max_throughput_concurrency", "knee_rate", "max_throughput_rate",
                     "knee_speed", "max_throughput_speed")


def knee_from_summary(d: dict[str, Any]) -> Knee | None:
    """The knee summary.json recorded (a session written before the top-level fields: its
    finished knee search's answer); None when it recorded none."""
    if not isinstance(d, dict):
        return None
    if "knee_reason" not in d:
        search = d.get("search")
        if isinstance(search, dict) and "knee_reason" in search and not (search.get("cancelled") or search.get("in_progress")):
            return knee_from_summary({k: search.get(k) for k in SUMMARY_KNEE_KEYS if k in search})
        return None
    for kind, value, top in (("R", "knee_rate", "max_throughput_rate"), ("x", "knee_speed", "max_throughput_speed")):
        if d.get(value) is not None or d.get(top) is not None:
            return Knee(kind, d.get(value), str(d.get("knee_reason") or ""), d.get(top))
    return Knee("C", d.get("knee_concurrency"), str(d.get("knee_reason") or ""), d.get("max_throughput_concurrency"))


# -- SLO -------------------------------------------------------------------------------------

def slo_rule(slo: Slo, step: StepResult) -> str | None:
    """A one-line reason when the step misses the SLO, else None: too few of its own
    requests met the per-request bounds (slo.attainment), or a p99 bound is exceeded."""
    parts = []
    att = step.slo_attainment
    if slo.per_request and att is not None and att < slo.attainment:
        parts.append(f"{att * 100:.0f} % of requests met {slo.describe_requests()} (needs {slo.attainment * 100:g} %)")
    for k, field_ in (("ttft_p99_ms", "p99_ttft_ms"), ("itl_p99_ms", "p99_itl_ms"), ("e2e_p99_ms", "p99_e2e_latency_ms")):
        limit = getattr(slo, k)
        v = getattr(step, field_)
        if limit is not None and v is not None and v > limit:
            parts.append(f"{LABELS[k]} {ms_text(v)} over {ms_text(limit)}")
    if not parts:
        return None
    return f"slo: {'; '.join(parts)} at {step.load}"


def meets_slo(slo: Slo, step: StepResult) -> bool:
    """The step met the SLO: no bound missed, and with per-request bounds an attainment was
    measured (a step none of whose own requests was judged proves nothing)."""
    return slo_rule(slo, step) is None and (not slo.per_request or step.slo_attainment is not None)


def judge_request(slo: Slo, ttft: float | None, tpot: float | None, itl_p99: float | None,
                  e2e: float | None, e2e_bound: bool = False) -> bool | None:
    """Does one own request meet every per-request bound, on what it did in its step's window
    (seconds; see the module docstring)? True, False, or None when the window shows nothing
    to judge it by (it decoded nothing inside the window and no TTFT or E2E bound is set: it
    counts in no attainment). `ttft` None: it never answered (a miss when a TTFT bound is
    set); `e2e_bound`: it ended after the close and `e2e` is its age then."""
    judged = False
    for k in PER_REQUEST:
        limit = getattr(slo, k)
        if limit is None:
            continue
        v = {"ttft_ms": ttft, "tpot_ms": tpot, "itl_ms": itl_p99, "e2e_ms": e2e}[k]
        if v is None:
            if k == "ttft_ms" or (k == "e2e_ms" and not e2e_bound):
                return False
            continue  # no decoding inside the window: nothing to miss, nothing met
        if v * 1000.0 > limit:
            return False
        if not (k == "e2e_ms" and e2e_bound):  # a bound under the limit proves no E2E
            judged = True
    return True if judged else None


class StepVerdicts:
    """The verdicts a step asks while it measures (engine/measure/own_requests.py StepJudge):
    the engine hands every step book this one, so measure/ reads them without importing rules/."""

    steadiness = staticmethod(steadiness)
    request = staticmethod(judge_request)


STEP_JUDGE = StepVerdicts()
