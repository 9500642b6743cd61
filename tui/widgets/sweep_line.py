"""The line above the header in `redline sweep` on a terminal: which configuration of how many,
its values, and its state (starting: what the start waits for / running / stopping), then the
configurations done (tui/sweep_status.py SweepStatus.text; the app updates it each refresh)."""

from __future__ import annotations

from textual.widgets import Static

from ..sweep_status import SweepStatus


class SweepLine(Static):
    def __init__(self, status: SweepStatus, **kw) -> None:
        self._text = status.text("waiting")
        super().__init__(self._text, markup=False, **kw)
        self.status = status

    def show(self, text: str) -> None:
        """Redrawn only when its words change (the app asks four times a second)."""
        if text != self._text:
            self._text = text
            self.update(text)
