"""The keys that run presets and find the limit (tui/app.py's RedlineApp is a PresetKeys): the
preset picker (`p`, each preset with its run on the built-in sim), a preset's own workload
applied first, the knee search (`k`), the probe lane (`l`), the profiler (`P`) and live SLOs
(`o`); the watch on a preset the app started, which says when it finished, and the one on
requests failing in a row (the server refuses everything), which says so."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from ..engine import api
from .engine_commands import C, error_line

if TYPE_CHECKING:
    from ..engine.api import Preset, Snapshot

from .load_keys import WORKLOAD_REPLY_S


class PresetKeys:
    """Mixed into the App (see LoadKeys)."""

    # -- presets -----------------------------------------------------------------------
    def action_preset(self) -> None:
        from .widgets.dialogs import PresetPicker

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
            change = api.preset_workload_change(preset, self._workload())
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
            self.notify(f"preset {preset.name}: workload {change.describe()}: {error_line(exc)}; not started", severity="error")
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
            how = f"break: {br.reason} at {br.where}; {br.good_text}"
        else:
            how = "no break"
        text = f"preset {name} finished ({how})"
        self.host.send(C.Log("preset", text))
        self._preset_note = text  # line 2 says what holds now (`[PROBE] C=1 (was C=256, r returns)`)

    def _follow_failures(self, snap: Snapshot) -> None:
        """CONSECUTIVE_FAILURES_END requests failed in a row (the server refuses everything: a
        model it does not serve, a proxy's 404): said once per streak, in a notice and the log,
        with the server's reason; the load is held as it is, for the operator to decide (a
        preset's runner ends its own step; a gone server is said as gone)."""
        n = snap.failures_in_a_row
        if n < api.CONSECUTIVE_FAILURES_END or snap.preset_running or snap.state == "server gone":
            self._failures_said = n >= api.CONSECUTIVE_FAILURES_END and getattr(self, "_failures_said", False)
            return
        if getattr(self, "_failures_said", False):
            return
        self._failures_said = True
        text = f"{n} requests failed in a row: {snap.last_failure or 'no reason given'}; the load is held as it is (a probes, space pauses, q quits)"
        self.host.send(C.Log("warning", text))
        self.notify(text, severity="error", timeout=15)

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
        from .widgets.dialogs import TextPrompt

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


def search_preset(start: int, max_c: int, config) -> Preset:
    """The preset `k` runs: a knee search from the current C with this session's workload
    (built by the engine: engine/preset/knee.py)."""
    return api.knee_search_preset(start, max_c, getattr(config, "workload", None))
