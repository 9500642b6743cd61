"""Saturation curves: output tok/s and p99 TTFT against the load (concurrency; the offered
request rate for sessions over rates, never the in-flight cap), one line per session, each
session's knee marked. What the command line and the screen both draw, in a module of its
own (no Textual): in the terminal with plotext (`redline report`: tui/cli/terminal.py, and the
screen's curve view: tui/widgets/curve_view.py), as an image with matplotlib (`--png`, the
optional `png` extra).

The load is drawn on a log2 axis (C = 8, 16, 32, ... equally spaced), ticks at the loads
measured. A lower bound (a p99 TTFT of censored requests, `>=` in the tables) is drawn as the
HTML page draws it: an open marker (BOUND_MARK) on a dotted segment rising from it, joined to
no measured point; a session's line runs through its measured points only. Sessions that mix kinds (C steps, then rate steps) are drawn on the axis of the kind
most of their points have; what a point, the best session and the knee are:
engine/report/compare.py.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from ..engine.report.api import KINDS, SessionSummary, axis_title, knee_load, knee_step

if TYPE_CHECKING:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

PNG_EXTRA_HINT = "pip install 'redline[png]'"

# One color per session, the same order in the terminal (xterm-256 codes) and the PNG
# (matplotlib's tab10), so a report and its image agree.
TERM_COLORS = (33, 208, 34, 160, 135, 37, 178, 244)
PNG_COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:cyan", "tab:olive", "tab:gray")
# Point symbols per session: tell the lines apart without color (piped output, NO_COLOR).
POINT_MARKS = ("o", "x", "+", "#", "%", "@", "&", "=")
KNEE_MARK = "◆"
BOUND_MARK = "○"  # a lower bound: at least this (the HTML page's open circle)
BOUND_RISE = 1.5  # its dotted segment rises to 1.5 times the bound (cut at the plot's top)

MIN_PLOT_W = 30  # below this a side-by-side plot is illegible: stack them instead
MIN_PLOT_H = 7

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class PngUnavailable(RuntimeError):
    """matplotlib (the `png` extra) is not installed."""


# -- shared helpers ------------------------------------------------------------------------

def axis_kind(sessions: Sequence[SessionSummary]) -> str:
    """The kind of load on the x axis: the one most points of all sessions have (C on a tie)."""
    counts = {k: 0 for k in KINDS}
    for s in sessions:
        for key in s.by_load():
            counts[key.kind] += 1
    return max(KINDS, key=lambda k: (counts[k], -KINDS.index(k)))


def _points(s: SessionSummary, metric: str, kind: str = "C") -> list[tuple[float, float]]:
    pts = []
    for key, st in s.by_load().items():
        v = getattr(st, metric)
        if key.kind == kind and v is not None and key.value > 0:
            pts.append((key.value, float(v)))
    return pts


def _bounds(s: SessionSummary, metric: str, kind: str = "C") -> set[float]:
    """The loads whose `metric` is a lower bound (censored requests), not a measured value."""
    return {key.value for key, st in s.by_load().items()
            if key.kind == kind and key.value > 0 and getattr(st, metric) is not None and st.bound(metric)}


def split_bounds(s: SessionSummary, metric: str, kind: str = "C") -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """(measured points, lower bounds) of a session's curve: the line joins the first only."""
    bounds = _bounds(s, metric, kind)
    pts = _points(s, metric, kind)
    return [p for p in pts if p[0] not in bounds], [p for p in pts if p[0] in bounds]


def _knee_value(s: SessionSummary, metric: str, kind: str = "C") -> tuple[float, float | None] | None:
    k = knee_load(s)
    if k is None or k.kind != kind or k.value <= 0:
        return None
    st = knee_step(s)
    v = getattr(st, metric) if st is not None else None
    return k.value, (None if v is None else float(v))


def _knee_text(s: SessionSummary) -> str | None:
    k = knee_load(s)
    return None if k is None else f"knee {k.label}"


def _tick_label(v: float, kind: str) -> str:
    return f"x{v:g}" if kind == "x" else f"{v:g}"


_X_NAME = {"C": "C", "R": "R (req/s)", "x": "trace speed"}


METRICS = (
    ("output_throughput", "output tok/s"),
    ("p99_ttft_ms", "p99 TTFT"),
)


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Round tick values (1, 2, 2.5, 5 x 10^k steps) covering [lo, hi], about n of them."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / max(n - 1, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.floor(lo / step) * step
    ticks = [round(first, 10)]
    while ticks[-1] < hi - step * 1e-9:  # the last tick at or above hi: no point is clipped
        ticks.append(round(first + len(ticks) * step, 10))
    return ticks


