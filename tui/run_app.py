"""Start the target and the engine process, and the app; whatever happens, stop the load on the
way out.

On a terminal the app draws at once (issue 26): its first frame is the header ("[STARTING]
C=8") and the footer, the rest of the screen comes a frame later (tui/body.py), and nothing
waits for the target or the engine. They start on a thread beside it (StartingHost): the
built-in sim's process (when there is no --url) at once; the engine's process, the heavier
start, once the first frame is drawn (or FRAME_WAIT_S has passed; at once where each of the
three has a core), importing the engine while the sim finishes starting, then handed its
config with the sim's URL. The screen says
"starting" until the engine's first snapshot. A start that fails ends the app and prints the
same one line, with the same exit status, as before. Without a terminal (a pipe, a test)
nothing is drawn until the engine is up, so a refused start leaves nothing but its one line.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import gc
import signal
import sys
import threading
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..engine import api
from .builtin_sim import BUILTIN_SIM, running_target
from .exits import EXIT_BAD_INPUT, EXIT_OK, EXIT_ROWS_LOST, EXIT_UNREACHABLE, session_loss, session_saved
from .sweep_status import StartAbandoned

if TYPE_CHECKING:
    from typing import Callable

    from ..engine.api import EngineConfig, EngineProcess, Preset, Snapshot
    from ..engine.report.api import SessionSummary
    from .sweep_status import SweepStatus

    # a sweep's target: (config, cancel) -> a context manager yielding the config to load (its server up)
    TargetOf = Callable[[EngineConfig, threading.Event], contextlib.AbstractContextManager[EngineConfig]]

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
START_TIMEOUT_S = 120.0  # as engine/host.py waits for its child
# the engine process is spawned once the first frame is drawn (or after this long, whichever
# comes first): on a busy machine its start-up would otherwise take the CPU the frame needs
FRAME_WAIT_S = 1.0
# ... unless there are this many cores or more: the app, the sim and the engine each have one
CORES_TO_START_AT_ONCE = 4


def run_tui(cfg: EngineConfig, args: argparse.Namespace, preset: Preset | None = None, compare: SessionSummary | None = None, *,
            target: TargetOf | None = None, sweep: SweepStatus | None = None, on_hard_exit: Callable[[], None] | None = None) -> int:
    """The app on `cfg` until it quits; the exit status. A sweep (tui/sweep_view.py) hands
    `target` (its configuration's server, started on the start thread), `sweep` (the line
    above the header; the app's exit reason is written back to it) and `on_hard_exit`."""
    # A signal before the app is up must still stop the load and close the log with its own
    # reason: remember it; the app acts on it once mounted.
    caught: list[signal.Signals] = []

    def early(signum: int, frame: object) -> None:
        caught.append(signal.Signals(signum))

    for sig in SIGNALS:
        signal.signal(sig, early)
    if not on_a_terminal():
        with running_target(cfg, args) as cfg:
            return _start_then_draw(cfg, args, preset, compare, caught)
    drawn = threading.Event()
    host = StartingHost(cfg, args, drawn=drawn, target=target)
    host.begin()
    collecting = gc.isenabled()
    gc.disable()  # until the screen is up (collect_again)
    from .app import RedlineApp

    app = RedlineApp(host, step=args.step, rate_step=getattr(args, "rate_step", 1.0), preset=preset, compare=compare,
                     early_signals=caught, body_after_first_frame=True, sweep=sweep)
    app.hard_exit = True
    if on_hard_exit is not None:
        app.on_hard_exit.append(on_hard_exit)
    app.call_after_refresh(drawn.set)
    if collecting:
        app.on_body_up.append(collect_again)
    try:
        app.run()
    finally:
        if collecting:
            gc.enable()
        host.stop(app.exit_reason)
        app.cancel_exit_watchdog()  # a sweep goes on to its next configuration
    if sweep is not None:
        sweep.ended_by = app.exit_reason
        if caught:
            return 128 + caught[0].value
        if host.error is not None and not isinstance(host.error, StartAbandoned):
            return start_failed(host.error)
        if host.error is None:
            return saved(host, app.return_code, f"{sweep.label}: ")
        return app.return_code or EXIT_OK
    if host.error is not None:
        return start_failed(host.error)
    if caught:  # a signal before the app was up: the app stopped the load for it, exit as for a signal
        return 128 + caught[0].value
    return saved(host, app.return_code)  # Ctrl-C and the signals: 128 + N (app.py exit_status)


def saved(host: StartingHost | EngineProcess, return_code: int | None, prefix: str = "") -> int:
    """The exit's line of the session log, from the engine's last snapshot ("session saved in
    DIR", or "session saved, N rows lost: REASON" when a write or fsync failed), and the exit
    status: the app's (a signal: 128 + N), else EXIT_ROWS_LOST when rows were lost."""
    snap = host.snapshot
    loss = session_loss(snap.session_error, snap.session_lost_rows)
    print(f"redline: {prefix}{session_saved(host.config.out_dir, loss)}", file=sys.stderr if loss else sys.stdout, flush=True)
    return return_code or (EXIT_ROWS_LOST if loss else EXIT_OK)


def collect_again() -> None:
    """Start-up (the imports, the app, its first frames) allocates some hundred thousand
    objects that live as long as redline: the garbage collector is off while they are made
    (a full collection walked them all, ~0.1 s before the first frame) and they are left out
    of its later walks (gc.freeze) once the screen is up."""
    gc.freeze()
    gc.enable()


def on_a_terminal() -> bool:
    """Whether the app can draw: Textual reads keys from stdin and draws on stderr."""
    try:
        return bool(sys.__stdin__ and sys.__stdin__.isatty() and sys.__stderr__ and sys.__stderr__.isatty())
    except (ValueError, OSError):  # closed
        return False


def start_failed(exc: BaseException) -> int:
    """The one line of a refused start, and its exit status."""
    if isinstance(exc, (api.TargetError, api.SessionError)):
        print(f"redline: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if isinstance(exc, api.TargetUnreachable):
        print(f"redline: error: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    if isinstance(exc, api.EngineError):
        print(f"redline: error: engine failed to start: {exc}", file=sys.stderr)
        return 1
    raise exc


def _start_then_draw(cfg: EngineConfig, args: argparse.Namespace, preset: Preset | None, compare: SessionSummary | None,
                     caught: list[signal.Signals]) -> int:
    host = api.EngineProcess(cfg)
    try:
        host.start()
    except (api.TargetError, api.SessionError, api.TargetUnreachable, api.EngineError) as exc:
        return start_failed(exc)
    if caught:
        host.stop(f"signal {caught[0].name}")
        return 128 + caught[0].value
    from .app import RedlineApp

    app = RedlineApp(host, step=args.step, rate_step=getattr(args, "rate_step", 1.0), preset=preset, compare=compare, early_signals=caught)
    app.hard_exit = True
    try:
        app.run()
    finally:
        host.stop(app.exit_reason)
    return saved(host, app.return_code)


class StartingHost:
    """The engine host as the app sees it (snapshot, send, stop, config) while it starts on a
    thread: the target (the built-in sim when there is no --url), then the EngineProcess.

    Until the engine is up the snapshot is a "starting" one and commands wait, in order, to be
    sent the moment it is; after that every call is the EngineProcess's own. When the start
    fails, `error` holds why and the snapshot says done (the app then quits by itself, and
    run_tui prints the one line)."""

    def __init__(self, cfg: EngineConfig, args: argparse.Namespace, drawn: threading.Event | None = None,
                 target: TargetOf | None = None) -> None:
        self.config = cfg
        # target(cfg, cancel) -> a context manager yielding the config to load (a sweep's server);
        # None: running_target (the --url as given, or the built-in sim)
        self._target_of = target
        self.cancel = threading.Event()  # set by stop(): a target still starting gives up
        self._drawn = drawn  # set once the app's first frame is drawn: the engine process waits for it
        self.error: BaseException | None = None
        self._args = args
        self._host: EngineProcess | None = None
        self._up = False  # started, or failed: sends go straight through (or fail) from now on
        self._lock = threading.Lock()
        self._waiting: list[tuple[Any, concurrent.futures.Future]] = []
        self._target = contextlib.ExitStack()  # the built-in sim, stopped last
        self._thread = threading.Thread(target=self._start, name="redline-start", daemon=True)
        self._starting = api.Snapshot(t=0.0, elapsed_s=0.0, state="starting", target_c=cfg.concurrency, previous_c=None,
                                      in_flight=0, max_concurrency=cfg.max_concurrency)

    def begin(self) -> None:
        """Start on the thread; call before the app runs. The engine process is spawned by
        multiprocessing, whose resource tracker is started here, on the real stderr: once the
        app is up, Textual's stand-in for stderr has no file descriptor to hand a child."""
        from multiprocessing import resource_tracker

        resource_tracker.ensure_running()
        self._thread.start()

    def _start(self) -> None:
        early: concurrent.futures.Future | None = None
        try:
            if self.config.url == BUILTIN_SIM:  # the sim takes a while: the engine's process starts meanwhile
                early = concurrent.futures.Future()
                threading.Thread(target=self._launch, args=(early,), name="redline-launch", daemon=True).start()
            if self._target_of is not None:
                cfg = self._target.enter_context(self._target_of(self.config, self.cancel))
            else:
                cfg = self._target.enter_context(running_target(self.config, self._args))
            if early is None:
                self._wait_drawn()
                self._host = api.EngineProcess(cfg)
            else:
                self._host = early.result()
            self._host.start(config=cfg)
            self.config = cfg
        except BaseException as exc:  # noqa: BLE001 - handed to run_tui, which prints it
            self.error = exc
            if early is not None and self._host is None:  # launched, never configured: it ends at once
                with contextlib.suppress(BaseException):
                    early.result().stop("start failed")
        with self._lock:
            self._up = True
            waiting, self._waiting = self._waiting, []
        for cmd, fut in waiting:
            self._chain(cmd, fut)

    def _wait_drawn(self) -> None:
        if self._drawn is not None:
            self._drawn.wait(FRAME_WAIT_S)

    def _launch(self, early: concurrent.futures.Future) -> None:
        """The engine's process, launched once the first frame is drawn (at once with cores to
        spare); it imports the engine while the sim starts, and is handed its config when the
        sim listens."""
        try:
            if api.usable_cores() < CORES_TO_START_AT_ONCE:
                self._wait_drawn()
            host = api.EngineProcess(self.config, url_later=True)
            host.launch()
        except BaseException as exc:  # noqa: BLE001 - _start raises it
            early.set_exception(exc)
            return
        early.set_result(host)

    def _chain(self, cmd: Any, fut: concurrent.futures.Future) -> None:
        if self.error is not None or self._host is None:
            fut.set_exception(api.EngineError("EngineError", f"the engine did not start: {self.error}"))
            return
        sent = self._host.send(cmd)

        def done(f: concurrent.futures.Future) -> None:
            if f.exception() is not None:
                fut.set_exception(f.exception())
            else:
                fut.set_result(f.result())

        sent.add_done_callback(done)

    @property
    def snapshot(self) -> Snapshot:
        if self.error is not None:
            return replace(self._starting, state="stopped", done=True)
        host = self._host
        if host is not None and self._up:
            return host.snapshot
        return self._starting

    def send(self, cmd: Any) -> concurrent.futures.Future:
        with self._lock:
            if not self._up:
                fut: concurrent.futures.Future = concurrent.futures.Future()
                self._waiting.append((cmd, fut))
                return fut
        if self.error is None and self._host is not None:
            return self._host.send(cmd)
        fut = concurrent.futures.Future()
        self._chain(cmd, fut)
        return fut

    def stop(self, reason: str = "quit") -> None:
        """Stop all load and complete the log (after the start has finished either way), then
        the built-in sim. Safe to call twice."""
        self.cancel.set()
        self._thread.join(START_TIMEOUT_S)
        try:
            if self._host is not None and self.error is None:
                self._host.stop(reason)
        finally:
            self._target.close()
