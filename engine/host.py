"""Run an Engine on its own thread and event loop, driven from another thread (the TUI).

Drawing holds the UI's loop; the engine's loop keeps reading sockets and stamping bytes.
Commands cross with run_coroutine_threadsafe; snapshots cross as immutable objects (the
UI reads `host.snapshot`, the latest one, whenever it redraws).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any, Callable

from .config import EngineConfig
from .core import Engine
from .snapshot import Snapshot


def new_event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop

        return uvloop.new_event_loop()
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux/macOS
        return asyncio.new_event_loop()


class EngineThread:
    def __init__(self, config: EngineConfig) -> None:
        self.engine = Engine(config)
        self._loop = new_event_loop()
        self._thread = threading.Thread(target=self._run, name="redline-engine", daemon=True)
        self._ready = concurrent.futures.Future()
        self._stopped = threading.Event()

    # -- life cycle --------------------------------------------------------------------
    def start(self, timeout: float = 120.0) -> None:
        """Start the engine; re-raises its start-up error (bad URL, unreachable target)."""
        self._thread.start()
        self._ready.result(timeout=timeout)

    def _run(self) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._start())
            if self._ready.exception() is None:
                loop.run_forever()
        finally:
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()
                self._stopped.set()

    async def _start(self) -> None:
        try:
            await self.engine.start()
        except BaseException as exc:  # handed to the caller of start()
            await self.engine.stop("start failed")
            self._ready.set_exception(exc)
            return
        self._ready.set_result(None)

    def stop(self, reason: str = "quit", timeout: float = 10.0) -> None:
        """Stop all load and complete the log; safe to call twice and from signal paths."""
        if self._stopped.is_set() or not self._thread.is_alive():
            return
        fut = asyncio.run_coroutine_threadsafe(self.engine.stop(reason), self._loop)
        try:
            fut.result(timeout=timeout)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=timeout)

    @property
    def running(self) -> bool:
        return self._thread.is_alive() and not self._stopped.is_set()

    # -- reading -----------------------------------------------------------------------
    @property
    def snapshot(self) -> Snapshot:
        return self.engine.snapshot

    # -- commands ----------------------------------------------------------------------
    def call(self, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future:
        """Run fn(*args) on the engine loop (awaiting it if it is a coroutine function)."""

        async def run() -> Any:
            res = fn(*args)
            if asyncio.iscoroutine(res):
                res = await res
            return res

        return asyncio.run_coroutine_threadsafe(run(), self._loop)

    def set_concurrency(self, n: int) -> concurrent.futures.Future:
        return self.call(self.engine.set_concurrency, n)

    def toggle_pause(self) -> concurrent.futures.Future:
        return self.call(self.engine.toggle_pause)

    def probe(self) -> concurrent.futures.Future:
        return self.call(self.engine.probe)

    def restore(self) -> concurrent.futures.Future:
        return self.call(self.engine.restore)

    def abort(self) -> concurrent.futures.Future:
        return self.call(self.engine.abort)
