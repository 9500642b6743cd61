"""Entry points of the simulated server: blocking, in a thread, or in a subprocess.

- :func:`run_sim`: serve in this process until SIGINT/SIGTERM (``python -m redline.engine.sim``,
  ``redline sim``); a crashing profile ends the process with exit status 1.
- :func:`start_sim_thread`: serve from a background thread with its own event loop (plain
  ``redline``, tests); a crashing profile closes the listening socket and every connection.
- :func:`spawn_sim_process`: ``python -m redline.engine.sim`` as a subprocess (tests; the simulator
  then runs on another CPU core than the client).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, Sequence

from .profiles import SGLANG_VERSIONS, SimProfile, apply_overrides, get_profile, profile_names

if TYPE_CHECKING:  # aiohttp and the sim's app are imported where a server is made: spawning one needs neither
    from aiohttp import web

__all__ = [
    "SimServer", "SimHandle", "SimProcess", "run_sim", "start_sim_thread", "spawn_sim_process",
    "add_sim_arguments", "main", "LISTENING_PREFIX", "WarmSim",
]

LISTENING_PREFIX = "redline sim: listening on "
#: Seconds in-flight handlers get to finish when a server stops.
_SHUTDOWN_TIMEOUT_S = 1.0


def _resolve(profile: str | SimProfile) -> SimProfile:
    return profile if isinstance(profile, SimProfile) else get_profile(profile)


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _new_event_loop() -> asyncio.AbstractEventLoop:
    """A uvloop loop where uvloop is importable, else the default asyncio loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class SimServer:
    """One simulated server listening on a TCP port (aiohttp runner + site)."""

    def __init__(
        self,
        profile: SimProfile,
        seed: int = 0,
        on_crash: Callable[[str], None] | None = None,
    ) -> None:
        from .http_app import SimService

        self.profile = profile
        self.service = SimService(profile, seed, on_crash=on_crash)
        self._runner: web.AppRunner | None = None
        self.host = ""
        self.port = 0

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:41234``."""
        return _url(self.host, self.port)

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> None:
        """Bind and start serving; ``port=0`` picks a free port (see :attr:`port`)."""
        from aiohttp import web

        runner = web.AppRunner(
            self.service.build_app(),
            handler_cancellation=True,
            access_log=None,
            shutdown_timeout=_SHUTDOWN_TIMEOUT_S,
            keepalive_timeout=self.profile.keepalive_s,
        )
        await runner.setup()
        try:
            site = web.TCPSite(runner, host, port, backlog=1024)
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self.host = host
        self.port = int(runner.addresses[0][1])

    async def stop(self) -> None:
        """Stop listening, end in-flight requests and the model (idempotent)."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def kill(self) -> None:
        """Die like a crashed server: stop listening and drop every connection at once."""
        runner = self._runner
        if runner is None:
            return
        for site in list(runner.sites):
            await site.stop()
        server = runner.server
        if server is not None:
            for conn in server.connections:
                if conn.transport is not None:
                    conn.transport.abort()
        await self.stop()


# ---- blocking ----------------------------------------------------------------------------


def run_sim(
    host: str = "127.0.0.1",
    port: int = 0,
    profile: str | SimProfile = "healthy",
    seed: int = 0,
    ready_file: str | os.PathLike[str] | None = None,
    parent_pid: int | None = None,
) -> None:
    """Serve until SIGINT/SIGTERM; print one ``listening on`` line once bound.

    ``parent_pid``: exit when that process is gone (redline's built-in sim must not outlive
    redline, even after a SIGKILL).

    ``ready_file``, if given, receives the base URL (one line, written atomically) once the
    server listens. A crashing profile writes one line on stderr and exits the process (1).
    """
    prof = _resolve(profile)

    def die(reason: str) -> None:
        sys.stderr.write(f"redline sim: crashed (profile {prof.name}): {reason}\n")
        sys.stderr.flush()
        os._exit(1)

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, stop.set)
        server = SimServer(prof, seed, on_crash=die)
        await server.start(host, port)
        watch = asyncio.create_task(_watch_parent(parent_pid, stop)) if parent_pid else None
        try:
            print(f"{LISTENING_PREFIX}{server.url} profile={prof.name}", flush=True)
            if ready_file is not None:
                path = Path(ready_file)
                tmp = path.with_name(path.name + ".tmp")
                tmp.write_text(server.url + "\n")
                tmp.replace(path)
            await stop.wait()
        finally:
            if watch is not None:
                watch.cancel()
            await server.stop()

    loop = _new_event_loop()
    try:
        loop.run_until_complete(serve())
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


