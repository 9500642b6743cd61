"""The step table: one row per period held at one concurrency (or request rate, or trace
speed: the C column reads `12.5/s` or `×2 trace` then), in the order they happened.

A step (docs/numbers.md#what-a-steps-figures-describe) is a row; so is each C=1 probe and each
paused period, so an operator reads what happened when: 8, 64, probe, paused, 64 is five
rows in that order. The live row (the step being measured now, or the pause going on) is
last, marked `*` and highlighted; the table follows it unless the operator scrolled up.
Rows out of view are said in words at the right end of the header (`↑ more`, `↓ more`,
`↑↓ more`), not by a scrollbar, whose eighth-block thumb reads like a sparkline.

Every figure is the step's own (StepResult): "srv run" is the most requests the server
reported running while that step was measured, never the latest sample.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.strip import Strip
from textual.widgets import DataTable

from ...engine.api import LogLine, Snapshot, StepResult
from .header import rate_text
from .numbers import ms, rate, step_ms

COLUMNS = ("C", "dur", "tok/s", "TTFT p50", "TTFT p99", "ITL p99", "err", "srv run", "at")
LIVE_STYLE = "bold"  # and the row cursor sits on it (redline.tcss: #steps > .datatable--cursor)
PAUSE_STYLE = "yellow"


def clock(epoch: float) -> str:
    """Wall-clock time of day, as the event log stamps its lines."""
    return time.strftime("%H:%M:%S", time.localtime(epoch))


def load_cell(s: StepResult) -> str:
    """The step's load: its C, an open loop's target rate (`12.5/s`) or a trace's speed (`×2 trace`)."""
    mode = getattr(s, "mode", "concurrency")
    if mode == "rate" and getattr(s, "request_rate", None):
        return f"{rate_text(s.request_rate)}/s"
    if mode == "trace":
        speed = getattr(s, "trace_speed", None)
        return f"×{speed:g} trace" if speed else "trace"
    return str(s.concurrency)


def step_cells(s: StepResult, live: bool = False) -> tuple[str, ...]:
    """A step's row; a probe says so after its C, and so does a short one (held under
    MIN_LIVE_STEP_S: no point of the curve, judged by no rule), as the end table marks it."""
    c = f"{load_cell(s)}{'*' if live else ''}" + (" probe" if s.phase == "probe" else "") + (" short" if s.short and not live else "")
    return (
        c,
        f"{s.duration_s:.0f}s",
        rate(s.output_throughput),
        step_ms(s, "median_ttft_ms"),
        step_ms(s, "p99_ttft_ms"),
        ms(s.p99_itl_ms),
        str(s.failed),
        "-" if s.server_max_running is None else f"{s.server_max_running:.0f}",
        clock(opened(s)) if s.t_start else "",
    )


def opened(s: StepResult) -> float:
    """When the step's C was set (epoch), as the log says: measuring starts `warmup_s` later;
    a step still warming up (nothing measured yet) has t_start at its opening and counts
    `warmup_s` up to now."""
    return s.t_start if s.duration_s == 0 else s.t_start - s.warmup_s


def pause_cells(start: float, end: float | None, now: float | None, live: bool) -> tuple[str, ...]:
    stop = end if end is not None else now
    dur = f"{max(stop - start, 0):.0f}s" if stop is not None else ""
    return ("paused" + ("*" if live else ""), dur, "", "", "", "", "", "", clock(start))


@dataclass
class _Pause:
    start: float  # epoch, from the log line "paused"
    end: float | None = None  # from "resumed at C=..."


