"""The engine: one asyncio loop that sends, measures, watches and records.

    Engine.start()   -> check URL, detect the server, calibrate prompts, open the session,
                        start telemetry, the request pool and the ticker.
    Engine.execute() -> a typed command (engine/core/commands.py): concurrency, pause, probe, ...
    Engine.snapshot  -> the latest Snapshot (what the UI draws; built in engine/core/publisher.py)
    Engine.stop()    -> stop all load, close the step, complete the session log.

The TUI, the headless runner and the tests drive this same API. It knows nothing of Textual,
nor of presets: the preset runner (engine/run/preset_runner.py) drives it from above, and a
host makes it with the runner's command table (`new_engine` there: StartPreset, StartProfile
added to COMMANDS below); a driver's task steers it until an operator command cancels it.
engine/host.py runs it in its own process under the TUI, so drawing cannot delay its timestamps.

Here: the life cycle, the commands (a table, `COMMANDS`) and the parts, each owning its state:
- config, clock; the live windows (engine/measure/live_metrics.py) and the steps
  (engine/measure/step_book.py), fed by Measurements (measurements.py: where every
  measurement lands) through the named events, the hooks (engine/measure/hooks.py,
  subscribed in wiring.py); the event log (event_log.py);
- the targets (their Senders, health watches, gone and back, the server's profiler and cache
  endpoints): targets.py, target_stats.py;
- the load it holds (held_load.py), started in load_start.py, with workers through its port
  (engine/load/port.py, engine_port.py); live steps: live_steps.py; each second: ticker.py,
  with replan.py (the checks, the guard, the timeline row);
- the snapshot: publisher.py; the session's writes off the loop: disk.py (meta.json and
  summary.json: summary.py, provenance.py; a step's client_limited: judge_doubt); the engine's
  life and tasks: lifetime.py; who steers it (the command table, the driver, the API): steering.py.
Each part takes what it needs of the engine as a typed Protocol (or the parts themselves).
"""

from __future__ import annotations

import asyncio
import time
from functools import partial
from typing import TYPE_CHECKING, Awaitable, Mapping

from ..client.target import TargetUnreachable, validate_url
from ..load.controller import PAUSED, PROBE, RATE, TRACE, Controller, LoadControl
from ..load.probe_lane import ProbeLane
from ..load.sender import Sender
from ..measure.accumulator import StepAccumulator
from ..measure.live_metrics import LiveMetrics
from ..measure.records import Clock
from ..measure.run_totals import RunTotals
from ..measure.slo import Slo
from ..measure.step_book import StepBook
from ..measure.step_result import BreakResult, StepResult
from ..measure.timeline import tick
from ..rules.step_text import format_step_line
from ..rules.verdicts import STEP_JUDGE
from ..session import SessionWriter
from ..telemetry.client_doubt import client_doubted
from ..telemetry.hub import TelemetryHub
from ..workload.arrivals import check_rate
from ..workload.change import WorkloadChange
from ..workload.prompts import PromptSource
from . import commands
from .config import EngineConfig
from .disk import Disk
from .event_log import EventLog
from .held_load import HeldLoad
from .lifetime import Lifetime
from .live_steps import LiveSteps
from .load_start import fixed_size, make_load, prepare, start_telemetry
from .measurements import FailureStreak, LaneListener, Measurements
from .publisher import Publisher, build_snapshot
from .snapshot import Snapshot
from .steering import ControlApi, Handler, Steering
from .summary import default_label, session_meta, summary_doc
from .target_stats import parse_weights
from .targets import TargetSet
from .ticker import Ticker
from .wiring import lane_hooks, step_hooks

if TYPE_CHECKING:
    import httpx

    from ..client.target import Target
    from ..load.worker_pool import WorkerPool

SERVER_GONE = "server gone"
SERVER_NOT_READY = "server not ready"  # every target's /health answers 503 (engine/client/server_watch.py)


