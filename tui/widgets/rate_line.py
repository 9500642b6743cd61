"""The open loop's line, under the header in rate and trace mode (hidden in concurrency mode):

    lag p50 0.4 ms p99 2.1 ms  held 3  dropped or delayed 17  done 12.3 req/s
    trace example.jsonl 120/500  lag p50 0.4 ms p99 2.1 ms  done 3.10 req/s

`lag` is the schedule lag (each send's actual minus its intended time, the live window);
`held` the sends waiting now for a free slot under the in-flight cap and `dropped or delayed`
those held back at it this session, both in the warning style and only when above 0 (their
latencies count from the intended send times, so they show in TTFT and E2E too); `done` the
achieved request rate, to read against R. Everything comes from the Snapshot.
"""

from __future__ import annotations

from pathlib import PurePath

from rich.cells import cell_len
from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from ...engine.api import Snapshot
from .numbers import ms, rate

WARN = "bold yellow"


def rate_line(s: Snapshot, width: int = 78) -> Text:
    """The line's text, its parts in order of importance; the last ones are left out whole
    when they do not fit `width`."""
    parts: list[Text] = []
    if s.mode == "trace":
        name = PurePath(str(s.workload.get("trace") or "")).name or "trace"
        head = Text(f"trace {name}", style="bold")
        progress = getattr(s, "trace_progress", None)  # (sent, total) when the engine has it
        if isinstance(progress, (tuple, list)) and len(progress) == 2:
            head.append(f" {progress[0]}/{progress[1]}")
        parts.append(head)
    lag = s.schedule_lag_ms or {}
    parts.append(Text(f"lag p50 {ms(lag.get('p50'))} p99 {ms(lag.get('p99'))}"))
    if s.held_at_cap > 0:
        parts.append(Text(f"held {s.held_at_cap}", style=WARN))
    if s.dropped_or_delayed > 0:
        parts.append(Text(f"dropped or delayed {s.dropped_or_delayed}", style=WARN))
    parts.append(Text(f"done {rate(s.req_s)} req/s", style="dim"))
    out = Text(no_wrap=True, overflow="ellipsis")
    for i, p in enumerate(parts):
        sep = "  " if i else ""
        if i and cell_len(out.plain) + len(sep) + p.cell_len > width:
            break
        out.append(sep)
        out.append_text(p)
    return out


class RateLine(Static):
    snapshot: reactive[Snapshot | None] = reactive(None)

    def render(self) -> Text:
        s = self.snapshot
        if s is None:
            return Text()
        return rate_line(s, max(self.content_size.width or self.size.width, 20))
