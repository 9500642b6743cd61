"""Reading session tables back with polars, and exporting them (parquet, csv, ndjson: a file
per table; json: one document of the whole session)."""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import polars as pl

TYPE_CHECKING = False
if TYPE_CHECKING:
    from polars._typing import PolarsDataType  # a dtype or its class (pl.Float64 is a class)

from ..session.paths import EXPORT_DIR, FORMATS, META, SUMMARY, TABLES, SessionError, check_session_dir, table_path
from ..session.rows import COLUMNS, GPU_COLUMN, IDLE_STATES, dumps_doc, gpu_sort_key

JSON_FORMAT = "json"  # one document: meta, summary and every table (session.json)
EXPORT_FORMATS = (*FORMATS, JSON_FORMAT)
JSON_DOCUMENT = "session.json"

_DTYPES = {"int": pl.Int64, "float": pl.Float64, "str": pl.String, "bool": pl.Boolean}

# The documented schema of each table as polars dtypes (docs/session-format.md).
SCHEMAS: dict[str, dict[str, PolarsDataType]] = {
    table: {c: _DTYPES[k] for c, k in cols.items()} for table, cols in COLUMNS.items()
}
REQUESTS_SCHEMA = SCHEMAS["requests"]
TIMELINE_SCHEMA = SCHEMAS["timeline"]
EVENTS_SCHEMA = SCHEMAS["events"]

_NESTED = (pl.List, pl.Struct, pl.Array)


def _complete_lines(path: Path) -> tuple[bytes, int]:
    """The file's bytes up to and including its last newline, and 1 when a partial last line
    was left out (0 when none was).

    A partial last line (SIGKILL mid-write, a write the disk cut short, or a writer appending
    right now) is left out. The size is taken first, so rows appended while we read are
    simply not included.
    """
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            data = f.read(size)
    except FileNotFoundError:
        return b"", 0
    except OSError as e:
        raise SessionError(f"cannot read {path}: {e.strerror}") from None
    if not data or data.endswith(b"\n"):
        return data, 0
    end = data.rfind(b"\n")
    tail = data[end + 1 :]
    return data[: end + 1], int(bool(tail.strip()))


# A requests file larger than this is parsed with an explicit schema (base columns + extra
# columns found in its first and last SAMPLE_BYTES), several times faster than inferring
# types over every row (1M rows: ~1 s instead of ~4 s). Its rows all come from
# request_row(), so they share one key set. Timeline and events files always infer over
# every row (their columns can come and go: GPU telemetry appearing mid-session).
FULL_INFER_BYTES = 64 << 20
SAMPLE_BYTES = 1 << 20


def _sample(data: bytes) -> bytes:
    head = data[:SAMPLE_BYTES]
    head = head[: head.rfind(b"\n") + 1]
    tail = data[-SAMPLE_BYTES:]
    tail = tail[tail.find(b"\n") + 1 :]
    return head + tail


def _schema_from_sample(data: bytes, table: str) -> dict[str, PolarsDataType]:
    sdf = pl.read_ndjson(_sample(data), infer_schema_length=None)
    schema: dict[str, PolarsDataType] = dict(SCHEMAS[table])
    null_as = pl.Float64 if table == "timeline" else pl.String
    for c, t in sdf.schema.items():
        if c in schema:
            continue
        if GPU_COLUMN.match(c):
            schema[c] = pl.Float64
        else:
            schema[c] = null_as if t == pl.Null else t
    return schema


def _parse(data: bytes, table: str) -> tuple[pl.DataFrame, int]:
    """The rows of `data` (whole lines), and how many damaged lines were left out."""
    if table == "requests" and len(data) > FULL_INFER_BYTES:
        try:
            return pl.read_ndjson(data, schema=_schema_from_sample(data, table)), 0
        except Exception:
            pass  # a value of another type, a damaged line: take the careful path
    try:
        return pl.read_ndjson(data, infer_schema_length=None), 0
    except Exception:
        good, dropped = _good_lines(data)
        if not good:
            return pl.DataFrame(), dropped
        return pl.read_ndjson(good, infer_schema_length=None), dropped


def _good_lines(data: bytes) -> tuple[bytes, int]:
    """Only the lines that parse as JSON objects (slow path, after a damaged file), and how
    many lines did not (a line a failed write cut short, then ended by the next write)."""
    keep = []
    dropped = 0
    for line in data.splitlines():
        if not line.strip():
            continue
        try:
            if isinstance(json.loads(line), dict):
                keep.append(line)
                continue
        except ValueError:
            pass
        dropped += 1
    return (b"\n".join(keep) + b"\n" if keep else b""), dropped


