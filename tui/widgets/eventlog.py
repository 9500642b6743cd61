"""Operator actions, warnings and errors, one line each; a repeated line is folded (×N)."""

from __future__ import annotations

import time

from rich.text import Text
from textual.widgets import RichLog

from redline.engine.snapshot import LogLine

STYLE = {"warning": "yellow", "error": "red", "break": "bold red", "step": "cyan", "probe": "magenta", "key": "bold"}


class EventLog(RichLog):
    def __init__(self, *, id: str = "log") -> None:
        super().__init__(id=id, max_lines=500, wrap=False, markup=False, highlight=False)
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
            stamp = time.strftime("%H:%M:%S", time.localtime(line.t))
            self.lines_text.append(line.text)
            self.write(Text.assemble((stamp + " ", "dim"), (line.text, STYLE.get(line.kind, ""))))

    def _flush_repeat(self) -> None:
        if self._repeat:
            self.write(Text(f"         (last line repeated ×{self._repeat})", style="dim"))
            self._repeat = 0
