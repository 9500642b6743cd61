"""The live screen: what the operator watches and steers, under the dialogs (tui/app.py shows
it). It draws each Snapshot the app reads (the header, the rate line, the body: tui/body.py)
and owns every key but Ctrl-C (the app's: it quits from under a dialog too), each binding
beside its action; `?` lists them (widgets/help.py).

Each key sends an engine command; what the engine holds comes back in the next snapshot. What
the operator asked and the engine has not confirmed yet: tui/load_asks.py; a preset's run:
tui/preset_run.py; requests failing in a row: tui/watches.py. While a dialog is up (a prompt,
the picker, the help) this screen is not in Textual's binding chain: the keys are the dialog's.
Nothing here computes a metric: every number drawn comes from the Snapshot.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Callable

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer

from ..engine import api
from .engine_commands import commands, error_line
from .load_asks import OPEN_LOOP, RATE_FLOOR, LoadAsks
from .preset_run import WORKLOAD_REPLY_S, PresetRun, search_preset
from .session_export import SessionExport
from .sweep_status import NEXT_REASON
from .watches import FailureWatch
from .widgets.header import StatusHeader
from .widgets.rate_line import RateLine

# The first frame imports only what it draws (issue 26): the body's widgets (body.py), the
# dialogs and the engine's commands (engine_commands.py) are imported where they are first used.
if TYPE_CHECKING:
    from ..engine.api import Preset, Snapshot, WorkloadChange, WorkloadConfig
    from ..engine.report.api import SessionSummary
    from .body import BodyParts
    from .ports import EngineHost, ScreenOwner
    from .sweep_status import SweepStatus
    from .widgets.dialogs import LinePrompt
    from .widgets.workload_form import WorkloadForm


class LiveScreen(Screen[None]):
    # The footer must show every key that matters at 80 columns: short descriptions, +/- and
    # ]/[ grouped; `?` lists them all with what they do (widgets/help.py).
    # In rate mode the same keys change R: their own bindings (the footer reads `R±`), which
    # take turns with the concurrency ones (check_action).
    C_STEP = Binding.Group("C±", compact=True)
    R_STEP = Binding.Group("R±", compact=True)
    C_TIMES = Binding.Group("×÷2", compact=True)
    # Priority bindings: the screen acts on a key as it is read, in the order typed, before any
    # widget's queue (a key that first went to a widget came back through every container's
    # queue: `[` took over a second on a busy machine, and the digits typed right after `c`
    # reached the step table before the prompt existed). A dialog's keys are its own: this
    # screen is not in the binding chain while one is up, and an Input keeps the keys it types.
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
        Binding("n", "next_config", "next", priority=True),  # a sweep's only (check_action)
    ]
    RATE_ACTIONS = frozenset({"rate_more", "rate_less", "rate_double", "rate_halve", "type_rate"})
    C_ACTIONS = frozenset({"more", "less", "double", "halve", "type_concurrency"})

    def __init__(
        self,
        owner: ScreenOwner,
        host: EngineHost,
        *,
        step: int = 8,
        rate_step: float = 1.0,
        preset: Preset | None = None,
        compare: SessionSummary | None = None,
        body_after_first_frame: bool = False,
        sweep: SweepStatus | None = None,
    ) -> None:
        super().__init__()
        self.owner = owner
        self.host = host
        self.step = step  # what + and - change C by (--step)
        self.rate_step = rate_step
        self.start_preset = preset
        self.compare = compare
        self.sweep = sweep  # `redline sweep` on a terminal: the line above the header (tui/sweep_view.py)
        # `redline` draws the header and the footer first, the rest a frame later (body.py)
        self.body_after_first_frame = body_after_first_frame
        self.body_up = False  # the body's widgets are mounted
        self.on_body_up: list[Callable[[], None]] = []  # called once they are
        self.asks = LoadAsks()
        self.presets = PresetRun(self)  # and the watch on the one it started
        self.failure_watch = FailureWatch()
        self._mode = "concurrency"  # the snapshot's: which of the C / R keys are live
        self._probing = False
        self._body: BodyParts | None = None  # found once the body is up (_body_parts)
        self.export = SessionExport(host, self.notify)

    @property
    def snapshot(self) -> Snapshot | None:
        """The latest snapshot the app read (as the engine sent it)."""
        return self.owner.snapshot

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

    def _body_widgets(self) -> tuple[list[Widget], list[Widget], list[Widget]]:
        from . import body

        return body.styled_widgets(self.app, self.compare)

    async def _mount_body(self) -> None:
        """The body, a frame after the header and the footer (body_after_first_frame)."""
        if self.owner.quitting or not self.app.screen_stack:
            return
        from . import body

        await body.mount_into(self, self.compare)
        self._body_is_up()
        self.owner.pull_snapshot()

    def _body_is_up(self) -> None:
        self.body_up = True
        callbacks, self.on_body_up = self.on_body_up, []
        for callback in callbacks:
            callback()

    def on_mount(self) -> None:
        if self.body_after_first_frame:
            # the app's queue: after what was asked of its first frame before it ran (tui/run_app.py:
            # the engine's process is spawned once that frame is drawn, the body does not delay it)
            self.app.call_after_refresh(lambda: self.run_worker(self._mount_body(), group="body"))
        else:
            self._body_is_up()
        self.owner.pull_snapshot()
        if self.start_preset is not None:
            self.run_preset(self.start_preset)

    # -- drawing -----------------------------------------------------------------------
    def show(self, snap: Snapshot | None) -> None:
        """Draw the snapshot the app just read (also under a dialog), with what was asked and
        not yet confirmed in its place; follow the preset started here and failures in a row."""
        if snap is None or self.owner.quitting or not self.app.screen_stack:
            return
        try:
            header = self.query_one(StatusHeader)
        except NoMatches:  # not composed yet, or tearing down
            return
        finished = self.presets.watch.follow(snap)
        if finished is not None:
            self.host.send(commands.Log("preset", finished))
        failing = self.failure_watch.follow(snap)
        if failing is not None:
            self.host.send(commands.Log("warning", failing))
            self.notify(failing, severity="error", timeout=15)
        if self.presets.watch.note and not snap.preset:
            snap = replace(snap, preset=self.presets.watch.note)
        snap = self.asks.on_screen(snap, time.monotonic())
        header.snapshot = snap
        if snap.probing != self._probing or snap.mode != self._mode:
            self._probing = snap.probing
            self._mode = snap.mode
            # `r back` replaces `a probe`, `R±` replaces `C±` in the footer (the active
            # screen's: under a dialog this footer is drawn again as the dialog closes)
            self.app.refresh_bindings()
        rate_line = self.query_one(RateLine)
        rate_line.display = snap.mode != "concurrency"
        rate_line.snapshot = snap
        if not self.body_up:  # the first frame: header and footer (body.py)
            return
        self._body_parts().show(snap)

    def _body_parts(self) -> BodyParts:
        if self._body is None:
            from .body import BodyParts

            self._body = BodyParts.of(self)
        return self._body

    def follow_sweep(self, snap: Snapshot | None) -> None:
        """A sweep's line follows; its configuration ends when its preset ended on its own."""
        if self.sweep is None:
            return
        if self.presets.watch.note and not self.owner.quitting:  # "preset NAME finished (...)": the next one
            self.owner.quit_soon("preset finished")
        if self.app.screen_stack:
            from .widgets.sweep_line import SweepLine

            with contextlib.suppress(NoMatches):
                self.query_one("#sweep-line", SweepLine).follow(snap, preset_asked=self.presets.watch.name is not None)

    # -- which keys are live -------------------------------------------------------------
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

    def _mode_settled(self) -> bool:
        """False (and says so) while an `m` waits for the engine: a C or R key now would act on
        the mode being left."""
        leaving = self.asks.unsettled(time.monotonic())
        if leaving is not None:
            self.notify(f"switching from {leaving} mode; press it again in a moment", severity="warning", timeout=2)
            return False
        return True

    def command(self, cmd: commands.Command) -> concurrent.futures.Future[object]:
        """Send a load command (the engine's reply as a Future); a key that takes over from
        a preset ends the watch on it and the header's "preset finished" note."""
        self.presets.watch.load_changed(takes_over=isinstance(cmd, commands.OPERATOR_TAKES_OVER))
        return self.host.send(cmd)

    async def open_prompt(self, prompt: LinePrompt | WorkloadForm, done: Callable[..., None]) -> None:
        """Open a prompt with its Input focused before the next key is read: keys typed
        right after the one that opened it go into it (nothing else waits here)."""
        await self.app.push_screen(prompt, done)
        if prompt.is_attached and self.app.screen is prompt:
            prompt.focus_input()

    # -- concurrency ---------------------------------------------------------------------
    @property
    def concurrency_asked(self) -> int:
        """The C the operator last asked for (the engine confirms it in the next snapshot)."""
        return self.asks.concurrency_now(self.snapshot, time.monotonic())

    @property
    def max_concurrency(self) -> int:
        return self.asks.max_concurrency(self.snapshot)

    def set_concurrency(self, n: int) -> None:
        n = max(1, n)
        if n > self.max_concurrency:
            from .widgets.dialogs import ConfirmScreen

            def answered(yes: bool | None) -> None:
                if yes:
                    self._send_concurrency(n, raise_max=True)
                else:
                    self.notify(f"kept C={self.concurrency_asked}")

            self.app.push_screen(
                ConfirmScreen(f"C={n} is above --max-concurrency {self.max_concurrency}. Send that much load?"), answered)
            return
        self._send_concurrency(n)

    def _send_concurrency(self, n: int, raise_max: bool = False) -> None:
        self.command(commands.SetConcurrency(n, raise_max=raise_max))
        self.asks.ask_concurrency(n, time.monotonic(), raise_max)
        snap = self.snapshot
        if snap is not None:  # show the new C at once; the next snapshot confirms it
            self.query_one(StatusHeader).snapshot = replace(snap, target_c=n, previous_c=None)

    def action_more(self) -> None:
        if self._mode_settled():
            self.set_concurrency(self.concurrency_asked + self.step)

    def action_less(self) -> None:
        if self._mode_settled():
            self.set_concurrency(self.concurrency_asked - self.step)

    def action_double(self) -> None:
        if self._mode_settled():
            self.set_concurrency(self.concurrency_asked * 2)

    def action_halve(self) -> None:
        if self._mode_settled():
            self.set_concurrency(self.concurrency_asked // 2)

    async def action_type_concurrency(self) -> None:
        from .widgets.dialogs import ConcurrencyPrompt

        if not self._mode_settled():
            return

        def done(text: str | None) -> None:
            if text is None:
                return
            try:
                n = api.check_concurrency(text, 10**9)
            except api.ConcurrencyError:
                self.notify(f"concurrency {text!r}: expected a whole number, 1 or more; nothing changed", severity="error")
                return
            self.set_concurrency(n)

        await self.open_prompt(ConcurrencyPrompt(self.concurrency_asked, self.max_concurrency), done)

    # -- open-loop rate (docs/load-shapes.md) ------------------------------------------
    @property
    def rate_asked(self) -> float:
        """The R the operator last asked for, else the engine's (1 req/s before it has one)."""
        return self.asks.rate_now(self.snapshot, time.monotonic())

    def set_rate(self, r: float) -> None:
        from ..engine.api import MAX_RATE

        r = round(min(max(r, RATE_FLOOR), MAX_RATE), 6)  # no 0.30000000000000004
        if r == self.rate_asked:
            what = f"trace speed ×{r:g}" if self._mode == "trace" else f"R={r:g}/s"
            self.notify(f"{what} already" + (" (the lowest - and [ go)" if r == RATE_FLOOR else ""), timeout=2)
            return
        self._send_rate(r)

    def _send_rate(self, r: float) -> None:
        self.command(commands.SetRate(r))
        self.asks.ask_rate(r, time.monotonic())
        snap = self.snapshot
        if snap is not None and snap.mode in OPEN_LOOP:  # show the new R at once
            self.query_one(StatusHeader).snapshot = replace(snap, target_rate=r)

    def action_rate_more(self) -> None:
        if self._mode_settled():
            self.set_rate(self.rate_asked + self.rate_step)

    def action_rate_less(self) -> None:
        if self._mode_settled():
            self.set_rate(self.rate_asked - self.rate_step)

    def action_rate_double(self) -> None:
        if self._mode_settled():
            self.set_rate(self.rate_asked * 2)

    def action_rate_halve(self) -> None:
        if self._mode_settled():
            self.set_rate(self.rate_asked / 2)

    async def action_type_rate(self) -> None:
        from ..engine.api import ArrivalError, check_rate
        from .widgets.dialogs import rate_prompt

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
        await self.open_prompt(rate_prompt(trace, now), done)

    def action_mode(self) -> None:
        """Concurrency <-> open-loop rate mode (the engine picks the other mode's last value;
        a trace replay switches to concurrency)."""
        snap = self.snapshot
        mode = snap.mode if snap else "concurrency"
        if snap is not None and snap.turns > 1 and mode == "concurrency":
            self.notify(f"multi-turn sessions ({snap.turns} turns) are closed-loop: C counts sessions; no rate mode", severity="warning")
            return
        self.asks.switch_mode(mode, time.monotonic())
        self.command(commands.ToggleMode())

    # -- the workload (`w`) --------------------------------------------------------------
    def session_workload(self) -> dict[str, object]:
        """The session's workload now (WorkloadConfig.describe()): the engine's, else the one
        it was started with."""
        snap = self.snapshot
        if snap is not None and snap.workload:
            return dict(snap.workload)
        wl: WorkloadConfig | None = getattr(self.host.config, "workload", None)
        return wl.describe() if wl is not None else {}

    async def action_workload(self) -> None:
        from .widgets.workload_form import WorkloadForm

        workload = self.session_workload()
        if workload.get("trace"):
            self.notify("a trace sets each request's lengths: no workload to change", severity="warning")
            return

        def done(change: WorkloadChange | None) -> None:
            if change is not None:
                self.notify(f"workload: {change.describe()}", timeout=3)

        await self.open_prompt(WorkloadForm(workload, self._apply_workload), done)

    async def _apply_workload(self, change: WorkloadChange) -> str | None:
        """Send the change; the engine's error as one line, or None once it took it."""
        fut = self.command(commands.SetWorkload(change))
        try:
            await api.wait_within(asyncio.wrap_future(fut), WORKLOAD_REPLY_S)
        except asyncio.TimeoutError:
            self.notify("workload change sent; the engine has not confirmed it yet", severity="warning")
            return None
        except Exception as exc:  # noqa: BLE001 - the engine's refusal, shown in the form
            return error_line(exc)
        return None

    # -- the probe and pause ---------------------------------------------------------------
    def action_probe(self) -> None:
        self.asks.forget_concurrency()
        self.command(commands.Probe())

    def action_restore(self) -> None:
        self.asks.forget_concurrency()
        self.command(commands.Restore())

    def action_pause(self) -> None:
        self.command(commands.TogglePause())

    # -- presets -----------------------------------------------------------------------
    def action_preset(self) -> None:
        from .widgets.dialogs import PresetPicker, preset_entries

        where = self.owner.presets_dir
        entries = preset_entries(where)
        if not entries:
            self.notify(f"no presets found in {where}", severity="warning")
            return

        def chosen(i: int | None) -> None:
            if i is None:
                return
            name, preset, line = entries[i]
            if preset is None:
                self.notify(line, severity="error")
                return
            self.run_preset(preset)

        self.app.push_screen(PresetPicker([(name, line, preset is None) for name, preset, line in entries]), chosen)

    def run_preset(self, preset: Preset) -> None:
        """Run a preset with its own workload, as `redline run NAME` does (tui/preset_run.py)."""
        self.asks.forget_concurrency()
        work = self.presets.begin(preset)
        if work is not None:
            self.run_worker(work, group="preset")

    # -- finding the limit (docs/finding-the-limit.md) ----------------------------------
    def action_lane(self) -> None:
        """The probe lane: one request at a time beside the load, kept out of its figures."""
        self.host.send(commands.ToggleLane())

    def action_profile(self) -> None:
        """The server's profiler at the load held now, for --profile-s or until the step ends."""
        self.host.send(commands.StartProfile())

    def action_search(self) -> None:
        """An adaptive knee search from the current C up to max C (any C key cancels it)."""
        self.asks.forget_concurrency()
        self.run_preset(search_preset(self.concurrency_asked, self.max_concurrency, getattr(self.host, "config", None)))
        self.notify(f"knee search from C={self.concurrency_asked} up to {self.max_concurrency}; any concurrency key cancels it")

    async def action_slo(self) -> None:
        from ..engine.api import SloError, parse_slo
        from .widgets.dialogs import TextPrompt

        def done(text: str | None) -> None:
            if text is None:
                return
            if text.strip().lower() in ("", "off", "none"):
                self.host.send(commands.SetSlo(None))
                return
            try:
                slo = parse_slo(text, flag="SLO")
            except SloError as exc:
                self.notify(f"{exc}; nothing changed", severity="error")
                return
            self.host.send(commands.SetSlo(slo))

        now = self.snapshot.slo if self.snapshot and self.snapshot.slo else "none"
        await self.open_prompt(TextPrompt(f"SLOs (now: {now})", "e.g. ttft=2s,itl=100ms,e2e=60s — off clears, Esc cancels", "ttft=2s,itl=100ms"), done)

    # -- the view ----------------------------------------------------------------------
    def action_help(self) -> None:
        from .widgets.help import HelpScreen

        snap = self.snapshot or self.host.snapshot
        self.app.push_screen(HelpScreen(snap, self.host.config, self.step, self.max_concurrency, self.rate_step))

    def action_steps_up(self) -> None:
        if self.body_up:
            self._body_parts().steps.page_back()

    def action_steps_down(self) -> None:
        if self.body_up:
            self._body_parts().steps.page_on()

    def action_graph(self) -> None:
        """Switch between the live panels and the live saturation curve (the app's `-graph`
        class: redline.tcss)."""
        self.app.toggle_class("-graph")

    # -- the session ---------------------------------------------------------------------
    def action_export_in_sweep(self) -> None:
        self.action_export()

    def action_export(self) -> None:
        """Export in a worker: the flush and the export take seconds on a long session, and
        the keys must not wait for them (tui/session_export.py)."""
        work = self.export.start()
        if work is not None:
            self.run_worker(work, group="export")

    async def action_quit_redline(self) -> None:
        """Stop all load, complete the session log, exit."""
        await self.owner.quit_redline("quit")

    async def action_next_config(self) -> None:
        """`n` in a sweep: this configuration ends (its session saved), the next one opens."""
        await self.owner.quit_redline(NEXT_REASON)


__all__ = ["LiveScreen"]
