"""The line above the header in `redline sweep` on a terminal: which configuration of how many,
its values, and its state (starting: what the start waits for / running / stopping), then the
configurations done (tui/sweep_status.py SweepStatus.text; the live screen has it follow each
snapshot)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.widgets import Static

from ..sweep_status import SweepStatus

if TYPE_CHECKING:
    from ...engine.api import Snapshot


class SweepLine(Static):
    def __init__(self, status: SweepStatus, *, id: str | None = None) -> None:
        self._text = status.text("waiting")
        super().__init__(self._text, markup=False, id=id)
        self.status = status

    def follow(self, snap: Snapshot | None, preset_asked: bool) -> None:
        """The sweep's line for this snapshot; its preset is waiting (the server or the
        engine starting, or the preset asked for and not begun), running, or over (a key
        cancelled it: the load is the operator's)."""
        if snap is None or not snap.preset_running and (preset_asked or snap.state == "starting"):
            preset = "waiting"
        else:
            preset = "running" if snap.preset_running else "over"
        self.show(self.status.text(preset, width=self.content_region.width or None))

    def show(self, text: str) -> None:
        """Redrawn only when its words change (the app asks four times a second)."""
        if text != self._text:
            self._text = text
            self.update(text)
