"""The Pareto front across configurations (DESIGN.md "Verdicts"): each point is one
configuration at one load, output tok/s per GPU (what the hardware yields) against output
tok/s per user (1000 / TPOT: how fast one answer streams). A point is on the front when no
other point is at least as good on both and better on one; the answer under an SLO is the
front's point with the most tok/s per GPU among those that meet it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence


@dataclass(frozen=True)
class Point:
    label: str  # the configuration
    load: str  # "C=64"
    concurrency: int | None  # its C (None: a rate or trace load)
    tok_s_per_gpu: float
    tok_s_per_user: float


def dominates(p: Point, q: Point) -> bool:
    """p is at least as good as q on both axes and better on one."""
    return (p.tok_s_per_gpu >= q.tok_s_per_gpu and p.tok_s_per_user >= q.tok_s_per_user
            and (p.tok_s_per_gpu > q.tok_s_per_gpu or p.tok_s_per_user > q.tok_s_per_user))


def front(points: Sequence[Point]) -> list[Point]:
    """The non-dominated points, fastest per user first (so each row reads: for this per-user
    speed, this configuration and load give the most tok/s per GPU). Two equal points both stay."""
    kept = [p for p in points if not any(dominates(q, p) for q in points)]
    return sorted(kept, key=lambda p: (-p.tok_s_per_user, -p.tok_s_per_gpu, p.label))


def best_meeting(points: Sequence[Point], meets: Callable[[Point], bool]) -> Point | None:
    """The point with the most tok/s per GPU among those that `meets` accepts (the front's best
    under an SLO: a point off the front that meets it is beaten by a front point that does
    only when that one meets it too, so all points are looked at)."""
    ok = [p for p in points if meets(p)]
    return max(ok, key=lambda p: (p.tok_s_per_gpu, p.tok_s_per_user), default=None)


__all__ = ["Point", "best_meeting", "dominates", "front"]