def _damaged(data: bytes) -> int:
    """How many lines of `data` (whole lines) are not JSON objects: polars checks the whole
    file at once (it refuses any line that is not one; a column no row has keeps it from
    building any), the careful path counts them only when it refused."""
    try:
        pl.read_ndjson(data, schema={"\x00redline-check": pl.Int8})
        return 0
    except Exception:
        return _good_lines(data)[1]


def dropped_lines(session_dir: str | os.PathLike) -> dict[Path, int]:
    """The table files whose readers leave lines out, and how many: a partial last line (a
    kill mid-write, a write cut short) and damaged lines (a partial line the writer's next
    write ended). {} when every line reads (docs/session-format.md, "When a write fails")."""
    d = check_session_dir(session_dir)
    out: dict[Path, int] = {}
    for table in TABLES:
        p = table_path(d, table)
        data, tail = _complete_lines(p)
        n = tail + (_damaged(data) if data.strip() else 0)
        if n:
            out[p] = n
    return out


def dropped_text(path: Path, n: int) -> str:
    """The warning a reader gives of one file (report, export)."""
    return f"{path}: {n} partial line{'s' if n != 1 else ''} dropped (a write cut short: a kill, or a write error)"


def _null_series(name: str, dtype: PolarsDataType, n: int) -> pl.Series:
    return pl.Series(name, [None] * n, dtype=dtype) if n else pl.Series(name, [], dtype=dtype)


def _cast(s: pl.Series, dtype: PolarsDataType) -> pl.Series:
    if s.dtype == dtype:
        return s
    try:
        return s.cast(dtype, strict=False)
    except Exception:
        if dtype == pl.Boolean and s.dtype == pl.String:
            return s.str.to_lowercase().replace_strict(
                {"true": True, "false": False}, default=None, return_dtype=pl.Boolean
            )
        return _null_series(s.name, dtype, len(s))


def apply_schema(df: pl.DataFrame, table: str) -> pl.DataFrame:
    """Base columns first, in documented order and dtype (absent -> null); then gpu<i>_*
    columns (Float64, by GPU index then field); then any other columns as found."""
    base = SCHEMAS[table]
    n = df.height
    cols: list[pl.Series] = []
    for name, dtype in base.items():
        cols.append(_cast(df[name], dtype) if name in df.columns else _null_series(name, dtype, n))
    extras = [c for c in df.columns if c not in base]
    gpu = sorted((c for c in extras if GPU_COLUMN.match(c)), key=gpu_sort_key)
    for c in gpu:
        cols.append(_cast(df[c], pl.Float64))
    null_as = pl.Float64 if table == "timeline" else pl.String
    for c in extras:
        if c in gpu:
            continue
        s = df[c]
        cols.append(_cast(s, null_as) if s.dtype == pl.Null else s)
    return pl.DataFrame(cols)


def read_table(session_dir: str | os.PathLike, table: str, dropped: dict[Path, int] | None = None) -> pl.DataFrame:
    """One table (requests | timeline | events) as a DataFrame with the documented schema.

    Robust to an empty or missing file, a truncated last line, and damaged lines (skipped;
    with `dropped`, their count is set there under the file's path when there were any).
    Types of extra columns are inferred over all rows (a requests file over
    FULL_INFER_BYTES: over its first and last SAMPLE_BYTES); a column absent from some rows
    is null there.
    """
    d = check_session_dir(session_dir)
    if table not in TABLES:
        raise SessionError(f"unknown session table {table!r}: accepted {', '.join(TABLES)}")
    path = table_path(d, table)
    data, tail = _complete_lines(path)
    df, damaged = (pl.DataFrame(), 0) if not data.strip() else _parse(data, table)
    if dropped is not None and tail + damaged:
        dropped[path] = tail + damaged
    return apply_schema(df, table)


def _flat_for_csv(df: pl.DataFrame) -> pl.DataFrame:
    """CSV has no nested types: lists/structs become JSON text."""
    nested = [c for c, t in df.schema.items() if isinstance(t, _NESTED)]
    if not nested:
        return df
    return df.with_columns(
        pl.col(c).map_elements(lambda v: json.dumps(v.to_list() if hasattr(v, "to_list") else v),
                               return_dtype=pl.String, skip_nulls=True)
        for c in nested
    )


