"""The operator's screen: live control of concurrency (or of an open loop's request rate)
against one server, or several (`--url` repeated: a row per target, widgets/targets.py), from
this process or from worker processes (`--workers N`: their health, widgets/workers.py).

The engine runs in its own process (engine/host.py); this app reads its latest Snapshot four
times a second and sends commands. Nothing here computes a metric: every number drawn comes
from the Snapshot (see engine/core/snapshot.py for where each is computed).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Callable

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.css.query import NoMatches
from textual.reactive import reactive
from textual.widgets import Footer

from ..engine import api
from ..engine.api import Snapshot
from .engine_commands import C
from .load_keys import OPEN_LOOP, LoadKeys
from .preset_keys import PresetKeys
from .sweep_status import NEXT_REASON
from .widgets.header import StatusHeader
from .widgets.rate import RateLine

# The first frame imports only what it draws (issue 26): the body's widgets (body.py), the
# dialogs and the engine's commands (engine_commands.py) are imported where they are first used.
if TYPE_CHECKING:
    from ..engine.api import EngineProcess, EngineThread, Preset
    from ..engine.report.api import SessionSummary
    from .sweep_status import SweepStatus

REFRESH_S = 0.25
WIDE_COLUMNS = 150  # from here panels and tables sit side by side (the tables need 74 columns)
EXIT_GRACE_S = 5.0  # the load is stopped and the log complete; never hang on the way out
BODY_CSS_PATH = Path(__file__).resolve().with_name("body.tcss")  # the body's styles (_read_body_css)


class RedlineApp(LoadKeys, PresetKeys, App[int]):
    CSS_PATH = "redline.tcss"
    TITLE = "redline"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (WIDE_COLUMNS, "-wide")]
    ENABLE_COMMAND_PALETTE = False

    # The footer must show every key that matters at 80 columns: short descriptions, +/- and
    # ]/[ grouped; `?` lists them all with what they do (widgets/help.py).
    # In rate mode the same keys change R: their own bindings (the footer reads `R±`), which
    # take turns with the concurrency ones (check_action).
    C_STEP = Binding.Group("C±", compact=True)
    R_STEP = Binding.Group("R±", compact=True)
    C_TIMES = Binding.Group("×÷2", compact=True)
    # Priority bindings: the app acts on a key as it is read, in the order typed, before any
    # widget's queue (a key that first went to a widget came back through every container's
    # queue: `[` took over a second on a busy machine, and the digits typed right after `c`
    # reached the step table before the prompt existed). check_action leaves the keys to a
    # dialog while one is up (run_action), and an Input keeps the keys it types.
    BINDINGS = [
        Binding("plus,equals_sign,up", "more", "+C", key_display="+", group=C_STEP, priority=True),
        Binding("minus,down", "less", "-C", key_display="-", group=C_STEP, priority=True),
        Binding("plus,equals_sign,up", "rate_more", "+R", key_display="+", group=R_STEP, priority=True),
        Binding("minus,down", "rate_less", "-R", key_display="-", group=R_STEP, priority=True),
        Binding("right_square_bracket", "double", "×2", key_display="]", group=C_TIMES, priority=True),
        Binding("left_square_bracket", "halve", "÷2", key_display="[", group=C_TIMES, priority=True),
        Binding("right_square_bracket", "rate_double", "×2", key_display="]", group=C_TIMES, priority=True),
        Binding("left_square_bracket", "rate_halve", "÷2", key_display="[", group=C_TIMES, priority=True),
        Binding("c", "type_concurrency", "set", priority=True),  # `a` and `r` take turns: see check_action
        Binding("c", "type_rate", "set", priority=True),
        Binding("a", "probe", "probe", priority=True),
        Binding("r", "restore", "back", priority=True),
        Binding("space", "pause", "pause", key_display="␣", priority=True),
        Binding("p", "preset", "preset", priority=True),
        Binding("e", "export", "export", priority=True),
        # a sweep's footer has `n next` in its place (80 columns hold one of them): `e` still
        # exports, listed in `?` (check_action: one of the two twins at a time)
        Binding("e", "export_in_sweep", "export", show=False, priority=True),
        Binding("g", "graph", "curve", priority=True),
        Binding("question_mark", "help", "help", key_display="?", priority=True),
        Binding("q", "quit_redline", "quit"),  # not priority: `q` closes the help
        Binding("l", "lane", "probe lane", show=False, priority=True),
        Binding("P", "profile", "profile", show=False, priority=True),
        Binding("k", "search", "knee search", show=False, priority=True),
        Binding("o", "slo", "SLOs", show=False, priority=True),
        Binding("m", "mode", "mode", show=False, priority=True),
        Binding("w", "workload", "workload", show=False, priority=True),
        Binding("pageup", "steps_up", "scroll steps", show=False, priority=True),
        Binding("pagedown", "steps_down", "scroll steps", show=False, priority=True),
        Binding("ctrl+c", "interrupt", "quit", show=False, priority=True),  # as SIGINT: exit 130 (docs/cli.md)
        Binding("n", "next_config", "next", priority=True),  # a sweep's only (check_action)
    ]
    # the main screen's keys: off while a dialog (prompt, picker, help) has the keys
    NOTIFICATION_TIMEOUT = 4.0  # a notice (an error too) is gone in 4 s; the log keeps what matters (redline.tcss)
    SCREEN_ACTIONS = frozenset(b.action for b in BINDINGS if b.action not in ("quit_redline", "interrupt"))

    snapshot: reactive[Snapshot | None] = reactive(None, always_update=True)

    def __init__(
        self,
        host: EngineProcess | EngineThread,
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
        self.sweep = sweep  # `redline sweep` on a terminal: the line above the header (tui/sweep_view.py)
        self.on_hard_exit: list[Callable[[], None]] = []  # called before SIGHUP's os._exit
        self._watchdog: threading.Timer | None = None
        # `redline` draws the header and the footer first, the rest a frame later (body.py)
        self.body_after_first_frame = body_after_first_frame
        self.body_up = False  # the body's widgets are mounted
        self.on_body_up: list[Callable[[], None]] = []  # called once they are
        self.compare = compare
        self._early_signals = early_signals if early_signals is not None else []
        self.host = host
        self.step = step
        self.rate_step = rate_step
        self.start_preset = preset
        self._presets_dir = presets_dir  # None: the built-in presets (looked up when `p` opens the picker)
        self.exit_reason = "quit"
        self.hard_exit = False  # set by `redline` itself (not by tests): never hang on exit
        self._quitting = False
        self._want: int | None = None
        self._want_until = 0.0
        self._raised_max = 0
        self._probing = False
        self._mode = "concurrency"  # the snapshot's: which of the C / R keys are live
        self._switching_from: str | None = None  # `m` pressed in this mode, not yet confirmed
        self._switch_until = 0.0
        self._want_rate: float | None = None
        self._want_rate_until = 0.0
        self._workers_shown = 1  # lines the workers block took at the last refresh
        self._body: SimpleNamespace | None = None  # the body's widgets (_body_parts)
        self._exporting = False
        self._preset: tuple[str, int] | None = None  # the preset the app started: name, last log seq then
        self._preset_seen = False  # ... and the engine has shown it running
        self._preset_note = ""  # "preset NAME finished (...)", in the header until the load changes

    @property
    def presets_dir(self) -> Path:
        return self._presets_dir if self._presets_dir is not None else api.builtin_dir()

    @presets_dir.setter
    def presets_dir(self, d: Path) -> None:
        self._presets_dir = d

    # -- layout ------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        if self.sweep is not None:
            from .widgets.sweep_line import SweepLine

            yield SweepLine(self.sweep, id="sweep-line")
        yield StatusHeader(id="header")
        yield RateLine(id="rate-line")  # rate and trace mode: schedule lag, held, dropped
        left, right, after = ([], [], []) if self.body_after_first_frame else self._body_widgets()
        yield Vertical(Vertical(*left, id="left"), Vertical(*right, id="right"), id="body")
        yield from after
        yield Footer(compact=True, show_command_palette=False)

    def _body_widgets(self) -> tuple[list, list, list]:
        from . import body

        self._read_body_css()
        return body.widgets(self.compare)

    def _read_body_css(self) -> None:
        """The body's styles (body.tcss), read with its widgets: the first frame parses only
        its own (redline.tcss). They come after those and style none of the same nodes."""
        path = str(BODY_CSS_PATH)
        if not self.stylesheet.has_source(path):
            self.stylesheet.read(path)
            self.stylesheet.parse()  # now: the rules map the next mount reads is built anew

    async def _mount_body(self) -> None:
        """The body, a frame after the header and the footer (body_after_first_frame)."""
        if self._quitting or not self.screen_stack:
            return
        left, right, after = self._body_widgets()
        base = self.screen_stack[0]
        with self.batch_update():
            await base.query_one("#left").mount_all(left)
            await base.query_one("#right").mount_all(right)
            await base.mount_all(after, after="#body")
        self._body_is_up()
        self.pull_snapshot()

    def _body_is_up(self) -> None:
        self.body_up = True
        callbacks, self.on_body_up = self.on_body_up, []
        for callback in callbacks:
            callback()

    def on_mount(self) -> None:
        if self.body_after_first_frame:
            self.call_after_refresh(lambda: self.run_worker(self._mount_body(), group="body"))
        else:
            self._body_is_up()
        self.set_interval(REFRESH_S, self.pull_snapshot)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, self._on_signal, sig)
            except (NotImplementedError, RuntimeError, ValueError):  # not the main thread
                pass
        if self._early_signals:  # arrived while the app was starting
            self._on_signal(self._early_signals[0])
        self.pull_snapshot()
        if self.start_preset is not None:
            self.run_preset(self.start_preset)

    def _on_signal(self, sig: signal.Signals) -> None:
        self.run_worker(self.action_quit_redline(f"signal {sig.name}"), exclusive=True, group="quit")

    # -- refresh -----------------------------------------------------------------------
    def pull_snapshot(self) -> None:
        snap = self.snapshot = self.host.snapshot
        if snap is not None and snap.done and not self._quitting:  # ended elsewhere (POST /v1/stop)
            self.run_worker(self.action_quit_redline("engine stopped"), exclusive=True, group="quit")
        elif snap is not None and snap.finished and not self._quitting:  # --num-requests / --duration: closes as `q` does
            self.run_worker(self.action_quit_redline(f"fixed-size run done: {snap.finished}"), exclusive=True, group="quit")
        if self.sweep is not None:
            self._sweep_follow(snap)

    def _sweep_follow(self, snap: Snapshot | None) -> None:
        """A sweep's line follows; its configuration ends when its preset ended on its own."""
        if self._preset_note and not self._quitting:  # "preset NAME finished (...)": the next one
            self.run_worker(self.action_quit_redline("preset finished"), exclusive=True, group="quit")
        if snap is None or not snap.preset_running and (self._preset is not None or snap.state == "starting"):
            preset = "waiting"  # the server or the engine starting, the preset not begun
        else:
            preset = "running" if snap.preset_running else "over"
        if self.screen_stack:
            with contextlib.suppress(NoMatches):
                line = self.screen_stack[0].query_one("#sweep-line")
                line.show(self.sweep.text(preset, width=line.content_region.width or None))

    def watch_snapshot(self, snap: Snapshot | None) -> None:
        if snap is None or self._quitting or not self.screen_stack:
            return
        base = self.screen_stack[0]  # keep drawing under a dialog
        try:
            header = base.query_one(StatusHeader)
        except NoMatches:  # not composed yet, or tearing down
            return
        self._follow_preset(snap)
        self._follow_failures(snap)
        if self._preset_note and not snap.preset:
            snap = replace(snap, preset=self._preset_note)
        now = time.monotonic()
        if self._want is not None and now < self._want_until and snap.target_c != self._want:
            snap = replace(snap, target_c=self._want, previous_c=None)  # not yet confirmed
        if self._switching_from is not None and (snap.mode != self._switching_from or now >= self._switch_until):
            self._switching_from = None
        if (self._want_rate is not None and now < self._want_rate_until and snap.mode in OPEN_LOOP
                and snap.target_rate != self._want_rate):
            snap = replace(snap, target_rate=self._want_rate)
        header.snapshot = snap
        if snap.probing != self._probing or snap.mode != self._mode:
            self._probing = snap.probing
            self._mode = snap.mode
            self.refresh_bindings()  # `r back` replaces `a probe`, `R±` replaces `C±` in the footer
        rate_line = base.query_one(RateLine)
        rate_line.display = snap.mode != "concurrency"
        rate_line.snapshot = snap
        if not self.body_up:  # the first frame: header and footer (body.py)
            return
        w = self._body_parts(base)
        w.panels.show(snap)
        self.set_class(bool(snap.targets), "-targets")  # redline.tcss: the block shows, the GPUs make room
        w.targets.snapshot = snap
        w.gpus.snapshot = snap
        lines = self._workers_lines(base, w, len(snap.workers))
        self.set_class(lines > 0, "-workers")  # redline.tcss: shown with workers and room for them
        w.workers.lines = max(lines, 1)
        w.workers.snapshot = snap
        w.steps.show(snap)
        w.log.show(snap.log)
        for curve in w.curves:
            curve.show(snap)

    def _body_parts(self, base) -> SimpleNamespace:
        """The body's widgets, found once (they stay for the app's life: body.py), not queried
        from the DOM at every refresh."""
        if self._body is None:
            from .body import CurveView, EventLog, GpuPanel, LivePanels, StepTable, TargetsPanel, WorkersPanel

            self._body = SimpleNamespace(
                body=base.query_one("#body"), panels=base.query_one(LivePanels), targets=base.query_one(TargetsPanel),
                gpus=base.query_one(GpuPanel), workers=base.query_one(WorkersPanel), steps=base.query_one(StepTable),
                log=base.query_one(EventLog), curves=tuple(base.query(CurveView)))
        return self._body

    def _workers_lines(self, base, w: SimpleNamespace, n: int) -> int:
        """Lines the workers block may take (widgets/workers.py block_lines): what its column
        leaves under the panels, the targets and the GPUs, as laid out at the last refresh."""
        from .body import block_lines

        if not n:
            return 0
        body = w.body
        if not body.display or body.size.height <= 0:  # `g`: the curve has the screen; keep it as it was
            return self._workers_shown
        spare = body.size.height
        for part in (w.panels, w.targets, w.gpus):
            if part.display:
                spare -= part.outer_size.height
        self._workers_shown = block_lines(n, spare, base.has_class("-wide"))
        return self._workers_shown

    RATE_ACTIONS = frozenset({"rate_more", "rate_less", "rate_double", "rate_halve", "type_rate"})
    C_ACTIONS = frozenset({"more", "less", "double", "halve", "type_concurrency"})

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """In the probe, `r` returns and `a` has nothing left to abort; outside it, the reverse.
        In rate mode the C keys change R instead (their rate_* twins); in a trace replay, its
        speed factor."""
        if action == "restore":
            return self._probing
        if action in ("next_config", "export_in_sweep"):
            return self.sweep is not None
        if action == "export":
            return self.sweep is None
        if action == "probe":
            return not self._probing
        if action in self.RATE_ACTIONS:
            return self._mode in OPEN_LOOP
        if action in self.C_ACTIONS:
            return self._mode not in OPEN_LOOP
        return True

    async def run_action(self, action, default_namespace=None, namespaces=None) -> bool:
        """The main screen's keys do nothing while a dialog is up (a prompt, the picker, the
        help): the key goes on to the dialog (its list's arrows, its Input). Not done in
        check_action, which also decides what the footer under the dialog shows."""
        if (isinstance(action, str) and action in self.SCREEN_ACTIONS
                and default_namespace in (None, self) and self._dialog_up()):
            return False
        return await super().run_action(action, default_namespace, namespaces)

    def _dialog_up(self) -> bool:
        try:
            return len(self.screen_stack) > 1
        except Exception:  # noqa: BLE001 - no screen yet (starting) or any more (exiting)
            return False

    def _mode_settled(self) -> bool:
        """False (and says so) while an `m` waits for the engine: a C or R key now would act on
        the mode being left."""
        if self._switching_from is not None and time.monotonic() < self._switch_until:
            self.notify(f"switching from {self._switching_from} mode; press it again in a moment", severity="warning", timeout=2)
            return False
        return True

    def action_help(self) -> None:
        from .widgets.help import HelpScreen

        snap = self.snapshot or self.host.snapshot
        self.push_screen(HelpScreen(snap, self.host.config, self.step, self.max_concurrency, self.rate_step))

    def action_steps_up(self) -> None:
        if self.body_up:
            from .body import StepTable

            self.query_one(StepTable).page_back()

    def action_steps_down(self) -> None:
        if self.body_up:
            from .body import StepTable

            self.query_one(StepTable).page_on()

    def action_graph(self) -> None:
        """Switch between the live panels and the live saturation curve."""
        self.toggle_class("-graph")

    # -- session -----------------------------------------------------------------------
    def action_export_in_sweep(self) -> None:
        self.action_export()

    def action_export(self) -> None:
        """Export in a worker: the flush and the export take seconds on a long session, and
        the keys must not wait for them."""
        d = self.host.config.out_dir
        if d is None:
            self.notify("no session directory", severity="warning")
            return
        if self._exporting:
            self.notify("an export is already running", severity="warning", timeout=2)
            return
        self._exporting = True
        self.run_worker(self._export(d), group="export")

    async def _export(self, d: Path) -> None:
        try:
            await self._export_now(d)
        finally:
            self._exporting = False

    async def _export_now(self, d: Path) -> None:
        from ..engine.api import SessionError
        from ..engine.report.api import export_session

        try:  # every row recorded so far is on disk before the export reads it
            err = await asyncio.wrap_future(self.host.send(C.Flush()))
        except Exception as exc:  # noqa: BLE001 - the engine is gone: export what was written
            err = str(exc)
        if err:
            self.notify(f"session log: {err}", severity="warning")
        try:
            paths = await asyncio.to_thread(export_session, d, "parquet", None)
        except SessionError as exc:
            self.notify(str(exc), severity="error")
            return
        where = paths[0].parent if paths else d
        # one short line at the bottom right (the path is in the log): the table stays in view
        self.notify(f"exported {len(paths)} tables to …/{where.parent.name}/{where.name}")
        self.host.send(C.Log("notice", f"exported parquet to {where}"))

    async def action_quit_redline(self, reason: str = "quit") -> None:
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

    async def action_next_config(self) -> None:
        """`n` in a sweep: this configuration ends (its session saved), the next one opens."""
        await self.action_quit_redline(NEXT_REASON)

    async def action_interrupt(self) -> None:
        """Ctrl-C, read as a key (the terminal is in raw mode): what SIGINT does, exit 130."""
        await self.action_quit_redline("signal SIGINT")


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