def fmt_tick(v: float) -> str:
    """Short tick label: 0, 2.5, 250, 1200, 12k, 1.5M."""
    a = abs(v)
    if a >= 1e6:
        s = f"{v / 1e6:.1f}".rstrip("0").rstrip(".") + "M"
    elif a >= 1e4:
        s = f"{v / 1e3:.1f}".rstrip("0").rstrip(".") + "k"
    elif a >= 10 or float(v).is_integer():
        s = f"{v:.0f}"
    else:
        s = f"{v:.2f}".rstrip("0").rstrip(".")
    return s


def _c_ticks(cs: list[float], canvas_w: int, prefer: Sequence[float] = (), kind: str = "C") -> list[float]:
    """The loads to label on a log2 x axis canvas_w columns wide, no two labels touching:
    the first and the last, then those in prefer (the knees), then powers of two, then the
    rest, each kept if it fits."""
    if len(cs) <= 2:
        return list(cs)
    lo, hi = math.log2(cs[0]), math.log2(cs[-1])
    span = hi - lo or 1.0

    def col(c: float) -> float:
        return (math.log2(c) - lo) / span * (canvas_w - 1)

    def fits(c: float, chosen: list[float]) -> bool:
        return all(abs(col(c) - col(o)) >= (len(_tick_label(c, kind)) + len(_tick_label(o, kind))) / 2 + 1 for o in chosen)

    chosen = [cs[0]]
    if fits(cs[-1], chosen):
        chosen.append(cs[-1])
    order = [c for c in prefer if c in cs] + [c for c in cs if math.log2(c).is_integer()] + list(cs)
    for c in order:
        if c not in chosen and fits(c, chosen):
            chosen.append(c)
    return sorted(chosen)


# -- terminal (plotext) --------------------------------------------------------------------

BOUND_LEGEND = f"{BOUND_MARK} = at least (a lower bound: requests still waiting at the step's close)"


def _legend_lines(sessions: Sequence[SessionSummary], width: int, color: bool, kind: str = "C") -> list[str]:
    """The legend above the plots: symbol, label and knee of each session, packed into lines;
    what the open marker means when a curve has a lower bound."""
    entries = []
    for i, s in enumerate(sessions):
        k = _knee_text(s)
        text = f"{POINT_MARKS[i % len(POINT_MARKS)]}─ {s.label}"
        text += f"  {k}" if k is not None else ("  (no steps)" if not s.steps else "  no knee")
        if len(text) > width:
            text = text[: max(width - 1, 1)] + "…"
        entries.append((text, TERM_COLORS[i % len(TERM_COLORS)]))
    if any(_bounds(s, metric, kind) for s in sessions for metric, _ in METRICS):
        entries.append((BOUND_LEGEND if len(BOUND_LEGEND) <= width else f"{BOUND_MARK} = at least (a lower bound)"[:width], 244))
    lines: list[list[tuple[str, int]]] = [[]]
    used = 0
    for text, col in entries:
        add = len(text) + (3 if lines[-1] else 0)
        if lines[-1] and used + add > width:
            lines.append([])
            used, add = 0, len(text)
        lines[-1].append((text, col))
        used += add
    out = []
    for line in lines:
        if color:
            out.append("   ".join(f"\x1b[38;5;{c}m{t}\x1b[0m" for t, c in line))
        else:
            out.append("   ".join(t for t, _ in line))
    return out


