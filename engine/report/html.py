"""`redline report DIR [DIR ...] --html FILE`: one self-contained, interactive HTML page.

Everything is inline (the page's data, its CSS, its JS and plotly.js itself: the basic bundle,
vendored in assets/, 1.2 MB of the page): the file opens offline and fetches nothing. Charts
(plotly): the saturation curve (output tok/s and goodput against C or R; knee, largest load
meeting the SLO and the break marked, labels that never overlap; a colour per
session), latency against load (TTFT, ITL, TPOT, E2E p50/p99, lines through measured points;
a lower bound, censored requests, is an open marker on a dashed segment rising from it, "≥" in
its hover, joined to nothing), the Pareto view (tok/s per user against
total tok/s, per GPU when the GPU count is known), each session over time (C or rate, tok/s,
TTFT p99, server running/queued, GPU power, with the log's events as markers), SLO
attainment per step. Then the step tables, the settings of each run, and an SLO selector
that recolours the steps that pass. Printable (a print stylesheet).

`collect(dir)` reads a session (the only I/O here); `render(sessions, plotly_js)` is pure:
data in, HTML text out. `plotly_js()` reads the vendored bundle (HtmlUnavailable, one line,
when an install lost it). Sessions that ran different workloads get one warning line at the
top (engine/report/comparable.py).

The page records what happened when it was drawn, for tests and for anyone curious, on
<html>: data-charts-expected, data-charts-drawn (charts plotly drew), data-charts (their
ids), data-errors (JSON list of window errors, console.error calls, failed loads),
data-labels (the saturation chart's knee / max SLO / break labels and where each was drawn,
in pixels: they never overlap), data-latency-traces (the latency chart's series: measured
points, and lower bounds as open markers on dashed segments) and data-report-ready="1" when
it is done.

Where: html_data.py reads the sessions and builds the page's data, html_assets.py holds the
inline CSS and JS; this module writes the HTML (tables, the page) and re-exports their names.
"""

from __future__ import annotations

import html as _html
import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

from ..fmt import BOUND
from ..session.paths import SessionError
from .comparable import workload_texts, workload_warning
from .compare import axis_title
from .html_assets import CSS, PAGE_JS, PROBE_JS
from .html_data import (
    COLOURS,
    EVENT_KINDS,
    LAT,
    MAX_TIMELINE_POINTS,
    ReportSession,
    collect,
    default_slo,
    describe_slo,
    gpu_count,
    main_kind,
    recorded_slo,
    session_data,
    step_data,
)
from .html_pareto import mark_front

# plotly.js's basic bundle (scatter, bar, pie), vendored as package data: assets/README.md
PLOTLY_ASSET = "assets/plotly-basic.min.js"
HTML_MISSING = (f"the page's plotly.js ({PLOTLY_ASSET} of redline.engine.report, package data) is missing from "
                "this install: reinstall redline")


class HtmlUnavailable(RuntimeError):
    """The vendored plotly.js is missing (a damaged install); str() is one line saying so."""


def _plotly_asset():
    from importlib.resources import files

    return files(__package__).joinpath(PLOTLY_ASSET)


def plotly_js() -> str:
    """plotly.js's basic bundle, minified (assets/README.md: the vendored npm package, MIT)."""
    try:
        return _plotly_asset().read_text(encoding="utf-8")
    except (OSError, ValueError):
        raise HtmlUnavailable(HTML_MISSING) from None


def html_available() -> bool:
    """Whether the page's plotly.js is installed (package data: always, unless the install is
    damaged)."""
    try:
        return _plotly_asset().is_file()
    except (OSError, ValueError, ModuleNotFoundError):
        return False


# -- HTML pieces ---------------------------------------------------------------------------

def esc(v: Any) -> str:
    return _html.escape("" if v is None else str(v), quote=True)


def _ms(v: float | None, bound: bool = False) -> str:
    if v is None:
        return "-"
    s = f"{v / 1000:.2f} s" if v >= 10_000 else f"{v:.0f}" if v >= 100 else f"{v:.1f}"
    return (BOUND if bound else "") + s


def _n(v: float | None, nd: int = 1) -> str:
    return "-" if v is None else f"{v:.{nd}f}"


STEP_COLUMNS = ("load", "s", "done", "fail", "tok/s", "good tok/s", "SLO met", "req/s", "TTFT p50", "TTFT p99",
                "ITL p50", "ITL p99", "TPOT", "E2E p50", "E2E p99", "srv run", "GPU W", "SLO selected")


