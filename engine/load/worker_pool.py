"""The load in worker processes (`--workers N`): the coordinator's side.

`WorkerPool` is a LoadControl (engine/load/controller.py: the load's state and commands, set C
or a rate, pause, probe, abort, stop), as the one-process Controller is, with the load held
by N worker processes (engine/load/worker.py) instead of this one. It owns no connection to the target; the engine keeps commands, steps,
the session log, telemetry, calibration and the probe lane.

- Orders: each worker gets its share (C split as evenly as whole requests allow, a rate
  R / N each: the sum of independent Poisson streams is Poisson at R; the in-flight cap
  split like C), whether the load is paused or held, which targets are gone, and the
  (step, concurrency, phase) to stamp on its requests. An order goes out as soon as
  something changes, and the stamp is checked every ORDER_POLL_S: well within 100 ms.
- Reports: every FLUSH_S each worker sends what it measured (engine/load/worker.py Batch); the
  pool replays it into the targets' listeners (engine/core/target_stats.py), so the engine's figures,
  steps and rows are built by the same code as in one process, from the same values.
- A step closing first asks every worker to report at once (`sync`), so what was measured
  before the close is in the step however late its report would have come; the report
  carries the window figures (TPOT, own ITL p99) each worker took at that close of every
  request out at it, which the step's cut reads as one process reads the chunk times.
- A worker that dies is reported; its share is lost (logged) and the others carry on.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import platform
import time
from collections import deque
from typing import TYPE_CHECKING, Callable

from ..child import reap, spawn_child
from ..constants import TRACE_FEED_AHEAD_S
from ..loop import read_pipe, wait_set, wait_within
from ..measure.histogram import LogHistogram
from ..measure.records import RequestRecord
from ..telemetry.client_health import LoopLagMonitor
from .controller import TRACE, LoadControl
from .worker import BUCKET_S, WorkerSpec, unbucket_tokens, worker_main
from .worker_messages import ABORT, FLUSH, STOP, Ask, Done, Feed, Order, Ready, Report

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's own from Python 3.11

    from .controller import LoadOptions, OpenSchedule
    from .port import LoadPort

ORDER_POLL_S = 0.02
READY_TIMEOUT_S = 60.0
GROWN_RID_BLOCK = 10**12  # a grown batch's request ids start a block of their own (unique in the session)
SYNC_TIMEOUT_S = 2.0
STOP_TIMEOUT_S = 10.0
MAX_LAG_LOOPS = 64  # the pool keeps the lag window of this many workers' loops


def split(total: int, n: int) -> list[int]:
    """`total` as n whole shares, the first ones one larger: 10 over 4 -> 3, 3, 2, 2."""
    return [total // n + (1 if i < total % n else 0) for i in range(n)]


class _WorkerState:
    def __init__(self, index: int) -> None:
        self.index = index
        self.alive = True
        self.node = platform.node()
        self.in_flight = 0
        self.backing_off = 0
        self.backlog = 0
        self.delayed = 0
        self.dropped = 0
        self.requests = 0
        self.tokens = 0
        self.lag = LogHistogram()
        self.cpu_s0: float | None = None
        self.cpu_s = 0.0
        self.t0 = time.perf_counter()
        self.share = 0
        self.fed = 0  # trace rows fed to it in this replay ...
        self.taken = 0  # ... and taken by its pool (its last report of this replay)


class WorkerPool(LoadControl):
    def __init__(self, port: LoadPort, workers: int, concurrency: int, max_concurrency: int, **kw: Unpack[LoadOptions]) -> None:
        super().__init__(concurrency, max_concurrency, **kw)
        self.port = port  # the coordinator, as the load sees it (engine/load/port.py)
        self.n = workers
        self.states = [_WorkerState(i) for i in range(workers)]
        # every worker's event-loop wake-ups, from its reports: the lag that can move the load's
        # figures (engine/telemetry/load_lag.py)
        self.loop_lag = LoopLagMonitor(loops=MAX_LAG_LOOPS)
        self._procs: list = []
        self._conns: list = []
        self._live: dict[int, tuple[int, RequestRecord]] = {}  # rid -> (target index, record)
        self._last_order: list[Order | None] = [None] * workers
        self._seq = 0
        self._waits: dict[int, tuple[asyncio.Future, set[int], list]] = {}
        self._stopped_workers: set[int] = set()
        # a trace replay: its generation, how far pauses and probes moved it, whose turn next
        self._gen = 0
        self._shift = 0.0
        self._stopped_at: float | None = None  # when the replay was paused or probed
        self._fed_times: deque[float] = deque()  # intended times of the rows fed lately
        self._next_worker = 0
        self._batches = 0  # batches of workers added while running (grow)
        # a load moved here from the engine's own process (engine/core/load_move.py): what is
        # still in flight there, which C leaves out of the shares while it drains; and the
        # number of the pool's first worker in rows and the summary (the engine's process is 0)
        self.lent: Callable[[], int] = lambda: 0
        self.first_index = 0

    # -- start / stop ---------------------------------------------------------------------
    async def launch(self, spec: WorkerSpec) -> None:
        """Start the worker processes and wait until each is ready."""
        loop = asyncio.get_running_loop()
        ready: set[int] = set()
        ev = asyncio.Event()
        for i in range(self.n):
            p, parent, child = spawn_child(worker_main, (_with_index(spec, i),), f"redline-worker-{i}", daemon=True)
            p.start()
            child.close()
            self._procs.append(p)
            self._conns.append(parent)

        def on_msg(i: int, msg: Ready | Report | Done | None) -> None:
            if msg is None:
                self._worker_died(i)
            elif isinstance(msg, Ready):
                ready.add(i)
                if len(ready) == self.n:
                    ev.set()
            else:
                self._on_msg(i, msg)

        for i, conn in enumerate(self._conns):
            read_pipe(conn, loop, functools.partial(on_msg, i), name=f"redline-worker-{i}-reports")
        try:
            await wait_within(ev.wait(), READY_TIMEOUT_S)
        except TimeoutError:
            raise RuntimeError(f"--workers {self.n}: only {len(ready)} worker processes started within {READY_TIMEOUT_S:.0f} s") from None

    async def grow(self, spec: WorkerSpec, more: int) -> int:
        """`more` worker processes beside the running ones (`--workers auto` re-planned: the
        load outgrew them, engine/core/replan.py). Each takes its share of the load once it is
        ready (until then the others hold it all); returns how many came up."""
        loop = asyncio.get_running_loop()
        first, self._batches = self.n, self._batches + 1
        ready: set[int] = set()
        ev = asyncio.Event()
        for i in range(first, first + more):
            st = _WorkerState(i)
            st.alive = False  # no share, no order, no ask until it says it is ready
            self.states.append(st)
            self._last_order.append(None)
            # its ids: a block of their own, `more` apart (a worker counts from first_rid + index)
            grown = dataclasses.replace(spec, index=i, workers=more, first_rid=spec.first_rid + GROWN_RID_BLOCK * self._batches - first)
            p, parent, child = spawn_child(worker_main, (grown,), f"redline-worker-{i}", daemon=True)
            p.start()
            child.close()
            self._procs.append(p)
            self._conns.append(parent)

            def on_msg(msg: Ready | Report | Done | None, i: int = i) -> None:
                if isinstance(msg, Ready):
                    ready.add(i)
                    self.states[i].alive = True
                    self.states[i].t0 = time.perf_counter()
                    self._wake.set()  # the new shares go out now
                    if len(ready) == more:
                        ev.set()
                elif msg is None:
                    self._worker_died(i)
                else:
                    self._on_msg(i, msg)

            read_pipe(parent, loop, on_msg, name=f"redline-worker-{i}-reports")
        self.n += more
        try:
            await wait_within(ev.wait(), READY_TIMEOUT_S)
        except TimeoutError:
            pass
        return len(ready)

    def start(self) -> None:
        self._runner = asyncio.create_task(self._run(), name="redline-worker-orders")

    async def stop(self) -> int:
        """No new requests; every worker cancels its in-flight ones and reports; reaped."""
        self.stopped = True
        self._wake.set()
        n = 0
        fut = self._ask(STOP)
        if fut is not None:
            try:
                replies = await wait_within(fut, STOP_TIMEOUT_S)
                n = sum(r.n for r in replies if isinstance(r, Done))
            except TimeoutError:
                pass
        for p in self._procs:
            await asyncio.to_thread(reap, p, STOP_TIMEOUT_S)  # no load may outlive redline
        for conn in self._conns:
            conn.close()
        if self._runner is not None:
            await asyncio.wait([self._runner], timeout=1.0)
        return n

    # -- the LoadControl surface ----------------------------------------------------------------
    @property
    def in_flight(self) -> int:
        return sum(s.in_flight for s in self.states if s.alive)

    @property
    def waiting(self) -> int:
        return sum(s.backlog for s in self.states if s.alive)

    @property
    def backing_off(self) -> int:
        return sum(s.backing_off for s in self.states if s.alive)

    @property
    def trace_done(self) -> bool:
        """Every row was fed, and every live worker has taken (sent, held or dropped) its own."""
        return super().trace_done and all(s.taken >= s.fed and s.backlog == 0 for s in self.states if s.alive)

    def start_schedule(self, schedule: OpenSchedule, mode: str, rate: float | None) -> None:
        """A new trace replay: the workers drop what is left of the last one."""
        super().start_schedule(schedule, mode, rate)
        self._gen += 1
        self._shift = 0.0
        self._stopped_at = None
        self._fed_times.clear()
        for s in self.states:
            s.fed = s.taken = 0

    async def probe(self) -> int:
        if self._replaying():
            self._stopped_at = time.perf_counter()
        return await super().probe()

    def restore(self) -> int | None:
        """Back from a probe: a trace replay resumes from now (the rows fed move with it)."""
        prev = self._previous_load
        sched = prev[2] if prev is not None else None
        before = sched.t_next if sched is not None else None
        out = super().restore()  # the unfed rest of the trace: from now
        if sched is not None and self._stopped_at is not None:
            if before is not None and (after := sched.t_next) is not None:
                self._shift += after - before
            self._move_trace(time.perf_counter())
        return out

    async def abort(self) -> int:
        self._push_orders()  # a probe's C=1 reaches the workers before the abort: none refills
        fut = self._ask(ABORT)
        if fut is None:
            return 0
        try:
            replies = await wait_within(fut, SYNC_TIMEOUT_S * 2)
        except TimeoutError:
            return 0
        return sum(r.n for r in replies if isinstance(r, Done))

    async def sync(self, cut: tuple[float, bool] | None = None) -> None:
        """Every live worker reports now; returns once each report has been applied. `cut`
        (a step's close, and whether its SLO reads each request's ITL p99): the reports carry
        the window figures of every request out at that close (worker_messages.Cut)."""
        if self.stopped:  # stop() applied every worker's last report
            return
        fut = self._ask(FLUSH, cut)
        if fut is not None:
            try:
                await wait_within(fut, SYNC_TIMEOUT_S)
            except TimeoutError:
                self.port.warn(f"workers: a report took over {SYNC_TIMEOUT_S:g} s; the step may miss its last moments", key="worker sync")

    # -- orders ---------------------------------------------------------------------------------
    def _orders(self) -> list[Order]:
        n = self.n
        alive = [s.index for s in self.states if s.alive]
        k = len(alive) or 1
        c = 1 if self.probing else max(0, self.concurrency - self.lent())
        cs = dict(zip(alive, split(c, k), strict=False))
        caps = dict(zip(alive, split(max(self.max_concurrency, k), k), strict=False))
        stamp = self.port.stamp()
        gone = self.port.gone()
        mode = self.mode if self.open_loop and not self.probing else "concurrency"
        trace = (self._gen, self.rate, self._shift) if self._gen else None
        out = []
        for i in range(n):
            out.append(Order(
                stamp=stamp, gone=gone, mode=mode, c=cs.get(i, 0),
                rate=(self.rate or 0.0) / k if mode == "rate" and i in cs else 0.0, trace=trace,
                cap=caps.get(i, 1), paused=self.paused or self.stopped, hold=self.hold,
                workload=self.port.workload(),  # a live change reaches every worker
            ))
        return out

    def _push_orders(self) -> None:
        """Send each worker its order if it changed (pipes keep order: a worker applies it
        before anything sent after)."""
        for i, order in enumerate(self._orders()):
            if order != self._last_order[i] and self.states[i].alive and i < len(self._conns):
                self.states[i].share = order.c if order.mode == "concurrency" else order.cap
                self._send(i, order)
                self._last_order[i] = order

    async def _run(self) -> None:
        while not self.stopped:
            self._rebase_trace()
            self._push_orders()  # a move of the trace reaches the workers before rows fed after it
            self._feed()
            self._mark_settled()
            self._wake.clear()
            await wait_set(self._wake, ORDER_POLL_S)

    # -- a trace replay -------------------------------------------------------------------------
    def _replaying(self) -> bool:
        return self.mode == TRACE and self.schedule is not None and not self.probing

    def _rebase_trace(self) -> None:
        """Back from a pause (or the server back): the rest of the trace from now, as one
        process's loop does (Controller._open_step), the rows already fed moved with it."""
        if not self._replaying():
            return
        now = time.perf_counter()
        if self.paused or self.hold:
            if self._stopped_at is None:
                self._stopped_at = now
        elif self._stopped_at is not None:
            self._move_trace(now)

    def _move_trace(self, now: float) -> None:
        """The first row not sent when the replay stopped is due now; every later row (fed
        or not) keeps its spacing."""
        stopped, self._stopped_at = self._stopped_at, None
        sched = self.schedule
        if stopped is None or sched is None:  # (called while a replay stands still)
            return
        waiting = [t for t in self._fed_times if t >= stopped]
        first = min(waiting) if waiting else sched.t_next
        if first is None or now <= first:
            return
        d = now - first
        if sched.t_next is not None:
            sched.rebase(sched.t_next + d)
        self._fed_times = deque(t + d for t in self._fed_times)
        self._shift += d

    def _feed(self) -> None:
        """The rows due within TRACE_FEED_AHEAD_S go to the live workers in turn, each with
        its intended time: the worker's pool sends it then (held at its share of the cap)."""
        sched = self.schedule
        if sched is None or not self._replaying() or self.paused or self.hold:
            return
        horizon = time.perf_counter() + TRACE_FEED_AHEAD_S
        alive = [s.index for s in self.states if s.alive and s.index < len(self._conns)]
        if not alive:
            return
        rows: dict[int, list] = {}
        while sched.t_next is not None and sched.t_next <= horizon:
            t, row = sched.pop()
            i = alive[self._next_worker % len(alive)]
            self._next_worker += 1
            rows.setdefault(i, []).append((self._worker_time(i, t), row))
            self.states[i].fed += 1
            self._fed_times.append(t)
        while self._fed_times and self._fed_times[0] < horizon - 2 * TRACE_FEED_AHEAD_S:
            self._fed_times.popleft()
        for i, batch in rows.items():
            self._send(i, Feed(self._gen, batch))

    def _cut_for(self, i: int, cut: tuple[float, bool] | None) -> tuple[float, float, bool] | None:
        """A step's close as worker i is asked it: (the close here, on its clock, with ITL)."""
        return None if cut is None else (cut[0], self._worker_time(i, cut[0]), cut[1])

    def _worker_time(self, i: int, t: float) -> float:
        """A time of this host as worker i's clock reads it (one monotonic clock here)."""
        return t

    def _send(self, i: int, msg: Order | Feed | Ask) -> bool:
        try:
            self._conns[i].send(msg)
            return True
        except (OSError, BrokenPipeError, EOFError):
            self._worker_died(i)
            return False

    def _ask(self, kind: str, cut: tuple[float, bool] | None = None) -> asyncio.Future | None:
        """Send `kind` to every live worker; a future of their replies (one each)."""
        alive = {s.index for s in self.states if s.alive and s.index < len(self._conns)}
        if not alive:
            return None
        self._seq += 1
        seq = self._seq
        fut = asyncio.get_running_loop().create_future()
        self._waits[seq] = (fut, set(alive), [])
        for i in sorted(alive):
            self._send(i, Ask(kind, seq, self._cut_for(i, cut)))
        return fut

    def _answered(self, i: int, seq: int, reply: Report | Done) -> None:
        w = self._waits.get(seq)
        if w is None:
            return
        fut, pending, replies = w
        pending.discard(i)
        replies.append(reply)
        if not pending:
            del self._waits[seq]
            if not fut.done():
                fut.set_result(replies)

    # -- reports --------------------------------------------------------------------------------
    def _on_msg(self, i: int, msg: Report | Done) -> None:
        if isinstance(msg, Report):
            self._apply(i, msg)
            if msg.kind == FLUSH:
                self._answered(i, msg.seq, msg)
        elif msg.what == ABORT:
            self._answered(i, msg.seq, msg)
        elif msg.what == STOP:
            self._stopped_workers.add(i)
            for seq in list(self._waits):
                self._answered(i, seq, msg)

    def _apply(self, w: int, msg: Report, shift: float = 0.0) -> None:
        """Replay a worker's report into the engine (targets' listeners -> engine). `shift`
        moves the report's times onto this host's clock: 0 for a worker on this host (one
        monotonic clock); for a remote worker, receipt time - the report's `now`, so each
        time is placed by its age (engine/load/ray_pool.py)."""
        if shift:
            msg = msg.shifted(shift, BUCKET_S)
        port = self.port
        stats, urls = port.listeners(), port.urls()
        live = self._live
        st = self.states[w]
        # held at the worker's cap: its step (by intended time) counts it; first, as a held
        # send that went out in this same report is one of these
        for dropped, t in msg.held:
            port.note_held(dropped, t)
        for ti, rid, phase, step, conc, t_send, t_int, exp, max_tokens, turn in msg.sends:  # Sent
            # the step is the coordinator's at the send (intended) time: never the order's
            # stamp of up to ORDER_POLL_S before
            step, _, phase = port.stamp_at(conc, t_int if t_int is not None else t_send)
            rec = RequestRecord(rid=rid, phase=phase, step=step, concurrency=conc, t_send=t_send, expected_input_tokens=exp,
                                max_tokens=max_tokens, t_intended=t_int, turn=turn, target=urls[ti], worker=w + self.first_index)
            live[rid] = (ti, rec)
            stats[ti].on_send(rec)
        for rid, t_send, t_first, t_first_answer, send_wait in msg.firsts:  # First
            got = live.get(rid)
            if got is not None:
                ti, rec = got
                rec.t_send, rec.t_first, rec.t_first_answer, rec.send_wait = t_send, t_first, t_first_answer, send_wait
                stats[ti].on_first(rec)
        for (ti, b), n in msg.tokens:
            stats[ti].on_tokens((b + 0.5) * BUCKET_S, n)
            st.tokens += n
        if msg.abandoned:
            port.abandon_held(msg.abandoned)
        gaps = msg.gaps
        if gaps:
            port.on_gaps(gaps)
        if msg.cut_at is not None and msg.cuts:  # before the ends: a step's close reads them
            port.on_cuts(msg.cut_at, msg.cuts)
        for t, lag in msg.loop_lags:
            self.loop_lag.record(t, lag)
        lags = msg.lags
        if lags is not None:  # a histogram delta, binned as LiveMetrics.on_lag bins
            port.merge_lags(lags)
            st.lag.merge(lags)
        for x in msg.ends:
            got = live.pop(x.rid, None)
            if got is None:
                continue
            ti, rec = got
            rec.t_send, rec.t_first, rec.t_first_answer, rec.t_end = x.t_send, x.t_first, x.t_first_answer, x.t_end
            rec.status, rec.http_status, rec.error_kind, rec.error_text = x.status, x.http_status, x.error_kind, x.error_text
            rec.input_tokens, rec.output_tokens, rec.usage_reported = x.input_tokens, x.output_tokens, x.usage_reported
            rec.remote, rec.cached_tokens, rec.send_wait = x.figures, x.cached_tokens, x.send_wait
            st.requests += 1
            if x.failed_gaps is not None:  # failed: its gaps leave the windows
                port.unmeasure_gaps(x.failed_gaps)
            if x.failed_tokens is not None:  # ... and its tokens the throughput (the engine's Measurements takes them out)
                rec.remote_credits = unbucket_tokens(x.failed_tokens)
                st.tokens -= sum(n for _, n in x.failed_tokens)
            stats[ti].on_remote_end(rec)  # a failure asks the target's health watch
        st.in_flight, st.backing_off, st.backlog = msg.in_flight, msg.backing_off, msg.backlog
        st.delayed, st.dropped = msg.delayed, msg.dropped
        gen, taken = msg.fed
        if gen == self._gen:
            st.taken = taken
        if st.cpu_s0 is None:
            st.cpu_s0 = msg.cpu_s
        st.cpu_s = msg.cpu_s - st.cpu_s0
        self.delayed = sum(s.delayed for s in self.states)
        self.dropped = sum(s.dropped for s in self.states)
        self._mark_settled()

    def _worker_died(self, i: int) -> None:
        st = self.states[i]
        if not st.alive or self.stopped:
            return
        st.alive = False
        lost = [rid for rid, (_, rec) in self._live.items() if rec.worker == i + self.first_index]
        for rid in lost:  # its requests in flight: they will never report
            self._live.pop(rid, None)
        self.port.forget(lost)
        for seq in list(self._waits):
            fut, pending, replies = self._waits[seq]
            pending.discard(i)
            if not pending:
                del self._waits[seq]
                if not fut.done():
                    fut.set_result(replies)
        left = sum(1 for s in self.states if s.alive)
        self.port.warn(f"worker {i + self.first_index} died with {st.in_flight} requests in flight ({len(lost)} unreported); {left} workers carry the load", key=f"worker {i} died")
        st.in_flight = st.backlog = st.backing_off = 0
        self._wake.set()  # the others get their new shares

    # -- summary.json -------------------------------------------------------------------------
    def summary(self) -> list[dict]:
        now = time.perf_counter()
        out = []
        for s in self.states:
            d = max(now - s.t0, 1e-9)
            p99 = s.lag.quantile(0.99) if s.lag.count else None
            out.append({
                "worker": s.index + self.first_index, "node": s.node, "alive": s.alive, "share": s.share,
                "requests": s.requests, "output_tok_s": round(s.tokens / d, 3),
                "lag_p99_ms": None if p99 is None else round(p99 * 1000.0, 3),
                "cpu_pct": round(100.0 * s.cpu_s / d, 1),
            })
        return out


def _with_index(spec: WorkerSpec, i: int) -> WorkerSpec:
    import dataclasses

    return dataclasses.replace(spec, index=i)
