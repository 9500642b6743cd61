"""Could redline's own delay have moved a step's figures enough to matter? (its `client_limited`)

A second whose client health says redline's timings were suspect (engine/telemetry/client_health.py:
its CPU, its loop held, the machine busy) measured its event loop's lag. That lag is what the
client could have added to a latency, and only to some of them:

- a request's send time is stamped when its task runs and its bytes leave a loop turn or more
  later: TTFT and E2E may be too high by up to the lag, always;
- a token's arrival is stamped by the kernel where it can be (plain http:// on Linux,
  engine/client/kstamp.py): ITL, TPOT and chunk gaps are then the kernel's, whatever the loop's
  lag; stamped when the loop reads (https://), they may be off by up to the lag too.

A step is client-limited when that could move one of its figures by more than its distance to
its limit (the verdict could flip), or by more than DOUBT_SHARE of it (the figure itself is in
doubt): a 75 s TTFT, 65 s over its 10 s limit, is no doubt for a 21 ms lag; a 40 ms ITL read
by the loop is. An unknown lag is a doubt.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["DOUBT_SHARE", "SEND_STAMPED", "READ_STAMPED", "client_doubted"]

DOUBT_SHARE = 0.10  # a lag over this share of a figure puts the figure in doubt
SEND_STAMPED = ("median_ttft_ms", "p99_ttft_ms", "mean_ttft_ms", "median_e2e_latency_ms", "p99_e2e_latency_ms")
READ_STAMPED = ("median_itl_ms", "p99_itl_ms", "mean_tpot_ms", "median_chunk_gap_ms", "p99_chunk_gap_ms")


def client_doubted(step: Mapping[str, Any], lag_ms: float | None, limits: Mapping[str, float] | None = None,
                   kernel_stamped: bool = False) -> bool:
    """Could `lag_ms` (the most the loop lagged over the step's window) move one of `step`'s
    figures (summary.json's names, in ms) by more than its distance to its limit in `limits`
    ({"p99_ttft_ms": 10000, ...}), or by more than DOUBT_SHARE of it? (See the module docstring.)"""
    if lag_ms is None:
        return True
    limits = limits or {}
    names = SEND_STAMPED if kernel_stamped else SEND_STAMPED + READ_STAMPED
    for name in names:
        v = step.get(name)
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            continue
        if lag_ms > DOUBT_SHARE * abs(v):
            return True
        limit = limits.get(name)
        if limit is not None and lag_ms > abs(v - limit):
            return True
    return False
