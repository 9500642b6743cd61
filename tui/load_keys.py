"""The keys that set the load (tui/app.py's RedlineApp is a LoadKeys): concurrency (`+ - ] [ c`),
the open loop's rate or a trace's speed (the same keys in rate mode, `m` switches), the
workload form (`w`), the probe (`a`, `r`) and pause (space). Each sends an engine command;
what the engine holds comes back in the next snapshot."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Callable

from ..engine import api
from .engine_commands import C, error_line
from .widgets.header import StatusHeader

if TYPE_CHECKING:
    from .widgets.dialogs import LinePrompt
    from .widgets.workload import WorkloadForm

WANT_HOLD_S = 1.0  # trust the C just asked for this long, until a snapshot confirms it
MODE_SWITCH_S = 2.0  # after `m`, the C / R keys wait this long at most for the new mode
OPEN_LOOP = ("rate", "trace")  # the modes whose keys change R (a trace's: its speed factor)
RATE_FLOOR = 0.1  # req/s: the lowest R that - and [ reach (c types any R > 0)
WORKLOAD_REPLY_S = 15.0  # the workload form waits this long for the engine's answer


class LoadKeys:
    """Mixed into the App: it has `snapshot`, `host`, `step`, `rate_step`, `notify`,
    `push_screen` and the state RedlineApp.__init__ sets."""

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
            from .widgets.dialogs import ConfirmScreen

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
        from .widgets.dialogs import TextPrompt

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
            return error_line(exc)
        return None

    def action_probe(self) -> None:
        self._want = None
        self.command(C.Probe())

    def action_restore(self) -> None:
        self._want = None
        self.command(C.Restore())

    def action_pause(self) -> None:
        self.command(C.TogglePause())
