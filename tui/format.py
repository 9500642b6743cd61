"""Number formatting shared by the widgets (one place, so every panel agrees)."""

from __future__ import annotations


def ms(v: float | None) -> str:
    if v is None:
        return "-"
    if v >= 10_000:
        return f"{v / 1000:.1f} s"
    if v >= 100:
        return f"{v:.0f} ms"
    return f"{v:.1f} ms"


def rate(v: float | None, unit: str = "") -> str:
    if v is None:
        return "-"
    s = f"{v:,.0f}" if v >= 100 else f"{v:.1f}"
    return f"{s}{unit}"


def num(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.0f}" if abs(v - round(v)) < 1e-9 or abs(v) >= 100 else f"{v:.1f}"


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
