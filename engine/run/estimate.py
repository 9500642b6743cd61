"""How long a preset runs on the built-in sim, and where it is expected to break there: the
figure `redline presets`, the TUI's `p` picker and `redline run ... --headless` print.

The run is played on the sim's own performance model (engine/sim/profiles.py): for each
step, the batch the server runs (C, or its cap), the tok/s it gives and how long one request
takes there, then the runner's own rules: warm-up, the hold (lengthened for `min_requests`
completions only when they can come by `max_hold_s`: engine/run/preset_runner.py
completions_can_come), the stop rules that fire on a server with no noise (plateau, collapse,
a queue's TTFT past p99_ttft_ms; engine/rules/verdicts.py), a knee search's points (engine/rules/knee_search.py
fed the model's steps), and the C=1 probe (probe_s, or its first request's first token if that
comes later). Against another server the same numbers are only a floor and a ceiling
(Preset.duration_bounds).

A profile with faults (SimProfile.has_faults) is forecast only where its knobs know the
answer (`_faults`): a crash above a load (server_gone), requests refused in bulk (503s above
overload_above, shed past the queue's length: 20 in a row end the step as errors within its
warm-up, before a sustained crash), a hang after N completions or a stream that stops
(stalled: the probe stalls too), and the share of requests that fail at random (errors,
disconnects, half-way failures) judged by the errors rule, counted out of throughput as the
run counts them. A share
within half the limit of it is no forecast: "no forecast on fragile (...)". Never `None`:
a break with no good step reads "no step passed".
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..constants import PROBE_MAX_HOLD_S, STALL_S
from ..measure.step_result import StepResult
from ..preset import Preset, StepPlan
from ..rules.breaks import Place, make_break
from ..rules.knee_search import KneeSearch
from ..rules.verdicts import StopRules
from ..sim.profiles import SimProfile, get_profile

SLACK = 0.15  # the printed range: the model's figure -5 % ... +15 % (steadiness, the loop, start-up)
START_S = 2.0  # detection and calibration before the first step


@dataclass(frozen=True)
class Estimate:
    seconds: float  # the whole run on the built-in sim, probe included
    steps: int  # how many steps (or search points) it measures
    breaks: str | None  # "plateau at C=192" when a rule is expected to fire; None: runs every step
    unknown: str | None = None  # why the profile's faults leave the answer unknown ("no forecast")

    def describe(self, profile: str = "healthy") -> str:
        """"7.3-8.9 min on the built-in sim (healthy; 5 steps; expected: plateau at C=192, ...)"."""
        lo, hi = self.bounds()
        span = f"{lo / 60:.1f}-{hi / 60:.1f} min" if hi >= 120 else f"{lo:.0f}-{hi:.0f} s"
        if self.unknown:
            return f"at most {span} on the built-in sim ({profile}; no forecast: {self.unknown})"
        what = f"expected: {self.breaks}" if self.breaks else "no rule expected to fire"
        return f"{span} on the built-in sim ({profile}; {self.steps} step{'s' if self.steps != 1 else ''}; {what})"

    def bounds(self) -> tuple[float, float]:
        return self.seconds * (1 - SLACK / 3), self.seconds * (1 + SLACK) + 5.0


def _model_step(p: SimProfile, plan: StepPlan, input_len: int, output_len: int) -> tuple[StepResult, float, float]:
    """The sim's steady state at plan's load: (its step, one request's time at the client
    (queue included), the ITL)."""
    c = plan.concurrency
    if plan.rate is not None:  # open loop: the batch is what the rate keeps in flight (Little)
        itl = p.token_interval(max(1, p.running_cap))
        d1 = output_len * p.token_interval(1)
        c = max(1, min(p.running_cap, round(plan.rate * d1)))
    b = max(1, min(c, p.running_cap))
    itl = p.token_interval(b)
    prefill = input_len * p.prefill_per_token_s * p.time_scale
    d_server = prefill + output_len * itl
    d_client = d_server * max(1.0, c / b)  # beyond the cap, a request waits for a slot
    wait = d_client - d_server
    tps = b / itl if itl > 0 else 0.0
    ttft_p99 = (wait + prefill) * 1000.0
    step = StepResult(concurrency=c, duration_s=plan.hold_s, completed=0, failed=0, output_throughput=tps, input_throughput=0.0,
                      request_throughput=0.0, p99_ttft_ms=ttft_p99, p99_itl_ms=itl * 1000.0, steady=True,
                      output_throughput_se=0.0,  # a model's step: steady, its noise known (none), so it decides
                      mode="rate" if plan.rate is not None else "concurrency", request_rate=plan.rate)
    return step, d_client, itl


def _hold(plan: StepPlan, d: float, conc: int) -> float:
    """The runner's hold at a load whose requests take `d` s (engine/run/preset_runner.py _measure)."""
    if plan.min_requests <= 0:
        return plan.hold_s
    when = d * (1 + plan.min_requests / max(1, conc))  # the min_requests-th own completion
    if when > plan.max_hold_s:
        return plan.hold_s  # they cannot come by max_hold_s: not waited for
    return min(plan.max_hold_s, max(plan.hold_s, when))


