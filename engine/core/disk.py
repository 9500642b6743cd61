"""The session's writes, off the loop that stamps bytes: the session writer (once the session
directory is open, engine/session/writer.py), the one thread its flushes and summary
rewrites (fsync) run on, in order, and meta.json's fingerprint as it grows
(engine/core/provenance.py)."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from ..session import SessionWriter
    from .provenance import ServerFingerprint


class Disk:
    def __init__(self) -> None:
        self.session: SessionWriter | None = None  # None: no session log (no --out)
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="redline-disk")
        # the fingerprint's server part (engine/telemetry/fingerprint.py), written at the start;
        # its GPUs are added to it once telemetry read them
        self.fingerprint: ServerFingerprint | None = None

    def write(self, fn: Callable[..., object], *args: object) -> None:
        """Run a session write off the loop (errors land in the writer's `error`)."""
        try:
            self._thread.submit(fn, *args)
        except RuntimeError:  # shut down: the engine is stopping, write in place
            fn(*args)

    async def flush(self) -> str | None:
        """Hand buffered rows to the OS (off the loop); returns the session's write error."""
        if self.session is not None:
            await asyncio.wrap_future(self._thread.submit(self.session.flush))
            return self.session.error
        return None

    def shutdown(self) -> None:
        """What was queued is written (before the log closes)."""
        self._thread.shutdown(wait=True)
