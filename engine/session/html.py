"""`redline report DIR [DIR ...] --html FILE`: one self-contained, interactive HTML page.

Everything is inline (the page's data, its CSS, its JS and plotly.js itself): the file opens
offline and fetches nothing. Charts (plotly): the saturation curve (output tok/s and goodput
against C or R; knee, largest load meeting the SLO and the break marked; a colour per
session), latency against load (TTFT, ITL, TPOT, E2E p50/p99; a lower bound, censored
requests, is an open marker and "≥" in its hover), the Pareto view (tok/s per user against
total tok/s, per GPU when the GPU count is known), each session over time (C or rate, tok/s,
TTFT p99, server running/queued, GPU power, with the log's events as markers), SLO
attainment per step. Then the step tables, the settings of each run, and an SLO selector
that recolours the steps that pass. Printable (a print stylesheet).

`collect(dir)` reads a session (the only I/O here); `render(sessions, plotly_js)` is pure:
data in, HTML text out. plotly is the `html` extra: `plotly_js()` raises HtmlUnavailable
(one line naming what to install) without it.

The page records what happened when it was drawn, for tests and for anyone curious, on
<html>: data-charts-expected, data-charts-drawn (charts plotly drew), data-charts (their
ids), data-errors (JSON list of window errors, console.error calls, failed loads) and
data-report-ready="1" when it is done.
"""

from __future__ import annotations

import html as _html
import json
import math
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

from ..fmt import BOUND
from ..slo import Slo
from ..stepresult import StepResult
from .compare import SessionSummary, knee_load, load_session, step_load, axis_title
from .paths import META, SUMMARY, SessionError

HTML_EXTRA_HINT = "pip install 'redline[html]'"
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22")
EVENT_KINDS = ("preset", "probe", "key", "warning", "break", "error", "workload")
MAX_TIMELINE_POINTS = 4000  # a longer timeline is thinned (every n-th row) to keep the page light


class HtmlUnavailable(RuntimeError):
    """plotly is not installed; str() is one line naming the extra."""


def plotly_js() -> str:
    """plotly.js, minified, from the plotly package (the html extra)."""
    try:
        from plotly.offline import get_plotlyjs
    except ImportError:
        raise HtmlUnavailable(f"--html needs plotly, the html extra: {HTML_EXTRA_HINT}") from None
    return get_plotlyjs()


def html_available() -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec("plotly") is not None
    except (ImportError, ValueError):
        return False


# -- reading a session ---------------------------------------------------------------------

@dataclass
class ReportSession:
    session: SessionSummary
    meta: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    timeline: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return d if isinstance(d, dict) else {}


def _read_ndjson(path: Path) -> list[dict[str, Any]]:
    """Each complete, parseable line (a damaged or partial one is skipped, as export does)."""
    out = []
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if isinstance(row, dict):
                    out.append(row)
    except OSError:
        pass
    return out


def collect(session_dir: str | os.PathLike, session: SessionSummary | None = None) -> ReportSession:
    """One session directory read for the page (SessionError, one line, when it is not one)."""
    d = Path(session_dir)
    s = session if session is not None else load_session(d)
    return ReportSession(s, _read_json(d / META), _read_json(d / SUMMARY),
                         _read_ndjson(d / "timeline.ndjson"), _read_ndjson(d / "events.ndjson"))


# -- the page's data -----------------------------------------------------------------------

def _r(v: Any, nd: int = 3) -> Any:
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, (int, float)):
        return round(float(v), nd) if math.isfinite(v) else None
    return v


LAT = (  # (key in the page, StepResult field)
    ("ttft_p50", "median_ttft_ms"), ("ttft_p99", "p99_ttft_ms"), ("ttft_mean", "mean_ttft_ms"),
    ("itl_p50", "median_itl_ms"), ("itl_p99", "p99_itl_ms"), ("tpot", "mean_tpot_ms"),
    ("e2e_p50", "median_e2e_latency_ms"), ("e2e_p99", "p99_e2e_latency_ms"),
)


def _step_data(s: StepResult, kind: str) -> dict[str, Any]:
    load = step_load(s)
    total = s.completed + s.failed
    d: dict[str, Any] = {
        "x": load.value, "load": load.label, "kind": load.kind, "c": s.concurrency,
        "tok_s": _r(s.output_throughput, 2), "goodput": _r(s.output_goodput, 2), "req_s": _r(s.request_throughput),
        "attainment": _r(s.slo_attainment, 4), "completed": s.completed, "failed": s.failed,
        "error_rate": _r(s.failed / total, 5) if total else None, "duration_s": _r(s.duration_s, 1),
        "running": _r(s.server_max_running, 1), "power_w": _r(s.mean_power_w, 1), "steady": s.steady,
        "client_limited": s.client_limited, "index": s.index,
    }
    for key, name in LAT:
        d[key] = _r(getattr(s, name))
        d[key + "_bound"] = s.bound(name)
    # tok/s per user: a closed-loop step shares its tok/s among C users; an open-loop one's
    # user sees 1 token per TPOT
    if load.kind == "C" and s.concurrency:
        d["per_user"] = _r(s.output_throughput / s.concurrency, 3)
    elif s.mean_tpot_ms:
        d["per_user"] = _r(1000.0 / s.mean_tpot_ms, 3)
    else:
        d["per_user"] = None
    return d


