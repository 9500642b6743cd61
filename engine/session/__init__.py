"""Session log: spool to disk as it runs, read back and export with polars, text report.

Layout and every column: docs/session.md.
"""

from .export import apply_schema, bench_export, concurrency_timeline, export_session, read_table
from .paths import (
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
from .report import (
    format_break_line,
    format_step_line,
    format_step_table,
    load_summary,
    report_session,
)
from .rows import (
    EVENT_KINDS,
    EVENTS_SCHEMA,
    GPU_FIELDS,
    PHASES,
    REQUESTS_SCHEMA,
    SCHEMAS,
    STATES,
    TIMELINE_SCHEMA,
    gpu_columns,
    request_row,
)
from .scrub import Scrubber, redact_argv
from .writer import SessionWriter

__all__ = [
    "EVENT_KINDS", "EVENTS_SCHEMA", "EXPORT_DIR", "FORMATS", "GPU_FIELDS", "META", "PHASES",
    "REQUESTS_SCHEMA", "SCHEMAS", "STATES", "SUMMARY", "TABLES", "TIMELINE_SCHEMA",
    "Scrubber", "SessionError", "SessionWriter", "apply_schema", "bench_export",
    "check_session_dir", "concurrency_timeline", "default_session_dir", "export_session",
    "format_break_line", "format_step_line", "format_step_table", "gpu_columns",
    "load_summary", "read_table", "redact_argv", "report_session", "request_row", "table_path",
]
