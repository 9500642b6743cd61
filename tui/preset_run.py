"""A preset run from the live screen (the picker's choice, `k`'s knee search, `redline run NAME`
on a terminal), as `redline run NAME` runs one: what its workload has that the session's has
not (lengths, a dataset) is applied first, as a workload change, and the preset starts once
the engine took it; what cannot change live (a trace, turns) is said in one line and nothing
starts. The run is then watched (tui/watches.py PresetWatch) until it ends. No Textual."""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import TYPE_CHECKING, Protocol

from ..engine import api
from .engine_commands import commands, error_line
from .watches import PresetWatch

if TYPE_CHECKING:
    from typing import Coroutine

    from textual.notifications import SeverityLevel

    from ..engine.api import EngineConfig, Preset, Snapshot, WorkloadChange

WORKLOAD_REPLY_S = 15.0  # a workload change (a preset's, the `w` form's) waits this long for the engine's answer


class PresetScreen(Protocol):
    """What a preset run asks of the screen it runs from (tui/live_screen.py LiveScreen)."""

    @property
    def snapshot(self) -> Snapshot | None: ...

    def session_workload(self) -> dict[str, object]: ...

    def command(self, cmd: commands.Command) -> concurrent.futures.Future[object]: ...

    def notify(self, message: str, *, severity: SeverityLevel = "information",
               timeout: float | None = None) -> None: ...


class PresetRun:
    def __init__(self, screen: PresetScreen) -> None:
        self.screen = screen
        self.watch = PresetWatch()

    def begin(self, preset: Preset) -> Coroutine[None, None, None] | None:
        """Start `preset` now when the session's workload is its own already (or say why it
        cannot run: None either way); else the coroutine, for a worker, that changes the
        workload and then starts it."""
        try:
            change = api.preset_workload_change(preset, self.screen.session_workload())
        except api.PresetError as exc:
            self.screen.notify(str(exc), severity="error")
            return None
        if change is None:
            self._start(preset)
            return None
        return self._start_with_workload(preset, change)

    async def _start_with_workload(self, preset: Preset, change: WorkloadChange) -> None:
        fut = self.screen.command(commands.SetWorkload(change))
        try:
            await api.wait_within(asyncio.wrap_future(fut), WORKLOAD_REPLY_S)
        except asyncio.TimeoutError:
            self.screen.notify(f"preset {preset.name}: the engine has not confirmed its workload ({change.describe()}); "
                               "not started", severity="error")
            return
        except Exception as exc:  # noqa: BLE001 - the engine's refusal (a dataset file it cannot read)
            self.screen.notify(f"preset {preset.name}: workload {change.describe()}: {error_line(exc)}; not started",
                               severity="error")
            return
        self._start(preset)

    def _start(self, preset: Preset) -> None:
        snap = self.screen.snapshot
        self.screen.command(commands.StartPreset(preset))
        self.watch.start(preset.name, max((line.seq for line in snap.log), default=0) if snap else 0)


def search_preset(start: int, max_c: int, config: EngineConfig | None) -> Preset:
    """The preset `k` runs: a knee search from the current C with this session's workload
    (built by the engine: engine/preset/knee.py)."""
    return api.knee_search_preset(start, max_c, getattr(config, "workload", None))


__all__ = ["WORKLOAD_REPLY_S", "PresetRun", "PresetScreen", "search_preset"]