class Engine:
    def __init__(self, config: EngineConfig, table: Mapping[type, Handler[Engine]] | None = None) -> None:
        """`table`: the whole command table (default: the engine's own, COMMANDS; a host
        gives engine/run/preset_runner.py's, which adds the preset runner's commands)."""
        self.config = config
        self.clock = Clock.now()
        self.metrics = LiveMetrics()
        self.events = EventLog()
        self.book = StepBook(self.clock, step_hooks(self._step_recorded, self._step_final), judge=STEP_JUDGE)
        self.book.percentiles = config.percentiles
        self.measurements = Measurements(self.metrics, self.book, self.events, self.clock)  # every measurement lands here
        self.load = HeldLoad(base_workload=config.workload.describe())  # the load, filled at the start
        self.targets = TargetSet(config, self.clock, self.events, self.measurements, self.metrics, self.load, self.stamp)
        self.live = LiveSteps(config, self.book, self.measurements, self.load)  # steps as the operator makes them
        self.telemetry: TelemetryHub | None = None  # the first target's /metrics and the GPUs
        self.disk = Disk()  # the session's writes, off the loop
        self.steering: Steering[Engine] = Steering(COMMANDS if table is None else table)
        self.life = Lifetime()
        self.ticker = Ticker(self)  # once a second: the checks and the timeline row
        self.publisher = Publisher(Snapshot(t=self.life.t0, elapsed_s=0.0, state="starting", target_c=config.concurrency,
                                            previous_c=None, in_flight=0))
        self.set_slo(config.slo, log=False)

    # -- life cycle --------------------------------------------------------------------
    async def start(self) -> None:
        """Raises TargetError (bad input) or TargetUnreachable before any load is sent."""
        base = validate_url(self.config.url)
        self.targets.open(base)
        try:
            await self._start(base)
        except asyncio.CancelledError:
            raise  # whoever cancelled (a signal) stops the engine with its own reason
        except BaseException:
            await self.stop("start failed")
            raise

    async def _start(self, base: str) -> None:
        cfg, load, targets = self.config, self.load, self.targets
        target = await targets.detect_first(base)
        client = targets.client
        assert client is not None
        if cfg.out_dir is not None:
            session = SessionWriter(cfg.out_dir, session_meta(cfg, target), secrets=[cfg.api_key or "", cfg.control_token or "", cfg.admin_key or "", *target.info.secrets, *cfg.workload.secret_values()])
            self.disk.session = self.measurements.session = self.events.session = session
        if cfg.insecure:
            self.log("warning", "TLS certificate verification is OFF (--insecure)")
        weights = parse_weights(cfg.weights, 1 + len(cfg.more_urls))
        self.measurements.load_sender = targets.add(client, target, weights[0]).sender
        lane_sender = Sender(client, target, lane_hooks(LaneListener(self.measurements)), self.stamp,
                             self.clock.wall0 - self.clock.perf0, ids=targets.ids, workload=cfg.workload)
        load.lane = ProbeLane(lane_sender, self._lane_prompt)
        self.measurements.lane_sender = lane_sender
        for url, w in zip(cfg.more_urls, weights[1:], strict=False):
            await targets.start_more(url, w)
        self.judge_doubt()
        await prepare(self)
        if cfg.telemetry:
            self.telemetry = await start_telemetry(self, base)
            self.ticker.start_watching()
        open_loop = cfg.rate is not None or load.trace is not None  # C waits for the mode key: within the cap
        c0 = min(cfg.concurrency, cfg.max_concurrency) if open_loop else cfg.concurrency
        ctl = load.controller = await make_load(self, c0)
        if cfg.num_requests is not None:
            assert isinstance(ctl, Controller), "--num-requests is counted in this process (tui/cli/launch.py checks it)"
            ctl.budget = cfg.num_requests
        if load.trace is not None and cfg.live_steps:
            load.trace.start(ctl, cfg.rate or 1.0)
        elif cfg.rate is not None and load.trace is None:
            load.last_rate = ctl.set_rate(cfg.rate)
        self.live.sync_shape()
        if cfg.start_paused or (load.trace is not None and not cfg.live_steps):
            ctl.pause()  # a trace preset's runner starts each replay itself
        self.ticker.last_row_t = self.life.started()
        ctl.start()
        if cfg.live_steps and not cfg.start_paused:
            self.book.open_live(self.live.concurrency(), False)
        self.life.spawn(tick(self.life.t0, self.ticker.each_second, self.publish), "redline-ticker")
        self.life.spawn(self.ticker.harvest_often(), "redline-harvest")
        if cfg.num_requests is not None or cfg.duration_s is not None:
            self.life.spawn(fixed_size(self), "redline-fixed-size")
        self.log("notice", f"target {base} ({target.info.kind}, api {target.api}, model {target.model or '?'}) {self.load_text}")
        self.publish(time.perf_counter())

    async def stop(self, reason: str = "quit") -> None:
        """Stop all load first, then complete the log. Idempotent."""
        if self.life.closed:
            return
        self.life.closed = True
        self.steering.cancel_driver()
        cancelled = 0
        if self.load.lane is not None:
            await self.load.lane.stop()
        if self.load.controller is not None:
            cancelled = await self.load.with_draining(self.load.controller.stop(), stop=True)
        await self.live.settle()  # every report is in: the steps closed before now are recorded
        now = time.perf_counter()
        self.book.close_live(now)
        self.book.finalize_all(now)  # what the stop cancelled stays censored, at its age
        await self.life.cancel_tasks()
        await self.targets.close(self.telemetry)
        if self.telemetry is not None:
            await self.telemetry.stop()
        await self.ticker.stop()
        self.log("notice", f"stopped ({reason}); {cancelled} in-flight requests cancelled")
        session = self.disk.session
        if session is not None:
            self.ticker.timeline_row(now)
            self.write_summary()
        self.disk.shutdown()  # what was queued is written before the log closes
        if session is not None:
            session.close(reason)
        if self.steering.control is not None:
            await self.steering.control.close()
        await self.targets.close_clients()
        self.publish(now, done=True)
        self.ticker.heap.stop()  # last: a full collection of the heap, once the log is complete

    # -- commands (call on the engine's loop) -------------------------------------------
    def execute(self, cmd: commands.Command) -> object:
        """One entry point for every command, by the engine's one table (`steering.commands`:
        TypeError for a command not in it); returns the reply (or a coroutine of it for
        SetWorkload/Probe/Abort/Flush, StartProfile). The snapshot is republished at once. The
        preset runner's commands (StartPreset, StartProfile) are in the table a host gives
        (engine/run/preset_runner.py new_engine): the engine knows no presets."""
        run = self.steering.handler(cmd)
        if isinstance(cmd, commands.OPERATOR_TAKES_OVER):
            self.steering.cancel_driver()
        res = run(self, cmd)
        if isinstance(cmd, commands.SHOWN_LATER):
            return res
        if asyncio.iscoroutine(res):
            return self._then_publish(res)
        self.publish(time.perf_counter())  # the UI sees the change now, not at the next tick
        return res

    async def _then_publish(self, coro: Awaitable[object]) -> object:
        try:
            return await coro
        finally:
            self.publish(time.perf_counter())

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
        ctl, trace = self._ctl, self.load.trace
        if ctl.mode == TRACE and not ctl.probing and trace is not None and trace.schedule is not None:
            r = check_rate(rate, "trace speed")
            trace.schedule.set_speed(r, time.perf_counter())
            ctl.rate = r
            self.log(kind, f"trace speed x{r:g}", concurrency=ctl.max_concurrency)
            self.live.roll()
            return r
        r = ctl.set_rate(check_rate(rate))
        self.load.last_rate = r
        self._ctl.end_probe()
        self.log(kind, f"rate {r:g} req/s ({ctl.arrival.describe()}, in-flight cap {ctl.max_concurrency})", concurrency=ctl.max_concurrency)
        self.live.roll()
        return r

    def start_trace(self, speed: float, *, kind: str = "key") -> float:
        """Replay the trace from its first row, now, at `speed` (a trace workload only)."""
        trace = self.load.trace
        if trace is None:
            raise RuntimeError("no trace: start redline with --trace PATH (or [workload].trace)")
        ctl = self._ctl
        check_rate(speed, "trace speed")
        self._ctl.end_probe()
        trace.start(ctl, speed)
        self.log(kind, f"trace {trace.path}: {len(trace.rows)} requests over {trace.duration_s / speed:.1f} s (x{speed:g})", concurrency=ctl.max_concurrency)
        self.live.roll()
        return speed

    def toggle_mode(self) -> str:
        """Concurrency <-> rate mode. Into rate mode: the last rate, else the request rate
        achieved now (the live step's sends per second, 2 significant digits; 1 req/s when
        nothing was sent yet)."""
        ctl = self._ctl
        if ctl.open_loop:
            self.set_concurrency(ctl.concurrency)
        else:
            r = self.load.last_rate
            if r is None:  # the step's own send rate (steadier than a 3 s window of completions)
                live = self.book.live_result
                req_s = live.request_throughput if live is not None else 0.0
                if req_s <= 0:
                    _, _, req_s, _ = self.metrics.rates(time.perf_counter())
                r = float(f"{req_s:.2g}") if req_s > 0 else 1.0
            self.set_rate(r)
        return ctl.mode

    async def set_workload(self, change: WorkloadChange, *, kind: str = "key") -> dict[str, object]:
        """The workload from now on (a new step starts); WorkloadError (one line) for a value
        that cannot be used, and nothing changes. Returns the new workload's description."""
        load = self.load
        assert load.source is not None
        new = change.apply(self.config.workload)
        source = await asyncio.to_thread(PromptSource, new, load.calibration)  # a dataset file loads off the loop
        self.config.workload, load.source = new, source
        if load.holder is not None:  # in this process (workers: the next order carries it)
            load.holder.workload, load.holder.source = new, source
        self.book.workload = new.describe()
        self.log("workload", f"workload ({kind}): {change.describe()}", detail=self.book.workload)
        self.live.roll()
        return self.book.workload

    @property
    def load_text(self) -> str:
        """The load shape in a few words: `C=8`, `rate 5 req/s (poisson, cap 256)`, `trace x2`."""
        ctl = self.load.controller
        if ctl is None:
            return f"C={self.config.concurrency}"
        if ctl.mode == RATE:
            return f"rate {ctl.rate:g} req/s ({ctl.arrival.describe()}, cap {ctl.max_concurrency})"
        if ctl.mode == TRACE:
            return f"trace x{ctl.rate:g}"
        return f"C={ctl.concurrency}"

    def stamp(self, t_intended: float | None = None) -> tuple[int, int, str]:
        """(step, concurrency, phase) for a request sent now, or scheduled at `t_intended`
        (open loop: the step that scheduled it owns it); an open loop's concurrency is its cap."""
        ctl = self.load.controller
        c = 0 if ctl is None else (ctl.max_concurrency if ctl.open_loop else ctl.concurrency)
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
        self.log("key", f"resumed at C={self._ctl.concurrency}")
        self.live.roll()

    def toggle_pause(self) -> None:
        self.resume() if self._ctl.paused else self.pause()

    async def abort(self) -> int:
        n = await self.load.with_draining(self._ctl.abort())
        self.log("key", f"aborted {n} in-flight requests")
        return n

    async def probe(self) -> int:
        """Abort everything in flight, then hold C=1 (remembering the previous C)."""
        ctl = self._ctl
        n = await self.load.with_draining(ctl.probe())
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
        lane = self.load.lane
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
        assert self.load.source is not None
        p = self.load.source.next()
        return p.text, p.max_tokens, p.expected_input_tokens

    def judge_doubt(self, limits: Mapping[str, float] | None = None) -> None:
        """A step's client_limited from now, judged against `limits` (engine/telemetry/client_doubt.py)."""
        if self.disk.session is not None:
            kernel = self.targets.kernel_stamped()
            self.disk.session.doubt = partial(client_doubted, limits=dict(limits or {}), kernel_stamped=kernel)

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
        return await self.disk.flush()

    @property
    def _ctl(self) -> LoadControl:
        ctl = self.load.controller
        if ctl is None:
            raise RuntimeError("engine not started")
        return ctl

    # -- drivers (the preset runner) ------------------------------------------------------
    def attach_driver(self, task: asyncio.Task[object]) -> None:
        """A task steering this engine (a preset); operator commands cancel it, and so does the stop."""
        self.steering.drive(task)
        self.life.keep(task)

    # -- what the screen, the rules and the hosts read ------------------------------------
    @property
    def controller(self) -> LoadControl | None:
        """The load's state and commands (engine/load/controller.py); None before the start."""
        return self.load.controller

    @property
    def pool(self) -> WorkerPool | None:
        """--workers N / --ray: the load's worker pool (None: the load is in this process)."""
        return self.load.pool

    @property
    def target(self) -> Target | None:
        """The first target (the server), once detected."""
        return self.targets.target

    @property
    def client(self) -> httpx.AsyncClient | None:
        """The first target's HTTP client."""
        return self.targets.client

    @property
    def session(self) -> SessionWriter | None:
        return self.disk.session

    @property
    def snapshot(self) -> Snapshot:
        """The latest Snapshot published."""
        return self.publisher.snapshot

    @property
    def closed(self) -> bool:
        return self.life.closed

    @property
    def finished(self) -> str:
        """A fixed-size run ended: why ("100 requests sent and ended", "20 s"); "" until then."""
        return self.life.finished

    @property
    def run_done(self) -> asyncio.Event:
        """Set when a fixed-size run ended."""
        return self.life.done

    @property
    def t0(self) -> float:
        """When the load started (perf_counter)."""
        return self.life.t0

    @property
    def control(self) -> ControlApi | None:
        """--control: the control API (engine/control/http_api.py ControlServer)."""
        return self.steering.control

    @property
    def preset_line(self) -> str:
        """What the driver (the preset runner) is doing, for the screen (`steering.line`)."""
        return self.steering.line

    @property
    def totals(self) -> RunTotals:
        """The whole run, for the end summary (engine/measure/run_totals.py)."""
        return self.measurements.totals

    @property
    def server_gone(self) -> bool:
        return self.targets.all_gone

    @property
    def failure_streak(self) -> FailureStreak:
        """The load's failures in a row, and the last reason (engine/core/measurements.py)."""
        return self.measurements.streak

    @property
    def steps(self) -> list[StepResult]:
        return self.book.steps

    @property
    def probe_result(self) -> StepResult | None:
        return self.book.probe_result

    @property
    def break_result(self) -> BreakResult | None:
        return self.book.break_result

    # -- steps -------------------------------------------------------------------------
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
        if self.disk.session is not None and self.target is not None:
            self.disk.write(self.disk.session.write_summary, summary_doc(self))

    # -- the log -----------------------------------------------------------------------
    def log(self, kind: str, text: str, **fields: object) -> None:
        self.events.log(kind, text, **fields)

    def warn(self, text: str, key: str | None = None) -> None:
        self.events.warn(text, key)

    @property
    def in_flight(self) -> int:
        """Requests on the wire (slots backing off after an overload answer not counted)."""
        ctl = self.load.controller
        if ctl is None:
            return 0
        return max(0, ctl.in_flight + self.load.draining_in_flight - self.backing_off)

    @property
    def backing_off(self) -> int:
        """Load slots waiting after an overload answer, over every target."""
        if self.load.pool is not None:  # and what still drains here after a move
            return self.load.pool.backing_off + (self.targets.backing_off if self.load.draining is not None else 0)
        return self.targets.backing_off

    @property
    def state(self) -> str:
        ctl = self.load.controller
        if ctl is None:
            return "starting"
        if ctl.stopped:
            return "stopped"
        if self.server_gone:
            return SERVER_GONE
        if self.targets.all_down:
            return SERVER_NOT_READY
        s = ctl.state
        if self.steering.line and s not in (PAUSED, PROBE):
            return "preset"
        return s

    def publish(self, now: float, done: bool = False) -> None:
        """A new Snapshot, to every subscriber (engine/core/publisher.py)."""
        self.publisher.publish(build_snapshot(self, now, done))


# The engine's commands (engine/core/commands.py): what each one runs. A coroutine's reply is
# awaited by whoever sent it (the snapshot is republished when it is done).
COMMANDS: dict[type, Handler[Engine]] = {
    commands.SetConcurrency: lambda e, c: e.raise_max(c.n) if c.raise_max else e.set_concurrency(c.n),
    commands.SetRate: lambda e, c: e.set_rate(c.rate),
    commands.ToggleMode: lambda e, c: e.toggle_mode(),
    commands.SetWorkload: lambda e, c: e.set_workload(c.change),
    commands.TogglePause: lambda e, c: e.toggle_pause(),
    commands.Probe: lambda e, c: e.probe(),
    commands.Abort: lambda e, c: e.abort(),
    commands.Restore: lambda e, c: e.restore(),
    commands.CancelPreset: lambda e, c: e.steering.cancel_driver(),
    commands.Flush: lambda e, c: e.flush(),
    commands.ToggleLane: lambda e, c: e.toggle_lane(),
    commands.SetSlo: lambda e, c: e.set_slo(c.slo),
    commands.Log: lambda e, c: e.log(c.kind, c.text),
}

__all__ = ["Engine", "EngineConfig", "TargetUnreachable", "default_label"]
