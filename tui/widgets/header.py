"""Top lines: target, model, server caps, C=<n>, in-flight, state, elapsed, warnings."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from redline.engine.snapshot import Snapshot

from ..format import duration, num

STATE_STYLE = {
    "running": "bold green",
    "paused": "bold yellow",
    "probe": "bold magenta",
    "preset": "bold cyan",
    "server gone": "bold white on red",
    "stopped": "bold red",
    "starting": "dim",
}


class StatusHeader(Static):
    snapshot: reactive[Snapshot | None] = reactive(None, layout=True)  # warnings add lines

    def render(self) -> Text:
        s = self.snapshot
        if s is None:
            return Text("redline: starting…")
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append("redline ", style="bold red")
        t.append(s.url, style="bold")
        t.append(f"  {s.model or '?'}", style="cyan")
        t.append(f"  {s.server_kind}/{s.api}", style="dim")
        if s.caps:
            t.append(f"  {s.caps}", style="yellow")
        t.append("\n")
        t.append(f"C={s.target_c}", style="bold reverse")
        if s.previous_c is not None:
            t.append(f" (was C={s.previous_c}, r returns)", style="dim")
        t.append(f"  in-flight {s.in_flight}")
        if s.server is not None:
            t.append("  server run ")
            t.append(num(s.server.running), style="bold")
            t.append(" queue ")
            t.append(num(s.server.queued), style="bold" if not s.server.queued else "bold yellow")
        t.append("  ")
        t.append(f" {s.state.upper()} ", style=STATE_STYLE.get(s.state, "bold"))
        t.append(f"  {duration(s.elapsed_s)}")
        t.append(f"  done {s.completed} fail {s.failed}", style="dim" if not s.failed else "red")
        if s.preset:
            t.append(f"\n{s.preset}", style="cyan")
        for w in s.warnings[-2:]:
            t.append(f"\n⚠ {w}", style="bold yellow")
        return t
