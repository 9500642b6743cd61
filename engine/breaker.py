"""Stop rules: decide, after each finished step of a ramp, whether the server has broken.

Rules (each off unless its [stop] key is set, except server_gone which is always on);
"best earlier" is the highest output_throughput among the steps before the current one:

- server_gone: the target stopped answering (connection refused, health failing).
- errors:      failed / (completed + failed) of the step > error_rate.
               A step with no finished request has no error rate and does not fire.
- latency:     the step's p99_ttft_ms > p99_ttft_ms, or its p99_itl_ms > p99_itl_ms.
               A step without that percentile (no data) does not fire.
- collapse:    output_throughput + margin < best earlier x (1 - collapse). Needs an earlier step.
- plateau:     output_throughput - margin < best earlier x (1 + plateau_gain). Needs an earlier step.

`margin` is the noise of the two measurements: NOISE_SIGMAS standard errors of their
per-second throughput (StepResult.output_throughput_se). A collapse must be a drop larger
than the noise; a gain counts only when it clears the threshold by more than the noise (a
step whose gain is lost in the noise has not shown that more load buys more tokens). A step that was not steady is never judged by them (the runner held it as
long as it could); the error and latency rules still apply to it.

- slo:         the step misses its SLO (engine/slo.py: too few of its requests met the
               per-request bounds, or a p99 bound is exceeded).

When several fire on the same step, one is reported, in this order of precedence:
server_gone, errors, latency, slo, collapse, plateau (the most severe first; a collapse is also
always a plateau).

last_good_concurrency is the concurrency of the highest-output-throughput step, among the
history and the current step, on which no rule fired (each step judged against the steps
before it). The step that fired is therefore never the last good one, whatever the rule;
for a plateau this makes it the best step before the plateau, i.e. the knee. Ties go to
the lower concurrency. None when no step qualifies.

`history` holds the ramp's earlier measured steps in order (not the current one; leave out
the C=1 probe).
"""

from __future__ import annotations

from typing import Sequence

import math

from . import fmt
from .constants import NOISE_SIGMAS
from .preset import StopSpec
from .slo import Slo
from .stepresult import BreakResult, StepResult

__all__ = ["PRECEDENCE", "StopRules", "last_good"]

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
            ("slo", self.slo.judge(current) if self.slo is not None else None),
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
