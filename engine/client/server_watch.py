"""Is the server gone? Consecutive connection failures raise the question; /health answers it.

After GONE_AFTER_CONNECT_ERRORS connection failures in a row the server's `/health` is asked.
Only when that fails too is the server gone: no new requests are sent (the pool holds) and
`/health` is polled (RECONNECT_BACKOFF_S) until it answers; then load resumes. A server that
refuses some connections but answers its health check is not gone (the failures still count
as errors).
"""

from __future__ import annotations

import asyncio
from typing import Callable

import httpx

from ..constants import GONE_AFTER_CONNECT_ERRORS, RECONNECT_BACKOFF_S

HEALTH_TIMEOUT_S = 2.0


class ServerWatch:
    def __init__(
        self,
        client: httpx.AsyncClient,
        health_url: str,
        on_gone: Callable[[], None],
        on_back: Callable[[], None],
        log: Callable[[str, str], None],
    ) -> None:
        self.client = client
        self.health_url = health_url
        self._on_gone = on_gone
        self._on_back = on_back
        self._log = log
        self.gone = False
        self._streak = 0
        self._checking = False
        self._task: asyncio.Task | None = None
        self._closed = False

    async def healthy(self) -> bool:
        try:
            r = await self.client.get(self.health_url, timeout=HEALTH_TIMEOUT_S)
        except httpx.HTTPError:
            return False
        return r.status_code < 500 or r.status_code == 503  # 503: up, but overloaded

    def connect_failed(self) -> None:
        self._streak += 1
        if self._streak >= GONE_AFTER_CONNECT_ERRORS and not self.gone and not self._checking and not self._closed:
            self._checking = True
            self._task = asyncio.create_task(self._check(), name="redline-server-watch")

    def succeeded(self) -> None:
        self._streak = 0

    async def _check(self) -> None:
        try:
            if await self.healthy():
                self._log("notice", f"{self._streak} connection failures in a row, but {self.health_url} answers: server still up")
                self._streak = 0
                return
            self.gone = True
            self._on_gone()
            i = 0
            while self.gone and not self._closed:
                await asyncio.sleep(RECONNECT_BACKOFF_S[min(i, len(RECONNECT_BACKOFF_S) - 1)])
                i += 1
                if await self.healthy():
                    self.gone = False
                    self._streak = 0
                    self._on_back()
        finally:
            self._checking = False

    async def stop(self) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
