"""What a gate reads of a session (engine/report/gate.py): `GateSession` (its steps by load, its
knee, largest load meeting the SLO and errors, from summary.json and the step rows) and
`Measured`, one figure as measured (a value, or why there is none; a lower bound or not).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ..fmt import BOUND
from ..measure.step_result import StepResult
from ..rules.gate_conditions import Condition, Figure
from ..rules.verdicts import recorded_max_slo


@dataclass(frozen=True)
class Measured:
    """One figure as measured: `value` (None: not measured), a lower bound or not, where."""

    value: float | None
    bound: bool = False
    where: str = ""  # "C=64", "at C=128", "(still rising at max C=64)"
    kind: str = "C"  # for loads: "C" or "R"
    note: str = ""  # why there is no value
    rate: bool = False  # errors: a share, not a count

    def show(self, fig: Figure) -> str:
        if self.value is None:
            return self.note or "not measured"
        if self.rate:
            return f"{self.value * 100:.2f} %"
        if fig.unit == "load" and self.bound:  # C≥64: the knee lies at or past the top load
            return fmt_value(fig, self.value, self.kind).replace("=", BOUND, 1)
        return (BOUND if self.bound else "") + fmt_value(fig, self.value, self.kind)


def fmt_value(fig: Figure, v: float, kind: str = "C") -> str:
    if fig.unit == "load":
        return f"R={v:g}/s" if kind == "R" else f"C={v:g}"
    if fig.unit == "ms":
        return f"{v / 1000:.3g} s" if v >= 1000 else f"{v:.3g} ms"
    if fig.unit == "frac":
        return f"{v * 100:.1f} %"
    if fig.unit in ("tok/s", "req/s"):
        return f"{v:.1f} {fig.unit}"
    return f"{v:g}"


@dataclass
class GateSession:
    """What a gate reads of a session: its steps by load, break, and summary.json's search and SLO."""

    label: str
    steps: tuple[StepResult, ...]
    summary: dict[str, Any]
    session: Any = None  # the compare.SessionSummary

    @classmethod
    def load(cls, session_dir: str | os.PathLike) -> "GateSession":
        """A session directory (SessionError, one line, when it is not one)."""
        from .compare import load_session
        from .session_text import load_summary

        s = load_session(session_dir)
        try:
            summ = load_summary(session_dir)
        except Exception:  # noqa: BLE001 - load_session read it already
            summ = {}
        return cls(s.label, tuple(s.steps), summ if isinstance(summ, dict) else {}, s)

    def by_load(self) -> dict[tuple[str, float], StepResult]:
        out = {}
        for k, s in self.session.by_load().items():
            out[(k.kind, k.value)] = s
        return out

    def kind(self) -> str:
        return "R" if self.session.kind == "R" else "C"

    def loads(self, kind: str) -> list[float]:
        return sorted(v for k, v in self.by_load() if k == kind)

    # the session figures
    def knee(self) -> Measured:
        """The session's knee (engine/rules/verdicts.py, as summary.json recorded it): a load, a
        lower bound when the curve was still rising at its top load that decided (its max
        throughput), or why there is none (no step produced output tokens, none steady, an
        unfinished search: such a knee proves no `knee>=N`)."""
        k = self.session.knee
        kind = "R" if k.kind == "R" else "C"
        if k.value is not None:
            return Measured(float(k.value), where=f"({k.reason})", kind=kind)
        if k.reason.startswith("still rising"):
            top = k.max_throughput
            if top is None:  # a session written before: its top load
                loads = self.loads(kind)
                top = loads[-1] if loads else None
            if top is not None:
                return Measured(float(top), bound=True, where=f"({k.reason})", kind=kind)
        return Measured(None, note=f"no knee ({k.reason})")

    def max_slo(self) -> Measured:
        """The largest load meeting the SLO (engine/rules/verdicts.py recorded_max_slo, the one
        judge the search, the HTML page and the sweep use)."""
        kind = self.kind()
        v, how = recorded_max_slo(self.summary, self.steps, kind)
        if v is None:
            return Measured(None, note=how)
        return Measured(float(v), where="(knee search)" if how == "knee search" else "", kind=kind)

    def errors(self, rate: bool, step: StepResult | None = None) -> Measured:
        steps = [step] if step is not None else list(self.steps)
        failed = sum(s.failed for s in steps)
        total = failed + sum(s.completed for s in steps)
        if not rate:
            return Measured(float(failed), where=f"({failed} of {total} requests)")
        if not total:
            return Measured(None, note="no request ended")
        return Measured(failed / total, where=f"({failed} of {total} requests)", rate=True)

    def figure(self, cond: Condition, at: tuple[str, float] | None = None) -> Measured:
        fig = cond.fig
        if fig.name == "knee":
            return self.knee()
        if fig.name == "max_slo":
            return self.max_slo()
        at = at or cond.at
        by = self.by_load()
        field = fig.field  # None: errors (knee and max_slo returned above)
        if at is not None:
            st = by.get(at)
            if st is None:
                have = ", ".join(Load_label(k, v) for k, v in by) or "none"
                return Measured(None, note=f"no step at {Load_label(*at)} (measured: {have})")
            if fig.name == "errors" or field is None:
                return self.errors(cond.rate, st)
            v = getattr(st, field)
            if v is None:
                return Measured(None, note=f"no {fig.what} at {Load_label(*at)}")
            return Measured(float(v), st.bound(field), where=f"at {Load_label(*at)}")
        if fig.name == "errors" or field is None:
            return self.errors(cond.rate)
        vals = [((k, v), s, getattr(s, field)) for (k, v), s in by.items() if getattr(s, field) is not None]
        if not vals:
            return Measured(None, note=f"no step has {fig.what}")
        # most for throughputs, the worst for latencies (highest) and attainment (lowest)
        pick = max if fig.name in ("tok_s", "goodput", "req_s") or fig.unit == "ms" else min
        load, st, v = pick(vals, key=lambda x: x[2])
        bound = fig.unit == "ms" and any(s.bound(field) for _, s, _ in vals)
        return Measured(float(v), bound, where=f"at {Load_label(*load)}")


def Load_label(kind: str, v: float) -> str:  # noqa: N802 - reads like compare.Load.label
    return f"R={v:g}/s" if kind == "R" else f"x{v:g}" if kind == "x" else f"C={v:g}"
