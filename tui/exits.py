"""Exit codes, and what an exit says of the session log: shared by the command line
(tui/cli/) and the screen's launcher (tui/run_app.py, tui/sweep_view.py), which the command
line starts. Light: `redline --help` imports it."""

from __future__ import annotations

import sys
from pathlib import Path

from ..engine import api as engine_api

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (`redline --help`)
if TYPE_CHECKING:
    from ..engine.api import Engine

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_UNREACHABLE = 3
EXIT_GATE_FAILED = 4  # a --gate / [gate] condition failed (engine/report/gate.py)
# the run ended and its session is saved, but the log could not keep every row (a write or
# fsync error: "session saved, N rows lost: REASON"); a signal's 128 + N and a failed gate's 4
# take precedence, the line is printed all the same
EXIT_ROWS_LOST = 5


def session_saved(out_dir: Path | None, loss: str | None = None) -> str:
    """What an exit says of the session log: where it is (and, when a write or fsync failed,
    `loss`: "N rows lost: REASON"), or that none began (a signal while the engine was still
    starting: no directory was made, nothing was recorded)."""
    if out_dir is not None and Path(out_dir).is_dir():
        return f"session saved, {loss}" if loss else f"session saved in {out_dir}"
    return "nothing recorded (stopped before the session began)"


def session_loss(error: str | None, lost_rows: int) -> str | None:
    """"N rows lost: REASON" when the session log kept a write or fsync error, else None
    (from the engine's writer, or from a snapshot of an engine in its own process)."""
    return engine_api.loss_line(lost_rows, error) if error else None


def engine_loss(engine: Engine) -> str | None:
    """session_loss of an engine run in this process (headless)."""
    s = engine.session
    return session_loss(s.error, s.lost_rows) if s is not None else None


def ended_status(loss: str | None, rc: int) -> int:
    """The exit status of a run that ended by itself with status `rc`: EXIT_ROWS_LOST when the
    log lost rows and nothing weightier (a failed gate, a signal) is to be said; the loss
    line printed on stderr either way."""
    if loss is None:
        return rc
    print(f"redline: session saved, {loss}", file=sys.stderr, flush=True)
    return rc or EXIT_ROWS_LOST


__all__ = ["EXIT_BAD_INPUT", "EXIT_GATE_FAILED", "EXIT_OK", "EXIT_ROWS_LOST", "EXIT_UNREACHABLE", "ended_status",
           "engine_loss", "session_loss", "session_saved"]
