"""Worker health (`--workers N`, `--ray ADDRESS`): one line, or a row per worker.

At 80x24 one summary line (the step table and the log keep their room):

    2 workers · CPU max 61% (w1) · lag p99 max 2.1 ms (w0) · 1 DEAD: w1

Where there is room (a taller terminal, or from 150 columns under the GPU panel) a title line
and a row per worker:

    worker  node             C  requests   tok/s    lag p99   CPU
    w0      gpu-a            32      1234    5123     1.2 ms   41%
    w1      gpu-b             -       611    DEAD          -     -

The screen says how many lines the block may take (body.py `BodyParts.workers_lines`, from
what the other blocks leave; block_lines below is the rule): the rows when they fit and leave the step table
and the log (or, wide, the curve) their room, else the summary line, else nothing (targets
have priority at 80x24; a dead worker is still a warning in the header and the log). `?`
lists every worker with its node and share.

Every figure is the Snapshot's (engine/load/worker_pool.py WorkerPool.summary): the share of C (rate
mode: of the in-flight cap) the worker holds now, and its requests, tok/s, lag p99 and CPU
since the session started. A dead worker's share went to the others: `-`.
"""

from __future__ import annotations

from rich.cells import cell_len
from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from ...engine.api import Snapshot

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
from .numbers import ms, num, rate
from .targets_panel import GONE_STYLE, cut_middle

DEAD_STYLE = GONE_STYLE  # the header's SERVER GONE style, a target's GONE
MAX_ROWS = 8  # rows at most; the rest are `+N more` on the title line
NAME_W = 8  # "worker" and its gap
NODE_MIN, NODE_MAX = 8, 24
KEEP_NARROW = 12  # rows only if the step table and the log keep this many lines
KEEP_WIDE = 12  # from 150 columns: the saturation curve's min-height (redline.tcss #side-curve)
MIN_NARROW = 6  # the summary line only if they keep their min-heights (3 + 3, redline.tcss)

# (title, width) after the name and node columns; right-aligned
COLUMNS = (("C", 5), ("requests", 10), ("tok/s", 8), ("lag p99", 11), ("CPU", 6))


def block_lines(n: int, spare: int, wide: bool) -> int:
    """How many lines the block takes for n workers when `spare` lines are left in its column
    after the panels, the targets and the GPUs: a title and the rows (as many as fit, at least
    two, `+N more` for the rest), else the summary line, else 0."""
    if n <= 0:
        return 0
    keep = KEEP_WIDE if wide else KEEP_NARROW
    rows = min(n, MAX_ROWS, spare - keep - 1)
    if rows >= min(n, 2):
        return 1 + rows
    return 1 if spare - 1 >= (KEEP_WIDE if wide else MIN_NARROW) else 0


def _name(w: dict) -> str:
    return f"w{w.get('worker', '?')}"


def _nodes(workers: Iterable[dict]) -> list[str]:
    seen: list[str] = []
    for w in workers:
        node = str(w.get("node") or "")
        if node and node not in seen:
            seen.append(node)
    return seen


def summary_text(workers: tuple[dict, ...] | list[dict], width: int) -> Text:
    """The one-line form: how many, on how many nodes, the worst CPU and lag p99 of the live
    ones (and whose), the dead ones by name in the error style; parts dropped to fit."""
    alive = [w for w in workers if w.get("alive", True)]
    dead = [w for w in workers if not w.get("alive", True)]
    nodes = _nodes(workers)
    head = f"{len(workers)} workers" + (f" on {len(nodes)} nodes" if len(nodes) > 1 else "")
    cpu = max((w for w in alive if w.get("cpu_pct") is not None), key=lambda w: w["cpu_pct"], default=None)
    lag = max((w for w in alive if w.get("lag_p99_ms") is not None), key=lambda w: w["lag_p99_ms"], default=None)

    def build(tags: bool, long_lag: bool, dead_names: bool) -> Text:
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append(head, style="bold")
        if cpu is not None:
            t.append(f" · CPU max {cpu['cpu_pct']:.0f}%" + (f" ({_name(cpu)})" if tags else ""))
        if lag is not None:
            t.append(f" · {'lag p99 max' if long_lag else 'lag p99'} {ms(lag['lag_p99_ms'])}" + (f" ({_name(lag)})" if tags else ""))
        if dead:
            t.append(" · ")
            t.append(f"{len(dead)} DEAD" + (": " + " ".join(_name(w) for w in dead) if dead_names else ""), style=DEAD_STYLE)
        return t

    cands = [build(True, True, True), build(False, True, True), build(False, False, True), build(False, False, False)]
    for c in cands:
        if c.cell_len <= width:
            return c
    return cands[-1]  # cut at the edge by the widget (ellipsis)


