"""Writes that say exactly what reached the file: whole-buffer writes that report how many
bytes got out before an error, files written whole (a temporary file, fsynced, renamed, or
linked into place exclusively), and the directory fsynced after a rename or a creation so
the new name survives a host crash too (docs/session-format.md, "When a write fails")."""

from __future__ import annotations

import errno
import os
import secrets
from pathlib import Path

# fsync errors that mean "this file system cannot fsync this" (some FUSE, network and
# virtual file systems), not "your data is gone": nothing was lost that could have been kept
FSYNC_UNSUPPORTED = frozenset({errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EROFS})
# link() errors of a file system without hard links: the exclusive claim falls back to O_EXCL
_NO_LINKS = frozenset({errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.EXDEV, errno.ENOSYS})


class CutShort(OSError):
    """A write that failed after `written` bytes of its buffer reached the file."""

    def __init__(self, cause: OSError, written: int) -> None:
        super().__init__(cause.errno, cause.strerror or str(cause))
        self.written = written


def write_all(fd: int, data: bytes) -> None:
    """All of `data` to `fd` (a short write is continued); CutShort, carrying how many bytes
    got out, when a write fails part-way."""
    view = memoryview(data)
    done = 0
    while done < len(data):
        try:
            n = os.write(fd, view[done:])
        except OSError as e:
            raise CutShort(e, done) from None
        if n <= 0:  # a write that takes nothing and says no error: do not spin on it
            raise CutShort(OSError(errno.EIO, "the write took no bytes"), done)
        done += n


def written_before(exc: OSError) -> int:
    """How many bytes a failed write_all() got out (0 from a plain OSError)."""
    return max(0, int(getattr(exc, "written", 0) or 0))


def fsync_fd(fd: int) -> None:
    """os.fsync, an unsupported file system apart (FSYNC_UNSUPPORTED: nothing to confirm)."""
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno not in FSYNC_UNSUPPORTED:
            raise


def fsync_dir(path: str | os.PathLike) -> None:
    """fsync a directory, so the names created or renamed in it are on disk. OSError when the
    disk refuses; a file system that cannot fsync a directory is not an error."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        if e.errno in FSYNC_UNSUPPORTED or e.errno == errno.EACCES:
            return
        raise
    try:
        fsync_fd(fd)
    finally:
        os.close(fd)


def _tmp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


def _create_in_place(path: Path, data: bytes, *, fsync: bool) -> None:
    """O_EXCL (FileExistsError when taken), written, fsynced; removed again when the write fails."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        write_all(fd, data)
        if fsync:
            fsync_fd(fd)
    except BaseException:
        os.close(fd)
        _unlink(path)
        raise
    os.close(fd)


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def write_text_atomic(path: Path, text: str, *, fsync: bool = True) -> None:
    """The whole file or the old one: a temporary file in the same directory, fsynced, renamed
    over `path`, then the directory fsynced. An error leaves no temporary file behind."""
    path = Path(path)
    tmp = _tmp_name(path)
    try:
        _create_in_place(tmp, text.encode("utf-8"), fsync=fsync)
        os.replace(tmp, path)
    except BaseException:
        _unlink(tmp)
        raise
    if fsync:
        fsync_dir(path.parent)


def create_exclusive(path: Path, text: str, *, fsync: bool = True) -> None:
    """Create `path` holding `text`, complete from its first instant: written to a temporary
    file, fsynced, then hard-linked to `path` (which fails if it exists: FileExistsError), so
    no reader, and no kill at any moment, can see it empty or half written. Where the file
    system has no hard links, `path` is created exclusively and written in place. The caller
    fsyncs the directory (fsync_dir) once it has created its other files there too: a failure
    of that fsync is not a failure to create `path`."""
    path = Path(path)
    data = text.encode("utf-8")
    tmp = _tmp_name(path)
    try:
        _create_in_place(tmp, data, fsync=fsync)
        try:
            os.link(tmp, path)
        except OSError as e:
            if isinstance(e, FileExistsError) or e.errno not in _NO_LINKS:
                raise
            _create_in_place(path, data, fsync=fsync)
    finally:
        _unlink(tmp)
