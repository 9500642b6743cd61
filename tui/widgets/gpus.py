"""Per-GPU power (W and % of limit) and utilisation; client health beside it."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from engine.snapshot import Snapshot

from ..format import bar, num


class GpuPanel(Static):
    snapshot: reactive[Snapshot | None] = reactive(None)

    def render(self) -> Text:
        s = self.snapshot
        t = Text(no_wrap=True, overflow="ellipsis")
        if s is None:
            return t
        if not s.gpus:
            t.append("no GPU telemetry", style="dim")
        cells = []
        for g in s.gpus:
            pct = g.power_pct
            c = Text()
            c.append(f"GPU{g.index} ", style="bold")
            c.append(bar(None if pct is None else pct / 100, 8), style="green" if (pct or 0) > 60 else "yellow")
            c.append(f" {num(g.power_w)} W")
            if pct is not None:
                c.append(f" {pct:.0f}%")
            if g.util_pct is not None:
                c.append(f" u{g.util_pct:.0f}%", style="dim")
            cells.append(c)
        per_line = 1 if len(cells) <= 4 or self.size.width < 70 else 2
        for i, c in enumerate(cells):
            if i:
                t.append("\n" if i % per_line == 0 else "  │ ")
            t.append_text(c)
        if s.tok_per_joule is not None:
            t.append(f"\n{s.tok_per_joule:.2f} tok/J ({1 / s.tok_per_joule:.2f} J/tok)" if s.tok_per_joule else "", style="dim")
        health = Text()
        if s.client_cpu_pct is not None:
            health.append(f"\nclient CPU {s.client_cpu_pct:.0f}%  loop lag {num(s.loop_lag_ms)} ms", style="bold red" if s.client_overloaded else "dim")
            if s.client_overloaded:
                health.append("  OVERLOADED: numbers inflated by redline", style="bold red")
        t.append_text(health)
        return t
