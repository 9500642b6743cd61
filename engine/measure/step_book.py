"""Step bookkeeping: which step a request belongs to, the open accumulators, the results.

The preset runner opens and closes its own steps; in live mode (the TUI) every period held at
one concurrency is a step, rolled when the operator changes it. Results land in `steps` (or
`probe_result`), and each is told as the events `step closed` and `step final`
(engine/measure/hooks.py StepHooks: the engine logs it and rewrites summary.json).

A request belongs to the step whose load sent it: `stamp_at(t)` answers for its send time, or
for its intended send time in open loop (a send held at the cap is still the step's that
scheduled it). A closed step whose own requests are still out stays fed (`pending`); when the
last of them ends, its recorded result is completed with their true values (`final`).
"""

from __future__ import annotations

import bisect
import time
from typing import Callable, Sequence

from ..constants import MIN_LIVE_STEP_S
from ..telemetry.types import ServerSample
from . import records
from .accumulator import WARMUP, StepAccumulator, StepJudge
from .gap_batch import GapBatch
from .hooks import StepHooks
from .own_requests import whole_verdict
from .records import Clock, RequestRecord
from .slo import Slo
from .step_result import DEFAULT_PERCENTILES, BreakResult, StepResult

LIVE = "live"
PROBE = "probe"


def _same_load(a: StepAccumulator, b: StepAccumulator) -> bool:
    """Both steps hold one load: concurrency, shape and workload."""
    return (a.concurrency, a.mode, a.rate, a.arrival, a.workload) == (b.concurrency, b.mode, b.rate, b.arrival, b.workload)


