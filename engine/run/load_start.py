"""The load's start, on the engine (engine/run/engine.py): start-up's own requests, the
prompts, what holds the load, its telemetry, and a fixed-size run's end.

Start-up's own requests (`prepare`): whether the server streams usage per chunk, and the
prompt calibration (tokens per word, measured) when the workload needs one; then the
workload's prompts and the trace. `make_load` builds what the engine steers (a LoadControl,
engine/load/controller.py): in this process a Controller whose launch is the engine's
LoadHolder (engine/load/holder.py: the one-worker case of what every worker holds); with
`--workers N` or `--ray` a WorkerPool or RayPool (the same commands), its workers started,
reaching the engine through the load's port (engine/run/load_port.py).

`e` is the Engine (typed loosely: it owns these steps of its start).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from ..client.api_formats import GENERATE, continuous_usage_refused
from ..load.controller import Controller, LoadControl
from ..load.holder import LoadHolder
from ..measure import records as R
from ..workload.arrivals import parse_arrival
from ..workload.prompts import PromptSource, calibrate, needs_calibration
from ..telemetry.hub import TelemetryHub
from .load_port import EnginePort
from .provenance import gpu_fingerprint, open_fingerprint

if TYPE_CHECKING:
    from ..load.worker import WorkerSpec  # the worker processes' module: imported only when there are workers


async def prepare(e: Any) -> None:
    """Start-up's own requests (phase "calibration": counted, never measured), then the
    workload's prompts and the trace."""
    cfg, sender, target = e.config, e.sender, e.target
    assert sender is not None and target is not None
    await open_fingerprint(e, target.url)  # meta.json's fingerprint: what the server says of itself
    if cfg.calibrate and target.api != GENERATE:
        # per-chunk usage where the server offers it; a server that refuses the option (an
        # HTTP 400/422 naming it) gets plain streams, tokens corrected from usage at the end
        rec = await sender.send("Hi", 1, 0, "calibration")
        if rec.status == R.FAILED and continuous_usage_refused(rec.http_status, rec.error_text):
            sender.continuous_usage = False
            e.log("notice", "server refuses stream_options.continuous_usage_stats: output tokens are counted per chunk and corrected from usage at each request's end")
    if needs_calibration(cfg.workload.dataset) and cfg.calibrate:

        refused: list[str] = []  # the server's reason when a calibration request failed

        async def prompt_tokens(prompt: str) -> int | None:
            """One max_tokens=1 request; the server's prompt_tokens for `prompt`."""
            rec = await sender.send(prompt, 1, 0, "calibration")
            if rec.status == R.FAILED:
                refused.append(rec.error_text or rec.error_kind)
            return rec.input_tokens if rec.status == R.OK and rec.usage_reported else None

        e.calibration = await calibrate(prompt_tokens, cfg.seed)
        if e.calibration.measured:
            e.log("notice", f"calibrated prompts: {e.calibration.per_word:.2f} tokens/word + {e.calibration.overhead:.0f}")
        elif refused:  # not the server's usage: its refusal (a wrong model, a full queue)
            e.log("warning", f"calibration requests failed ({refused[-1]}): input lengths are approximate (1 token per word)")
        else:
            e.log("warning", "server reported no prompt_tokens: input lengths are approximate (1 token per word)")
    e.source = PromptSource(cfg.workload, e.calibration)
    e.book.workload = cfg.workload.describe()
    if cfg.workload.trace is not None:
        from ..load.trace_replay import TraceReplay

        e.trace = await asyncio.to_thread(TraceReplay.load, cfg.workload.trace, e.calibration, cfg.seed)


