"""Row shapes of the session tables: documented columns, their types, and request_row().

The column types below are the fixed schema every reader (read_table, exports) applies, so a
parquet file of any session has the same base columns in the same order with the same types.
They are plain names ("int" = Int64, "float" = Float64, "str" = String, "bool" = Boolean) so
that the writer, which runs in the engine, does not import polars; export.py maps them.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, is_dataclass
from pathlib import PurePath
from typing import Any, Iterable

from ..measure import records
from ..measure.records import Clock, RequestRecord
from ..text import one_line
from .scrub import Scrubber, as_scrubber

ERROR_TEXT_MAX = 200

PHASES = ("calibration", "warmup", "measure", "live", "probe")
STATES = ("running", "paused", "probe", "preset", "stopped", "server gone", "server not ready")
# States in which redline sends no request, whatever the set concurrency (target_c) says.
IDLE_STATES = ("paused", "stopped", "server gone", "server not ready")
EVENT_KINDS = ("key", "preset", "step", "warning", "error", "break", "notice", "probe", "workload", "api")

REQUESTS_COLUMNS: dict[str, str] = {
    "rid": "int",
    "phase": "str",
    "step": "int",
    "concurrency": "int",
    "target": "str",
    "worker": "int",
    "t_send": "float",
    "schedule_lag_ms": "float",
    "send_wait_ms": "float",
    "turn": "int",
    "ttft_ms": "float",
    "e2e_ms": "float",
    "ended_ms": "float",
    "step_e2e_ms": "float",
    "step_tpot_ms": "float",
    "after_close": "bool",
    "itl_mean_ms": "float",
    "itl_max_ms": "float",
    "tpot_ms": "float",
    "input_tokens": "int",
    "cached_tokens": "int",
    "output_tokens": "int",
    "chunks": "int",
    "status": "str",
    "http_status": "int",
    "error_kind": "str",
    "error_text": "str",
}

TIMELINE_COLUMNS: dict[str, str] = {
    "t": "float",
    "elapsed_s": "float",
    "state": "str",
    "target_c": "int",
    "mode": "str",
    "target_rate": "float",
    "schedule_lag_p50_ms": "float",
    "schedule_lag_p99_ms": "float",
    "held_at_cap": "int",
    "dropped_or_delayed": "int",
    "in_flight": "int",
    "backing_off": "int",
    "interval_s": "float",
    "output_tok_s": "float",
    "input_tok_s": "float",
    "req_s": "float",
    "errors": "int",
    "goodput_req_s": "float",
    "goodput_tok_s": "float",
    "lane_ttft_p50_ms": "float",
    "lane_itl_p50_ms": "float",
    "ttft_p50_ms": "float",
    "ttft_p90_ms": "float",
    "ttft_p99_ms": "float",
    "itl_p50_ms": "float",
    "itl_p90_ms": "float",
    "itl_p99_ms": "float",
    "e2e_p50_ms": "float",
    "e2e_p90_ms": "float",
    "e2e_p99_ms": "float",
    "server_running": "float",
    "server_queued": "float",
    "server_kv_usage": "float",
    "server_gen_throughput": "float",
    "server_prefix_hit_rate": "float",
    "server_preemptions": "float",
    "server_spec_accept_length": "float",
    "client_cpu_pct": "float",
    "loop_lag_ms": "float",
    "client_overloaded": "bool",
    "client_cause": "str",
    "machine_cpu_pct": "float",
    "cpu_steal_pct": "float",
    "tok_per_joule": "float",
}

# Per-GPU timeline columns: gpu<i>_<field>, always Float64, ordered by GPU index then field.
GPU_FIELDS = ("power_w", "power_limit_w", "util_pct", "mem_used_mib", "temp_c")
GPU_COLUMN = re.compile(r"^gpu(\d+)_(\w+)$")

EVENTS_COLUMNS: dict[str, str] = {
    "t": "float",
    "elapsed_s": "float",
    "kind": "str",
    "text": "str",
    "concurrency": "int",
    "detail": "str",
}

COLUMNS: dict[str, dict[str, str]] = {
    "requests": REQUESTS_COLUMNS,
    "timeline": TIMELINE_COLUMNS,
    "events": EVENTS_COLUMNS,
}


def gpu_columns(n_gpus: int) -> list[str]:
    return [f"gpu{i}_{f}" for i in range(n_gpus) for f in GPU_FIELDS]


def gpu_sort_key(col: str) -> tuple[int, int, str]:
    m = GPU_COLUMN.match(col)
    if not m:
        return (1 << 30, 0, col)
    field = m.group(2)
    rank = GPU_FIELDS.index(field) if field in GPU_FIELDS else len(GPU_FIELDS)
    return (int(m.group(1)), rank, field)


# -- request rows --------------------------------------------------------------------------

def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000.0, 3)


def request_row(
    rec: RequestRecord, clock: Clock, secrets: "Scrubber | Iterable[str] | None" = None
) -> dict[str, Any]:
    """The requests.ndjson row of one ended request.

    Durations are milliseconds rounded to 1 us; t_send is epoch seconds (rounded to 1 us).
    ITL mean/max come from the gaps between consecutive chunk_times (null with < 2 chunks);
    TPOT is RequestRecord.tpot. error_text is scrubbed of `secrets` *before* it is cut to
    200 characters (so no fragment of a secret survives the cut) and made one line.
    """
    n, itl_mean, itl_max, _ = rec.figures()  # a worker's request: as its worker measured them
    err = rec.error_text
    if err:
        if secrets:
            err = as_scrubber(secrets).text(err)
        err = one_line(err, ERROR_TEXT_MAX)
    ttft = rec.ttft
    cancelled = rec.status == records.CANCELLED  # it never ended by itself: no end-to-end latency
    e2e = None if cancelled else rec.e2e
    tpot = None if cancelled else rec.tpot
    ended = (rec.t_end if rec.t_end is not None else rec.t_send) - rec.t_start
    after = rec.step_e2e is not None
    return {
        "rid": rec.rid,
        "phase": rec.phase,
        "step": rec.step,
        "concurrency": rec.concurrency,
        "target": rec.target,
        "worker": rec.worker,
        "t_send": round(clock.wall(rec.t_send), 6),
        "schedule_lag_ms": _ms(rec.schedule_lag),
        # its send stamp to its last byte's write: the client's own share of its TTFT and E2E (None: not known)
        "send_wait_ms": _ms(rec.send_wait),
        "turn": rec.turn,
        "ttft_ms": _ms(ttft),
        "e2e_ms": _ms(e2e),
        # from its (intended) send to its end, whatever the outcome: for a request cancelled
        # inside its step (it never ended by itself) the lower bound of its E2E, and of its TTFT
        # when it never answered, that its step counts (censored; after the close: step_e2e_ms)
        "ended_ms": _ms(ended),
        # what its step counts of it: ended inside the step, its own E2E (a cancelled one's
        # age, ended_ms) and TPOT; ended after the close (after_close), its age at the close (a
        # lower bound of its E2E there) and its TPOT inside the step's window: what it did after
        # the close ran under the next load
        "step_e2e_ms": _ms(rec.step_e2e) if after else _ms(e2e) if e2e is not None else _ms(ended),
        "step_tpot_ms": _ms(rec.step_tpot) if after else _ms(tpot),
        "after_close": after,
        "itl_mean_ms": _ms(itl_mean),
        "itl_max_ms": _ms(itl_max),
        "tpot_ms": _ms(tpot),
        "input_tokens": rec.input_tokens,
        "cached_tokens": rec.cached_tokens,  # prompt tokens the server found cached (None: not said)
        "output_tokens": rec.output_tokens,
        "chunks": n,
        "status": rec.status,
        "http_status": rec.http_status,
        "error_kind": rec.error_kind or "",
        "error_text": err or "",
    }


# -- JSON encoding -------------------------------------------------------------------------

def _default(o: Any) -> Any:
    if is_dataclass(o) and not isinstance(o, type):
        to_dict = getattr(o, "to_dict", None)
        return to_dict() if callable(to_dict) else asdict(o)
    if isinstance(o, PurePath):
        return str(o)
    if isinstance(o, (set, frozenset)):
        return sorted(o, key=str)
    if hasattr(o, "tolist"):  # numpy scalars / arrays, array.array
        return o.tolist()
    if hasattr(o, "__float__"):
        return float(o)
    return str(o)


def _finite(o: Any) -> Any:
    """NaN/inf -> None (JSON has no NaN; polars would refuse the line)."""
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {k: _finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_finite(v) for v in o]
    if is_dataclass(o) and not isinstance(o, type):
        return _finite(_default(o))
    return o


_ROW_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False, default=_default)
_DOC_ENCODER = json.JSONEncoder(indent=2, allow_nan=False, default=_default)


def dumps_row(row: Any) -> str:
    """One compact JSON line. Non-finite floats become null."""
    try:
        return _ROW_ENCODER.encode(row)
    except ValueError:
        return _ROW_ENCODER.encode(_finite(row))


def dumps_doc(doc: Any) -> str:
    """An indented JSON document (meta.json, summary.json)."""
    try:
        return _DOC_ENCODER.encode(doc)
    except ValueError:
        return _DOC_ENCODER.encode(_finite(doc))
