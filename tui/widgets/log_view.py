"""Operator actions, warnings and errors; a repeated line is folded (×N).

A line longer than the log is wide wraps at word boundaries under its text (the time stamp
stays alone on the left), never cut mid-word; when the log changes width (a resize, the wide
layout) every line is wrapped again to the new width.

The log shows whole entries, the newest last: when they do not all fit, the older
ones are left out whole, so the top line is always the start of an entry (a wrapped
"server gone: ..." never shows as its tail). Only an entry taller than the whole log is cut,
at its end. The mouse wheel goes back through older entries (a line at the bottom counts the
newer ones below); back at the newest, the log follows new entries again.
"""

from __future__ import annotations

import time
from collections import deque

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.widget import Widget

from ...engine.api import LogLine

STYLE = {"warning": "yellow", "error": "red", "break": "bold red", "step": "cyan", "probe": "magenta", "key": "bold"}
STAMP = "%H:%M:%S"
MAX_LINES = 500


def stamp(epoch: float) -> str:
    return time.strftime(STAMP, time.localtime(epoch))


def entry_grid(when: str, text: Text) -> Table:
    """The stamp in its own column, the text wrapped beside it."""
    grid = Table.grid(padding=(0, 1), expand=True)
    grid.add_column(width=len(when), style="dim", no_wrap=True)
    grid.add_column(ratio=1, overflow="fold")
    grid.add_row(when, text)
    return grid


class EventLog(Widget):
    can_focus = False  # the keys are the live screen's (live_screen.py BINDINGS)

    def __init__(self, *, id: str = "log") -> None:
        super().__init__(id=id)
        self._entries: deque[tuple[int, str, Text]] = deque(maxlen=MAX_LINES)  # (number, stamp, text)
        self._count = 0
        self._heights: dict[int, int] = {}  # entry number -> its lines at self._width
        self._width = 0
        self._back = 0  # entries scrolled back from the newest (the mouse wheel)
        self._seen = 0
        self._last_text = ""
        self._repeat = 0
        self.lines_text: list[str] = []  # plain text of what was written (tests read it)

    # -- input -------------------------------------------------------------------------
    def show(self, lines: tuple[LogLine, ...]) -> None:
        added = 0
        for line in lines:
            if line.seq <= self._seen:
                continue
            self._seen = line.seq
            if line.text == self._last_text:
                self._repeat += 1
                continue
            added += self._flush_repeat()
            self._last_text = line.text
            self.lines_text.append(line.text)
            self._add(stamp(line.t), Text(line.text, style=STYLE.get(line.kind, "")))
            added += 1
        if added:
            if self._back:  # scrolled back: the same entries stay in view
                self._back = min(self._back + added, len(self._entries) - 1)
            self.refresh()

    def _flush_repeat(self) -> int:
        if not self._repeat:
            return 0
        self._add(" " * 8, Text(f"(last line repeated ×{self._repeat})", style="dim"))
        self._repeat = 0
        return 1

    def _add(self, when: str, text: Text) -> None:
        self._count += 1
        self._entries.append((self._count, when, text))

    # -- scrolling back ----------------------------------------------------------------
    def on_mouse_scroll_up(self) -> None:
        if self._back < len(self._entries) - 1:
            self._back += 1
            self.refresh()

    def on_mouse_scroll_down(self) -> None:
        if self._back:
            self._back -= 1
            self.refresh()

    # -- drawing -----------------------------------------------------------------------
    def _height(self, entry: tuple[int, str, Text], width: int) -> int:
        if width != self._width:
            self._heights.clear()
            self._width = width
        n, when, text = entry
        h = self._heights.get(n)
        if h is None:
            console = self.app.console
            h = len(console.render_lines(entry_grid(when, text), console.options.update_width(width), pad=False))
            self._heights[n] = h
        return h

    def shown(self, width: int, height: int) -> tuple[list[tuple[int, str, Text]], int, str]:
        """(the entries drawn, oldest first; lines the newest may keep when it alone is
        taller than the log (0: all); the line under them, "" when following)."""
        if width <= 0 or height <= 0 or not self._entries:
            return [], 0, ""
        entries = list(self._entries)
        if len(self._heights) > 2 * MAX_LINES:  # entries gone from the deque
            oldest = entries[0][0]
            self._heights = {k: v for k, v in self._heights.items() if k >= oldest}
        back = min(self._back, len(entries) - 1)
        newer = f"↓ {back} newer (wheel down)" if back else ""
        room = height - (1 if newer else 0)
        end = len(entries) - back
        out: list[tuple[int, str, Text]] = []
        used = 0
        for entry in reversed(entries[:end]):
            h = self._height(entry, width)
            if used + h > room:
                if not out:  # the newest alone is taller than the log: its start, cut at the end
                    return [entry], max(room, 1), newer
                break
            out.append(entry)
            used += h
        out.reverse()
        return out, 0, newer

    def render(self) -> RenderableType:
        width, height = self.content_size.width, self.content_size.height
        entries, cut, newer = self.shown(width, height)
        parts: list[RenderableType] = [entry_grid(when, text) for _, when, text in entries]
        if cut:
            console = self.app.console
            lines = console.render_lines(parts[0], console.options.update_width(width), pad=False)[:cut]
            texts = [Text.assemble(*((seg.text, seg.style) if seg.style else seg.text for seg in line)) for line in lines]
            if texts:
                texts[-1].truncate(max(width - 1, 0))
                texts[-1].append("…")
            parts = list(texts)
        if newer:
            parts.append(Text(newer, style="dim italic"))
        return Group(*parts)
