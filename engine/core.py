"""The engine: one asyncio loop that sends, measures, watches and records.

    Engine.start()  -> check URL, detect the server, calibrate prompts, open the session,
                       start telemetry, the request pool and the 4 Hz ticker.
    commands        -> set_concurrency / pause / resume / abort / probe / restore
    Engine.snapshot -> the latest Snapshot (what the UI draws)
    Engine.stop()   -> stop all load, close the step, complete the session log.

The TUI, the headless runner and the tests all drive this same API. It knows nothing of
Textual; engine/host.py runs it on its own thread so drawing cannot delay its timestamps.
"""

from __future__ import annotations

import asyncio
import platform
import time
from collections import Counter, deque
from typing import Callable

import httpx

from . import __version__
from . import records as R
from .apis import PATHS, build_body
from .config import EngineConfig
from .constants import (
    GONE_AFTER_CONNECT_ERRORS,
    HISTORY_S,
    OVERLOAD_BACKOFF_MAX_S,
    MIN_LIVE_STEP_S,
    RECONNECT_BACKOFF_S,
    SNAPSHOT_INTERVAL_S,
    TIMELINE_INTERVAL_S,
)
from .controller import PAUSED, PROBE, Controller
from .http import make_client
from .metrics import LiveMetrics
from .records import Clock, RequestRecord
from .request import run_request
from .session import SessionWriter, format_step_line
from .snapshot import LogLine, Snapshot
from .stepresult import BreakResult, StepResult
from .steps import StepAccumulator
from .target import Target, TargetUnreachable, detect, validate_url
from .telemetry.cap import CapDetector
from .telemetry.client_health import ClientHealth, LoopLagMonitor
from .telemetry.efficiency import total_power_w
from .telemetry.hub import TelemetryHub
from .workload import DEFAULT_CALIBRATION, PromptSource, calibrate

FAST_FAIL_S = 0.05
WARNING_HOLD_S = 10.0  # a warning stays on screen this long after its condition was last seen  # a request that failed faster than this holds its slot this long
SERVER_GONE = "server gone"