def _write(df: pl.DataFrame, fmt: str, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    if fmt == "parquet":
        df.write_parquet(tmp, compression="zstd", statistics=True)
    elif fmt == "csv":
        _flat_for_csv(df).write_csv(tmp)
    else:
        df.write_ndjson(tmp)
    os.replace(tmp, path)


def export_session(
    session_dir: str | os.PathLike, fmt: str, out: str | os.PathLike | None = None,
    dropped: dict[Path, int] | None = None,
) -> list[Path]:
    """Write OUT/<table>.<fmt> for requests, timeline and events, and steps.<fmt> (one row
    per step as summary.json has it, the percentiles asked for included) once a step was
    recorded; return the paths. `json`: one document, OUT/session.json (json_document).

    `out` is a directory, created if needed; default <session_dir>/export/. Each file is
    written to a temporary name and renamed, so a reader never sees half an export, and a
    running session can be exported (what was flushed so far). `dropped`: as read_table's,
    the table files that had lines left out, and how many.
    """
    f = str(fmt).strip().lower()
    if f not in EXPORT_FORMATS:
        raise SessionError(f"unknown export format {fmt!r}: accepted {', '.join(EXPORT_FORMATS)}")
    d = check_session_dir(session_dir)
    out_dir = Path(out) if out is not None else d / EXPORT_DIR
    if out_dir.exists() and not out_dir.is_dir():
        raise SessionError(f"export path {out_dir} is a file; -o takes a directory")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SessionError(f"cannot create export directory {out_dir}: {e.strerror}") from None
    if f == JSON_FORMAT:
        p = out_dir / JSON_DOCUMENT
        tmp = p.with_name(f".{p.name}.tmp")
        try:
            tmp.write_text(dumps_doc(json_document(d, dropped)) + "\n", encoding="utf-8")
            os.replace(tmp, p)
        except OSError as e:
            raise SessionError(f"cannot write {p}: {e.strerror}") from None
        return [p]
    frames = [(table, read_table(d, table, dropped)) for table in TABLES]
    steps = steps_frame(d)
    if steps is not None:
        frames.append(("steps", steps))
    paths = []
    for table, df in frames:
        p = out_dir / f"{table}.{f}"
        try:
            _write(df, f, p)
        except OSError as e:
            raise SessionError(f"cannot write {p}: {e.strerror}") from None
        paths.append(p)
    return paths


def json_document(session_dir: Path, dropped: dict[Path, int] | None = None) -> dict:
    """The whole session as one JSON document (`redline export --format json`): meta.json and
    summary.json as they are (null before the first step), then each table's rows with the
    documented columns: requests, timeline, events, and steps (summary.json's, flat, as
    steps.<fmt> has them; [] before the first step)."""
    def doc(name: str) -> object:
        try:
            return json.loads((session_dir / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    out: dict = {"meta": doc(META), "summary": doc(SUMMARY)}
    for table in TABLES:
        out[table] = read_table(session_dir, table, dropped).to_dicts()
    steps = steps_frame(session_dir)
    out["steps"] = steps.to_dicts() if steps is not None else []
    return out


def steps_frame(session_dir: Path) -> pl.DataFrame | None:
    """summary.json's steps as a table: every figure a column (p90_ttft_ms, ... as
    `--percentiles` asked), nested fields (profiles, per-target rows) left out; None before
    the first step."""
    try:
        steps = json.loads((session_dir / "summary.json").read_text()).get("steps") or []
    except (OSError, ValueError, AttributeError):
        return None
    rows = [{k: v for k, v in s.items() if not isinstance(v, (list, dict))} for s in steps if isinstance(s, dict)]
    if not rows:
        return None
    return pl.DataFrame(rows, infer_schema_length=None)


def concurrency_timeline(session_dir: str | os.PathLike) -> list[tuple[float, int]]:
    """The session's concurrency over time as (duration_s, C) segments (see load_segments;
    an open loop's C is its in-flight cap)."""
    out: list[tuple[float, int]] = []
    for d, c, _, _, _ in load_segments(session_dir):
        if out and out[-1][1] == c:
            out[-1] = (round(out[-1][0] + d, 1), c)
        else:
            out.append((d, c))
    return out


Segment = tuple[float, int, str, "float | None", "dict | None"]  # (duration_s, C, mode, rate, workload)


def load_segments(session_dir: str | os.PathLike) -> list[Segment]:
    """The session's load over time as (duration_s, C, mode, rate, workload) segments, for
    preset-from.

    From timeline rows: each row lasts until the next row's elapsed_s (the last one for the
    median row interval); rows whose state is paused, stopped or server gone (IDLE_STATES)
    count as C=0, since no load was sent; rows with no target_c are skipped. `mode` and
    `rate` are the row's (concurrency and None in sessions before rate mode), mode `probe`
    for the C=1 probe (state probe: it began by aborting what was in flight); `workload` is
    the one set by the latest `workload` event (None before any). Consecutive equal
    segments merge; durations are rounded to 0.1 s.
    """
    df = read_table(session_dir, "timeline")
    df = df.filter(pl.col("target_c").is_not_null() & pl.col("elapsed_s").is_not_null())
    if df.height == 0:
        return []
    df = df.sort("elapsed_s")
    el = df["elapsed_s"].to_list()
    cs = df["target_c"].to_list()
    states = df["state"].to_list()
    modes = df["mode"].to_list() if "mode" in df.columns else [None] * df.height
    rates = df["target_rate"].to_list() if "target_rate" in df.columns else [None] * df.height
    changes = _workload_changes(session_dir)
    gaps = [b - a for a, b in zip(el, el[1:], strict=False) if b > a]
    step = sorted(gaps)[len(gaps) // 2] if gaps else 1.0
    segs: list[list] = []
    k, wl = 0, None
    for i, (t, c, st, mode, rate) in enumerate(zip(el, cs, states, modes, rates, strict=False)):
        while k < len(changes) and changes[k][0] <= t:
            wl = changes[k][1]
            k += 1
        dur = (el[i + 1] - t) if i + 1 < len(el) else step
        if dur <= 0:
            continue
        idle = st in IDLE_STATES
        kind = "concurrency" if idle or not mode else "probe" if st == "probe" else mode
        key = (0 if idle else int(c), kind, None if idle or rate is None or kind == "probe" else float(rate), wl)
        if segs and tuple(segs[-1][1:]) == key:
            segs[-1][0] += dur
        else:
            segs.append([dur, *key])
    return [(round(d, 1), c, m, r, w) for d, c, m, r, w in segs]


def _workload_changes(session_dir: str | os.PathLike) -> list[tuple[float, dict]]:
    """(elapsed_s, workload) of each live workload change (events of kind `workload`)."""
    ev = read_table(session_dir, "events")
    if ev.height == 0 or "detail" not in ev.columns:
        return []
    out = []
    for t, detail in ev.filter(pl.col("kind") == "workload").select("elapsed_s", "detail").iter_rows():
        try:
            wl = json.loads(detail) if isinstance(detail, str) else None
        except ValueError:
            wl = None
        if isinstance(wl, dict) and t is not None:
            out.append((float(t), wl))
    return sorted(out, key=lambda x: x[0])


def bench_export(n_rows: int = 1_000_000, fmt: str = "parquet", keep: bool = False) -> float:
    """Write n_rows request rows to a temporary session, return seconds to export them."""
    from ..session.writer import SessionWriter

    tmp = Path(tempfile.mkdtemp(prefix="redline-bench-"))
    try:
        w = SessionWriter(tmp / "s", {"label": "bench"}, fsync=False)
        t0 = 1.7e9
        for i in range(n_rows):
            w.add_request(
                {
                    "rid": i, "phase": "measure", "step": i // 50_000, "concurrency": 64,
                    "t_send": t0 + i * 0.001, "ttft_ms": 50.0 + (i % 97) * 1.37,
                    "e2e_ms": 8000.0 + (i % 1013) * 3.1, "itl_mean_ms": 6.0 + (i % 13) * 0.11,
                    "itl_max_ms": 40.0 + (i % 31), "tpot_ms": 6.2 + (i % 7) * 0.05,
                    "input_tokens": 1024, "output_tokens": 2048, "chunks": 2047,
                    "status": "ok" if i % 500 else "failed", "http_status": 200 if i % 500 else 503,
                    "error_kind": "" if i % 500 else "http_503",
                    "error_text": "" if i % 500 else "Service Unavailable",
                }
            )
            if i % 5000 == 4999:
                w.flush()
        w.close("bench")
        start = time.perf_counter()
        export_session(tmp / "s", fmt)
        return time.perf_counter() - start
    finally:
        if not keep:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
