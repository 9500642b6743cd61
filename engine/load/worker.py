"""A load worker (`--workers N`): one process that holds its share of the load and its own
connections, and reports what it measured to the coordinator (engine/load/worker_pool.py).

The worker runs the same pool (engine/load/controller.py) and Senders (engine/load/sender.py) as a
one-process engine, with one subscriber to their hooks (`Batch`) that keeps what happened until the next flush,
every FLUSH_S, or at once when the coordinator asks (a step closing):

- sends and first tokens of its requests (rid, step, phase, send / intended / first-token times),
- output tokens counted in 10 ms buckets of arrival time,
- inter-token latencies and chunk gaps with the arrival of the chunk that closes each, as
  arrays (engine/measure/gap_batch.py: the values themselves, merged percentiles equal one
  process's, each counted in the window its chunk arrived in),
- the chunks' lags behind the server's send stamps (the sim's), as a histogram delta,
- one summary per ended request (its figures and outcome; never its chunk timestamps; a
  failed one's gaps and its tokens in their buckets, to leave the windows that counted them);
- at a step's close (asked), the window figures of each request out at it (`Cut`: its TPOT,
  own ITL p99 and tokens by the close), so that outputs that outlive their step are judged on
  TPOT and ITL as in one process.

Times are perf_counter seconds: CLOCK_MONOTONIC, shared by every process on the host, so the
coordinator compares them with its own without any offset.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import signal
import time
from collections import defaultdict, deque
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Sequence

import httpx

from ..client.http import make_client
from ..client.server_watch import ServerWatch
from ..client.target import Target
from ..heap import HeapKeeper
from ..loop import new_event_loop, read_pipe
from ..measure import records
from ..measure.gap_batch import GapBatch
from ..measure.histogram import LogHistogram
from ..measure.hooks import RequestHooks, TokensHook
from ..measure.own_requests import window_cut
from ..measure.records import RequestRecord
from ..telemetry.client_health import LoopLagMonitor
from ..workload.arrivals import parse_arrival
from ..workload.prompts import Calibration, Prompt, PromptSource, WorkloadConfig
from ..workload.trace import TracePrompts, TraceRow
from .controller import CONCURRENCY, RATE, TRACE, Controller
from .holder import LoadHolder
from .sender import Sender
from .trace_replay import FedSchedule
from .worker_messages import ABORT, FLUSH, STOP, Ask, Cut, Done, Ended, Feed, First, Order, Ready, Report, Sent

# how often a worker reports: a report's take and send hold the worker's loop (at 512 streams a
# worker, 0.25 s of it took 10-16 ms to gather and up to 12 ms to send: 21-27 ms wake-ups, over
# LAG_OVERLOAD_MS; a tenth of a second's holds it 5-13 ms)
FLUSH_S = 0.1
BUCKET_S = 0.01  # token and gap arrival times travel in buckets this wide
WARM_TIMEOUT_S = 5.0  # the warm-up GET of a worker's targets
RECENT_S = 10.0  # ended requests kept this long: a step's close may ask their window figures (its report came late)


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker needs to send its share: the targets, the workload (its request shaping
    too: headers, extra body, ignore_eos, range ratio, seed), the client's settings."""

    index: int
    workers: int
    targets: tuple[Target, ...]
    weights: tuple[float, ...]
    workload: WorkloadConfig
    calibration: Calibration
    transport: str
    insecure: bool
    api_key: str | None
    request_timeout: float
    continuous_usage: bool
    arrival: str
    seed: int
    first_rid: int  # request ids: first_rid + index, + workers each time (unique in the session)
    wall_offset: float


def bucket_tokens(credits: list[tuple[float, int]]) -> list[tuple[int, int]]:
    """A failed request's tokens as they travel: (10 ms bucket of their arrival, tokens), the
    buckets its tokens were counted in (`_TargetListener.on_tokens`)."""
    out: dict[int, int] = {}
    for t, n in credits:
        b = int(t / BUCKET_S)
        out[b] = out.get(b, 0) + n
    return sorted(out.items())


