"""The gate's conditions (engine/report/gate.py): the figures a gate can name and the parser of
`FIGURE[@LOAD] OP VALUE`, e.g. `knee>=64`, `tok_s@C=64>=2500`, `ttft_p99<=+10%` (the forms:
gate.py's docstring, docs/comparing.md#gates-for-ci). Pure: text in, Condition values out.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

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
