"""The HTML report's data (engine/report/html.py): a session directory read for the page
(`collect`, the only I/O) and the JSON the page's charts draw (`session_data`, per session:
steps by load, knee, largest load meeting the SLO, break, GPUs, the timeline and its events).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ..measure.slo import Slo
from ..measure.step_result import StepResult
from ..rules.verdicts import recorded_max_slo, slo_verdict
from ..session.paths import META, SUMMARY
from .compare import SessionSummary, load_session, step_load

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22")
EVENT_KINDS = ("preset", "probe", "key", "warning", "break", "error", "workload")
# a longer timeline is thinned (every n-th row) to keep the page light: ~58 bytes a row, so two
# sessions' timelines add at most ~175 kB to the 1.19 MB of plotly.js (more points than a chart
# is wide in pixels)
MAX_TIMELINE_POINTS = 1500


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


def step_data(s: StepResult, kind: str, slo: Slo | None = None) -> dict[str, Any]:
    """One step as the page reads it; with the session's recorded SLO, the engine's own
    verdict on it (`slo_state`: pass, fail or unknown, and `slo_why`: engine/rules/verdicts.py
    slo_verdict), which the page shows while its selector holds that SLO."""
    load = step_load(s)
    total = s.completed + s.failed
    d: dict[str, Any] = {
        "x": load.value, "load": load.label, "kind": load.kind, "c": s.concurrency,
        "tok_s": _r(s.output_throughput, 2), "goodput": _r(s.output_goodput, 2), "req_s": _r(s.request_throughput),
        "attainment": s.slo_attainment, "completed": s.completed, "failed": s.failed,
        "error_rate": _r(s.failed / total, 5) if total else None, "duration_s": _r(s.duration_s, 1),
        "running": _r(s.server_max_running, 1), "power_w": _r(s.mean_power_w, 1), "steady": s.steady,
        "client_limited": s.client_limited, "index": s.index,
    }
    if slo is not None:
        d["slo_state"], d["slo_why"] = slo_verdict(slo, s)
    for key, name in LAT:
        d[key] = _r(getattr(s, name))
        d[key + "_bound"] = s.bound(name)
    # tok/s per user: one answer streams 1 token per TPOT (DESIGN.md "Verdicts": the Pareto
    # front's axis, the sweep's too: engine/sweep/points.py)
    d["per_user"] = _r(1000.0 / s.mean_tpot_ms, 3) if s.mean_tpot_ms else None
    return d


def gpu_count(meta: dict[str, Any], timeline: Sequence[dict[str, Any]] = ()) -> int | None:
    """GPUs serving the model: tp x pp (x dp without DP attention) from the server info in
    meta.json, else the GPUs the telemetry reported; None when unknown."""
    info = got if isinstance(got := meta.get("server_info"), dict) else {}
    sim = got if isinstance(got := info.get("redline_sim"), dict) else {}
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


def timeline_data(rows: Sequence[dict[str, Any]], events: Sequence[dict[str, Any]]) -> dict[str, Any]:
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


def describe_slo(d: dict[str, Any]) -> str:
    try:
        return Slo(**d).describe()
    except TypeError:
        return json.dumps(d)


def recorded_slo(summary: dict[str, Any]) -> Slo | None:
    """The SLO summary.json recorded (None: none, or not readable)."""
    d = summary.get("slo")
    if not isinstance(d, dict) or not d:
        return None
    try:
        return Slo(**d)
    except TypeError:
        return None


def session_data(i: int, rs: ReportSession, kind: str) -> dict[str, Any]:
    s = rs.session
    slo = recorded_slo(rs.summary)
    steps = [step_data(st, kind, slo) for key, st in s.by_load().items() if key.kind == kind]
    other = sum(1 for key in s.by_load() if key.kind != kind)
    # engine/rules/verdicts.py: the one knee (one per workload), as summary.json recorded it
    knees = [{"x": k.value, "how": k.reason, "workload": k.workload} for k in s.knees if k.value is not None and k.kind == kind]
    k = s.knee
    knee = {"x": k.value, "how": k.reason} if k.value is not None and k.kind == kind else None
    v, how = recorded_max_slo(rs.summary, s.steps, kind)
    max_slo = {"x": v, "how": how} if v is not None else None
    brk = None
    b = s.break_result
    if b is not None:
        x = b.rate if kind == "R" else (b.concurrency if b.rate is None else None)
        brk = {"x": x, "reason": b.reason, "detail": b.detail, "where": b.where}
    gpus = gpu_count(rs.meta, rs.timeline)
    return {
        "label": s.label, "color": COLOURS[i % len(COLOURS)], "steps": steps, "left_out": other,
        "knee": knee, "knees": knees if len(s.knees) > 1 else [], "max_slo": max_slo, "break": brk, "gpus": gpus,
        "knee_reason": k.reason,
        "max_throughput": k.max_throughput if k.kind == kind else None,
        "timeline": timeline_data(rs.timeline, rs.events),
        "slo": rs.summary.get("slo") if isinstance(rs.summary.get("slo"), dict) else None,
        # the selector's values that stand for the recorded SLO: while it holds them, the page
        # shows the engine's verdicts (slo_state), not its own
        "slo_form": slo_form(rs.summary.get("slo")) if slo is not None else None,
    }


def main_kind(sessions: Sequence[ReportSession]) -> str:
    counts: dict[str, int] = {}
    for rs in sessions:
        for key in rs.session.by_load():
            counts[key.kind] = counts.get(key.kind, 0) + 1
    if not counts:
        return "C"
    return max(counts, key=lambda k: (counts[k], k == "C"))


def slo_form(d: Any) -> dict[str, Any]:
    """A recorded SLO as the selector's values: its step bounds, and the attainment when it
    has per-request bounds."""
    out: dict[str, Any] = {}
    if not isinstance(d, dict):
        return out
    for k, page in (("ttft_p99_ms", "ttft_p99"), ("itl_p99_ms", "itl_p99"), ("e2e_p99_ms", "e2e_p99")):
        if d.get(k):
            out[page] = d[k]
    if any(d.get(k) for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")):
        out["attainment"] = round(100 * float(d.get("attainment", 0.9)), 2)
    return out


def default_slo(sessions: Sequence[ReportSession]) -> dict[str, Any]:
    """The selector's starting bounds: the first recorded SLO's step bounds and attainment."""
    for rs in sessions:
        d = rs.summary.get("slo")
        if isinstance(d, dict) and d:
            return slo_form(d)
    return {}
