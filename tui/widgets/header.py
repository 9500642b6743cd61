"""Top lines: what is measured, the state and the load, then what needs attention.

    http://127.0.0.1:30000  redline-sim-70b  sglang/chat  max_…   0:01:10  done 83 fail 0
    [RUNNING] C=64  in-flight 52, 12 backing off  server run 52 queue 0
    ✗ session log: [Errno 28] No space left on device; 120 rows lost
    ⚠ server cap: client holds 32 in flight, server runs 8, queue 24 — pp micro-batch
      cap 8 (max_running_requests 64 // pp 8)

Line 1 names the target (cut with … when long; `?` shows it whole), or with several how
many (`3 targets (1 gone)`; each has its row in widgets/targets_panel.py), and, on the right, how
long the session has run and how many requests ended. With several targets line 2 leaves
out the server's running / queued: each target's are on its row. Line 2 starts with the state in
brackets, so it reads without colour (NO_COLOR). Warnings wrap at word boundaries, two lines
each at most; the header never takes more than MAX_LINES.
"""

from __future__ import annotations

from rich.cells import cell_len
from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from ...engine.api import Snapshot
from .numbers import duration, num

MAX_LINES = 5
WARNING_LINES = 2  # a warning wraps to at most this many lines
# line 1's right end as wide as it may grow in a session (0:00:00  done 00000 fail 000): the
# target is cut at a place that stays as the clock and the counts move
RIGHT_RESERVE = len("0:00:00  done 00000 fail 000 ")

STATE_STYLE = {
    "running": "bold green",
    "paused": "bold yellow",
    "probe": "bold magenta",
    "preset": "bold cyan",
    "server gone": "bold white on red",
    "server not ready": "bold white on red",
    "stopped": "bold red",
    "starting": "dim",
}


def state_label(state: str) -> Text:
    """`[RUNNING]`: the brackets keep the state apart from the numbers without colour."""
    t = Text()
    t.append(f"[{state.upper()}]", style=STATE_STYLE.get(state, "bold"))
    return t


def wrap_words(text: str, width: int, lines: int, indent: str = "  ") -> list[str]:
    """`text` wrapped at spaces into at most `lines` lines of `width` cells; continuation
    lines start with `indent`; what does not fit ends in …. A word wider than a line is cut."""
    width = max(width, 8)
    out: list[str] = []
    cur = ""
    for w in text.split():
        cand = f"{cur} {w}" if cur else (indent if out else "") + w
        if cell_len(cand) <= width:
            cur = cand
            continue
        if cur:
            if len(out) + 1 == lines:
                out.append(_ellipsis(cur, width))
                return out
            out.append(cur)
        cur = _cut(indent + w if out else w, width)
    if cur:
        out.append(cur)
    return out


def _cut(s: str, width: int) -> str:
    while cell_len(s) > width:
        s = s[:-1]
    return s


def _ellipsis(s: str, width: int) -> str:
    return _cut(s, width - 1) + "…"


def _fit(t: Text, width: int) -> Text:
    if t.cell_len > width:
        t.truncate(max(width - 1, 0))
        t.append("…")
    return t