class StepTable(DataTable):
    can_focus = False  # the keys are the live screen's (live_screen.py BINDINGS); wheel and PgUp/PgDn scroll
    def __init__(self, *, id: str = "steps") -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=True, show_cursor=False)
        self._keys: list[str] = []  # row keys as shown
        self._cells: dict[str, tuple[str, ...]] = {}
        self._columns: list = []
        self._probes: dict[int, StepResult] = {}  # every probe seen (a snapshot holds the last)
        self._pauses: list[_Pause] = []
        self._log_seen = 0
        # Following the live row (the last): until the operator scrolls up (PgUp, the wheel),
        # and again once they scroll back to the end. Kept as a flag, not read off the scroll
        # position: when the table is made shorter (the goodput row, the lane line or a
        # warning above it), the position is no longer at the end, and the live row was lost.
        self.following = True

    def on_mount(self) -> None:
        self._columns = self.add_columns(*COLUMNS)

    # -- what happened -----------------------------------------------------------------
    def _note_log(self, lines: tuple[LogLine, ...]) -> None:
        for line in lines:
            if line.seq <= self._log_seen:
                continue
            self._log_seen = line.seq
            if line.kind != "key":
                continue
            if line.text == "paused":
                self._pauses.append(_Pause(line.t))
            elif line.text.startswith("resumed at") and self._pauses and self._pauses[-1].end is None:
                self._pauses[-1].end = line.t

    def step_rows(self, snap: Snapshot) -> list[tuple[str, tuple[str, ...], bool]]:
        """(key, cells, live) for every row, oldest first."""
        if snap.probe_result is not None:
            self._probes[snap.probe_result.index] = snap.probe_result
        self._note_log(snap.log)
        live = snap.current_step
        done: dict[int, StepResult] = {s.index: s for s in snap.steps}
        done.update(self._probes)
        if live is not None:
            done.pop(live.index, None)
        entries: list[tuple[float, int, str, tuple[str, ...], bool]] = []
        for s in done.values():
            entries.append((opened(s), s.index, f"s{s.index}", step_cells(s), False))
        now = snap.row.get("t") if snap.row else None
        paused_now = snap.state == "paused"
        for i, p in enumerate(self._pauses):
            is_live = paused_now and p.end is None and i == len(self._pauses) - 1
            entries.append((p.start, -1, f"p{i}", pause_cells(p.start, p.end, now, is_live), is_live))
        entries.sort(key=lambda e: (e[0], e[1]))
        out = [(key, cells, is_live) for _, _, key, cells, is_live in entries]
        if live is not None:
            out.append((f"s{live.index}", step_cells(live, live=True), True))
        return out

    # -- drawing -----------------------------------------------------------------------
    def show(self, snap: Snapshot) -> None:
        if self.following and self.scroll_y < self.max_scroll_y:
            # the table was made shorter (the probe lane's line, a warning) and nothing moved
            # it back: the live row stays in view whether or not a figure changed
            self.call_after_refresh(self._to_live)
        rows = self.step_rows(snap)
        keys = [k for k, _, _ in rows]
        styled = {k: self._styled(cells, is_live, k) for k, cells, is_live in rows}
        plain = {k: cells + (("*",) if is_live else ()) for k, cells, is_live in rows}
        if keys == self._keys and all(plain[k] == self._cells.get(k) for k in keys):
            return
        if keys[: len(self._keys)] == self._keys:  # rows only added, or their figures changed
            for k in self._keys:
                if plain[k] != self._cells[k]:
                    for col, value in zip(self._columns, styled[k], strict=False):
                        self.update_cell(k, col, value, update_width=True)
            for k in keys[len(self._keys) :]:
                self.add_row(*styled[k], key=k)
        else:
            self.clear()
            for k in keys:
                self.add_row(*styled[k], key=k)
        self._keys = keys
        self._cells = plain
        live = self.live_row()
        self.show_cursor = live is not None  # the highlight is the live row's, never another's
        if live is not None:
            self.move_cursor(row=live, scroll=False)
        if self.following:
            self.call_after_refresh(self._to_live)

    # -- following the live row ----------------------------------------------------------
    def _to_live(self) -> None:
        if self.following:
            self.scroll_end(animate=False, immediate=True)

    def on_resize(self) -> None:
        if self.following:  # shorter or taller: the live row stays in view
            self.call_after_refresh(self._to_live)

    def page_back(self) -> None:
        """PgUp: older rows; the table stops following the live row."""
        self.following = False
        self.scroll_page_up(animate=False)

    def page_on(self) -> None:
        """PgDn: newer rows; at the end the table follows the live row again."""
        self.scroll_page_down(animate=False)
        self.call_after_refresh(self._at_end)

    def on_mouse_scroll_up(self) -> None:
        self.following = False

    def on_mouse_scroll_down(self) -> None:
        self.call_after_refresh(self._at_end)

    def _at_end(self) -> None:
        if self.scroll_y >= self.max_scroll_y:
            self.following = True

    # -- rows out of view: said in words ------------------------------------------------
    def render_line(self, y: int) -> Strip:
        strip = super().render_line(y)
        if y != 0 or not self.show_header:
            return strip
        mark = self.scroll_mark()
        width = strip.cell_length
        for text in (f" {mark}", " " + mark.split()[0]) if mark else ():  # the words, else the arrows alone
            n = len(text)
            tail = strip.crop(width - n, width)
            if width > n and not tail.text.strip():  # over the header's blank end only, never a label
                base = next((seg.style for seg in tail if seg.style is not None), None) or Style()
                return Strip.join([strip.crop(0, width - n), Strip([Segment(text, base + Style(dim=True, bold=False))])])
        return strip

    def scroll_mark(self) -> str | None:
        """What the header's right end says of rows out of view: `↑ more` (scrolled back from
        the top), `↓ more` (newer rows below: the table is not following), `↑↓ more`, or None."""
        above, below = self.scroll_y > 0, self.scroll_y < self.max_scroll_y
        if not (above or below):
            return None
        return f"{'↑' if above else ''}{'↓' if below else ''} more"

    @staticmethod
    def _styled(cells: tuple[str, ...], live: bool, key: str) -> tuple[Text, ...]:
        style = LIVE_STYLE if live else (PAUSE_STYLE if key.startswith("p") else "")
        return tuple(Text(c, style=style) for c in cells)

    def live_row(self) -> int | None:
        """The index of the highlighted row (tests)."""
        for i, k in enumerate(self._keys):
            if self._cells[k][-1:] == ("*",):
                return i
        return None
