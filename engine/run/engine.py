"""The engine: one asyncio loop that sends, measures, watches and records.

    Engine.start()   -> check URL, detect the server, calibrate prompts, open the session,
                        start telemetry, the request pool and the ticker.
    Engine.execute() -> a typed command (engine/run/commands.py): concurrency, pause, probe, ...
    Engine.snapshot  -> the latest Snapshot (what the UI draws; built in engine/run/publisher.py)
    Engine.stop()    -> stop all load, close the step, complete the session log.

The TUI, the headless runner and the tests drive this same API. It knows nothing of Textual,
nor of presets: the preset runner (engine/drive/preset_runner.py) drives it from above and registers
itself as the engine's `driver`, which operator commands cancel. engine/host.py runs it in
its own process under the TUI, so drawing cannot delay its timestamps.

Here: the life cycle, the commands (a table, `COMMANDS`) and the preset driver's place.
Where each other job lives:
- the load (who holds it, what one request is, start-up's own requests): load.py, with
  controller.py (the pool), pool.py / worker.py / ray_pool.py (workers), sender.py (HTTP);
- the targets (their Senders, health watches, gone and back): target_set.py;
- where every measurement lands (listeners, harvest, workers' reports): recorder.py;
- steps: live_steps.py (as the operator makes them), stepbook.py and steps.py;
- once a second (checks, the timeline row): ticker.py; the snapshot: publish.py;
- meta.json and summary.json: session/summary.py; the event log and warnings: eventlog.py.
Its helpers in run/ take it loosely typed (they are its parts; nothing imports this module back);
the load reaches it only through its port (engine/load/port.py, engine/run/load_port.py).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Awaitable, Callable

import httpx

from ..client.http import make_client
from ..client.target import Target, TargetUnreachable, detect, validate_url
from ..constants import OVERLOAD_BACKOFF_MAX_S
from ..load.controller import PAUSED, PROBE, RATE, TRACE, LoadControl
from ..load.probe_lane import ProbeLane
from ..load.sender import Sender
from ..measure.accumulator import StepAccumulator
from ..measure.live_metrics import LiveMetrics
from ..measure.records import Clock
from ..measure.slo import Slo
from ..measure.step_book import StepBook
from ..measure.step_result import StepResult
from ..measure.timeline import tick
from ..rules.guard import GuardWatch
from ..rules.step_text import format_step_line
from ..rules.verdicts import STEP_JUDGE
from ..session import SessionWriter
from ..telemetry.hub import TelemetryHub
from ..workload.arrivals import check_rate
from ..workload.change import WorkloadChange
from ..workload.prompts import DEFAULT_CALIBRATION, PromptSource
from . import commands as C
from .config import EngineConfig
from .each_second import Ticker
from .event_log import EventLog
from .live_steps import LiveSteps
from .load_start import fixed_size, make_load, prepare, start_telemetry
from .publisher import build_snapshot
from .recording import LaneListener, Recorder
from .snapshot import Snapshot
from .summary import default_label, session_meta, summary_doc
from .target_set import TargetSet
from .target_stats import TargetState, parse_weights
from .wiring import lane_events, step_events

SERVER_GONE = "server gone"
SERVER_NOT_READY = "server not ready"  # every target's /health answers 503 (engine/client/server_watch.py)


class Engine:
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.clock = Clock.now()
        self.metrics = LiveMetrics()
        self.events = EventLog()
        self.book = StepBook(self.clock, step_events(self._step_recorded, self._step_final), judge=STEP_JUDGE)
        self.book.percentiles = config.percentiles
        self.target: Target | None = None
        self.client: httpx.AsyncClient | None = None
        self.controller: LoadControl | None = None  # the load's state and commands (engine/load/holder.py)
        self.sender: Sender | None = None
        self.pool = None  # --workers N / --ray: the load's WorkerPool or RayPool (engine/load/holder.py, pool.py)
        self.live = LiveSteps(self)  # steps as the operator makes them (a key press: a new step)
        self.session: SessionWriter | None = None
        self.telemetry: TelemetryHub | None = None
        self.source: PromptSource | None = None
        self.holder = None  # the load held in this process (engine/load/holder.py LoadHolder), without workers
        self.trace = None  # engine/load/trace_replay.py TraceReplay, with a trace workload
        self.replay_base_workload = config.workload.describe()  # a replay's [workload], before any change
        self._last_rate: float | None = None  # the open loop's last rate, for the mode key
        self.calibration = DEFAULT_CALIBRATION
        self.preset_line = ""  # what a driver (the preset runner) is doing, for the screen
        self.driver: asyncio.Task | None = None
        self._tasks: list[asyncio.Task] = []
        self.ticker = Ticker(self)  # once a second: the checks and the timeline row
        self._listeners: list[Callable[[Snapshot], None]] = []
        # The loop that stamps bytes never waits on the disk: session flushes and summary
        # rewrites (fsync) run in order on this one thread.
        self._disk = ThreadPoolExecutor(max_workers=1, thread_name_prefix="redline-disk")
        self.closed = False
        self.t0 = time.perf_counter()
        self.cpu0 = time.process_time()  # this process's CPU seconds when the load started
        self.set_slo(config.slo, log=False)
        self._ids = itertools.count(1)  # request ids, unique in the session, in send order
        self.target_set = TargetSet(self, self._ids, self._overloaded)
        self.targets: list[TargetState] = self.target_set.states  # every target, the first is `target`
        self.lane: ProbeLane | None = None
        self.recorder = Recorder(self.metrics, self.book, self.events, self.clock)
        self.totals = self.recorder.totals  # the whole run, for the end summary (engine/measure/run_totals.py)
        # a fixed-size run (--num-requests, --duration): why it ended ("100 requests sent and
        # ended", "20 s"), set when it did; `run_done` is set then too
        self.finished = ""
        self.run_done = asyncio.Event()
        self.lane_stats = self.recorder.lane_stats
        self.guard = GuardWatch(config.guard) if config.guard is not None and config.guard.any else None
        self.snapshot = Snapshot(t=self.t0, elapsed_s=0.0, state="starting", target_c=config.concurrency, previous_c=None, in_flight=0)
        self.control = None  # --control: the control API, started by start_engine (engine/control/http_api.py)
        # how a command from outside runs: the host sets engine/drive/preset_runner.py execute (StartPreset
        # there, the rest here); the engine itself knows no presets
        self.dispatch: Callable[[Engine, C.Command], object] = lambda engine, cmd: engine.execute(cmd)
        self.on_stop_request: Callable[[str], None] | None = None  # a host's way to end the session (POST /v1/stop)

    # -- life cycle --------------------------------------------------------------------
    async def start(self) -> None:
        """Raises TargetError (bad input) or TargetUnreachable before any load is sent."""
        cfg = self.config
        base = validate_url(cfg.url)
        self.client = make_client(
            transport=cfg.transport,
            verify=not cfg.insecure,
            api_key=cfg.api_key,
            request_timeout=cfg.request_timeout,
            origin=base, headers=cfg.workload.headers,
        )
        try:
            await self._start(base)
        except asyncio.CancelledError:
            raise  # whoever cancelled (a signal) stops the engine with its own reason
        except BaseException:
            await self.stop("start failed")
            raise

    async def _start(self, base: str) -> None:
        cfg = self.config
        self.target = await detect(self.client, base, cfg.api, cfg.model)
        if cfg.out_dir is not None:
            self.session = SessionWriter(cfg.out_dir, session_meta(cfg, self.target), secrets=[cfg.api_key or "", cfg.control_token or "", cfg.admin_key or "", *self.target.info.secrets, *cfg.workload.secret_values()])
            self.recorder.session = self.session
            self.events.session = self.session
        if cfg.insecure:
            self.log("warning", "TLS certificate verification is OFF (--insecure)")
        weights = parse_weights(cfg.weights, 1 + len(cfg.more_urls))
        self.sender = self.target_set.add(self.client, self.target, weights[0]).sender
        self.recorder.load_sender = self.sender
        lane_sender = Sender(self.client, self.target, lane_events(LaneListener(self.recorder)), self.stamp,
                             self.clock.wall0 - self.clock.perf0, ids=self._ids, workload=cfg.workload)
        self.lane = ProbeLane(lane_sender, self._lane_prompt)
        self.recorder.lane_sender = lane_sender
        for url, w in zip(cfg.more_urls, weights[1:]):
            await self.target_set.start_more(url, w)
        await prepare(self)
        if cfg.telemetry:
            await start_telemetry(self, base)
        open_loop = cfg.rate is not None or self.trace is not None  # C waits for the mode key: within the cap
        c0 = min(cfg.concurrency, cfg.max_concurrency) if open_loop else cfg.concurrency
        self.controller = await make_load(self, c0)
        if cfg.num_requests is not None:
            self.controller.budget = cfg.num_requests  # type: ignore[attr-defined]  (in this process: checked before the start)
        if self.trace is not None and cfg.live_steps:
            self.trace.start(self.controller, cfg.rate or 1.0)
        elif cfg.rate is not None and self.trace is None:
            self._last_rate = self.controller.set_rate(cfg.rate)
        self.live.sync_shape()
        if cfg.start_paused or (self.trace is not None and not cfg.live_steps):
            self.controller.pause()  # a trace preset's runner starts each replay itself
        self.t0, self.cpu0 = time.perf_counter(), time.process_time()
        self.ticker.last_row_t = self.t0
        self.controller.start()
        if cfg.live_steps and not cfg.start_paused:
            self.book.open_live(self.live.concurrency(), False)
        self._tasks.append(asyncio.create_task(tick(self.t0, self.ticker.each_second, self._publish), name="redline-ticker"))
        self._tasks.append(asyncio.create_task(self.ticker.harvest_often(), name="redline-harvest"))
        if cfg.num_requests is not None or cfg.duration_s is not None:
            self._tasks.append(asyncio.create_task(fixed_size(self), name="redline-fixed-size"))
        self.log("notice", f"target {base} ({self.target.info.kind}, api {self.target.api}, model {self.target.model or '?'}) {self.load_text}")
        self._publish(time.perf_counter())

    async def stop(self, reason: str = "quit") -> None:
        """Stop all load first, then complete the log. Idempotent."""
        if self.closed:
            return
        self.closed = True
        self.cancel_driver()
        cancelled = 0
        if self.lane is not None:
            await self.lane.stop()
        if self.controller is not None:
            cancelled = await self.controller.stop()
        await self.live.settle()  # every report is in: the steps closed before now are recorded
        now = time.perf_counter()
        self.book.close_live(now)
        self.book.finalize_all(now)  # what the stop cancelled stays censored, at its age
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        await self.target_set.close(self.telemetry)
        if self.telemetry is not None:
            await self.telemetry.stop()
        await self.ticker.stop()
        self.log("notice", f"stopped ({reason}); {cancelled} in-flight requests cancelled")
        if self.session is not None:
            self.ticker.timeline_row(now)
            self.write_summary()
        self._disk.shutdown(wait=True)  # what was queued is written before the log closes
        if self.session is not None:
            self.session.close(reason)
        if self.control is not None:
            await self.control.close()
        if self.client is not None:
            await self.client.aclose()
        await self.target_set.close_clients()
        self._publish(now, done=True)

    # -- commands (call on the engine's loop) -------------------------------------------
    def execute(self, cmd: C.Command) -> object:
        """One entry point for every operator command; returns the reply (or a coroutine of
        it for SetWorkload/Probe/Abort/Flush). The snapshot is republished at once. StartPreset is the
        runner's (engine/drive/preset_runner.py execute): the engine knows no presets."""
        run = COMMANDS.get(type(cmd))
        if run is None:
            raise TypeError(f"unknown command {cmd!r}")
        if isinstance(cmd, C.OPERATOR_TAKES_OVER):
            self.cancel_driver()
        res = run(self, cmd)
        if asyncio.iscoroutine(res):
            return self._then_publish(res)
        self._publish(time.perf_counter())  # the UI sees the change now, not at the next tick
        return res

    async def _then_publish(self, coro: Awaitable[object]) -> object:
        try:
            return await coro
        finally:
            self._publish(time.perf_counter())

    def set_concurrency(self, n: int, *, kind: str = "key") -> int:
        """Closed loop at C=n. `kind` names who asked: `key` (the operator) or `preset` (the runner)."""
        ctl = self._ctl
        c = ctl.set_concurrency(n)
        self._ctl.end_probe()
        self.events.clear("held at cap")  # closed loop: nothing waits at the cap any more
        self.log(kind, f"C={c}", concurrency=c)
        self.live.roll()
        return c

    def set_rate(self, rate: float, *, kind: str = "key") -> float:
        """Open loop at `rate` requests/s (ArrivalError for a rate <= 0). At most
        max_concurrency requests in flight: sends due beyond it wait, counted and warned."""
        ctl = self._ctl
        if ctl.mode == TRACE and not ctl.probing and self.trace is not None and self.trace.schedule is not None:
            r = check_rate(rate, "trace speed")
            self.trace.schedule.set_speed(r, time.perf_counter())
            ctl.rate = r
            self.log(kind, f"trace speed x{r:g}", concurrency=ctl.max_concurrency)
            self.live.roll()
            return r
        r = ctl.set_rate(check_rate(rate))
        self._last_rate = r
        self._ctl.end_probe()
        self.log(kind, f"rate {r:g} req/s ({ctl.arrival.describe()}, in-flight cap {ctl.max_concurrency})", concurrency=ctl.max_concurrency)
        self.live.roll()
        return r

    def start_trace(self, speed: float, *, kind: str = "key") -> float:
        """Replay the trace from its first row, now, at `speed` (a trace workload only)."""
        if self.trace is None:
            raise RuntimeError("no trace: start redline with --trace PATH (or [workload].trace)")
        ctl = self._ctl
        check_rate(speed, "trace speed")
        self._ctl.end_probe()
        self.trace.start(ctl, speed)
        self.log(kind, f"trace {self.trace.path}: {len(self.trace.rows)} requests over {self.trace.duration_s / speed:.1f} s (x{speed:g})", concurrency=ctl.max_concurrency)
        self.live.roll()
        return speed

    def toggle_mode(self) -> str:
        """Concurrency <-> rate mode. Into rate mode: the last rate, else the request rate
        achieved now (the live step's sends per second, 2 significant digits; 1 req/s when
        nothing was sent yet)."""
        ctl = self._ctl
        if ctl.open_loop:
            self.set_concurrency(ctl.target)
        else:
            r = self._last_rate
            if r is None:  # the step's own send rate (steadier than a 3 s window of completions)
                live = self.book.live_result
                req_s = live.request_throughput if live is not None else 0.0
                if req_s <= 0:
                    _, _, req_s, _ = self.metrics.rates(time.perf_counter())
                r = float(f"{req_s:.2g}") if req_s > 0 else 1.0
            self.set_rate(r)
        return ctl.mode

    async def set_workload(self, change: WorkloadChange, *, kind: str = "key") -> dict:
        """The workload from now on (a new step starts); WorkloadError (one line) for a value
        that cannot be used, and nothing changes. Returns the new workload's description."""
        assert self.source is not None
        new = change.apply(self.config.workload)
        source = await asyncio.to_thread(PromptSource, new, self.calibration)  # a dataset file loads off the loop
        self.config.workload, self.source = new, source
        if self.holder is not None:  # in this process (workers: the next order carries it)
            self.holder.workload, self.holder.source = new, source
        self.book.workload = new.describe()
        self.log("workload", f"workload ({kind}): {change.describe()}", detail=self.book.workload)
        self.live.roll()
        return self.book.workload

    @property
    def load_text(self) -> str:
        """The load shape in a few words: `C=8`, `rate 5 req/s (poisson, cap 256)`, `trace x2`."""
        ctl = self.controller
        if ctl is None:
            return f"C={self.config.concurrency}"
        if ctl.mode == RATE:
            return f"rate {ctl.rate:g} req/s ({ctl.arrival.describe()}, cap {ctl.max_concurrency})"
        if ctl.mode == TRACE:
            return f"trace x{ctl.rate:g}"
        return f"C={ctl.target}"

    def stamp(self, t_intended: float | None = None) -> tuple[int, int, str]:
        """(step, concurrency, phase) for a request sent now, or scheduled at `t_intended`
        (open loop: the step that scheduled it owns it); an open loop's concurrency is its cap."""
        ctl = self.controller
        c = 0 if ctl is None else (ctl.max_concurrency if ctl.open_loop else ctl.target)
        return self.book.stamp(c, t_intended)

    def note_held(self, dropped: bool, t_intended: float | None = None) -> None:
        """A send was held back at the in-flight cap (open loop), due at `t_intended`."""
        self.book.on_held(None if dropped else t_intended)
        ctl = self._ctl
        what = f"{ctl.dropped} dropped" if ctl.dropped else f"{ctl.delayed} delayed"
        self.events.warn(
            f"open loop: sends held back at the in-flight cap {ctl.max_concurrency} ({what}); latencies count from the intended send times",
            key="held at cap",
        )

    def pause(self) -> None:
        self._ctl.pause()
        self.log("key", "paused")
        self.live.roll()

    def resume(self) -> None:
        self._ctl.resume()
        self.log("key", f"resumed at C={self._ctl.target}")
        self.live.roll()

    def toggle_pause(self) -> None:
        self.resume() if self._ctl.paused else self.pause()

    async def abort(self) -> int:
        n = await self._ctl.abort()
        self.log("key", f"aborted {n} in-flight requests")
        return n

    async def probe(self) -> int:
        """Abort everything in flight, then hold C=1 (remembering the previous C)."""
        ctl = self._ctl
        n = await ctl.probe()
        was = f"rate {ctl.previous_rate:g} req/s" if ctl.previous_rate is not None else f"C={ctl.previous}"
        self.events.clear("held at cap")
        self.log("probe", f"abort + C=1 probe ({n} in-flight requests cancelled; previous {was})")
        self.live.roll()
        return n

    def restore(self) -> int | None:
        c = self._ctl.restore()
        if c is not None:
            self.log("key", f"back to {self.load_text}", concurrency=c)
            self.live.roll()
        return c

    def raise_max(self, n: int) -> int:
        """The operator confirmed a concurrency above --max-concurrency."""
        ctl = self._ctl
        if n > ctl.max_concurrency:
            ctl.max_concurrency = n
            self.log("warning", f"--max-concurrency raised to {n} by the operator")
        return self.set_concurrency(n)

    def toggle_lane(self) -> bool:
        """The probe lane on or off; returns whether it is on."""
        lane = self.lane
        if lane is None:
            raise RuntimeError("engine not started")
        if lane.on:
            asyncio.ensure_future(lane.stop())
            self.log("key", "probe lane off")
            return False
        lane.start()
        self.log("key", "probe lane on: one request at a time beside the load, kept out of its figures")
        return True

    def _lane_prompt(self) -> tuple[str, int, int]:
        assert self.source is not None
        p = self.source.next()
        return p.text, p.max_tokens, p.expected_input_tokens

    def set_slo(self, slo: Slo | None, *, log: bool = True) -> None:
        """SLOs from now on: goodput live and for steps opened from now, and the SLO stop
        rule of a preset started from now (None: no SLO)."""
        self.config.slo = slo if slo is not None and slo.any else None
        per_request = slo if slo is not None and slo.per_request else None
        self.metrics.slo = per_request
        self.book.slo = per_request
        if log:
            self.log("key", f"SLO {slo.describe()}" if slo is not None else "SLO off")

    async def flush(self) -> str | None:
        """Hand buffered rows to the OS (off the loop); returns the session's write error."""
        if self.session is not None:
            await asyncio.wrap_future(self._disk.submit(self.session.flush))
            return self.session.error
        return None

    @property
    def _ctl(self) -> LoadControl:
        if self.controller is None:
            raise RuntimeError("engine not started")
        return self.controller

    # -- drivers (the preset runner) ------------------------------------------------------
    def attach_driver(self, task: asyncio.Task) -> None:
        """A task steering this engine (a preset); operator commands cancel it."""
        self.cancel_driver()
        self.driver = task
        self._tasks.append(task)

    @property
    def driver_running(self) -> bool:
        return self.driver is not None and not self.driver.done()

    def cancel_driver(self) -> bool:
        task, self.driver = self.driver, None
        if task is not None and not task.done():
            task.cancel()
            return True
        return False

    # -- requests (Sender's listener) -----------------------------------------------------
    def _overloaded(self, kind: str) -> None:
        self.events.warn(f"server overloaded ({kind}): each failing slot backs off up to {OVERLOAD_BACKOFF_MAX_S:g} s", key="overloaded")

    @property
    def server_gone(self) -> bool:
        return self.target_set.all_gone

    @property
    def failure_streak(self):  # the load's failures in a row, the last reason: recording.py FailureStreak
        return self.recorder.streak

    # -- steps -------------------------------------------------------------------------
    @property
    def steps(self) -> list[StepResult]:
        return self.book.steps

    @property
    def probe_result(self) -> StepResult | None:
        return self.book.probe_result

    @property
    def break_result(self):
        return self.book.break_result

    @break_result.setter
    def break_result(self, br) -> None:
        self.book.break_result = br

    def _step_recorded(self, res: StepResult) -> None:
        prefix = "probe " if res.phase == "probe" else ""
        self.log("step", prefix + " ".join(format_step_line(res).split()), concurrency=res.concurrency)
        self.write_summary()

    def _step_final(self, res: StepResult) -> None:
        """A step's late requests all ended: its record now holds their true figures."""
        if res.ended_after_close:
            stuck = f", {res.censored_ttft} never answered (the run ended or aborted them)" if res.censored_ttft else ""
            n = res.ended_after_close  # `1 request ended`, `8 requests ended`
            self.log("step", f"{res.load} final ({n} request{'s' if n != 1 else ''} ended after the step{stuck}): " + " ".join(format_step_line(res).split()), concurrency=res.concurrency)
        self.write_summary()

    def suspend_live_steps(self) -> None:
        """A driver (the preset runner) manages its own steps from now."""
        self.live.suspend()

    def resume_live_steps(self) -> None:
        self.live.resume()

    async def close_step(self, acc: StepAccumulator) -> StepResult:
        """Close a driver's step now (with workers: once they reported what came before)."""
        return await self.live.close_step(acc)

    def write_summary(self) -> None:
        if self.session is not None and self.target is not None:
            self.to_disk(self.session.write_summary, summary_doc(self))

    # -- the log -----------------------------------------------------------------------
    def log(self, kind: str, text: str, **fields: object) -> None:
        self.events.log(kind, text, **fields)

    def warn(self, text: str, key: str | None = None) -> None:
        self.events.warn(text, key)

    def to_disk(self, fn: Callable[..., object], *args: object) -> None:
        """Run a session write off the loop (errors land in the writer's `error`)."""
        try:
            self._disk.submit(fn, *args)
        except RuntimeError:  # shut down: the engine is stopping, write in place
            fn(*args)

    @property
    def history(self):
        """The last HISTORY_S timeline rows (engine/run/each_second.py)."""
        return self.ticker.history

    @property
    def in_flight(self) -> int:
        """Requests on the wire (slots backing off after an overload answer not counted)."""
        ctl = self.controller
        if ctl is None:
            return 0
        return max(0, ctl.in_flight - self.backing_off)

    @property
    def backing_off(self) -> int:
        """Load slots waiting after an overload answer, over every target."""
        if self.pool is not None:
            return self.pool.backing_off
        return self.target_set.backing_off

    @property
    def state(self) -> str:
        if self.controller is None:
            return "starting"
        if self.controller.stopped:
            return "stopped"
        if self.server_gone:
            return SERVER_GONE
        if self.target_set.all_down:
            return SERVER_NOT_READY
        s = self.controller.state
        if self.preset_line and s not in (PAUSED, PROBE):
            return "preset"
        return s

    def subscribe(self, fn: Callable[[Snapshot], None]) -> None:
        self._listeners.append(fn)

    def _publish(self, now: float, done: bool = False) -> None:
        snap = build_snapshot(self, now, done)
        self.snapshot = snap
        for fn in self._listeners:
            fn(snap)


# The engine's commands (engine/run/commands.py): what each one runs. A coroutine's reply is
# awaited by whoever sent it (the snapshot is republished when it is done).
COMMANDS: dict[type, Callable[[Engine, Any], object]] = {
    C.SetConcurrency: lambda e, c: e.raise_max(c.n) if c.raise_max else e.set_concurrency(c.n),
    C.SetRate: lambda e, c: e.set_rate(c.rate),
    C.ToggleMode: lambda e, c: e.toggle_mode(),
    C.SetWorkload: lambda e, c: e.set_workload(c.change),
    C.TogglePause: lambda e, c: e.toggle_pause(),
    C.Probe: lambda e, c: e.probe(),
    C.Abort: lambda e, c: e.abort(),
    C.Restore: lambda e, c: e.restore(),
    C.CancelPreset: lambda e, c: e.cancel_driver(),
    C.Flush: lambda e, c: e.flush(),
    C.ToggleLane: lambda e, c: e.toggle_lane(),
    C.SetSlo: lambda e, c: e.set_slo(c.slo),
    C.Log: lambda e, c: e.log(c.kind, c.text),
}

__all__ = ["Engine", "EngineConfig", "TargetUnreachable", "default_label"]
