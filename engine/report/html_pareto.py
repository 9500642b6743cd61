"""The HTML page's Pareto front (engine/report/html.py's Pareto chart): across every session
on the page, each step a point of output tok/s per GPU (total tok/s when a session's GPU count
is not known) against tok/s per user (1000 / TPOT); a point is on the front when no other
point is at least as good on both and better on one (engine/rules/pareto.py, the sweep's
front). The page marks the front and dims the points it beats."""

from __future__ import annotations

from typing import Any

from ..rules.pareto import Point, front


def mark_front(sessions: list[dict[str, Any]]) -> None:
    """Set each session's `front`: for each of its steps, whether it is on the front."""
    per_gpu = all(s.get("gpus") for s in sessions)
    pts = []
    for i, s in enumerate(sessions):
        g = s["gpus"] if per_gpu else 1
        for j, st in enumerate(s["steps"]):
            if st.get("per_user") is not None and st.get("tok_s") is not None:
                pts.append(Point(f"{i}:{j}", str(st.get("load")), None, st["tok_s"] / g, st["per_user"]))
    on = {p.label for p in front(pts)}
    for i, s in enumerate(sessions):
        s["front"] = [f"{i}:{j}" in on for j in range(len(s["steps"]))]


__all__ = ["mark_front"]