def _step_table(i: int, rs: ReportSession, kind: str) -> str:
    s = rs.session
    rows = []
    slo = recorded_slo(rs.summary)
    for key, st in s.by_load().items():
        d = step_data(st, kind, slo)
        cells = [
            esc(key.label), _n(st.duration_s), str(st.completed), str(st.failed), _n(st.output_throughput),
            _n(st.output_goodput), "-" if st.slo_attainment is None else f"{st.slo_attainment * 100:.0f} %",
            _n(st.request_throughput, 2),
            _ms(st.median_ttft_ms, st.bound("median_ttft_ms")), _ms(st.p99_ttft_ms, st.bound("p99_ttft_ms")),
            _ms(st.median_itl_ms), _ms(st.p99_itl_ms), _ms(st.mean_tpot_ms),
            _ms(st.median_e2e_latency_ms, st.bound("median_e2e_latency_ms")),
            _ms(st.p99_e2e_latency_ms, st.bound("p99_e2e_latency_ms")),
            _n(st.server_max_running, 0), _n(st.mean_power_w, 0),
        ]
        flags = []
        if st.client_limited:
            flags.append("client-limited")
        if not st.steady:
            flags.append("unsteady")
        note = f' title="{esc(", ".join(flags))}"' if flags else ""
        attrs = json.dumps({k: d[k] for k in ("ttft_p99", "ttft_p99_bound", "itl_p99", "e2e_p99", "e2e_p99_bound",
                                               "tpot", "error_rate", "attainment", "load") if k in d}
                           | {k: d[k] for k in ("slo_state", "slo_why") if k in d})
        rows.append(f'<tr class="step" data-step="{esc(attrs)}"{note}>'
                    + "".join(f"<td>{c}</td>" for c in cells) + '<td class="verdict">-</td></tr>')
    probe = ""
    if s.probe is not None:
        p = s.probe
        probe = (f'<p class="note">C=1 probe: {_n(p.output_throughput)} tok/s, TTFT p50 {_ms(p.median_ttft_ms)} ms, '
                 f'ITL p50 {_ms(p.median_itl_ms)} ms, {p.failed} failed</p>')
    head = "".join(f"<th>{esc(c)}</th>" for c in STEP_COLUMNS)
    body = "\n".join(rows) or f'<tr><td colspan="{len(STEP_COLUMNS)}">(no steps)</td></tr>'
    return (f'<h3><span class="swatch" style="background:{COLOURS[i % len(COLOURS)]}"></span>{esc(s.label)}</h3>\n'
            f'<div class="scroll"><table class="steps" data-session="{i}"><thead><tr>{head}</tr></thead>\n<tbody>{body}</tbody></table></div>{probe}')


def _settings_table(sessions: Sequence[ReportSession]) -> str:
    def info(rs: ReportSession, k: str) -> Any:
        si = got if isinstance(got := rs.meta.get("server_info"), dict) else {}
        return si.get(k)

    def workload(rs: ReportSession) -> str:
        w = got if isinstance(got := rs.meta.get("workload"), dict) else {}
        return ", ".join(f"{k} {v}" for k, v in w.items() if v not in (None, "", {}))

    def target(rs: ReportSession, k: str) -> Any:
        t = rs.session.target or (got if isinstance(got := rs.meta.get("target"), dict) else {})
        return t.get(k)

    def brk(rs: ReportSession) -> str:
        b = rs.session.break_result
        if b is None:
            return "none (no stop rule fired)"
        return f"{b.reason} at {b.where}, {b.good_text}: {b.detail}"

    def knee(rs: ReportSession) -> str:
        # engine/rules/verdicts.py, as summary.json recorded it: one per workload, the session's last
        return "; then ".join(k.describe() for k in rs.session.knees)

    def parallel(rs: ReportSession) -> str:
        parts = [f"{k.split('_')[0]} {info(rs, k)}" for k in ("tp_size", "pp_size", "dp_size") if info(rs, k) is not None]
        return ", ".join(parts) or "-"

    fields: list[tuple[str, Any]] = [
        ("session", lambda rs: str(rs.session.path) if rs.session.path else "-"),
        ("target", lambda rs: target(rs, "url")), ("server", lambda rs: target(rs, "kind")),
        ("model", lambda rs: target(rs, "model")), ("API", lambda rs: target(rs, "api")),
        ("workload", workload), ("parallelism", parallel),
        ("max running requests", lambda rs: info(rs, "max_running_requests")),
        ("GPUs", lambda rs: gpu_count(rs.meta, rs.timeline)),
        ("SLO", lambda rs: describe_slo(rs.summary["slo"]) if isinstance(rs.summary.get("slo"), dict) and rs.summary["slo"] else "none"),
        ("break", brk), ("knee", knee), ("cause", lambda rs: rs.summary.get("cause") or "-"),
        ("redline", lambda rs: rs.meta.get("redline_version")),
        ("started", lambda rs: rs.meta.get("started_at")),
        ("ended", lambda rs: f"{rs.meta.get('ended_at') or 'not closed'} ({rs.meta.get('end_reason') or '-'})"),
        ("host", lambda rs: rs.meta.get("host")),
        ("command line", lambda rs: " ".join(rs.meta.get("command_line") or []) or None),
    ]
    head = "<th></th>" + "".join(
        f'<th><span class="swatch" style="background:{COLOURS[i % len(COLOURS)]}"></span>{esc(rs.session.label)}</th>'
        for i, rs in enumerate(sessions))
    body = []
    for name, get in fields:
        vals = []
        for rs in sessions:
            try:
                v = get(rs)
            except Exception:  # noqa: BLE001 - a damaged meta.json shows "-", never breaks the page
                v = None
            vals.append("-" if v in (None, "") else esc(v))
        body.append(f"<tr><th>{esc(name)}</th>" + "".join(f"<td>{v}</td>" for v in vals) + "</tr>")
    return f'<div class="scroll"><table class="settings"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


