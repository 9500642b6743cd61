"""The text of `redline report SESSION_DIR [SESSION_DIR ...]` (tui/cli/handlers.py cmd_report
prints it, and the curves of tui/plots.py).

One session: its step table, break and probe (engine.session.report_session), the per-target
and per-worker tables when the session had several targets or workers, the efficiency table
when GPU telemetry exists, and its curves. Several: one table aligned by concurrency
with the best session per row marked, each session's break and knee, each session's C=1
probe, the efficiency table, and the curves of all of them on the same axes.

Cell formats come from engine/report/session_text.py, so every report agrees; what "best" and
"knee" mean: engine/report/compare.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

from ...engine.api import SessionError, StepResult, step_ms
from ...engine.report.api import (
    Row,
    SessionSummary,
    align_by_load,
    any_power,
    fmt_ms,
    format_break_line,
    format_step_line,
    joules_per_token,
    load_session,
    load_sessions,
    report_session,
    same_workload,
    tokens_per_watt,
    workload_texts,
    workload_warning,
)
from .errors import UsageError

BEST_MARK = "*"
_GROUP_GAP = "   "


def _fmt_eff(v: float | None) -> str:
    """Efficiency figure, 3 significant digits: 0.0512, 1.23, 19.5, 120."""
    if v is None:
        return "-"
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"


def _table(
    headers: Sequence[str],
    groups: Sequence[tuple[str, int]],
    rows: Sequence[Sequence[str]],
    lead: int = 1,
) -> list[str]:
    """Right-aligned columns; `lead` leading columns, then groups of (title, n columns), each
    titled on a line above, columns separated by two spaces and groups by three."""
    widths = [len(h) for h in headers]
    for r in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, r, strict=False)]
    spans: list[tuple[int, int]] = []
    i = lead
    for _, n in groups:
        spans.append((i, i + n))
        i += n
    # a group is at least as wide as its title allows (up to 28 columns of it)
    for (title, _), (a, b) in zip(groups, spans, strict=False):
        need = min(len(title), 28)
        have = sum(widths[a:b]) + 2 * (b - a - 1)
        if need > have:
            widths[a] += need - have  # widen the first column: the numbers stay right-aligned

    def join(cells: Sequence[str]) -> str:
        parts = ["  ".join(c.rjust(w) for c, w in zip(cells[:lead], widths[:lead], strict=False))]
        for a, b in spans:
            parts.append("  ".join(c.rjust(w) for c, w in zip(cells[a:b], widths[a:b], strict=False)))
        return _GROUP_GAP.join(parts).rstrip()

    def group_line(fill: str | None) -> str:
        parts = [" " * (sum(widths[:lead]) + 2 * (lead - 1))]
        for (title, _), (a, b) in zip(groups, spans, strict=False):
            w = sum(widths[a:b]) + 2 * (b - a - 1)
            if fill is None:
                t = title if len(title) <= w else title[: max(w - 1, 0)] + "…"
                parts.append(t.ljust(w))
            else:
                parts.append(fill * w)
        return _GROUP_GAP.join(parts).rstrip()

    out = [group_line(None), group_line("─"), join(headers)]
    out += [join(r) for r in rows]
    return out


def _letter(i: int) -> str:
    """Session tags: [1], [2], ... (not letters: "C" already means concurrency)."""
    return f"[{i + 1}]"


def _cells(step: StepResult | None, best: bool) -> list[str]:
    if step is None:
        return ["-", "-", "-", "-", "-"]
    return [
        f"{step.output_throughput:.1f}" + (BEST_MARK if best else " "),
        step_ms(step, "median_ttft_ms", unit=False),
        step_ms(step, "p99_ttft_ms", unit=False),
        fmt_ms(step.p99_itl_ms),
        str(step.failed),
    ]


def _load_column(rows: Sequence[Row]) -> tuple[str, Callable[[Row], str]]:
    """The first column's header and cells: `C` and `8` when every row is a concurrency,
    `R req/s` and `2.5` when every row is a rate, else `load` and `C=8` / `R=2.5/s` / `x2`."""
    kinds = {r.load.kind for r in rows}
    if kinds <= {"C"}:
        return "C", lambda r: r.load.short
    if kinds == {"R"}:
        return "R req/s", lambda r: r.load.short
    return "load", lambda r: r.load.label


def format_comparison_table(sessions: Sequence[SessionSummary], rows: Sequence[Row] | None = None) -> str:
    """The aligned table: the load (C, or R for sessions over rates), then per session tok/s
    (best marked), TTFT p50/p99, ITL p99, errors."""
    rows = align_by_load(sessions) if rows is None else rows
    head, cell = _load_column(rows)
    headers = [head] + ["tok/s ", "TTFT p50", "p99", "ITL p99", "err"] * len(sessions)
    groups = [(f"{_letter(i)} {s.label}", 5) for i, s in enumerate(sessions)]
    body = []
    for r in rows:
        cells = [cell(r)]
        for i, step in enumerate(r.cells):
            cells += _cells(step, r.best == i)
        body.append(cells)
    lines = _table(headers, groups, body)
    if not rows:
        lines.append("(no steps in any session)")
    at = "C" if head == "C" else "rate" if head.startswith("R") else "load"
    best = (f"{BEST_MARK} = most tok/s at that {at}" if same_workload(sessions)
            else f"no {BEST_MARK}: the sessions ran different workloads")
    lines.append(f"latencies in ms; err = failed requests; {best}")
    return "\n".join(lines)


def _pair_table(sessions: Sequence[SessionSummary], rows: Sequence[Row] | None, title: str, names: tuple[str, str],
                cells: Callable[[StepResult], tuple[str, str] | None]) -> str:
    """A table of two figures per session, aligned by load (C, or R over rates); `cells(step)`
    gives the two, or None for a step without them ("-")."""
    rows = align_by_load(sessions) if rows is None else rows
    head, cell = _load_column(rows)
    headers = [head] + list(names) * len(sessions)
    groups = [(f"{_letter(i)} {s.label}", 2) for i, s in enumerate(sessions)]
    body = []
    for r in rows:
        line = [cell(r)]
        for step in r.cells:
            pair = cells(step) if step is not None else None
            line += list(pair) if pair is not None else ["-", "-"]
        body.append(line)
    return "\n".join([title, *_table(headers, groups, body)])


def format_efficiency_table(sessions: Sequence[SessionSummary], rows: Sequence[Row] | None = None) -> str:
    """tok/s per W and J per output token per step, per session; "" without GPU telemetry."""
    if not any_power(sessions):
        return ""
    return _pair_table(
        sessions, rows, "efficiency (GPU telemetry): tok/s per W of GPU power (= tokens per joule), J per output token",
        ("tok/s/W", "J/tok"), lambda st: (_fmt_eff(tokens_per_watt(st)), _fmt_eff(joules_per_token(st))),
    )


def format_goodput_table(sessions: Sequence[SessionSummary], rows: Sequence[Row] | None = None) -> str:
    """Goodput (output tok/s of requests meeting the SLO) and SLO attainment per step, per
    session; "" when no session recorded SLOs (engine/measure/slo.py)."""
    if not any(st.output_goodput is not None for s in sessions for st in s.steps):
        return ""

    def cells(st: StepResult) -> tuple[str, str] | None:
        if st.output_goodput is None:
            return None
        att = "-" if st.slo_attainment is None else f"{st.slo_attainment * 100:.0f} %"
        return f"{st.output_goodput:.1f}", att

    return _pair_table(sessions, rows, "goodput (SLOs): output tok/s of the requests that met every SLO bound, and their share",
                       ("good tok/s", "SLO met"), cells)


def _knee_note(s: SessionSummary) -> str:
    """The session's knee, as summary.json recorded it (engine/rules/verdicts.py): one per
    workload when it ran more than one, the session's last."""
    if not s.steps:
        return "no knee (no steps)"
    return "; then ".join(k.describe() for k in s.knees)


