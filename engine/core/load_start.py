"""The load's start, on the engine (engine/core/engine.py): start-up's own requests, the
prompts, what holds the load, its telemetry, and a fixed-size run's end.

Start-up's own requests (`prepare`): whether the server streams usage per chunk, and the
prompt calibration (tokens per word, measured) when the workload needs one; then the
workload's prompts and the trace. `make_load` builds what the engine steers (a LoadControl,
engine/load/controller.py): in this process a Controller whose launch is the engine's
LoadHolder (engine/load/holder.py: the one-worker case of what every worker holds); with
`--workers N` or `--ray` a WorkerPool or RayPool (the same commands), its workers started,
reaching the engine through the load's port (engine/core/engine_port.py). They fill the
engine's HeldLoad (engine/core/held_load.py); `start_telemetry` returns the hub it starts.

What they take of the engine is `Starting` (below).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Protocol

from ..client.api_formats import GENERATE, continuous_usage_refused
from ..load.controller import Controller, LoadControl
from ..load.holder import LoadHolder
from ..measure import records
from ..telemetry.hub import TelemetryHub
from ..workload.arrivals import parse_arrival
from ..workload.prompts import PromptSource, calibrate, needs_calibration
from .engine_port import Coordinating, EnginePort
from .provenance import gpu_fingerprint, open_fingerprint

if TYPE_CHECKING:
    import httpx

    from ..client.target import Target
    from ..load.worker import WorkerSpec  # the worker processes' module: imported only when there are workers
    from ..measure.records import Clock
    from .disk import Disk
    from .held_load import HeldLoad
    from .lifetime import Lifetime


class Starting(Coordinating, Protocol):
    """What the load's start reads and fills of the engine."""

    clock: Clock
    load: HeldLoad
    disk: Disk
    life: Lifetime

    @property
    def target(self) -> Target | None: ...
    @property
    def client(self) -> httpx.AsyncClient | None: ...
    def log(self, kind: str, text: str, **fields: object) -> None: ...
    def publish(self, now: float, done: bool = False) -> None: ...


async def prepare(e: Starting) -> None:
    """Start-up's own requests (phase "calibration": counted, never measured), then the
    workload's prompts and the trace."""
    cfg, sender, target, load, client = e.config, e.targets.sender, e.target, e.load, e.client
    assert target is not None and client is not None
    # meta.json's fingerprint: what the server says of itself
    e.disk.fingerprint = await open_fingerprint(cfg, e.disk.session, client, target, target.url)
    if cfg.calibrate and target.api != GENERATE:
        # per-chunk usage where the server offers it; a server that refuses the option (an
        # HTTP 400/422 naming it) gets plain streams, tokens corrected from usage at the end
        rec = await sender.send("Hi", 1, 0, "calibration")
        if rec.status == records.FAILED and continuous_usage_refused(rec.http_status, rec.error_text):
            sender.continuous_usage = False
            e.log("notice", "server refuses stream_options.continuous_usage_stats: output tokens are counted per chunk and corrected from usage at each request's end")
    if needs_calibration(cfg.workload.dataset) and cfg.calibrate:

        refused: list[str] = []  # the server's reason when a calibration request failed

        async def prompt_tokens(prompt: str) -> int | None:
            """One max_tokens=1 request; the server's prompt_tokens for `prompt`."""
            rec = await sender.send(prompt, 1, 0, "calibration")
            if rec.status == records.FAILED:
                refused.append(rec.error_text or rec.error_kind)
            return rec.input_tokens if rec.status == records.OK and rec.usage_reported else None

        load.calibration = await calibrate(prompt_tokens, cfg.seed)
        if load.calibration.measured:
            e.log("notice", f"calibrated prompts: {load.calibration.per_word:.2f} tokens/word + {load.calibration.overhead:.0f}")
        elif refused:  # not the server's usage: its refusal (a wrong model, a full queue)
            e.log("warning", f"calibration requests failed ({refused[-1]}): input lengths are approximate (1 token per word)")
        else:
            e.log("warning", "server reported no prompt_tokens: input lengths are approximate (1 token per word)")
    load.source = PromptSource(cfg.workload, load.calibration)
    e.book.workload = cfg.workload.describe()
    if cfg.workload.trace is not None:
        from ..load.trace_replay import TraceReplay

        load.trace = await asyncio.to_thread(TraceReplay.load, cfg.workload.trace, load.calibration, cfg.seed)


