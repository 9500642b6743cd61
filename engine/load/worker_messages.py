"""The messages between the coordinator (engine/load/worker_pool.py, engine/load/ray_pool.py) and its workers
(engine/load/worker.py), typed: what crosses a pipe or the network, and nothing else.

Coordinator -> worker: `Order` (the load this worker holds now and what to stamp on its
requests), `Feed` (trace rows with their intended times), `Ask` (report now / abort / stop).
Worker -> coordinator: `Ready`, `Report` (what it measured since the last one, and its state),
`Done` (how many requests an abort or a stop cancelled).

A report's items are small NamedTuples (as cheap to pickle as plain tuples): one per send,
first token and ended request. Times are the worker host's perf_counter seconds; `Report.now`
is when it was taken (a coordinator on another host places its times by their age).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from ..measure.gap_batch import GapBatch
from ..measure.records import RequestFigures

FLUSH = "flush"
ABORT = "abort"
STOP = "stop"


# -- coordinator -> worker ----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Order:
    stamp: tuple[int, int, str]  # (step, concurrency label, phase) for a request sent now
    gone: tuple[bool, ...]  # which targets are gone (skipped)
    mode: str  # concurrency | rate | trace
    c: int  # this worker's share of C (closed loop)
    rate: float  # its share of the rate (req/s, rate mode)
    trace: tuple[int, float | None, float] | None  # (replay gen, speed, how far the replay moved): trace mode
    cap: int  # its share of the in-flight cap
    paused: bool
    hold: bool  # the server is gone: no new sends
    workload: Any  # engine/workload/prompts.py WorkloadConfig (a live change reaches every worker)


@dataclass(frozen=True, slots=True)
class Feed:
    gen: int  # the replay the rows belong to
    rows: list  # [(intended time on the worker's clock, TraceRow)]


@dataclass(frozen=True, slots=True)
class Ask:
    what: str  # FLUSH (report now) | ABORT (cancel what is in flight, report) | STOP
    seq: int = 0
    # FLUSH at a step's close: (the close on the coordinator's clock, on the worker's, with
    # the requests' own ITL p99): the report carries each request's window figures then (`Cut`)
    cut: tuple[float, float, bool] | None = None


# -- worker -> coordinator ----------------------------------------------------------------------
class Sent(NamedTuple):
    target: int
    rid: int
    phase: str
    step: int
    concurrency: int
    t_send: float
    t_intended: float | None
    expected_input_tokens: int
    max_tokens: int
    turn: int


class First(NamedTuple):
    rid: int
    t_send: float
    t_first: float | None
    t_first_answer: float | None
    send_wait: float | None = None  # RequestRecord.send_wait (a duration: no clock to shift)


class Ended(NamedTuple):
    rid: int
    t_send: float
    t_first: float | None
    t_first_answer: float | None
    t_end: float | None
    status: str
    http_status: int
    error_kind: str
    error_text: str
    input_tokens: int
    output_tokens: int
    usage_reported: bool
    figures: RequestFigures
    failed_gaps: GapBatch | None  # a failed request's gaps: they leave the windows
    cached_tokens: int | None
    failed_tokens: list | None = None  # ... and its tokens, [(10 ms bucket, tokens)]: no throughput
    send_wait: float | None = None  # RequestRecord.send_wait


class Cut(NamedTuple):
    """One request's figures inside a step's window, taken by its worker at the close (its
    chunk times stay there): engine/measure/own_requests.py WindowCut, less its age (the
    coordinator's clock places its start)."""

    rid: int
    tpot: float | None
    itl_p99: float | None
    tokens: int


@dataclass(frozen=True, slots=True)
class Ready:
    worker: int


@dataclass(slots=True)
class Report:
    kind: str  # "batch" (every FLUSH_S), FLUSH (asked), ABORT, STOP (its last)
    seq: int
    worker: int
    sends: list[Sent] = field(default_factory=list)
    firsts: list[First] = field(default_factory=list)
    tokens: list = field(default_factory=list)  # [((target, 10 ms bucket), tokens)]
    gaps: GapBatch = field(default_factory=GapBatch)  # every request's since the last report
    ends: list[Ended] = field(default_factory=list)
    held: list = field(default_factory=list)  # [(dropped?, intended time)] of sends held at the cap
    abandoned: list = field(default_factory=list)  # intended times of held sends given up
    lags: Any = None  # a LogHistogram delta of the chunks' lags (the sim's), or None
    cut_at: float | None = None  # asked at a step's close: that close (the coordinator's clock, as asked)
    cuts: list[Cut] = field(default_factory=list)  # ... the window figures of the requests out then
    in_flight: int = 0
    backing_off: int = 0
    backlog: int = 0
    delayed: int = 0
    dropped: int = 0
    fed: tuple[int, int] = (0, 0)  # (trace replay gen, rows taken)
    loop_lags: list = field(default_factory=list)  # [(time, lag s)]: its event loop's wake-ups since the last report
    cpu_s: float = 0.0
    now: float = 0.0  # the worker host's perf_counter when taken

    def shifted(self, d: float, bucket_s: float) -> Report:
        """This report with every time moved by `d` seconds (buckets by whole buckets, gaps exactly)."""
        db = round(d / bucket_s)
        return replace(
            self,
            sends=[x._replace(t_send=x.t_send + d, t_intended=_opt(x.t_intended, d)) for x in self.sends],
            firsts=[x._replace(t_send=x.t_send + d, t_first=_opt(x.t_first, d), t_first_answer=_opt(x.t_first_answer, d)) for x in self.firsts],
            tokens=[((ti, b + db), n) for (ti, b), n in self.tokens],
            gaps=self.gaps.shifted(d),
            held=[(dropped, t + d) for dropped, t in self.held],
            abandoned=[t + d for t in self.abandoned],
            loop_lags=[(t + d, lag) for t, lag in self.loop_lags],
            ends=[x._replace(t_send=x.t_send + d, t_first=_opt(x.t_first, d), t_first_answer=_opt(x.t_first_answer, d),
                             t_end=_opt(x.t_end, d), failed_gaps=None if x.failed_gaps is None else x.failed_gaps.shifted(d),
                             failed_tokens=None if x.failed_tokens is None else [(b + db, n) for b, n in x.failed_tokens])
                  for x in self.ends],
        )


@dataclass(frozen=True, slots=True)
class Done:
    what: str  # ABORT | STOP
    seq: int
    worker: int
    n: int  # requests it cancelled


def _opt(t: float | None, d: float) -> float | None:
    return None if t is None else t + d
