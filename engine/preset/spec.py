"""What a preset is: the spec dataclasses, each key declared on its field (keys.py `setting`).

Pure data: no parsing, no I/O, and nothing from the engine runtime (the runner imports
presets, never the reverse). A Preset comes from parse.py (a TOML file) or
engine/report/preset_from.py (a recorded session); the runner (engine/run/preset_runner.py)
follows `Preset.ramp.steps()`, the breaker (engine/rules/verdicts.py) applies `Preset.stop`.
A field declared with `setting` is a preset key: its kind, default, meaning (docs/presets.md's
tables), CLI flag and the comment the writer puts above it, in one place. The [ramp] keys that
choose a form (start, factor, step, max, mode, resolution, over) are declared in
ramp_forms.py, the judging tables' ([stop], [slo], [guard], [gate]) in tables.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from ..client.api_formats import APIS
from ..constants import (
    COUNT_MAX_HOLD_S,
    DEFAULT_HOLD_S,
    DEFAULT_INPUT_LEN,
    DEFAULT_MAX_HOLD_FACTOR,
    DEFAULT_MIN_REQUESTS,
    DEFAULT_OUTPUT_LEN,
    DEFAULT_WARMUP_S,
    MAX_CONCURRENCY,
    MAX_COUNT,
    MAX_REPEATS,
    MAX_SECONDS,
    MAX_SEED,
    MAX_STEPS,
    MAX_TURNS,
    STEADY_MIN_S,
    TRACE_TAIL_S,
)
from ..measure.slo import Slo
from ..rules.guard import GuardSpec
from ..rules.verdicts import StopSpec  # the stop rules own their spec (a preset's [stop])
from .fields import Ctx, PresetError
from .keys import NO_DEFAULT, Bool, Custom, Int, OneOf, Seconds, Text, setting

__all__ = [
    "COUNT_MAX_HOLD_S", "DEFAULT_HOLD_S", "DEFAULT_MAX_HOLD_FACTOR", "DEFAULT_MIN_REQUESTS", "DEFAULT_WARMUP_S",
    "MAX_CONCURRENCY", "MAX_REPEATS", "MAX_SECONDS", "MAX_STEPS", "TRACE_TAIL_S",
    "AfterSpec", "Preset", "PresetError", "RampSpec", "SearchSpec", "StepPlan", "StopSpec", "TargetSpec", "WorkloadSpec",
    "as_search",
]

_API = OneOf(APIS, f"one of {', '.join(APIS)}")
_LENGTH = Int(hi=MAX_COUNT)


@dataclass(frozen=True)
class TargetSpec:
    url: str | None = setting(  # normalised by engine/client/target.py validate_url: scheme://host[:port]
        None, Custom(Ctx.url, "string"),
        "`http(s)://HOST[:PORT]`, a trailing `/` or `/v1` is fine; no other path, no query, no `user:password`: "
        "the same check as `--url`. `--url` overrides it", doc_default="none (built-in sim)", flag="--url")
    api: str | None = setting(  # as written in [target].api (an alias of [workload].api)
        None, _API, "accepted as an alias of `[workload].api`; if both are given they must agree")


@dataclass(frozen=True)
class WorkloadSpec:
    api: str = setting(
        "chat", _API, "`chat` (`/v1/chat/completions`), `completions` (`/v1/completions`) or `generate` "
        "(SGLang native `/generate`)", flag="--api", always=True)
    dataset: str = setting(
        "random", Custom(Ctx.dataset, "string"),
        "`random` (synthetic prompts of `input_len` tokens), `sharegpt:PATH` (a ShareGPT JSON file, read as "
        "bench_serving reads it: each request asks its reply's length, so `output_len` does not apply; `redline run "
        "--sharegpt-output-len N` fixes it, see [ShareGPT](cli.md#sharegpt)), `jsonl:PATH` (one prompt per line) or "
        "`prefix:groups=G,prefix_len=P,suffix_len=S` (shared prefixes, as `--dataset`). A relative `PATH` is relative "
        "to the preset file's folder; `~` is expanded; the file must exist", flag="--dataset", always=True)
    input_len: int = setting(DEFAULT_INPUT_LEN, _LENGTH, "prompt tokens per request (random dataset)",
                             flag="--input-len", always=True)
    output_len: int = setting(
        DEFAULT_OUTPUT_LEN, _LENGTH,
        "`max_tokens` per request, generated in full (`ignore_eos`; not with `ignore_eos = false`)",
        flag="--output-len", always=True)
    model: str | None = setting(None, Text(), "the model name sent in OpenAI requests",
                                doc_default="what the server serves", flag="--model")
    turns: int = setting(  # multi-turn: turns per session (concurrency then counts sessions)
        1, Int(hi=MAX_TURNS),
        "multi-turn: turns per session, each with the answers so far (concurrency then counts sessions)",
        flag="--turns", comment="multi-turn: C counts sessions; think_s: the pause between a session's turns")
    think_s: float = setting(  # multi-turn: pause between an answer and the next turn
        0.0, Seconds(zero_ok=True),
        "multi-turn: pause between an answer and the next turn (only with `turns` > 1)", flag="--think-s")
    trace: str | None = setting(  # a Mooncake JSONL trace (absolute path), replayed per [ramp].speed
        None, Custom(Ctx.trace, "string"),
        "a Mooncake JSONL trace replayed open-loop, once per `[ramp].speed` factor (relative to the preset's folder)",
        flag="--trace", comment="trace: Mooncake JSONL, replayed once per [ramp].speed factor")
    # request shaping (engine/workload/request_shape.py; the CLI's flags win): fixed when a session
    # starts, so a running session refuses a preset that sets it otherwise (workload_fit.py)
    headers: tuple[tuple[str, str], ...] = setting(
        (), Custom(Ctx.headers, "table of strings", write=lambda v: dict(cast("tuple[tuple[str, str], ...]", v))),
        'headers sent on every request, `headers = {"X-Tenant" = "a"}` (as `-H`; a flag\'s header replaces the one of '
        "its name); a credential's value (`Authorization`, `X-Api-Key`, `Cookie`, names with `token`, `secret`, "
        "`key`, `auth`, `password`) is never shown or logged, and `preset-from` leaves it out. Keep such presets out "
        "of shared folders: the file itself holds the value",
        flag="--header", comment="headers: sent on every request", shaping=True, repr=False)
    extra_body: str = setting(  # a JSON object's text, merged into every body
        "", Custom(Ctx.extra_body, "table", write=lambda v: json.loads(cast(str, v))),
        "merged into every request body, `extra_body = {temperature = 0.5, top_p = 0.9}` (as `--extra-body`, whose "
        "keys win key by key); not the keys redline writes; `/generate`: its `sampling_params` merge into redline's",
        doc_default="none", flag="--extra-body", comment="extra_body: merged into every request body", shaping=True)
    ignore_eos: bool = setting(
        True, Bool(), "`false`: outputs end at EOS, at most `output_len` (as `--no-ignore-eos`)", flag="--no-ignore-eos",
        comment="ignore_eos = false: the server may stop at EOS (output lengths from its usage)", shaping=True)
    random_range_ratio: float = setting(
        0.0, Custom(Ctx.range_ratio, "number 0 <= R < 1", write=lambda v: float(cast(float, v))),
        "random dataset: each request's input and output lengths drawn from [L·(1−R), L·(1+R)] (as "
        "`--random-range-ratio`; not with another dataset or a trace)", flag="--random-range-ratio",
        comment="random_range_ratio: lengths drawn per request from [L*(1-R), L*(1+R)]", shaping=True)
    seed: int | None = setting(  # None: --seed, else 0
        None, Int(lo=0, hi=MAX_SEED), "the workload's randomness: prompts, random lengths, arrivals (`--seed` wins)",
        doc_default="`0`", flag="--seed")


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


_FORM = ""  # a key the [ramp] forms read themselves (ramp_forms.py); the docs describe it beside its form


@dataclass(frozen=True)
class RampSpec:
    concurrency: tuple[int, ...] = setting(
        NO_DEFAULT, None, "the steps, one concurrency each, in order", row=_FORM, doc_type="list of integers 1..100000")
    warmup_s: float = setting(DEFAULT_WARMUP_S, Seconds(zero_ok=True),
                              "run at the new concurrency without measuring, so the batch fills")
    hold_s: float = setting(DEFAULT_HOLD_S, Seconds(), "then measure for at least this long")
    min_requests: int = setting(
        DEFAULT_MIN_REQUESTS, Int(hi=MAX_COUNT),
        "if fewer requests than this completed within `hold_s`, keep measuring until they have, when they can come "
        "by `max_hold_s` (a 2048-token answer that outlives every step is not waited for) ...")
    max_hold_s: float = setting(
        DEFAULT_HOLD_S * DEFAULT_MAX_HOLD_FACTOR, Seconds(),
        "... but measure no longer than this (a step whose tok/s has not settled is also held up to this)",
        doc_type="seconds >= `hold_s`", doc_default=f"`{DEFAULT_MAX_HOLD_FACTOR:g} x hold_s`")
    # Replay mode: step i lasts exactly durations_s[i] seconds, all of it measured,
    # with no warm-up and no min_requests extension. None = a normal ramp.
    durations_s: tuple[float, ...] | None = setting(None, None, "replay mode, see below", doc_type="list of seconds > 0")
    search: SearchSpec | None = None  # mode = "search": steps are chosen as results come
    # open loop ([ramp] rate = [...]): one step per rate, at most max_concurrency in flight.
    # In replay mode (durations_s) rate sits beside concurrency, one entry per step, and a
    # rate of 0 means that step held the concurrency (a session that switched modes).
    rate: tuple[float, ...] | None = setting(None, None, "open loop: one step per rate, in req/s", row=_FORM,
                                             doc_type="list of req/s")
    arrival: str = setting("poisson", Custom(Ctx.arrival, "string"), "the open loop's arrivals: poisson, constant or "
                           "gamma:K", row=_FORM, flag="--arrival")
    max_concurrency: int | None = setting(  # the in-flight cap of rate steps (None: --max-concurrency)
        None, Int(hi=MAX_CONCURRENCY), "the open loop's in-flight cap", row=_FORM, doc_default="`--max-concurrency`")
    speed: tuple[float, ...] | None = setting(  # a trace replay ([workload].trace) per speed factor
        None, None, "one replay of the trace per speed factor", row=_FORM, doc_type="list of numbers > 0")
    # replay mode: the workload of each step (None: [workload]'s), for sessions that changed it live
    workloads: tuple[dict[str, object] | None, ...] | None = setting(
        None, None, "replay mode: each step's workload", row=_FORM, doc_type="list of tables")
    # looking inside the server (engine/run/server_ops.py): the loads (C, or req/s of a rate
    # ramp) at which the profiler captures, and a prefix-cache flush before each step
    profile: tuple[float, ...] = setting(
        (), None, "capture the server's profiler during the steps at these loads, from when the step measures for "
        "`--profile-s` or until it ends (see [Looking inside the server](inside-the-server.md))",
        doc_type="list of loads (C; req/s in a rate ramp)", doc_default="`[]`",
        comment="profile: the loads at which the server's profiler captures")
    flush_cache: bool = setting(
        False, Bool(), "before each step and before the probe: drain the load to zero, then flush the server's prefix "
        "cache (`--flush-cache` does the same); the drain belongs to no step", flag="--flush-cache",
        comment="flush_cache: drain to zero and flush the prefix cache before each step")
    # replay mode: which steps were C=1 probes (`a` inside the session): each aborts what is
    # in flight before it, as the original did, where a plain C=1 step would let it drain in
    probes: tuple[bool, ...] | None = setting(None, None, "replay mode: which steps are C=1 probes", row=_FORM,
                                              doc_type="list of booleans")
    # whole measured seconds a step needs before it can be called steady (engine/measure/accumulator.py):
    # not a preset key; a program may shorten it (a test on a sim whose decode steps are 10-25
    # ms, where 2 s hold a hundred or more of them: tests/helpers/redline.py steady_in)
    steady_min_s: int = STEADY_MIN_S
    # [ramp] num_requests = N: each step ends once N of its own requests completed, instead of a
    # hold (hold_s is then 0 and min_requests N; max_hold_s still caps it)
    num_requests: int | None = setting(
        None, Int(hi=MAX_COUNT),
        "instead of a hold (`hold_s`, `min_requests`: then errors): measure until this many of the step's own "
        f"requests completed, steady or not, at most `max_hold_s` (default {COUNT_MAX_HOLD_S:g} s); bench_serving's "
        "`--num-prompts` per step. Not with `mode = \"search\"` or a replay")

    def steps(self) -> list[StepPlan]:
        """The per-step plan the runner follows, in order."""
        if self.speed is not None:
            return [StepPlan(0, self.warmup_s, self.hold_s, 0, self.max_hold_s, speed=x, steady_min_s=self.steady_min_s) for x in self.speed]
        if self.durations_s is not None:
            rates = self.rate or (0.0,) * len(self.durations_s)
            probes = self.probes or (False,) * len(self.durations_s)
            return [
                StepPlan(c, 0.0, d, 0, d, rate=r or None, probe=p)
                for c, d, r, p in zip(self.concurrency, self.durations_s, rates, probes, strict=False)
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
    probe_s: float = setting(
        0.0, Seconds(zero_ok=True), "after the ramp (broken or not), abort everything in flight and measure a single "
        "request stream (C=1) for this long; 0 = no probe", always=True, comment="probe_s: a C=1 probe at the end; 0 = none")


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
    repeats: int = setting(  # the whole ramp run this many times (docs/comparing.md#repeats-and-intervals)
        1, Int(hi=MAX_REPEATS),
        "run the whole ramp this many times (`redline run`, and each configuration of `redline sweep`): per load a "
        "mean, a 95 % interval and a CV, and comparisons that say `better`, `worse` or `no clear difference` "
        "([Repeats and intervals](comparing.md#repeats-and-intervals-is-a-difference-real)); `--repeats N` overrides "
        "it", flag="--repeats", comment="repeats: the whole ramp run this many times (redline run, a sweep's configurations)")

    def peak(self, cap: int = 0) -> int:
        """The most requests in flight the run is set to reach (what `--workers auto` sizes
        for): a closed loop's top step, a search's max; an open loop's in-flight cap
        ([ramp].max_concurrency, else `cap`, one given at the command line), or 0: its
        in-flight is the rate times the latency, unknown before the run."""
        r = self.ramp
        if r.search is not None:
            return cap if r.search.rate_unit is not None else r.search.max
        open_loop = r.rate is not None or r.speed is not None
        return max(max(r.concurrency, default=0), (r.max_concurrency or cap) if open_loop else 0)

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

