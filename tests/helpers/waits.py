"""Polling, every wait bounded: a plain predicate, an async one, a Textual app's."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from typing import Any, Callable

import httpx


# -- polling (every wait is bounded) --------------------------------------------------------
def wait_for(pred: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    """Poll a plain predicate until it holds or `timeout` s passed; its last answer. A server
    that does not answer (httpx.HTTPError) counts as "not yet"."""
    end = time.monotonic() + timeout
    while True:
        with contextlib.suppress(httpx.HTTPError):
            if pred():
                return True
        if time.monotonic() >= end:
            return False
        time.sleep(interval)


async def until(pred: Callable[[], Any], timeout: float, interval: float = 0.02) -> float | None:
    """Seconds (> 0, so the result is true) until `pred()` holds (plain or awaitable), or
    None after `timeout` s. A server that does not answer (httpx.HTTPError) counts as "not yet"."""
    t0 = time.monotonic()
    while True:
        with contextlib.suppress(httpx.HTTPError):
            ok = pred()
            if inspect.isawaitable(ok):
                ok = await ok
            if ok:
                return max(time.monotonic() - t0, 1e-9)
        if time.monotonic() - t0 >= timeout:
            return None
        await asyncio.sleep(interval)



async def settle(pilot, pred: Callable[[], bool], timeout: float = 15.0) -> bool:
    """Let a Textual app run (bounded) until `pred()` holds; returns whether it did. It returns
    as soon as it holds: the default bound (15 s) is for a loaded machine (CI runs the suite on
    every core, beside the sims), where an engine's next second or a screen's next refresh can
    come seconds late; a test that means a deadline passes its own `timeout`."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        await pilot.pause(0.1)
    return pred()