def gpu_count(meta: dict[str, Any], timeline: Sequence[dict[str, Any]] = ()) -> int | None:
    """GPUs serving the model: tp x pp (x dp without DP attention) from the server info in
    meta.json, else the GPUs the telemetry reported; None when unknown."""
    info = meta.get("server_info") if isinstance(meta.get("server_info"), dict) else {}
    sim = info.get("redline_sim") if isinstance(info.get("redline_sim"), dict) else {}
    if isinstance(sim.get("gpus"), int) and sim["gpus"] > 0:
        return sim["gpus"]

    def size(k: str) -> int:
        v = info.get(k)
        return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 1

    if any(isinstance(info.get(k), int) for k in ("tp_size", "pp_size")):
        n = size("tp_size") * size("pp_size")
        if not info.get("enable_dp_attention"):
            n *= size("dp_size")
        return n
    idx = {k.split("_", 1)[0] for row in timeline[:50] for k in row if k.startswith("gpu") and k.endswith("_power_w")}
    return len(idx) or None


def _timeline_data(rows: Sequence[dict[str, Any]], events: Sequence[dict[str, Any]]) -> dict[str, Any]:
    step = max(1, math.ceil(len(rows) / MAX_TIMELINE_POINTS))
    rows = list(rows)[::step]
    cols: dict[str, list] = {k: [] for k in ("t", "c", "rate", "tok_s", "ttft_p99", "running", "queued", "power", "state")}
    any_power = False
    for r in rows:
        cols["t"].append(_r(r.get("elapsed_s"), 2))
        cols["c"].append(r.get("target_c"))
        cols["rate"].append(_r(r.get("target_rate")) if r.get("mode") == "rate" else None)
        cols["tok_s"].append(_r(r.get("output_tok_s"), 1))
        cols["ttft_p99"].append(_r(r.get("ttft_p99_ms"), 1))
        cols["running"].append(_r(r.get("server_running"), 1))
        cols["queued"].append(_r(r.get("server_queued"), 1))
        watts = [v for k, v in r.items() if k.startswith("gpu") and k.endswith("_power_w") and isinstance(v, (int, float))]
        any_power = any_power or bool(watts)
        cols["power"].append(_r(sum(watts), 1) if watts else None)
        cols["state"].append(r.get("state"))
    ev = []
    last: tuple[str, float] | None = None
    for e in events:
        kind = e.get("kind")
        if kind not in EVENT_KINDS or not isinstance(e.get("elapsed_s"), (int, float)):
            continue
        text = str(e.get("text") or "")
        if kind == "preset" and text.endswith(": warm-up"):  # the step's own line says it
            continue
        t = float(e["elapsed_s"])
        if last is not None and last[0] == kind and abs(last[1] - t) < 0.05:
            continue
        last = (kind, t)
        ev.append({"t": _r(t, 2), "kind": kind, "text": text[:200]})
    return {"cols": cols, "power": any_power, "rate": any(v is not None for v in cols["rate"]),
            "server": any(v is not None for v in cols["running"]), "events": ev}


def meets_slo(slo: Slo, st: StepResult) -> bool:
    """The step met the SLO: no bound missed, and with per-request bounds an attainment was
    measured (a step none of whose own requests finished proves nothing)."""
    return slo.judge(st) is None and (not slo.per_request or st.slo_attainment is not None)


def _describe_slo(d: dict[str, Any]) -> str:
    try:
        return Slo(**d).describe()
    except TypeError:
        return json.dumps(d)