async def make_load(e: Starting, c0: int) -> LoadControl:
    """What holds the load at C=c0: here, or in workers (started, ready)."""
    cfg, load = e.config, e.load
    arrival, seed = parse_arrival(cfg.arrival), cfg.seed
    if cfg.workers <= 1 and cfg.ray is None:  # the one-worker case: this process holds it
        assert load.source is not None
        if cfg.workers_why:  # --workers auto measured, and one process holds it
            e.log("notice", cfg.workers_why)
        load.holder = LoadHolder(e.targets.states, load.source, cfg.workload, load.trace.prompt if load.trace is not None else None)
        ctl = Controller(load.holder.one, c0, cfg.max_concurrency, prepare=load.holder.prepare, on_held=e.note_held, on_abandon=e.book.abandon_held,
                         arrival=arrival, seed=seed)
        ctl.budget = cfg.num_requests  # --num-requests: only this process holds the load (checked before the start)
        return ctl
    from ..load.worker_pool import WorkerPool  # worker processes' code: imported only when there are workers

    if cfg.ray is not None:
        from ..load.ray_pool import RayPool  # the optional extra redline[ray]

        pool: WorkerPool = RayPool(EnginePort(e), cfg.workers, c0, cfg.max_concurrency, cfg.ray, arrival=arrival, seed=seed)
    else:
        pool = WorkerPool(EnginePort(e), cfg.workers, c0, cfg.max_concurrency, arrival=arrival, seed=seed)
    load.pool = pool
    await pool.launch(worker_spec(e))
    where = f"Ray actors on {', '.join(sorted({s.node for s in pool.states}))}" if cfg.ray is not None else "worker processes"
    why = f" ({cfg.workers_why})" if cfg.workers_why else ""
    e.log("notice", f"{cfg.workers} {where} hold the load, each its share of C and its own connections{why}")
    return pool


def worker_spec(e: Starting, workers: int | None = None) -> WorkerSpec:
    """What every worker of `workers` (default: the config's) needs to send its share (its
    index set by the pool)."""
    from ..load.worker import WorkerSpec

    cfg, sender = e.config, e.targets.sender
    return WorkerSpec(
        index=0, workers=cfg.workers if workers is None else workers, targets=tuple(t.target for t in e.targets),
        weights=tuple(t.weight for t in e.targets), workload=cfg.workload, calibration=e.load.calibration,
        transport=cfg.transport, insecure=cfg.insecure, api_key=cfg.api_key, request_timeout=cfg.request_timeout,
        continuous_usage=sender.continuous_usage, arrival=cfg.arrival, seed=cfg.seed,
        first_rid=next(e.targets.ids) + 1_000_000, wall_offset=e.clock.wall0 - e.clock.perf0,
    )


async def fixed_size(e: Starting) -> None:
    """A fixed-size run: after N requests were sent and ended, or S seconds, no more load;
    the engine's life says why (`finished`) and is `done` (the TUI and the headless runner
    then close the session as `q` does)."""
    cfg, ctl, life = e.config, e.load.controller, e.life
    assert ctl is not None
    waits: list[asyncio.Future[object]] = []
    if cfg.num_requests is not None:
        assert isinstance(ctl, Controller), "--num-requests is counted in this process (tui/cli/launch.py checks it)"
        waits.append(asyncio.ensure_future(ctl.drained.wait()))
    if cfg.duration_s is not None:
        waits.append(asyncio.ensure_future(asyncio.sleep(cfg.duration_s)))
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
    if cfg.num_requests is not None and isinstance(ctl, Controller) and ctl.drained.is_set():
        life.finished = f"{cfg.num_requests} requests sent and ended"
    else:
        life.finished = f"{cfg.duration_s:g} s"
    # no more load; what is in flight ends with the session (the load may have moved to worker
    # processes since the start: engine/core/load_move.py)
    (e.load.controller or ctl).pause()
    e.log("notice", f"fixed-size run done: {life.finished}")
    life.done.set()
    e.publish(time.perf_counter())


async def start_telemetry(e: Starting, base: str) -> TelemetryHub:
    """The server's /metrics and the GPUs (NVML, dcgm-exporter, or the sim's own), watched
    once a second: the first target's hub, started (its GPUs then added to the fingerprint)."""
    assert e.client is not None and e.target is not None
    cfg = e.config
    gpu_url = cfg.gpu_metrics_url
    if gpu_url is None and "redline_sim" in e.target.info.raw:
        gpu_url = base + "/dcgm/metrics"  # the sim's simulated GPUs, found with no flags
    hub = TelemetryHub(
        e.client,
        server_metrics_url=cfg.server_metrics_url or base + "/metrics",
        gpu_metrics_url=gpu_url,
        use_nvml=cfg.use_nvml and gpu_url is None,
        on_notice=lambda text: e.log("notice", text),
    )
    await hub.start()
    e.life.spawn(gpu_fingerprint(e.disk.session, e.disk.fingerprint, hub), "redline-fingerprint")  # its GPUs, once read
    if e.targets:
        e.targets[0].telemetry = hub
    return hub
