"""The operator's screen: live control of concurrency (or of an open loop's request rate)
against one server, or several (`--url` repeated: a row per target, widgets/targets.py), from
this process or from worker processes (`--workers N`: their health, widgets/workers.py).

The engine runs in its own process (engine/host.py); this app reads its latest Snapshot four
times a second and sends commands. Nothing here computes a metric: every number drawn comes
from the Snapshot (see engine/run/snapshot.py for where each is computed).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
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

from .widgets.header import StatusHeader
from .widgets.rate import RateLine

# The first frame imports only what it draws (issue 26): the body's widgets (body.py), the
# dialogs and the engine's commands are imported where they are first used.
if TYPE_CHECKING:
    from ..engine.api import EngineProcess, EngineThread, Preset
    from ..engine.api import commands as C
    from ..engine.report.api import SessionSummary
    from .widgets.prompts import LinePrompt
    from .widgets.workload import WorkloadForm
else:
    class _Commands:
        """engine/run/commands.py, imported when the first command is sent."""

        def __getattr__(self, name: str):
            value = getattr(api.commands, name)
            setattr(self, name, value)
            return value

    C = _Commands()

REFRESH_S = 0.25
WIDE_COLUMNS = 150  # from here panels and tables sit side by side (the tables need 74 columns)
EXIT_GRACE_S = 5.0  # the load is stopped and the log complete; never hang on the way out
WANT_HOLD_S = 1.0  # trust the C just asked for this long, until a snapshot confirms it
MODE_SWITCH_S = 2.0  # after `m`, the C / R keys wait this long at most for the new mode
OPEN_LOOP = ("rate", "trace")  # the modes whose keys change R (a trace's: its speed factor)
RATE_FLOOR = 0.1  # req/s: the lowest R that - and [ reach (c types any R > 0)
WORKLOAD_REPLY_S = 15.0  # the workload form waits this long for the engine's answer
BODY_CSS_PATH = Path(__file__).resolve().with_name("body.tcss")  # the body's styles (_read_body_css)


class RedlineApp(App[int]):
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
        Binding("ctrl+c", "quit_redline", "quit", show=False, priority=True),
    ]
    # the main screen's keys: off while a dialog (prompt, picker, help) has the keys
    SCREEN_ACTIONS = frozenset(b.action for b in BINDINGS if b.action != "quit_redline")

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
    ) -> None:
        super().__init__()
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

    def watch_snapshot(self, snap: Snapshot | None) -> None:
        if snap is None or self._quitting or not self.screen_stack:
            return
        base = self.screen_stack[0]  # keep drawing under a dialog
        try:
            header = base.query_one(StatusHeader)
        except NoMatches:  # not composed yet, or tearing down
            return
        self._follow_preset(snap)
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

    # -- concurrency -------------------------------------------------------------------
    @property
    def target(self) -> int:
        """The C the operator last asked for (the engine confirms it in the next snapshot)."""
        if self._want is not None and time.monotonic() < self._want_until:
            return self._want
        return self.snapshot.target_c if self.snapshot else 1

    @property
    def max_concurrency(self) -> int:
        return max(self.snapshot.max_concurrency if self.snapshot else 1, self._raised_max)

    def set_concurrency(self, n: int) -> None:
        n = max(1, n)
        if n > self.max_concurrency:
            from .widgets.prompts import ConfirmScreen

            self.push_screen(
                ConfirmScreen(f"C={n} is above --max-concurrency {self.max_concurrency}. Send that much load?"),
                lambda yes: self._send_concurrency(n, raise_max=True) if yes else self.notify(f"kept C={self.target}"),
            )
            return
        self._send_concurrency(n)

    def command(self, cmd: C.Command) -> concurrent.futures.Future:
        """Send a load command (the engine's reply as a Future); a key that takes over from
        a preset ends the app's watch on it (the engine logs the cancel) and the header's
        "preset finished" note."""
        if isinstance(cmd, C.OPERATOR_TAKES_OVER):
            self._preset = None
        self._preset_note = ""
        return self.host.send(cmd)

    def _send_concurrency(self, n: int, raise_max: bool = False) -> None:
        if raise_max:
            self._raised_max = max(self._raised_max, n)
        self.command(C.SetConcurrency(n, raise_max=raise_max))
        self._want, self._want_until = n, time.monotonic() + WANT_HOLD_S
        snap = self.snapshot
        if snap is not None:  # show the new C at once; the next snapshot confirms it
            self.query_one(StatusHeader).snapshot = replace(snap, target_c=n, previous_c=None)

    def action_more(self) -> None:
        if self._mode_settled():
            self.set_concurrency(self.target + self.step)

    def action_less(self) -> None:
        if self._mode_settled():
            self.set_concurrency(self.target - self.step)

    def action_double(self) -> None:
        if self._mode_settled():
            self.set_concurrency(self.target * 2)

    def action_halve(self) -> None:
        if self._mode_settled():
            self.set_concurrency(self.target // 2)

    async def open_prompt(self, prompt: LinePrompt | WorkloadForm, done: Callable) -> None:
        """Open a prompt with its Input focused before the next key is read: keys typed
        right after the one that opened it go into it (nothing else waits here)."""
        await self.push_screen(prompt, done)
        if prompt.is_attached and self.screen is prompt:
            prompt.focus_input()

    async def action_type_concurrency(self) -> None:
        from .widgets.prompts import ConcurrencyPrompt

        if not self._mode_settled():
            return
        def done(text: str | None) -> None:
            if text is None:
                return
            try:
                n = api.check_concurrency(text, 10**9)
            except api.ConcurrencyError:
                self.notify(f"concurrency {text!r}: expected a whole number from 1 to {self.max_concurrency}; nothing changed", severity="error")
                return
            self.set_concurrency(n)

        await self.open_prompt(ConcurrencyPrompt(self.target, self.max_concurrency), done)

    # -- open-loop rate (docs/load-shapes.md) ------------------------------------------
    @property
    def target_rate(self) -> float:
        """The R the operator last asked for, else the engine's (1 req/s before it has one)."""
        if self._want_rate is not None and time.monotonic() < self._want_rate_until:
            return self._want_rate
        r = self.snapshot.target_rate if self.snapshot else None
        return r if r else 1.0

    def set_rate(self, r: float) -> None:
        from ..engine.api import MAX_RATE

        r = round(min(max(r, RATE_FLOOR), MAX_RATE), 6)  # no 0.30000000000000004
        if r == self.target_rate:
            what = f"trace speed ×{r:g}" if self._mode == "trace" else f"R={r:g}/s"
            self.notify(f"{what} already" + (" (the lowest - and [ go)" if r == RATE_FLOOR else ""), timeout=2)
            return
        self._send_rate(r)

    def _send_rate(self, r: float) -> None:
        self.command(C.SetRate(r))
        self._want_rate, self._want_rate_until = r, time.monotonic() + WANT_HOLD_S
        snap = self.snapshot
        if snap is not None and snap.mode in OPEN_LOOP:  # show the new R at once
            self.query_one(StatusHeader).snapshot = replace(snap, target_rate=r)

    def action_rate_more(self) -> None:
        if self._mode_settled():
            self.set_rate(self.target_rate + self.rate_step)

    def action_rate_less(self) -> None:
        if self._mode_settled():
            self.set_rate(self.target_rate - self.rate_step)

    def action_rate_double(self) -> None:
        if self._mode_settled():
            self.set_rate(self.target_rate * 2)

    def action_rate_halve(self) -> None:
        if self._mode_settled():
            self.set_rate(self.target_rate / 2)

    async def action_type_rate(self) -> None:
        from ..engine.api import ArrivalError, check_rate
        from .widgets.prompts import TextPrompt

        if not self._mode_settled():
            return

        trace = self._mode == "trace"

        def done(text: str | None) -> None:
            if text is None:
                return
            try:
                r = check_rate(text.strip().removesuffix("/s").lstrip("×x"))
            except ArrivalError as exc:
                if trace:
                    self.notify(f"speed {text!r}: expected a speed factor from 0.1 (2 = twice as fast); nothing changed", severity="error")
                else:
                    self.notify(f"{exc}; nothing changed", severity="error")  # names the value and the range
                return
            self._send_rate(r)

        now = self.snapshot.target_rate if self.snapshot and self.snapshot.target_rate else None
        if trace:
            question = "Trace speed factor" + (f", now ×{now:g}" if now else "")
            hint = "a number from 0.1: 2 replays twice as fast as recorded — Enter sets, Esc cancels"
        else:
            question = "Request rate R in requests/s" + (f", now R={now:g}/s" if now else "")
            hint = "at least 0.1, e.g. 12.5 — Enter sets, Esc cancels"
        await self.open_prompt(TextPrompt(question, hint, f"{now:g}" if now else "10"), done)

    def action_mode(self) -> None:
        """Concurrency <-> open-loop rate mode (the engine picks the other mode's last value;
        a trace replay switches to concurrency)."""
        snap = self.snapshot
        mode = snap.mode if snap else "concurrency"
        if snap is not None and snap.turns > 1 and mode == "concurrency":
            self.notify(f"multi-turn sessions ({snap.turns} turns) are closed-loop: C counts sessions; no rate mode", severity="warning")
            return
        self._want = self._want_rate = None
        self._switching_from, self._switch_until = mode, time.monotonic() + MODE_SWITCH_S
        self.command(C.ToggleMode())

    # -- the workload (`w`) --------------------------------------------------------------
    async def action_workload(self) -> None:
        from .widgets.workload import WorkloadForm

        snap = self.snapshot
        workload = dict(snap.workload) if snap and snap.workload else {}
        if not workload:  # an engine that does not publish it yet: what it was started with
            wl = getattr(self.host.config, "workload", None)
            workload = wl.describe() if wl is not None else {}
        if workload.get("trace"):
            self.notify("a trace sets each request's lengths: no workload to change", severity="warning")
            return

        def done(change) -> None:
            if change is not None:
                self.notify(f"workload: {change.describe()}", timeout=3)

        await self.open_prompt(WorkloadForm(workload, self._apply_workload), done)

    async def _apply_workload(self, change) -> str | None:
        """Send the change; the engine's error as one line, or None once it took it."""
        fut = self.command(C.SetWorkload(change))
        try:
            await api.wait_within(asyncio.wrap_future(fut), WORKLOAD_REPLY_S)
        except asyncio.TimeoutError:
            self.notify("workload change sent; the engine has not confirmed it yet", severity="warning")
            return None
        except Exception as exc:  # noqa: BLE001 - the engine's refusal, shown in the form
            return _one_line(exc)
        return None

    def action_probe(self) -> None:
        self._want = None
        self.command(C.Probe())

    def action_restore(self) -> None:
        self._want = None
        self.command(C.Restore())

    def action_pause(self) -> None:
        self.command(C.TogglePause())

    # -- presets -----------------------------------------------------------------------
    def action_preset(self) -> None:
        from .widgets.prompts import PresetPicker

        paths = sorted(self.presets_dir.glob("*.toml")) if self.presets_dir.is_dir() else []
        if not paths:
            self.notify(f"no presets found in {self.presets_dir}", severity="warning")
            return
        entries: list[tuple[str, Preset | None, str]] = []  # name, preset (None: unusable), its line
        for path in paths:
            try:
                preset = api.load_preset(path)
            except api.PresetError as exc:
                entries.append((path.stem, None, str(exc)))
                continue
            entries.append((path.stem, preset, f"{preset.description}; {api.duration_text(preset)}"))

        def chosen(i: int | None) -> None:
            if i is None:
                return
            name, preset, line = entries[i]
            if preset is None:
                self.notify(line, severity="error")
                return
            self.run_preset(preset)

        self.push_screen(PresetPicker([(name, line, preset is None) for name, preset, line in entries]), chosen)

    def run_preset(self, preset: Preset) -> None:
        """Run a preset with its own workload, as `redline run NAME` does: what differs from
        the session's (lengths, dataset) is applied first, as a workload change, and the
        preset starts once the engine took it. What cannot change live (a trace, turns) is
        said in one line and nothing starts."""
        self._want = None
        try:
            change = preset_workload_change(preset, self._workload())
        except api.PresetError as exc:
            self.notify(str(exc), severity="error")
            return
        if change is None:
            self._start_preset(preset)
            return
        self.run_worker(self._start_with_workload(preset, change), group="preset")

    def _workload(self) -> dict:
        """The session's workload now (WorkloadConfig.describe()): the engine's, else the one
        it was started with."""
        snap = self.snapshot
        if snap is not None and snap.workload:
            return dict(snap.workload)
        wl = getattr(self.host.config, "workload", None)
        return wl.describe() if wl is not None else {}

    async def _start_with_workload(self, preset: Preset, change) -> None:
        fut = self.command(C.SetWorkload(change))
        try:
            await api.wait_within(asyncio.wrap_future(fut), WORKLOAD_REPLY_S)
        except asyncio.TimeoutError:
            self.notify(f"preset {preset.name}: the engine has not confirmed its workload ({change.describe()}); not started", severity="error")
            return
        except Exception as exc:  # noqa: BLE001 - the engine's refusal (a dataset file it cannot read)
            self.notify(f"preset {preset.name}: workload {change.describe()}: {_one_line(exc)}; not started", severity="error")
            return
        self._start_preset(preset)

    def _start_preset(self, preset: Preset) -> None:
        snap = self.snapshot
        self.command(C.StartPreset(preset))
        self._preset = (preset.name, max((line.seq for line in snap.log), default=0) if snap else 0)
        self._preset_seen = False

    def _follow_preset(self, snap: Snapshot) -> None:
        """A preset the app started that ended on its own (not cancelled by a key or a
        guard) is logged, "preset NAME finished (break: ... | no break)", and the header
        says so until the operator changes the load (the probe it ends in may hold)."""
        if self._preset is None:
            return
        if snap.preset_running:
            self._preset_seen = True
            return
        if not self._preset_seen:  # not started yet
            return
        (name, seq0), self._preset = self._preset, None
        lines = [line for line in snap.log if line.seq > seq0]
        if any(line.kind == "preset" and ("cancelled" in line.text or "stopped by" in line.text) for line in lines):
            return
        br = snap.break_result if any(line.kind == "break" for line in lines) else None
        if br is not None:
            good = "no step passed" if br.last_good_concurrency is None and br.last_good_rate is None else f"last good {br.last_good}"
            how = f"break: {br.reason} at {br.where}; {good}"
        else:
            how = "no break"
        text = f"preset {name} finished ({how})"
        self.host.send(C.Log("preset", text))
        self._preset_note = text  # line 2 says what holds now (`[PROBE] C=1 (was C=256, r returns)`)

    # -- finding the limit (docs/finding-the-limit.md) ----------------------------------
    def action_lane(self) -> None:
        """The probe lane: one request at a time beside the load, kept out of its figures."""
        self.host.send(C.ToggleLane())

    def action_profile(self) -> None:
        """The server's profiler at the load held now, for --profile-s or until the step ends."""
        self.host.send(C.StartProfile())

    def action_search(self) -> None:
        """An adaptive knee search from the current C up to max C (any C key cancels it)."""
        self._want = None
        self.run_preset(search_preset(self.target, self.max_concurrency, getattr(self.host, "config", None)))
        self.notify(f"knee search from C={self.target} up to {self.max_concurrency}; any concurrency key cancels it")

    async def action_slo(self) -> None:
        from ..engine.api import SloError, parse_slo
        from .widgets.prompts import TextPrompt

        def done(text: str | None) -> None:
            if text is None:
                return
            if text.strip().lower() in ("", "off", "none"):
                self.host.send(C.SetSlo(None))
                return
            try:
                slo = parse_slo(text, flag="SLO")
            except SloError as exc:
                self.notify(f"{exc}; nothing changed", severity="error")
                return
            self.host.send(C.SetSlo(slo))

        now = self.snapshot.slo if self.snapshot and self.snapshot.slo else "none"
        await self.open_prompt(TextPrompt(f"SLOs (now: {now})", "e.g. ttft=2s,itl=100ms,e2e=60s — off clears, Esc cancels", "ttft=2s,itl=100ms"), done)

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
        # one short line at the top right (the path is in the log): the table stays in view
        self.notify(f"exported {len(paths)} tables to …/{where.parent.name}/{where.name}", timeout=4)
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
            os._exit(128 + signal.SIGHUP)
        if self.hard_exit:
            _exit_watchdog(EXIT_GRACE_S)
        self.exit(0)


def preset_workload_change(preset: Preset, current: dict):
    """The WorkloadChange that gives the session `preset`'s [workload] (its lengths and
    dataset), or None when the session already has it. PresetError (one line) for what a
    running session cannot change: a trace replay or the number of turns."""
    from ..engine.api import WorkloadChange

    w = preset.workload
    trace = getattr(w, "trace", None)
    if (trace or None) != (current.get("trace") or None):
        what = f"replays the trace {trace}" if trace else f"has no trace and this session replays {current.get('trace')}"
        raise api.PresetError(f"preset {preset.name} {what}: start it with `redline run {preset.name}`; nothing started")
    turns = getattr(w, "turns", 1)
    if turns != current.get("turns", 1):
        raise api.PresetError(f"preset {preset.name} has {turns} turn(s) per session, this session {current.get('turns', 1)}: "
                          f"start it with `redline run {preset.name}`; nothing started")
    if trace:
        return None  # a trace sets each request's lengths
    prefix = w.dataset.startswith("prefix:")  # its lengths are in the spec
    change = WorkloadChange(
        input_len=w.input_len if w.input_len != current.get("input_len") and not prefix else None,
        output_len=w.output_len if w.output_len != current.get("output_len") else None,
        dataset=w.dataset if w.dataset != current.get("dataset", "random") else None,
    )
    return None if change.empty else change


def search_preset(start: int, max_c: int, config) -> Preset:
    """The preset `k` runs: a knee search from the current C with this session's workload
    (built by the engine: engine/preset/knee.py)."""
    return api.knee_search_preset(start, max_c, getattr(config, "workload", None))


def _one_line(exc: BaseException) -> str:
    """An engine error as the operator reads it: one line, without the exception's class name
    that a reply from the engine's process carries ("WorkloadError: ...")."""
    import re

    text = " ".join(str(exc).split()) or exc.__class__.__name__
    return re.sub(r"^[A-Z]\w*(Error|Exception): ", "", text)


def _exit_watchdog(seconds: float) -> None:
    """Exit anyway if the terminal cannot be restored (e.g. it went away mid-shutdown)."""
    t = threading.Timer(seconds, lambda: os._exit(1))
    t.daemon = True
    t.start()
