"""The `e` key's work (tui/live_screen.py): every row recorded so far flushed to the session
log, then the session exported to parquet in a thread (seconds on a long session: the keys
never wait for it), one export at a time; a notice says where, the log too."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Protocol

from .engine_commands import commands

if TYPE_CHECKING:
    from pathlib import Path
    from typing import Coroutine

    from textual.notifications import SeverityLevel

    from .ports import EngineHost


class Notify(Protocol):
    """A widget's notify: a notice at the bottom right."""

    def __call__(self, message: str, *, severity: SeverityLevel = "information",
                 timeout: float | None = None) -> None: ...


class SessionExport:
    def __init__(self, host: EngineHost, notify: Notify) -> None:
        self.host = host
        self.notify = notify
        self.running = False  # an export is under way: the next `e` waits for it

    def start(self) -> Coroutine[None, None, None] | None:
        """The export to run in a worker, or None when none can start now (no session
        directory, one already running), said in a notice."""
        d = self.host.config.out_dir
        if d is None:
            self.notify("no session directory", severity="warning")
            return None
        if self.running:
            self.notify("an export is already running", severity="warning", timeout=2)
            return None
        self.running = True
        return self._run(d)

    async def _run(self, d: Path) -> None:
        try:
            await self._export(d)
        finally:
            self.running = False

    async def _export(self, d: Path) -> None:
        from ..engine.api import SessionError
        from ..engine.report.api import export_session

        try:  # every row recorded so far is on disk before the export reads it
            err = await asyncio.wrap_future(self.host.send(commands.Flush()))
        except Exception as exc:  # noqa: BLE001 - the engine is gone: export what was written
            err = str(exc)
        if err:
            self.notify(f"session log: {err}", severity="warning")
        try:
            paths = await asyncio.to_thread(export_session, d, "parquet", None)
        except SessionError as exc:
            self.notify(str(exc), severity="error")
            return
        where = paths[0].parent if paths else d
        # one short line at the bottom right (the path is in the log): the table stays in view
        self.notify(f"exported {len(paths)} tables to …/{where.parent.name}/{where.name}")
        self.host.send(commands.Log("notice", f"exported parquet to {where}"))


__all__ = ["SessionExport"]