def _json_script(obj: Any) -> str:
    """JSON safe inside <script>: no `</`, no `<!--`, no U+2028/2029 surprises."""
    text = json.dumps(obj, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _inline_js(js: str) -> str:
    return js.replace("</script", "<\\/script").replace("<!--", "<\\!--")


def render(sessions: Sequence[ReportSession], plotly: str, *, title: str | None = None,
           generated: datetime | None = None) -> str:
    """The whole page. `plotly` is plotly.js's text (plotly_js())."""
    kind = main_kind(sessions)
    summaries = [rs.session for rs in sessions]
    warning = workload_warning(summaries)  # comparable, or said so
    data: dict[str, Any] = {
        "kind": kind, "axis": axis_title(kind),
        "sessions": [{**session_data(i, rs, kind), "workload": wl}
                     for i, (rs, wl) in enumerate(zip(sessions, workload_texts(summaries), strict=False))],
        "slo": default_slo(sessions),
        "warning": warning,
    }
    mark_front(data["sessions"])  # the Pareto front across the page's sessions (html_pareto.py)
    labels = [rs.session.label for rs in sessions]
    title = title or ("redline: " + " vs ".join(labels) if labels else "redline report")
    when = (generated or datetime.now(timezone.utc)).strftime("%Y-%m-%d %H:%M UTC")
    has_att = any(st.get("attainment") is not None for s in data["sessions"] for st in s["steps"])
    timelines = "\n".join(
        f'<div class="chart tall" id="chart-timeline-{i}" data-chart="timeline"></div>'
        for i, s in enumerate(data["sessions"]) if s["timeline"]["cols"]["t"])
    legend = " ".join(
        f'<span class="key"><span class="swatch" style="background:{s["color"]}"></span>{esc(s["label"])} '
        f'<span class="workload">({esc(s["workload"])})</span></span>'
        for s in data["sessions"])
    warn = f'<p class="warning" id="workload-warning" role="alert">{esc(warning)}</p>\n' if warning else ""
    att_section = (
        '<div class="chart" id="chart-attainment" data-chart="attainment"></div>' if has_att else
        '<p class="note">No session recorded an SLO (run with --slo or a preset [slo]): the selector below '
        'judges the steps by their p99 latencies and errors.</p>')
    per_gpu = [s["gpus"] for s in data["sessions"]]
    pareto_note = ("total tok/s per GPU (" + ", ".join(f"{esc(s['label'])}: {s['gpus']} GPUs" for s in data["sessions"]) + ")"
                   if all(per_gpu) else "total tok/s (the GPU count is not known for every session)")
    tables = "\n".join(_step_table(i, rs, kind) for i, rs in enumerate(sessions))
    left_out = [f"{esc(s['label'])}: {s['left_out']}" for s in data["sessions"] if s["left_out"]]
    left_note = (f'<p class="note">Charts are over {esc(axis_title(kind))}; steps of another kind are in the tables only '
                 f'({", ".join(left_out)}).</p>') if left_out else ""
    return f"""<!DOCTYPE html>
<html lang="en" data-charts-expected="0" data-charts-drawn="0" data-charts="" data-errors="[]">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="redline">
<title>{esc(title)}</title>
<script>{PROBE_JS}</script>
<style>{CSS}</style>
</head>
<body>
<header>
<h1>{esc(title)}</h1>
<p class="sub">{legend} · written {esc(when)} by redline · hover a point for its values; drag to zoom, double-click to reset</p>
{warn}</header>
<section id="slo-selector" class="card">
<h2>SLO selector</h2>
<form id="slo-form" onsubmit="return false">
<label>TTFT p99 ≤ <input name="ttft_p99" type="number" min="0" step="any" placeholder="ms"> ms</label>
<label>ITL p99 ≤ <input name="itl_p99" type="number" min="0" step="any" placeholder="ms"> ms</label>
<label>TPOT ≤ <input name="tpot" type="number" min="0" step="any" placeholder="ms"> ms</label>
<label>E2E p99 ≤ <input name="e2e_p99" type="number" min="0" step="any" placeholder="ms"> ms</label>
<label>errors ≤ <input name="errors" type="number" min="0" max="100" step="any" placeholder="%"> %</label>
<label>SLO met ≥ <input name="attainment" type="number" min="0" max="100" step="any" placeholder="%"> %</label>
</form>
<p class="note">A step passes when every bound given holds. A figure drawn ≥ is a lower bound (requests still
waiting when the step closed): above a bound it fails, under it the step is "not proven" (amber).</p>
<ul id="slo-verdicts"></ul>
</section>
<section class="card"><h2>Saturation</h2>
<p class="note">Output tok/s (solid) and goodput (dashed) against {esc(axis_title(kind))}; ◆ knee, ★ largest load meeting the SLO, ✕ where the break rule fired. Markers follow the SLO selector: filled = passes, ✕ = fails, open = not proven.</p>
<div class="chart" id="chart-saturation" data-chart="saturation"></div></section>
<section class="card"><h2>Latency against load</h2>
<p class="note">p99 solid, p50 dotted (TPOT: mean), through measured points only; a lower bound (≥: requests still
waiting when the step closed) is an open marker on a dashed segment rising from it, never joined to the measured line.</p>
<div class="chart tall" id="chart-latency" data-chart="latency"></div></section>
<section class="card"><h2>Pareto: per-user speed against throughput</h2>
<p class="note">tok/s per user (1000 ÷ TPOT: how fast one answer streams) against {pareto_note}. Up and right is better; the black line joins the Pareto front across the sessions (nothing beats its points on both), the points it beats are dimmed.</p>
<div class="chart" id="chart-pareto" data-chart="pareto"></div></section>
<section class="card"><h2>SLO attainment per step</h2>
{att_section}</section>
<section class="card"><h2>Over time</h2>
<p class="note">Load, output tok/s, TTFT p99, the server's running and queued requests, GPU power; vertical marks are the log's events (preset steps, probe, warnings, breaks).</p>
{timelines or '<p class="note">(no timeline recorded)</p>'}</section>
<section class="card"><h2>Steps</h2>
<p class="note">Latencies in ms; ≥ = a lower bound; the last column follows the SLO selector.</p>
{left_note}
{tables}</section>
<section class="card"><h2>Settings</h2>
{_settings_table(sessions)}</section>
<footer>redline · one self-contained file: nothing is fetched when it is opened.</footer>
<script id="redline-data" type="application/json">{_json_script(data)}</script>
<script>{_inline_js(plotly)}</script>
<script>{PAGE_JS}</script>
</body>
</html>
"""


def write_html(sessions: Sequence[ReportSession], path: str | os.PathLike, plotly: str | None = None) -> Path:
    """render() to `path` (a temporary file, then renamed: the page is whole or absent)."""
    text = render(sessions, plotly if plotly is not None else plotly_js())
    p = Path(path)
    tmp = p.with_name(f".{p.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, p)
    return p


__all__ = ["HTML_MISSING", "PLOTLY_ASSET", "HtmlUnavailable", "ReportSession", "collect", "gpu_count", "html_available",
           "plotly_js", "render", "write_html", "SessionError", "COLOURS", "EVENT_KINDS", "LAT",
           "MAX_TIMELINE_POINTS", "recorded_slo", "CSS", "PAGE_JS", "PROBE_JS"]
