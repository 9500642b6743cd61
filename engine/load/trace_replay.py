"""Replaying a request trace open-loop: each row is sent at its recorded time / speed.

The rows come from engine/workload/trace.py (Mooncake JSONL: timestamp, input_length, output_length,
hash_ids); their prompts are built there (shared hash ids -> shared prefix text). Here the
rows become a schedule for the controller's open loop (engine/load/controller.py), so a replay
has what rate mode has: latencies from each row's intended send time, the in-flight cap,
the schedule lag and the sends held back at the cap.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Sequence

from ..constants import TRACE_LEAD_S
from ..workload.prompts import Calibration, Prompt
from ..workload.trace import TracePrompts, TraceRow, load_trace, trace_duration_s
from .controller import TRACE, LoadControl


class TraceSchedule:
    """Row i is due at t0 + rows[i].t_s / speed (perf seconds); `t_next` is None at the end."""

    def __init__(self, rows: Sequence[TraceRow], speed: float, t0: float) -> None:
        if speed <= 0:
            raise ValueError(f"trace speed {speed!r}: expected a factor > 0")
        self.rows = rows
        self.speed = speed
        self.t0 = t0
        self.i = 0
        self.t_next: float | None = self._due(0)

    def _due(self, i: int) -> float | None:
        return self.t0 + self.rows[i].t_s / self.speed if i < len(self.rows) else None

    def pop(self) -> tuple[float, TraceRow]:
        t, row = self.t_next, self.rows[self.i]
        assert t is not None
        self.i += 1
        self.t_next = self._due(self.i)
        return t, row

    def rebase(self, now: float) -> None:
        """After a pause: the rest of the trace keeps its spacing, the next row due now."""
        if self.t_next is not None:
            self.t0 += now - self.t_next
            self.t_next = now

    def set_speed(self, speed: float, now: float) -> None:
        """From now on at `speed`: the next row is due now, the rest keep their spacing / speed."""
        if speed <= 0:
            raise ValueError(f"trace speed {speed!r}: expected a factor > 0")
        self.speed = speed
        if self.t_next is not None:
            self.t0 = now - self.rows[self.i].t_s / speed
            self.t_next = now

    @property
    def sent(self) -> int:
        return self.i


class TraceReplay:
    """A loaded trace and its prompts; `start` replays it on a controller at a speed."""

    def __init__(self, path: str, rows: list[TraceRow], prompts: TracePrompts) -> None:
        self.path = path
        self.rows = rows
        self.prompts = prompts
        self.schedule: TraceSchedule | None = None
        self.finished_logged = False  # the engine said the current replay finished

    @classmethod
    def load(cls, path: str, calibration: Calibration, seed: int = 0) -> "TraceReplay":
        """TraceError (one line naming the file, line and value) for a bad trace."""
        return cls(path, load_trace(path), TracePrompts(calibration, seed))

    @property
    def duration_s(self) -> float:
        return trace_duration_s(self.rows)

    def start(self, controller: LoadControl, speed: float) -> TraceSchedule:
        """From the first row again, at `speed` (x2 = twice as fast): the first row is due
        TRACE_LEAD_S from now, so the command's own bookkeeping (log, step opening) does not
        make it late."""
        self.schedule = TraceSchedule(self.rows, speed, time.perf_counter() + TRACE_LEAD_S)
        self.finished_logged = False
        controller.start_schedule(self.schedule, TRACE, speed)
        return self.schedule

    def prompt(self, row: object) -> Prompt:
        assert isinstance(row, TraceRow)
        return self.prompts.prompt(row)

    def progress(self) -> tuple[int, int]:
        """(rows sent or due so far, rows in the trace)."""
        return (self.schedule.sent if self.schedule else 0), len(self.rows)


class FedSchedule:
    """A worker's share of a trace replay (`--workers N`): rows the coordinator fed it, each
    with its intended send time (this host's perf seconds), sent by the worker's own pool.

    The coordinator owns the replay (its TraceSchedule: speed, pauses, progress) and feeds
    each worker the rows due in the next TRACE_FEED_AHEAD_S (engine/load/worker_pool.py). A pause or a
    probe moves the rest of the trace later; the coordinator sends the total move (`shift`)
    in its orders and the rows already fed move with it (`shift_to`), so they keep their
    spacing with the rows fed after. `gen` counts replays: a new replay clears the old rows."""

    def __init__(self) -> None:
        self.q: deque[tuple[float, TraceRow]] = deque()
        self.gen = 0
        self.shift = 0.0
        self.popped = 0  # rows of this replay taken by the pool (sent, held or dropped)

    @property
    def t_next(self) -> float | None:
        return self.q[0][0] if self.q else None

    def pop(self) -> tuple[float, TraceRow]:
        self.popped += 1
        return self.q.popleft()

    def rebase(self, now: float) -> None:
        """The coordinator moves the times (`shift_to`); a pause owes nothing here."""

    def start(self, gen: int) -> None:
        """A new replay: the old one's rows are gone."""
        if gen != self.gen:
            self.q.clear()
            self.gen, self.shift, self.popped = gen, 0.0, 0

    def feed(self, gen: int, rows: Sequence[tuple[float, TraceRow]]) -> None:
        if gen == self.gen:
            self.q.extend(rows)

    def shift_to(self, total: float) -> None:
        """The replay moved `total` seconds later since it started: rows held here move by
        what they have not moved yet."""
        d = total - self.shift
        if d:
            self.q = deque((t + d, row) for t, row in self.q)
            self.shift = total