def estimate(preset: Preset, profile: SimProfile | None = None) -> Estimate | None:
    """The run on the sim (the healthy profile unless given); None for a trace replay (its
    length is the trace's: Preset.duration_bounds says it)."""
    p = profile or get_profile("healthy")
    r = preset.ramp
    if r.speed is not None:
        return None
    wl = preset.workload
    input_len = wl.input_len or 32
    output_len = wl.output_len or p.default_max_tokens
    rules = StopRules(preset.stop, slo=preset.slo)
    total, history, breaks, unknown = START_S, [], None, None
    if r.search is not None:
        total, n = _search(preset, p, input_len, output_len, total)
        why = f"{p.name}'s faults decide where a search's points break" if p.has_faults else None
        return Estimate(total + _probe(preset, p, input_len), n, None, why)
    done = 0.0  # requests completed so far (a hang after N)
    probe = True
    for plan in r.steps():
        step, d, _ = _model_step(p, plan, input_len, output_len)
        hold = plan.hold_s if plan.warmup_s == 0 and plan.min_requests == 0 else _hold(plan, d, step.concurrency)
        fault = _faults(p, plan, step, d, hold, done, output_len, rules) if p.has_faults else None
        if fault is not None and fault[0] == "unknown":
            unknown = f"{p.name}'s {fault[1]}"
            total += plan.warmup_s + hold
            history.append(step)
            continue
        if fault is not None and fault[0] in ("server_gone", "stalled", "refused"):
            reason, at_s = fault[1], fault[2]
            total += at_s
            gone = make_break(reason, "", Place.of(step), rules.last_good(history))
            breaks = f"{gone.reason} at {gone.where}, {gone.good_text}"
            probe = reason != "server_gone"
            history.append(step)
            if reason == "stalled":
                total += preset.stop.stall_s or STALL_S  # the probe stalls as well
            break
        if fault is not None:  # a share of requests fails: out of throughput, judged by the errors rule
            step = fault[1]
        total += plan.warmup_s + hold
        done += hold * step.concurrency / max(d, 1e-9)
        br = rules.evaluate(history, replace(step, duration_s=hold))
        history.append(step)
        if br is not None:
            breaks = f"{br.reason} at {br.where}, {br.good_text}"
            break
    probe_s = _probe(preset, p, input_len) if probe and not (breaks and breaks.startswith("stalled")) else 0.0
    return Estimate(total + probe_s, len(history), None if unknown else breaks, unknown)


