"""The live panels: a sparkline row per metric, fed from per-second timeline rows.

One column is one engine second: columns are keyed by the engine's second index (the
snapshot's `second`), never by when the screen drew. A snapshot carries its last few rows
(`recent`), so a screen that was held past a second still draws each of them; seconds
older than those are blank columns, so the columns stay one a second.
"""

from __future__ import annotations

from collections import deque

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Label

from ...engine.api import BOUND, TIMELINE_INTERVAL_S, Snapshot
from .metric_row import MetricRow
from .numbers import ms, num, rate

HISTORY_POINTS = 120  # seconds of sparkline

# (widget id, title, timeline column, live value from the snapshot, formatter)
ROWS = (
    ("tok", "out tok/s", "output_tok_s", lambda s: s.output_tok_s, rate),
    ("good", "goodput", "goodput_tok_s", lambda s: s.goodput_tok_s, rate),  # only with SLOs
    ("ttft50", "TTFT p50", "ttft_p50_ms", lambda s: s.ttft_ms.get("p50"), ms),
    ("ttft99", "TTFT p99", "ttft_p99_ms", lambda s: s.ttft_ms.get("p99"), ms),
    ("itl50", "ITL p50", "itl_p50_ms", lambda s: s.itl_ms.get("p50"), ms),
    ("itl99", "ITL p99", "itl_p99_ms", lambda s: s.itl_ms.get("p99"), ms),
    ("e2e50", "E2E p50", "e2e_p50_ms", lambda s: s.e2e_ms.get("p50"), ms),
    ("e2e99", "E2E p99", "e2e_p99_ms", lambda s: s.e2e_ms.get("p99"), ms),
    ("err", "errors/s", "errors", lambda s: s.errors_s, rate),
)  # the server's running / queued counts are in the header, beside C and in-flight
# rows whose live value may be a lower bound: TTFT counts the requests still waiting for a
# first token at their age (a queue behind the load reads "≥75 s", never "-")
BOUNDS = {"ttft50": "p50", "ttft99": "p99"}


class LivePanels(Vertical):
    def __init__(self, *, id: str = "panels") -> None:
        super().__init__(id=id)
        self._history: dict[str, deque[float | None]] = {col: deque(maxlen=HISTORY_POINTS) for _, _, col, _, _ in ROWS}
        self._flagged: deque[bool] = deque(maxlen=HISTORY_POINTS)  # per second: row_flagged
        self._second = -1
        self.seconds: list[int] = []  # the engine second of each column taken (tests; the last HISTORY_POINTS)
        self._rows: dict[str, MetricRow] = {}  # compose
        self._lane: Label | None = None
        self._srv: Label | None = None

    def compose(self) -> ComposeResult:
        # the widgets are kept (show runs every refresh: no query of the DOM for them)
        self._rows = {wid: MetricRow(title, fmt, id=f"m-{wid}") for wid, title, _, _, fmt in ROWS}
        self._lane = Label("", id="lane-line")  # only while the probe lane runs
        self._srv = Label("", id="server-line")  # the server's own view, when it says more than its load
        yield from self._rows.values()
        yield self._lane
        yield self._srv

    def show(self, snap: Snapshot) -> None:
        if snap.second != self._second and snap.row:
            self._take(snap)
        if not self._rows:  # not composed yet: the columns are taken, nothing to draw them on
            return
        flagged = tuple(self._flagged)
        for wid, _, col, live, _ in ROWS:
            row = self._rows[wid]
            if wid == "good":
                row.display = snap.goodput_req_s is not None  # with SLOs (its tok/s shows "-" until a request ended)
            q = BOUNDS.get(wid)
            row.show(self._history[col], live(snap), flagged, BOUND if q is not None and (getattr(snap, "ttft_bound", None) or {}).get(q) else "")
        lane, srv = self._lane, self._srv
        assert lane is not None and srv is not None  # (composed)
        lane.display = snap.lane_on
        if snap.lane_on:
            lane.update(lane_text(snap))
        text = server_text(snap)
        srv.display = bool(text)
        if text:
            srv.update(text)


    def _take(self, snap: Snapshot) -> None:
        """A column for each engine second since the last one taken."""
        rows = tuple(getattr(snap, "recent", ()) or ()) or (snap.row,)
        first = snap.second - len(rows) + 1
        if snap.second < self._second:  # another engine (cannot happen live): start again
            self._second = -1
        if self._second >= 0:
            for sec in range(max(self._second + 1, first - HISTORY_POINTS), first):
                self._column(sec, {})  # older than the snapshot's rows: blank, one a second
        for i, row in enumerate(rows):
            if first + i > self._second:
                self._column(first + i, row)
        self._second = snap.second

    def _column(self, sec: int, row: dict) -> None:
        for _, _, col, _, _ in ROWS:
            self._history[col].append(row.get(col))
        self._flagged.append(row_flagged(row))
        self.seconds.append(sec)
        del self.seconds[:-HISTORY_POINTS]