def rows_text(workers: tuple[dict, ...] | list[dict], width: int, max_rows: int, mode: str = "concurrency") -> Text:
    """The title line (`+N more` at its end when some are not listed) and a row per worker."""
    t = Text(no_wrap=True, overflow="ellipsis")
    if not workers:
        return t
    figures = sum(w for _, w in COLUMNS)
    nodes = [str(w.get("node") or "-") for w in workers]
    node_w = max(NODE_MIN, min(NODE_MAX, max(cell_len(n) for n in nodes) + 1, width - NAME_W - figures - 1))
    cols = ((("cap" if mode != "concurrency" else "C"), COLUMNS[0][1]),) + COLUMNS[1:]
    shown = list(zip(workers, nodes, strict=False))[: max(max_rows, 0)]
    hidden = workers[len(shown):]
    t.append("worker".ljust(NAME_W) + "node".ljust(node_w) + "".join(h.rjust(w) for h, w in cols), style="dim")
    if hidden:
        dead = sum(1 for w in hidden if not w.get("alive", True))
        t.append(f"  +{len(hidden)} more", style="bold")
        if dead:
            t.append(f" ({dead} DEAD)", style="bold red")
    for w, node in shown:
        t.append("\n")
        t.append_text(_row(w, cut_middle(node, node_w - 1), node_w))
    return t


def _row(w: dict, node: str, node_w: int) -> Text:
    dead = not w.get("alive", True)
    r = Text()
    r.append(_name(w).ljust(NAME_W), style="bold red" if dead else "bold")
    r.append(node.ljust(node_w))
    # a dead worker's share went to the others; its lag and CPU stopped with it
    cells = (
        ("-" if dead else num(w.get("share")), ""),
        (num(w.get("requests")), ""),
        ("DEAD", DEAD_STYLE) if dead else (rate(w.get("output_tok_s")), ""),
        ("-" if dead else ms(w.get("lag_p99_ms")), ""),
        ("-" if dead or w.get("cpu_pct") is None else f"{w['cpu_pct']:.0f}%", ""),
    )
    for (text, style), (_, width) in zip(cells, COLUMNS, strict=False):
        r.append(" " * max(width - cell_len(text), 1))
        r.append(text, style=style)
    return r


def workers_text(workers: tuple[dict, ...] | list[dict], width: int, lines: int, mode: str = "concurrency") -> Text:
    """The block in `lines` lines (block_lines): the summary line with one, the title and
    rows with more, nothing with none."""
    if not workers or lines <= 0:
        return Text()
    if lines == 1:
        return summary_text(workers, width)
    return rows_text(workers, width, lines - 1, mode)


class WorkersPanel(Static):
    """The per-worker block; shown (the app's `-workers` class, redline.tcss) with workers and
    room for at least its summary line; `lines` is set by the app before `snapshot`."""

    snapshot: reactive[Snapshot | None] = reactive(None, layout=True)
    lines: reactive[int] = reactive(1, layout=True)

    def render(self) -> Text:
        s = self.snapshot
        if s is None or not s.workers:
            return Text()
        width = max(self.content_size.width or self.size.width, 40)
        return workers_text(s.workers, width, self.lines, s.mode)
