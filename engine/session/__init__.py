"""Session log: spool to disk as it runs, read back and export with polars, text report.

Layout and every column: README, "Session directory".

The writer side (SessionWriter, request_row, paths, report formatting) does not import
polars; the reading/export side (read_table, export_session, concurrency_timeline, the
polars schemas) is imported on first use, so the engine process pays nothing for it.
"""

from .paths import (
    DEFAULT_BASE,
    EXPORT_DIR,
    FORMATS,
    META,
    SUMMARY,
    TABLES,
    SessionError,
    check_session_dir,
    default_session_dir,
    table_path,
)
from .report import load_summary, report_session
from .rows import (
    COLUMNS,
    EVENT_KINDS,
    EVENTS_COLUMNS,
    GPU_FIELDS,
    IDLE_STATES,
    PHASES,
    REQUESTS_COLUMNS,
    STATES,
    TIMELINE_COLUMNS,
    gpu_columns,
    request_row,
)
from .scrub import Scrubber, redact_argv
from .writer import SessionWriter

_LAZY_EXPORT = (
    "EVENTS_SCHEMA",
    "REQUESTS_SCHEMA",
    "SCHEMAS",
    "TIMELINE_SCHEMA",
    "apply_schema",
    "bench_export",
    "concurrency_timeline",
    "load_segments",
    "export_session",
    "read_table",
)


def __getattr__(name: str):
    if name in _LAZY_EXPORT:
        from . import export

        return getattr(export, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "COLUMNS", "DEFAULT_BASE", "EVENT_KINDS", "EVENTS_COLUMNS", "EXPORT_DIR", "FORMATS",
    "GPU_FIELDS", "IDLE_STATES", "META", "PHASES", "REQUESTS_COLUMNS", "STATES", "SUMMARY", "TABLES",
    "TIMELINE_COLUMNS", "Scrubber", "SessionError", "SessionWriter", "check_session_dir",
    "default_session_dir", "gpu_columns", "load_summary", "redact_argv", "report_session", "request_row",
    "table_path", *_LAZY_EXPORT,
]
