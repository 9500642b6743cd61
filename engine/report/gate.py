"""Pass/fail gates over a session's results, for CI (docs/comparing.md#gates-for-ci).

A gate is a list of conditions, written `FIGURE[@LOAD] OP VALUE` and separated by commas:

    knee>=64                    the session's knee (a concurrency, or req/s over rates)
    max_slo>=32                 the largest load whose step met the SLO
    tok_s@C=64>=2500            output tok/s of the step at C=64 (R=8/s: a rate step)
    ttft_p99@C=64<=2s           p99 TTFT there (durations: 2s, 500ms; a bare number is ms)
    errors<=1%                  failed requests over the whole session (a bare number: a count)
    attainment@C=32>=95%        the step's SLO attainment

Without `@LOAD` a step figure is the session's: the most over its steps for tok_s, goodput
and req_s, the worst for latencies (the highest) and attainment (the lowest), naming the step.

A signed VALUE is a change against a baseline session (`redline report BASELINE CANDIDATE
--gate ...`): `tok_s>=-5%` (the candidate keeps at least 95 % of the baseline's output tok/s),
`ttft_p99<=+10%`, `ttft_p99<=+200ms` (a change in the figure's unit), `knee>=-1step` (the
knee at most one measured load lower). Per-step figures are compared at every load both
sessions measured (or at @LOAD only); each regression is named (load, figure, baseline,
candidate, change). For errors and attainment a signed % is in percentage points.

A figure that is a lower bound (censored requests, drawn "≥") proves `>=` when it is already
above the limit, and never proves `<=`: such a condition fails, saying so.

Pure: summary data in, outcomes and text out (no I/O but `junit_xml`'s string).

One module per job: gate_conditions.py reads the conditions, gate_measured.py reads what a
session measured; this one judges (evaluate, compare) and writes the results (text,
summary.json's `gate`, JUnit XML). Every name is importable from here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..rules.gate_conditions import (
    ACCEPTED,
    FIGURES,
    OPS,
    SESSION_FIGURES,
    Condition,
    Figure,
    GateError,
    has_relative,
    parse_condition,
    parse_gate,
)
from .gate_measured import GateSession, Load_label, Measured, fmt_value

__all__ = [
    "ACCEPTED", "EXIT_GATE_FAILED", "FIGURES", "OPS", "SESSION_FIGURES", "Condition", "Figure", "GateError",
    "GateSession", "Load_label", "Measured", "Outcome", "Regression", "compare", "evaluate", "failure_line",
    "fmt_value", "format_outcomes", "gate_dict", "has_relative", "junit_xml", "parse_condition", "parse_gate",
    "passed",
]

EXIT_GATE_FAILED = 4


# -- judging -------------------------------------------------------------------------------

def _holds(op: str, lo: float, hi: float, limit: float) -> bool | None:
    """Whether `value OP limit` holds for a value known to lie in [lo, hi]: True, False, or
    None (not proven either way: a lower bound under the limit)."""
    def ok(v: float) -> bool:
        return {">=": v >= limit, "<=": v <= limit, ">": v > limit, "<": v < limit}[op]

    a, b = ok(lo), ok(hi)
    return a if a == b else None


@dataclass
class Regression:
    load: str  # "C=16", or "" for a session figure
    figure: str
    baseline: str
    candidate: str
    change: str

    def line(self) -> str:
        where = f"{self.load} " if self.load else ""
        return f"{where}{self.figure}: baseline {self.baseline}, candidate {self.candidate}, change {self.change}"

    def to_dict(self) -> dict[str, str]:
        return {"load": self.load, "figure": self.figure, "baseline": self.baseline,
                "candidate": self.candidate, "change": self.change}


@dataclass
class Outcome:
    condition: Condition
    passed: bool
    detail: str  # the measured value(s), one line
    value: float | None = None
    bound: bool = False
    regressions: list[Regression] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [f"{'PASS' if self.passed else 'FAIL'}  {self.condition.text}  {self.detail}"]
        out += [f"        {r.line()}" for r in self.regressions]
        return out

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"condition": self.condition.text, "passed": self.passed,
                             "measured": self.value, "bound": self.bound, "detail": self.detail}
        if self.condition.relative is not None:
            d["regressions"] = [r.to_dict() for r in self.regressions]
        return d


def _limit_text(cond: Condition, kind: str = "C") -> str:
    fig = cond.fig
    if fig.name == "errors" and not cond.rate:
        return f"{cond.value:g}"
    return fmt_value(fig, cond.value, kind) if fig.unit != "load" else f"{cond.value:g}"


def evaluate(conds: Sequence[Condition], session: GateSession) -> list[Outcome]:
    """Absolute conditions against one session."""
    out = []
    for c in conds:
        if c.relative is not None:
            raise GateError(f"--gate {c.text!r}: a change ({c.value:+g}) needs a baseline: redline report BASELINE CANDIDATE --gate ...")
        m = session.figure(c)
        fig = c.fig
        if m.value is None:
            out.append(Outcome(c, False, f"{fig.name}: {m.show(fig)}"))
            continue
        hi = math.inf if m.bound else m.value
        ok = _holds(c.op, m.value, hi, c.value)
        shown = m.show(fig)
        detail = f"{fig.name} {shown}" + (f" {m.where}" if m.where else "")
        if ok is None:
            detail += f" (a lower bound: cannot show {c.op} {_limit_text(c, m.kind)})"
        elif not ok:
            detail += f" (needs {c.op} {_limit_text(c, m.kind)})"
        out.append(Outcome(c, bool(ok), detail, m.value, m.bound))
    return out


def _change_text(cond: Condition, b: float, c: float) -> str:
    fig = cond.fig
    if cond.relative == "step":
        return f"{c - b:+g} steps"
    if fig.unit in ("frac",) or (fig.name == "errors" and cond.rate):
        return f"{(c - b) * 100:+.1f} points"
    if cond.relative == "abs":
        d = c - b
        return (("+" if d >= 0 else "-") + fmt_value(fig, abs(d))) if fig.unit != "errors" else f"{d:+g}"
    if b == 0:
        return "from 0" if c else "+0.0 %"
    return f"{(c / b - 1) * 100:+.1f} %"


def _allowed(cond: Condition) -> str:
    if cond.relative == "step":
        return f"{cond.op} {cond.value:+g} steps"
    if cond.relative == "%":
        pct = cond.value * 100
        unit = " points" if cond.fig.unit == "frac" or cond.fig.name == "errors" else " %"
        return f"{cond.op} {pct:+g}{unit}"
    return f"{cond.op} {cond.value:+g}"


def _relative_ok(cond: Condition, b: Measured, c: Measured, positions: list[float] | None = None) -> bool | None:
    """Whether candidate c against baseline b meets the change; None when not proven."""
    bl, cl = b.value, c.value
    assert bl is not None and cl is not None
    bh, ch = (math.inf if b.bound else bl), (math.inf if c.bound else cl)
    if cond.relative == "step":
        # positions in the loads either session measured; a knee still rising is taken at its lower bound
        pos = {v: i for i, v in enumerate(positions or [])}
        return _holds(cond.op, pos.get(cl, 0) - pos.get(bl, 0), pos.get(cl, 0) - pos.get(bl, 0), cond.value)
    if cond.fig.unit == "load":  # a knee's bound is where the search stopped: compare the loads
        bh, ch = bl, cl
    if cond.relative == "abs" or cond.fig.unit == "frac" or cond.rate:
        lo, hi = cl - bh, ch - bl  # a difference (percentage points for shares)
        limit = cond.value
    else:
        if bl == 0:
            return _holds(cond.op, 0.0 if cl == 0 else math.inf, 0.0 if ch == 0 else math.inf, cond.value)
        lo = cl / bh - 1 if bh != math.inf else -1.0
        hi = ch / bl - 1
        limit = cond.value
    if lo > hi:
        lo, hi = hi, lo
    return _holds(cond.op, lo, hi, limit)


def compare(conds: Sequence[Condition], baseline: GateSession, candidate: GateSession) -> list[Outcome]:
    """Every condition: a signed one against the baseline over the aligned steps, an absolute
    one against the candidate alone."""
    out = []
    for cond in conds:
        if cond.relative is None:
            out += evaluate([cond], candidate)
            continue
        fig = cond.fig
        regs: list[Regression] = []
        compared = 0
        missing: list[str] = []
        if fig.name in SESSION_FIGURES or (fig.name == "errors" and cond.at is None):
            pairs = [("", baseline.figure(cond), candidate.figure(cond))]
        else:
            loads = [cond.at] if cond.at is not None else sorted(
                set(baseline.by_load()) & set(candidate.by_load()), key=lambda kv: ("CRx".index(kv[0]), kv[1]))
            pairs = [(Load_label(*ld), baseline.figure(cond, ld), candidate.figure(cond, ld)) for ld in loads]
        for where, b, c in pairs:
            if b.value is None or c.value is None:
                missing.append(f"{where + ' ' if where else ''}{'baseline' if b.value is None else 'candidate'}: "
                               f"{(b if b.value is None else c).show(fig)}")
                continue
            compared += 1
            positions = None
            if cond.relative == "step":
                positions = sorted(set(baseline.loads(b.kind)) | set(candidate.loads(c.kind)) | {b.value, c.value})
            ok = _relative_ok(cond, b, c, positions)
            if not ok:
                if cond.relative == "step":
                    assert positions is not None
                    change = f"{positions.index(c.value) - positions.index(b.value):+d} steps"
                else:
                    change = _change_text(cond, b.value, c.value)
                if ok is None:
                    change += " (a lower bound: not proven)"
                regs.append(Regression(where, fig.name, b.show(fig), c.show(fig), change + f", allowed {_allowed(cond)}"))
        if compared == 0:
            why = "; ".join(missing) or "no load both sessions measured"
            out.append(Outcome(cond, False, f"nothing to compare ({why})"))
            continue
        if regs:
            detail = f"{len(regs)} regression{'s' if len(regs) > 1 else ''} of {compared} compared"
            detail += ": " + ", ".join(r.load or r.figure for r in regs)
        else:
            detail = f"no regression over {compared} compared" + (
                f" ({pairs[0][1].show(fig)} -> {pairs[0][2].show(fig)})" if len(pairs) == 1 else "")
        if missing:
            detail += f"; not compared: {'; '.join(missing)}"
        out.append(Outcome(cond, not regs, detail, regressions=regs))
    return out


# -- results -------------------------------------------------------------------------------

def passed(outcomes: Sequence[Outcome]) -> bool:
    return all(o.passed for o in outcomes)


def format_outcomes(outcomes: Sequence[Outcome], title: str = "gate") -> str:
    failed = sum(1 for o in outcomes if not o.passed)
    head = f"{title}: {'PASS' if not failed else 'FAIL'} ({len(outcomes) - failed} of {len(outcomes)} conditions passed)"
    return "\n".join([head, *(f"  {line}" for o in outcomes for line in o.lines())])


def failure_line(outcomes: Sequence[Outcome]) -> str:
    """One line for stderr: each failed condition with its measured value."""
    bad = [o for o in outcomes if not o.passed]
    return "gate failed: " + "; ".join(f"{o.condition.text} ({o.detail})" for o in bad)


def gate_dict(outcomes: Sequence[Outcome], baseline: str | None = None) -> dict[str, Any]:
    """summary.json's `gate`."""
    d: dict[str, Any] = {"passed": passed(outcomes), "conditions": [o.condition.text for o in outcomes],
                         "results": [o.to_dict() for o in outcomes]}
    if baseline is not None:
        d["baseline"] = baseline
    return d


def junit_xml(outcomes: Sequence[Outcome], suite: str = "redline gate", workload: str | None = None) -> str:
    """A JUnit XML report: one test case per condition, a failure naming what was measured.
    `workload`: the line a comparison prints above its results (the workload both ran, or the
    warning that they differ), kept in the suite as a property and its system-out, where CI
    pages show it."""
    import xml.etree.ElementTree as ET

    failures = sum(1 for o in outcomes if not o.passed)
    root = ET.Element("testsuites", name="redline", tests=str(len(outcomes)), failures=str(failures), errors="0")
    ts = ET.SubElement(root, "testsuite", name=suite, tests=str(len(outcomes)), failures=str(failures),
                       errors="0", skipped="0", time="0")
    if workload:
        ET.SubElement(ET.SubElement(ts, "properties"), "property", name="workload", value=workload)
    for o in outcomes:
        tc = ET.SubElement(ts, "testcase", classname="redline.gate", name=o.condition.text, time="0")
        if not o.passed:
            f = ET.SubElement(tc, "failure", message=o.detail, type="gate")
            f.text = "\n".join(o.lines())
        else:
            ET.SubElement(tc, "system-out").text = o.lines()[0]
    if workload:
        ET.SubElement(ts, "system-out").text = workload
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
