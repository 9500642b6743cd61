"""Once a second, on the engine's loop: the timeline row and the checks that watch the run.

Each tick (engine/measure/timeline.py `tick`, one row per TIMELINE_INTERVAL_S):
- harvest every in-flight request's gaps (also every HARVEST_INTERVAL_S between ticks:
  `harvest_often`) and recompute the live percentiles;
- feed the steps the second's server sample and GPU power;
- the cap detector (the server holds a queue behind a cap), the client's own health (its CPU,
  its loop, the machine: measured off the loop every second), the session log's write errors,
  the guard (`[guard]`: drops the load when a limit holds for its time), and whether one
  load process holds more streams than it stamps truly (engine/load/worker_count.py);
- the timeline row (engine/measure/timeline.py), kept for the sparklines and written to the session.

The ticker reads the engine through `Watched` (below) and steers it only through its commands
(the guard's drop is `set_concurrency`, as a key press).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import deque
from typing import TYPE_CHECKING, Protocol

from ..constants import HARVEST_INTERVAL_S, HISTORY_S, TIMELINE_INTERVAL_S
from ..heap import HeapKeeper
from ..load.controller import CONCURRENCY, LoadControl
from ..measure.timeline import timeline_row
from ..rules.guard import GuardWatch
from ..telemetry.cap import CapDetector, cap_warning
from ..telemetry.client_health import ClientHealth, LoopLagMonitor
from ..telemetry.efficiency import total_power_w
from ..telemetry.load_lag import LoadLag
from ..telemetry.server_info import cache_report_hint
from ..workload.prompts import is_prefix_spec
from .replan import Replanned, Replanner

if TYPE_CHECKING:
    from ..measure.records import Clock
    from ..measure.step_book import StepBook
    from ..telemetry.hub import TelemetryHub
    from ..telemetry.types import ClientHealthSample, ServerSample
    from .disk import Disk
    from .held_load import HeldLoad
    from .lifetime import Lifetime
    from .measurements import Measurements
    from .steering import Driven


class Watched(Replanned, Protocol):
    """What the engine's second reads of it, and the commands it gives (the guard's drop)."""

    clock: Clock
    telemetry: TelemetryHub | None
    book: StepBook
    measurements: Measurements
    disk: Disk
    life: Lifetime
    load: HeldLoad

    @property
    def steering(self) -> Driven: ...
    @property
    def state(self) -> str: ...
    @property
    def backing_off(self) -> int: ...
    @property
    def server_gone(self) -> bool: ...
    def set_concurrency(self, n: int, *, kind: str = "key") -> int: ...


class Ticker:
    """The engine's second: its checks (the guard's among them), and the timeline rows (`row`,
    `history`)."""

    def __init__(self, engine: Watched) -> None:
        self.e = engine
        self.history: deque[dict] = deque(maxlen=HISTORY_S)
        self.row: dict = {}  # the last timeline row
        self.second = 0  # rows so far
        self.last_row_t: float | None = None
        self.health: ClientHealthSample | None = None  # the client's, refreshed once a second
        self.cap: CapDetector | None = None
        guard = engine.config.guard
        self.guard = GuardWatch(guard) if guard is not None and guard.any else None  # `[guard]` / --guard
        self._health_probe: ClientHealth | None = None
        self._lag: LoopLagMonitor | None = None
        self._session_error: str | None = None
        self.heap = HeapKeeper()  # the collector's walks: a second's objects, not the heap (engine/heap.py)
        self.replan = Replanner(engine)  # --workers auto while the run goes (engine/core/replan.py)
        self._cache_hint_done = False  # the cached-tokens hint was given, or is not to be given

    # -- start / stop -------------------------------------------------------------------------
    def start_watching(self) -> None:
        """The client's health (loop lag, CPU) and the cap detector, with telemetry on."""
        e = self.e
        self._lag = LoopLagMonitor()
        self._lag.start()
        # the lag of the loops that hold the load: the workers' while they do (load_lag.py)
        self._health_probe = ClientHealth(LoadLag(self._lag, self._workers_lag, self._lane_on))
        e.life.spawn(self._watch_health(), "redline-health")
        self.cap = CapDetector(e.target.info if e.target else None)

    def _workers_lag(self) -> LoopLagMonitor | None:
        pool = self.e.load.pool
        return pool.loop_lag if pool is not None else None

    def _lane_on(self) -> bool:
        lane = self.e.load.lane
        return lane is not None and lane.on

    async def stop(self) -> None:
        if self._lag is not None:
            await self._lag.stop()

    async def _watch_health(self) -> None:
        """psutil scans /proc (several ms): keep it off the loop that stamps bytes."""
        assert self._health_probe is not None
        while True:
            await asyncio.sleep(TIMELINE_INTERVAL_S)
            self.health = await asyncio.to_thread(self._health_probe.status)

    async def harvest_often(self) -> None:
        """Take the in-flight requests' new gaps every HARVEST_INTERVAL_S, not only once a second.

        A harvest holds the loop while it bins every ITL since the last one (~5 µs a chunk):
        once a second at C=256 (~5,600 chunks/s) that was a 25-30 ms pause, and the decode
        burst arriving meanwhile was stamped that late, which alone set the p99 ITL ~10-20 ms
        above the server's own p99 write gap (benchmarks/itl_gap.py). Twenty small harvests a
        second pause ~1-1.5 ms each and feed the same gaps, each by its own arrival time."""
        while True:
            await asyncio.sleep(HARVEST_INTERVAL_S)
            self.e.measurements.harvest_all()

    # -- each second ----------------------------------------------------------------------------
    def each_second(self, now: float) -> None:
        e = self.e
        self._check_trace_end()
        e.measurements.harvest_all()
        e.metrics.recompute_percentiles(now)
        srv = self.server_total()
        power = total_power_w(e.telemetry.gpus) if e.telemetry else None
        e.book.each_second(now, srv, power)
        ev = e.events
        ctl = e.load.controller
        if self.cap is not None and ctl is not None:
            warning = self.cap.update(now, ctl.concurrency, e.in_flight, srv)
            if warning:
                ev.warn(warning, key="server cap")
            elif srv is not None and srv.running is not None and srv.queued is not None:
                if self.cap.active and self.cap.holding:  # the condition at this update, server info read
                    # the warning stays while the cap holds, with today's numbers
                    ev.hold("server cap", cap_warning(e.target.info if e.target else None, e.in_flight, self.cap.server or srv), now)
                else:  # its condition ended (the probe: the server runs 1, queue 0): off the screen now
                    ev.clear("server cap")
        h = self.health
        cause = h.cause if h is not None and h.overloaded else ""
        for c in ("client_cpu", "loop_blocked", "machine_busy"):
            if c != cause:
                ev.clear(f"client {c}")  # the screen shows only the cause measured now
        if cause and h is not None:
            ev.warn(h.reason, key=f"client {cause}")  # one log line per episode of a cause
        session = e.disk.session
        if session is not None and session.error and session.error != self._session_error:
            self._session_error = session.error
            ev.warn(f"session log: {session.error}; {session.lost_rows} rows lost", key="session write")
        elif self._session_error is not None:
            ev.hold("session write", f"session log: {self._session_error}; {session.lost_rows if session else 0} rows lost", now)
        self._check_crowded(now)
        self._check_cache_report()
        self._check_guard(now)
        ev.each_second(now)
        self.timeline_row(now)
        if session is not None:
            e.disk.write(session.flush)
        self.heap.tick(now, idle=e.in_flight == 0 and (ctl is None or ctl.paused))

    def _check_cache_report(self) -> None:
        """A workload that asks for cached tokens (shared prefixes, several turns) on a server
        that reports none: one notice saying what to enable (engine/telemetry/server_info.py)."""
        e = self.e
        if self._cache_hint_done or e.target is None:
            return
        w = e.config.workload
        if not (is_prefix_spec(w.dataset) or w.turns > 1):
            self._cache_hint_done = True
            return
        acc = e.book.live or e.book.current
        done = acc.completed if acc is not None else None
        hint = cache_report_hint(e.target.info, e.target.api, completed=done, reported=acc.cached_reports if acc is not None else 0)
        if hint:
            e.log("notice", hint)
        if hint or e.target.info.cache_report is not None or (acc is not None and acc.cached_reports):
            self._cache_hint_done = True

    def _check_crowded(self, now: float) -> None:
        """More streams than the load processes hold, by what the run measured
        (engine/core/replan.py): `--workers auto` adds worker processes, else a warning while it lasts."""
        self.replan.each_second(now, self.health)

    def server_total(self) -> ServerSample | None:
        """The server's sample for steps and the cap detector: with several targets, their
        running and queued summed (the first target's sample otherwise)."""
        e = self.e
        srv = e.telemetry.server if e.telemetry else None
        if srv is None or len(e.targets) < 2:
            return srv
        samples = [t.telemetry.server for t in e.targets if t.telemetry is not None]
        if any(x is None for x in samples):
            return srv

        def total(name: str) -> float | None:
            vals = [getattr(x, name) for x in samples]
            return None if any(v is None for v in vals) else float(sum(vals))

        return dataclasses.replace(srv, running=total("running"), queued=total("queued"), prefix_queries_total=None, prefix_hits_total=None)

    def _check_trace_end(self) -> None:
        e = self.e
        tr, ctl = e.load.trace, e.load.controller
        if tr is not None and ctl is not None and ctl.trace_done and tr.schedule is not None and not tr.finished_logged:
            tr.finished_logged = True
            sent, total = tr.progress()
            e.log("notice", f"trace replay finished: {sent}/{total} requests sent (x{ctl.rate:g}); press m for concurrency mode")

    def _check_guard(self, now: float) -> None:
        e = self.e
        g, ctl = self.guard, e.load.controller
        if g is None or ctl is None or ctl.paused or ctl.probing or e.server_gone:
            return
        m = e.metrics
        _, _, req_s, err_s = m.rates(now)
        err_rate = err_s / (req_s + err_s) if req_s + err_s > 0 else None
        p99 = m.percentiles.ttft.p99
        p99_ms = p99 * 1000.0 if p99 is not None else None
        live = e.book.live_result  # requests waiting past the bound with no first token: a breach
        if live is not None and live.p99_ttft_ms_bound and live.p99_ttft_ms is not None:
            p99_ms = max(p99_ms or 0.0, live.p99_ttft_ms)
        temps = [x.temp_c for x in (e.telemetry.gpus if e.telemetry else []) if x.temp_c is not None]
        to = g.second(ctl.concurrency, err_rate, p99_ms, max(temps) if temps else None)
        if to is None:
            if g.crossed_for:
                e.events.hold("guard crossing", f"guard: {g.reason} for {g.crossed_for} s (drops the load at {g.sustain_s} s)", now)
            return
        e.events.clear("guard crossing")
        was = ctl.concurrency
        if e.steering.cancel_driver():
            e.log("preset", "preset stopped by a guard")
        e.set_concurrency(to, kind="guard")
        e.events.warn(f"guard: {g.reason} for {g.sustain_s} s: dropped from C={was} to C={to} (raise it again with +/])", key="guard")

    # -- the timeline row -----------------------------------------------------------------------
    def timeline_row(self, now: float) -> None:
        e = self.e
        last = self.last_row_t if self.last_row_t is not None else now - TIMELINE_INTERVAL_S
        self.last_row_t = now
        ctl = e.load.controller
        tel = e.telemetry
        lane = e.load.lane
        row = timeline_row(
            t_wall=e.clock.wall(now),
            interval_s=now - last,
            sec=e.metrics.take_second(now),
            stats=e.metrics.percentiles,
            state=e.state,
            target_c=ctl.concurrency if ctl else 0,
            in_flight=e.in_flight,
            backing_off=e.backing_off,
            server=tel.server if tel else None,
            health=self.health,
            gpus=tel.gpus if tel else [],
            good_share=(e.metrics.good_share(now) or 0.0) if e.metrics.slo is not None else None,
            lane=e.measurements.lane_stats.p50_ms(now) if lane is not None and lane.on else None,
            shape=self._shape_row(ctl),
        )
        self.second += 1
        self.row = row
        self.history.append(row)
        if e.disk.session is not None:
            e.disk.session.add_timeline(row)

    def _shape_row(self, ctl: LoadControl | None) -> dict:
        """The timeline's load-shape columns (docs/session-format.md#timelinendjson)."""
        if ctl is None:
            return {"mode": CONCURRENCY, "target_rate": None}
        mode = CONCURRENCY if ctl.probing else ctl.mode
        row: dict = {"mode": mode, "target_rate": ctl.rate if mode != CONCURRENCY else None}
        if mode != CONCURRENCY:
            lag = self.e.metrics.percentiles.schedule_lag.ms()
            row.update(
                schedule_lag_p50_ms=None if lag["p50"] is None else round(lag["p50"], 3),
                schedule_lag_p99_ms=None if lag["p99"] is None else round(lag["p99"], 3),
                held_at_cap=ctl.waiting,
                dropped_or_delayed=ctl.delayed + ctl.dropped,
            )
        return row
