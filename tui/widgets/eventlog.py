"""Operator actions, warnings and errors; a repeated line is folded (×N).

A line longer than the log is wide wraps at word boundaries under its text (the time stamp
stays alone on the left), never cut mid-word; when the log changes width (a resize, the wide
layout) every line is wrapped again to the new width.
"""

from __future__ import annotations

import time

from collections import deque

from rich.table import Table
from rich.text import Text
from textual.widgets import RichLog

from redline.engine.snapshot import LogLine

STYLE = {"warning": "yellow", "error": "red", "break": "bold red", "step": "cyan", "probe": "magenta", "key": "bold"}
STAMP = "%H:%M:%S"
MAX_LINES = 500


def stamp(epoch: float) -> str:
    return time.strftime(STAMP, time.localtime(epoch))


class EventLog(RichLog):
    def __init__(self, *, id: str = "log") -> None:
        super().__init__(id=id, max_lines=MAX_LINES, min_width=1, wrap=True, markup=False, highlight=False)
        self._entries: deque[tuple[str, Text]] = deque(maxlen=MAX_LINES)  # to wrap again on resize
        self._width = 0
        self._seen = 0
        self._last_text = ""
        self._repeat = 0
        self.lines_text: list[str] = []  # plain text of what was written (tests read it)

    def show(self, lines: tuple[LogLine, ...]) -> None:
        for line in lines:
            if line.seq <= self._seen:
                continue
            self._seen = line.seq
            if line.text == self._last_text:
                self._repeat += 1
                continue
            self._flush_repeat()
            self._last_text = line.text
            self.lines_text.append(line.text)
            self._write(stamp(line.t), Text(line.text, style=STYLE.get(line.kind, "")))

    def on_resize(self) -> None:
        width = self.scrollable_content_region.width
        if self._size_known and width != self._width and self._entries:
            entries = list(self._entries)
            self._entries.clear()
            self.clear()
            for when, text in entries:
                self._write(when, text)
        elif self.auto_scroll:  # shorter or taller (a block above it came or went): newest line in view
            self.call_after_refresh(self.scroll_end, animate=False)

    def _write(self, when: str, text: Text) -> None:
        """The stamp in its own column, the text wrapped beside it."""
        self._entries.append((when, text))
        self._width = self.scrollable_content_region.width
        grid = Table.grid(padding=(0, 1), expand=True)
        grid.add_column(width=len(when), style="dim", no_wrap=True)
        grid.add_column(ratio=1, overflow="fold")
        grid.add_row(when, text)
        self.write(grid, expand=True)

    def _flush_repeat(self) -> None:
        if self._repeat:
            self._write(" " * 8, Text(f"(last line repeated ×{self._repeat})", style="dim"))
            self._repeat = 0
