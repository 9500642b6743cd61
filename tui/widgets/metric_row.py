"""One metric: name, sparkline of its per-second history, current value and scale.

The sparkline draws one column per second, the newest on the right, scaled from 0 to the
largest value shown; a second with no value (no request finished, nothing measured) is a
blank column, and a metric with no value yet is a blank row: an empty row never looks like
a full one. The row prints the current value and the top of the scale (`↑`) beside it:
bars alone say nothing of magnitude.

A second whose timeline row is flagged (redline's own timings were suspect: the loop was
held, its CPU saturated; or the row covers a held loop's longer interval) does not set the
scale: one outlier after a stall would flatten every other column for minutes. It is drawn
full height when above the scale. Only when every second shown is flagged do they set it.
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


def spark_top(values: Sequence[float | None], flagged: Sequence[bool] = ()) -> float | None:
    """The top of the scale: the largest value of an unflagged second (of any second when
    all are flagged); None when there is no value."""
    flags = list(flagged)[-len(values):] if values else []
    flags = [False] * (len(values) - len(flags)) + flags
    known = [v for v, f in zip(values, flags, strict=False) if v is not None and not f]
    if not known:
        known = [v for v in values if v is not None]
    return max(known) if known else None


def spark_text(values: Sequence[float | None], width: int, flagged: Sequence[bool] = ()) -> str:
    """The last `width` values as bars, right-aligned; None is a blank column; 0 the lowest
    bar; the top of the scale (spark_top: flagged seconds left out) the highest."""
    if width <= 0:
        return ""
    shown = list(values)[-width:]
    top = spark_top(shown, list(flagged)[-len(shown):] if shown else []) or 0.0
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
    flagged: tuple[bool, ...] = ()  # set before data (its change redraws)

    def render(self) -> Text:
        return Text(spark_text(self.data, self.size.width, self.flagged), no_wrap=True)


class MetricRow(Horizontal):
    def __init__(self, title: str, fmt: Callable[[float | None], str], *, id: str) -> None:
        super().__init__(id=id, classes="metric")
        self.title = title
        self.fmt = fmt
        # its own widgets, kept (show runs every refresh: no query of the DOM for them)
        self._spark: Spark | None = None
        self._value: Label | None = None
        self._value_text = "-"

    def compose(self) -> ComposeResult:
        self._spark = Spark(classes="metric-spark")
        self._value = Label(self._value_text, classes="metric-value")
        yield Label(self.title, classes="metric-title")
        yield self._spark
        yield self._value

    def show(self, history: Sequence[float | None], current: float | None, flagged: Sequence[bool] = (), bound: str = "") -> None:
        """`bound`: put in front of the current value when it is a lower bound ("≥")."""
        spark = self._spark
        if spark is None:  # not composed yet
            return
        flags = tuple(flagged)
        if flags != spark.flagged:
            spark.flagged = flags
            spark.refresh()
        spark.data = tuple(history)
        n = spark.size.width or len(history)
        shown = list(history)[-n:]
        top = spark_top(shown, list(flags)[-len(shown):] if shown else [])  # the scale of what is drawn
        value = self.fmt(current)
        if bound and current is not None:
            value = bound + value
        scale = f" ↑{self.fmt(top)}" if top is not None else ""
        text = f"{value}{scale}"
        if text != self._value_text:  # an update lays the row out again: only when it changed
            self._value_text = text
            assert self._value is not None
            self._value.update(text)
