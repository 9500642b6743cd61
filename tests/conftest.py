"""Shared fixtures: simulated servers the tests start themselves, on 127.0.0.1 only."""

from __future__ import annotations

import time
from typing import Callable, Iterator

import httpx
import pytest

from redline.engine.sim.serve import SimProcess, spawn_sim_process


def sim_state(url: str) -> dict:
    """The sim's exact counters (its /sim/state)."""
    r = httpx.get(url + "/sim/state", timeout=5.0)
    r.raise_for_status()
    return r.json()


def wait_for(pred: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    """Poll pred until true or timeout (bounded); returns the last value."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(interval)
    return pred()


async def sim_state_async(url: str) -> dict:
    """The sim's exact counters, from async tests."""
    async with httpx.AsyncClient() as c:
        return (await c.get(url + "/sim/state", timeout=5.0)).json()


async def until(pred, timeout: float, interval: float = 0.02) -> float | None:
    """Seconds until `await pred()` holds, or None after timeout (bounded polling)."""
    import asyncio

    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if await pred():
            return time.monotonic() - t0
        await asyncio.sleep(interval)
    return None


@pytest.fixture
def sim_factory() -> Iterator[Callable[..., SimProcess]]:
    started: list[SimProcess] = []

    def make(profile: str = "healthy", seed: int = 0, extra_args: tuple[str, ...] = ()) -> SimProcess:
        sim = spawn_sim_process(profile=profile, seed=seed, extra_args=extra_args)
        started.append(sim)
        assert sim.url.startswith("http://127.0.0.1:")
        return sim

    yield make
    for sim in started:
        sim.stop()


@pytest.fixture
def healthy_sim(sim_factory) -> SimProcess:
    return sim_factory("healthy")
