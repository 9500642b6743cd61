"""Service-level objectives and goodput (docs/finding-the-limit.md#slos-and-goodput); whether a step or a
request meets them is a verdict (engine/rules/verdicts.py slo_rule, judge_request).

Two kinds of bound:
- per request (DistServe's definition of goodput): a request meets the SLO when it completed
  and every bound holds: its TTFT, its TPOT, its own p99 inter-token gap, its E2E. Goodput is
  the rate of such requests (req/s) and of their output tokens (tok/s);
- per step (`*_p99`): the step's p99 TTFT / ITL / E2E under a bound.

A step meets the SLO when at least `attainment` of its own finished requests met the
per-request bounds (failed requests count as not meeting them) and every p99 bound holds.

    --slo ttft=2s,itl=100ms,e2e=60s,tpot=50ms,ttft_p99=3s,attainment=0.95
    [slo]  ttft_ms = 2000   tpot_ms = 50   itl_ms = 100   e2e_ms = 60000
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from ..text import did_you_mean

if TYPE_CHECKING:
    from .records import RequestRecord

DEFAULT_ATTAINMENT = 0.9  # share of a step's requests that must meet every per-request bound

PER_REQUEST = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")
PER_STEP = ("ttft_p99_ms", "itl_p99_ms", "e2e_p99_ms")
LABELS = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "itl_ms": "ITL p99", "e2e_ms": "E2E",
          "ttft_p99_ms": "p99 TTFT", "itl_p99_ms": "p99 ITL", "e2e_p99_ms": "p99 E2E"}
# the flag's names (docs/finding-the-limit.md): per request ttft/tpot/itl/e2e, per step ttft_p99/itl_p99/e2e_p99
FLAG_KEYS = {"ttft": "ttft_ms", "tpot": "tpot_ms", "itl": "itl_ms", "e2e": "e2e_ms",
             "ttft_p99": "ttft_p99_ms", "itl_p99": "itl_p99_ms", "e2e_p99": "e2e_p99_ms"}


def over(value_s: float, limit_ms: float) -> bool:
    """A value in seconds is over a bound given in ms: the one comparison of every SLO
    judgement (a request's verdict, which attainment and goodput share; a request still
    waiting). A value at its bound meets it, to the nanosecond, so that a value's floating-point
    spelling never decides: 0.043 s meets ttft=43ms (0.043 x 1000 is 43.00000000000001),
    10.141 - 10.0 s meets ttft=141ms (0.14100000000000001 s is above 0.141)."""
    return round(value_s * 1000.0, 6) > limit_ms


class SloError(ValueError):
    """A bad --slo value; the message names it and what is accepted (one line)."""


@dataclass(frozen=True)
class Slo:
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    itl_ms: float | None = None  # the request's own p99 gap between tokens
    e2e_ms: float | None = None
    ttft_p99_ms: float | None = None
    itl_p99_ms: float | None = None
    e2e_p99_ms: float | None = None
    attainment: float = DEFAULT_ATTAINMENT

    @property
    def per_request(self) -> bool:
        return any(getattr(self, k) is not None for k in PER_REQUEST)

    @property
    def any(self) -> bool:
        return self.per_request or any(getattr(self, k) is not None for k in PER_STEP)

    def missed_by(self, rec: RequestRecord, now: float) -> bool:
        """A request still in flight that has already missed its TTFT or E2E bound at `now`
        (perf_counter seconds)."""
        if self.ttft_ms is not None:
            ttft = rec.ttft if rec.ttft is not None else now - rec.t_start
            if over(ttft, self.ttft_ms):
                return True
        return self.e2e_ms is not None and over(now - rec.t_start, self.e2e_ms)

    def missed_wait(self, wait_s: float) -> bool:
        """A request that has waited `wait_s` with no first token (or no end) has missed
        the TTFT (or E2E) bound: a censored request past a bound is a miss."""
        return (self.ttft_ms is not None and over(wait_s, self.ttft_ms)) or (self.e2e_ms is not None and over(wait_s, self.e2e_ms))

    def describe_requests(self) -> str:
        return ", ".join(f"{LABELS[k]}≤{ms_text(getattr(self, k))}" for k in PER_REQUEST if getattr(self, k) is not None)

    def describe(self) -> str:
        """One line for the screen and the log: "TTFT≤2 s, ITL p99≤100 ms (90 %); p99 E2E≤60 s"."""
        out = []
        if self.per_request:
            out.append(f"{self.describe_requests()} ({self.attainment * 100:g} % of requests)")
        steps = [f"{LABELS[k]}≤{ms_text(getattr(self, k))}" for k in PER_STEP if getattr(self, k) is not None]
        if steps:
            out.append(", ".join(steps))
        return "; ".join(out)

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}


def ms_text(v: float) -> str:
    """A bound as a person writes it: "2 s", "100 ms"."""
    if v >= 1000 and v % 100 == 0:
        return f"{v / 1000:g} s"
    return f"{v:g} ms"


def parse_duration_ms(text: str, what: str) -> float:
    """"2s", "1.5 s", "100ms", "250" (ms) -> milliseconds > 0."""
    t = text.strip().lower().replace(" ", "")
    scale = 1.0
    for suffix, mult in (("ms", 1.0), ("s", 1000.0), ("m", 60000.0)):
        if t.endswith(suffix):
            t, scale = t[: -len(suffix)], mult
            break
    shown = f"{what}{text!r}" if what.endswith("=") else f"{what} {text!r}"  # --slo ttft='fast'
    try:
        v = float(t) * scale
    except ValueError:
        raise SloError(f"{shown}: expected a duration such as 2s or 100ms") from None
    if not math.isfinite(v) or v <= 0:
        raise SloError(f"{shown}: expected a duration > 0 such as 2s or 100ms")
    return v


def parse_slo(text: str, flag: str = "--slo") -> Slo:
    """`ttft=2s,itl=100ms,e2e=60s,tpot=50ms,ttft_p99=3s,attainment=0.95` -> Slo."""
    vals: dict[str, float] = {}
    accepted = ", ".join([*FLAG_KEYS, "attainment"])
    for part in [p for p in text.split(",") if p.strip()]:
        if "=" not in part:
            raise SloError(f"{flag} {text!r}: expected NAME=VALUE pairs separated by commas (names: {accepted})")
        name, value = (x.strip() for x in part.split("=", 1))
        if name == "attainment":
            try:
                a = float(value.rstrip("%")) / (100.0 if value.endswith("%") else 1.0)
            except ValueError:
                a = math.nan
            if not 0 < a <= 1:
                raise SloError(f"{flag} attainment={value!r}: expected a fraction 0 < x <= 1 (0.9 or 90%)")
            vals["attainment"] = a
            continue
        key = FLAG_KEYS.get(name)
        if key is None:
            raise SloError(f"{flag}: unknown SLO {name!r}{did_you_mean(name, [*FLAG_KEYS, 'attainment']) or f' (accepted: {accepted})'}")
        vals[key] = parse_duration_ms(value, f"{flag} {name}=")
    if not vals or all(k == "attainment" for k in vals):
        raise SloError(f"{flag} {text!r}: expected at least one bound such as ttft=2s (names: {accepted})")
    return Slo(**vals)