def _session_data(i: int, rs: ReportSession, kind: str) -> dict[str, Any]:
    s = rs.session
    steps = [_step_data(st, kind) for key, st in s.by_load().items() if key.kind == kind]
    other = sum(1 for key in s.by_load() if key.kind != kind)
    k = knee_load(s)
    search = rs.summary.get("search") if isinstance(rs.summary.get("search"), dict) else None
    knee = None
    if search is not None and (search.get("knee_rate") if kind == "R" else search.get("knee_concurrency")) is not None:
        v = search.get("knee_rate") if kind == "R" else search.get("knee_concurrency")
        knee = {"x": v, "how": f"knee search: {search.get('knee_reason', '')}"}
    elif search is None and k is not None and k.kind == kind:
        how = "last good before the break" if s.break_result is not None else "most tok/s, no break"
        knee = {"x": k.value, "how": how}
    max_slo = None
    if search is not None:
        v = search.get("max_slo_rate") if kind == "R" else search.get("max_slo_concurrency")
        if v is not None:
            max_slo = {"x": v, "how": "knee search"}
    elif isinstance(rs.summary.get("slo"), dict) and rs.summary["slo"]:
        try:
            slo = Slo(**rs.summary["slo"])
            good = [key.value for key, st in s.by_load().items() if key.kind == kind and meets_slo(slo, st)]
            if good:
                max_slo = {"x": max(good), "how": "largest load whose step met the recorded SLO"}
        except TypeError:
            pass
    brk = None
    b = s.break_result
    if b is not None:
        x = b.rate if kind == "R" else (b.concurrency if b.rate is None else None)
        brk = {"x": x, "reason": b.reason, "detail": b.detail, "where": b.where}
    gpus = gpu_count(rs.meta, rs.timeline)
    return {
        "label": s.label, "color": COLOURS[i % len(COLOURS)], "steps": steps, "left_out": other,
        "knee": knee, "max_slo": max_slo, "break": brk, "gpus": gpus,
        "knee_reason": (search or {}).get("knee_reason"),
        "timeline": _timeline_data(rs.timeline, rs.events),
        "slo": rs.summary.get("slo") if isinstance(rs.summary.get("slo"), dict) else None,
    }


def _main_kind(sessions: Sequence[ReportSession]) -> str:
    counts: dict[str, int] = {}
    for rs in sessions:
        for key in rs.session.by_load():
            counts[key.kind] = counts.get(key.kind, 0) + 1
    if not counts:
        return "C"
    return max(counts, key=lambda k: (counts[k], k == "C"))


