"""Energy efficiency: tokens per joule (= tok/s per W) and joules per token.

Instantaneous figures come from summed GPU power. ``EnergyWindow`` gives the figure over a
window, from the GPUs' cumulative energy counters when every GPU has one (exact, immune to
sampling gaps) and from power integrated over time otherwise.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import NamedTuple

from .types import GpuSample

__all__ = ["EnergyWindow", "joules_per_token", "tokens_per_watt", "total_power_w"]


def total_power_w(gpus: Sequence[GpuSample]) -> float | None:
    """Sum of the GPUs' power draw; None when no GPU reports power."""
    powers = [g.power_w for g in gpus if g.power_w is not None]
    return float(sum(powers)) if powers else None


def tokens_per_watt(tok_s: float | None, gpus: Sequence[GpuSample]) -> float | None:
    """Output tokens per second per watt of summed GPU power (= tokens per joule)."""
    power = total_power_w(gpus)
    if tok_s is None or power is None or power <= 0 or tok_s < 0:
        return None
    return tok_s / power


def joules_per_token(tok_s: float | None, gpus: Sequence[GpuSample]) -> float | None:
    """Summed GPU power divided by token rate; None when either is missing or zero."""
    power = total_power_w(gpus)
    if tok_s is None or power is None or tok_s <= 0:
        return None
    return power / tok_s


class _Point(NamedTuple):
    t: float
    tokens: float  # cumulative token count
    integrated_j: float  # redline's own integral of summed power
    power_w: float | None  # summed power at t
    counters: tuple[tuple[int, float], ...] | None  # ((gpu index, energy J), ...) when all have one


class EnergyWindow:
    """Joules per token over the last ``window_s`` seconds.

    Call ``add(t, tokens_total, gpus)`` on every telemetry tick with the cumulative token
    count (client-side output tokens, or the server's generation counter) and the GPUs.
    """

    def __init__(self, window_s: float = 10.0) -> None:
        if window_s <= 0:
            raise ValueError(f"window_s must be > 0, got {window_s}")
        self.window_s = window_s
        self._points: deque[_Point] = deque()
        self._integrated = 0.0
        self._last_power: float | None = None

    def add(self, t: float, tokens_total: float, gpus: Sequence[GpuSample]) -> None:
        """Record one observation (``t`` increasing, seconds)."""
        power = total_power_w(gpus)
        if self._points:
            prev = self._points[-1]
            dt = t - prev.t
            if dt <= 0:
                return
            if power is not None and self._last_power is not None:
                self._integrated += 0.5 * (power + self._last_power) * dt  # trapezoid
            elif power is not None or self._last_power is not None:
                self._integrated += (power if power is not None else self._last_power) * dt
        self._last_power = power
        counters = None
        if gpus and all(g.energy_j is not None for g in gpus):
            counters = tuple(sorted((g.index, float(g.energy_j)) for g in gpus))  # type: ignore[arg-type]
        self._points.append(_Point(t, float(tokens_total), self._integrated, power, counters))
        # keep one point at or before the window start, so the window is fully covered
        while len(self._points) >= 2 and self._points[1].t <= t - self.window_s:
            self._points.popleft()

    def energy_j(self) -> float | None:
        """Joules spent across the window (counters when consistent, else integrated power)."""
        if len(self._points) < 2:
            return None
        first, last = self._points[0], self._points[-1]
        if first.counters is not None and last.counters is not None:
            if [i for i, _ in first.counters] == [i for i, _ in last.counters]:
                delta = sum(b - a for (_, a), (_, b) in zip(first.counters, last.counters))
                if delta >= 0:  # a negative delta is a counter reset (driver reload)
                    return delta
        if all(p.power_w is None for p in self._points):
            return None  # no power reading in the window
        return last.integrated_j - first.integrated_j

    def tokens(self) -> float | None:
        """Tokens counted across the window."""
        if len(self._points) < 2:
            return None
        return self._points[-1].tokens - self._points[0].tokens

    def joules_per_token(self) -> float | None:
        """Energy per token over the window; None without energy data or without tokens."""
        energy, tokens = self.energy_j(), self.tokens()
        if energy is None or tokens is None or tokens <= 0:
            return None
        return energy / tokens

    def tokens_per_joule(self) -> float | None:
        """Tokens per joule over the window (= tok/s per W)."""
        energy, tokens = self.energy_j(), self.tokens()
        if energy is None or tokens is None or energy <= 0 or tokens < 0:
            return None
        return tokens / energy
