"""A step's own requests (engine/measure/accumulator.py): those sent at its load after its warm-up, held
sends of an open loop included. Their counts, their TTFT/E2E/TPOT (censored while they wait),
what each did inside the step's window once it closed (WindowCut), the warm-up sends that
stand in when none of its own went, and their SLO verdicts (engine/rules/verdicts.py judge_request).
StepAccumulator is an OwnRequests; the window's figures (tokens, ITL) are its own.
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, Sequence

from . import records
from .histogram import Digest
from .records import RequestRecord, quantile
from .slo import Slo

WARMUP = "warmup"
PROBE = "probe"


class StepJudge(Protocol):
    """What a step asks of the verdicts: measure/ never imports rules/, the engine hands each
    step book engine/rules/verdicts.py's (STEP_JUDGE), the one definition of both."""

    def steadiness(self, per_second: Sequence[float], min_s: int) -> str | None: ...

    def request(self, slo: Slo, ttft: float | None, tpot: float | None, itl_p99: float | None,
                e2e: float | None, e2e_bound: bool = False) -> bool | None: ...


@dataclass(slots=True)
class WindowCut:
    """What one own request did inside its step's window, taken at the close (seconds)."""

    age: float  # close - its start: its E2E bound when it ends after the close
    tpot: float | None  # (last chunk by the close - first token) / (tokens by the close - 1)
    itl_p99: float | None  # its own p99 inter-token latency by the close (with an ITL SLO only)
    tokens: int  # output tokens by the close
    judged: bool = False  # its SLO verdict is in (answered by the close)
    good: bool = False  # ... and it met every bound (a failure after the close takes it back)


def whole_verdict(judge: StepJudge, slo: Slo, rec: RequestRecord) -> bool | None:
    """One completed request judged on its whole record (it ended inside its step's window,
    or no step judged it on a window): the verdict that attainment and goodput both read."""
    f = rec.figures().itl_p99 if slo.itl_ms is not None else None
    # one token: no TPOT, no gap to miss
    return judge.request(slo, rec.ttft, rec.tpot if rec.tpot is not None else 0.0, f if f is not None else 0.0, rec.e2e, False)


def window_cut(rec: RequestRecord, t: float, with_itl: bool) -> WindowCut:
    """`rec`'s figures inside a window that closed at `t` (a worker's request, whose chunk
    times stay in its worker: its worker takes them at the close, engine/load/worker.py)."""
    age = t - rec.t_start
    ts = rec.chunk_times
    if rec.t_first is None or rec.t_first > t or not ts:
        return WindowCut(age, None, None, 0)
    n = bisect.bisect_right(ts, t)
    ks = rec.chunk_tokens
    tokens = int(sum(ks[:n])) + max(0, n - len(ks))
    tpot = (ts[n - 1] - rec.t_first) / (tokens - 1) if tokens >= 2 and n >= 1 else None
    itl = None
    if with_itl:
        vals = sorted(v for ta, vs, _ in rec.gaps_from(1) if ta <= t for v in vs)
        itl = quantile(vals, 0.99) if vals else None
    return WindowCut(age, tpot, itl, tokens)


