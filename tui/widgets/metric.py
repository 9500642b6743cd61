"""One metric: name, sparkline of its per-second history, current value and scale.

The sparkline draws one column per second, the newest on the right, scaled from 0 to the
largest value shown; a second with no value (no request finished, nothing measured) is a
blank column, and a metric with no value yet is a blank row: an empty row never looks like
a full one. The row prints the current value and the top of the scale (`↑`) beside it:
bars alone say nothing of magnitude.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import Label

BARS = "▁▂▃▄▅▆▇█"


def spark_text(values: Sequence[float | None], width: int) -> str:
    """The last `width` values as bars, right-aligned; None is a blank column; 0 the lowest
    bar; the largest value shown the highest."""
    if width <= 0:
        return ""
    shown = list(values)[-width:]
    known = [v for v in shown if v is not None]
    top = max(known, default=0.0)
    cells = []
    for v in shown:
        if v is None:
            cells.append(" ")
        elif top <= 0:
            cells.append(BARS[0])
        else:
            i = math.ceil(max(v, 0.0) / top * len(BARS)) - 1  # a bar as high as v is of the top
            cells.append(BARS[min(max(i, 0), len(BARS) - 1)])
    return " " * (width - len(shown)) + "".join(cells)


class Spark(Widget):
    """A one-line sparkline over a per-second history (see spark_text)."""

    DEFAULT_CSS = """
    Spark {
        height: 1;
    }
    """

    data: reactive[tuple[float | None, ...]] = reactive((), always_update=False)

    def render(self) -> Text:
        return Text(spark_text(self.data, self.size.width), no_wrap=True)


class MetricRow(Horizontal):
    def __init__(self, title: str, fmt: Callable[[float | None], str], *, id: str) -> None:
        super().__init__(id=id, classes="metric")
        self.title = title
        self.fmt = fmt

    def compose(self) -> ComposeResult:
        yield Label(self.title, classes="metric-title")
        yield Spark(classes="metric-spark")
        yield Label("-", classes="metric-value")

    def show(self, history: Sequence[float | None], current: float | None) -> None:
        spark = self.query_one(Spark)
        spark.data = tuple(history)
        shown = list(history)[-spark.size.width :] if spark.size.width else list(history)
        known = [v for v in shown if v is not None]  # the scale of what is drawn
        top = max(known) if known else None
        value = self.fmt(current)
        scale = f" ↑{self.fmt(top)}" if top is not None else ""
        self.query_one(".metric-value", Label).update(f"{value}{scale}")