def format_comparison(sessions: Sequence[SessionSummary]) -> str:
    """The whole multi-session report text (no curves)."""
    out = ["sessions"]
    for i, (s, wl) in enumerate(zip(sessions, workload_texts(sessions), strict=False)):
        where = str(s.path) if s.path is not None else "(live)"
        tparts = [str(s.target[k]) for k in ("url", "model") if s.target.get(k)]
        out.append(f"  {_letter(i)} {s.label}  {where}" + (f"  ({'  '.join(tparts)})" if tparts else "") + f"  workload: {wl}")
    rows = align_by_load(sessions)
    warning = workload_warning(sessions, [_letter(i) for i in range(len(sessions))])
    if warning:  # comparable, or said so (engine/report/comparable.py)
        out.append(warning)
    out += ["", format_comparison_table(sessions, rows)]
    for extra in (format_goodput_table(sessions, rows), format_efficiency_table(sessions, rows)):
        if extra:
            out += ["", extra]
    out += ["", "break and knee"]
    for i, s in enumerate(sessions):
        out.append(f"  {_letter(i)} {format_break_line(s.break_result)}; {_knee_note(s)}")
    out += ["", "C=1 probe"]
    for i, s in enumerate(sessions):
        out.append(f"  {_letter(i)} " + (format_step_line(s.probe) if s.probe is not None else "none"))
    return "\n".join(out)


TARGET_COLUMNS = ("target", "requests", "errors", "tok/s", "TTFT p50", "TTFT p99", "E2E p50", "E2E p99", "")


