"""Is the server gone? A request that could not reach the server or whose stream broke asks;
`/health` answers.

SGLang's `/health` runs a one-token generation: it answers after at least 1 s, and 503 while the
server starts, shuts down, or when its scheduler gave no output for 20 s. So one ask has
HEALTH_TIMEOUT_S (10 s), and only HEALTH_FAILS_GONE asks in a row that got no answer (refused,
timed out, a 5xx other than 503) make the server gone; a slow `/health` never does. Answers:

- up: any status below 500 (a server without `/health` answers 404: it is there);
- not ready: 503, HEALTH_FAILS_GONE times in a row (a dying server may say 503 once before it
  stops answering). The server is there and says it cannot serve: the load is held (as for a
  gone server) and `/health` polled until it answers 200; one that stays not ready for
  NOT_READY_GONE_S is gone;
- no answer: asked again after RECONNECT_BACKOFF_S; HEALTH_FAILS_GONE of them: gone. While
  gone the load is held and `/health` polled until it answers; then load resumes.

`judge(rec)`: a request that failed as `connect` or `disconnect` waits for the verdict its
failure raised (one ask at a time, shared by every request waiting for it) and becomes
`server_gone` when the server is gone: it failed because the server died, not because of the
load it was sent at. A lone failure on a live server asks at most once a HEALTH_RECHECK_S
(unless GONE_AFTER_CONNECT_ERRORS failed in a row since the last ask); failures that ask
nothing keep their kind.
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable

import httpx

from ..constants import (
    ERROR_TEXT_CHARS,
    GONE_AFTER_CONNECT_ERRORS,
    HEALTH_FAILS_GONE,
    HEALTH_RECHECK_S,
    HEALTH_TIMEOUT_S,
    NOT_READY_GONE_S,
    RECONNECT_BACKOFF_S,
)
from ..measure import records
from ..measure.records import RequestRecord
from .request import classify_error

UP = "up"
NOT_READY = "not ready"
GONE = "gone"
NO_ANSWER = "no answer"  # one ask's result, never a state

# failures that may mean the server died (its health is asked)
SUSPECT_KINDS = (records.ERR_CONNECT, records.ERR_DISCONNECT)


class ServerWatch:
    def __init__(
        self,
        client: httpx.AsyncClient,
        health_url: str,
        on_gone: Callable[[], None],
        on_back: Callable[[], None],
        log: Callable[[str, str], None],
        on_not_ready: Callable[[], None] | None = None,
        timeout_s: float = HEALTH_TIMEOUT_S,
    ) -> None:
        self.client = client
        self.health_url = health_url
        self._on_gone = on_gone
        self._on_back = on_back
        self._on_not_ready = on_not_ready or (lambda: None)
        self._log = log
        self.timeout_s = timeout_s
        self.state = UP
        self.why = ""  # what the last ask that was not "up" got: "connection refused", "/health answers 503"
        self._streak = 0  # suspect failures since the last completed request
        self._since_ask = 0  # suspect failures since the last ask began
        self._asked_at: float | None = None  # monotonic time of the last ask's answer
        self._verdict: asyncio.Future[str] | None = None  # the first verdict of the ask in flight
        self._task: asyncio.Task | None = None
        self._closed = False

    @property
    def gone(self) -> bool:
        return self.state == GONE

    @property
    def not_ready(self) -> bool:
        return self.state == NOT_READY

    @property
    def down(self) -> bool:
        """Gone or not ready: no load goes to it."""
        return self.state != UP

    # -- one ask -------------------------------------------------------------------------
    async def ask(self) -> str:
        """One GET /health: UP, NOT_READY (503) or NO_ANSWER (refused, timed out, another 5xx)."""
        try:
            r = await self.client.get(self.health_url, timeout=self.timeout_s)
        except httpx.TimeoutException:
            self.why = f"/health did not answer within {self.timeout_s:g} s"
            return NO_ANSWER
        except httpx.HTTPError as exc:
            self.why = classify_error(exc, responded=False)[1]  # the one wording of a transport failure
            return NO_ANSWER
        if r.status_code == 503:
            self.why = "/health answers 503"
            return NOT_READY
        if r.status_code >= 500:
            self.why = f"/health answers {r.status_code}"
            return NO_ANSWER
        return UP

    # -- requests' outcomes ----------------------------------------------------------------
    def succeeded(self) -> None:
        self._streak = 0

    def connect_failed(self) -> None:
        """A request failed in a way that may mean the server died: ask /health when due."""
        self._streak += 1
        self._since_ask += 1
        self._maybe_ask()

    async def judge(self, rec: RequestRecord) -> None:
        """`rec` failed as `connect` or `disconnect`: wait for the verdict its failure raised and
        make it `server_gone` when the server is gone (see the module's docstring)."""
        if self._closed or rec.error_kind not in SUSPECT_KINDS:
            return
        if self.state != GONE:
            self.connect_failed()
            verdict = self._verdict
            if verdict is not None and not verdict.done():
                await asyncio.shield(verdict)  # cancelled: the request ends as it is
        if self.state == GONE:
            rec.error_kind = records.ERR_SERVER_GONE
            rec.error_text = f"server gone: {rec.error_text}"[:ERROR_TEXT_CHARS]

    def _maybe_ask(self) -> None:
        if self._closed or self.state != UP or (self._task is not None and not self._task.done()):
            return
        recent = self._asked_at is not None and time.monotonic() - self._asked_at < HEALTH_RECHECK_S
        if recent and self._since_ask < GONE_AFTER_CONNECT_ERRORS:
            return  # a lone failure just after an answer: no new ask
        self._since_ask = 0
        self._verdict = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._watch(), name="redline-server-watch")

    def _decide(self, verdict: str) -> None:
        fut = self._verdict
        if fut is not None and not fut.done():
            fut.set_result(verdict)

    async def _watch(self) -> None:
        """Ask until a verdict; while the server is gone or not ready, keep asking until it is up."""
        misses = 0  # asks in a row without an answer
        answers_503 = 0  # asks in a row answered 503
        i = 0
        not_ready_since: float | None = None
        try:
            while not self._closed:
                got = await self.ask()
                now = time.monotonic()
                if got == UP:
                    self._asked_at = now
                    was = self.state
                    self.state = UP
                    self._decide(UP)
                    if was != UP:
                        self._streak = 0
                        self._on_back()
                    elif self._streak >= GONE_AFTER_CONNECT_ERRORS:
                        self._log("notice", f"{self._streak} requests failed in a row (refused or broken), but {self.health_url} answers: server still up")
                    return
                if got == NOT_READY and self.state != GONE:
                    # not ready takes as many 503s in a row as gone takes misses: a dying server
                    # may say 503 once before it stops answering (its victims: server_gone)
                    misses = 0
                    answers_503 += 1
                    if not_ready_since is None:
                        not_ready_since = now
                    if self.state == UP and answers_503 >= HEALTH_FAILS_GONE:
                        self.state = NOT_READY
                        self._decide(NOT_READY)
                        self._on_not_ready()
                    elif self.state == NOT_READY and now - not_ready_since >= NOT_READY_GONE_S:
                        self.why = f"/health has answered 503 for {NOT_READY_GONE_S:g} s"
                        self._gone()
                else:
                    not_ready_since = None
                    answers_503 = 0
                    misses += 1
                    if self.state != GONE and misses >= HEALTH_FAILS_GONE:
                        self._gone()
                await asyncio.sleep(RECONNECT_BACKOFF_S[min(i, len(RECONNECT_BACKOFF_S) - 1)])
                i += 1
        finally:
            self._decide(self.state)  # stopped before a verdict: what is known

    def _gone(self) -> None:
        self.state = GONE
        self._decide(GONE)
        self._on_gone()

    async def stop(self) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
