"""What the engine's helpers may read and call on it: one interface, so none of them imports
engine/run/engine.py back (the house has no import circle, type-only imports included).

The worker pools (pool.py, ray_pool.py), the publisher (publish.py), the ticker (ticker.py)
and the control API (control_server.py, prom.py) are handed the Engine; they see it as an
`EngineView`: its public parts and commands, never its private members.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Protocol

if TYPE_CHECKING:
    import asyncio

    from . import commands as C
    from .config import EngineConfig
    from ..load.controller import LoadControl
    from .event_log import EventLog
    from ..rules.guard import GuardWatch
    from ..load.probe_lane import LaneStats, ProbeLane
    from ..measure.live_metrics import LiveMetrics
    from .recorder import Recorder
    from ..measure.records import Clock
    from ..load.sender import Sender
    from ..session import SessionWriter
    from .snapshot import Snapshot
    from ..measure.step_book import StepBook
    from ..client.target import Target
    from .target_stats import TargetState
    from ..telemetry.hub import TelemetryHub
    from ..load.trace_replay import TraceReplay
    from ..workload.prompts import Calibration, PromptSource


class EngineView(Protocol):
    config: EngineConfig
    clock: Clock
    t0: float  # perf_counter at the load's start
    cpu0: float  # process_time at the load's start
    book: StepBook
    metrics: LiveMetrics
    recorder: Recorder
    events: EventLog
    targets: list[TargetState]
    target: Target | None
    controller: LoadControl | None
    pool: Any  # engine/load/worker_pool.py WorkerPool (or RayPool) with --workers / --ray
    target_set: Any  # engine/load/target_set.py TargetSet
    sender: Sender | None  # the first target's load Sender
    source: PromptSource | None
    calibration: Calibration
    telemetry: TelemetryHub | None
    session: SessionWriter | None
    lane: ProbeLane | None
    lane_stats: LaneStats
    guard: GuardWatch | None
    trace: TraceReplay | None
    ticker: Any  # engine/run/each_second.py Ticker: `row`, `second`, `health`, `history`
    live: Any  # engine/run/live_steps.py LiveSteps: `concurrency()`, the step's C (an open loop's cap)
    history: Any
    snapshot: Snapshot
    preset_line: str
    dispatch: Callable[[Any, C.Command], object]
    on_stop_request: Callable[[str], None] | None

    @property
    def closed(self) -> bool: ...
    @property
    def state(self) -> str: ...
    @property
    def in_flight(self) -> int: ...
    @property
    def backing_off(self) -> int: ...
    @property
    def server_gone(self) -> bool: ...
    @property
    def driver_running(self) -> bool: ...
    @property
    def load_text(self) -> str: ...

    def stamp(self, t_intended: float | None = None) -> tuple[int, int, str]: ...
    def note_held(self, dropped: bool, t_intended: float | None = None) -> None: ...
    def log(self, kind: str, text: str, **fields: object) -> None: ...
    def warn(self, text: str, key: str | None = None) -> None: ...
    def to_disk(self, fn: Callable[..., object], *args: object) -> None: ...
    def set_concurrency(self, n: int, *, kind: str = "key") -> int: ...
    def cancel_driver(self) -> bool: ...
    async def stop(self, reason: str = "quit") -> None: ...
    def attach_driver(self, task: asyncio.Task) -> None: ...