def _draw_panel(sub: Any, sessions: Sequence[SessionSummary], metric: str, title: str, w: int, h: int, color: bool, kind: str = "C") -> None:
    import plotext

    sub.plot_size(w, h)
    sub.title(title)
    series = [(i, s, _points(s, metric, kind)) for i, s in enumerate(sessions)]
    allc = sorted({c for _, _, pts in series for c, _ in pts})
    ys = [v for _, _, pts in series for _, v in pts]
    if not allc:
        sub.draw(sub.text(0.5, 0.5, "(no data)", alignment="center"))
        sub.ruler("x").lim(0, 1)
        sub.ruler("y").lim(0, 1)
        sub.ruler("x").ticks([])
        sub.ruler("y").ticks([])
        return
    ymax = max(ys) if ys else 1.0
    ymax = ymax if ymax > 0 else 1.0
    yticks = nice_ticks(0.0, ymax, 4 if h < 14 else 5)
    ytop = yticks[-1]
    ylabels = [fmt_tick(t) for t in yticks]
    label_w = max(len(s) for s in ylabels)
    canvas_w = max(w - label_w - 3, 4)
    canvas_h = max(h - 4, 2)
    xlo, xhi = math.log2(allc[0]), math.log2(allc[-1])
    if xhi - xlo < 1e-9:
        xlo, xhi = xlo - 1, xhi + 1
    pad = (xhi - xlo) * 0.04
    xlo_v, xhi_v = xlo - pad, xhi + pad
    sub.ruler("x").lim(xlo_v, xhi_v)
    sub.ruler("y").lim(0, ytop)
    ticks = _c_ticks(allc, canvas_w, [kv[0] for kv in (_knee_value(s, metric, kind) for s in sessions) if kv is not None], kind)
    sub.ruler("x").ticks([math.log2(c) for c in ticks], [_tick_label(c, kind) for c in ticks])
    sub.ruler("y").ticks(yticks, ylabels)
    hd_markers = ("hd", "braille", "hd", "braille", "hd", "braille", "hd", "braille")
    knees: list[tuple[float, float, int]] = []  # (x, load, session index)

    def pix(i: int) -> Any:  # plotext's pixel colour (plotext has no types)
        return plotext.pixel(foreground=TERM_COLORS[i % len(TERM_COLORS)]) if color else None

    def mk(symbol: str, i: int) -> Any:
        p = pix(i)
        return plotext.marker(symbol, p) if p is not None else symbol

    # drawn in layers, so no session's line hides another's points or knee:
    # knee verticals, then lines, then points, then knee diamonds
    for i, s, _pts in series:
        kv = _knee_value(s, metric, kind)
        if kv is not None:
            k, _v = kv
            x = math.log2(k)
            sub.draw(sub.segment((x, x), (0, ytop), marker=plotext.line(1, pix(i), "dotted")))
            knees.append((x, k, i))
    split = {i: split_bounds(s, metric, kind) for i, s, _ in series}
    for i, _s, _pts in series:  # lower bounds: a dotted segment rising from each, joined to nothing
        for c, v in split[i][1]:
            x = math.log2(c)
            sub.draw(sub.segment((x, x), (v, min(v * BOUND_RISE, ytop)), marker=plotext.line(1, pix(i), "dotted")))
    for i, _s, _pts in series:
        measured = split[i][0]
        if len(measured) > 1:
            line = sub.signal([math.log2(c) for c, _ in measured], [v for _, v in measured], marker=mk(hd_markers[i % len(hd_markers)], i))
            line.lines()
            sub.draw(line)
    for i, _s, _pts in series:
        measured, bounds = split[i]
        if measured:
            mark = POINT_MARKS[i % len(POINT_MARKS)]
            sub.draw(sub.signal([math.log2(c) for c, _ in measured], [v for _, v in measured], marker=mk(mark, i)))
        if bounds:
            sub.draw(sub.signal([math.log2(c) for c, _ in bounds], [v for _, v in bounds], marker=mk(BOUND_MARK, i)))
    for i, s, _pts in series:
        kv = _knee_value(s, metric, kind)
        if kv is not None and kv[1] is not None:
            sub.draw(sub.signal([math.log2(kv[0])], [kv[1]], marker=mk(KNEE_MARK, i)))
    # knee labels along the top rows, one row down per label so two never overlap
    row_h = ytop / max(canvas_h - 1, 1)
    seen: set[float] = set()
    first_knees: list[tuple[float, float, int]] = []
    for kn in sorted(knees, key=lambda t: (t[0], t[2])):  # one label a load
        if kn[1] not in seen:
            seen.add(kn[1])
            first_knees.append(kn)
    knees = first_knees
    for n, (x, _k, i) in enumerate(knees):
        text = _knee_text(sessions[i]) or "knee"
        y = ytop - n * row_h
        frac = (x - xlo_v) / (xhi_v - xlo_v)
        tx = x + (xhi_v - xlo_v) / max(canvas_w, 1) * (1 if frac < 0.55 else -1)
        align = "left" if frac < 0.55 else "right"
        label = plotext.colorize(text, pix(i)) if color else text
        sub.draw(sub.text(tx, y, label, alignment=align))