def _default_slo(sessions: Sequence[ReportSession]) -> dict[str, Any]:
    """The selector's starting bounds: the first recorded SLO's step bounds and attainment."""
    for rs in sessions:
        d = rs.summary.get("slo")
        if isinstance(d, dict) and d:
            out: dict[str, Any] = {}
            for k, page in (("ttft_p99_ms", "ttft_p99"), ("itl_p99_ms", "itl_p99"), ("e2e_p99_ms", "e2e_p99")):
                if d.get(k):
                    out[page] = d[k]
            if any(d.get(k) for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")):
                out["attainment"] = round(100 * float(d.get("attainment", 0.9)), 2)
            return out
    return {}


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
    for key, st in s.by_load().items():
        d = _step_data(st, kind)
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
                                               "tpot", "error_rate", "attainment", "load")})
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
        si = rs.meta.get("server_info") if isinstance(rs.meta.get("server_info"), dict) else {}
        return si.get(k)

    def workload(rs: ReportSession) -> str:
        w = rs.meta.get("workload") if isinstance(rs.meta.get("workload"), dict) else {}
        return ", ".join(f"{k} {v}" for k, v in w.items() if v not in (None, "", {}))

    def target(rs: ReportSession, k: str) -> Any:
        t = rs.session.target or (rs.meta.get("target") if isinstance(rs.meta.get("target"), dict) else {})
        return t.get(k)

    def brk(rs: ReportSession) -> str:
        b = rs.session.break_result
        return "none (no stop rule fired)" if b is None else f"{b.reason} at {b.where}, last good {b.last_good}: {b.detail}"

    def knee(rs: ReportSession) -> str:
        srch = rs.summary.get("search") if isinstance(rs.summary.get("search"), dict) else None
        if srch is not None:
            k = srch.get("knee_rate") or srch.get("knee_concurrency")
            return f"{'none' if k is None else k} ({srch.get('knee_reason', '')})"
        k = knee_load(rs.session)
        return "none" if k is None else k.label

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
        ("SLO", lambda rs: _describe_slo(rs.summary["slo"]) if isinstance(rs.summary.get("slo"), dict) and rs.summary["slo"] else "none"),
        ("break", brk), ("knee", knee),
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
    kind = _main_kind(sessions)
    data = {
        "kind": kind, "axis": axis_title(kind),
        "sessions": [_session_data(i, rs, kind) for i, rs in enumerate(sessions)],
        "slo": _default_slo(sessions),
    }
    labels = [rs.session.label for rs in sessions]
    title = title or ("redline: " + " vs ".join(labels) if labels else "redline report")
    when = (generated or datetime.now(timezone.utc)).strftime("%Y-%m-%d %H:%M UTC")
    has_att = any(st.get("attainment") is not None for s in data["sessions"] for st in s["steps"])
    timelines = "\n".join(
        f'<div class="chart tall" id="chart-timeline-{i}" data-chart="timeline"></div>'
        for i, s in enumerate(data["sessions"]) if s["timeline"]["cols"]["t"])
    legend = " ".join(
        f'<span class="key"><span class="swatch" style="background:{s["color"]}"></span>{esc(s["label"])}</span>'
        for s in data["sessions"])
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
<script>{_PROBE_JS}</script>
<style>{_CSS}</style>
</head>
<body>
<header>
<h1>{esc(title)}</h1>
<p class="sub">{legend} · written {esc(when)} by redline · hover a point for its values; drag to zoom, double-click to reset</p>
</header>
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
<p class="note">p99 solid, p50 dotted (TPOT: mean); an open marker is a lower bound (≥).</p>
<div class="chart tall" id="chart-latency" data-chart="latency"></div></section>
<section class="card"><h2>Pareto: per-user speed against throughput</h2>
<p class="note">tok/s per user (output tok/s ÷ C; a rate step: 1 ÷ TPOT) against {pareto_note}. Up and right is better.</p>
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
<script>{_PAGE_JS}</script>
</body>
</html>
"""


# -- inline CSS and JS ---------------------------------------------------------------------

_CSS = """
:root { --fg:#1d232a; --muted:#5b6672; --line:#d9dee4; --bg:#f6f7f9; --card:#fff; --pass:#e6f4ea; --fail:#fde7e7; --unknown:#fff4d6; }
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 1280px; padding: 12px 20px 40px; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg); background: var(--bg); }
h1 { font-size: 22px; margin: 8px 0 2px; } h2 { font-size: 17px; margin: 0 0 6px; } h3 { font-size: 15px; margin: 14px 0 6px; }
.sub, .note, footer { color: var(--muted); font-size: 13px; margin: 4px 0 8px; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 12px 16px; margin: 14px 0; }
.chart { width: 100%; height: 420px; } .chart.tall { height: 620px; }
.swatch { display: inline-block; width: 11px; height: 11px; border-radius: 2px; margin-right: 5px; vertical-align: -1px; }
.key { margin-right: 12px; white-space: nowrap; color: var(--fg); }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; font-size: 13px; }
th, td { border-bottom: 1px solid var(--line); padding: 3px 6px; text-align: right; white-space: nowrap; }
table.steps { font-size: 12.5px; }
table.settings th, table.settings td { text-align: left; white-space: normal; vertical-align: top; }
table.settings td { max-width: 520px; overflow-wrap: anywhere; }
thead th { background: #eef1f4; position: sticky; top: 0; }
tr.pass td.verdict { background: var(--pass); color: #1e6b34; } tr.fail td.verdict { background: var(--fail); color: #a61b1b; }
tr.unknown td.verdict { background: var(--unknown); color: #7a5a00; }
td.verdict { text-align: left; white-space: normal; min-width: 90px; max-width: 260px; }
#slo-form { display: flex; flex-wrap: wrap; gap: 6px 18px; }
#slo-form input { width: 80px; padding: 2px 4px; font: inherit; }
#slo-verdicts { margin: 6px 0 0; padding-left: 18px; }
@media (max-width: 900px) { body { padding: 8px; } .chart { height: 360px; } .chart.tall { height: 560px; } }
@media print {
  @page { size: A4 landscape; margin: 10mm; }
  body { background: #fff; max-width: none; padding: 0; font-size: 11px; }
  .card { border: none; padding: 0; margin: 8px 0; break-inside: avoid; page-break-inside: avoid; }
  .chart { height: 330px; } .chart.tall { height: 480px; }
  .modebar, #slo-form input::placeholder { display: none !important; }
  thead th { position: static; }
  .scroll { overflow: visible; }
  footer { display: none; }
}
"""

# First in <head>: records errors (window errors, failed loads, console.error) on <html>.
_PROBE_JS = """
(function(){
  var root = document.documentElement, errors = [];
  function note(msg){ errors.push(String(msg).slice(0, 500)); root.setAttribute('data-errors', JSON.stringify(errors)); }
  window.__redlineNote = note;
  window.addEventListener('error', function(e){
    if (e.target && e.target !== window && (e.target.src || e.target.href)) note('failed to load ' + (e.target.src || e.target.href));
    else note('error: ' + (e.message || e.type) + (e.filename ? ' at ' + e.filename + ':' + e.lineno : ''));
  }, true);
  window.addEventListener('unhandledrejection', function(e){ note('unhandled rejection: ' + (e.reason && e.reason.message || e.reason)); });
  var ce = console.error;
  console.error = function(){ note('console.error: ' + Array.prototype.join.call(arguments, ' ')); return ce.apply(console, arguments); };
})();
"""

_PAGE_JS = r"""
(function(){
  var root = document.documentElement;
  var D = JSON.parse(document.getElementById('redline-data').textContent);
  var S = D.sessions, KIND = D.kind, BOUND = '\u2265';
  var drawn = [], expected = document.querySelectorAll('[data-chart]').length;
  root.setAttribute('data-charts-expected', String(expected));
  var CONFIG = {displaylogo: false, responsive: true, modeBarButtonsToRemove: ['lasso2d', 'select2d']};
  var FONT = {family: 'system-ui, -apple-system, Segoe UI, Roboto, sans-serif', size: 12};
  function loadLabel(x){ return KIND === 'R' ? 'R=' + x + '/s' : KIND === 'x' ? 'x' + x : 'C=' + x; }
  function ms(v, b){ if (v === null || v === undefined) return '-'; var s = v >= 10000 ? (v/1000).toFixed(2) + ' s' : (v >= 100 ? v.toFixed(0) : v.toFixed(1)) + ' ms'; return (b ? BOUND : '') + s; }
  function logTicks(vals){  // 1-2-5 ticks over the values' range (finer when that gives too few)
    if (!vals.length) return [];
    var lo = Math.min.apply(null, vals) / 1.15, hi = Math.max.apply(null, vals) * 1.15;
    function ticks(mult){ var out = []; for (var e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++) mult.forEach(function(m){ var v = m * Math.pow(10, e); if (v >= lo && v <= hi) out.push(+v.toPrecision(3)); }); return out; }
    var t = ticks([1, 2, 5]);
    return t.length >= 3 ? t : ticks([1, 1.5, 2, 3, 4, 5, 6, 7, 8, 9]);
  }
  function num(v, nd){ return v === null || v === undefined ? '-' : v.toFixed(nd); }
  function xaxis(extra){
    var xs = []; S.forEach(function(s){ s.steps.forEach(function(p){ if (xs.indexOf(p.x) < 0) xs.push(p.x); }); });
    xs.sort(function(a, b){ return a - b; });
    var logx = xs.length > 2 && xs[0] > 0 && xs[xs.length - 1] / xs[0] >= 8;
    var ax = {title: {text: D.axis}, type: logx ? 'log' : 'linear', zeroline: false, automargin: true};
    if (logx && xs.length <= 16) { ax.tickvals = xs; ax.ticktext = xs.map(String); }
    return Object.assign(ax, extra || {});
  }
  function done(id){ return function(gd){
    if (gd && gd.querySelector && gd.querySelector('.main-svg')) { drawn.push(id); root.setAttribute('data-charts-drawn', String(drawn.length)); root.setAttribute('data-charts', drawn.join(' ')); }
  }; }
  function plot(id, traces, layout){
    var el = document.getElementById(id);
    if (!el) return Promise.resolve();
    layout = Object.assign({font: FONT, margin: {l: 60, r: 20, t: 30, b: 50}, hovermode: 'closest', legend: {orientation: 'h', y: -0.18}}, layout);
    try { return Plotly.newPlot(el, traces, layout, CONFIG).then(done(id)).catch(function(e){ window.__redlineNote('plot ' + id + ': ' + e); }); }
    catch (e) { window.__redlineNote('plot ' + id + ': ' + e); return Promise.resolve(); }
  }

  // -- the SLO selector: pass / fail / unknown per step
  var form = document.getElementById('slo-form');
  Object.keys(D.slo || {}).forEach(function(k){ if (form.elements[k]) form.elements[k].value = D.slo[k]; });
  function bounds(){
    var b = {};
    ['ttft_p99', 'itl_p99', 'tpot', 'e2e_p99', 'errors', 'attainment'].forEach(function(k){
      var v = parseFloat(form.elements[k].value); if (isFinite(v)) b[k] = v; });
    return b;
  }
  function judge(p, b){
    var fails = [], unknown = [];
    function lat(key, name){
      if (b[key] === undefined) return;
      var v = p[key]; if (v === null || v === undefined) { unknown.push(name + ' not measured'); return; }
      if (v > b[key]) fails.push(name + ' ' + ms(v, p[key + '_bound']) + ' > ' + ms(b[key]));
      else if (p[key + '_bound']) unknown.push(name + ' ' + ms(v, true) + ' (a lower bound)');
    }
    lat('ttft_p99', 'TTFT p99'); lat('itl_p99', 'ITL p99'); lat('tpot', 'TPOT'); lat('e2e_p99', 'E2E p99');
    if (b.errors !== undefined && p.error_rate !== null && p.error_rate * 100 > b.errors) fails.push('errors ' + (p.error_rate * 100).toFixed(1) + ' % > ' + b.errors + ' %');
    if (b.attainment !== undefined) {
      if (p.attainment === null || p.attainment === undefined) unknown.push('no SLO attainment recorded');
      else if (p.attainment * 100 < b.attainment) fails.push('SLO met ' + (p.attainment * 100).toFixed(0) + ' % < ' + b.attainment + ' %');
    }
    return {state: fails.length ? 'fail' : unknown.length ? 'unknown' : 'pass', why: fails.concat(unknown).join('; ')};
  }
  var satIndex = [];  // session -> the index of its tok/s trace in the saturation chart
  function applySlo(){
    var b = bounds(), any = Object.keys(b).length > 0;
    var items = [];
    S.forEach(function(s, i){
      var verdicts = s.steps.map(function(p){ return judge(p, b); });
      var best = null;
      s.steps.forEach(function(p, j){ if (verdicts[j].state === 'pass' && (best === null || p.x > best)) best = p.x; });
      items.push('<li><span class="swatch" style="background:' + s.color + '"></span>' + esc(s.label) + ': ' +
        (!any ? 'no bound set' : best === null ? 'no step passes' : 'largest load passing: ' + loadLabel(best)) + '</li>');
      var gd = document.getElementById('chart-saturation');
      if (gd && gd.data && satIndex[i] !== undefined) {
        Plotly.restyle(gd, {
          'marker.symbol': [verdicts.map(function(v){ return v.state === 'fail' ? 'x' : v.state === 'unknown' ? 'circle-open' : 'circle'; })],
          'marker.size': [verdicts.map(function(v){ return v.state === 'fail' ? 11 : 9; })]
        }, [satIndex[i]]);
      }
      var rows = document.querySelectorAll('table.steps[data-session="' + i + '"] tr.step');
      rows.forEach(function(tr){
        var p = JSON.parse(tr.getAttribute('data-step')), v = judge(p, b), cell = tr.querySelector('td.verdict');
        tr.classList.remove('pass', 'fail', 'unknown');
        if (!any) { cell.textContent = '-'; return; }
        tr.classList.add(v.state);
        cell.textContent = (v.state === 'pass' ? '\u2713 passes' : v.state === 'fail' ? '\u2717 ' : '? ') + (v.state === 'pass' ? '' : v.why);
      });
    });
    document.getElementById('slo-verdicts').innerHTML = items.join('');
  }
  function esc(t){ var d = document.createElement('div'); d.textContent = t; return d.innerHTML; }

  // -- charts
  var jobs = [];
  (function saturation(){
    var traces = [];
    S.forEach(function(s, i){
      var xs = s.steps.map(function(p){ return p.x; });
      satIndex[i] = traces.length;
      traces.push({x: xs, y: s.steps.map(function(p){ return p.tok_s; }), name: s.label + ' tok/s', legendgroup: 's' + i,
        mode: 'lines+markers', line: {color: s.color, width: 2}, marker: {color: s.color, size: 9, symbol: 'circle', line: {color: s.color, width: 2}},
        customdata: s.steps.map(function(p){ return [p.load, p.running === null ? '-' : p.running, p.failed]; }),
        hovertemplate: '%{customdata[0]}<br>%{y:.1f} output tok/s<br>server running %{customdata[1]}, failed %{customdata[2]}<extra>' + esc(s.label) + '</extra>'});
      if (s.steps.some(function(p){ return p.goodput !== null; })) {
        traces.push({x: xs, y: s.steps.map(function(p){ return p.goodput; }), name: s.label + ' goodput', legendgroup: 's' + i,
          mode: 'lines', line: {color: s.color, width: 1.5, dash: 'dash'},
          hovertemplate: '%{x}<br>goodput %{y:.1f} tok/s<extra>' + esc(s.label) + '</extra>'});
      }
      function mark(m, symbol, text, pos){
        if (!m || m.x === null || m.x === undefined) return;
        var p = s.steps.filter(function(q){ return q.x === m.x; })[0];
        var y = p ? p.tok_s : 0;
        traces.push({x: [m.x], y: [y], name: s.label + ' ' + text, legendgroup: 's' + i, mode: 'markers+text', showlegend: false,
          marker: {symbol: symbol, size: 17, color: symbol === 'x-thin-open' ? '#c00' : s.color, line: {color: '#222', width: 1.5}},
          text: [text + ' ' + loadLabel(m.x)], textposition: pos, textfont: {size: 11, color: s.color},
          hovertemplate: text + ' ' + loadLabel(m.x) + '<br>%{y:.1f} tok/s<br>' + esc(m.how || m.detail || '') + '<extra>' + esc(s.label) + '</extra>'});
      }
      mark(s.knee, 'diamond', 'knee', 'top left');
      mark(s.max_slo, 'star', 'max SLO', 'bottom right');
      if (s.break) mark({x: s.break.x, how: s.break.reason + ': ' + s.break.detail}, 'x-thin-open', 'break', 'top center');
    });
    jobs.push(plot('chart-saturation', traces, {xaxis: xaxis(), yaxis: {title: {text: 'output tok/s'}, rangemode: 'tozero', automargin: true}}));
  })();

  (function latency(){
    var panels = [['ttft', 'TTFT'], ['itl', 'ITL'], ['tpot', 'TPOT'], ['e2e', 'E2E']];
    var traces = [], layout = {grid: {rows: 2, columns: 2, pattern: 'independent', xgap: 0.12, ygap: 0.22}, annotations: [], margin: {l: 60, r: 20, t: 40, b: 50}};
    panels.forEach(function(pn, k){
      var ax = k === 0 ? '' : String(k + 1);
      layout['xaxis' + ax] = xaxis({title: {text: k >= 2 ? D.axis : ''}});
      var vals = [];
      S.forEach(function(s){ s.steps.forEach(function(p){ [pn[0], pn[0] + '_p50', pn[0] + '_p99'].forEach(function(k){ if (p[k] > 0) vals.push(p[k]); }); }); });
      var tv = logTicks(vals);
      layout['yaxis' + ax] = {title: {text: pn[1]}, type: 'log', automargin: true, tickvals: tv, ticktext: tv.map(function(v){ return v >= 1000 ? +(v / 1000).toPrecision(3) + ' s' : v + ' ms'; })};
      layout.annotations.push({text: '<b>' + pn[1] + '</b>', xref: (ax ? 'x' + ax : 'x') + ' domain', yref: (ax ? 'y' + ax : 'y') + ' domain', x: 0, y: 1.12, showarrow: false, xanchor: 'left'});
      var series = pn[0] === 'tpot' ? [['tpot', 'mean', 'solid']] : [[pn[0] + '_p99', 'p99', 'solid'], [pn[0] + '_p50', 'p50', 'dot']];
      S.forEach(function(s, i){
        series.forEach(function(se){
          var key = se[0], pts = s.steps.filter(function(p){ return p[key] !== null && p[key] !== undefined; });
          if (!pts.length) return;
          traces.push({x: pts.map(function(p){ return p.x; }), y: pts.map(function(p){ return p[key]; }),
            xaxis: 'x' + ax, yaxis: 'y' + ax, name: s.label, legendgroup: 's' + i, showlegend: k === 0 && se[1] !== 'p50',
            mode: 'lines+markers', line: {color: s.color, width: se[2] === 'dot' ? 1.5 : 2, dash: se[2]},
            marker: {color: s.color, size: 8, symbol: pts.map(function(p){ return p[key + '_bound'] ? 'circle-open' : 'circle'; }), line: {color: s.color, width: 2}},
            customdata: pts.map(function(p){ return [p.load, ms(p[key], p[key + '_bound']), p[key + '_bound'] ? ' (lower bound: requests still waiting at the close)' : '']; }),
            hovertemplate: '%{customdata[0]}<br>' + pn[1] + ' ' + se[1] + ' %{customdata[1]}%{customdata[2]}<extra>' + esc(s.label) + '</extra>'});
        });
      });
    });
    jobs.push(plot('chart-latency', traces, layout));
  })();

  (function pareto(){
    var perGpu = S.every(function(s){ return s.gpus; });
    var traces = S.map(function(s, i){
      var pts = s.steps.filter(function(p){ return p.per_user !== null; });
      var g = perGpu ? s.gpus : 1;
      return {x: pts.map(function(p){ return p.tok_s / g; }), y: pts.map(function(p){ return p.per_user; }), name: s.label,
        mode: 'lines+markers+text', text: pts.map(function(p){ return p.load; }), textposition: 'top right', textfont: {size: 10, color: s.color},
        line: {color: s.color, width: 2}, marker: {color: s.color, size: 9},
        customdata: pts.map(function(p){ return [p.load, p.tok_s, p.tok_s / g]; }),
        hovertemplate: '%{customdata[0]}<br>%{y:.2f} tok/s per user<br>%{customdata[1]:.1f} tok/s total' + (perGpu ? ', %{customdata[2]:.1f} per GPU' : '') + '<extra>' + esc(s.label) + '</extra>'};
    });
    jobs.push(plot('chart-pareto', traces, {xaxis: {title: {text: perGpu ? 'output tok/s per GPU' : 'output tok/s'}, rangemode: 'tozero', automargin: true},
      yaxis: {title: {text: 'output tok/s per user'}, rangemode: 'tozero', automargin: true}}));
  })();

  (function attainment(){
    if (!document.getElementById('chart-attainment')) return;
    var traces = S.map(function(s, i){
      var pts = s.steps.filter(function(p){ return p.attainment !== null; });
      return {type: 'bar', x: pts.map(function(p){ return p.load; }), y: pts.map(function(p){ return p.attainment * 100; }), name: s.label,
        marker: {color: s.color}, text: pts.map(function(p){ return (p.attainment * 100).toFixed(0) + ' %'; }), textposition: 'outside', cliponaxis: false,
        hovertemplate: '%{x}<br>SLO met by %{y:.1f} % of requests<extra>' + esc(s.label) + '</extra>'};
    });
    var need = null;
    S.forEach(function(s){ if (need === null && s.slo && s.slo.attainment) need = s.slo.attainment * 100; });
    var layout = {barmode: 'group', xaxis: {title: {text: D.axis}, type: 'category'}, yaxis: {title: {text: 'requests meeting the SLO (%)'}, range: [0, 112]}};
    if (need !== null) layout.shapes = [{type: 'line', xref: 'paper', x0: 0, x1: 1, y0: need, y1: need, line: {color: '#444', dash: 'dash', width: 1}}];
    jobs.push(plot('chart-attainment', traces, layout));
  })();

  var EV_COLOURS = {preset: '#888', probe: '#9467bd', key: '#17becf', warning: '#ff7f0e', 'break': '#d62728', error: '#d62728', workload: '#2ca02c'};
  S.forEach(function(s, i){
    var el = document.getElementById('chart-timeline-' + i);
    if (!el) return;
    var T = s.timeline, c = T.cols, rows = [];
    rows.push({title: T.rate ? 'load (C, req/s)' : 'concurrency', traces: [
      {x: c.t, y: c.c, name: 'target C', line: {color: s.color, shape: 'hv'}, hovertemplate: '%{x:.0f} s: C=%{y}<extra></extra>'}]
      .concat(T.rate ? [{x: c.t, y: c.rate, name: 'rate', line: {color: '#555', shape: 'hv', dash: 'dot'}, hovertemplate: '%{x:.0f} s: %{y} req/s<extra></extra>'}] : [])});
    rows.push({title: 'output tok/s', traces: [{x: c.t, y: c.tok_s, name: 'output tok/s', line: {color: s.color}, hovertemplate: '%{x:.0f} s: %{y:.1f} tok/s<extra></extra>'}]});
    rows.push({title: 'TTFT p99 (ms)', traces: [{x: c.t, y: c.ttft_p99, name: 'TTFT p99', line: {color: '#444'}, hovertemplate: '%{x:.0f} s: TTFT p99 %{y:.1f} ms<extra></extra>'}]});
    if (T.server) rows.push({title: 'server requests', traces: [
      {x: c.t, y: c.running, name: 'running', line: {color: '#2ca02c'}, hovertemplate: '%{x:.0f} s: %{y} running<extra></extra>'},
      {x: c.t, y: c.queued, name: 'queued', line: {color: '#d62728'}, hovertemplate: '%{x:.0f} s: %{y} queued<extra></extra>'}]});
    if (T.power) rows.push({title: 'GPU power (W)', traces: [{x: c.t, y: c.power, name: 'GPU power (sum)', line: {color: '#8c564b'}, hovertemplate: '%{x:.0f} s: %{y:.0f} W<extra></extra>'}]});
    var n = rows.length, traces = [], layout = {grid: {rows: n, columns: 1, pattern: 'coupled', ygap: 0.12}, showlegend: true,
      title: {text: esc(s.label) + ' over time', x: 0, font: {size: 13}}, margin: {l: 60, r: 20, t: 40, b: 50}, shapes: [], hovermode: 'x unified'};
    rows.forEach(function(r, k){
      var ax = k === 0 ? '' : String(k + 1);
      layout['yaxis' + ax] = {title: {text: r.title, font: {size: 11}}, automargin: true, rangemode: 'tozero'};
      r.traces.forEach(function(t){ t.yaxis = 'y' + ax; t.xaxis = 'x'; t.mode = 'lines'; traces.push(t); });
    });
    layout.xaxis = {title: {text: 'seconds since the start'}};
    var ev = T.events;
    ev.forEach(function(e){
      if (ev.length <= 80) layout.shapes.push({type: 'line', xref: 'x', yref: 'paper', x0: e.t, x1: e.t, y0: 0, y1: 1, line: {color: EV_COLOURS[e.kind] || '#888', width: 1, dash: 'dot'}, opacity: 0.6});
    });
    if (ev.length) {
      var top = Math.max.apply(null, c.c.filter(function(v){ return v !== null; }).concat([1]));
      traces.push({x: ev.map(function(e){ return e.t; }), y: ev.map(function(){ return top; }), yaxis: 'y', xaxis: 'x', mode: 'markers', name: 'events',
        marker: {symbol: 'triangle-down', size: 10, color: ev.map(function(e){ return EV_COLOURS[e.kind] || '#888'; })},
        text: ev.map(function(e){ return e.kind + ': ' + e.text; }), hovertemplate: '%{x:.1f} s: %{text}<extra></extra>'});
    }
    jobs.push(plot('chart-timeline-' + i, traces, layout));
  });

  form.addEventListener('input', applySlo);
  Promise.all(jobs).then(function(){ applySlo(); root.setAttribute('data-report-ready', '1'); })
    .catch(function(e){ window.__redlineNote('report: ' + e); root.setAttribute('data-report-ready', '1'); });
  window.addEventListener('beforeprint', function(){
    document.querySelectorAll('.js-plotly-plot').forEach(function(gd){ try { Plotly.Plots.resize(gd); } catch (e) {} });
  });
})();
"""


def write_html(sessions: Sequence[ReportSession], path: str | os.PathLike, plotly: str | None = None) -> Path:
    """render() to `path` (a temporary file, then renamed: the page is whole or absent)."""
    text = render(sessions, plotly if plotly is not None else plotly_js())
    p = Path(path)
    tmp = p.with_name(f".{p.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, p)
    return p


__all__ = ["HTML_EXTRA_HINT", "HtmlUnavailable", "ReportSession", "collect", "gpu_count", "html_available",
           "plotly_js", "render", "write_html", "SessionError"]
