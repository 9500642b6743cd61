"""The main screen under the header: the live panels, the targets, the GPUs, the workers and
(wide terminals) the side curve on the left; the step table and the log on the right; the
full-screen curve (`g`) after them.

`redline` draws its first frame without them (issue 26): the header says "[STARTING] C=8"
and the footer lists the keys while these widgets, their imports (the step table is a
DataTable, the curves plotext's) and their styles wait for the next frame, a few tenths of a
second of start-up on a busy machine. The live screen (live_screen.py) composes them at once
when it is not asked to wait (tests, pictures): both ways end in the same screen. Once they
are up, `BodyParts` finds them and draws each snapshot on them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from textual.widget import Widget

from .widgets.curve_view import CurveView
from .widgets.gpu_panel import GpuPanel
from .widgets.live_panels import LivePanels
from .widgets.log_view import EventLog
from .widgets.step_table import StepTable
from .widgets.targets_panel import TargetsPanel
from .widgets.workers_panel import WorkersPanel, block_lines

if TYPE_CHECKING:
    from textual.app import App
    from textual.screen import Screen

    from ..engine.api import Snapshot
    from ..engine.report.api import SessionSummary

__all__ = ["BodyParts", "CurveView", "EventLog", "GpuPanel", "LivePanels", "StepTable", "TargetsPanel", "WorkersPanel",
           "block_lines", "mount_into", "styled_widgets", "widgets"]

CSS_PATH = Path(__file__).resolve().with_name("body.tcss")  # the body's styles (styled_widgets)


def widgets(compare: SessionSummary | None) -> tuple[list[Widget], list[Widget], list[Widget]]:
    """(the left column's, the right column's, the ones after the body): new widgets."""
    left: list[Widget] = [
        LivePanels(),
        TargetsPanel(id="targets"),  # many targets: a row each (at 80x24 in the GPUs' place)
        GpuPanel(id="gpus"),
        WorkersPanel(id="workers"),  # --workers N: a summary line, rows where there is room
        CurveView(compare, id="side-curve"),  # wide terminals: under the panels
    ]
    right: list[Widget] = [StepTable(), EventLog()]
    return left, right, [CurveView(compare, id="curve")]


def styled_widgets(app: App[object], compare: SessionSummary | None) -> tuple[list[Widget], list[Widget], list[Widget]]:
    """widgets(), their styles (body.tcss) read first: the first frame parses only its own
    (redline.tcss); these come after those and style none of the same nodes."""
    path = str(CSS_PATH)
    if not app.stylesheet.has_source(path):
        app.stylesheet.read(path)
        app.stylesheet.parse()  # now: the rules map the next mount reads is built anew
    return widgets(compare)


async def mount_into(screen: Screen[None], compare: SessionSummary | None) -> None:
    """The body into a screen composed without it (a frame after the header and the footer):
    its columns' widgets and the full-screen curve after it, in one batch."""
    left, right, after = styled_widgets(screen.app, compare)
    with screen.app.batch_update():
        await screen.query_one("#left").mount_all(left)
        await screen.query_one("#right").mount_all(right)
        await screen.mount_all(after, after="#body")


@dataclass
class BodyParts:
    """The body's widgets, found once (they stay for the app's life), not queried from the DOM
    at every refresh; `show` draws a snapshot on them."""

    screen: Screen[None]
    body: Widget
    panels: LivePanels
    targets: TargetsPanel
    gpus: GpuPanel
    workers: WorkersPanel
    steps: StepTable
    log: EventLog
    curves: tuple[CurveView, ...]
    workers_shown: int = 1  # lines the workers block took at the last refresh

    @classmethod
    def of(cls, screen: Screen[None]) -> BodyParts:
        q = screen.query_one
        return cls(screen, body=q("#body"), panels=q(LivePanels), targets=q(TargetsPanel), gpus=q(GpuPanel),
                   workers=q(WorkersPanel), steps=q(StepTable), log=q(EventLog), curves=tuple(screen.query(CurveView)))

    def show(self, snap: Snapshot) -> None:
        """The snapshot on every widget; the app's `-targets` and `-workers` classes
        (redline.tcss, body.tcss) say which blocks show."""
        app = self.screen.app
        self.panels.show(snap)
        app.set_class(bool(snap.targets), "-targets")  # the block shows, the GPUs make room
        self.targets.snapshot = snap
        self.gpus.snapshot = snap
        lines = self.workers_lines(len(snap.workers))
        app.set_class(lines > 0, "-workers")  # shown with workers and room for them
        self.workers.lines = max(lines, 1)
        self.workers.snapshot = snap
        self.steps.show(snap)
        self.log.show(snap.log)
        for curve in self.curves:
            curve.show(snap)

    def workers_lines(self, n: int) -> int:
        """Lines the workers block may take (widgets/workers_panel.py block_lines): what its
        column leaves under the panels, the targets and the GPUs, as laid out at the last
        refresh."""
        if not n:
            return 0
        body = self.body
        if not body.display or body.size.height <= 0:  # `g`: the curve has the screen; keep it as it was
            return self.workers_shown
        spare = body.size.height
        for part in (self.panels, self.targets, self.gpus):
            if part.display:
                spare -= part.outer_size.height
        self.workers_shown = block_lines(n, spare, self.screen.has_class("-wide"))
        return self.workers_shown
