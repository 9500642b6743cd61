"""A closed loop that rises by hundreds sends in batches (engine/load/controller.py, SEND_BATCH).

A request's send time is stamped when its task first runs; its bytes leave only after the loop
polls again. Started all at once, every new request's first step ran before any byte left, so
the TTFTs of a big rise read up to ~0.7 s high (benchmarks/send_burst.py). These tests count
loop turns with a callback that schedules itself again on every turn.
"""

from __future__ import annotations

import asyncio
from collections import Counter

from redline.engine.constants import SEND_BATCH
from redline.engine.load.controller import Controller


class TurnCounter:
    """Counts the event loop's turns: a callback that puts itself back on every turn."""

    def __init__(self) -> None:
        self.turns = 0
        self._loop = asyncio.get_running_loop()
        self._on = True
        self._loop.call_soon(self._tick)

    def _tick(self) -> None:
        self.turns += 1
        if self._on:
            self._loop.call_soon(self._tick)

    def stop(self) -> None:
        self._on = False


async def _rise(start: int, to: int) -> tuple[Counter, int]:
    """(how many requests first ran in each loop turn, in-flight at the end) of a rise."""
    turns = TurnCounter()
    first_turn: list[int] = []
    release = asyncio.Event()

    async def launch(t_intended: float | None, item: object) -> None:
        first_turn.append(turns.turns)  # where run_request stamps t_send
        await release.wait()

    c = Controller(launch, start, max_concurrency=4096)
    c.start()
    try:
        for _ in range(200):
            if len(first_turn) >= start:
                break
            await asyncio.sleep(0.005)
        before = len(first_turn)
        c.set_concurrency(to)
        for _ in range(2000):  # bounded: a few hundred turns are enough
            if len(first_turn) >= to:
                break
            await asyncio.sleep(0)
        in_flight = c.in_flight
        return Counter(first_turn[before:]), in_flight
    finally:
        turns.stop()
        release.set()
        await c.stop()


async def test_a_rise_of_hundreds_starts_at_most_a_batch_per_loop_turn():
    per_turn, in_flight = await _rise(8, 1024)
    assert sum(per_turn.values()) == 1016 and in_flight == 1024  # every slot started
    assert max(per_turn.values()) <= SEND_BATCH, per_turn.most_common(3)
    # and it does not dawdle: a batch in (nearly) every turn until the rise is done
    span = max(per_turn) - min(per_turn) + 1
    assert span <= 2 * (1016 // SEND_BATCH + 1), span


async def test_a_small_rise_starts_at_once():
    per_turn, in_flight = await _rise(1, 1 + SEND_BATCH)
    assert in_flight == 1 + SEND_BATCH and len(per_turn) == 1, per_turn


# -- a rise's connections open before its requests start (prepare) -----------------------------
async def test_a_rise_prepares_its_connections_before_any_of_its_requests_starts_and_a_stop_ends_a_wait_on_them():
    """prepare(n) is awaited, whole, before the n requests of a rise start (their connects then
    wait in no TTFT); a refill asks for what it starts; the stop cancels a prepare that hangs."""
    log: list[tuple[str, int]] = []
    release = asyncio.Event()
    opened = asyncio.Event()

    async def prepare(n: int) -> None:
        log.append(("prepare", n))
        await asyncio.sleep(0.02)  # the connects
        log.append(("prepared", n))
        opened.set()

    async def launch(t_intended: float | None, item: object) -> None:
        log.append(("start", 1))
        await release.wait()

    c = Controller(launch, 4, max_concurrency=4096, prepare=prepare)
    c.start()
    try:
        for _ in range(400):
            if sum(1 for k, _ in log if k == "start") >= 4:
                break
            await asyncio.sleep(0.005)
        assert log[:2] == [("prepare", 4), ("prepared", 4)] and [k for k, _ in log[2:]] == ["start"] * 4
        del log[:]
        c.set_concurrency(20)
        for _ in range(400):
            if sum(1 for k, _ in log if k == "start") >= 16:
                break
            await asyncio.sleep(0.005)
        assert log[:2] == [("prepare", 16), ("prepared", 16)] and [k for k, _ in log[2:]] == ["start"] * 16
    finally:
        release.set()
        await c.stop()

    async def hangs(n: int) -> None:
        await asyncio.Event().wait()  # a connect that never answers

    c = Controller(launch, 4, max_concurrency=4096, prepare=hangs)
    c.start()
    await asyncio.sleep(0.01)
    await asyncio.wait_for(c.stop(), 1.0)  # not held by the hung prepare
    assert c._runner is not None and c._runner.done()


async def test_a_fixed_size_run_prepares_no_more_than_its_budget():
    asked: list[int] = []

    async def prepare(n: int) -> None:
        asked.append(n)

    async def launch(t_intended: float | None, item: object) -> None:
        pass

    c = Controller(launch, 64, max_concurrency=4096, prepare=prepare)
    c.budget = 5
    c.start()
    try:
        await asyncio.wait_for(c.drained.wait(), 2.0)
    finally:
        await c.stop()
    assert asked and asked[0] == 5 and max(asked) == 5