class StatusHeader(Static):
    snapshot: reactive[Snapshot | None] = reactive(None, layout=True)  # warnings add lines
    _right_width = RIGHT_RESERVE  # the widest line 1's right end was: the cut never moves back

    def render(self) -> Text:
        s = self.snapshot
        if s is None:
            return Text("redline: starting…")
        width = max(self.content_size.width or self.size.width, 40)
        lines = [self._target_line(s, width), _fit(self._load_line(s), width)]
        blocks: list[list[Text]] = []  # each item whole, or not at all
        if s.preset:
            blocks.append([_fit(Text(s.preset, style="cyan"), width)])
        problems = list(s.warnings)
        if s.session_error and not any(w.startswith("session log:") for w in problems):
            problems.insert(0, f"session log: {s.session_error}")
        problems.sort(key=lambda w: not w.startswith("session log:"))  # the log first: data is lost
        for w in problems:
            bad = w.startswith("session log:")
            mark, style = ("✗ ", "bold red") if bad else ("⚠ ", "bold yellow")
            blocks.append([Text(row, style=style) for row in wrap_words(mark + w, width, WARNING_LINES)])
        room = MAX_LINES - len(lines)
        extra: list[Text] = []
        for i, block in enumerate(blocks):
            rest = len(blocks) - i - 1
            if len(extra) + len(block) + (1 if rest else 0) > room:
                more = len(blocks) - i
                extra.append(_fit(Text(f"⚠ {more} more warning{'s' if more > 1 else ''}: the log has them all", style="bold yellow"), width))
                break
            extra += block
        return Text("\n").join(lines + extra)

    def _target_line(self, s: Snapshot, width: int) -> Text:
        right = Text()
        right.append(duration(s.elapsed_s))
        right.append(f"  done {s.completed} ", style="dim")
        right.append(f"fail {s.failed}", style="bold red" if s.failed else "dim")
        left = Text()
        if s.targets:  # many targets: how many (the block under the panels has a row each; `?` lists them)
            gone = sum(1 for x in s.targets if x.get("gone"))
            left.append(f"{len(s.targets)} targets", style="bold")
            if gone:
                left.append(f" ({gone} gone)", style="bold red")
        else:
            left.append(s.url, style="bold")
        left.append(f"  {s.model or '?'}", style="cyan")
        if s.server_kind or s.api:
            left.append(f"  {s.server_kind}/{s.api}", style="dim")
        if s.caps:
            left.append(f"  {s.caps}", style="yellow")
        self._right_width = max(self._right_width, right.cell_len)
        room = width - self._right_width - 2  # the cut stays put while the clock and counts grow
        _fit(left, room)
        left.append(" " * (width - left.cell_len - right.cell_len))
        left.append_text(right)
        return left

    @staticmethod
    def _load_line(s: Snapshot) -> Text:
        t = state_label(s.state)
        t.append(" ")
        if s.mode in ("rate", "trace"):
            t.append_text(load_shape(s))
            t.append(f"  in-flight {s.in_flight}")
            # the in-flight cap: sends due beyond it wait (the rate line counts them)
            full = s.max_concurrency > 0 and (s.in_flight >= s.max_concurrency or s.held_at_cap > 0)
            t.append(f" (cap {s.max_concurrency})", style="bold yellow" if full else "dim")
        else:
            t.append(f"C={s.target_c}", style="bold reverse")
            if s.turns > 1:
                t.append(f" sessions of {s.turns} turns")
            if s.previous_c is not None:
                t.append(f" (was C={s.previous_c}, r returns)", style="dim")
            t.append(f"  in-flight {s.in_flight}")
        if s.backing_off:
            t.append(f", {s.backing_off} backing off", style="bold yellow")
        if s.server is not None and not s.targets:  # many targets: each its own, in their block
            t.append("  server run ")
            t.append(num(s.server.running), style="bold")
            t.append(" queue ")
            t.append(num(s.server.queued), style="bold" if not s.server.queued else "bold yellow")
        return t


def rate_text(r: float | None) -> str:
    """A request rate as the operator typed it: 12.5, 0.25, 1000 (3 significant digits
    at most below 1000, whole numbers above)."""
    if r is None:
        return "-"
    if r >= 1000:
        return f"{r:.0f}"
    return f"{r:.3g}"


def load_shape(s: Snapshot) -> Text:
    """The open-loop target: `R=12.5/s poisson`, or a trace's `trace ×2`."""
    t = Text()
    if s.mode == "trace":
        t.append(f"trace ×{rate_text(s.target_rate)}", style="bold reverse")
        return t
    t.append(f"R={rate_text(s.target_rate)}/s", style="bold reverse")
    if s.arrival:
        t.append(f" {s.arrival}")
    return t
