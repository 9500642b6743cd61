"""Where a session lives on disk, and the one error type of engine.session."""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path

META = "meta.json"
SUMMARY = "summary.json"
TABLES = ("requests", "timeline", "events")
FORMATS = ("parquet", "csv", "ndjson")
DEFAULT_BASE = "redline-sessions"
EXPORT_DIR = "export"


class SessionError(Exception):
    """A one-line, user-facing problem with a session directory, table or export."""


def table_path(session_dir: str | os.PathLike, table: str) -> Path:
    return Path(session_dir) / f"{table}.ndjson"


def utc_stamp(t: float | None = None) -> str:
    """20261130T093801Z: the default session directory name."""
    dt = datetime.now(timezone.utc) if t is None else datetime.fromtimestamp(t, timezone.utc)
    return dt.strftime("%Y%m%dT%H%M%SZ")


def iso_utc(t: float | None = None) -> str:
    """2026-11-30T09:38:01.123Z"""
    dt = datetime.now(timezone.utc) if t is None else datetime.fromtimestamp(t, timezone.utc)
    return dt.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def default_session_dir(base: str | os.PathLike = DEFAULT_BASE, *, t: float | None = None) -> Path:
    """./redline-sessions/<UTC timestamp>, with -2, -3, ... appended if that name is taken.

    Nothing is created here; SessionWriter claims the directory atomically (it creates
    meta.json exclusively), so two runs started in the same second cannot share one.
    """
    root = Path(base)
    stamp = utc_stamp(t)
    cand = root / stamp
    n = 2
    while cand.exists():
        cand = root / f"{stamp}-{n}"
        n += 1
    return cand


def check_session_dir(session_dir: str | os.PathLike) -> Path:
    """The directory as a Path, or a one-line SessionError saying why it is not a session."""
    p = Path(session_dir)
    try:
        if not p.exists():
            raise SessionError(f"session directory not found: {p}")
        if not p.is_dir():
            raise SessionError(f"not a redline session directory: {p} (a file, not a directory)")
        if not (p / META).is_file():
            raise SessionError(f"not a redline session directory: {p} (no {META})")
    except OSError as e:  # a name too long, a permission error on the way
        raise SessionError(f"cannot read session directory {p}: {e.strerror or e}") from None
    return p
