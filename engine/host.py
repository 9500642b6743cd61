"""Run an Engine away from the UI: on its own process (default) or its own thread.

Drawing holds the UI's interpreter; an engine in the same interpreter waits for the GIL and
stamps bytes late (measured: 60 ms event-loop lag on a thread beside Textual at 80x24).
So the TUI runs the engine in a child process with its own loop; typed commands
(engine/core/commands.py) go down a pipe, immutable Snapshots come back four times a second, and
each command's reply comes back too.

Both hosts have the same surface: start(), stop(reason), snapshot, and send(command), which
returns a concurrent.futures.Future of the engine's reply (export waits on Flush's).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import signal
import threading
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING

from .child import reap, spawn_child
from .core import commands
from .core.config import EngineConfig
from .core.snapshot import Snapshot
from .heap import freeze_heap
from .loop import new_event_loop, read_pipe

if TYPE_CHECKING:  # the engine's own process imports it (_child): the UI's process never needs to
    from .core.engine import Engine

START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 10.0
CONFIG = "config"  # the first message to a child launched with url_later: (CONFIG, EngineConfig)


def _initial(config: EngineConfig) -> Snapshot:
    return Snapshot(t=0.0, elapsed_s=0.0, state="starting", target_c=config.concurrency, previous_c=None, in_flight=0, max_concurrency=config.max_concurrency)


class EngineThread:
    """The engine on a thread of this process (tests, embedding)."""

    def __init__(self, config: EngineConfig) -> None:
        from .run.preset_runner import new_engine

        self.config = config
        self.engine = new_engine(config)
        self._loop = new_event_loop()
        self._thread = threading.Thread(target=self._run, name="redline-engine", daemon=True)
        self._ready: concurrent.futures.Future = concurrent.futures.Future()
        self._stopped = threading.Event()
        self._stop_lock = threading.Lock()  # one stop at a time: the app's quit (a thread) and a caller's
        self._stop_asked = False

    def start(self, timeout: float = START_TIMEOUT_S) -> None:
        """Start the engine; re-raises its start-up error (bad URL, unreachable target)."""
        self._thread.start()
        self._ready.result(timeout=timeout)

    def _run(self) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._start())
            if self._ready.exception() is None:
                loop.run_forever()
        finally:
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()
                self._stopped.set()

    async def _start(self) -> None:
        try:
            from .control.http_api import start_engine  # the control API's module, only once an engine starts

            await start_engine(self.engine)
        except BaseException as exc:  # handed to the caller of start()
            await self.engine.stop("start failed")
            self._ready.set_exception(exc)
            return
        self._ready.set_result(None)

    def stop(self, reason: str = "quit", timeout: float = STOP_TIMEOUT_S) -> None:
        """Stop all load and complete the log; safe to call twice, and from two threads at once
        (the app quits on a thread of its own while its caller stops the host too): the first
        stops the engine, the others wait for it. Before, a second stop could hand the engine
        a stop coroutine as the first stopped its loop: never run, it timed out after `timeout`
        and then met a closed loop (RuntimeError)."""
        with self._stop_lock:
            if self._stop_asked or self._stopped.is_set() or not self._thread.is_alive():
                return
            self._stop_asked = True
            fut = asyncio.run_coroutine_threadsafe(self.engine.stop(reason), self._loop)
            try:
                fut.result(timeout=timeout)
            finally:
                with contextlib.suppress(RuntimeError):  # the loop ended on its own meanwhile
                    self._loop.call_soon_threadsafe(self._loop.stop)
                self._thread.join(timeout=timeout)

    @property
    def snapshot(self) -> Snapshot:
        return self.engine.snapshot

    def send(self, cmd: commands.Command) -> concurrent.futures.Future:
        return asyncio.run_coroutine_threadsafe(_run_command(self.engine, cmd), self._loop)


async def _run_command(engine: Engine, cmd: commands.Command) -> object:
    res = engine.execute(cmd)
    if asyncio.iscoroutine(res):
        res = await res
    return res


# -- the child process ------------------------------------------------------------------------
def _child_main(config: EngineConfig | None, conn: Connection) -> None:
    # Terminal signals go to the whole foreground group; the parent decides. A dead parent
    # (pipe EOF) or a SIGTERM aimed at this process still stops the load and closes the log.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    if config is None:  # launched before its target was known: import the engine, then wait for it
        from .run import preset_runner as runner  # noqa: F401

        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return  # the parent is gone
        if not (isinstance(msg, tuple) and msg[0] == CONFIG):
            conn.close()  # stopped before it was configured: nothing started, nothing to log
            return
        config = msg[1]
    loop = new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(_child(config, conn))
    finally:
        loop.close()
        conn.close()
        freeze_heap()  # the process ends now: its last collections need not walk the heap


async def _child(config: EngineConfig, conn: Connection) -> None:
    from .run.preset_runner import new_engine

    engine = new_engine(config)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    reason = ["quit"]

    def on_sigterm() -> None:
        reason[0] = "signal SIGTERM"
        stop.set()

    loop.add_signal_handler(signal.SIGTERM, on_sigterm)

    def on_stop_request(why: str) -> None:  # POST /v1/stop: as the parent's Stop (q) does
        reason[0] = why
        stop.set()

    engine.steering.on_stop_request = on_stop_request
    # a SIGTERM during the start (a target that never answers, the parent's reap after its start
    # timeout) ends the start: nothing waits for a start to finish before stopping its load
    from .control.http_api import start_engine

    starting = asyncio.ensure_future(start_engine(engine))
    halted = asyncio.ensure_future(stop.wait())
    await asyncio.wait((starting, halted), return_when=asyncio.FIRST_COMPLETED)
    halted.cancel()
    if not starting.done():
        starting.cancel()
        await asyncio.gather(starting, return_exceptions=True)
        await engine.stop(reason[0])
        _send(conn, ("error", "EngineError", f"the engine's start was stopped ({reason[0]})"))
        return
    if (exc := starting.exception()) is not None:
        await engine.stop("start failed")
        conn.send(("error", exc.__class__.__name__, str(exc)))
        return
    engine.publisher.subscribe(lambda snap: _send(conn, ("snapshot", snap)))
    conn.send(("ready", engine.snapshot))
    freeze_heap()  # start-up is over: what it built lives as long as the process

    async def answer(seq: int, cmd: commands.Command) -> None:
        try:
            res = await _run_command(engine, cmd)
            _send(conn, ("reply", seq, True, res))
        except Exception as exc:  # a bad command is an operator error, not a crash
            engine.log("error", f"command {type(cmd).__name__}: {exc}")
            _send(conn, ("reply", seq, False, f"{type(exc).__name__}: {exc}"))

    def on_msg(msg: tuple | None) -> None:
        if msg is None:
            reason[0] = "redline exited (control pipe closed)"
            stop.set()
            return
        seq, cmd = msg
        if isinstance(cmd, commands.Stop):
            reason[0] = cmd.reason
            stop.set()
            return
        asyncio.ensure_future(answer(seq, cmd))

    read_pipe(conn, loop, on_msg, last=lambda msg: isinstance(msg[1], commands.Stop), name="redline-commands")
    await stop.wait()
    await engine.stop(reason[0])
    _send(conn, ("stopped", engine.snapshot))


def _send(conn: Connection, msg: tuple) -> None:
    try:
        conn.send(msg)
    except (OSError, EOFError, BrokenPipeError):
        pass  # the parent is gone; the pipe EOF path stops us


EXITED = "EngineExited"  # the kind the reader gives a start whose process ended; start() names the code


class EngineError(RuntimeError):
    """The child engine failed to start; `kind` is the exception class name."""

    def __init__(self, kind: str, text: str) -> None:
        super().__init__(text)
        self.kind = kind


class EngineProcess:
    """The engine in a child process: the UI's drawing cannot delay its timestamps.

    With `url_later` the child can be launched (launch()) before the target is known, e.g.
    while the built-in sim starts: it imports the engine meanwhile, and start(config) hands it
    the config with the target's URL. Without, start() launches it with `config`."""

    def __init__(self, config: EngineConfig, *, url_later: bool = False) -> None:
        self.config = config
        self._url_later = url_later
        child_config = None if url_later else config
        self._proc, self._conn, self._child_conn = spawn_child(_child_main, (child_config,), "redline-engine", daemon=False)
        self._snapshot = _initial(config)
        self._reader = threading.Thread(target=self._read, name="redline-snapshots", daemon=True)
        self._ready: concurrent.futures.Future = concurrent.futures.Future()
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._seq = 0
        self._pending: dict[int, concurrent.futures.Future] = {}

    def launch(self) -> None:
        """Start the child process (once); start() does when it has not been."""
        if self._proc.pid is None:
            self._proc.start()
            self._child_conn.close()
            self._reader.start()

    def start(self, timeout: float = START_TIMEOUT_S, config: EngineConfig | None = None) -> None:
        """Start the engine; re-raises its start-up error as TargetError/TargetUnreachable.
        `config`: with url_later, the one to run (default: the one given at construction)."""
        self.launch()
        if self._url_later:
            self.config = config or self.config
            with self._lock:
                try:
                    self._conn.send((CONFIG, self.config))
                except (OSError, BrokenPipeError):
                    pass  # the child is gone: the reader says how
        try:
            self._ready.result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            reap(self._proc, 0.0)  # a start that never finished: no load may outlive it
            raise EngineError("EngineError", f"the engine did not start within {timeout:g} s") from None
        except EngineError as exc:
            self._proc.join(STOP_TIMEOUT_S)
            if exc.kind == EXITED:  # the code only now: this thread alone reaps the child
                raise EngineError("EngineError", f"engine process exited (code {self._proc.exitcode})") from None
            from .client.target import TargetError, TargetUnreachable
            from .session import SessionError

            kinds = {"TargetError": TargetError, "TargetUnreachable": TargetUnreachable, "RayUnavailable": TargetUnreachable, "SessionError": SessionError}
            cls = kinds.get(exc.kind)
            raise (cls(str(exc)) if cls is not None else exc) from None

    def _read(self) -> None:
        while True:
            try:
                msg = self._conn.recv()
            except (EOFError, OSError):
                break
            kind = msg[0]
            if kind == "snapshot" or kind == "ready" or kind == "stopped":
                self._snapshot = msg[1]
                if kind == "ready" and not self._ready.done():
                    self._ready.set_result(None)
                if kind == "stopped":
                    break
            elif kind == "reply":
                fut = self._pending.pop(msg[1], None)
                if fut is not None and not fut.done():
                    if msg[2]:
                        fut.set_result(msg[3])
                    else:
                        fut.set_exception(EngineError("CommandError", msg[3]))
            elif kind == "error" and not self._ready.done():
                self._ready.set_exception(EngineError(msg[1], msg[2]))
        self._done.set()
        for fut in list(self._pending.values()):  # the engine is gone: nobody will answer
            if not fut.done():
                fut.set_exception(EngineError("EngineError", "engine process exited"))
        self._pending.clear()
        if not self._ready.done():
            # not self._proc.exitcode here: reading it reaps the child (waitpid), and a reap in
            # this thread raced start()'s own (reap() after a start timeout): the loser's waitpid
            # got ECHILD and is_alive() read True for a process already gone (seen under load)
            self._ready.set_exception(EngineError(EXITED, "engine process exited"))

    @property
    def snapshot(self) -> Snapshot:
        return self._snapshot

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    def send(self, cmd: commands.Command) -> concurrent.futures.Future:
        fut: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            self._seq += 1
            seq = self._seq
            if not isinstance(cmd, commands.Stop):
                self._pending[seq] = fut
            try:
                self._conn.send((seq, cmd))
            except (OSError, BrokenPipeError) as exc:
                self._pending.pop(seq, None)
                fut.set_exception(EngineError("EngineError", f"engine process unreachable: {exc}"))
        return fut

    def stop(self, reason: str = "quit", timeout: float = STOP_TIMEOUT_S) -> None:
        """Stop all load, wait for the log to complete, reap the child. Idempotent."""
        if self._proc.pid is None:
            return
        if self._proc.is_alive():
            self.send(commands.Stop(reason))
            self._done.wait(timeout)
        reap(self._proc, timeout)  # it did not answer: make sure no load keeps running
        try:
            self._conn.close()
        except OSError:
            pass
