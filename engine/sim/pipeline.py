"""Pipeline parallelism as SGLang schedules it: micro-batches rotating through the stages.

Read from SGLang's ``managers/scheduler_pp_mixin.py`` (``event_loop_pp``,
``init_pp_loop_state``) and ``managers/scheduler.py`` (``get_num_allocatable_reqs``), the same in
0.5.9 and 0.5.23:

- the scheduler keeps ``pp_loop_size = pp_size + pp_async_batch_depth`` micro-batches, each
  with its own running batch (``running_mbs``), and visits them in turn (``for mb_id in
  range(self.pp_loop_size)``);
- at its turn a micro-batch first takes the tokens of its previous pass, once that came back
  from the last stage (the results of micro-batch ``(mb_id + 1) % pp_loop_size`` are processed
  in the turn before its own), then admits waiting requests (a prefill) while it holds fewer
  than ``pp_max_micro_batch_size`` (``get_num_allocatable_reqs``: the micro-batch's own budget,
  and the request pool's free slots: ``max_running_requests`` in all) and launches its batch
  on the first stage;
- a stage (one GPU, 1/pp of the layers) works on one micro-batch at a time, so a launched batch
  passes the stages one after the other, each when it is free.

So a request gets a token every ``max(pp_size, busy micro-batches)`` stage times, and with
the seed's numbers (pp 8, ``max_running_requests`` 64: micro-batches of 64 // 8 = 8) 64 run
while each GPU runs a batch of 8: many requests, low tok/s, GPUs underfed. A
``pp_max_micro_batch_size`` of 64 with ``max_running_requests`` 64 does not run more (the pool
holds 64): the requests fill fewer, larger micro-batches.

The stage time of a batch is the profile's :meth:`~.profiles.SimProfile.step_time` (decode
plus the prefill admitted). The GPUs are told the batch one of them runs on average: the
micro-batches in flight, each on a stage, over the stages (``min(batch, saturation_batch)``
each, so one large micro-batch in an empty pipe feeds one GPU, not all).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence, Sized
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .profiles import SimProfile


class _Scheduler(Protocol):
    """What the loop drives of the batch model (engine/sim/model.py BatchModel)."""

    _closed: bool
    _stopped: asyncio.Event
    _wake: asyncio.Event

    @property
    def _slots(self) -> Sequence[Sized]: ...  # each micro-batch's requests
    @property
    def _queue(self) -> Sized: ...  # the requests waiting

    @property
    def hung(self) -> bool: ...

    async def wait_go(self) -> bool: ...

    def _emit(self, slot: int = -1) -> None: ...

    def _admit(self, slot: int = -1) -> int: ...

    def _report_batch(self, batch: float) -> None: ...

__all__ = ["StageClock", "run_pipeline"]


class StageClock:
    """When each stage of the pipeline is free: a batch launched at ``t`` passes stage after
    stage, each when it is free, ``cost`` seconds on each."""

    def __init__(self, stages: int) -> None:
        self.free_at = [0.0] * stages

    def launch(self, t: float, cost: float) -> float:
        """Launch a batch at ``t``; returns when it leaves the last stage."""
        free = self.free_at
        for s in range(len(free)):
            t = (t if t > free[s] else free[s]) + cost
            free[s] = t
        return t


def _gpu_batch(in_flight: list[tuple[float, int]], now: float, stages: int, saturation: int) -> float:
    """The batch a GPU runs on average now: the micro-batches still in the pipe, one per stage."""
    live = [min(b, saturation) for t, b in in_flight if t > now]
    return sum(live) / max(stages, len(live)) if live else 0.0


async def run_pipeline(model: _Scheduler, profile: SimProfile) -> None:
    """The scheduler loop under pipeline parallelism; runs until the model closes."""
    loop = asyncio.get_running_loop()
    stages, slots = profile.pp_size, profile.micro_batches
    clock = StageClock(stages)
    out_at: list[float | None] = [None] * slots  # when each micro-batch's launched pass comes back
    in_flight: list[tuple[float, int]] = []  # (back at, size) of the passes in the pipe
    idle_turns = 0
    j = 0
    while not model._closed:
        if model.hung:
            await model._stopped.wait()
            continue
        await model.wait_go()  # the profiler's trace export: no token meanwhile
        back = out_at[j]
        if back is not None:  # its previous pass: wait for it, then its tokens
            delay = back - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
                await model.wait_go()  # paused meanwhile: its tokens come after the export
            out_at[j] = None
            model._emit(j)
            if model._closed:
                return
        prefill = model._admit(j)
        size = len(model._slots[j])
        now = loop.time()
        in_flight = [f for f in in_flight if f[0] > now]
        if size:
            idle_turns = 0
            done = clock.launch(now, profile.step_time(size, prefill))
            out_at[j] = done
            in_flight.append((done, size))
        else:
            idle_turns += 1
        model._report_batch(_gpu_batch(in_flight, now, stages, profile.saturation_batch))
        if idle_turns >= slots and not any(t is not None for t in out_at):
            # a whole turn found nothing to run or to wait for: sleep until a request comes
            idle_turns = 0
            model._report_batch(0)
            model._wake.clear()
            if not model._queue:
                await model._wake.wait()
            else:
                await asyncio.sleep(0.001)  # queued but nothing admitted (released meanwhile)
        j = (j + 1) % slots