def _faults(p: SimProfile, plan: StepPlan, step: StepResult, d: float, hold: float, done: float, output_len: int,
            rules: StopRules) -> tuple | None:
    """What the profile's fault knobs do at this step (see the module docstring):
    ("server_gone" | "stalled" | "refused", the break's reason, seconds into the step),
    ("failing", the step with its failures), ("unknown", why), or None (nothing here)."""
    c, step_s = step.concurrency, plan.warmup_s + hold
    if p.crash_above is not None and c > p.crash_above:
        return "server_gone", "server_gone", 0.5
    # refused at once in bulk (503 above overload_above, shed past the queue): 20 in a row end
    # the step within its warm-up, before a sustained crash comes
    if (p.overload_above is not None and c > p.overload_above and p.overload_reject_fraction >= 0.5) or (
            p.max_queued_requests is not None and c > p.running_cap + p.max_queued_requests):
        return "refused", "errors", 0.5
    if p.crash_sustained_above is not None and c > p.crash_sustained_above and step_s > p.crash_sustain_s:
        return "server_gone", "server_gone", p.crash_sustain_s + 0.5
    if p.stall_after_tokens is not None and p.stall_after_tokens < output_len:
        return "stalled", "stalled", (p.stall_after_tokens / output_len) * d + STALL_S
    if p.hang_after is not None:
        per_s = c / max(d, 1e-9)
        if done + per_s * step_s >= p.hang_after:
            return "stalled", "stalled", max(0.0, (p.hang_after - done) / per_s) + STALL_S
    share = p.error_500_rate + p.error_429_rate + p.disconnect_rate + p.malformed_rate + p.fail_midstream_rate
    if p.overload_above is not None and c > p.overload_above:  # a few refused: a share of them
        share += (1 - share) * p.overload_reject_fraction
    if share <= 0:
        return None
    limit = rules.spec.error_rate
    if limit is not None and abs(share - limit) < max(limit, 0.01) / 2:
        return "unknown", f"{share * 100:.0f} % of requests fail at {step.load}, too near the errors limit {limit * 100:g} % to tell"
    ok = 100
    failed = round(ok * share / (1 - share)) if share < 1 else ok * 100
    return "failing", replace(step, completed=ok if share < 1 else 0, failed=failed, output_throughput=step.output_throughput * (1 - share))


def _search(preset: Preset, p: SimProfile, input_len: int, output_len: int, total: float) -> tuple[float, int]:
    r, sp = preset.ramp, preset.ramp.search
    assert sp is not None
    gain = preset.stop.plateau_gain if preset.stop.plateau_gain is not None else 0.05
    search = KneeSearch(sp.start, sp.max, resolution=sp.resolution, factor=sp.factor, plateau_gain=gain)
    n = 0
    while (c := search.next()) is not None and n < 64:
        plan = StepPlan(c, r.warmup_s, r.hold_s, r.min_requests, r.max_hold_s, rate=sp.rate_of(c))
        step, d, _ = _model_step(p, plan, input_len, output_len)
        total += min(plan.warmup_s, d) + _hold(plan, d, step.concurrency)  # a point warms up until turnover
        search.observe(c, step)
        n += 1
    return total, n


def _probe(preset: Preset, p: SimProfile, input_len: int) -> float:
    """The C=1 probe: probe_s, or until its first request's first token when that comes later
    (its prefill and one decode step)."""
    if preset.after.probe_s <= 0:
        return 0.0
    first = input_len * p.prefill_per_token_s * p.time_scale + p.token_interval(1)
    return min(max(preset.after.probe_s, first), PROBE_MAX_HOLD_S)


def duration_text(preset: Preset, sim_profile: str | None = "healthy") -> str:
    """How long a run of `preset` takes, in one line: on the built-in sim (`sim_profile`),
    the estimate above and where it is expected to break; against another server (None), the
    ramp's floor and ceiling."""
    if sim_profile is not None:
        est = estimate(preset, get_profile(sim_profile))
        if est is not None:
            return est.describe(sim_profile)
    lo, hi = preset.duration_bounds()
    span = f"{lo:.0f} s" if round(lo) == round(hi) else f"{lo:.0f}-{hi:.0f} s"
    return f"{span} unless a rule fires"
