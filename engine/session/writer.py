"""SessionWriter: spools a session to disk as it runs.

Appends are cheap (one json encode + deque append) so the engine can call them from its
event loop thousands of times a second; the writing happens in flush(), which the caller
runs once a second (and which runs by itself when a buffer passes `max_buffer` rows).
flush() hands whole lines to the OS with one write() per table, so a SIGKILL of redline
loses nothing already flushed; fsync (durability against a host crash) runs on a
background thread so a slow disk never stalls the caller's event loop.

Loss is never silent: a write or fsync error is kept (`error`, the first that lost rows) and
the rows it cost are counted exactly (`lost_rows`: a write cut short loses only the rows it did
not get out whole); the run ends "session saved, N rows lost: REASON" (`loss`), and meta.json
records both at the close. Files written whole go through durable.py (docs/session-format.md, "When a
write fails").
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from collections import deque
from pathlib import Path
from types import TracebackType
from typing import Any, Callable, Iterable

from .. import __version__
from ..measure.records import Clock, RequestRecord
from ..telemetry.client_doubt import client_doubted
from ..text import one_line
from .durable import create_exclusive, fsync_dir, fsync_fd, write_all, write_text_atomic, written_before
from .paths import META, SUMMARY, TABLES, SessionError, iso_utc, table_path
from .rows import dumps_doc, dumps_row, request_row
from .scrub import Scrubber, redact_argv, redact_url

__all__ = ["FORMAT_VERSION", "SessionWriter", "loss_line", "recorded_loss", "write_text_atomic"]

FORMAT_VERSION = 1


_write_all = write_all  # flush()'s one write per table (a name of this module: tests inject faults here)


def loss_line(lost_rows: int, error: str) -> str:
    """What an exit says of a log that lost rows (the contract: "N rows lost: REASON")."""
    return f"{lost_rows} rows lost: {error}"


def recorded_loss(session_dir: str | os.PathLike) -> tuple[int, str] | None:
    """(lost_rows, write_error) as a session's meta.json recorded them at its close; None when
    its log lost nothing (or never closed, or meta.json cannot be read)."""
    try:
        meta = json.loads((Path(session_dir) / META).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    err = meta.get("write_error") if isinstance(meta, dict) else None
    if not isinstance(err, str) or not err:
        return None
    lost = meta.get("lost_rows")
    return (lost if isinstance(lost, int) and not isinstance(lost, bool) else 0), err


class SessionWriter:
    """Writes one session directory (the layout: docs/session-format.md).

    Thread-safety: add_* may be called from any thread (deque appends are atomic);
    flush()/close() serialise on a lock. Do not call them from inside a signal handler
    that interrupted a flush; use loop.add_signal_handler or set a flag instead.
    """

    def __init__(
        self,
        out_dir: str | os.PathLike,
        meta: dict[str, Any] | None = None,
        secrets: Iterable[str] = (),
        *,
        fsync: bool = True,
        max_buffer: int = 5000,
    ) -> None:
        self.dir = Path(out_dir)
        self._scrub = Scrubber(secrets)
        self._fsync = fsync
        self.max_buffer = max(1, int(max_buffer))
        # the first write or fsync error that lost rows (else the first at all), one line;
        # None while all is well
        self.error: str | None = None
        self._error_lost_rows = False
        # rows not known to be on disk: a write that failed (disk full, ...; a line it cut
        # short included), an fsync that failed (the rows written since that file's last
        # good fsync), a row that came after close
        self.lost_rows = 0
        self.rows_written = {t: 0 for t in TABLES}  # rows handed to the OS whole
        self._synced = {t: 0 for t in TABLES}  # of those, rows an fsync confirmed (or judged lost)
        self.closed = False
        self._lock = threading.RLock()
        self._req: deque[str] = deque()
        self._tl: deque[str] = deque()
        self._ev: deque[str] = deque()
        self._bufs = {"requests": self._req, "timeline": self._tl, "events": self._ev}
        self._broken: set[str] = set()  # tables whose last write left a partial line (ended by the next)
        self._last_summary: str | None = None
        # (start, end, loop lag ms) of the timeline rows that said redline's own timings were
        # suspect (client_overloaded): a step measured over one is client-limited when that lag
        # could matter to its figures (engine/telemetry/client_doubt.py; a run sets `doubt` with
        # its limits and whether its reads are kernel-stamped)
        self._suspect: list[tuple[float, float, float | None]] = []
        self.doubt: Callable[[dict, float | None], bool] = client_doubted

        created = self._prepare_dir()
        self.t0 = time.time()
        self._meta = self._initial_meta(meta or {})
        self._claim_meta()
        self._fds: dict[str, int] = {}
        try:
            for t in TABLES:
                self._fds[t] = os.open(
                    table_path(self.dir, t), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644
                )
        except OSError as e:
            self._close_fds()
            raise SessionError(f"cannot create session files in {self.dir}: {e.strerror}") from None
        if fsync:
            for d in [self.dir, *created]:  # the table files' names, then each new directory's own
                self._fsync_dir(d)
        self._fsync_wanted = threading.Event()
        self._fsync_stop = False
        self._fsync_thread: threading.Thread | None = None
        if fsync:
            self._fsync_thread = threading.Thread(
                target=self._fsync_loop, name="redline-session-fsync", daemon=True
            )
            self._fsync_thread.start()

    # -- set-up ----------------------------------------------------------------------------
    def _prepare_dir(self) -> list[Path]:
        """Check `dir` and create it; the parents of the directories it created (theirs
        are the names to fsync)."""
        d = self.dir
        if d.exists() and not d.is_dir():
            raise SessionError(f"--out {d} is a file, not a directory")
        if (d / META).exists():
            raise SessionError(f"{d} already holds a redline session ({META}); choose another --out")
        for t in TABLES:
            if table_path(d, t).exists():
                raise SessionError(f"{d} already holds session files ({t}.ndjson); choose another --out")
        new = []
        p = d
        while not p.exists() and p.parent != p:
            new.append(p)
            p = p.parent
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise SessionError(f"cannot create session directory {d}: {e.strerror}") from None
        return [q.parent for q in new]

    def _initial_meta(self, meta: dict[str, Any]) -> dict[str, Any]:
        m: dict[str, Any] = {
            "redline_version": __version__,
            "format_version": FORMAT_VERSION,
            "command_line": list(sys.argv),
            "label": "",
            "target": {},
            "server_info": {},
            "workload": {},
            "started_at": iso_utc(self.t0),
            "started_epoch": self.t0,
            "ended_at": None,
            "end_reason": None,
            "host": socket.gethostname(),
        }
        m.update(meta)
        m["command_line"] = redact_argv(m.get("command_line") or [])
        target = m.get("target")
        if isinstance(target, dict) and isinstance(target.get("url"), str):
            m["target"] = {**target, "url": redact_url(target["url"])}
        return m

    def _claim_meta(self) -> None:
        """Create meta.json exclusively, complete from its first instant (durable.create_exclusive):
        two runs can never write into one directory, and a kill at any moment leaves either
        no meta.json or a whole one."""
        path = self.dir / META
        try:
            create_exclusive(path, self._meta_text(), fsync=self._fsync)
        except FileExistsError:
            raise SessionError(
                f"{self.dir} already holds a redline session ({META}); choose another --out"
            ) from None
        except OSError as e:
            raise SessionError(f"cannot write {path}: {e.strerror}") from None

    def _fsync_dir(self, d: Path) -> None:
        try:
            fsync_dir(d)
        except OSError as e:
            self._note_error(f"cannot fsync directory {d}: {e.strerror}")

    # -- appends (cheap; called from the engine's event loop) ------------------------------
    def add_request(self, row: dict[str, Any]) -> None:
        """Queue one requests.ndjson row (see request_row())."""
        if self.closed:
            self._lose(1, "a row came after the session log closed")
            return
        buf = self._req
        buf.append(dumps_row(row))
        if len(buf) >= self.max_buffer:
            self.flush()

    def add_record(self, rec: RequestRecord, clock: Clock) -> None:
        """request_row(rec, clock) with this writer's secrets, then add_request()."""
        self.add_request(request_row(rec, clock, self._scrub))

    def add_timeline(self, row: dict[str, Any]) -> None:
        """Queue one timeline row; `t` and `elapsed_s` are filled in when absent."""
        if self.closed:
            self._lose(1, "a row came after the session log closed")
            return
        if "t" not in row or "elapsed_s" not in row:
            t = row.get("t")
            if t is None:
                t = time.time()
            row = {"t": t, "elapsed_s": round(t - self.t0, 3), **row}
        if row.get("client_overloaded"):
            t = float(row["t"])
            lag = row.get("loop_lag_ms")
            self._suspect.append((t - float(row.get("interval_s") or 1.0), t, float(lag) if isinstance(lag, (int, float)) else None))
        buf = self._tl
        buf.append(dumps_row(row))
        if len(buf) >= self.max_buffer:
            self.flush()

    def add_event(self, kind: str, text: str, **fields: Any) -> None:
        """Queue one event. `text` is made one line; a non-string `detail` is stored as JSON
        text so the column keeps one type. `t` (epoch) may be given, else now."""
        if self.closed:
            self._lose(1, "a row came after the session log closed")
            return
        t = fields.pop("t", None)
        if t is None:
            t = time.time()
        row: dict[str, Any] = {
            "t": t,
            "elapsed_s": round(t - self.t0, 3),
            "kind": str(kind),
            "text": one_line(text),
        }
        detail = fields.get("detail")
        if detail is not None and not isinstance(detail, str):
            fields["detail"] = dumps_row(detail)
        row.update(fields)
        buf = self._ev
        buf.append(dumps_row(row))
        if len(buf) >= self.max_buffer:
            self.flush()

    # -- documents -------------------------------------------------------------------------
    def _meta_text(self) -> str:
        return dumps_doc(self._scrub.obj(self._meta)) + "\n"

    def _write_meta(self) -> None:
        write_text_atomic(self.dir / META, self._meta_text(), fsync=self._fsync)

    def update_meta(self, **fields: Any) -> None:
        """Merge fields into meta.json and rewrite it atomically."""
        with self._lock:
            if "command_line" in fields:
                fields["command_line"] = redact_argv(fields["command_line"] or [])
            self._meta.update(fields)
            try:
                self._write_meta()
            except OSError as e:
                self._note_error(f"cannot write {self.dir / META}: {e.strerror}")

    @property
    def meta(self) -> dict[str, Any]:
        return dict(self._meta)

    def client_limited(self, t_start: float | None, duration_s: float | None, step: dict | None = None) -> bool:
        """Whether the client's own delay could matter to a step's figures (`doubt`:
        engine/telemetry/client_doubt.py): the loop's lag where a timeline row of [t_start,
        t_start + duration_s] (epoch seconds, its measured window) said redline's timings were
        suspect (docs/numbers.md, the client's own health), and its send waits either way."""
        if t_start is None:
            return False
        t_end = t_start + (duration_s or 0.0)
        lags = [lag for a, b, lag in list(self._suspect) if a < t_end and b > t_start]
        if step is None:
            return bool(lags)
        if not lags:  # no second suspect: what the step itself measured of the client (its send waits)
            return self.doubt(step, 0.0)
        known = [x for x in lags if x is not None]
        return self.doubt(step, max(known) if len(known) == len(lags) else None)

    def _mark_client_limited(self, summary: dict[str, Any]) -> None:
        steps = [s for s in (summary.get("steps") or []) if isinstance(s, dict)]
        probe = summary.get("probe")
        for st in steps + ([probe] if isinstance(probe, dict) else []):
            if not st.get("client_limited") and self.client_limited(st.get("t_start"), st.get("duration_s"), st):
                st["client_limited"] = True

    def write_summary(self, summary: dict[str, Any]) -> None:
        """Rewrite summary.json atomically (skipped when nothing changed). A step measured
        over a second whose timeline row says client_overloaded gets client_limited: true."""
        summary = json.loads(dumps_row(summary))
        self._mark_client_limited(summary)
        text = dumps_doc(self._scrub.obj(summary)) + "\n"
        with self._lock:
            if text == self._last_summary:
                return
            try:
                write_text_atomic(self.dir / SUMMARY, text, fsync=self._fsync)
                self._last_summary = text
            except OSError as e:
                self._note_error(f"cannot write {self.dir / SUMMARY}: {e.strerror}")

    # -- flushing --------------------------------------------------------------------------
    def buffered(self) -> int:
        """Rows queued and not yet handed to the OS."""
        return len(self._req) + len(self._tl) + len(self._ev)

    def flush(self) -> None:
        """Hand every queued row to the OS (one write() per table); fsync in the background.

        A write that fails part-way loses exactly the rows it did not get out whole: a line it
        cut short is lost (readers drop it, and say so), and the next write to that table
        starts with a newline that ends it."""
        with self._lock:
            if not self._fds:
                return
            wrote = False
            for table, buf in self._bufs.items():
                n = len(buf)
                if not n:
                    continue
                pop = buf.popleft
                lines = [pop() for _ in range(n)]
                blob = "\n".join(lines) + "\n"
                if self._scrub and self._scrub.hit(blob):
                    blob = "\n".join(self._scrub_line(line) for line in lines) + "\n"
                data = blob.encode("utf-8")
                head = b"\n" if table in self._broken else b""  # ends a partial line left by a failed write
                try:
                    _write_all(self._fds[table], head + data if head else data)
                except OSError as e:
                    self._cut(table, n, data, written_before(e) - len(head), e)
                    continue
                self._broken.discard(table)
                self.rows_written[table] += n
                wrote = True
            if wrote and self._fsync_thread is not None:
                self._fsync_wanted.set()

    def _cut(self, table: str, n: int, data: bytes, got: int, e: OSError) -> None:
        """A write of `n` rows (`data`) that failed after `got` of its bytes (the newline
        ending an earlier partial line apart: < 0 when even that did not get out)."""
        whole = data.count(b"\n", 0, got) if got > 0 else 0
        if got >= 0:  # the earlier partial line is ended; this write's own cut, if any, now
            self._broken.discard(table)
            if 0 < got and data[got - 1 : got] != b"\n":
                self._broken.add(table)
        self.rows_written[table] += whole
        self._lose(n - whole, f"cannot write {table_path(self.dir, table)}: {e.strerror or e}")
        if whole and self._fsync_thread is not None:
            self._fsync_wanted.set()

    def _lose(self, n: int, reason: str) -> None:
        """`n` rows lost for `reason`. The error kept is the first one that lost rows (a
        summary.json the full disk refused first is not why rows are missing), else the first."""
        with self._lock:
            self.lost_rows += n
            if n and not self._error_lost_rows:
                self.error, self._error_lost_rows = reason, True
            else:
                self._note_error(reason)

    @property
    def loss(self) -> str | None:
        """"N rows lost: REASON" once a write or fsync failed (REASON: `error`), else None."""
        if self.error is None:
            return None
        return loss_line(self.lost_rows, self.error)

    def _scrub_line(self, line: str) -> str:
        sc = self._scrub
        if not sc.hit(line):
            return line
        try:
            clean = dumps_row(sc.obj(json.loads(line)))
        except ValueError:
            clean = line
        if sc.hit(clean):  # a secret inside a number or other non-string: mask the text
            clean = sc.text(clean)
        return clean

    def _note_error(self, msg: str) -> None:
        if self.error is None:
            self.error = msg

    def _fsync_loop(self) -> None:
        while True:
            self._fsync_wanted.wait()
            self._fsync_wanted.clear()
            if self._fsync_stop:
                return
            self._fsync_all()

    def _fsync_all(self) -> None:
        """fsync each table with rows written since its last fsync. A failed fsync loses the
        rows written to that file since its last good one: the disk did not confirm them
        (Linux drops the pages it failed to write and reports it once; a retry would pass)."""
        with self._lock:
            todo = [(t, fd, self.rows_written[t]) for t, fd in self._fds.items() if self.rows_written[t] > self._synced[t]]
        for table, fd, upto in todo:
            try:
                fsync_fd(fd)
            except OSError as e:
                with self._lock:
                    unconfirmed = max(0, upto - self._synced[table])
                    self._lose(unconfirmed, f"cannot fsync {table_path(self.dir, table)}: {e.strerror or e}")
                    self._synced[table] = max(self._synced[table], upto)
                continue
            with self._lock:
                self._synced[table] = max(self._synced[table], upto)

    # -- end -------------------------------------------------------------------------------
    def close(self, end_reason: str = "quit") -> None:
        """Flush, fsync, set ended_at/end_reason (and lost_rows/write_error) in meta.json.
        Idempotent."""
        with self._lock:
            if self.closed:
                return
            self.flush()
            self.closed = True
        if self._fsync_thread is not None:  # not under the lock: the thread takes it
            self._fsync_stop = True
            self._fsync_wanted.set()
            self._fsync_thread.join(timeout=10)
        with self._lock:
            if self._fsync:
                self._fsync_all()
            self._end_partial_lines()
            self._close_fds()
            self._meta["ended_at"] = iso_utc()
            self._meta["end_reason"] = end_reason
            self._meta["lost_rows"] = self.lost_rows
            self._meta["write_error"] = self.error
            try:
                self._write_meta()
            except OSError as e:
                self._note_error(f"cannot write {self.dir / META}: {e.strerror}")

    def _end_partial_lines(self) -> None:
        """A table whose last write was cut short ends with a newline (best effort), so its
        partial line reads as one damaged line, not as a row still being written."""
        for table in list(self._broken):
            try:
                _write_all(self._fds[table], b"\n")
                self._broken.discard(table)
            except OSError:
                pass

    def _close_fds(self) -> None:
        fds, self._fds = self._fds, {}
        for fd in fds.values():
            try:
                os.close(fd)
            except OSError:
                pass

    def __enter__(self) -> "SessionWriter":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if exc_type is None:
            self.close("quit")
        else:
            self.close(f"error {exc_type.__name__}")
