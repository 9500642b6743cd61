"""What a preset is: the spec dataclasses, the limits every key is checked against, PresetError.

Pure data: no parsing, no I/O, and nothing from the engine runtime (the runner imports
presets, never the reverse). A Preset comes from parse.py (a TOML file) or replay.py (a
recorded session); the runner (engine/run/preset_runner.py) follows `Preset.ramp.steps()`, the breaker
(engine/rules/verdicts.py) applies `Preset.stop`. Every key is described in the docs/presets.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..constants import STEADY_MIN_S
from ..measure.slo import Slo
from ..rules.guard import GuardSpec
from ..rules.verdicts import StopSpec  # the stop rules own their spec (a preset's [stop])

DEFAULT_WARMUP_S = 10.0
DEFAULT_HOLD_S = 30.0
DEFAULT_MIN_REQUESTS = 20
DEFAULT_MAX_HOLD_FACTOR = 3.0  # max_hold_s defaults to 3 x hold_s
MAX_REPEATS = 100  # [ramp] repeats, --repeats
COUNT_MAX_HOLD_S = 600.0  # a step that counts requests ([ramp] num_requests) measures at most this long by default
MAX_CONCURRENCY = 100_000  # a sanity bound on one step's concurrency
MAX_STEPS = 10_000  # a sanity bound on the number of steps in a ramp
MAX_SECONDS = 7 * 24 * 3600.0  # a sanity bound on any time value (one week)
TRACE_TAIL_S = 60.0  # what the time estimate of a trace step allows for its last answers


def one_line(text: str) -> str:
    """Whitespace runs (newlines included) as one space, when the text spans lines."""
    return " ".join(str(text).split()) if ("\n" in text or "\r" in text) else text


class PresetError(ValueError):
    """A preset that cannot be used. str() is one line: file, key, what is accepted."""

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))


@dataclass(frozen=True)
class TargetSpec:
    url: str | None = None  # normalised by engine/client/target.py validate_url: scheme://host[:port]
    api: str | None = None  # as written in [target].api (an alias of [workload].api)


@dataclass(frozen=True)
class WorkloadSpec:
    api: str = "chat"  # chat | completions | generate
    dataset: str = "random"  # random | sharegpt:/abs/path | jsonl:/abs/path
    input_len: int = 32
    output_len: int = 128
    model: str | None = None
    turns: int = 1  # multi-turn: turns per session (concurrency then counts sessions)
    think_s: float = 0.0  # multi-turn: pause between an answer and the next turn
    trace: str | None = None  # a Mooncake JSONL trace (absolute path), replayed per [ramp].speed
    # request shaping (engine/workload/request_shape.py; the CLI's flags win): headers sent on
    # every request, a JSON object's text merged into every body, ignore_eos, the random
    # lengths' range ratio, the workload's seed (None: --seed, else 0)
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    extra_body: str = ""
    ignore_eos: bool = True
    random_range_ratio: float = 0.0
    seed: int | None = None


@dataclass(frozen=True)
class StepPlan:
    """How the runner holds one step of a ramp.

    Warm up for `warmup_s` (not measured; with `turnover`, or until the in-flight has turned
    over, if sooner), then measure for at least `hold_s`; if fewer than
    `min_requests` requests completed by then, keep measuring until they have or until
    `max_hold_s` of measurement has passed, whichever comes first.
    """

    concurrency: int
    warmup_s: float
    hold_s: float
    min_requests: int
    max_hold_s: float
    rate: float | None = None  # an open-loop step at this many req/s (concurrency unused)
    speed: float | None = None  # a trace replay step at this speed factor
    probe: bool = False  # a replayed C=1 probe: what is in flight is aborted first, as `a` does
    # a knee search's point: the warm-up ends at turnover (every request in flight when the
    # load began, sent at another load, has ended) or after warmup_s, whichever comes first
    turnover: bool = False
    steady_min_s: int = STEADY_MIN_S  # whole measured seconds before the step can be called steady
    # [ramp] num_requests: the step measures until this many of its own requests completed
    # (no minimum time, no wait for steadiness), at most max_hold_s; None: a hold
    num_requests: int | None = None

    @property
    def label(self) -> str:
        """`C=8`, `rate 5 req/s` or `trace x2`."""
        if self.speed is not None:
            return f"trace x{self.speed:g}"
        if self.rate is not None:
            return f"rate {self.rate:g} req/s"
        return f"C={self.concurrency}"


@dataclass(frozen=True)
class SearchSpec:
    """`[ramp] mode = "search"`: an adaptive knee search (engine/rules/knee_search.py)."""

    start: int
    max: int
    resolution: float = 0.05  # narrow each bracket until it is this fraction of C (or 1)
    factor: float = 2.0  # the growth factor before bisecting
    # over = "rate": a search over request rates; C (an integer) stands for a rate of
    # C x rate_unit req/s, and start/max are the rates / rate_unit
    rate_unit: float | None = None

    def rate_of(self, c: int) -> float | None:
        return None if self.rate_unit is None else round(c * self.rate_unit, 6)


@dataclass(frozen=True)
class RampSpec:
    concurrency: tuple[int, ...]
    warmup_s: float = DEFAULT_WARMUP_S
    hold_s: float = DEFAULT_HOLD_S
    min_requests: int = DEFAULT_MIN_REQUESTS
    max_hold_s: float = DEFAULT_HOLD_S * DEFAULT_MAX_HOLD_FACTOR
    # Replay mode: step i lasts exactly durations_s[i] seconds, all of it measured,
    # with no warm-up and no min_requests extension. None = a normal ramp.
    durations_s: tuple[float, ...] | None = None
    search: SearchSpec | None = None  # mode = "search": steps are chosen as results come
    # open loop ([ramp] rate = [...]): one step per rate, at most max_concurrency in flight.
    # In replay mode (durations_s) rate sits beside concurrency, one entry per step, and a
    # rate of 0 means that step held the concurrency (a session that switched modes).
    rate: tuple[float, ...] | None = None
    arrival: str = "poisson"  # poisson | constant | gamma:K
    max_concurrency: int | None = None  # the in-flight cap of rate steps (None: --max-concurrency)
    speed: tuple[float, ...] | None = None  # a trace replay ([workload].trace) per speed factor
    # replay mode: the workload of each step (None: [workload]'s), for sessions that changed it live
    workloads: tuple[dict | None, ...] | None = None
    # looking inside the server (engine/run/server_ops.py): the loads (C, or req/s of a rate
    # ramp) at which the profiler captures, and a prefix-cache flush before each step
    profile: tuple[float, ...] = ()
    flush_cache: bool = False
    # replay mode: which steps were C=1 probes (`a` inside the session): each aborts what is
    # in flight before it, as the original did, where a plain C=1 step would let it drain in
    probes: tuple[bool, ...] | None = None
    # whole measured seconds a step needs before it can be called steady (engine/measure/accumulator.py):
    # not a preset key; a program may shorten it (a test on a sim whose decode steps are 10-25
    # ms, where 2 s hold a hundred or more of them: tests/helpers.py steady_in)
    steady_min_s: int = STEADY_MIN_S
    # [ramp] num_requests = N: each step ends once N of its own requests completed, instead of a
    # hold (hold_s is then 0 and min_requests N; max_hold_s still caps it)
    num_requests: int | None = None

    def steps(self) -> list[StepPlan]:
        """The per-step plan the runner follows, in order."""
        if self.speed is not None:
            return [StepPlan(0, self.warmup_s, self.hold_s, 0, self.max_hold_s, speed=x, steady_min_s=self.steady_min_s) for x in self.speed]
        if self.durations_s is not None:
            rates = self.rate or (0.0,) * len(self.durations_s)
            probes = self.probes or (False,) * len(self.durations_s)
            return [
                StepPlan(c, 0.0, d, 0, d, rate=r or None, probe=p)
                for c, d, r, p in zip(self.concurrency, self.durations_s, rates, probes)
            ]
        if self.rate is not None:
            return [StepPlan(0, self.warmup_s, self.hold_s, self.min_requests, self.max_hold_s, rate=r, steady_min_s=self.steady_min_s,
                             num_requests=self.num_requests) for r in self.rate]
        return [
            StepPlan(c, self.warmup_s, self.hold_s, self.min_requests, self.max_hold_s, steady_min_s=self.steady_min_s,
                     num_requests=self.num_requests)
            for c in self.concurrency
        ]

    def duration_bounds(self) -> tuple[float, float]:
        """(shortest, longest) wall time of the whole ramp if no stop rule fires."""
        plans = self.steps()
        lo = sum(p.warmup_s + p.hold_s for p in plans)
        hi = sum(p.warmup_s + p.max_hold_s for p in plans)
        return lo, hi


@dataclass(frozen=True)
class AfterSpec:
    probe_s: float = 0.0  # C=1 probe after the ramp (broken or not); 0 = none


@dataclass(frozen=True)
class Preset:
    name: str
    path: Path | None
    target: TargetSpec
    workload: WorkloadSpec
    ramp: RampSpec
    stop: StopSpec
    after: AfterSpec
    description: str = ""
    slo: Slo | None = None
    guard: GuardSpec | None = None
    gate: tuple[str, ...] | None = None  # [gate]: conditions checked at the end of a headless run (engine/report/gate.py)
    repeats: int = 1  # [ramp] repeats: the whole ramp run this many times (docs/comparing.md#repeats-and-intervals)

    def duration_bounds(self) -> tuple[float, float]:
        """(shortest, longest) wall time of ramp + probe if no stop rule fires (a search:
        its first point only; it chooses the others as results come)."""
        lo, hi = self.ramp.duration_bounds()
        if self.ramp.speed is not None and self.workload.trace is not None:
            from ..workload.trace import load_trace, trace_duration_s  # a trace's steps last its length / speed

            try:
                d = trace_duration_s(load_trace(self.workload.trace))
            except ValueError:
                d = 0.0
            lo = sum(d / x + self.ramp.warmup_s for x in self.ramp.speed)
            hi = lo + TRACE_TAIL_S * len(self.ramp.speed)
        return lo + self.after.probe_s, hi + self.after.probe_s


def as_search(preset: Preset, max_concurrency: int) -> Preset:
    """`redline run PRESET --search`: the preset's steps become a knee search from its first
    concurrency up to `max_concurrency`, with its warm-up and hold keys."""
    import dataclasses

    r = preset.ramp
    if r.search is not None:
        return preset
    if r.rate is not None and r.durations_s is None:
        # a rate ramp: from its first rate up to 4 x its largest, in steps of 1/1000 of that
        top = 4 * max(r.rate)
        unit = top / 1000
        search = SearchSpec(start=max(1, round(r.rate[0] / unit)), max=1000, rate_unit=unit)
        return dataclasses.replace(preset, ramp=dataclasses.replace(r, rate=None, concurrency=(), search=search))
    start = r.concurrency[0]
    search = SearchSpec(start=start, max=max(start, max_concurrency))
    return dataclasses.replace(preset, ramp=dataclasses.replace(r, concurrency=(start,), durations_s=None, search=search))
