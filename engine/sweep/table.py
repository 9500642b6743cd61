"""The comparison of a sweep, as text: one row per configuration (`redline report OUT`, and the
end of `redline sweep --headless`)."""

from __future__ import annotations

from typing import Any

from ..fmt import ms, rate

COLUMNS = ("configuration", "status", "start s", "knee", "last good", "break", "max tok/s", "at C", "max SLO C",
           "probe TTFT", "probe ITL")


def _c(v: Any) -> str:
    return "-" if v is None else f"C={v}"


def row(e: dict[str, Any]) -> list[str]:
    brk = "-" if not e.get("break_reason") else f"{e['break_reason']} at C={e.get('break_concurrency')}"
    knee = _c(e.get("knee_concurrency")) if e.get("knee_concurrency") is not None else ("-" if not e.get("knee_reason") else "none")
    return [
        e.get("label", "?"), e.get("status", "?"),
        "-" if e.get("startup_s") is None else f"{e['startup_s']:.1f}",
        knee, _c(e.get("last_good_concurrency")), brk,
        "-" if e.get("max_output_throughput") is None else rate(e["max_output_throughput"]),
        "-" if e.get("max_throughput_concurrency") is None else str(e["max_throughput_concurrency"]),
        "-" if e.get("max_slo_concurrency") is None else str(e["max_slo_concurrency"]),
        ms(e.get("probe_ttft_ms")), ms(e.get("probe_itl_ms")),
    ]


def format_sweep(doc: dict[str, Any]) -> str:
    """The sweep's table, then each configuration's knee reason, and why any failed."""
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
        if e.get("knee_reason"):
            out.append(f"{e['label']}: {'knee ' + _c(e['knee_concurrency']) if e.get('knee_concurrency') is not None else 'no knee'} ({e['knee_reason']})")
        if e.get("status") == "failed_to_start":
            out.append(f"{e['label']}: failed to start: {e.get('why', '')}")
            out += [f"    {ln}" for ln in (e.get("log_tail") or [])[-5:]]
    return "\n".join(out)