async def make_load(e: Any, c0: int) -> LoadControl:
    """What holds the load at C=c0: here, or in workers (started, ready)."""
    cfg = e.config
    kw = dict(arrival=parse_arrival(cfg.arrival), seed=cfg.seed)
    if cfg.workers <= 1 and cfg.ray is None:  # the one-worker case: this process holds it
        assert e.source is not None
        if cfg.workers_why:  # --workers auto measured, and one process holds it
            e.log("notice", cfg.workers_why)
        e.holder = LoadHolder(e.target_set.states, e.source, cfg.workload, e.trace.prompt if e.trace is not None else None)
        return Controller(e.holder.one, c0, cfg.max_concurrency, on_held=e.note_held, on_abandon=e.book.abandon_held, **kw)
    if cfg.ray is not None:
        from ..load.ray_pool import RayPool  # the optional extra redline[ray]

        pool = RayPool(EnginePort(e), cfg.workers, c0, cfg.max_concurrency, cfg.ray, **kw)
    else:
        from ..load.worker_pool import WorkerPool

        pool = WorkerPool(EnginePort(e), cfg.workers, c0, cfg.max_concurrency, **kw)
    e.pool = pool
    await pool.launch(worker_spec(e))
    where = f"Ray actors on {', '.join(sorted({s.node for s in pool.states}))}" if cfg.ray is not None else "worker processes"
    why = f" ({cfg.workers_why})" if cfg.workers_why else ""
    e.log("notice", f"{cfg.workers} {where} hold the load, each its share of C and its own connections{why}")
    return pool


def worker_spec(e: Any) -> WorkerSpec:
    """What every worker needs to send its share (its index set by the pool)."""
    from ..load.worker import WorkerSpec

    cfg, sender = e.config, e.sender
    assert sender is not None
    return WorkerSpec(
        index=0, workers=cfg.workers, targets=tuple(t.target for t in e.targets),
        weights=tuple(t.weight for t in e.targets), workload=cfg.workload, calibration=e.calibration,
        transport=cfg.transport, insecure=cfg.insecure, api_key=cfg.api_key, request_timeout=cfg.request_timeout,
        continuous_usage=sender.continuous_usage, arrival=cfg.arrival, seed=cfg.seed,
        first_rid=next(e.target_set.ids) + 1_000_000, wall_offset=e.clock.wall0 - e.clock.perf0,
    )


async def fixed_size(e: Any) -> None:
    """A fixed-size run: after N requests were sent and ended, or S seconds, no more load;
    `finished` says why and `run_done` is set (the TUI and the headless runner then close
    the session as `q` does)."""
    cfg, ctl = e.config, e.controller
    assert ctl is not None
    waits = []
    if cfg.num_requests is not None:
        waits.append(asyncio.ensure_future(ctl.drained.wait()))
    if cfg.duration_s is not None:
        waits.append(asyncio.ensure_future(asyncio.sleep(cfg.duration_s)))
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
    if cfg.num_requests is not None and ctl.drained.is_set():
        e.finished = f"{cfg.num_requests} requests sent and ended"
    else:
        e.finished = f"{cfg.duration_s:g} s"
    ctl.pause()  # no more load; what is in flight ends with the session
    e.log("notice", f"fixed-size run done: {e.finished}")
    e.run_done.set()
    e._publish(time.perf_counter())


async def start_telemetry(e: Any, base: str) -> None:
    """The server's /metrics and the GPUs (NVML, dcgm-exporter, or the sim's own), watched once a second."""
    assert e.client is not None and e.target is not None
    cfg = e.config
    gpu_url = cfg.gpu_metrics_url
    if gpu_url is None and "redline_sim" in e.target.info.raw:
        gpu_url = base + "/dcgm/metrics"  # the sim's simulated GPUs, found with no flags
    e.telemetry = TelemetryHub(
        e.client,
        server_metrics_url=cfg.server_metrics_url or base + "/metrics",
        gpu_metrics_url=gpu_url,
        use_nvml=cfg.use_nvml and gpu_url is None,
        on_notice=lambda text: e.log("notice", text),
    )
    await e.telemetry.start()
    e._tasks.append(asyncio.create_task(gpu_fingerprint(e), name="redline-fingerprint"))  # its GPUs, once read
    if e.targets:
        e.targets[0].telemetry = e.telemetry
    e.ticker.start_watching(e._tasks)