class OwnRequests:
    """The own-request half of a StepAccumulator (which sets index, t_end and the rest)."""

    t_end: float | None
    index: int
    _reported: bool
    _late: list[RequestRecord]
    ended_after_close: int
    cached_reports: int
    cached_tokens: int
    cached_prompt_tokens: int
    lag: Digest
    ttft_turn: dict[int, Digest]
    held: int
    t0: float | None

    judge: StepJudge | None

    if TYPE_CHECKING:  # StepAccumulator's, which this half reads
        @property
        def measuring(self) -> bool: ...
        def _before_end(self, t: float) -> bool: ...

    def _init_own(self, slo: Slo | None, phase: str) -> None:
        self.slo = slo if slo is not None and slo.per_request else None
        self.good = 0  # own requests judged (verdicts.judge_request) to meet every per-request SLO bound
        self.judged = 0  # own requests judged
        self.judged_tokens = 0  # ... their output tokens inside the window, and the good ones'
        self.good_tokens = 0
        # its own requests
        self.sent = 0
        self.first_token = 0
        self.completed = 0
        self.failed = 0
        self.cancelled = 0
        self.in_tokens = 0
        self.errors: Counter[str] = Counter()
        self.ttft = Digest()  # observed: completed requests, and cancelled ones that had answered
        self.ttfat = Digest()
        self.e2e = Digest()
        self.tpot = Digest()
        # ... their TTFTs and E2Es less each one's send wait (RequestRecord.send_wait): how far the
        # client's own wait moved the step's figures (client_send_shift_ms), while every one's
        # wait is known (not: a transport that does not tell, an open loop's sends)
        self.ttft_net = Digest()
        self.e2e_net = Digest()
        self._own: dict[int, RequestRecord] = {}  # own requests not ended yet
        self._held_t: list[float] = []  # intended send times of own sends still held at the cap
        self._stuck_ttft: list[float] = []  # cancelled own requests with no first token: their age then
        self._stuck_e2e: list[float] = []  # cancelled own requests: their age then
        self._cut_e2e: list[float] = []  # own requests that ended after the close: their age at it (a bound)
        self._cut: dict[int, WindowCut] = {}  # own requests out at the close: their window figures
        # --workers: the window figures each worker took of its requests out at the close
        # (their chunk times stay in the worker), by request id, read by the cut
        self.remote_cuts: dict[int, WindowCut] = {}
        self._warm: dict[int, RequestRecord] | None = {} if phase != PROBE else None  # warm-up sends (stand-ins) while none of its own went
        self.warmup_stand_in = False  # the warm-up sends stood in for own requests (none was sent)

    def cut(self) -> None:
        """At the close, before its result: a step that sent nothing of its own takes its
        warm-up sends as its own (stand-ins), then every own request still out gets its window
        figures (WindowCut): its TPOT enters now, and one that answered by the close is judged
        against the SLO now, on them."""
        t = self.t_end
        if t is None:
            return
        if self.sent == 0 and self._warm:
            self._stand_in(t)
        self._warm = None
        for rec in self._own.values():
            if rec.rid not in self._cut:
                self._cut_one(rec, t)
        self.remote_cuts.clear()  # the rest were not its own

    def _cut_one(self, rec: RequestRecord, t: float) -> WindowCut:
        """`rec`'s figures inside the window that closed at `t`, counted once: its TPOT, and
        its SLO verdict when it answered by then (a worker's request: the figures its worker
        took at the close, `remote_cuts`)."""
        c = self.remote_cuts.pop(rec.rid, None)
        if c is None:
            c = window_cut(rec, t, self.slo is not None and self.slo.itl_ms is not None)
        else:
            c.age = t - rec.t_start  # the coordinator's clock places its start
        self._cut[rec.rid] = c
        if c.tpot is not None:
            self.tpot.add(c.tpot)
        if self.slo is not None and rec.t_first is not None and rec.t_first <= t:
            ok = self._judge(rec.ttft, c.tpot, c.itl_p99, c.age, True, c.tokens)
            if ok is not None:
                c.judged, c.good = True, ok
                rec.slo_met = ok
        return c

    def _uncut(self, c: WindowCut) -> None:
        """Take a WindowCut's share back out: the request was out at the close by when its
        end was delivered, but its end is stamped inside the window (the loop or a worker's
        report caught up): its whole record is the window's, counted once."""
        if c.tpot is not None:
            self.tpot.remove_many((c.tpot,))
        if c.judged:
            self.judged -= 1
            self.judged_tokens -= c.tokens
            if c.good:
                self.good -= 1
                self.good_tokens -= c.tokens

    def take_remote_cuts(self, cuts: Sequence[tuple[int, float | None, float | None, int]]) -> None:
        """--workers: (rid, TPOT, own ITL p99, tokens by the close) of requests out at this
        step's close, taken by their worker (their chunk times stay there); its cut reads them."""
        if self._reported:
            return
        for rid, tpot, itl_p99, tokens in cuts:
            if rid not in self._cut:
                self.remote_cuts[rid] = WindowCut(0.0, tpot, itl_p99, tokens)

    def _stand_in(self, t: float) -> None:
        """The warm-up sends become own requests (see the module docstring)."""
        assert self._warm is not None
        self.warmup_stand_in = True
        warm, self._warm = self._warm, None
        for rec in warm.values():
            self.sent += 1
            self.in_tokens += rec.expected_input_tokens
            self._own[rec.rid] = rec
            if rec.t_first is not None:
                self.first_token += 1
            if rec.t_end is not None and rec.t_end <= t and rec.status in (records.OK, records.FAILED, records.CANCELLED):
                self._end_own(rec, rec.t_end)

    def _judge(self, ttft: float | None, tpot: float | None, itl_p99: float | None, e2e: float | None, bound: bool, tokens: int) -> bool | None:
        """One own request's verdict (the engine's judge), counted in attainment; None: the
        window shows nothing to judge it by (it counts in no attainment)."""
        assert self.slo is not None
        if self.judge is None:
            return None
        ok = self.judge.request(self.slo, ttft, tpot, itl_p99, e2e, bound)
        if ok is not None:  # None: nothing inside the window to judge it by
            self._count(ok, tokens)
        return ok

    def _count(self, ok: bool, tokens: int) -> None:
        self.judged += 1
        self.judged_tokens += tokens
        if ok:
            self.good += 1
            self.good_tokens += tokens

    def note_held(self, t_intended: float | None = None) -> None:
        """A send was held back at the in-flight cap (open loop), due at `t_intended`."""
        if t_intended is None:
            if self.measuring:
                self.held += 1
            return
        if self.t0 is not None and t_intended >= self.t0 and self._before_end(t_intended):
            self.held += 1
            bisect.insort(self._held_t, t_intended)

    def _unhold(self, t: float) -> None:
        i = bisect.bisect_left(self._held_t, t)
        if i < len(self._held_t) and self._held_t[i] == t:
            del self._held_t[i]

    def abandon_held(self, times: Sequence[float], now: float) -> None:
        """Held sends that will never go (the open loop was left or paused): censored at
        their age now, as requests the run aborted."""
        at = now if self.t_end is None else min(now, self.t_end)  # a bound stops at the close
        for t in times:
            i = bisect.bisect_left(self._held_t, t)
            if i < len(self._held_t) and self._held_t[i] == t:
                del self._held_t[i]
                self._stuck_ttft.append(at - t)
                self._stuck_e2e.append(at - t)
                self.cancelled += 1
                if self.slo is not None and self.slo.missed_wait(at - t):
                    self._miss(None)

    def abandon_outstanding(self, now: float) -> None:
        """The run ended with own requests still out (a worker lost with them): each keeps
        what it had, its age now as a censored value for the rest."""
        for rec in self._own.values():
            self._censor(rec, self._cut.get(rec.rid), now)
        self._own.clear()
        self.abandon_held(list(self._held_t), now)

    def _censor(self, rec: RequestRecord, cut: WindowCut | None, now: float) -> None:
        """An own request the run cut off (cancelled, or lost with a worker): its TTFT when it
        had one, else a censored TTFT; its E2E censored. A bound stops when its request stops:
        its age at the close or at its end, whichever came first (cancelled in the probe after
        the step closed at 75 s: 75 s, never its age at the cancel), and never below its TTFT.
        An SLO miss when it was already past a bound then."""
        at = now if cut is None or self.t_end is None else min(now, self.t_end)  # (a cut: the step closed)
        age = at - rec.t_start
        if rec.ttft is not None:
            self._add_ttft(rec)
        else:
            self._stuck_ttft.append(age)
        e2e = self._e2e_bound(rec, age)
        self._stuck_e2e.append(e2e)
        if cut is not None:
            rec.step_e2e = e2e
        if self.slo is not None and not (cut is not None and cut.judged) and self.slo.missed_by(rec, at):
            self._miss(rec)

    @staticmethod
    def _e2e_bound(rec: RequestRecord, age: float) -> float:
        """An E2E censored at `age`, raised to its TTFT when its first token came later (an
        E2E is never below its own TTFT: TTFT never above E2E, per request and so per
        percentile)."""
        ttft = rec.ttft
        return age if ttft is None or ttft <= age else ttft

    def _miss(self, rec: RequestRecord | None) -> None:
        """One own request judged: it missed every bound (failed, or censored past one),
        whatever bounds are set: a miss needs no figure (a TPOT-only SLO misses a failure too)."""
        if self.judge is None:
            return
        self.judged += 1
        if rec is not None:
            rec.slo_met = False

    def _fail_verdict(self, rec: RequestRecord, cut: WindowCut | None) -> None:
        """A failed own request misses every bound. One judged good at the close (on what it
        did inside the window) failed after it: it is a miss now, its tokens no throughput."""
        if cut is not None and cut.judged:  # (its tokens stay judged: a miss with its tokens)
            if cut.good:
                self.good -= 1
                self.good_tokens -= cut.tokens
                cut.good = False
            rec.slo_met = False
        else:
            self._miss(rec)

    def _end_own(self, rec: RequestRecord, t_end: float) -> None:
        """One of its own requests ended: inside the window its whole record is the step's;
        after the close, only what it did by then (its WindowCut) and its TTFT."""
        del self._own[rec.rid]
        if self._reported:
            self.ended_after_close += 1
        end = self.t_end
        after = end is not None and t_end > end
        cut = self._cut.get(rec.rid)
        if cut is not None and not after:  # out at the close as delivered, ended inside it as stamped
            self._uncut(cut)
            del self._cut[rec.rid]
            rec.slo_met = None
            cut = None
        if after and cut is None and end is not None:  # sent after the close (an open loop's held send): nothing in the window
            cut = self._cut[rec.rid] = WindowCut(end - rec.t_start, None, None, 0)
        if cut is not None:  # its row says what its step counted of it
            rec.step_e2e, rec.step_tpot = self._e2e_bound(rec, cut.age), cut.tpot
        if rec.cached_tokens is not None and rec.input_tokens > 0:
            self.cached_reports += 1
            self.cached_tokens += rec.cached_tokens
            self.cached_prompt_tokens += rec.input_tokens
        if rec.status == records.FAILED:
            self.failed += 1
            self.errors[rec.error_kind] += 1
            if self.slo is not None:
                self._fail_verdict(rec, cut)  # a failed request misses every bound
        elif rec.status == records.CANCELLED:
            self.cancelled += 1
            self._censor(rec, cut, t_end)
        else:
            self.completed += 1
            if rec.usage_reported:
                self.in_tokens += rec.input_tokens - rec.expected_input_tokens
            self._add_ttft(rec)
            if cut is None:
                if rec.e2e is not None:
                    self.e2e.add(rec.e2e)
                    if (w := _send_wait(rec)) is not None:
                        self.e2e_net.add(rec.e2e - w)
                if rec.tpot is not None:
                    self.tpot.add(rec.tpot)
                if self.slo is not None and self.judge is not None:  # its whole record is the window's
                    ok = whole_verdict(self.judge, self.slo, rec)
                    if ok is not None:
                        self._count(ok, rec.output_tokens)
                    rec.slo_met = ok
            elif rec.step_e2e is not None:  # (set with its cut, above) its E2E is a bound: it ended under the next load
                self._cut_e2e.append(rec.step_e2e)
                if self.slo is not None and not cut.judged:
                    rec.slo_met = self._judge(rec.ttft, cut.tpot, cut.itl_p99, cut.age, True, cut.tokens)

    def _add_ttft(self, rec: RequestRecord) -> None:
        if rec.ttft is None:
            return
        self.ttft.add(rec.ttft)
        if (w := _send_wait(rec)) is not None:
            self.ttft_net.add(rec.ttft - w)
        if rec.ttfat is not None:
            self.ttfat.add(rec.ttfat)
        if rec.turn:
            d = self.ttft_turn.get(rec.turn)
            if d is None:
                d = self.ttft_turn[rec.turn] = Digest()
            d.add(rec.ttft)

    def seen_net(self, now: float) -> list[float] | None:
        """The TTFTs observed on own requests still in flight at `now` (censored()'s `seen`)
        less each one's send wait; None when one's wait is not known."""
        out = []
        for rec in self._own.values():
            if rec.t_first is not None and rec.t_first <= now:
                if (w := _send_wait(rec)) is None:
                    return None
                out.append(rec.t_first - rec.t_start - w)
        return out

    def censored(self, now: float) -> tuple[list[float], list[float], list[float]]:
        """(TTFTs observed on own requests still in flight, censored TTFTs, censored E2Es)
        at `now`: what the step's figures hold beyond its ended requests."""
        seen, c_ttft, c_e2e = [], list(self._stuck_ttft), self._stuck_e2e + self._cut_e2e
        for rec in self._own.values():
            age = now - rec.t_start
            if rec.t_first is not None and rec.t_first <= now:
                seen.append(rec.t_first - rec.t_start)
            else:
                c_ttft.append(age)
            c_e2e.append(age)
        for t in self._held_t:
            c_ttft.append(now - t)
            c_e2e.append(now - t)
        return seen, c_ttft, c_e2e


def _send_wait(rec: RequestRecord) -> float | None:
    """What the client itself held of `rec`'s latencies, where that is its send wait: None when
    not known, or when sent later than meant (an open loop's latencies count from the intended
    time, so a late client is in them beyond the wait)."""
    return rec.send_wait if rec.t_intended is None else None