class Engine:
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.clock = Clock.now()
        self.metrics = LiveMetrics()
        self.target: Target | None = None
        self.client: httpx.AsyncClient | None = None
        self.controller: Controller | None = None
        self.session: SessionWriter | None = None
        self.telemetry: TelemetryHub | None = None
        self.health: ClientHealth | None = None
        self._lag: LoopLagMonitor | None = None
        self._health = None  # last ClientHealthSample, refreshed once a second
        self.cap: CapDetector | None = None
        self.source: PromptSource | None = None
        self.calibration = DEFAULT_CALIBRATION
        self.steps: list[StepResult] = []
        self.break_result: BreakResult | None = None
        self.probe_result: StepResult | None = None
        self.preset_line = ""
        self.phase = "live"  # phase stamped on requests sent now
        self.server_gone = False
        self.history: deque[dict] = deque(maxlen=HISTORY_S)
        self._accs: list[StepAccumulator] = []
        self._live: StepAccumulator | None = None
        self._step_index = 0
        self._rid = 0
        self._log: deque[LogLine] = deque(maxlen=200)
        self._seq = 0
        self._warnings: dict[str, tuple[float, str]] = {}  # key -> (last raised, text)
        self._connect_streak = 0
        self._overload_streak = 0
        self._tasks: list[asyncio.Task] = []
        self._second = 0
        self._row: dict = {}
        self._err_texts: Counter[str] = Counter()
        self._listeners: list[Callable[[Snapshot], None]] = []
        self._preset_task: asyncio.Task | None = None
        self._closed = False
        self._t0 = time.perf_counter()
        self.snapshot = Snapshot(t=self._t0, elapsed_s=0.0, state="starting", target_c=config.concurrency, previous_c=None, in_flight=0)

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
            origin=base,
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
            self.session = SessionWriter(cfg.out_dir, self._meta(), secrets=[cfg.api_key or ""])
        if cfg.insecure:
            self.log("warning", "TLS certificate verification is OFF (--insecure)")
        if cfg.workload.dataset == "random" and cfg.calibrate:
            self.calibration = await calibrate(self._measure_prompt_tokens, cfg.seed)
            if self.calibration.measured:
                self.log("notice", f"calibrated prompts: {self.calibration.per_word:.2f} tokens/word + {self.calibration.overhead:.0f}")
            else:
                self.log("warning", "server reported no prompt_tokens: input lengths are approximate (1 token per word)")
        self.source = PromptSource(cfg.workload, self.calibration)
        if cfg.telemetry:
            await self._start_telemetry(base)
        self.controller = Controller(self._one_request, cfg.concurrency, cfg.max_concurrency)
        if cfg.start_paused:
            self.controller.pause()
        self._t0 = time.perf_counter()
        self.controller.start()
        if cfg.live_steps and not cfg.start_paused:
            self._open_live_step()
        self._tasks.append(asyncio.create_task(self._ticker(), name="redline-ticker"))
        self.log("notice", f"target {base} ({self.target.info.kind}, api {self.target.api}, model {self.target.model or '?'}) C={cfg.concurrency}")
        self._publish(time.perf_counter())

    async def stop(self, reason: str = "quit") -> None:
        """Stop all load first, then complete the log. Idempotent."""
        if self._closed:
            return
        self._closed = True
        cancelled = 0
        if self.controller is not None:
            cancelled = await self.controller.stop()
        now = time.perf_counter()
        self._close_live_step(now)
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        if self.telemetry is not None:
            await self.telemetry.stop()
        if self._lag is not None:
            await self._lag.stop()
        self.log("notice", f"stopped ({reason}); {cancelled} in-flight requests cancelled")
        if self.session is not None:
            self._timeline_row(now)
            self.write_summary()
            self.session.close(reason)
        if self.client is not None:
            await self.client.aclose()
        self._publish(now, done=True)

    def _meta(self) -> dict:
        cfg, tgt = self.config, self.target
        assert tgt is not None
        return {
            "redline_version": __version__,
            "command_line": list(cfg.command_line),
            "label": cfg.label or default_label(tgt),
            "target": tgt.describe(),
            "server_info": tgt.info.raw or {"kind": tgt.info.kind, "model": tgt.info.model},
            "workload": cfg.workload.describe(),
            "concurrency": cfg.concurrency,
            "host": platform.node(),
        }

    async def _start_telemetry(self, base: str) -> None:
        assert self.client is not None and self.target is not None
        cfg = self.config
        gpu_url = cfg.gpu_metrics_url
        if gpu_url is None and "redline_sim" in self.target.info.raw:
            gpu_url = base + "/dcgm/metrics"  # the sim's simulated GPUs, found with no flags
        self.telemetry = TelemetryHub(
            self.client,
            server_metrics_url=cfg.server_metrics_url or base + "/metrics",
            gpu_metrics_url=gpu_url,
            use_nvml=cfg.use_nvml and gpu_url is None,
            on_notice=lambda text: self.log("notice", text),
        )
        await self.telemetry.start()
        self._lag = LoopLagMonitor()
        self._lag.start()
        self.health = ClientHealth(self._lag)
        self._tasks.append(asyncio.create_task(self._watch_health(), name="redline-health"))
        self.cap = CapDetector(self.target.info)

    # -- commands (call on the engine's loop) -------------------------------------------
    def set_concurrency(self, n: int) -> int:
        c = self._ctl.set_concurrency(n)
        if self._ctl.probing:
            self._ctl.probing = False
            self._ctl.previous = None
        self.log("key", f"C={c}", concurrency=c)
        self._roll_live_step()
        return c

    def pause(self) -> None:
        self._ctl.pause()
        self.log("key", "paused")
        self._roll_live_step()

    def resume(self) -> None:
        self._ctl.resume()
        self.log("key", f"resumed at C={self._ctl.target}")
        self._roll_live_step()

    def toggle_pause(self) -> None:
        self.resume() if self._ctl.paused else self.pause()

    async def abort(self) -> int:
        n = await self._ctl.abort()
        self.log("key", f"aborted {n} in-flight requests")
        return n

    async def probe(self) -> int:
        """Abort everything in flight, then hold C=1 (remembering the previous C)."""
        n = await self._ctl.probe()
        self.log("probe", f"abort + C=1 probe ({n} in-flight requests cancelled; previous C={self._ctl.previous})")
        self._roll_live_step()
        return n

    def restore(self) -> int | None:
        c = self._ctl.restore()
        if c is not None:
            self.log("key", f"back to C={c}", concurrency=c)
            self._roll_live_step()
        return c

    def raise_max(self, n: int) -> int:
        """The operator confirmed a concurrency above --max-concurrency."""
        ctl = self._ctl
        if n > ctl.max_concurrency:
            ctl.max_concurrency = n
            self.log("warning", f"--max-concurrency raised to {n} by the operator")
        return self.set_concurrency(n)

    # -- presets -----------------------------------------------------------------------
    def start_preset(self, preset) -> None:
        """Run a preset on this engine (the TUI's `p`); operator keys cancel it."""
        from .runner import run_preset

        self.cancel_preset()

        async def managed() -> None:
            self.suspend_live_steps()
            try:
                await run_preset(self, preset)
            except asyncio.CancelledError:
                self.log("preset", f"preset {preset.name} cancelled by the operator")
                raise
            finally:
                self.phase = "live"
                self.preset_line = ""
                self.resume_live_steps()

        self._preset_task = asyncio.create_task(managed(), name="redline-preset")
        self._tasks.append(self._preset_task)

    def cancel_preset(self) -> bool:
        task, self._preset_task = self._preset_task, None
        if task is not None and not task.done():
            task.cancel()
            return True
        return False

    def command(self, name: str, *args: object) -> object:
        """One entry point for every operator command (hosts forward by name)."""
        if name in ("set_concurrency", "raise_max", "probe", "abort"):
            self.cancel_preset()
        fn = {
            "set_concurrency": self.set_concurrency,
            "raise_max": self.raise_max,
            "toggle_pause": self.toggle_pause,
            "probe": self.probe,
            "restore": self.restore,
            "abort": self.abort,
            "start_preset": self.start_preset,
            "cancel_preset": self.cancel_preset,
            "flush": self.flush,
            "log": self.log,
        }[name]
        res = fn(*args)
        if asyncio.iscoroutine(res):
            return self._then_publish(res)
        self._publish(time.perf_counter())  # the UI sees the change now, not at the next tick
        return res

    async def _then_publish(self, coro):
        try:
            return await coro
        finally:
            self._publish(time.perf_counter())

    def flush(self) -> None:
        if self.session is not None:
            self.session.flush()

    @property
    def _ctl(self) -> Controller:
        if self.controller is None:
            raise RuntimeError("engine not started")
        return self.controller

    # -- requests ----------------------------------------------------------------------
    async def _measure_prompt_tokens(self, prompt: str) -> int | None:
        """One max_tokens=1 request; the server's prompt_tokens for `prompt`."""
        rec = await self._send(prompt, 1, 0, "calibration")
        return rec.input_tokens if rec.status == R.OK and rec.usage_reported else None

    async def _one_request(self) -> None:
        assert self.source is not None
        p = self.source.next()
        rec = await self._send(p.text, p.max_tokens, p.expected_input_tokens, self.phase)
        if rec.status == R.FAILED and rec.error_kind in (R.ERR_HTTP_429, R.ERR_HTTP_503):
            # overloaded: back off instead of hammering a server that is saying so
            self._overload_streak += 1
            if self._overload_streak == GONE_AFTER_CONNECT_ERRORS:
                self.log("warning", f"server overloaded ({rec.error_kind}): backing off up to {OVERLOAD_BACKOFF_MAX_S:g} s per request slot")
            await asyncio.sleep(min(OVERLOAD_BACKOFF_MAX_S, FAST_FAIL_S * 2 ** min(self._overload_streak, 16)))
        elif rec.status == R.FAILED and rec.e2e is not None and rec.e2e < FAST_FAIL_S:
            await asyncio.sleep(FAST_FAIL_S - rec.e2e)  # no hot loop against a failing server
        elif rec.status == R.OK:
            self._overload_streak = 0

    async def _send(self, prompt: str, max_tokens: int, expected: int, phase: str) -> RequestRecord:
        assert self.client is not None and self.target is not None
        self._rid += 1
        c = self.controller.target if self.controller else 0
        rec = RequestRecord(
            rid=self._rid,
            phase="probe" if (self.controller and self.controller.probing and phase == "live") else phase,
            step=self._step_index,
            concurrency=c,
            t_send=time.perf_counter(),
            expected_input_tokens=expected,
            max_tokens=max_tokens,
        )
        tgt = self.target
        body = build_body(tgt.api, tgt.model, prompt, max_tokens)
        try:
            await run_request(
                self.client,
                tgt.url + PATHS[tgt.api],
                tgt.api,
                body,
                rec,
                self._on_tokens,
                self._on_lag,
                self.clock.wall0 - self.clock.perf0,
            )
        finally:
            self._on_end(rec)
        return rec

    def _on_tokens(self, t: float, n: int) -> None:
        self.metrics.on_tokens(t, n)
        for acc in self._accs:
            acc.on_tokens(t, n)

    def _on_lag(self, lag: float) -> None:
        self.metrics.on_lag(lag)

    def _on_end(self, rec: RequestRecord) -> None:
        self.metrics.on_request_end(rec)
        for acc in self._accs:
            acc.on_request_end(rec)
        if self.session is not None:
            self.session.add_record(rec, self.clock)  # scrubs error text before cutting it
        if rec.status == R.FAILED:
            self._err_texts[f"{rec.error_kind}: {rec.error_text}"[:120]] += 1
            if rec.error_kind == R.ERR_CONNECT:
                self._connect_streak += 1
                if self._connect_streak >= GONE_AFTER_CONNECT_ERRORS and not self.server_gone:
                    self._server_gone()
        elif rec.status == R.OK:
            self._connect_streak = 0

    # -- server gone / back ------------------------------------------------------------
    def _server_gone(self) -> None:
        self.server_gone = True
        self._ctl.hold = True
        self.log("error", "server gone: connections refused; holding load until it answers again")
        self._tasks.append(asyncio.create_task(self._wait_for_server(), name="redline-reconnect"))

    async def _wait_for_server(self) -> None:
        assert self.client is not None and self.target is not None
        i = 0
        while self.server_gone and not self._closed:
            await asyncio.sleep(RECONNECT_BACKOFF_S[min(i, len(RECONNECT_BACKOFF_S) - 1)])
            i += 1
            try:
                r = await self.client.get(self.target.url + "/health", timeout=2.0)
                back = r.status_code < 500 or r.status_code == 503
            except httpx.HTTPError:
                back = False
            if back:
                self.server_gone = False
                self._connect_streak = 0
                self._ctl.hold = False
                self._ctl.poke()
                self.log("notice", f"server back: resuming at C={self._ctl.target}")

    # -- steps -------------------------------------------------------------------------
    def open_step(self, concurrency: int, phase: str, t0: float | None = None) -> StepAccumulator:
        """Start accumulating a step (the preset runner and live mode both use this)."""
        self._step_index += 1
        acc = StepAccumulator(self._step_index, concurrency, phase, t0 or time.perf_counter(), self.clock)
        self._accs.append(acc)
        return acc

    def close_step(self, acc: StepAccumulator, now: float | None = None) -> StepResult:
        now = now or time.perf_counter()
        acc.close(now)
        if acc in self._accs:
            self._accs.remove(acc)
        return acc.result(now)

    def record_step(self, res: StepResult) -> None:
        if res.phase == "probe":
            self.probe_result = res
        else:
            self.steps.append(res)
        prefix = "probe " if res.phase == "probe" else ""
        self.log("step", prefix + " ".join(format_step_line(res).split()), concurrency=res.concurrency)
        self.write_summary()

    def _open_live_step(self) -> None:
        ctl = self._ctl
        if ctl.paused or ctl.stopped:
            self._live = None
            return
        self._live = self.open_step(ctl.target, PROBE if ctl.probing else "live")

    def _close_live_step(self, now: float) -> None:
        acc, self._live = self._live, None
        if acc is None:
            return
        res = self.close_step(acc, now)
        if res.duration_s >= MIN_LIVE_STEP_S and (res.completed or res.failed or res.output_throughput > 0):
            self.record_step(res)

    def _roll_live_step(self) -> None:
        if not self.config.live_steps:
            return
        live = self._live
        ctl = self._ctl
        phase = PROBE if ctl.probing else "live"
        if live is not None and live.concurrency == ctl.target and live.phase == phase and not ctl.paused:
            return
        self._close_live_step(time.perf_counter())
        self._open_live_step()

    def suspend_live_steps(self) -> None:
        """A preset manages its own steps: close the live one and stop rolling."""
        self._close_live_step(time.perf_counter())
        self.config.live_steps = False

    def resume_live_steps(self) -> None:
        self.config.live_steps = True
        self._roll_live_step()

    def write_summary(self) -> None:
        if self.session is None or self.target is None:
            return
        self.session.write_summary(
            {
                "target": self.target.describe(),
                "label": self.config.label or default_label(self.target),
                "steps": [s.to_dict() for s in self.steps],
                "break": self.break_result.to_dict() if self.break_result else None,
                "probe": self.probe_result.to_dict() if self.probe_result else None,
            }
        )

    # -- the log -----------------------------------------------------------------------
    def log(self, kind: str, text: str, **fields: object) -> None:
        self._seq += 1
        wall = time.time()
        self._log.append(LogLine(self._seq, wall, kind, text))
        if self.session is not None:
            self.session.add_event(kind, text, **fields)

    def warn(self, text: str, key: str | None = None) -> None:
        """A warning that stays on screen a while; logged when it starts.

        `key` names the condition (its text may carry changing numbers): one log line per
        episode, the newest text on screen.
        """
        key = key or text
        if key not in self._warnings:
            self.log("warning", text)
        self._warnings[key] = (time.perf_counter(), text)

    async def _watch_health(self) -> None:
        """psutil scans /proc (several ms): keep it off the loop that stamps bytes."""
        assert self.health is not None
        while True:
            await asyncio.sleep(TIMELINE_INTERVAL_S)
            self._health = await asyncio.to_thread(self.health.status)

    # -- ticking -----------------------------------------------------------------------
    async def _ticker(self) -> None:
        next_second = self._t0 + TIMELINE_INTERVAL_S
        while True:
            await asyncio.sleep(SNAPSHOT_INTERVAL_S)
            now = time.perf_counter()
            if now >= next_second:
                next_second += TIMELINE_INTERVAL_S * max(1, int((now - next_second) / TIMELINE_INTERVAL_S) + 1)
                self._each_second(now)
            self._publish(now)

    def _each_second(self, now: float) -> None:
        self.metrics.recompute_percentiles(now)
        srv = self.telemetry.server if self.telemetry else None
        power = total_power_w(self.telemetry.gpus) if self.telemetry else None
        for acc in self._accs:
            acc.note_server_running(srv.running if srv else None)
            acc.note_power(power)
        if self.cap is not None and self.controller is not None:
            warning = self.cap.update(now, self.controller.target, self.controller.in_flight, srv)
            if warning:
                self.warn(warning, key="server cap")
            elif self.cap.active and self.cap.last_warning:
                self._warnings["server cap"] = (now, self.cap.last_warning)  # stays while it holds
        h = self._health
        if h is not None and h.overloaded:
            self.warn(h.reason, key="client overloaded")
        for text, n in self._err_texts.items():
            self.log("error", f"{n} × {text}" if n > 1 else text)
        self._err_texts.clear()
        self._warnings = {k: v for k, v in self._warnings.items() if now - v[0] < WARNING_HOLD_S}
        self._timeline_row(now)
        if self.session is not None:
            self.session.flush()

    def _timeline_row(self, now: float) -> None:
        sec = self.metrics.take_second()
        st = self.metrics.percentiles
        ctl = self.controller
        row: dict = {
            "t": round(self.clock.wall(now), 3),  # elapsed_s: the writer's, from meta's started_epoch
            "state": self.state,
            "target_c": ctl.target if ctl else 0,
            "in_flight": ctl.in_flight if ctl else 0,
            "output_tok_s": sec["out"],
            "input_tok_s": sec["in"],
            "req_s": sec["req"],
            "errors": sec["errors"],
        }
        for name, p in (("ttft", st.ttft), ("itl", st.itl), ("e2e", st.e2e)):
            for q, v in p.ms().items():
                if q != "max":
                    row[f"{name}_{q}_ms"] = None if v is None else round(v, 3)
        srv = self.telemetry.server if self.telemetry else None
        row["server_running"] = srv.running if srv else None
        row["server_queued"] = srv.queued if srv else None
        row["server_kv_usage"] = srv.kv_usage if srv else None
        row["server_gen_throughput"] = srv.gen_throughput if srv else None
        h = self._health
        if h is not None:
            row["client_cpu_pct"] = h.cpu_pct
            row["loop_lag_ms"] = h.loop_lag_ms
            row["client_overloaded"] = h.overloaded
        gpus = self.telemetry.gpus if self.telemetry else []
        for g in gpus:
            row[f"gpu{g.index}_power_w"] = g.power_w
            row[f"gpu{g.index}_power_limit_w"] = g.power_limit_w
            row[f"gpu{g.index}_util_pct"] = g.util_pct
            row[f"gpu{g.index}_mem_used_mib"] = g.mem_used_mib
            row[f"gpu{g.index}_temp_c"] = g.temp_c
        total_w = total_power_w(gpus)
        row["tok_per_joule"] = round(sec["out"] / total_w, 4) if total_w else None
        self._second += 1
        self._row = row
        self.history.append(row)
        if self.session is not None:
            self.session.add_timeline(row)

    @property
    def state(self) -> str:
        if self.controller is None:
            return "starting"
        if self.controller.stopped:
            return "stopped"
        if self.server_gone:
            return SERVER_GONE
        s = self.controller.state
        if self.preset_line and s not in (PAUSED, PROBE):
            return "preset"
        return s

    def subscribe(self, fn: Callable[[Snapshot], None]) -> None:
        self._listeners.append(fn)

    def _publish(self, now: float, done: bool = False) -> None:
        m = self.metrics
        out, inp, req, err = m.rates(now)
        st = m.percentiles
        ctl = self.controller
        tgt = self.target
        cur = self._live.result(now) if self._live is not None else None
        h = self._health
        snap = Snapshot(
            t=now,
            elapsed_s=now - self._t0,
            state=self.state,
            target_c=ctl.target if ctl else self.config.concurrency,
            previous_c=ctl.previous if ctl else None,
            in_flight=ctl.in_flight if ctl else 0,
            max_concurrency=ctl.max_concurrency if ctl else self.config.max_concurrency,
            probing=ctl.probing if ctl else False,
            preset_running=self._preset_task is not None and not self._preset_task.done(),
            url=tgt.url if tgt else self.config.url,
            model=tgt.model if tgt else "",
            api=tgt.api if tgt else "",
            server_kind=tgt.info.kind if tgt else "",
            caps=tgt.info.caps_text() if tgt else "",
            output_tok_s=out,
            input_tok_s=inp,
            req_s=req,
            errors_s=err,
            ttft_ms=st.ttft.ms(),
            itl_ms=st.itl.ms(),
            tpot_ms=st.tpot.ms(),
            e2e_ms=st.e2e.ms(),
            completed=m.completed,
            failed=m.failed,
            cancelled=m.cancelled,
            errors_by_kind=dict(m.errors_by_kind),
            output_tokens_total=m.output_tokens_total,
            steps=tuple(self.steps),
            current_step=cur,
            break_result=self.break_result,
            probe_result=self.probe_result,
            preset=self.preset_line,
            server=self.telemetry.server if self.telemetry else None,
            gpus=tuple(self.telemetry.gpus) if self.telemetry else (),
            client_cpu_pct=h.cpu_pct if h else None,
            loop_lag_ms=h.loop_lag_ms if h else None,
            client_overloaded=h.overloaded if h else False,
            warnings=tuple(text for _, text in self._warnings.values()),
            tok_per_joule=self._row.get("tok_per_joule"),
            second=self._second,
            row=self._row,
            log=tuple(self._log)[-50:],
            session_dir=str(self.config.out_dir or ""),
            done=done,
        )
        self.snapshot = snap
        for fn in self._listeners:
            fn(snap)


def default_label(tgt: Target) -> str:
    info = tgt.info
    parts = [tgt.model or info.kind]
    if info.tp_size:
        parts.append(f"tp{info.tp_size}")
    if info.pp_size and info.pp_size > 1:
        parts.append(f"pp{info.pp_size}")
    return " ".join(parts)


__all__ = ["Engine", "EngineConfig", "TargetUnreachable", "default_label"]
