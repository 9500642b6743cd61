"""The operator's app: one live screen (tui/live_screen.py: what is drawn and every key that
steers the load) against one server, or several (`--url` repeated: a row per target,
widgets/targets_panel.py), from this process or from worker processes (`--workers N`: their
health, widgets/workers_panel.py); the dialogs open over it.

The engine runs in its own process (engine/host.py); the app reads its latest Snapshot four
times a second and hands it to the screen, which sends commands. The app owns the way out: `q`
and a sweep's `n` (the screen's keys) and Ctrl-C (the app's, so it quits from under a dialog
too), the signals, the exit status. Nothing here computes a metric: every number drawn comes
from the Snapshot (see engine/core/snapshot.py for where each is computed).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from textual.app import App
from textual.binding import Binding
from textual.reactive import reactive

from ..engine import api
from ..engine.api import Snapshot
from .live_screen import LiveScreen

if TYPE_CHECKING:
    from ..engine.api import Preset
    from ..engine.report.api import SessionSummary
    from .ports import EngineHost
    from .sweep_status import SweepStatus

REFRESH_S = 0.25
WIDE_COLUMNS = 150  # from here panels and tables sit side by side (the tables need 74 columns)
EXIT_GRACE_S = 5.0  # the load is stopped and the log complete; never hang on the way out


class RedlineApp(App[int]):
    CSS_PATH = "redline.tcss"
    TITLE = "redline"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (WIDE_COLUMNS, "-wide")]
    ENABLE_COMMAND_PALETTE = False
    NOTIFICATION_TIMEOUT = 4.0  # a notice (an error too) is gone in 4 s; the log keeps what matters (redline.tcss)
    # Ctrl-C, read as a key (the terminal is in raw mode): as SIGINT, exit 130 (docs/cli.md),
    # from the live screen or from under any dialog. Every other key is the live screen's.
    BINDINGS = [Binding("ctrl+c", "interrupt", "quit", show=False, priority=True)]

    # the app's one mode: the live screen, mounted (composed, its first frame drawn) before the
    # app's own Mount, as an app's compose is
    DEFAULT_MODE = "live"

    snapshot: reactive[Snapshot | None] = reactive(None, always_update=True)

    def __init__(
        self,
        host: EngineHost,
        *,
        step: int = 8,
        rate_step: float = 1.0,
        preset: Preset | None = None,
        presets_dir: Path | None = None,
        compare: SessionSummary | None = None,
        early_signals: list[signal.Signals] | None = None,
        body_after_first_frame: bool = False,
        sweep: SweepStatus | None = None,
    ) -> None:
        super().__init__()
        self.host = host
        self.on_hard_exit: list[Callable[[], None]] = []  # called before SIGHUP's os._exit
        self._watchdog: threading.Timer | None = None
        self.body_after_first_frame = body_after_first_frame  # the header and the footer first (body.py)
        self._early_signals = early_signals if early_signals is not None else []
        self._presets_dir = presets_dir  # None: the built-in presets (looked up when `p` opens the picker)
        self.exit_reason = "quit"
        self.hard_exit = False  # set by `redline` itself (not by tests): never hang on exit
        self._quitting = False
        self.live = LiveScreen(self, host, step=step, rate_step=rate_step, preset=preset, compare=compare,
                               body_after_first_frame=body_after_first_frame, sweep=sweep)
        self.add_mode(self.DEFAULT_MODE, lambda: self.live)

    @property
    def presets_dir(self) -> Path:
        return self._presets_dir if self._presets_dir is not None else api.builtin_dir()

    @presets_dir.setter
    def presets_dir(self, d: Path) -> None:
        self._presets_dir = d

    @property
    def body_up(self) -> bool:
        """The live screen's body is mounted (the first frame is the header and the footer)."""
        return self.live.body_up

    @property
    def on_body_up(self) -> list[Callable[[], None]]:
        """Called once the body is mounted (tui/run_app.py: the garbage collector on again)."""
        return self.live.on_body_up

    @property
    def quitting(self) -> bool:
        return self._quitting

    def on_mount(self) -> None:
        """After the live screen's (its first frame, a preset it starts): the refresh, the
        signals, and one that arrived while the app was starting."""
        self.set_interval(REFRESH_S, self.pull_snapshot)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, self._on_signal, sig)
            except (NotImplementedError, RuntimeError, ValueError):  # not the main thread
                pass
        if self._early_signals:
            self._on_signal(self._early_signals[0])

    def _on_signal(self, sig: signal.Signals) -> None:
        self.quit_soon(f"signal {sig.name}")

    # -- refresh -----------------------------------------------------------------------
    def pull_snapshot(self) -> None:
        snap = self.snapshot = self.host.snapshot
        if snap is not None and snap.done and not self._quitting:  # ended elsewhere (POST /v1/stop)
            self.quit_soon("engine stopped")
        elif snap is not None and snap.finished and not self._quitting:  # --num-requests / --duration: closes as `q` does
            self.quit_soon(f"fixed-size run done: {snap.finished}")
        self.live.follow_sweep(snap)

    def watch_snapshot(self, snap: Snapshot | None) -> None:
        self.live.show(snap)

    # -- the way out -------------------------------------------------------------------
    def quit_soon(self, reason: str) -> None:
        """quit_redline in a worker: from a refresh, a signal, the live screen."""
        self.run_worker(self.quit_redline(reason), exclusive=True, group="quit")

    async def quit_redline(self, reason: str = "quit") -> None:
        """Stop all load, complete the session log, exit."""
        if self._quitting:
            return
        self._quitting = True
        self.exit_reason = reason
        await asyncio.to_thread(self.host.stop, reason)
        if reason == "signal SIGHUP" and self.hard_exit:
            # The terminal is gone: the log is complete and the load stopped; restoring a
            # terminal that no longer exists can block forever inside the driver.
            for callback in self.on_hard_exit:
                with contextlib.suppress(Exception):  # nothing may keep redline from leaving
                    callback()
            os._exit(128 + signal.SIGHUP)
        if self.hard_exit:
            self._watchdog = _exit_watchdog(EXIT_GRACE_S)
        self.exit(return_code=exit_status(reason))

    def cancel_exit_watchdog(self) -> None:
        """The terminal was restored: a sweep's next configuration runs in this process."""
        if self._watchdog is not None:
            self._watchdog.cancel()

    async def action_interrupt(self) -> None:
        """Ctrl-C, read as a key: what SIGINT does, exit 130."""
        await self.quit_redline("signal SIGINT")


def exit_status(reason: str) -> int:
    """`q` and an engine that stopped: 0; a signal (Ctrl-C is SIGINT): 128 + its number, as
    docs/cli.md says (130 / 143 / 129)."""
    if reason.startswith("signal "):
        try:
            return 128 + signal.Signals[reason.split(" ", 1)[1]].value
        except KeyError:
            return 1
    return 0


def _exit_watchdog(seconds: float) -> threading.Timer:
    """Exit anyway if the terminal cannot be restored (e.g. it went away mid-shutdown)."""
    t = threading.Timer(seconds, lambda: os._exit(1))
    t.daemon = True
    t.start()
    return t
