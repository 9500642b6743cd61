"""Open-loop arrivals: when each request of a rate-mode step is meant to be sent.

    poisson   exponential gaps of mean 1/R (a Poisson process: SGLang's, vLLM's bench default)
    constant  a gap of exactly 1/R
    gamma:K   gamma-distributed gaps of shape K and mean 1/R (K < 1 burstier than Poisson,
              K > 1 smoother; K = 1 is Poisson), as vLLM's bench `--burstiness`

Intended send times are absolute and chained (t[i+1] = t[i] + gap), never re-anchored on
when a send actually happened, so a client that falls behind owes the sends it missed and
they count from their intended times (no coordinated omission). A rate change re-anchors
at the moment of the change.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

ARRIVAL_FORMS = "poisson, constant or gamma:K (K > 0)"
MAX_RATE = 1_000_000.0  # requests/s: a sanity bound
MIN_RATE = 0.1  # requests/s: the lowest rate a person can type (and - and [ reach in the TUI)


class ArrivalError(ValueError):
    """An unknown arrival process or a bad rate; the message is one line naming the value."""


@dataclass(frozen=True)
class Arrival:
    kind: str  # poisson | constant | gamma
    shape: float = 1.0  # gamma's K

    def describe(self) -> str:
        return f"gamma:{self.shape:g}" if self.kind == "gamma" else self.kind

    def gap(self, rate: float, rng: random.Random) -> float:
        """Seconds to the next intended send at `rate` requests/s."""
        if self.kind == "constant":
            return 1.0 / rate
        if self.kind == "gamma":
            return rng.gammavariate(self.shape, 1.0 / (self.shape * rate))
        return rng.expovariate(rate)


POISSON = Arrival("poisson")


def parse_arrival(text: object) -> Arrival:
    s = str(text).strip().lower()
    if s in ("poisson", "constant"):
        return Arrival(s)
    kind, sep, raw = s.partition(":")
    if kind == "gamma" and sep:
        try:
            k = float(raw)
        except ValueError:
            k = math.nan
        if math.isfinite(k) and k > 0:
            return Arrival("gamma", k)
        raise ArrivalError(f"arrival {text!r}: gamma's shape K must be a number > 0 (gamma:K, e.g. gamma:0.5)")
    raise ArrivalError(f"arrival {text!r}: expected {ARRIVAL_FORMS}")


def check_rate(r: object, what: str = "rate", *, lo: float | None = None) -> float:
    """A request rate in requests/s: a finite number > 0 (ArrivalError otherwise).

    Text is what a person typed (`--rate`, the TUI's `c` in rate mode): it must also be at
    least `lo`, MIN_RATE by default (docs/load-shapes.md: never below 0.1 req/s). A number is one redline
    computed (the mode key's starting rate: a C=1 step of long answers sends 0.02 req/s) and
    needs only be > 0."""
    try:
        v = float(str(r).strip()) if not isinstance(r, (int, float)) or isinstance(r, bool) else float(r)
    except ValueError:
        v = math.nan
    if isinstance(r, bool) or not math.isfinite(v) or v <= 0 or v > MAX_RATE:
        raise ArrivalError(f"{what} {r!r}: expected requests per second, a number > 0 and at most {MAX_RATE:.0f}")
    floor = (MIN_RATE if isinstance(r, str) else 0.0) if lo is None else lo
    if v < floor:
        raise ArrivalError(f"{what} {r!r}: below {floor:g} req/s, the lowest rate accepted; expected requests per second, "
                           f"a number from {floor:g} to {MAX_RATE:.0f}")
    return v


class Schedule:
    """Intended send times (perf_counter seconds) of one arrival process at a live rate."""

    def __init__(self, arrival: Arrival, rate: float, t0: float, seed: int = 0) -> None:
        self.arrival = arrival
        self.rate = check_rate(rate)
        self._rng = random.Random(f"redline-arrivals:{seed}")
        self.t_next = t0 + arrival.gap(self.rate, self._rng)

    def pop(self) -> tuple[float, None]:
        """The next intended time (and no item: the prompt source chooses); the one after
        becomes `t_next`."""
        t = self.t_next
        self.t_next = t + self.arrival.gap(self.rate, self._rng)
        return t, None

    def set_rate(self, rate: float, now: float) -> None:
        """From now on at `rate` (the next arrival is drawn from now)."""
        self.rate = check_rate(rate)
        self.t_next = now + self.arrival.gap(self.rate, self._rng)

    def rebase(self, now: float) -> None:
        """After a pause: arrivals resume from now (a pause owes no sends)."""
        self.t_next = now + self.arrival.gap(self.rate, self._rng)