class StepBook:
    def __init__(self, clock: Clock, hooks: StepHooks | None = None, judge: StepJudge | None = None) -> None:
        self.clock = clock
        self.judge = judge  # the verdicts each step asks (engine/rules/verdicts.py STEP_JUDGE; None: steps are not judged)
        self.percentiles: tuple[float, ...] = DEFAULT_PERCENTILES  # what each step's result carries (`--percentiles`)
        # what it tells (engine/measure/hooks.py): a step recorded as it closed, and completed
        # with its late requests' truth
        self.hooks = hooks if hooks is not None else StepHooks()
        self.index = 0
        self.open: list[StepAccumulator] = []
        self.pending: list[StepAccumulator] = []  # closed, own requests still out
        self._history: list[StepAccumulator] = []  # every step opened, in order (stamp_at)
        self._recorded: set[int] = set()  # indexes of recorded steps (their final replaces them)
        self.current: StepAccumulator | None = None  # the step a request sent now belongs to
        self.live: StepAccumulator | None = None  # the live-mode step, when one is open
        self.live_result: StepResult | None = None  # its result, refreshed once a second
        self.steps: list[StepResult] = []
        self.probe_result: StepResult | None = None
        self.break_result: BreakResult | None = None
        self.search: dict | None = None  # a knee search's answer (engine/rules/knee_search.py), for summary.json
        # a driver's verdicts over its steps, judged again when a step's final figures land
        # (engine/run/preset_runner.py: the break and last good, a search's answers)
        self.rejudge: Callable[[], None] | None = None
        self.cause: str | None = None  # what the server said limits it, beside the break or the knee (a preset's run)
        self.plateau_gain: float | None = None  # the knee's (engine/rules/verdicts.py): a preset's [stop] plateau_gain, else the default
        self.default_phase = LIVE
        self.slo: Slo | None = None  # per-request SLO bounds: steps count their goodput
        self.workload: dict | None = None  # the workload now (WorkloadConfig.describe()): steps carry it
        # the load shape now (the engine keeps these current): mode, rate/speed, arrival
        self.shape: tuple[str, float | None, str | None] = ("concurrency", None, None)

    # -- requests -----------------------------------------------------------------------
    def stamp(self, concurrency: int, t: float | None = None) -> tuple[int, int, str]:
        """(step index, concurrency, phase) for a request sent now, or (open loop) intended
        at `t`: the step open at that time, in warm-up or measuring then."""
        cur = self.current
        if t is not None and (cur is None or t < cur.t_open or (cur.t0 is not None and t < cur.t0)):
            acc = self._step_at(t)
            if acc is not None:
                return acc.index, concurrency, (acc.phase if acc.t0 is not None and t >= acc.t0 else WARMUP)
        if cur is None:
            return self.index, concurrency, self.default_phase
        return cur.index, concurrency, cur.send_phase

    def _step_at(self, t: float) -> StepAccumulator | None:
        """The step that was open at time t (None: none was)."""
        h = self._history
        i = bisect.bisect_right([a.t_open for a in h], t) - 1
        if i < 0:
            return None
        acc = h[i]
        return acc if acc.t_end is None or t <= acc.t_end else None

    def _fed(self) -> list[StepAccumulator]:
        return self.open + self.pending if self.pending else self.open

    def on_send(self, rec: RequestRecord) -> None:
        for acc in self._fed():
            acc.on_send(rec)

    def on_first(self, rec: RequestRecord) -> None:
        for acc in self._fed():
            acc.on_first(rec)

    def on_tokens(self, t: float, n: int) -> None:
        for acc in self.open:
            acc.on_tokens(t, n)

    def on_token_reads(self, ts: Sequence[float], ns: Sequence[int]) -> None:
        for acc in self.open:
            acc.on_token_reads(ts, ns)

    def on_gaps(self, gaps: GapBatch) -> None:
        for acc in self.open:
            acc.on_gaps(gaps)

    def remove_gaps(self, gaps: GapBatch) -> None:
        """A request failed: its gaps leave every window that counted them."""
        for acc in self._fed():
            acc.remove_gaps(gaps)

    def take_remote_cuts(self, t: float, cuts: list) -> None:
        """--workers: the window figures workers took at the close `t` of the requests out at
        it (engine/load/worker_messages.py Cut: rid, TPOT, own ITL p99, tokens by then), for
        the step that closed at `t` to read at its cut, as one process reads the chunk times."""
        for acc in self._fed():
            if acc.t_end == t:
                acc.take_remote_cuts(cuts)

    def remove_tokens(self, credits: list[tuple[float, int]]) -> None:
        """A request failed: its tokens leave the output tok/s of every window that counted
        them (they are its failed_output_tok_s)."""
        if credits:
            for acc in self._fed():
                acc.remove_tokens(credits)

    def on_end(self, rec: RequestRecord) -> None:
        """A request ended. Its one SLO verdict first (`rec.slo_met`): its own step's, on
        what it did in that step's window; a request no step fed now owns (a warm-up send,
        one of a step already final), on its whole record. Then every window counts its end."""
        fed = self._fed()
        owner = next((acc for acc in fed if acc.holds(rec)), None)
        if owner is not None:
            owner.on_end(rec)
        if rec.slo_met is None and rec.status == records.OK and self.slo is not None and self.judge is not None and self.slo.per_request:
            rec.slo_met = whole_verdict(self.judge, self.slo, rec)
        for acc in fed:
            if acc is not owner:
                acc.on_end(rec)
        if self.pending:
            self._settle(time.perf_counter())

    def on_lane_first(self, rec: RequestRecord) -> None:
        for acc in self.open:
            acc.on_lane_first(rec)

    def on_lane_gaps(self, gaps: GapBatch) -> None:
        for acc in self.open:
            acc.on_lane_gaps(gaps)

    def on_held(self, t_intended: float | None = None) -> None:
        for acc in self.open:
            acc.note_held(t_intended)

    def abandon_held(self, times: list[float], now: float | None = None) -> None:
        """Held sends the open loop gave up (left, paused): censored as aborted."""
        now = now if now is not None else time.perf_counter()
        for acc in self._fed():
            acc.abandon_held(times, now)
        if self.pending:
            self._settle(now)

    def _settle(self, now: float) -> None:
        """Closed steps whose last own request ended: complete their recorded result."""
        done = [acc for acc in self.pending if not acc.outstanding]
        for acc in done:
            self.pending.remove(acc)
            if acc.index in self._recorded:
                self._finalize(acc, now)

    def _finalize(self, acc: StepAccumulator, now: float) -> None:
        res = acc.result(now)
        if res.phase == PROBE and self.probe_result is not None and self.probe_result.index == acc.index:
            self.probe_result = res
        else:
            for i, old in enumerate(self.steps):
                if old.index == acc.index:
                    self.steps[i] = res
                    break
            else:
                return
        if self.rejudge is not None:
            self.rejudge()
        self.hooks.final.fire(res)

    def finalize_all(self, now: float | None = None) -> None:
        """The run ends: what is still out stays censored at its age now (the run ended it)."""
        now = now if now is not None else time.perf_counter()
        for acc in list(self.pending):
            acc.abandon_outstanding(now)
        self._settle(now)

    def each_second(self, now: float, server: ServerSample | None, power_w: float | None) -> None:
        for acc in self.open:
            # a sample taken before the step measured (e.g. before an abort) is not its own
            if server is not None and server.running is not None and acc.t0 is not None and server.t >= acc.t0:
                acc.note_server_running(server.running)
            if server is not None:
                acc.note_prefix(server.prefix_queries_total, server.prefix_hits_total)
                acc.note_server(server)
            acc.note_power(power_w)
        # the step measured now: the live one, or a preset's / a search's (the screen's * row)
        measured = self.live or self.current
        self.live_result = measured.result(now) if measured is not None else None

    # -- steps --------------------------------------------------------------------------
    def open_step(self, concurrency: int, phase: str, t: float | None = None, *, measure: bool = True, warmup_requests: int = 0,
                  in_flight: int = 0) -> StepAccumulator:
        """A new step; requests sent from now on carry its index. `in_flight`: the load's
        requests on the wire (or waiting at the cap) now, all sent before this step: its
        turnover waits for them to end, unless the step before it held the same load (a
        step measured again): then only for those of them sent at another load."""
        self.index += 1
        mode, rate, arrival = self.shape
        prev = self._history[-1] if self._history else None
        acc = StepAccumulator(
            self.index, concurrency, phase, t if t is not None else time.perf_counter(), self.clock,
            measure=measure, warmup_requests=warmup_requests, slo=self.slo,
            mode=mode, rate=rate, arrival=arrival, workload=self.workload, judge=self.judge,
        )
        acc.percentiles = self.percentiles
        acc.warmup_on_first = phase == PROBE  # a probe measures once the server answers again
        if prev is not None and phase != PROBE and prev.phase == phase and _same_load(prev, acc):
            acc.level_index, acc.foreign = prev.level_index, max(0, prev.foreign - prev.foreign_ended)
        else:
            acc.foreign = in_flight
        self.open.append(acc)
        self._history.append(acc)
        self.current = acc
        return acc

    def close_step(self, acc: StepAccumulator, now: float | None = None) -> StepResult:
        now = now if now is not None else time.perf_counter()
        acc.close(now)
        acc.cut()  # own requests still out: their figures inside the window, taken now
        res = acc.result(now)
        acc.took_closing()
        if acc in self.open:
            self.open.remove(acc)
            if acc.outstanding:
                self.pending.append(acc)
        if self.current is acc:
            self.current = None
        return res

    def record(self, res: StepResult) -> None:
        self._recorded.add(res.index)
        if res.phase == PROBE:
            self.probe_result = res
        else:
            self.steps.append(res)
        self.hooks.closed.fire(res)
        if not res.final:  # its late requests may all have ended between the close and now
            acc = next((a for a in reversed(self._history) if a.index == res.index), None)
            if acc is not None and acc.closed and not acc.outstanding and acc not in self.pending:
                self._finalize(acc, time.perf_counter())

    # -- live mode ----------------------------------------------------------------------
    def open_live(self, concurrency: int, probing: bool) -> None:
        """A live step at the current load shape (`shape`; a probe is closed loop at C=1)."""
        if probing:  # the first request after an abort is its warm-up
            self.live = self.open_step(concurrency, PROBE, measure=False, warmup_requests=1)
        else:
            self.live = self.open_step(concurrency, LIVE)
        self.live_result = None

    def close_live(self, now: float) -> None:
        acc = self.detach_live(now)
        if acc is not None:
            self.finish_live(acc, now)

    def detach_live(self, now: float) -> StepAccumulator | None:
        """End the live step's window at `now` (new requests no longer carry it) but keep it
        fed: what happened before `now` may still be reported (engine/load/worker_pool.py). finish_live
        records it."""
        acc, self.live = self.live, None
        self.live_result = None
        if acc is None:
            return None
        acc.close(now)
        if self.current is acc:
            self.current = None
        return acc

    def finish_live(self, acc: StepAccumulator, now: float) -> None:
        """Record the live step: every period held at one load has its row; one shorter than
        MIN_LIVE_STEP_S is marked short (no point of the curve, judged by no rule)."""
        res = self.close_step(acc, now)
        if res.requests_sent or res.completed or res.failed or res.output_throughput > 0:
            res.short = acc.short = res.duration_s < MIN_LIVE_STEP_S
            self.record(res)

    def live_matches(self, concurrency: int, probing: bool) -> bool:
        live = self.live
        mode, rate, _ = self.shape
        return (
            live is not None
            and live.concurrency == concurrency
            and live.phase == (PROBE if probing else LIVE)
            and (live.mode, live.rate) == (mode, rate)
            and live.workload == self.workload
        )
