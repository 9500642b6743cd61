"""The probe lane: one request at a time beside the load (docs/finding-the-limit.md#the-probe-lane).

Toggled live (key `l`), it keeps a single stream going next to the load's C streams. Its
requests are rows of their own (phase `lane`) and stay out of every load figure (tok/s,
latencies, step results); the lane has its own TTFT and ITL, live and per step, so the screen
can put a lone user's latency next to the loaded ones: the interference the load causes.
Distinct from `a`, which aborts the load and drops to a C=1 probe.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Callable

from ..constants import LATENCY_WINDOW_S
from ..measure.histogram import RollingDigest
from ..measure.live_metrics import censored_window
from ..measure.records import RequestRecord

if TYPE_CHECKING:
    from .sender import Sender

LANE = "lane"


class LaneStats:
    """The lane's live window (the load's is engine/measure/live_metrics.py)."""

    def __init__(self) -> None:
        self.ttft = RollingDigest(LATENCY_WINDOW_S)
        self.itl = RollingDigest(LATENCY_WINDOW_S)
        self.completed = 0
        self.failed = 0
        self.waiting: dict[int, float] = {}  # its request sent, no first token yet: rid -> t_start
        self.ttft_bound = False  # the last p50_ms's TTFT is a lower bound (its request still waits)

    def p50_ms(self, now: float) -> tuple[float | None, float | None]:
        """(TTFT p50, ITL p50) in ms over the live window; TTFT counts a request still
        waiting for its first token at its age now, as the load's does (`ttft_bound`: it is
        at least that: a queued lane request reads ">=75 s", not "-")."""
        out = []
        for w in (self.ttft, self.itl):
            w.expire(now)
        p = censored_window(self.ttft, [now - t for t in self.waiting.values() if now > t])
        self.ttft_bound = "p50" in p.bounds
        (itl,), _ = self.itl.quantiles((0.5,))
        for v in (p.p50, itl):
            out.append(None if v is None else v * 1000.0)
        return out[0], out[1]


class ProbeLane:
    def __init__(self, sender: Sender, next_prompt: Callable[[], tuple[str, int, int]]) -> None:
        self.sender = sender
        self._next = next_prompt
        self._task: asyncio.Task | None = None

    @property
    def on(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        if not self.on:
            self._task = asyncio.create_task(self._run(), name="redline-probe-lane")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            text, max_tokens, expected = self._next()
            rec = await self.sender.send(text, max_tokens, expected, LANE)
            if rec.status != "ok":
                await asyncio.sleep(0.5)  # a failing lane does not hammer the server


def is_lane(rec: RequestRecord) -> bool:
    return rec.phase == LANE
