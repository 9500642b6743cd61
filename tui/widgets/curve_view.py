"""The live saturation curve (key `g`): output tok/s and p99 TTFT against concurrency for the
steps finished so far, the knee marked (the session's own verdict, Snapshot.knee: summary.json's,
with its preset's plateau_gain and its search), and an earlier session overlaid (`--compare DIR`).

Drawn with plotext (tui/plots.py) into the widget's size; redrawn only when the finished
steps, the break, or the widget's size change, so a snapshot four times a second costs a
comparison of a few numbers.
"""

from __future__ import annotations

import textwrap

from rich.text import Text
from textual.widgets import Static

TYPE_CHECKING = False
if TYPE_CHECKING:
    from textual import events

from ...engine.api import Snapshot
from ...engine.report.api import SessionSummary, session_from_steps, workload_warning_first
from ..plots import render_curves

LIVE_LABEL = "this session"
WAITING = "no finished step yet: the curve grows a point each time a concurrency is held long enough to be a step"


class CurveView(Static):
    DEFAULT_CSS = """
    CurveView {
        height: 1fr;
        width: 1fr;
    }
    """

    def __init__(self, compare: SessionSummary | None = None, *, id: str = "curve", label: str = LIVE_LABEL) -> None:
        super().__init__("", id=id)
        self.compare = compare
        self.label = label
        self._snap: Snapshot | None = None
        self._key: tuple | None = None
        self.renders = 0  # how many times the plot was drawn (tests check show() skips repeats)

    # -- input -----------------------------------------------------------------------------
    def show(self, snap: Snapshot) -> None:
        """Take the latest snapshot; redraw only when what the curve shows changed."""
        self._snap = snap
        self._refresh_plot()

    def on_resize(self, event: events.Resize | None = None) -> None:
        self._refresh_plot()

    # -- drawing ---------------------------------------------------------------------------
    @staticmethod
    def _steps_key(snap: Snapshot | None) -> tuple:
        if snap is None:
            return ()
        steps = tuple(
            (s.index, s.concurrency, s.phase, s.output_throughput, s.p99_ttft_ms, repr(s.workload)) for s in snap.steps
        )
        b = snap.break_result
        brk = None if b is None else (b.reason, b.concurrency, b.last_good_concurrency)
        return steps, brk, snap.knee

    def _sessions(self) -> list[SessionSummary]:
        snap = self._snap
        live = session_from_steps(
            self.label,
            snap.steps if snap is not None else (),
            snap.break_result if snap is not None else None,
            knee=snap.knee if snap is not None else None,  # the session's verdict (its search, its plateau_gain), not one of our own
        )
        out = [live]
        if self.compare is not None:
            cmp_label = self.compare.label
            if cmp_label == live.label:
                cmp_label += " (earlier)"
            from dataclasses import replace

            out.append(replace(self.compare, label=cmp_label))
        return out

    def _refresh_plot(self) -> None:
        w, h = self.content_size.width, self.content_size.height
        if w <= 0 or h <= 0:
            return
        key = (self._steps_key(self._snap), w, h)
        if key == self._key:
            return
        self._key = key
        self.update(self.render_text(w, h))
        self.renders += 1

    def render_text(self, width: int, height: int) -> Text:
        """The curve for the current snapshot at width x height, as rich Text; over it, when
        the earlier session ran another workload than this one, the warning that says so
        (engine/report/comparable.py, as `redline report A B` prints it), WARNING_LINES at most."""
        sessions = self._sessions()
        if not any(s.steps for s in sessions):
            return Text(WAITING, style="dim")
        warning = workload_warning_first(sessions) if sessions[0].steps and len(sessions) > 1 else None
        lines = _wrapped(f"⚠ {warning}", width) if warning else []
        out = Text("\n".join(lines) + "\n", style="bold yellow", no_wrap=True, overflow="crop") if lines else Text()
        out.append_text(Text.from_ansi(render_curves(sessions, width, height - len(lines), color=True), no_wrap=True, overflow="crop"))
        return out


WARNING_LINES = 2  # the not-comparable warning's most lines over the curve


def _wrapped(text: str, width: int) -> list[str]:
    """`text` in at most WARNING_LINES lines of `width`, the last ending in … when cut."""
    lines = textwrap.wrap(text, max(width, 20))
    if len(lines) > WARNING_LINES:
        lines = lines[:WARNING_LINES]
        lines[-1] = lines[-1][: max(width, 20) - 1] + "…"
    return lines
