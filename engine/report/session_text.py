"""A session directory's summary read back, and `redline report DIR`'s text (the step table
itself: engine/rules/step_text.py)."""

from __future__ import annotations

import json
import os
from typing import Any

from ..rules.step_text import format_percentile_table, format_step_table, session_percentiles
from ..rules.verdicts import knees_from_summary
from ..session.paths import META, SUMMARY, SessionError, check_session_dir


def load_summary(session_dir: str | os.PathLike) -> dict[str, Any]:
    """summary.json as a dict. A session that ended before its first summary gives
    {"target": meta's target, "label": meta's label, "steps": [], "break": None, "probe": None}."""
    d = check_session_dir(session_dir)
    p = d / SUMMARY
    if not p.exists():
        meta = _load_json(d / META)
        return {
            "target": meta.get("target") or {},
            "label": meta.get("label") or "",
            "steps": [],
            "break": None,
            "probe": None,
        }
    s = _load_json(p)
    s.setdefault("steps", [])
    s.setdefault("break", None)
    s.setdefault("probe", None)
    return s


def _load_json(p: os.PathLike) -> dict[str, Any]:
    try:
        with open(p, encoding="utf-8") as f:
            obj = json.load(f)
    except OSError as e:
        raise SessionError(f"cannot read {p}: {e.strerror}") from None
    except ValueError as e:
        raise SessionError(f"{p} is not valid JSON: {e}") from None
    if not isinstance(obj, dict):
        raise SessionError(f"{p} is not a JSON object")
    return obj


def report_session(session_dir: str | os.PathLike) -> str:
    """`redline report`: a header naming the session, then format_step_table()."""
    d = check_session_dir(session_dir)
    meta = _load_json(d / META)
    summ = load_summary(d)
    target = summ.get("target") or meta.get("target") or {}
    head = [f"session {d}"]
    label = summ.get("label") or meta.get("label")
    if label:
        head[0] += f"  ({label})"
    tparts = [str(target[k]) for k in ("url", "model", "api", "kind") if target.get(k)]
    if tparts:
        head.append("target  " + "  ".join(tparts))
    when = f"started {meta.get('started_at') or '?'}"
    if meta.get("ended_at"):
        when += f"  ended {meta['ended_at']}"
        if meta.get("end_reason"):
            when += f" ({meta['end_reason']})"
    else:
        when += "  (still running, or ended without closing its log)"
    head.append(when)
    table = format_step_table(summ.get("steps") or [], summ.get("break"), summ.get("probe"), knees_from_summary(summ), summ.get("cause"))
    # the percentiles the run asked for beyond the table's p50/p99 (`--percentiles`)
    more = format_percentile_table(summ.get("steps") or [], session_percentiles(meta))
    return "\n".join(head) + "\n\n" + table + ("\n\n" + more if more else "")
