"""`OUT/sweep.json`: one entry per configuration, written after each (atomically), so a sweep
stopped at any moment keeps every configuration it finished.

    {"sweep": {"serve", "preset", "configs": N, "started_at", "ended_at", "end_reason"},
     "configurations": [{"label", "values", "status", "command", "url", "startup_s",
                         "knee_concurrency", "knee_reason", "max_throughput_concurrency",
                         "max_output_throughput", "last_good_concurrency", "break_reason",
                         "break_concurrency", "max_slo_concurrency", "probe_ttft_ms",
                         "probe_itl_ms", "session_dir", "log_tail", "why",
                         "lost_rows", "write_error"}, ...]}

`status`: `completed` (the preset ran; a server that died mid-run is its break, `server_gone`),
`failed_to_start` (it exited, or was not ready in time: `why` and the last lines of its log),
`stopped` (a signal ended the sweep during it: what it measured is in its session),
`not_run` (the sweep ended before it). `lost_rows` and `write_error`: its session log could not
keep every row (a write or fsync error; its meta.json says so, and its run exited 5), `why` then
says "session saved, N rows lost: REASON".
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from ..rules.verdicts import knee_from_summary, one_per_load, recorded_max_slo, session_knees
from ..session import SUMMARY
from ..session.writer import loss_line, recorded_loss, write_text_atomic
from .spec import Config

SWEEP_FILE = "sweep.json"
COMPLETED, FAILED_TO_START, STOPPED, NOT_RUN = "completed", "failed_to_start", "stopped", "not_run"


def entry(config: Config, status: str, *, startup_s: float | None = None, session_dir: Path | None = None,
          why: str = "", tail: tuple[str, ...] = ()) -> dict[str, Any]:
    """One configuration's entry: its figures from its session's summary.json, when it ran."""
    e: dict[str, Any] = {
        "label": config.label, "values": dict(config.values), "status": status,
        "command": list(config.command), "url": config.url,
        "startup_s": None if startup_s is None else round(startup_s, 3),
        "session_dir": str(session_dir) if session_dir is not None else None,
    }
    if why:
        e["why"] = why
    if tail:
        e["log_tail"] = list(tail)
    summ = _summary(session_dir)
    if summ is not None:
        e.update(figures(summ))
    loss = recorded_loss(session_dir) if session_dir is not None else None
    if loss is not None:
        e["lost_rows"], e["write_error"] = loss
    return e


def loss_why(session_dir: Path | None) -> str:
    """"session saved, N rows lost: REASON" of a session whose log lost rows, else ""."""
    loss = recorded_loss(session_dir) if session_dir is not None else None
    return f"session saved, {loss_line(*loss)}" if loss is not None else ""


def _summary(session_dir: Path | None) -> dict | None:
    if session_dir is None:
        return None
    p = session_dir / SUMMARY
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def figures(summ: dict) -> dict[str, Any]:
    """What the comparison reads of one session: the knee, the break and last good, the most
    tok/s, the largest C meeting the SLO, the probe's TTFT and ITL."""
    from ..measure.step_result import StepResult

    steps = [StepResult.from_dict(d) for d in summ.get("steps") or [] if isinstance(d, dict)]
    steps = [s for s in steps if s.phase != "probe"]
    k = knee_from_summary(summ) or session_knees(steps)[-1]
    pts = one_per_load(steps)
    best = max(pts.values(), key=lambda s: s.output_throughput, default=None)
    brk = summ.get("break") or {}
    v, _ = recorded_max_slo(summ, steps, "C")  # the one judge of the largest load meeting the SLO
    max_slo = None if v is None else int(v)
    probe = summ.get("probe") or {}
    return {
        "knee_concurrency": int(k.value) if k.value is not None and k.kind == "C" else None,
        "knee_reason": k.reason,
        "max_throughput_concurrency": int(k.max_throughput) if k.max_throughput is not None and k.kind == "C" else None,
        "max_output_throughput": None if best is None else round(best.output_throughput, 3),
        "last_good_concurrency": brk.get("last_good_concurrency"),
        "break_reason": brk.get("reason"),
        "break_concurrency": brk.get("concurrency"),
        "max_slo_concurrency": max_slo,
        "probe_ttft_ms": probe.get("median_ttft_ms"),
        "probe_itl_ms": probe.get("median_itl_ms"),
    }


class SweepFile:
    """sweep.json under OUT, rewritten after each configuration."""

    def __init__(self, out: Path, head: dict[str, Any], configs: list[Config]) -> None:
        self.path = out / SWEEP_FILE
        self.head = {**head, "configs": len(configs), "started_at": _now(), "ended_at": None, "end_reason": None}
        self.entries: list[dict[str, Any]] = [entry(c, NOT_RUN) for c in configs]

    def set(self, i: int, e: dict[str, Any]) -> None:
        self.entries[i] = e
        self.write()

    def end(self, reason: str) -> None:
        self.head.update(ended_at=_now(), end_reason=reason)
        self.write()

    def write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(self.path, json.dumps({"sweep": self.head, "configurations": self.entries}, indent=2) + "\n")


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def load_sweep(out: str | Path) -> dict[str, Any] | None:
    """OUT/sweep.json, or None when OUT is not a sweep."""
    p = Path(out) / SWEEP_FILE
    try:
        if not p.is_file():
            return None
        d = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # a name too long, unreadable, not JSON: not a sweep
        return None
    return d if isinstance(d, dict) and isinstance(d.get("configurations"), list) else None