async def _watch_parent(pid: int, stop: asyncio.Event) -> None:
    while True:
        await asyncio.sleep(0.5)
        if os.getppid() != pid:
            stop.set()
            return


# ---- background thread -------------------------------------------------------------------


class SimHandle:
    """A simulator serving from a background thread with its own event loop."""

    def __init__(self, profile: SimProfile, seed: int, host: str, port: int) -> None:
        self.profile = profile
        self._seed = seed
        self._host = host
        self._req_port = port
        self._server: SimServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._stopped = False
        self._lock = threading.Lock()
        self.port = 0
        self.url = ""
        #: Why the profile crashed the server, or None while it lives.
        self.crashed: str | None = None
        self._kill_task: asyncio.Task[None] | None = None
        self._thread = threading.Thread(target=self._main, name="redline-sim", daemon=True)

    def _start(self, timeout: float) -> None:
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError(f"redline sim: thread did not start within {timeout:g} s")
        if self._error is not None:
            raise self._error

    def _main(self) -> None:
        loop = _new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        finally:
            loop.close()

    async def _serve(self) -> None:
        self._stop_event = asyncio.Event()
        server = SimServer(self.profile, self._seed, on_crash=self._on_crash)
        try:
            await server.start(self._host, self._req_port)
        except BaseException as exc:  # reported to the starting thread
            self._error = exc
            self._ready.set()
            return
        self._server = server
        self.port = server.port
        self.url = server.url
        self._ready.set()
        try:
            await self._stop_event.wait()
        finally:
            await server.stop()
            if self._kill_task is not None:
                await asyncio.gather(self._kill_task, return_exceptions=True)

    def _on_crash(self, reason: str) -> None:
        self.crashed = reason
        if self._server is not None and self._kill_task is None:
            self._kill_task = asyncio.get_running_loop().create_task(self._server.kill())

    @property
    def alive(self) -> bool:
        """Whether the thread still serves (False after stop() or a crash)."""
        return self._thread.is_alive() and self.crashed is None and not self._stopped

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server and join the thread (idempotent)."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        loop, event = self._loop, self._stop_event
        if loop is not None and event is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # loop closed in between
                loop.call_soon_threadsafe(event.set)
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def __enter__(self) -> SimHandle:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def start_sim_thread(
    profile: str | SimProfile = "healthy",
    seed: int = 0,
    host: str = "127.0.0.1",
    port: int = 0,
) -> SimHandle:
    """Start a simulator in a background thread; returns once it listens."""
    handle = SimHandle(_resolve(profile), seed, host, port)
    handle._start(timeout=15.0)
    return handle


# ---- subprocess --------------------------------------------------------------------------


class SimProcess:
    """``python -m redline.engine.sim`` running as a subprocess."""

    def __init__(self, proc: subprocess.Popen[bytes], url: str, stderr_path: Path) -> None:
        self.proc = proc
        self.url = url
        self.port = int(url.rsplit(":", 1)[1])
        self._stderr_path = stderr_path

    def stderr_text(self) -> str:
        """What the process wrote on stderr so far."""
        try:
            return self._stderr_path.read_text(errors="replace")
        except OSError:
            return ""

    def wait(self, timeout: float) -> int | None:
        """Wait up to ``timeout`` s for the process to exit; its status, or None."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 3 s (idempotent)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(3.0)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(3.0)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        with contextlib.suppress(OSError):
            self._stderr_path.unlink()

    def __enter__(self) -> SimProcess:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _read_line(proc: subprocess.Popen[bytes], deadline: float) -> str | None:
    """First stdout line of ``proc`` before ``deadline`` (monotonic), or None."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    buf = b""
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                return None
            data = os.read(fd, 4096)
            if not data:
                return None
            buf += data
    return buf.split(b"\n", 1)[0].decode(errors="replace")