def unbucket_tokens(buckets: Sequence[tuple[int, int]]) -> list[tuple[float, int]]:
    """The coordinator's side: (arrival, tokens) at each bucket's middle, where it counted them."""
    return [((b + 0.5) * BUCKET_S, n) for b, n in buckets]


class Batch:
    """The listener of every Sender of a worker: what happened since the last flush."""

    def __init__(self) -> None:
        self.in_flight: dict[int, RequestRecord] = {}
        self.cursor: dict[int, int] = {}
        self.recent: deque[RequestRecord] = deque()  # ended lately (RECENT_S), chunk times and all
        self._token_hooks: list[TokensHook] = []  # each Sender's: flushed before a take
        self._reset()

    def _reset(self) -> None:
        self.sends: list[Sent] = []
        self.firsts: list[First] = []
        self.tokens: dict[tuple[int, int], int] = defaultdict(int)  # (target, bucket) -> tokens
        self.gaps = GapBatch()  # every request's, since the last take
        self.ends: list[Ended] = []
        self.held: list[tuple[bool, float]] = []  # (dropped?, intended time) of sends held at the cap
        self.abandoned: list[float] = []  # intended times of held sends given up (their step censors them)
        self.lags = LogHistogram()  # the chunks' lags, binned as the coordinator bins them

    def on_lag(self, lag: float) -> None:
        """Receive time - the server's send stamp of a chunk (the sim's sim_t)."""
        self.lags.add(lag if lag > 0 else 0.0)

    def hooks(self, ti: int) -> RequestHooks:
        """The hooks of target `ti`'s Sender, and the worker's one subscription to them:
        this batch (its sends, first tokens, tokens by bucket, ends, chunk lags)."""
        hooks = RequestHooks(lag=self.on_lag).subscribe(_TargetListener(self, ti))
        self._token_hooks.append(hooks.tokens)
        return hooks

    def harvest(self, rec: RequestRecord) -> None:
        cursor = self.cursor
        start = cursor.get(rec.rid, 0)
        if start < len(rec.chunk_times):
            cursor[rec.rid] = self.gaps.take(rec, start)

    def cuts(self, t: float, with_itl: bool) -> list[Cut]:
        """At a step's close `t` (this host's clock): the window figures of every request sent
        by then and not ended by then (in flight, or ended since), as the coordinator's step
        takes them of its own requests in one process (engine/measure/own_requests.py
        window_cut): its TPOT and own ITL p99 inside the window, its tokens by the close."""
        recs = [*self.in_flight.values(), *(r for r in self.recent if r.t_end is not None and r.t_end > t)]
        out = []
        for rec in recs:
            if rec.t_start <= t:
                c = window_cut(rec, t, with_itl)
                out.append(Cut(rec.rid, c.tpot, c.itl_p99, c.tokens))
        return out

    def take(self) -> dict:
        """Everything since the last take (tokens kept and gaps of requests in flight first)."""
        for hook in self._token_hooks:
            hook.flush()
        for rec in list(self.in_flight.values()):
            self.harvest(rec)
        recent, old = self.recent, time.perf_counter() - RECENT_S
        while recent and (recent[0].t_end or 0.0) < old:
            recent.popleft()
        out = {
            "sends": self.sends,
            "firsts": self.firsts,
            "tokens": list(self.tokens.items()),
            "gaps": self.gaps,
            "ends": self.ends,
            "held": self.held,
            "abandoned": self.abandoned,
            "lags": self.lags if self.lags.count else None,
        }
        self._reset()
        return out


