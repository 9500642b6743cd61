"""One metric: name, sparkline of its per-second history, current value and scale.

Textual's Sparkline scales between the history's min and max, so the row prints the current
value and the top of the scale beside it: the bars alone say nothing of magnitude.
"""

from __future__ import annotations

from typing import Callable, Sequence

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Label, Sparkline


class MetricRow(Horizontal):
    def __init__(self, title: str, fmt: Callable[[float | None], str], *, id: str) -> None:
        super().__init__(id=id, classes="metric")
        self.title = title
        self.fmt = fmt

    def compose(self) -> ComposeResult:
        yield Label(self.title, classes="metric-title")
        yield Sparkline([], summary_function=max, classes="metric-spark")
        yield Label("-", classes="metric-value")

    def show(self, history: Sequence[float | None], current: float | None) -> None:
        data = [v for v in history if v is not None]
        self.query_one(Sparkline).data = data or [0.0]
        top = max(data) if data else None
        value = self.fmt(current)
        scale = f" ↑{self.fmt(top)}" if top is not None else ""
        self.query_one(".metric-value", Label).update(f"{value}{scale}")
