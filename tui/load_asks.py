"""What the operator asked of the load and the engine has not confirmed yet (tui/live_screen.py
sends the command and shows the asked value at once; the snapshots that follow confirm it): a
concurrency C, an open loop's rate R (a trace's speed factor), a max C raised past
--max-concurrency once the operator said yes, and a switch of mode (`m`) the engine has not
made yet, during which the C / R keys wait. No Textual: the screen asks, this keeps the time."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..engine.api import Snapshot

WANT_HOLD_S = 1.0  # trust the C (or R) just asked for this long, until a snapshot confirms it
MODE_SWITCH_S = 2.0  # after `m`, the C / R keys wait this long at most for the new mode
OPEN_LOOP = ("rate", "trace")  # the modes whose keys change R (a trace's: its speed factor)
RATE_FLOOR = 0.1  # req/s: the lowest R that - and [ reach (c types any R > 0)


@dataclass
class LoadAsks:
    """The values asked and the times until which they are trusted over the snapshot's."""

    concurrency: int | None = None
    concurrency_until: float = 0.0
    rate: float | None = None
    rate_until: float = 0.0
    raised_max: int = 0  # the highest C asked above --max-concurrency (and confirmed with `y`)
    switching_from: str | None = None  # `m` pressed in this mode, not yet confirmed
    switch_until: float = 0.0

    # -- what the keys start from ------------------------------------------------------
    def concurrency_now(self, snap: Snapshot | None, now: float) -> int:
        """The C the operator last asked for, else the engine's (1 before it has one)."""
        if self.concurrency is not None and now < self.concurrency_until:
            return self.concurrency
        return snap.target_c if snap else 1

    def max_concurrency(self, snap: Snapshot | None) -> int:
        return max(snap.max_concurrency if snap else 1, self.raised_max)

    def rate_now(self, snap: Snapshot | None, now: float) -> float:
        """The R the operator last asked for, else the engine's (1 req/s before it has one)."""
        if self.rate is not None and now < self.rate_until:
            return self.rate
        r = snap.target_rate if snap else None
        return r if r else 1.0

    def unsettled(self, now: float) -> str | None:
        """The mode an `m` is leaving while the engine has not switched yet (a C or R key now
        would act on it), else None."""
        if self.switching_from is not None and now < self.switch_until:
            return self.switching_from
        return None

    # -- what the keys ask ---------------------------------------------------------------
    def ask_concurrency(self, n: int, now: float, raise_max: bool = False) -> None:
        if raise_max:
            self.raised_max = max(self.raised_max, n)
        self.concurrency, self.concurrency_until = n, now + WANT_HOLD_S

    def ask_rate(self, r: float, now: float) -> None:
        self.rate, self.rate_until = r, now + WANT_HOLD_S

    def forget_concurrency(self) -> None:
        """The engine sets the C now (the probe, a preset, a restore): nothing asked stands."""
        self.concurrency = None

    def switch_mode(self, mode: str, now: float) -> None:
        """`m` in `mode`: no C or R asked stands; the keys wait for the switch."""
        self.concurrency = self.rate = None
        self.switching_from, self.switch_until = mode, now + MODE_SWITCH_S

    # -- what the screen shows -----------------------------------------------------------
    def on_screen(self, snap: Snapshot, now: float) -> Snapshot:
        """`snap` with the C and R asked and not yet confirmed in their place; a switch of
        mode the engine made (or that waited long enough) ends here."""
        if self.concurrency is not None and now < self.concurrency_until and snap.target_c != self.concurrency:
            snap = replace(snap, target_c=self.concurrency, previous_c=None)  # not yet confirmed
        if self.switching_from is not None and (snap.mode != self.switching_from or now >= self.switch_until):
            self.switching_from = None
        if (self.rate is not None and now < self.rate_until and snap.mode in OPEN_LOOP
                and snap.target_rate != self.rate):
            snap = replace(snap, target_rate=self.rate)
        return snap


__all__ = ["MODE_SWITCH_S", "OPEN_LOOP", "RATE_FLOOR", "WANT_HOLD_S", "LoadAsks"]
