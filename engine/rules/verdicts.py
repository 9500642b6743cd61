"""Verdicts: the knee, steadiness, the stop rules, last good and the step's SLO, one
definition each (DESIGN.md "Verdicts"; docs: "Finding the limit"). Everything that names a
verdict calls here: the preset runner and the knee search, summary.json, the report, the
HTML page, the gate, the sweep, the TUI and the control API. The knee, its points and which
steps decide live in engine/rules/knee.py; every name of it is given here too.

**Knee** (`knee`, `session_knee`, `session_knees`, `summary_knee`: engine/rules/knee.py): the
smallest load whose output tok/s is within `plateau_gain` (default 5 %) of the most any load
gave, noise counted in its favour (`within_gain`); "no knee: still rising at max" when the top
load still gained more than `plateau_gain` over the best below it, beyond the noise
(`gains_over`). Only steps that decide count (`decides`: produced output tokens, steady, noise
known); one step per load (`one_per_load`, `stand_for`: its latest step that decides); one knee
per workload; an unfinished knee search gives none.

**Steady** (`steadiness`): the step's per-second output tok/s in its window, silent seconds
included, has settled: at least `min_s` whole seconds, its standard error within
STEADY_MAX_SE of its mean, and its two halves within STEADY_TOLERANCE of each other (no
drift). It reads tokens as they arrive, so it exists seconds after warm-up whether or not
any request finished: 2048-token outputs that outlive every step are judged like short
ones. A step that is not steady says why (StepResult.unjudged).

**Stop rules** (`StopRules`; each off unless its [stop] key is set, except server_gone
which is always on); "best earlier" is the highest output_throughput among the steps
before the current one that decide (`decides`: an unsteady burst is no yardstick):

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
step that does not decide (not steady, its noise unknown, no output token) is never judged
by them (the runner held it as long as it could; it says why); the error and latency rules
still apply to it.

- slo:         the step misses its SLO (`slo_rule`: too few of its own requests met the
               per-request bounds, or a p99 bound is exceeded).

When several fire on the same step, one is reported, in this order of precedence:
server_gone, errors, latency, slo, collapse, plateau (the most severe first; a collapse is also
always a plateau).

**Last good**: the highest-output-throughput step, among the history and the current step,
whose own figures fired no rule (each step judged against the steps before it), that decides
(steady, noise known, output tokens) and did not fail every request it finished. The step that
fired is therefore never the last good one, whatever the rule; for a plateau this makes it the
best step before the plateau. Ties go to the lower concurrency. None when no step qualifies.

**SLO attainment** (`judge_request`): the share of the step's own requests meeting every
per-request bound, judged on what they did in the step's window: TTFT (completed when the
first token comes after the close: it waited behind the step's queue), TPOT and the
request's own p99 ITL from its chunks inside the window, E2E (a bound when it ended after
the close: past the E2E limit it is a miss, below it the window shows none). A request
censored past a TTFT or E2E bound is a miss; a failed one misses every bound; one that did
nothing inside the window a bound reads (queued through it, with only a TPOT bound set) is
not judged. A value at its bound meets it (`over`, engine/measure/slo.py: the one comparison,
goodput's too). Attainment is compared unrounded.

**Meeting the SLO** (`slo_verdict`, `meets_slo`): a step passes when no bound is missed, an
attainment was measured (with per-request bounds) and every p99 bound's figure was measured
and is no lower bound under its limit; "unknown" when one of those is missing, "fail" when a
bound is missed. **The largest load meeting the SLO** (`max_slo_load`; `recorded_max_slo`
for a session read back): the largest load that passed, below the first one that did not
(failed or not proven). One judge for the search, the gate, the HTML page and the sweep.

`history` holds the ramp's earlier measured steps in order (not the current one; leave out
the C=1 probe).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

from .. import fmt
from ..constants import STEADY_MAX_SE, STEADY_TOLERANCE
from ..measure.slo import LABELS, PER_REQUEST, Slo, ms_text, over
from ..measure.step_result import BreakResult, StepResult
from .knee import (
    KINDS,
    SUMMARY_KNEE_KEYS,
    Knee,
    by_workload,
    decides,
    gains_over,
    knee,
    knee_from_summary,
    knees_from_summary,
    load_key,
    load_label,
    main_kind,
    noise_known,
    noise_margin,
    one_per_load,
    session_knee,
    session_knees,
    stand_for,
    summary_knee,
    unfinished_search,
    within_gain,
)

__all__ = ["KINDS", "PRECEDENCE", "SUMMARY_KNEE_KEYS", "Knee", "StopRules", "by_workload", "decides", "gains_over",
           "judge_request", "knee", "knee_from_summary", "knees_from_summary", "last_good", "load_key", "load_label",
           "main_kind", "max_slo_load", "meets_slo", "noise_known", "noise_margin", "one_per_load", "recorded_max_slo",
           "session_knee", "session_knees", "slo_rule", "slo_verdict", "stand_for", "steadiness", "summary_knee",
           "unfinished_search", "within_gain"]


@dataclass(frozen=True)
class StopSpec:
    """Stop rules; None = that rule is off. "Server gone" is always on (below)."""

    plateau_gain: float | None = None  # fire when tok/s < best earlier x (1 + gain)
    p99_ttft_ms: float | None = None  # fire when the step's p99 TTFT is over this
    p99_itl_ms: float | None = None  # fire when the step's p99 ITL is over this
    error_rate: float | None = None  # fire when failed / (completed + failed) is over this
    collapse: float | None = None  # fire when tok/s < best earlier x (1 - collapse)
    # requests in flight and no token for this long ends the ramp as "stalled" (None: STALL_S;
    # always on, like server gone; engine/run/run_watch.py watches it while a step runs)
    stall_s: float | None = None



PRECEDENCE = ("server_gone", "errors", "latency", "slo", "collapse", "plateau")


def _rate(x: float) -> str:
    """tok/s as a person reads it: 1985, 83.4, 4.27."""
    return fmt.rate(x)


def _pct(frac: float) -> str:
    return f"{frac * 100:g}"


def _best(steps: Sequence[StepResult]) -> StepResult | None:
    """Highest output_throughput among the steps that decide; ties go to the lower concurrency."""
    best = None
    for s in steps:
        if not decides(s):
            continue
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
                parts.append(f"p99 {label} {fmt.ms(value, unit=False)} ms over limit {fmt.ms(limit, unit=False)} ms")
        if not parts:
            return None
        return f"latency: {', '.join(parts)} at {cur.load}"

    def _collapse(self, history: Sequence[StepResult], cur: StepResult) -> str | None:
        frac = self.spec.collapse
        best = _best(history)
        if frac is None or best is None or not decides(cur):
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
        if gain is None or best is None or not decides(cur):
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
        """The steps that may be last good: each decides (steady, noise known, output tokens),
        did not fail every request it finished, and fired no rule on its own figures (judged
        against the steps before it)."""
        steps = list(steps)
        return [s for i, s in enumerate(steps)
                if decides(s) and not _all_failed(s) and not self.fired(steps[:i], s)]

    def last_good(self, steps: Sequence[StepResult]) -> StepResult | None:
        """The highest-throughput good step (good_steps; ties: lower concurrency)."""
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


def _all_failed(s: StepResult) -> bool:
    """Every request the step finished failed."""
    return s.failed > 0 and s.completed == 0


def _change(cur: float, best: float) -> str:
    if best <= 0:
        return "+0.0 %" if cur <= 0 else "+inf %"
    return f"{(cur / best - 1) * 100:+.1f} %"


def last_good(
    history: Sequence[StepResult], rules: StopRules | StopSpec | None = None
) -> StepResult | None:
    """The highest-throughput good step of `history` (StopRules.good_steps: it decides, did not
    fail every request, and no rule of `rules` fired on it, judged against the ones before it).
    With no rules: the highest-throughput step that decides and did not fail everything. Ties
    go to the lower concurrency. None when none qualifies."""
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


# -- SLO -------------------------------------------------------------------------------------

STEP_BOUNDS = (("ttft_p99_ms", "p99_ttft_ms"), ("itl_p99_ms", "p99_itl_ms"), ("e2e_p99_ms", "p99_e2e_latency_ms"))


def slo_rule(slo: Slo, step: StepResult) -> str | None:
    """A one-line reason when the step misses the SLO, else None: too few of its own
    requests met the per-request bounds (slo.attainment, compared unrounded), or a p99 bound
    is exceeded (a lower bound over it too)."""
    parts = []
    att = step.slo_attainment
    if slo.per_request and att is not None and att < slo.attainment:
        parts.append(f"{math.floor(att * 1000 + 1e-9) / 10:g} % of requests met {slo.describe_requests()} (needs {slo.attainment * 100:g} %)")
    for k, field_ in STEP_BOUNDS:
        limit = getattr(slo, k)
        v = getattr(step, field_)
        if limit is not None and v is not None and v > limit:
            parts.append(f"{LABELS[k]} {'≥' if step.bound(field_) else ''}{ms_text(v)} over {ms_text(limit)}")
    if not parts:
        return None
    return f"slo: {'; '.join(parts)} at {step.load}"


def slo_verdict(slo: Slo, step: StepResult) -> tuple[str, str]:
    """("pass" | "fail" | "unknown", why): "fail" when a bound is missed (slo_rule), "unknown"
    when nothing proves it met (with per-request bounds no attainment measured; a p99 bound
    whose figure was not measured, or is a lower bound under its limit), else "pass"."""
    miss = slo_rule(slo, step)
    if miss is not None:
        return "fail", miss.removeprefix("slo: ")
    unknown = []
    if slo.per_request and step.slo_attainment is None:
        unknown.append("no own request judged")
    for k, field_ in STEP_BOUNDS:
        if getattr(slo, k) is None:
            continue
        if getattr(step, field_) is None:
            unknown.append(f"{LABELS[k]} not measured")
        elif step.bound(field_):
            unknown.append(f"{LABELS[k]} ≥{ms_text(getattr(step, field_))} (a lower bound)")
    if unknown:
        return "unknown", "; ".join(unknown)
    return "pass", ""


def meets_slo(slo: Slo, step: StepResult) -> bool:
    """The step met the SLO (slo_verdict "pass"): no bound missed, and what the bounds read was
    measured (a step none of whose own requests was judged proves nothing)."""
    return slo_verdict(slo, step)[0] == "pass"


def max_slo_load(steps: Iterable[StepResult], slo: Slo, kind: str | None = None) -> tuple[str, float] | None:
    """The largest load meeting the SLO: over one step per load (one_per_load) of the last
    workload, of `kind` (the main kind by default), the largest that passed (slo_verdict) below
    the first that did not (failed, or not proven); a load that passes above it is not believed
    (the knee search's SLO bracket, engine/rules/knee_search.py, is the same rule). None: none did."""
    groups = list(by_workload(steps).values())
    per = one_per_load(groups[-1] if groups else [])
    kind = kind or main_kind(per)
    best = None
    for key, st in per.items():
        if key[0] != kind:
            continue
        if slo_verdict(slo, st)[0] != "pass":
            break
        best = key
    return best


def recorded_max_slo(summary: dict, steps: Sequence[StepResult], kind: str | None = None) -> tuple[float | None, str]:
    """A session's largest load meeting the SLO, read back: (value or None, how, or why
    none). A finished knee search's own answer where it gave one, else max_slo_load over the
    steps with the SLO summary.json recorded."""
    search = summary.get("search") if isinstance(summary.get("search"), dict) else None
    slo_d = summary.get("slo")
    if not isinstance(slo_d, dict) or not slo_d:
        return None, "no SLO recorded (give --slo or [slo])"
    if search is not None and "max_slo_concurrency" in search and unfinished_search(search) is None:
        rate = kind == "R" if kind is not None else (search.get("max_slo_rate") is not None or bool(search.get("rates")))
        v = search.get("max_slo_rate") if rate else search.get("max_slo_concurrency")
        return (None, "no load met the SLO") if v is None else (float(v), "knee search")
    try:
        slo = Slo(**slo_d)
    except TypeError:
        return None, "summary.json's slo is not readable"
    best = max_slo_load(steps, slo, kind)
    return (None, "no step met the SLO") if best is None else (best[1], "largest load whose step met the recorded SLO")


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
        if over(v, limit):
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
