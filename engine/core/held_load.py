"""The load the engine holds, in one place: what steers it (a LoadControl: engine/load/
controller.py in this process, a WorkerPool or RayPool with workers), what sends it here (the
one LoadHolder, engine/load/holder.py), the prompts and the trace it sends, the calibration
they were cut with, the probe lane beside it, and the open loop's last rate. Filled at the
start (engine/core/load_start.py); the engine's commands change it. A load that moved from
this process to worker processes (engine/core/load_move.py) drains here meanwhile (`draining`):
an abort, a probe and the stop cancel it too."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Awaitable

from ..workload.prompts import DEFAULT_CALIBRATION, Calibration

if TYPE_CHECKING:
    from ..load.controller import Controller, LoadControl
    from ..load.holder import LoadHolder
    from ..load.probe_lane import ProbeLane
    from ..load.trace_replay import TraceReplay
    from ..load.worker_pool import WorkerPool
    from ..workload.prompts import PromptSource


@dataclass
class HeldLoad:
    base_workload: dict[str, object]  # a replay's [workload], before any change (the config's, described)
    controller: LoadControl | None = None  # the load's state and commands; None before the start
    pool: WorkerPool | None = None  # --workers N / --ray: the same object as `controller` (RayPool is a WorkerPool)
    holder: LoadHolder | None = None  # the load held in this process (no workers)
    source: PromptSource | None = None  # the workload's prompts
    trace: TraceReplay | None = None  # with a trace workload
    calibration: Calibration = DEFAULT_CALIBRATION  # tokens per word, as measured at the start
    lane: ProbeLane | None = None  # the probe lane: one request at a time beside the load
    last_rate: float | None = None  # the open loop's last rate, for the mode key
    draining: Controller | None = None  # moving to workers: this process's load, sending no more, until its last request ends
    moved: dict[str, object] | None = None  # moved: this process as summary.json's worker 0, as it was when its last request ended

    @property
    def draining_in_flight(self) -> int:
        return self.draining.in_flight if self.draining is not None else 0

    async def with_draining(self, cancels: Awaitable[int], stop: bool = False) -> int:
        """`cancels` (the load's abort, probe or stop) and, at the same time, what still drains in
        this process after a move cancelled with it; how many requests were cancelled in all."""
        d = self.draining
        if d is None:
            return await cancels
        got = await asyncio.gather(cancels, d.stop() if stop else d.abort())
        return sum(got)
