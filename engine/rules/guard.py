"""Guard rails for live servers (docs/finding-the-limit.md#guard-rails).

When a guard is crossed for GUARD_SUSTAIN_S seconds in a row, the engine drops the load by
itself to the last good concurrency (the last C held without crossing it, else half the
current one) and says why on screen and in the log. The operator can raise the load again;
the guard then watches the new level.

    --guard errors=5%,ttft_p99=10s,gpu_temp=85
    [guard]  error_rate = 0.05   ttft_p99_ms = 10000   gpu_temp_c = 85
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from ..measure.slo import SloError, parse_duration_ms
from ..text import did_you_mean

GUARD_SUSTAIN_S = 5  # seconds a guard must stay crossed before it drops the load
FLAG_KEYS = {"errors": "error_rate", "ttft_p99": "ttft_p99_ms", "gpu_temp": "gpu_temp_c"}


class GuardError(SloError):
    """A bad --guard value (one line naming it and what is accepted)."""


@dataclass(frozen=True)
class GuardSpec:
    error_rate: float | None = None  # failed / finished over the last few seconds
    ttft_p99_ms: float | None = None  # the live p99 TTFT
    gpu_temp_c: float | None = None  # the hottest GPU

    @property
    def any(self) -> bool:
        return any(getattr(self, f.name) is not None for f in fields(self))

    def crossed(self, error_rate: float | None, ttft_p99_ms: float | None, gpu_temp_c: float | None) -> str | None:
        """Which guard the live figures cross, as one line (None when all hold)."""
        if self.error_rate is not None and error_rate is not None and error_rate > self.error_rate:
            return f"errors {error_rate * 100:.1f} % over {self.error_rate * 100:g} %"
        if self.ttft_p99_ms is not None and ttft_p99_ms is not None and ttft_p99_ms > self.ttft_p99_ms:
            return f"p99 TTFT {ttft_p99_ms:.0f} ms over {self.ttft_p99_ms:g} ms"
        if self.gpu_temp_c is not None and gpu_temp_c is not None and gpu_temp_c > self.gpu_temp_c:
            return f"GPU at {gpu_temp_c:.0f} °C over {self.gpu_temp_c:g} °C"
        return None

    def describe(self) -> str:
        parts = []
        if self.error_rate is not None:
            parts.append(f"errors≤{self.error_rate * 100:g}%")
        if self.ttft_p99_ms is not None:
            parts.append(f"p99 TTFT≤{self.ttft_p99_ms:g} ms")
        if self.gpu_temp_c is not None:
            parts.append(f"GPU≤{self.gpu_temp_c:g} °C")
        return ", ".join(parts)

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}


def parse_guard(text: str, flag: str = "--guard") -> GuardSpec:
    """`errors=5%,ttft_p99=10s,gpu_temp=85` -> GuardSpec."""
    vals: dict[str, float] = {}
    accepted = ", ".join(FLAG_KEYS)
    for part in [p for p in text.split(",") if p.strip()]:
        if "=" not in part:
            raise GuardError(f"{flag} {text!r}: expected NAME=VALUE pairs separated by commas (names: {accepted})")
        name, value = (x.strip() for x in part.split("=", 1))
        key = FLAG_KEYS.get(name)
        if key is None:
            raise GuardError(f"{flag}: unknown guard {name!r}{did_you_mean(name, FLAG_KEYS) or f' (accepted: {accepted})'}")
        if key == "ttft_p99_ms":
            vals[key] = parse_duration_ms(value, f"{flag} {name}=")
            continue
        try:
            v = float(value.rstrip("%").rstrip("C").rstrip("°"))
        except ValueError:
            v = math.nan
        if key == "error_rate":
            v = v / 100.0 if value.endswith("%") else v
            if not 0 <= v < 1:
                raise GuardError(f"{flag} errors={value!r}: expected a share of failed requests, 5% or 0.05")
        elif not 0 < v < 200:
            raise GuardError(f"{flag} gpu_temp={value!r}: expected degrees Celsius, e.g. 85")
        vals[key] = v
    if not vals:
        raise GuardError(f"{flag} {text!r}: expected at least one guard such as errors=5% (names: {accepted})")
    return GuardSpec(**vals)


class GuardWatch:
    """Once a second: is a guard crossed, for how long, and where to drop to.

    `last_good` is the highest concurrency held for GUARD_SUSTAIN_S seconds with no guard
    crossed; a trip drops to it (or to half the current C when there is none below).
    """

    def __init__(self, spec: GuardSpec, sustain_s: int = GUARD_SUSTAIN_S) -> None:
        self.spec = spec
        self.sustain_s = sustain_s
        self.crossed_for = 0  # consecutive seconds crossed
        self._clean_at: dict[int, int] = {}  # C -> consecutive clean seconds at it
        self.last_good: int | None = None
        self.reason = ""

    def second(self, target_c: int, error_rate: float | None, ttft_p99_ms: float | None, gpu_temp_c: float | None) -> int | None:
        """Feed one second; returns the C to drop to when the guard trips, else None."""
        why = self.spec.crossed(error_rate, ttft_p99_ms, gpu_temp_c)
        if why is None:
            self.crossed_for = 0
            n = self._clean_at.get(target_c, 0) + 1
            self._clean_at = {target_c: n}
            if n >= self.sustain_s:
                self.last_good = target_c  # the most recent C held cleanly long enough
            return None
        self._clean_at = {}
        self.crossed_for += 1
        self.reason = why
        if self.crossed_for < self.sustain_s:
            return None
        self.crossed_for = 0
        if self.last_good is not None and self.last_good < target_c:
            return self.last_good
        return max(1, target_c // 2) if target_c > 1 else None
