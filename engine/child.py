"""A child process of redline with a pipe to it, and its end: the engine's own process under
the TUI (engine/host.py) and the load's worker processes (engine/load/worker_pool.py) start and stop
the same way.

Children start with the "spawn" method (a fresh interpreter: no copy of the parent's loop,
threads or sockets). A child that does not end when asked is terminated, then killed: no
load may outlive redline.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any, Callable

KILL_WAIT_S = 3.0  # after SIGTERM (then SIGKILL), how long to wait for the child to go


def spawn_child(target: Callable[..., None], args: tuple[Any, ...], name: str, *, daemon: bool) -> tuple[BaseProcess, Connection, Connection]:
    """A child process (not started) running target(*args, its end of the pipe); returns
    (process, this end, the child's end: close it here once the child has started)."""
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=True)
    proc = ctx.Process(target=target, args=(*args, child), name=name, daemon=daemon)
    return proc, parent, child


def reap(proc: BaseProcess, timeout: float) -> None:
    """Wait up to `timeout` for the child to end; then SIGTERM, then SIGKILL (blocking)."""
    if proc.pid is None:
        return
    proc.join(timeout)
    if proc.is_alive():
        proc.terminate()
        proc.join(KILL_WAIT_S)
        if proc.is_alive():
            os.kill(proc.pid, signal.SIGKILL)
            proc.join(KILL_WAIT_S)
