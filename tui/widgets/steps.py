"""The step table: a row per period held at one concurrency (the live "83 tok/s at C=8")."""

from __future__ import annotations

from textual.widgets import DataTable

from redline.engine.snapshot import Snapshot
from redline.engine.stepresult import StepResult

from ..format import ms, rate

COLUMNS = ("C", "dur", "tok/s", "TTFT p50", "TTFT p99", "ITL p99", "err", "srv run")


def _cells(s: StepResult, live: bool = False) -> tuple[str, ...]:
    c = f"{s.concurrency}{'*' if live else ''}" + (" probe" if s.phase == "probe" else "")
    return (
        c,
        f"{s.duration_s:.0f}s",
        rate(s.output_throughput),
        ms(s.median_ttft_ms),
        ms(s.p99_ttft_ms),
        ms(s.p99_itl_ms),
        str(s.failed),
        "-" if s.server_max_running is None else f"{s.server_max_running:.0f}",
    )


class StepTable(DataTable):
    def __init__(self, *, id: str = "steps") -> None:
        super().__init__(id=id, cursor_type="none", zebra_stripes=True, show_cursor=False)
        self._shown: tuple = ()

    def on_mount(self) -> None:
        self.add_columns(*COLUMNS)

    def show(self, snap: Snapshot) -> None:
        steps = list(snap.steps)
        if snap.probe_result is not None:
            steps.append(snap.probe_result)
        rows = [_cells(s) for s in steps]
        if snap.current_step is not None and snap.current_step.duration_s >= 1:
            rows.append(_cells(snap.current_step, live=True))
        key = tuple(rows)
        if key == self._shown:
            return
        self._shown = key
        self.clear()
        self.add_rows(rows)
        self.scroll_end(animate=False)
