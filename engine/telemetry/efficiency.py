"""Summed GPU power, the base of every efficiency figure.

A step's tokens per joule and joules per token are computed where steps are
(engine/measure/accumulator.py) and read back by ``tokens_per_watt`` / ``joules_per_token`` in
engine/report/compare.py; the live tok/J in the timeline is output tok/s over this sum.
"""

from __future__ import annotations

from collections.abc import Sequence

from .types import GpuSample

__all__ = ["total_power_w"]


def total_power_w(gpus: Sequence[GpuSample]) -> float | None:
    """Sum of the GPUs' power draw; None when no GPU reports power."""
    powers = [g.power_w for g in gpus if g.power_w is not None]
    return float(sum(powers)) if powers else None