def spawn_sim_process(
    profile: str = "healthy",
    seed: int = 0,
    extra_args: Sequence[str] = (),
    timeout: float = 15.0,
) -> SimProcess:
    """Start ``python -m redline.engine.sim --port 0`` and wait for its ``listening on`` line."""
    proc, stderr_path = _popen_sim(_sim_argv(profile, seed, extra_args), stdin=subprocess.DEVNULL)
    return _listening(proc, stderr_path, timeout)


def _popen_sim(argv: list[str], stdin: int) -> tuple[subprocess.Popen[bytes], Path]:
    """``python -m redline.engine.sim ARGV``, its stdout a pipe, its stderr a temporary file
    (returned beside it). Its own session: a Ctrl-C or SIGHUP aimed at the terminal's process
    group must not kill the server before redline has stopped its load; --parent-pid ends it
    with us."""
    fd, name = tempfile.mkstemp(prefix="redline-sim-", suffix=".stderr")
    with os.fdopen(fd, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "redline.engine.sim", *argv], stdout=subprocess.PIPE,
                                stderr=err, stdin=stdin, start_new_session=True)
    return proc, Path(name)


def _discard(proc: subprocess.Popen[bytes], stderr_path: Path) -> str:
    """End a sim process that serves nothing (killed at once), close its pipes and remove its
    stderr file; returns what it wrote there."""
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None and not pipe.closed:
            with contextlib.suppress(OSError):
                pipe.close()
    if proc.poll() is None:
        proc.kill()
    proc.wait(5.0)
    try:
        detail = stderr_path.read_text(errors="replace").strip()
    except OSError:
        detail = ""
    with contextlib.suppress(OSError):
        stderr_path.unlink()
    return detail


def _sim_argv(profile: str, seed: int, extra_args: Sequence[str]) -> list[str]:
    return ["--port", "0", "--sim-profile", profile, "--seed", str(seed), "--parent-pid", str(os.getpid()),
            *extra_args]


def _listening(proc: subprocess.Popen[bytes], stderr_path: Path, timeout: float) -> SimProcess:
    """The SimProcess once ``proc`` printed its ``listening on`` line (else it is ended and
    RuntimeError says why)."""
    line = _read_line(proc, time.monotonic() + timeout)
    if line is None or not line.startswith(LISTENING_PREFIX):
        detail = _discard(proc, stderr_path)
        raise RuntimeError(
            f"redline sim did not start within {timeout:g} s (exit {proc.returncode}): "
            f"{line or detail or 'no output'}"
        )
    url = line[len(LISTENING_PREFIX):].split()[0]
    return SimProcess(proc, url, stderr_path)


class WarmSim:
    """A sim process started ahead of need (tests: its Python start-up and imports, most of a
    sim's start, happen while the previous test runs): ``python -m redline.engine.sim
    --argv-on-stdin`` imports the server and waits; :meth:`start` sends it the options
    :func:`spawn_sim_process` would have given it and waits for its ``listening on`` line, so
    the server it runs is the one ``spawn_sim_process`` starts. :meth:`close` ends an unused one."""

    def __init__(self) -> None:
        self.proc, self._stderr_path = _popen_sim(["--argv-on-stdin"], stdin=subprocess.PIPE)

    def start(self, profile: str = "healthy", seed: int = 0, extra_args: Sequence[str] = (),
              timeout: float = 15.0) -> SimProcess:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(_sim_argv(profile, seed, extra_args)) + "\n").encode())
            self.proc.stdin.close()
        except OSError:  # it died before it was asked: said by _listening
            pass
        return _listening(self.proc, self._stderr_path, timeout)

    def close(self) -> None:
        """End a sim that was never started (it serves nothing: killed at once)."""
        _discard(self.proc, self._stderr_path)