def row_flagged(row: dict) -> bool:
    """A second whose figures are suspect (timeline.ndjson `client_overloaded`: the loop was
    held, redline's CPU saturated, the machine busy), or that covers a held loop's longer
    interval: it does not set a sparkline's scale (widgets/metric_row.py)."""
    return bool(row.get("client_overloaded")) or (row.get("interval_s") or TIMELINE_INTERVAL_S) > 1.5 * TIMELINE_INTERVAL_S


def lane_text(snap: Snapshot) -> str:
    """The probe lane beside the load: a lone request's p50s and how much slower the load's are."""

    def part(name: str, lane_v: float | None, load_v: float | None, bound: bool = False) -> str:
        if lane_v is None:
            return f"{name} -"
        if bound:  # its request still waits: at least its age, no ratio to draw from a bound
            return f"{name} {BOUND}{ms(lane_v)}"
        ratio = f" (load ×{load_v / lane_v:.1f})" if load_v is not None and lane_v > 0 else ""
        return f"{name} {ms(lane_v)}{ratio}"

    return "lane C=1  " + "  ".join((part("TTFT", snap.lane_ttft_ms, snap.ttft_ms.get("p50"), getattr(snap, "lane_ttft_bound", False)),
                                    part("ITL", snap.lane_itl_ms, snap.itl_ms.get("p50"))))


def server_text(snap: Snapshot) -> str:
    """The server's own view beside the client's (engine/run/server_ops.py, docs/inside-the-server.md): its generation tok/s and KV use, with what only it knows when it says so:
    preemptions in the last 10 s, speculative decoding's accept length, and its prefix-cache hit
    rate beside the share of the live step's prompt tokens it reported cached. "" when it says
    none of the latter (its load alone is in the header). `cached` reads `…` while none of the
    live step's requests has ended yet on a server that said it before (a step's share starts
    anew with it: it read `0 %`, then `-` at each new step), `-` only when it never said."""
    s = snap.server
    step = snap.current_step
    cached = step.cached_prompt_ratio if step is not None else None
    said = cached is not None or any(st.cached_prompt_ratio is not None for st in snap.steps)
    if s is None and not said:
        return ""
    extra = []
    if s is not None and s.preemptions_recent:
        extra.append(f"preempted {num(s.preemptions_recent)}/10s")
    if s is not None and s.spec_accept_length is not None:
        acc = f" ({100 * s.spec_acceptance_rate:.0f} %)" if s.spec_acceptance_rate is not None else ""
        extra.append(f"spec {s.spec_accept_length:.2f} tok/step{acc}")
    hit = s.prefix_hit_rate if s is not None else None
    if hit is not None or said:
        shown = f"{100 * cached:.0f} %" if cached is not None else ("…" if said else "-")
        extra.append(f"cache hit {'-' if hit is None else f'{100 * hit:.0f} %'}, cached {shown}")
    if not extra:
        return ""
    load = []
    if s is not None and s.gen_throughput is not None:
        load.append(f"gen {rate(s.gen_throughput)} tok/s")
    if s is not None and s.kv_usage is not None:
        load.append(f"KV {100 * s.kv_usage:.0f} %")
    return "server " + "  ".join(load + extra)
