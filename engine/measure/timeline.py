"""The per-second timeline: a clock on absolute deadlines and the row each second writes.

The ticker wakes on absolute deadlines (t0 + k x SNAPSHOT_INTERVAL_S), not after relative
sleeps, so rows do not drift. When the loop was held past a whole second, the row covers the
real interval (`interval_s`) and its rates are divided by it, never counted as one second.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Callable

from ..constants import SNAPSHOT_INTERVAL_S, TIMELINE_INTERVAL_S
from ..telemetry.efficiency import total_power_w
from ..telemetry.types import ClientHealthSample, GpuSample, ServerSample
from .live_metrics import LiveStats

EARLY_S = 1e-6  # float slack on deadlines counted in steps of SNAPSHOT_INTERVAL_S


async def tick(t0: float, on_second: Callable[[float], None], on_frame: Callable[[float], None]) -> None:
    """Call on_frame every SNAPSHOT_INTERVAL_S and on_second every TIMELINE_INTERVAL_S,
    both on deadlines counted from t0 (a late wake-up never shifts the later ones)."""
    frame = 0
    next_second = t0 + TIMELINE_INTERVAL_S
    while True:
        frame += 1
        deadline = t0 + frame * SNAPSHOT_INTERVAL_S
        delay = deadline - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        now = time.perf_counter()
        if now - deadline > SNAPSHOT_INTERVAL_S:  # held: skip the frames already missed
            frame = int((now - t0) / SNAPSHOT_INTERVAL_S)
        # The frame's own time is its deadline: a loop whose timers fire a little early
        # (uvloop counts in whole ms from the time its iteration began) wakes just before
        # it, and that frame is still the one the second falls on (else the row slips a
        # frame: rows 1.25 s then 0.75 s apart).
        due = max(now, deadline)
        if due >= next_second - EARLY_S:
            while next_second <= due + EARLY_S:
                next_second += TIMELINE_INTERVAL_S
            on_second(now)
        on_frame(now)


def timeline_row(
    *,
    t_wall: float,
    interval_s: float,
    sec: Counter,
    stats: LiveStats,
    state: str,
    target_c: int,
    in_flight: int,
    backing_off: int,
    server: ServerSample | None,
    health: ClientHealthSample | None,
    gpus: list[GpuSample] | tuple[GpuSample, ...],
    good_share: float | None = None,
    lane: tuple[float | None, float | None] | None = None,
    shape: dict | None = None,
) -> dict:
    """One row of timeline.ndjson (docs/session-format.md#timelinendjson)."""
    d = interval_s if interval_s > 0 else TIMELINE_INTERVAL_S
    out = sec["out"] / d
    row: dict = {
        "t": round(t_wall, 3),  # elapsed_s: the writer's, from meta's started_epoch
        "interval_s": round(d, 4),
        "state": state,
        "target_c": target_c,
        **(shape or {}),  # mode, target_rate; open loop: schedule lag, held, dropped_or_delayed
        "in_flight": in_flight,
        "backing_off": backing_off,
        "output_tok_s": round(out, 3),
        "input_tok_s": round(sec["in"] / d, 3),
        "req_s": round(sec["req"] / d, 4),
        "errors": sec["errors"],
    }
    if good_share is not None:  # with SLOs: requests meeting them that ended this second, and
        # this second's output tok/s x the good share of the ended requests' tokens (metrics.py)
        row["goodput_req_s"] = round(sec["good"] / d, 4)
        row["goodput_tok_s"] = round(out * good_share, 3)
    if lane is not None:  # the probe lane beside the load
        row["lane_ttft_p50_ms"] = None if lane[0] is None else round(lane[0], 3)
        row["lane_itl_p50_ms"] = None if lane[1] is None else round(lane[1], 3)
    for name, p in (("ttft", stats.ttft), ("itl", stats.itl), ("e2e", stats.e2e)):
        for q, v in p.ms().items():
            if q != "max":
                row[f"{name}_{q}_ms"] = None if v is None else round(v, 3)
                if q in p.bounds:  # at least this: requests still waiting for a first token
                    row[f"{name}_{q}_ms_bound"] = True
    row["server_running"] = server.running if server else None
    row["server_queued"] = server.queued if server else None
    row["server_kv_usage"] = server.kv_usage if server else None
    row["server_gen_throughput"] = server.gen_throughput if server else None
    row["server_prefix_hit_rate"] = server.prefix_hit_rate if server else None
    row["server_preemptions"] = server.preemptions_recent if server else None  # over the last 10 s
    row["server_spec_accept_length"] = server.spec_accept_length if server else None
    if health is not None:
        row["client_cpu_pct"] = health.cpu_pct
        row["loop_lag_ms"] = health.loop_lag_ms
        suspect = health.overloaded if health.suspect is None else health.suspect
        row["client_overloaded"] = suspect
        row["client_cause"] = health.cause if suspect else ""  # the second's, as client_overloaded
        row["machine_cpu_pct"] = health.machine_cpu_pct
        row["cpu_steal_pct"] = health.steal_pct
    for g in gpus:
        row[f"gpu{g.index}_power_w"] = g.power_w
        row[f"gpu{g.index}_power_limit_w"] = g.power_limit_w
        row[f"gpu{g.index}_util_pct"] = g.util_pct
        row[f"gpu{g.index}_mem_used_mib"] = g.mem_used_mib
        row[f"gpu{g.index}_temp_c"] = g.temp_c
    total_w = total_power_w(gpus)
    row["tok_per_joule"] = round(out / total_w, 4) if total_w else None
    return row