class _TargetListener:
    __slots__ = ("b", "ti")

    def __init__(self, batch: Batch, ti: int) -> None:
        self.b = batch
        self.ti = ti

    def on_send(self, rec: RequestRecord) -> None:
        b = self.b
        b.in_flight[rec.rid] = rec
        b.sends.append(Sent(self.ti, rec.rid, rec.phase, rec.step, rec.concurrency, rec.t_send, rec.t_intended, rec.expected_input_tokens, rec.max_tokens, rec.turn))

    def on_first(self, rec: RequestRecord) -> None:
        self.b.firsts.append(First(rec.rid, rec.t_send, rec.t_first, rec.t_first_answer, rec.send_wait))

    def on_tokens(self, t: float, n: int) -> None:
        self.b.tokens[(self.ti, int(t / BUCKET_S))] += n

    def on_token_reads(self, ts: Sequence[float], ns: Sequence[int]) -> None:
        """on_tokens of each read of a batch (engine/measure/hooks.py TokensHook.flush)."""
        tokens, ti = self.b.tokens, self.ti
        for t, n in zip(ts, ns, strict=True):
            tokens[(ti, int(t / BUCKET_S))] += n

    def on_end(self, rec: RequestRecord) -> None:
        b = self.b
        b.harvest(rec)
        b.in_flight.pop(rec.rid, None)
        b.cursor.pop(rec.rid, None)
        b.recent.append(rec)
        failed = rec.status == records.FAILED
        b.ends.append(Ended(
            rec.rid, rec.t_send, rec.t_first, rec.t_first_answer, rec.t_end, rec.status, rec.http_status,
            rec.error_kind, rec.error_text, rec.input_tokens, rec.output_tokens, rec.usage_reported,
            rec.figures(), GapBatch.of_record(rec) if failed else None,
            rec.cached_tokens, bucket_tokens(rec.credits()) if failed else None, rec.send_wait,
        ))


def _nothing() -> None:
    pass


class _Target:
    """One of this worker's targets, as the pick sees it (engine/load/holder.py PickTarget)."""

    __slots__ = ("sender", "weight", "current", "gone")

    def __init__(self, sender: Sender, weight: float) -> None:
        self.sender, self.weight, self.current, self.gone = sender, weight, 0.0, False

    @property
    def down(self) -> bool:
        """The coordinator's word (`gone` in its orders): gone or not ready."""
        return self.gone


