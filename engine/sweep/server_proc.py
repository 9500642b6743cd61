"""One server of a sweep: launched in its own process group with its output in the session's
`server.log`, waited for until it answers, stopped as a whole group, its port confirmed free.

No server outlives redline: the server's leader dies with redline (Linux: PR_SET_PDEATHSIG),
and a sentinel process holding a pipe from redline kills the whole group when that pipe closes,
however redline ended (SIGKILL included), then exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable

import httpx

STOP_GRACE_S = 10.0  # SIGTERM to the group, then SIGKILL after this
PORT_FREE_S = 10.0  # how long to wait for the port to be free after the stop
POLL_S = 0.25  # how often readiness is asked
LOG_TAIL = 20  # lines of server.log a failed start reports

# the sentinel: waits for EOF on stdin (redline closed it, or died), then ends the group
SENTINEL = (
    "import os, signal, sys, time\n"
    "pgid = int(sys.argv[1]); grace = float(sys.argv[2])\n"
    "sys.stdin.buffer.read()\n"
    "def alive():\n"
    "    try:\n"
    "        os.killpg(pgid, 0); return True\n"
    "    except OSError:\n"
    "        return False\n"
    "if alive():\n"
    "    try: os.killpg(pgid, signal.SIGTERM)\n"
    "    except OSError: pass\n"
    "    end = time.monotonic() + grace\n"
    "    while alive() and time.monotonic() < end: time.sleep(0.05)\n"
    "    try: os.killpg(pgid, signal.SIGKILL)\n"
    "    except OSError: pass\n"
)


def free_port() -> int:
    """A port nothing listens on now, on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _die_with_parent() -> None:  # pragma: no cover - runs in the child, before exec
    """The server's leader gets SIGKILL when redline dies (Linux). Strictly, when the thread
    that launched it ends: launch from the main thread, never from a passing one."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


@dataclass
class Started:
    ok: bool
    startup_s: float
    why: str = ""  # why it is not ready: "exited with status 2", "not ready within 900 s"
    tail: tuple[str, ...] = ()  # the last lines of its log, when it failed


class ServerProcess:
    """A server launched for one configuration (`command`), its log at `log_path`."""

    def __init__(self, command: tuple[str, ...], log_path: Path, grace_s: float = STOP_GRACE_S) -> None:
        self.command = command
        self.log_path = log_path
        self.grace_s = grace_s
        self.proc: subprocess.Popen | None = None
        self.sentinel: subprocess.Popen | None = None
        self.t_launch = 0.0
        self._log: BinaryIO | None = None

    @property
    def pgid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def launch(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = log = open(self.log_path, "ab", buffering=0)
        self.t_launch = time.perf_counter()
        try:
            self.proc = subprocess.Popen(
                list(self.command), stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            )
        except OSError as exc:
            log.write(f"redline: cannot start {self.command[0]!r}: {exc.strerror or exc}\n".encode())
            self.proc = None
            return
        self.sentinel = subprocess.Popen(
            [sys.executable, "-c", SENTINEL, str(self.proc.pid), str(self.grace_s)],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )

    def exited(self) -> int | None:
        if self.proc is None:
            return 127
        return self.proc.poll()

    def tail(self, n: int = LOG_TAIL) -> tuple[str, ...]:
        try:
            with open(self.log_path, "rb") as f:
                lines = deque(f, maxlen=n)
        except OSError:
            return ()
        return tuple(x.decode("utf-8", "replace").rstrip("\n") for x in lines)

    async def wait_ready(self, url: str, timeout_s: float, on_wait: Callable[[str], None] = lambda s: None) -> Started:
        """Until `/health` and `/v1/models` (or `/server_info`, `/get_server_info`) answer 200, the process
        exits, or `timeout_s` passes."""
        deadline = time.perf_counter() + timeout_s
        async with httpx.AsyncClient(timeout=5.0) as client:
            while True:
                el = time.perf_counter() - self.t_launch
                code = self.exited()
                if code is not None:
                    return Started(False, el, f"exited with status {code} before it was ready", self.tail())
                waiting = await _not_ready(client, url)
                if waiting is None:
                    return Started(True, time.perf_counter() - self.t_launch)
                if time.perf_counter() >= deadline:
                    return Started(False, el, f"not ready within {timeout_s:g} s ({waiting})", self.tail())
                on_wait(f"{el:.0f} s, {waiting}")
                await asyncio.sleep(POLL_S)

    def stop(self) -> None:
        """SIGTERM to the whole group, SIGKILL after the grace period; the sentinel released."""
        pgid = self.pgid
        if pgid is not None:
            with contextlib.suppress(OSError):
                os.killpg(pgid, signal.SIGTERM)
            end = time.monotonic() + self.grace_s
            while time.monotonic() < end and _group_alive(pgid):
                if self.proc is not None:
                    with contextlib.suppress(Exception):
                        self.proc.wait(timeout=0.05)
                else:
                    time.sleep(0.05)
            if _group_alive(pgid):
                with contextlib.suppress(OSError):
                    os.killpg(pgid, signal.SIGKILL)
            if self.proc is not None:
                with contextlib.suppress(Exception):
                    self.proc.wait(timeout=5)
        if self.sentinel is not None:
            with contextlib.suppress(Exception):
                stdin = self.sentinel.stdin
                if stdin is not None:
                    stdin.close()
                self.sentinel.wait(timeout=5)
        if self._log is not None:
            self._log.close()
            self._log = None


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except OSError:
        return False
    return True


def group_alive(pgid: int) -> bool:
    """Is any process of the group still there (a zombie leader reaped or not)?"""
    return _group_alive(pgid)


async def _not_ready(client: httpx.AsyncClient, url: str) -> str | None:
    """None when the server is ready, else what it waits for."""
    base = url.rstrip("/")
    try:
        r = await client.get(base + "/health")
        if r.status_code != 200:
            return f"/health answers {r.status_code}"
        # SGLang's /get_server_info is deprecated (a warning logged on every call): /server_info
        for path in ("/v1/models", "/server_info", "/get_server_info"):
            r = await client.get(base + path)
            if r.status_code == 200:
                return None
        return "/v1/models and /server_info do not answer yet"
    except httpx.HTTPError as exc:
        return f"no answer yet ({exc.__class__.__name__})"


async def wait_port_free(port: int | None, timeout_s: float = PORT_FREE_S) -> bool:
    if port is None:
        return True
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if port_free(port):
            return True
        await asyncio.sleep(0.1)
    return port_free(port)