def format_targets_table(targets: Sequence[dict]) -> str:
    """summary.json's `targets` (one entry per --url) as a table, whole-session figures; ""
    with one target (the step table says it all)."""
    if len(targets) < 2:
        return ""

    def num(v: object) -> str:
        return "-" if v is None else str(v)

    def tok(v: float | None) -> str:
        return "-" if v is None else f"{v:.1f}"

    rows = [[str(t.get("url") or "?"), num(t.get("requests")), num(t.get("errors")), tok(t.get("output_tok_s")),
             fmt_ms(t.get("ttft_p50_ms")), fmt_ms(t.get("ttft_p99_ms")), fmt_ms(t.get("e2e_p50_ms")), fmt_ms(t.get("e2e_p99_ms")),
             "GONE" if t.get("gone") else ""] for t in targets]
    widths = [max(len(h), *(len(r[j]) for r in rows)) for j, h in enumerate(TARGET_COLUMNS)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) if j == 0 else c.rjust(w) if j < len(cells) - 1 else c
                         for j, (c, w) in enumerate(zip(cells, widths, strict=False))).rstrip()

    gone = sum(1 for t in targets if t.get("gone"))
    out = [f"targets ({len(targets)}" + (f", {gone} gone at the end" if gone else "") + ")", line(TARGET_COLUMNS)]
    out += [line(r) for r in rows]
    out.append("whole session; latencies in ms; errors = failed requests; GONE = not answering when the session ended")
    return "\n".join(out)


def session_targets_table(session_dir: Path) -> str:
    """The per-target table of one session's summary.json; "" with one target or none recorded."""
    from ...engine.report.api import load_summary

    try:
        summary = load_summary(session_dir)
    except (SessionError, OSError, ValueError):
        return ""
    targets = summary.get("targets") if isinstance(summary, dict) else None
    if not isinstance(targets, list):
        return ""
    return format_targets_table([t for t in targets if isinstance(t, dict)])


WORKER_COLUMNS = ("worker", "node", "share", "requests", "tok/s", "lag p99", "CPU %", "")


def format_workers_table(workers: Sequence[dict]) -> str:
    """summary.json's `workers` (--workers N, --ray) as a table: each worker's node, its share
    of C at the end, and its requests, tok/s, lag p99 and CPU over the session; "" without."""
    if not workers:
        return ""

    def num(v: object) -> str:
        return "-" if v is None else str(v)

    def one(v: float | None) -> str:
        return "-" if v is None else f"{v:.1f}"

    rows = []
    for w in workers:
        dead = w.get("alive") is False
        rows.append([f"w{w.get('worker', '?')}", str(w.get("node") or "?"), "-" if dead else num(w.get("share")),
                     num(w.get("requests")), one(w.get("output_tok_s")), "-" if w.get("lag_p99_ms") is None else fmt_ms(w["lag_p99_ms"]),
                     one(w.get("cpu_pct")), "DEAD" if dead else ""])
    widths = [max(len(h), *(len(r[j]) for r in rows)) for j, h in enumerate(WORKER_COLUMNS)]
    left = 2  # worker and node: left-aligned

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) if j < left else c.rjust(w) if j < len(cells) - 1 else c
                         for j, (c, w) in enumerate(zip(cells, widths, strict=False))).rstrip()

    n_dead = sum(1 for w in workers if w.get("alive") is False)
    nodes = {str(w.get("node")) for w in workers if w.get("node")}
    out = [f"workers ({len(workers)}" + (f" on {len(nodes)} nodes" if len(nodes) > 1 else "")
           + (f", {n_dead} dead" if n_dead else "") + ")", line(WORKER_COLUMNS)]
    out += [line(r) for r in rows]
    out.append("share = its part of C at the end (rate mode: of the in-flight cap); requests = ended there (any outcome); "
               "tok/s and CPU % over the session")
    out.append("lag p99 in ms: a chunk's arrival after the server stamped it (- when the server does not stamp chunks);"
               " DEAD = died, its share went to the others")
    return "\n".join(out)


def _summary_list(session_dir: Path, key: str) -> list[dict]:
    """summary.json's `key` list (its dict entries), [] when absent or unreadable."""
    from ...engine.report.api import load_summary

    try:
        summary = load_summary(session_dir)
    except (SessionError, OSError, ValueError):
        return []
    got = summary.get(key) if isinstance(summary, dict) else None
    return [x for x in got if isinstance(x, dict)] if isinstance(got, list) else []


def session_workers_table(session_dir: Path) -> str:
    """The per-worker table of one session's summary.json; "" without workers recorded."""
    return format_workers_table(_summary_list(session_dir, "workers"))


def load_compare_session(path: Path | None) -> SessionSummary | None:
    """`--compare SESSION_DIR` for the TUI: the session, None without the flag, or a one-line
    UsageError (exit 2) before anything starts."""
    if path is None:
        return None
    try:
        return load_session(path)
    except SessionError as exc:
        raise UsageError(f"--compare: {exc}") from None


def report_text(session_dirs: Sequence[Path]) -> tuple[str, list[SessionSummary]]:
    """The text of `redline report` (curves apart) and the sessions it read.

    One session: its step table, break and probe (engine.session.report_session), then the
    per-target and per-worker tables, the efficiency table and its knee. Several: format_comparison. Raises SessionError."""
    dirs = list(session_dirs)
    sessions = load_sessions(dirs)
    if len(dirs) != 1:
        return format_comparison(sessions), sessions
    text = report_session(dirs[0])
    targets = session_targets_table(dirs[0])
    if targets:
        text += "\n\n" + targets
    workers = session_workers_table(dirs[0])
    if workers:
        text += "\n\n" + workers
    eff = format_efficiency_table(sessions)
    if eff:
        text += "\n\n" + eff
    return text, sessions
