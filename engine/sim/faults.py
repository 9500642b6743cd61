"""Fault injection: per-request fault draws and the overload / crash guard.

Draws come from a generator seeded with ``(server seed, arrival index)``, so a fixed seed gives
the same set of faults over the first N requests whatever order they run in.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from enum import Enum
from typing import Callable

from .profiles import SimProfile

__all__ = ["FaultKind", "FaultPlan", "draw_fault", "OverloadGuard"]


class FaultKind(Enum):
    """What goes wrong with one request (NONE: nothing)."""

    NONE = "none"
    HTTP_500 = "http_500"
    HTTP_429 = "http_429"
    DISCONNECT = "disconnect"
    MALFORMED = "malformed"
    MIDSTREAM = "midstream"  # the scheduler aborts it half-way (status 500, refusals.py)


@dataclass(frozen=True)
class FaultPlan:
    """The fault of one request and where in the stream it strikes."""

    kind: FaultKind
    #: For DISCONNECT / MALFORMED: content tokens sent before the fault; MIDSTREAM: half of
    #: max_tokens (rounded down).
    at_token: int
    #: Uniform 0..1 draw compared with the overload reject fraction.
    reject_draw: float


def draw_fault(profile: SimProfile, rng: random.Random, max_tokens: int) -> FaultPlan:
    """Draw the fault of a request from its own seeded generator."""
    u = rng.random()
    reject_draw = rng.random()
    at_token = rng.randint(1, max_tokens - 1) if max_tokens > 1 else 0
    kind = FaultKind.NONE
    edge = 0.0
    for rate, k in (
        (profile.error_500_rate, FaultKind.HTTP_500),
        (profile.error_429_rate, FaultKind.HTTP_429),
        (profile.disconnect_rate, FaultKind.DISCONNECT),
        (profile.malformed_rate, FaultKind.MALFORMED),
        (profile.fail_midstream_rate, FaultKind.MIDSTREAM),
    ):
        edge += rate
        if u < edge:
            kind = k
            break
    if kind is FaultKind.MIDSTREAM:
        at_token = max_tokens // 2
    return FaultPlan(kind=kind, at_token=at_token, reject_draw=reject_draw)


class OverloadGuard:
    """Decides 503s and the crash from the server's load (running + queued).

    ``on_crash(reason)`` is called once, when the load stays above ``crash_sustained_above``
    for ``crash_sustain_s`` seconds or passes ``crash_above``.
    """

    def __init__(
        self,
        profile: SimProfile,
        on_crash: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._profile = profile
        self._on_crash = on_crash
        self._clock = clock
        self._above_since: float | None = None
        self.crashed: str | None = None

    @property
    def watches(self) -> bool:
        """Whether this profile can crash at all (the monitor task is needed)."""
        p = self._profile
        return p.crash_above is not None or p.crash_sustained_above is not None

    def overloaded(self, load: int) -> bool:
        """Whether the server is in its failing state (/health answers 503)."""
        if self.crashed is not None:
            return True
        limit = self._profile.overload_above
        return limit is not None and load >= limit

    def should_reject(self, load: int, draw: float) -> bool:
        """Whether a new request arriving at ``load`` (it would make load + 1) gets 503."""
        if not self.overloaded(load):
            return False
        return self.crashed is not None or draw < self._profile.overload_reject_fraction

    def observe(self, load: int) -> None:
        """Check the crash rules against the current load."""
        if self.crashed is not None:
            return
        p = self._profile
        if p.crash_above is not None and load > p.crash_above:
            self._crash(f"load {load} passed {p.crash_above}")
            return
        if p.crash_sustained_above is None:
            return
        now = self._clock()
        if load > p.crash_sustained_above:
            if self._above_since is None:
                self._above_since = now
            elif now - self._above_since >= p.crash_sustain_s:
                self._crash(
                    f"load stayed above {p.crash_sustained_above} for {p.crash_sustain_s:g} s"
                )
        else:
            self._above_since = None

    def _crash(self, reason: str) -> None:
        self.crashed = reason
        self._on_crash(reason)
