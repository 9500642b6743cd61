"""The one load holder: what holds load, in this process (the engine's) and in each worker
process or Ray actor (engine/load/worker.py): its targets, the pick of the next one, and one
request's path (engine/load/one_request.py). The in-process load is the one-worker case of
the same class: a Controller (engine/load/controller.py) launches `LoadHolder.one` either way.

- targets: each a Sender and a weight, skipped while gone (`PickTarget`; the engine's
  TargetState, a worker's own);
- the pick: smooth weighted round robin over the targets not gone (`pick`);
- one request: a trace row's prompt at its time, the workload's next prompt (on a schedule,
  or in a slot), or a multi-turn session.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable, Protocol, Sequence

from .one_request import one_request

if TYPE_CHECKING:
    from ..workload.prompts import Prompt, PromptSource, WorkloadConfig
    from .sender import Sender


class PickTarget(Protocol):
    """A target as the pick sees it."""

    sender: Sender
    weight: float
    current: float  # smooth weighted round robin's running credit

    @property
    def down(self) -> bool: ...  # gone, or not ready (its /health answers 503)


def pick(targets: Sequence[PickTarget]) -> PickTarget | None:
    """The next target (smooth weighted round robin over the targets not down: gone or not
    ready); None when every target is down."""
    live = [t for t in targets if not t.down]
    if not live:
        return None
    if len(live) == 1:
        return live[0]
    total = 0.0
    best = live[0]
    for t in live:
        t.current += t.weight
        total += t.weight
        if t.current > best.current:
            best = t
    best.current -= total
    return best


class LoadHolder:
    """Holds load: what a Controller launches, one request at a time (see the module
    docstring). Its owner keeps `source`, `workload` and `row_prompt` current (a live workload
    change, a trace)."""

    def __init__(self, targets: Sequence[PickTarget], source: PromptSource, workload: WorkloadConfig,
                 row_prompt: Callable[[object], Prompt] | None = None) -> None:
        self.targets = targets  # the owner's list: targets added later are picked too
        self.source = source
        self.workload = workload
        self.row_prompt = row_prompt  # a trace row's prompt (a trace replay), else None

    def pick(self) -> Sender:
        """The Sender of the target the next request (or session) goes to (the first when
        every one is gone: the load is held meanwhile)."""
        t = pick(self.targets) if len(self.targets) > 1 else None
        return (t or self.targets[0]).sender

    async def prepare(self, n: int) -> None:
        """Before a closed loop starts `n` requests: each target not down its share of `n`
        connections open (Sender.preopen), so their connects wait in no TTFT."""
        live = [t for t in self.targets if not t.down] or list(self.targets[:1])
        total = sum(t.weight for t in live)
        for t in live:
            await t.sender.preopen(n if len(live) == 1 or total <= 0 else math.ceil(n * t.weight / total))

    async def one(self, t_intended: float | None = None, item: object = None) -> None:
        await one_request(self.pick(), self.source, self.workload, t_intended, item, self.row_prompt)
