"""Could redline's own delay have moved a step's figures enough to matter? (its `client_limited`)

A second whose client health says redline's timings were suspect (engine/telemetry/client_health.py:
its CPU, its loop held, the machine busy) measured its event loop's lag. What the client could
have added to a latency, and to which:

- a request's send is stamped when its task runs; its bytes leave after its connect and the
  write (a loop turn or more later when the loop is busy). Where the transport says when the
  last byte went (the lean one: RequestRecord.send_wait), the step knows how far those waits
  moved its TTFT and E2E figures (`client_send_shift_ms`, engine/measure/accumulator.py): that
  is the move judged. Where it does not, the lag is: TTFT and E2E may be too high by up to it;
- a token's arrival is stamped by the kernel where it can be (plain http:// on Linux,
  engine/client/kstamp.py): ITL, TPOT and chunk gaps are then the kernel's, whatever the loop's
  lag, but for the chunks a late loop read together (`coalesced_chunks`, left out of ITL): when
  more than COALESCED_DOUBT of them were, the gaps left need not hold the step's p99. Stamped
  when the loop reads (https://), they may be off by up to the lag.

A step is client-limited when that could move one of its figures by more than its distance to
its limit (the verdict could flip), or by more than DOUBT_SHARE of it (the figure itself is in
doubt): a 75 s TTFT, 65 s over its 10 s limit, is no doubt for a 21 ms lag; a 40 ms ITL read
by the loop is. An unknown move is a doubt.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["COALESCED_DOUBT", "DOUBT_SHARE", "READ_STAMPED", "SEND_STAMPED", "client_doubted"]

DOUBT_SHARE = 0.10  # a move over this share of a figure puts the figure in doubt
COALESCED_DOUBT = 0.01  # a share of chunks read coalesced (left out of ITL) past which p99 ITL is in doubt
SEND_STAMPED = ("median_ttft_ms", "p99_ttft_ms", "mean_ttft_ms", "median_e2e_latency_ms", "p99_e2e_latency_ms")
READ_STAMPED = ("median_itl_ms", "p99_itl_ms", "mean_tpot_ms", "median_chunk_gap_ms", "p99_chunk_gap_ms")


def _number(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def client_doubted(step: Mapping[str, Any], lag_ms: float | None, limits: Mapping[str, float] | None = None,
                   kernel_stamped: bool = False) -> bool:
    """Could the client's own delay move one of `step`'s figures (summary.json's names, in ms)
    by more than its distance to its limit in `limits` ({"p99_ttft_ms": 10000, ...}), or by more
    than DOUBT_SHARE of it? `lag_ms`: the most the loop lagged over the step's window (None: not
    known; 0: no second was suspect, the send waits are then all that is judged). (See the module
    docstring.)"""
    limits = limits or {}
    shift = _number(step.get("client_send_shift_ms"))
    moves: list[tuple[Sequence[str], float | None]] = [(SEND_STAMPED, shift if shift is not None else lag_ms)]
    if not kernel_stamped:
        moves.append((READ_STAMPED, lag_ms))
    elif (lag_ms is None or lag_ms > 0) and (_number(step.get("coalesced_chunks")) or 0.0) > COALESCED_DOUBT:
        return True  # (reads coalesced where the loop never lagged came so: a server's, a proxy's)
    for names, move in moves:
        if move is None:
            return True
        for name in names:
            v = _number(step.get(name))
            if v is None:
                continue
            if move > DOUBT_SHARE * abs(v):
                return True
            limit = limits.get(name)
            if limit is not None and move > abs(v - limit):
                return True
    return False
