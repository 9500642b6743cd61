"""The comparison of a sweep, as text: one row per configuration (`redline report OUT`, and the
end of `redline sweep --headless`)."""

from __future__ import annotations

from typing import Any

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
        return "  ".join(c.ljust(w) if j < 2 else c.rjust(w) for j, (c, w) in enumerate(zip(cells, widths))).rstrip()

    head = doc.get("sweep") or {}
    out = [f"sweep: {len(entries)} configurations, preset {head.get('preset') or '?'}"
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
    return "\n".join(out)
