"""Pass/fail gates over a session's results, for CI (README "Gates for CI").

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
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from .fmt import BOUND
from .slo import Slo
from .stepresult import StepResult

EXIT_GATE_FAILED = 4

OPS = (">=", "<=", ">", "<")


class GateError(ValueError):
    """A gate spec that cannot be used; str() is one line naming the bad part and what is accepted."""


@dataclass(frozen=True)
class Figure:
    name: str
    field: str | None  # the StepResult field; None for the session figures and errors
    unit: str  # "load", "tok/s", "req/s", "ms", "frac", "errors"
    best: str  # "max" | "min": what a session without @LOAD is judged by (higher/lower)
    what: str  # how a person reads it


FIGURES: dict[str, Figure] = {f.name: f for f in (
    Figure("knee", None, "load", "max", "knee"),
    Figure("max_slo", None, "load", "max", "largest load meeting the SLO"),
    Figure("tok_s", "output_throughput", "tok/s", "max", "output tok/s"),
    Figure("goodput", "output_goodput", "tok/s", "max", "goodput tok/s"),
    Figure("req_s", "request_throughput", "req/s", "max", "requests/s"),
    Figure("ttft_mean", "mean_ttft_ms", "ms", "max", "mean TTFT"),
    Figure("ttft_p50", "median_ttft_ms", "ms", "max", "p50 TTFT"),
    Figure("ttft_p99", "p99_ttft_ms", "ms", "max", "p99 TTFT"),
    Figure("itl_p50", "median_itl_ms", "ms", "max", "p50 ITL"),
    Figure("itl_p99", "p99_itl_ms", "ms", "max", "p99 ITL"),
    Figure("tpot", "mean_tpot_ms", "ms", "max", "mean TPOT"),
    Figure("e2e_p50", "median_e2e_latency_ms", "ms", "max", "p50 E2E"),
    Figure("e2e_p99", "p99_e2e_latency_ms", "ms", "max", "p99 E2E"),
    Figure("attainment", "slo_attainment", "frac", "min", "SLO attainment"),
    Figure("errors", None, "errors", "max", "failed requests"),
)}
SESSION_FIGURES = ("knee", "max_slo")
ACCEPTED = "FIGURE[@C=N|@R=N/s] OP VALUE, e.g. knee>=64, tok_s@C=64>=2500, ttft_p99@C=64<=2s, errors<=1%, tok_s>=-5%"


@dataclass(frozen=True)
class Condition:
    text: str  # as written, spaces removed: "tok_s@C=64>=2500"
    figure: str
    op: str
    value: float  # in the figure's unit: ms, tok/s, req/s, a fraction, a count, a load
    at: tuple[str, float] | None = None  # ("C", 64) or ("R", 8.0)
    relative: str | None = None  # None | "%" (a share of the baseline) | "abs" (in the unit) | "step"
    rate: bool = False  # errors: a share (1%) rather than a count

    @property
    def fig(self) -> Figure:
        return FIGURES[self.figure]


# -- parsing -------------------------------------------------------------------------------

def parse_gate(spec: str | Sequence[str], flag: str = "--gate") -> list[Condition]:
    """`knee>=64,tok_s@C=64>=2500` (or a list of such strings) -> conditions. GateError names
    the bad part and what is accepted, in one line."""
    parts: list[str] = []
    texts = [spec] if isinstance(spec, str) else list(spec)
    for t in texts:
        if not isinstance(t, str):
            raise GateError(f"{flag}: expected a string of conditions, got {t!r}")
        parts += [p for p in t.split(",") if p.strip()]
    if not parts:
        raise GateError(f"{flag} {_show(spec)}: expected at least one condition ({ACCEPTED})")
    return [parse_condition(p, flag) for p in parts]


def parse_condition(text: str, flag: str = "--gate") -> Condition:
    raw = "".join(text.split())
    m = re.search(r"[<>]=?", raw)
    if m is None or "=" in raw[m.end():m.end() + 1]:
        raise GateError(f"{flag} {raw!r}: expected {ACCEPTED} (operators: >= <= > <)")
    left, op, right = raw[:m.start()], m.group(0), raw[m.end():]
    name, _, at_text = left.partition("@")
    fig = FIGURES.get(name)
    if fig is None:
        raise GateError(f"{flag} {raw!r}: unknown figure {name!r} (accepted: {', '.join(FIGURES)})")
    at = None
    if at_text or "@" in left:
        if fig.name in SESSION_FIGURES:
            raise GateError(f"{flag} {raw!r}: {fig.name} is the session's, not a step's: drop @{at_text}")
        at = _parse_at(at_text, raw, flag)
    if not right:
        raise GateError(f"{flag} {raw!r}: no value after {op}")
    relative, rate = None, False
    if right[0] in "+-":
        value, relative = _parse_change(fig, right, raw, flag)
        rate = fig.name == "errors" and relative == "%"  # errors<=+1%: the share, in points
    else:
        value, rate = _parse_value(fig, right, raw, flag)
    return Condition(raw, fig.name, op, value, at, relative, rate)


def _parse_at(text: str, raw: str, flag: str) -> tuple[str, float]:
    m = re.fullmatch(r"([CcRr])=([0-9.eE+]+)(/s)?", text)
    v = _float(m.group(2)) if m else None
    if m is None or v is None or v <= 0 or (m.group(1) in "Cc" and (m.group(3) or v != int(v))):
        raise GateError(f"{flag} {raw!r}: load {text!r}: expected C=N (a concurrency) or R=N/s (a request rate)")
    return ("C", float(int(v))) if m.group(1) in "Cc" else ("R", v)


def _float(s: str) -> float | None:
    try:
        v = float(s)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


_MS_UNITS = (("ms", 1.0), ("s", 1000.0), ("m", 60000.0))


def _duration(s: str) -> float | None:
    for suffix, mult in _MS_UNITS:
        if s.endswith(suffix):
            v = _float(s[: -len(suffix)])
            return None if v is None else v * mult
    return _float(s)


def _expect(fig: Figure) -> str:
    return {
        "load": "a concurrency such as 64 (or C=64, R=8/s)",
        "tok/s": "tok/s, a number such as 2500",
        "req/s": "req/s, a number such as 8",
        "ms": "a duration such as 2s or 500ms (a bare number is ms)",
        "frac": "a share such as 95% or 0.95",
        "errors": "a share such as 1% or a count such as 10",
    }[fig.unit]


def _parse_value(fig: Figure, s: str, raw: str, flag: str) -> tuple[float, bool]:
    bad = GateError(f"{flag} {raw!r}: value {s!r}: expected {_expect(fig)}, or a change against a baseline such as -5%")
    rate = False
    if fig.unit == "load":
        m = re.fullmatch(r"(?:[CcRr]=)?([0-9.eE+]+)(?:/s)?", s)
        v = _float(m.group(1)) if m else None
    elif fig.unit == "ms":
        v = _duration(s)
    elif fig.unit in ("frac", "errors"):
        if s.endswith("%"):
            v, rate = _float(s[:-1]), True
            v = None if v is None or v > 100 else v / 100
        elif fig.unit == "frac":
            v, rate = _float(s), True
            v = None if v is None or v > 1 else v
        else:
            v = _float(s)
            v = None if v is None or v != int(v) else v
    else:
        v = _float(s[:-1] + "000" if s.endswith("k") else s)
    if v is None or v < 0:
        raise bad
    return v, rate


def _parse_change(fig: Figure, s: str, raw: str, flag: str) -> tuple[float, str]:
    sign = -1.0 if s[0] == "-" else 1.0
    body = s[1:]
    if body.endswith("steps") or body.endswith("step"):
        n = _float(body[: -5 if body.endswith("steps") else -4])
        if fig.unit != "load":
            raise GateError(f"{flag} {raw!r}: a change in steps is for knee and max_slo (others: a % such as -5%)")
        if n is None or n != int(n):
            raise GateError(f"{flag} {raw!r}: value {s!r}: expected a whole number of steps such as -1step")
        return sign * n, "step"
    if body.endswith("%"):
        v = _float(body[:-1])
        if v is None:
            raise GateError(f"{flag} {raw!r}: value {s!r}: expected a change such as -5% or +10%")
        return sign * v / 100, "%"
    v, _ = _parse_value(fig, body, raw, flag) if fig.unit != "errors" else (_float(body), False)
    if v is None:
        raise GateError(f"{flag} {raw!r}: value {s!r}: expected a change such as -5% or +10%")
    return sign * v, "abs"


def _show(spec: Any) -> str:
    return repr(spec if isinstance(spec, str) else ",".join(map(str, spec)))


def has_relative(conds: Iterable[Condition]) -> bool:
    return any(c.relative is not None for c in conds)


# -- what a session measured ---------------------------------------------------------------

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
    def load(cls, session_dir) -> "GateSession":
        """A session directory (SessionError, one line, when it is not one)."""
        from .session import load_summary
        from .session.compare import load_session

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
        search = self.summary.get("search")
        if isinstance(search, dict):
            rate = search.get("knee_rate") is not None or bool(search.get("rates"))
            v = search.get("knee_rate") if rate else search.get("knee_concurrency")
            kind = "R" if rate else "C"
            if v is not None:
                return Measured(float(v), where="(knee search)", kind=kind)
            reason = str(search.get("knee_reason") or "")
            pts = search.get("rates") if rate else search.get("points")
            if reason.startswith("still rising") and pts:
                return Measured(float(max(pts)), bound=True, where=f"({reason})", kind=kind)
            return Measured(None, note=f"no knee ({reason or 'knee search found none'})")
        from .constants import KNEE_MIN_STEPS
        from .session.compare import knee_load

        k = knee_load(self.session)
        if k is not None:
            how = "last good before the break" if self.session.break_result is not None else "most tok/s, no break"
            return Measured(k.value, where=f"({how})", kind="R" if k.kind == "R" else "C")
        b = self.session.break_result
        if not self.steps:
            return Measured(None, note="no knee (no steps)")
        if b is not None:
            return Measured(None, note=f"no knee (broke at its first step, {b.where}: {b.reason})")
        kind = self.kind()
        loads = self.loads(kind)
        if len(loads) < KNEE_MIN_STEPS:
            return Measured(None, note=f"no knee (fewer than {KNEE_MIN_STEPS} steps)")
        top = Load_label(kind, loads[-1])
        return Measured(loads[-1], bound=True, where=f"(still rising at max {top})", kind=kind)

    def max_slo(self) -> Measured:
        search = self.summary.get("search")
        slo_d = self.summary.get("slo")
        if isinstance(search, dict) and "max_slo_concurrency" in search and slo_d:
            rate = search.get("max_slo_rate") is not None or bool(search.get("rates"))
            v = search.get("max_slo_rate") if rate else search.get("max_slo_concurrency")
            kind = "R" if rate else "C"
            if v is None:
                return Measured(None, note="no load met the SLO")
            return Measured(float(v), where="(knee search)", kind=kind)
        if not isinstance(slo_d, dict) or not slo_d:
            return Measured(None, note="no SLO recorded (give --slo or [slo])")
        try:
            slo = Slo(**slo_d)
        except TypeError:
            return Measured(None, note="summary.json's slo is not readable")
        kind = self.kind()
        # met: no bound missed, and with per-request bounds an attainment measured
        good = [v for (k, v), s in self.by_load().items()
                if k == kind and slo.judge(s) is None and (not slo.per_request or s.slo_attainment is not None)]
        if not good:
            return Measured(None, note="no step met the SLO")
        return Measured(max(good), kind=kind)

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
        if at is not None:
            st = by.get(at)
            if st is None:
                have = ", ".join(Load_label(k, v) for k, v in by) or "none"
                return Measured(None, note=f"no step at {Load_label(*at)} (measured: {have})")
            if fig.name == "errors":
                return self.errors(cond.rate, st)
            v = getattr(st, fig.field)
            if v is None:
                return Measured(None, note=f"no {fig.what} at {Load_label(*at)}")
            return Measured(float(v), st.bound(fig.field), where=f"at {Load_label(*at)}")
        if fig.name == "errors":
            return self.errors(cond.rate)
        vals = [((k, v), s, getattr(s, fig.field)) for (k, v), s in by.items() if getattr(s, fig.field) is not None]
        if not vals:
            return Measured(None, note=f"no step has {fig.what}")
        # most for throughputs, the worst for latencies (highest) and attainment (lowest)
        pick = max if fig.name in ("tok_s", "goodput", "req_s") or fig.unit == "ms" else min
        load, st, v = pick(vals, key=lambda x: x[2])
        bound = fig.unit == "ms" and any(s.bound(fig.field) for _, s, _ in vals)
        return Measured(float(v), bound, where=f"at {Load_label(*load)}")


def Load_label(kind: str, v: float) -> str:  # noqa: N802 - reads like compare.Load.label
    return f"R={v:g}/s" if kind == "R" else f"x{v:g}" if kind == "x" else f"C={v:g}"


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
    bl, bh = b.value, (math.inf if b.bound else b.value)
    cl, ch = c.value, (math.inf if c.bound else c.value)
    assert bl is not None and cl is not None
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


def junit_xml(outcomes: Sequence[Outcome], suite: str = "redline gate") -> str:
    """A JUnit XML report: one test case per condition, a failure naming what was measured."""
    import xml.etree.ElementTree as ET

    failures = sum(1 for o in outcomes if not o.passed)
    root = ET.Element("testsuites", name="redline", tests=str(len(outcomes)), failures=str(failures), errors="0")
    ts = ET.SubElement(root, "testsuite", name=suite, tests=str(len(outcomes)), failures=str(failures),
                       errors="0", skipped="0", time="0")
    for o in outcomes:
        tc = ET.SubElement(ts, "testcase", classname="redline.gate", name=o.condition.text, time="0")
        if not o.passed:
            f = ET.SubElement(tc, "failure", message=o.detail, type="gate")
            f.text = "\n".join(o.lines())
        else:
            ET.SubElement(tc, "system-out").text = o.lines()[0]
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