def render_curves(
    sessions: Sequence[SessionSummary],
    width: int = 80,
    height: int = 24,
    *,
    color: bool = True,
    title: str | None = None,
) -> str:
    """Both curves and a legend in at most width x height cells: side by side when each plot
    gets MIN_PLOT_W columns, else stacked. ANSI colors when color; plain text otherwise."""
    import plotext

    width, height = int(width), int(height)
    lines: list[str] = []
    if title:
        lines.append(title[:width])
    lines += _legend_lines(sessions, width, color, axis_kind(sessions))
    avail = height - len(lines)
    side = width >= 2 * MIN_PLOT_W + 1 and avail >= MIN_PLOT_H
    if side:
        pw = [width // 2, width - width // 2]
        ph = [avail, avail]
    else:
        pw = [width, width]
        ph = [avail // 2, avail - avail // 2]
    if min(pw) < 16 or min(ph) < MIN_PLOT_H:
        lines.append("(too small to draw the curves)"[:width])
        return "\n".join(lines[:height])
    plotext.terminal.limit(False, False)  # size to the caller's box, not this terminal
    fig = plotext.figure
    fig.clear()
    fig.theme("simple" if color else "colorless")
    fig.subplots(1, 2) if side else fig.subplots(2, 1)
    fig.plot_size(width, avail)
    kind = axis_kind(sessions)
    for n, (metric, name) in enumerate(METRICS):
        sub = fig.subplot(1, n + 1) if side else fig.subplot(n + 1, 1)
        sub.theme("simple" if color else "colorless")
        unit = " (ms)" if metric.endswith("_ms") else ""
        _draw_panel(sub, sessions, metric, f"{name}{unit} vs {_X_NAME[kind]}", pw[n], ph[n], color, kind)
    m = fig.build()
    body = m.string(colorless=not color).rstrip("\n").split("\n")
    fig.clear()
    out = lines + [ln.rstrip() if not color else ln for ln in body]
    return "\n".join(out[:height])


def terminal_curves(
    sessions: Sequence[SessionSummary],
    width: int = 80,
    height: int = 24,
    *,
    color: bool = False,
) -> str:
    """`redline report`'s curves as text: at most width columns and height lines."""
    return render_curves(sessions, width, height, color=color)


def visible_width(line: str) -> int:
    """Columns a line takes on screen (ANSI codes removed)."""
    return len(_ANSI.sub("", line))


# -- image (matplotlib) --------------------------------------------------------------------

def png_available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def write_png(sessions: Sequence[SessionSummary], path: str | os.PathLike, *, title: str | None = None) -> Path:
    """Both curves, side by side, as a PNG at path: log2 concurrency axis, one line per session
    through its measured points (a lower bound an open marker on a dashed rise, joined to
    nothing), each knee a dashed line, a diamond and a label, the legend under both plots.
    PngUnavailable without matplotlib; OSError if the file cannot be written."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator
    except ImportError:
        raise PngUnavailable(f"--png needs matplotlib: {PNG_EXTRA_HINT}") from None

    path = Path(path)
    kind = axis_kind(sessions)
    allc = sorted({k.value for s in sessions for k in s.by_load() if k.kind == kind and k.value > 0})
    knees = [kv[0] for kv in (_knee_value(s, "output_throughput", kind) for s in sessions) if kv is not None]
    # no pyplot: no global backend or figure state, safe inside any process
    fig = Figure(figsize=(13, 6.4), dpi=110, layout="constrained")
    canvas = FigureCanvasAgg(fig)
    axes = fig.subplots(1, 2)
    if title is None:
        title = "Saturation curves: " + " vs ".join(s.label for s in sessions)
        if len(title) > 110:
            title = f"Saturation curves: {len(sessions)} sessions"
    fig.suptitle(title, fontsize=13, fontweight="bold")
    ylabels = {"output_throughput": "output tokens/s", "p99_ttft_ms": "p99 TTFT (ms)"}
    handles, labels = [], []
    notes_all: list[tuple] = []
    for n_ax, (ax, (metric, name)) in enumerate(zip(axes, METRICS, strict=False)):
        ax.set_xscale("log", base=2)
        ys_all = []
        for i, s in enumerate(sessions):
            col = PNG_COLORS[i % len(PNG_COLORS)]
            pts = _points(s, metric, kind)
            k = _knee_text(s)
            notes = [k] if k is not None else []
            if s.break_result is not None:
                notes.append(f"{s.break_result.reason} at {s.break_result.where}")
            if not s.steps:
                notes.append("no steps")
            lab = s.label + (f"  ({'; '.join(notes)})" if notes else "")
            measured, bounds = split_bounds(s, metric, kind)
            ys_all += [v for _, v in pts]
            (h,) = ax.plot([c for c, _ in measured], [v for _, v in measured], marker="o", ms=5, lw=2, color=col)
            for c, v in bounds:  # a lower bound: an open marker on a dashed segment rising from it, joined to nothing
                ax.plot([c, c], [v, v * BOUND_RISE], ls="--", lw=1.5, color=col)
                ax.plot([c], [v], marker="o", ms=7, mfc="white", mec=col, mew=2, ls="none")
            if n_ax == 0:
                handles.append(h)
                labels.append(lab)
        ax.set_title(f"{name} vs {axis_title(kind).split(' (')[0]}", fontsize=11)
        ax.set_xlabel(f"{axis_title(kind)} (log2 scale)")
        ax.set_ylabel(ylabels[metric])
        if allc:
            ticks = _c_ticks(allc, 70, knees, kind)
            ax.xaxis.set_major_locator(FixedLocator(ticks))
            ax.xaxis.set_minor_locator(FixedLocator([c for c in allc if c not in ticks]))
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set_xticks(ticks, [_tick_label(c, kind) for c in ticks])
            lo, hi = allc[0], allc[-1]
            ax.set_xlim(lo / 2, hi * 2) if lo == hi else ax.set_xlim(lo / 2 ** 0.3, hi * 2 ** 0.3)
        else:
            ax.xaxis.set_minor_locator(NullLocator())
            ax.text(0.5, 0.5, "no steps", transform=ax.transAxes, ha="center", va="center", color="gray")
        ymax = max(ys_all) if ys_all else 1.0
        ax.set_ylim(0, ymax * 1.22 if ymax > 0 else 1.0)
        ax.grid(True, which="major", alpha=0.3)
        ax.grid(True, which="minor", axis="x", alpha=0.12)
        # knees: a vertical dashed line, a diamond on the curve, and a label
        for i, s in enumerate(sessions):
            kv = _knee_value(s, metric, kind)
            if kv is None:
                continue
            kx, ky = kv
            col = PNG_COLORS[i % len(PNG_COLORS)]
            ax.axvline(kx, color=col, ls="--", lw=1.2, alpha=0.7)
            if ky is None:
                continue
            ax.plot([kx], [ky], marker="D", ms=10, mfc="white", mec=col, mew=2.2, zorder=5)
            # throughput rises into the knee and flattens after it: label up and right;
            # TTFT is flat before the knee and climbs after it: label up and left
            left = metric == "p99_ttft_ms"
            if allc and kx >= allc[-1]:
                left = True
            elif allc and kx <= allc[0]:
                left = False
            ann = ax.annotate(
                _knee_text(s) or "knee",
                xy=(kx, ky),
                xytext=(-10 if left else 10, 16),
                textcoords="offset points",
                ha="right" if left else "left",
                color=col,
                fontsize=10,
                fontweight="bold",
                bbox=dict(boxstyle="round,pad=0.2", fc="white", ec=col, lw=0.8, alpha=0.92),
                arrowprops=dict(arrowstyle="-", color=col, lw=0.8),
                zorder=6,
            )
            ann.set_in_layout(False)  # labels never squeeze the plots
            notes_all.append((n_ax, ann))
    fig.legend(handles, labels, loc="outside lower center", ncol=min(len(handles), 2) or 1, fontsize=9.5, frameon=False)
    _separate_labels(canvas, notes_all)
    fig.savefig(path, format="png")
    return path


def _separate_labels(canvas: FigureCanvasAgg, notes: list[tuple]) -> None:
    """Move knee labels up, one label height at a time, until none overlaps another in its plot."""
    canvas.draw()  # lays the axes out: label boxes are then in their final pixels
    renderer = canvas.get_renderer()
    placed: dict[int, list] = {}

    def box(ann):
        ann.update_positions(renderer)
        return ann.get_window_extent(renderer)

    for n_ax, ann in notes:
        boxes = placed.setdefault(n_ax, [])
        area = ann.axes.get_window_extent(renderer)
        start = ann.xyann
        for _ in range(10):
            bb = box(ann)
            if not any(bb.expanded(1.04, 1.2).overlaps(o) for o in boxes):
                break
            dx, dy = ann.xyann
            ann.xyann = (dx, dy + bb.height * 1.2 * 72.0 / canvas.figure.dpi)
        bb = box(ann)
        if bb.y1 > area.y1 or bb.y0 < area.y0:  # pushed out of its plot: back where it was
            ann.xyann = start
            bb = box(ann)
        boxes.append(bb)
