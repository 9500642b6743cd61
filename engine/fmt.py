"""Numbers as a person reads them: one formatter per kind, shared by the engine's text (the
step report, stop-rule details) and the TUI (tui/widgets/numbers.py re-uses these).

Every formatter gives "-" for an unknown value (None).
"""

from __future__ import annotations

__all__ = ["BOUND", "duration", "ms", "num", "rate", "step_ms"]

BOUND = "≥"  # a lower bound (censored requests: docs/numbers.md#requests-that-outlive-their-step-censoring)


def ms(v: float | None, unit: bool = True) -> str:
    """A latency given in milliseconds: one decimal under 100 ms ("62.1"), whole ms from 100
    ("180"). With ``unit`` it reads "62.1 ms", and from 10 s on in seconds ("12.5 s"); without,
    it is the bare number of ms (for a column whose header names the unit)."""
    if v is None:
        return "-"
    if unit and abs(v) >= 10_000:
        return f"{v / 1000:.1f} s"
    s = f"{v:.0f}" if abs(v) >= 100 else f"{v:.1f}"
    return f"{s} ms" if unit else s


def rate(v: float | None, unit: str = "") -> str:
    """A rate (tok/s, req/s, errors/s) to three significant digits or whole: 1985, 83.4, 4.27."""
    if v is None:
        return "-"
    a = abs(v)
    s = f"{v:.0f}" if a >= 100 else f"{v:.1f}" if a >= 10 else f"{v:.2f}"
    return f"{s}{unit}"


def num(v: float | None) -> str:
    """A count or a level: whole when it is whole or from 100 on ("8", "326"), else one decimal."""
    if v is None:
        return "-"
    return f"{v:.0f}" if abs(v - round(v)) < 1e-6 or abs(v) >= 100 else f"{v:.1f}"


def duration(seconds: float | None) -> str:
    """A span of time as it is said: "40 s", "3 min", "1 h 20 min"."""
    if seconds is None:
        return "-"
    s = max(0.0, seconds)
    if s < 90:
        return f"{s:.0f} s"
    m = round(s / 60)
    return f"{m} min" if m < 60 else f"{m // 60} h {m % 60} min" if m % 60 else f"{m // 60} h"


def step_ms(step: object, name: str, unit: bool = True) -> str:
    """A step's latency figure `name` (p99_ttft_ms, ...), "≥" in front when it is a lower
    bound (its `name + "_bound"` flag: own requests still waiting at the step's close)."""
    v = getattr(step, name, None)
    text = ms(v, unit)
    return BOUND + text if v is not None and getattr(step, name + "_bound", False) else text
