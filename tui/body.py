"""The main screen under the header: the live panels, the targets, the GPUs, the workers and
(wide terminals) the side curve on the left; the step table and the log on the right; the
full-screen curve (`g`) after them.

`redline` draws its first frame without them (issue 26): the header says "[STARTING] C=8"
and the footer lists the keys while these widgets, their imports (the step table is a
DataTable, the curves plotext's) and their styles wait for the next frame, a few tenths of a
second of start-up on a busy machine. app.py composes them at once when it is not asked to
wait (tests, pictures): both ways end in the same screen.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.widget import Widget

from .widgets.curve import CurveView
from .widgets.gpu_panel import GpuPanel
from .widgets.log_view import EventLog
from .widgets.panels import LivePanels
from .widgets.steps import StepTable
from .widgets.target_rows import TargetsPanel
from .widgets.worker_rows import WorkersPanel, block_lines

if TYPE_CHECKING:
    from ..engine.report.api import SessionSummary

__all__ = ["CurveView", "EventLog", "GpuPanel", "LivePanels", "StepTable", "TargetsPanel", "WorkersPanel", "block_lines", "widgets"]


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
