"""Number formatting for the widgets: the engine's formatters (engine/fmt.py, so the screen,
the step report and the stop-rule texts agree) and the shapes only the screen draws."""

from __future__ import annotations

from ...engine.api import ms, num, rate, step_ms

__all__ = ["bar", "duration", "ms", "num", "rate", "step_ms"]


def duration(s: float) -> str:
    s = int(s)
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h:d}:{m:02d}:{sec:02d}"


def bar(frac: float | None, width: int = 10) -> str:
    if frac is None:
        return " " * width
    frac = min(max(frac, 0.0), 1.0)
    full = round(frac * width)
    return "█" * full + "░" * (width - full)