class Worker:
    """A worker's load and its reports; `conn` is its pipe to the coordinator (None on a Ray
    actor, whose coordinator pulls the reports: engine/load/ray_pool.py)."""

    def __init__(self, spec: WorkerSpec, conn: Connection | None) -> None:
        self.spec = spec
        self.conn = conn
        self.batch = Batch()
        self.stamp = (0, 0, "live")  # (step, concurrency label, phase): the coordinator's
        self.clients: list[httpx.AsyncClient] = []
        self.targets: list[_Target] = []
        ids = itertools.count(spec.first_rid + spec.index, spec.workers)
        for ti, (tgt, w) in enumerate(zip(spec.targets, spec.weights, strict=False)):
            client = make_client(transport=spec.transport, verify=not spec.insecure, api_key=spec.api_key,
                                 request_timeout=spec.request_timeout, origin=tgt.url, headers=spec.workload.headers)
            s = Sender(client, tgt, self.batch.hooks(ti), self._stamp, spec.wall_offset,
                       ids=ids, workload=spec.workload)
            s.in_flight, s.cursor = self.batch.in_flight, self.batch.cursor
            s.continuous_usage = spec.continuous_usage
            # a judge of its own requests' deaths (server_gone, as in one process); holding the
            # load when the server is gone is the coordinator's (its own watch)
            s.watch = ServerWatch(client, tgt.url + "/health", _nothing, _nothing, lambda kind, text: None)
            self.clients.append(client)
            self.targets.append(_Target(s, w))
        # the one load holder: the same class as a one-process engine's (its targets, the
        # pick, one request's path); the worker keeps its workload and prompts current
        self.holder = LoadHolder(self.targets, self._source(spec.workload), spec.workload, self._row_prompt)
        b = self.batch
        self.ctl = Controller(self.holder.one, 1, 1_000_000, prepare=self.holder.prepare, arrival=parse_arrival(spec.arrival), seed=spec.seed * 1009 + spec.index,
                              on_held=lambda dropped, t: b.held.append((dropped, t)), on_abandon=lambda ts: b.abandoned.extend(ts))
        self.ctl.pause()  # until the coordinator gives this worker its share
        self.feed = FedSchedule()  # its rows of a trace replay (the coordinator's schedule)
        # its loop's wake-ups, each in the next report: the loop that sends and stamps this
        # worker's share (the client's health reads these, engine/telemetry/load_lag.py)
        self.loop_lag = LoopLagMonitor()
        self._lag_taken = -1.0
        self.heap = HeapKeeper()  # the collector's walks: a second's objects, not the heap (engine/heap.py)
        self._trace_prompts: TracePrompts | None = None

    def _stamp(self, t: float | None = None) -> tuple[int, int, str]:
        """Each request's stamp, whatever its time: the coordinator's (step, concurrency label, phase)."""
        return self.stamp

    def _source(self, wl: WorkloadConfig) -> PromptSource:
        """This worker's prompts: the workload's, from a seed of its own."""
        return PromptSource(dataclasses.replace(wl, seed=wl.seed + 7919 * self.spec.index), self.spec.calibration)

    def _row_prompt(self, row: object) -> Prompt:
        """A trace row's prompt from its hash ids, as in one process (suffixes of its own)."""
        if self._trace_prompts is None:
            sp = self.spec
            self._trace_prompts = TracePrompts(sp.calibration, sp.seed, suffix_seed=sp.seed * 1009 + sp.index + 1)
        assert isinstance(row, TraceRow)
        return self._trace_prompts.prompt(row)

    # -- the coordinator's orders ---------------------------------------------------------------
    def apply(self, order: Order | Feed) -> None:
        """The load this worker holds now (its share), and what to stamp on requests; or
        trace rows to send at their times."""
        ctl = self.ctl
        if isinstance(order, Feed):
            self.feed.feed(order.gen, order.rows)
            ctl.poke()
            return
        self.stamp = order.stamp
        wl = order.workload
        h = self.holder
        if wl is not None and wl != h.workload:  # a live workload change (the engine checked it)
            h.workload, h.source = wl, self._source(wl)
        for t, gone in zip(self.targets, order.gone, strict=False):
            t.gone = gone
        ctl.max_concurrency = max(1, order.cap)
        ctl.hold = order.hold
        trace = order.trace  # (replay gen, speed, how far it moved): the coordinator's replay
        if trace is not None:
            self.feed.start(trace[0])
            self.feed.shift_to(trace[2])
        if order.mode == TRACE and trace is not None:
            if ctl.mode != TRACE or ctl.schedule is not self.feed:
                ctl.start_schedule(self.feed, TRACE, trace[1])
            ctl.rate = trace[1]
        elif order.mode == RATE and order.rate > 0:
            if ctl.mode != RATE or ctl.rate != order.rate:
                ctl.set_rate(order.rate)
        elif order.c > 0:
            if ctl.mode != CONCURRENCY or ctl.concurrency != order.c:
                ctl.set_concurrency(min(order.c, ctl.max_concurrency))
        if order.paused or (order.mode == CONCURRENCY and order.c <= 0) or (order.mode == RATE and order.rate <= 0):
            ctl.pause()
        elif ctl.paused:
            ctl.resume()
        ctl.poke()

    async def warm(self) -> None:
        """One GET of /v1/models per target before the worker says it is ready: its first
        request does not pay for the connection and the client's first use (a trace row
        sent ~25 ms late). Any answer will do (404 included); a failure is the load's to meet."""
        for client, tgt in zip(self.clients, self.spec.targets, strict=False):
            try:
                await client.get(tgt.url + "/v1/models", timeout=WARM_TIMEOUT_S)
            except httpx.HTTPError:
                pass

    def start(self) -> None:
        """Start the load (paused until the coordinator's first order) and the loop's watch."""
        self.loop_lag.start()
        self.heap.tick(time.perf_counter())  # start-up is over: its objects leave the collector's walks
        self.ctl.start()

    def _new_wakeups(self) -> list[tuple[float, float]]:
        got = self.loop_lag.since(self._lag_taken)
        if got:
            self._lag_taken = got[-1][0]
        return got

    def take(self, kind: str = "batch", seq: int = 0, cut: tuple[float, float, bool] | None = None) -> Report:
        """The report: what was measured since the last one, and this worker's state. `now`
        is this host's clock when it was taken (a coordinator on another host places the
        report's times by their age, never by comparing clocks). `cut` (a step's close, Ask):
        with the window figures of the requests out at it."""
        ctl = self.ctl
        cuts = self.batch.cuts(cut[1], cut[2]) if cut is not None else []
        return Report(
            kind=kind, seq=seq, worker=self.spec.index, **self.batch.take(), in_flight=ctl.in_flight,
            cut_at=cut[0] if cut is not None else None, cuts=cuts,
            backing_off=sum(t.sender.backing_off for t in self.targets),
            backlog=len(ctl.backlog), delayed=ctl.delayed, dropped=ctl.dropped,
            fed=(self.feed.gen, self.feed.popped), loop_lags=self._new_wakeups(),
            cpu_s=time.process_time(), now=time.perf_counter(),
        )

    def report(self, kind: str = "batch", seq: int = 0, cut: tuple[float, float, bool] | None = None) -> None:
        assert self.conn is not None
        try:
            self.conn.send(self.take(kind, seq, cut))
        except (OSError, EOFError, BrokenPipeError):
            pass

    async def close(self) -> int:
        """Stop sending, cancel what is in flight; returns how many were cancelled."""
        n = await self.ctl.stop()
        await self.loop_lag.stop()
        await self._close_clients()
        return n

    async def _close_clients(self) -> None:
        for t in self.targets:
            if t.sender.watch is not None:
                await t.sender.watch.stop()
        for c in self.clients:
            await c.aclose()

    async def run(self) -> None:
        assert self.conn is not None
        conn = self.conn
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        loop.add_signal_handler(signal.SIGTERM, stop.set)

        async def answer_abort(seq: int) -> None:
            n = await self.ctl.abort()
            self.report(ABORT, seq)
            conn.send(Done(ABORT, seq, self.spec.index, n))

        def on_msg(msg: Order | Feed | Ask | None) -> None:
            if msg is None:  # the coordinator is gone
                stop.set()
                return
            if isinstance(msg, (Order, Feed)):
                self.apply(msg)
            elif msg.what == FLUSH:
                self.report(FLUSH, msg.seq, msg.cut)
            elif msg.what == ABORT:
                asyncio.ensure_future(answer_abort(msg.seq))
            elif msg.what == STOP:
                stop.set()

        read_pipe(self.conn, loop, on_msg, last=lambda msg: isinstance(msg, Ask) and msg.what == STOP, name="redline-worker-orders")
        await self.warm()
        self.start()
        self.conn.send(Ready(self.spec.index))

        async def flusher() -> None:
            nxt = time.perf_counter()
            while True:
                nxt += FLUSH_S
                await asyncio.sleep(max(0.0, nxt - time.perf_counter()))
                self.report()
                ctl = self.ctl
                self.heap.tick(time.perf_counter(), idle=ctl.paused and ctl.in_flight == 0)

        task = asyncio.create_task(flusher())
        try:
            await stop.wait()
        finally:
            task.cancel()
            n = await self.ctl.stop()
            self.report("stopped")
            self.conn.send(Done(STOP, 0, self.spec.index, n))
            await self.loop_lag.stop()
            await self._close_clients()


def worker_main(spec: WorkerSpec, conn: Connection) -> None:
    """A worker process: terminal signals are the coordinator's to handle; a dead coordinator
    (pipe EOF) or SIGTERM stops this worker's load."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    loop = new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(Worker(spec, conn).run())
    finally:
        loop.close()
        conn.close()
