"""What the live screen (tui/live_screen.py) takes from outside, typed: the engine's host and
the app that shows it. The screen imports neither engine/host.py nor tui/app.py (the app
imports the screen); these name the little it uses of each."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import concurrent.futures
    from pathlib import Path

    from ..engine.api import EngineConfig, Snapshot
    from .engine_commands import commands


class EngineHost(Protocol):
    """The engine's host as the screen and the app use it: engine/host.py EngineProcess or
    EngineThread, or tui/run_app.py StartingHost while they start."""

    @property
    def snapshot(self) -> Snapshot | None: ...

    @property
    def config(self) -> EngineConfig: ...

    def send(self, cmd: commands.Command) -> concurrent.futures.Future[object]: ...

    def stop(self, reason: str = "quit") -> None: ...


class ScreenOwner(Protocol):
    """What the live screen asks of the app that shows it (tui/app.py RedlineApp): the latest
    snapshot, where the presets are, and the way out (`q`, a sweep's `n`)."""

    @property
    def snapshot(self) -> Snapshot | None: ...

    @property
    def presets_dir(self) -> Path: ...

    @property
    def quitting(self) -> bool: ...

    def pull_snapshot(self) -> None: ...

    async def quit_redline(self, reason: str) -> None: ...

    def quit_soon(self, reason: str) -> None: ...


__all__ = ["EngineHost", "ScreenOwner"]
