"""Row shapes of the session tables: documented columns, dtypes, and request_row().

The dtypes below are the fixed schema every reader (read_table, exports) applies, so a
parquet file of any session has the same base columns in the same order with the same types.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, is_dataclass
from operator import sub
from pathlib import PurePath
from typing import Any, Iterable

import polars as pl

from ..records import Clock, RequestRecord
from .scrub import Scrubber, as_scrubber

ERROR_TEXT_MAX = 200

PHASES = ("calibration", "warmup", "measure", "live", "probe")
STATES = ("running", "paused", "probe", "preset", "stopped")
EVENT_KINDS = ("key", "preset", "step", "warning", "error", "break", "notice", "probe")

REQUESTS_SCHEMA: dict[str, pl.DataType] = {
    "rid": pl.Int64,
    "phase": pl.String,
    "step": pl.Int64,
    "concurrency": pl.Int64,
    "t_send": pl.Float64,
    "ttft_ms": pl.Float64,
    "e2e_ms": pl.Float64,
    "itl_mean_ms": pl.Float64,
    "itl_max_ms": pl.Float64,
    "tpot_ms": pl.Float64,
    "input_tokens": pl.Int64,
    "output_tokens": pl.Int64,
    "chunks": pl.Int64,
    "status": pl.String,
    "http_status": pl.Int64,
    "error_kind": pl.String,
    "error_text": pl.String,
}

TIMELINE_SCHEMA: dict[str, pl.DataType] = {
    "t": pl.Float64,
    "elapsed_s": pl.Float64,
    "state": pl.String,
    "target_c": pl.Int64,
    "in_flight": pl.Int64,
    "output_tok_s": pl.Float64,
    "input_tok_s": pl.Float64,
    "req_s": pl.Float64,
    "errors": pl.Int64,
    "ttft_p50_ms": pl.Float64,
    "ttft_p90_ms": pl.Float64,
    "ttft_p99_ms": pl.Float64,
    "itl_p50_ms": pl.Float64,
    "itl_p90_ms": pl.Float64,
    "itl_p99_ms": pl.Float64,
    "e2e_p50_ms": pl.Float64,
    "e2e_p90_ms": pl.Float64,
    "e2e_p99_ms": pl.Float64,
    "server_running": pl.Float64,
    "server_queued": pl.Float64,
    "server_kv_usage": pl.Float64,
    "server_gen_throughput": pl.Float64,
    "client_cpu_pct": pl.Float64,
    "loop_lag_ms": pl.Float64,
    "client_overloaded": pl.Boolean,
    "tok_per_joule": pl.Float64,
}

# Per-GPU timeline columns: gpu<i>_<field>, always Float64, ordered by GPU index then field.
GPU_FIELDS = ("power_w", "power_limit_w", "util_pct", "mem_used_mib", "temp_c")
GPU_COLUMN = re.compile(r"^gpu(\d+)_(\w+)$")

EVENTS_SCHEMA: dict[str, pl.DataType] = {
    "t": pl.Float64,
    "elapsed_s": pl.Float64,
    "kind": pl.String,
    "text": pl.String,
    "concurrency": pl.Int64,
    "detail": pl.String,
}

SCHEMAS: dict[str, dict[str, pl.DataType]] = {
    "requests": REQUESTS_SCHEMA,
    "timeline": TIMELINE_SCHEMA,
    "events": EVENTS_SCHEMA,
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


def one_line(text: str, limit: int | None = None) -> str:
    s = " ".join(str(text).split())
    return s if limit is None else s[:limit]


def request_row(
    rec: RequestRecord, clock: Clock, secrets: "Scrubber | Iterable[str] | None" = None
) -> dict[str, Any]:
    """The requests.ndjson row of one ended request.

    Durations are milliseconds rounded to 1 us; t_send is epoch seconds (rounded to 1 us).
    ITL mean/max come from the gaps between consecutive chunk_times (null with < 2 chunks);
    TPOT is RequestRecord.tpot. error_text is scrubbed of `secrets` *before* it is cut to
    200 characters (so no fragment of a secret survives the cut) and made one line.
    """
    ts = rec.chunk_times
    n = len(ts)
    if n >= 2:
        itl_mean = (ts[-1] - ts[0]) / (n - 1)
        itl_max = max(map(sub, ts[1:], ts[:-1]))
    else:
        itl_mean = itl_max = None
    err = rec.error_text
    if err:
        if secrets:
            err = as_scrubber(secrets).text(err)
        err = one_line(err, ERROR_TEXT_MAX)
    ttft = rec.ttft
    e2e = rec.e2e
    tpot = rec.tpot
    return {
        "rid": rec.rid,
        "phase": rec.phase,
        "step": rec.step,
        "concurrency": rec.concurrency,
        "t_send": round(clock.wall(rec.t_send), 6),
        "ttft_ms": _ms(ttft),
        "e2e_ms": _ms(e2e),
        "itl_mean_ms": _ms(itl_mean),
        "itl_max_ms": _ms(itl_max),
        "tpot_ms": _ms(tpot),
        "input_tokens": rec.input_tokens,
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
