"""The session directory's writer side: spool every request row, timeline second, event and
the summary to disk as the run goes (its layout and every column: docs/session-format.md).

Nothing here imports polars: the reading and export side is engine/report/ (export,
session_text, compare, html, gates).
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

__all__ = [
    "COLUMNS", "DEFAULT_BASE", "EVENT_KINDS", "EVENTS_COLUMNS", "EXPORT_DIR", "FORMATS",
    "GPU_FIELDS", "IDLE_STATES", "META", "PHASES", "REQUESTS_COLUMNS", "STATES", "SUMMARY", "TABLES",
    "TIMELINE_COLUMNS", "Scrubber", "SessionError", "SessionWriter", "check_session_dir",
    "default_session_dir", "gpu_columns", "redact_argv", "request_row", "table_path",
]
