"""Per-GPU power (W and % of limit) and utilisation; client health beside it (the coordinator's;
each worker's is in widgets/workers_panel.py)."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from ...engine.api import Snapshot

TYPE_CHECKING = False
if TYPE_CHECKING:
    from textual.geometry import Size

    from ...engine.api import GpuSample
from .numbers import bar, num

COMPACT_CELL = 16  # "7 ████ 326W 47%"


class GpuPanel(Static):
    snapshot: reactive[Snapshot | None] = reactive(None, layout=True)

    def render(self) -> Text:
        return self.text(self.size.width)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        """The lines at the width being laid out (render() reads the size of the last
        layout: after a resize the panel kept the height of its old width)."""
        return len(self.text(width).plain.split("\n"))

    def text(self, width: int) -> Text:
        s = self.snapshot
        t = Text(no_wrap=True, overflow="ellipsis")
        if s is None:
            return t
        width = max(width, 20)
        compact = len(s.gpus) > 4 and width < 120  # 8 GPUs in two lines at 80 columns
        cells = [self._cell(g, compact) for g in s.gpus]
        per_line = max(1, width // (COMPACT_CELL + 2)) if compact else (1 if len(cells) <= 4 or width < 70 else 2)
        for i, c in enumerate(cells):
            if i:
                t.append("\n" if i % per_line == 0 else "  ")
            t.append_text(c)
        foot: list[Text] = []
        if s.gpus:
            foot.append(Text("GPU W / % of limit" + (" (u = util)" if not compact else ""), style="dim"))
        else:
            foot.append(Text("no GPU telemetry", style="dim"))
        if s.tok_per_joule:
            foot.append(Text(f"{s.tok_per_joule:.2f} tok/J ({1 / s.tok_per_joule:.2f} J/tok)", style="dim"))
        if s.client_cpu_pct is not None:
            # red when the engine flags it; its warning (header) names the cause it measured
            style = "bold red" if s.client_overloaded else "dim"
            foot.append(Text(f"client CPU {s.client_cpu_pct:.0f}% lag {num(s.loop_lag_ms)} ms", style=style))
        if cells:
            t.append("\n")
        t.append_text(Text("  ").join(foot))
        return t

    @staticmethod
    def _cell(g: GpuSample, compact: bool) -> Text:
        pct = g.power_pct
        c = Text()
        style = "green" if (pct or 0) > 60 else "yellow"
        if compact:
            c.append(f"{g.index} ", style="bold")
            c.append(bar(None if pct is None else pct / 100, 4), style=style)
            c.append(f" {num(g.power_w)}W")
            if pct is not None:
                c.append(f" {pct:.0f}%")
            return c
        c.append(f"GPU{g.index} ", style="bold")
        c.append(bar(None if pct is None else pct / 100, 8), style=style)
        c.append(f" {num(g.power_w)} W")
        if pct is not None:
            c.append(f" {pct:.0f}%")
        if g.util_pct is not None:
            c.append(f" u{g.util_pct:.0f}%", style="dim")
        return c
