"""The event loop every redline process runs: uvloop where it is installed."""

from __future__ import annotations

import asyncio


def new_event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop

        return uvloop.new_event_loop()
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux/macOS
        return asyncio.new_event_loop()
