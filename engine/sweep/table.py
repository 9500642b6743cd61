"""The comparison of a sweep, as text: one row per configuration (`redline report OUT`, and the
end of `redline sweep --headless`)."""

from __future__ import annotations

from typing import Any, Callable

from ..fmt import ms, rate

COLUMNS = ("configuration", "status", "start", "knee C", "good C", "break at C", "max tok/s", "at C")  # start: seconds to ready
# sweep.json's statuses, in the table's fewer letters (the table fits 80 columns)
STATUS_WORDS = {"completed": "done", "failed_to_start": "no start", "stopped": "stopped", "not_run": "not run"}


def _c(v: Any) -> str:
    return "-" if v is None else f"C={v}"


def _n(v: Any) -> str:
    return "-" if v is None else str(v)


def row(e: dict[str, Any]) -> list[str]:
    brk = "-" if not e.get("break_reason") else f"{e['break_reason']} {_n(e.get('break_concurrency'))}"
    knee = _n(e.get("knee_concurrency")) if e.get("knee_concurrency") is not None else ("-" if not e.get("knee_reason") else "none")
    status = str(e.get("status", "?"))
    return [
        e.get("label", "?"), STATUS_WORDS.get(status, status),
        "-" if e.get("startup_s") is None else f"{e['startup_s']:.1f}",
        knee, _n(e.get("last_good_concurrency")), brk,
        "-" if e.get("max_output_throughput") is None else rate(e["max_output_throughput"]),
        _n(e.get("max_throughput_concurrency")),
    ]


def details(e: dict[str, Any]) -> str | None:
    """A configuration's line under the table: its knee and why, its C=1 probe, the largest C
    meeting the SLO (what the table has no room for at 80 columns)."""
    bits = []
    if e.get("knee_reason"):
        bits.append(f"{'knee ' + _c(e['knee_concurrency']) if e.get('knee_concurrency') is not None else 'no knee'} ({e['knee_reason']})")
    if e.get("probe_ttft_ms") is not None or e.get("probe_itl_ms") is not None:
        bits.append(f"probe C=1 TTFT {ms(e.get('probe_ttft_ms'))}, ITL {ms(e.get('probe_itl_ms'))}")
    if e.get("max_slo_concurrency") is not None:
        bits.append(f"largest C meeting the SLO {e['max_slo_concurrency']}")
    return f"{e.get('label', '?')}: {'; '.join(bits)}" if bits else None


def format_sweep(doc: dict[str, Any]) -> str:
    """The sweep's table (80 columns: a configuration's label permitting), then a line per
    configuration (its knee and why, its probe, its largest C meeting the SLO), and why any
    failed to start."""
    entries = [e for e in doc.get("configurations") or [] if isinstance(e, dict)]
    rows = [row(e) for e in entries]
    widths = [max([len(h)] + [len(r[j]) for r in rows]) for j, h in enumerate(COLUMNS)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if j < 2 else c.rjust(w) for j, (c, w) in enumerate(zip(cells, widths, strict=False))).rstrip()

    head = doc.get("sweep") or {}
    out = [f"sweep: {len(entries)} configuration{'' if len(entries) == 1 else 's'}, preset {head.get('preset') or '?'}"
           + (f" ({head['end_reason']})" if head.get("end_reason") else " (running, or ended without closing)")]
    out += [line(list(COLUMNS)), line(["-" * w for w in widths])]
    out += [line(r) for r in rows] or ["(no configuration)"]
    for e in entries:
        text = details(e)
        if text:
            out.append(text)
        if e.get("status") == "failed_to_start":
            out.append(f"{e['label']}: failed to start: {e.get('why', '')}")
            out += [f"    {ln}" for ln in (e.get("log_tail") or [])[-5:]]
    more = format_answers(doc, entries)
    return "\n".join(out) + (f"\n\n{more}" if more else "")


def _pm(p: dict[str, Any], name: str, fmt: Callable[[float | None], str]) -> str:
    """`981 ±31`: a point's mean and its interval's half width (a t interval is symmetric)."""
    v, ci = p.get(name), p.get(name + "_ci")
    if v is None:
        return "-"
    text = ("≥" if p.get(name + "_bound") else "") + fmt(v)
    return text + (f" ±{fmt((ci[1] - ci[0]) / 2)}" if ci else "")


def format_points(e: dict[str, Any]) -> list[str]:
    """One configuration's loads over its repeats: mean ± 95 % interval, CV of tok/s."""
    pts = [p for p in e.get("points") or [] if isinstance(p, dict)]
    if not pts:
        return []
    gpus = f"{e['gpus']} GPUs ({e.get('gpus_from')})" if e.get("gpus") else "GPUs unknown: --gpus N"
    spread = e.get("knee_spread")
    knee = f", knees C={spread[0]}..{spread[1]}" if spread and spread[0] != spread[1] else ""
    out = [f"{e.get('label')}: {e.get('repeats', 1)} repeats, {gpus}{knee}"]
    head = ["load", "n", "out tok/s", "CV", "TTFT p99 ms", "TPOT ms", "tok/s/GPU", "tok/s/user"]
    one = lambda v: f"{v:.1f}"
    cells = [[p.get("load", "?"), str(p.get("n", 0)), _pm(p, "output_tok_s", rate),
              "-" if p.get("output_tok_s_cv") is None else f"{100 * p['output_tok_s_cv']:.1f} %",
              _pm(p, "ttft_p99_ms", one), _pm(p, "tpot_ms", one), rate(p.get("tok_s_per_gpu")), rate(p.get("tok_s_per_user"))]
             for p in pts]
    widths = [max(len(h), *(len(c[j]) for c in cells)) for j, h in enumerate(head)]
    for cs in [head, *cells]:
        out.append("  " + "  ".join(c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in enumerate(zip(cs, widths, strict=False))).rstrip())
    return out


def format_answers(doc: dict[str, Any], entries: list[dict[str, Any]] | None = None) -> str:
    """The repeats' loads (when a configuration ran more than once), the comparisons (one line
    per pair, then each), the Pareto front and the answer under the SLO, and what differs
    between the fingerprints."""
    from ..telemetry.fingerprint import differences_text
    from .answers import comparison_table, pair_lines, pareto_lines

    entries = entries if entries is not None else [e for e in doc.get("configurations") or [] if isinstance(e, dict)]
    out: list[str] = []
    if any((e.get("repeats") or 1) > 1 for e in entries):
        out.append("repeats: mean ± its 95 % t interval; CV = standard deviation / mean of output tok/s")
        for e in entries:
            lines = format_points(e)
            out += lines
    rows = doc.get("comparisons") or []
    if rows:
        out += ["", "comparisons (a vs b: a's change from b; Holm-Bonferroni over all of them):", *pair_lines(rows)]
        if any(r.get("ci_pct") for r in rows):
            out += comparison_table(rows)
    front = pareto_lines(doc.get("pareto") or [], doc.get("slo_answer"))
    if front:
        out += ["", *front]
    diff = differences_text([fp for e in entries if isinstance(fp := e.get("fingerprint"), dict)])
    if diff:
        out += ["", diff]
    return "\n".join(out).strip("\n")