# ---- command line ------------------------------------------------------------------------


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--port {text!r}: expected a port number from 0 to 65535") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"--port {text!r}: expected a port number from 0 to 65535")
    return value


def _sglang_version(text: str) -> str:
    if text not in SGLANG_VERSIONS:
        raise argparse.ArgumentTypeError(f"--sglang {text!r}: expected one of {', '.join(SGLANG_VERSIONS)}")
    return text


def _override(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--set {text!r}: expected FIELD=VALUE")
    return key.strip(), value.strip()


class _Renamed(argparse.Action):
    """The old ``--profile``: any use refused with one line naming its new name."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:  # Any: argparse's own
        super().__init__(option_strings, argparse.SUPPRESS, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        raise argparse.ArgumentError(None, PROFILE_RENAMED)


PROFILE_RENAMED = "--profile is now --sim-profile (the sim's profile; --profile-s is the server's profiler)"


def add_sim_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--host --port --sim-profile --seed --set`` to ``parser`` (the old ``--profile``:
    refused with one line naming ``--sim-profile``)."""
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=_port, default=0,
                        help="port to listen on; 0 picks a free one (default 0)")
    parser.add_argument("--sim-profile", dest="profile", default="healthy", metavar="NAME",
                        help=f"the sim's profile: {', '.join(profile_names())} (default healthy)")
    parser.add_argument("--profile", action=_Renamed, nargs="?", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of token texts and fault draws (default 0)")
    parser.add_argument("--sglang", dest="sglang_version", type=_sglang_version, default=None, metavar="VERSION",
                        help=f"whose answers the sim gives: SGLang {' or '.join(SGLANG_VERSIONS)} "
                             f"(default {SimProfile.__dataclass_fields__['sglang_version'].default})")
    parser.add_argument("--set", dest="overrides", action="append", type=_override,
                        default=[], metavar="FIELD=VALUE",
                        help="override one profile field, e.g. --set error_429_rate=0.1")
    parser.add_argument("--parent-pid", type=int, default=None, help=argparse.SUPPRESS)


def run_from_args(args: argparse.Namespace) -> int:
    """Run the simulator from parsed :func:`add_sim_arguments` options; exit status."""
    try:
        overrides = dict(args.overrides)
        if getattr(args, "sglang_version", None) and "sglang_version" not in overrides:
            overrides = {"sglang_version": args.sglang_version, **overrides}
        prof = apply_overrides(get_profile(args.profile), overrides)
    except ValueError as exc:
        print(f"redline sim: {exc}", file=sys.stderr)
        return 2
    try:
        run_sim(host=args.host, port=args.port, profile=prof, seed=args.seed,
                parent_pid=args.parent_pid)
    except OSError as exc:
        print(f"redline sim: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}",
              file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m redline.engine.sim`` / ``redline sim``; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="redline sim",
        description="Simulated SGLang/OpenAI inference server with a continuous-batching "
                    "performance model, simulated GPUs and fault profiles.",
    )
    add_sim_arguments(parser)
    parser.add_argument("--argv-on-stdin", action="store_true", help=argparse.SUPPRESS)  # WarmSim
    args = parser.parse_args(argv)
    if args.argv_on_stdin:
        # import what serving needs, then wait for the options (one JSON list on stdin); EOF:
        # never used, exit at once
        from aiohttp import web  # noqa: F401

        from . import http_app as app  # noqa: F401

        line = sys.stdin.readline()
        if not line.strip():
            return 0
        args = parser.parse_args(json.loads(line))
    return run_from_args(args)
