"""What the live screen follows from one snapshot to the next (tui/live_screen.py): the preset it
started, which says when it finished on its own, and requests failing in a row (the server
refuses everything), which says so once per streak. Each returns the line to log and show;
the screen sends and draws it. No Textual."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..engine import api

if TYPE_CHECKING:
    from ..engine.api import Snapshot


@dataclass
class PresetWatch:
    """The preset the screen started, until it ends; then what the header says of it."""

    name: str | None = None  # the preset started (None: none watched)
    after_seq: int = 0  # the log's last line when it was started: its lines come after
    seen: bool = False  # the engine has shown it running
    note: str = ""  # "preset NAME finished (...)", in the header until the load changes

    def start(self, name: str, after_seq: int) -> None:
        self.name, self.after_seq, self.seen = name, after_seq, False

    def load_changed(self, takes_over: bool) -> None:
        """A key changed the load: the note goes; a key that takes over from a preset ends the
        watch on it too (the engine logs the cancel)."""
        if takes_over:
            self.name = None
        self.note = ""

    def follow(self, snap: Snapshot) -> str | None:
        """A preset started here that ended on its own (not cancelled by a key or a guard):
        "preset NAME finished (break: ... | no break)", to log, and the note the header keeps
        until the operator changes the load (the probe it ends in may hold)."""
        if self.name is None:
            return None
        if snap.preset_running:
            self.seen = True
            return None
        if not self.seen:  # not started yet
            return None
        name, self.name = self.name, None
        lines = [line for line in snap.log if line.seq > self.after_seq]
        if any(line.kind == "preset" and ("cancelled" in line.text or "stopped by" in line.text) for line in lines):
            return None
        br = snap.break_result if any(line.kind == "break" for line in lines) else None
        if br is not None:
            how = f"break: {br.reason} at {br.where}; {br.good_text}"
        else:
            how = "no break"
        self.note = f"preset {name} finished ({how})"  # line 2 says what holds now (`[PROBE] C=1 (was C=256, r returns)`)
        return self.note


@dataclass
class FailureWatch:
    """CONSECUTIVE_FAILURES_END requests failed in a row: said once per streak."""

    said: bool = False

    def follow(self, snap: Snapshot) -> str | None:
        """The line that says so, with the server's reason, once per streak; the load is held
        as it is, for the operator to decide (a preset's runner ends its own step; a gone
        server is said as gone)."""
        n = snap.failures_in_a_row
        if n < api.CONSECUTIVE_FAILURES_END or snap.preset_running or snap.state == "server gone":
            self.said = n >= api.CONSECUTIVE_FAILURES_END and self.said
            return None
        if self.said:
            return None
        self.said = True
        return (f"{n} requests failed in a row: {snap.last_failure or 'no reason given'}; "
                "the load is held as it is (a probes, space pauses, q quits)")


__all__ = ["FailureWatch", "PresetWatch"]
