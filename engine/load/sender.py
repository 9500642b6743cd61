"""Sending: one request from prompt to record, and what a request slot does after it.

- Each request gets an id, the current step's index and phase, and its send time; it tells
  its progress through the Sender's hooks (engine/measure/hooks.py: sent, first_token,
  tokens, ended, lag), and an overloaded slot its `overloaded`.
- A slot that failed fast holds its place FAST_FAIL_S first (no hot loop against a failing
  server). A slot answered 429/503 (the server says it is overloaded), or shed inside a 200
  stream (SGLang's in-stream abort, kind `shed`), backs off, doubling
  from FAST_FAIL_S up to OVERLOAD_BACKOFF_MAX_S, until one of its own requests succeeds.
  The streak belongs to the slot, not to the whole pool; `backing_off` counts the slots
  waiting now, so the screen (and the cap detector) can tell them from a server cap.
- In-flight records are kept so their chunk gaps can be harvested (twenty times a second), by arrival.
- A request that could not reach the server or whose stream broke waits, before its end is
  told, for the verdict of its target's health watch (`watch`, engine/client/server_watch.py):
  it is `server_gone` when the server died.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterator

import httpx

from ..client.api_formats import PATHS, build_body
from ..client.http import preopen
from ..client.request import run_request
from ..client.target import Target
from ..constants import OVERLOAD_BACKOFF_MAX_S
from ..measure import records
from ..measure.hooks import RequestHooks
from ..measure.records import RequestRecord
from ..workload.prompts import WorkloadConfig

if TYPE_CHECKING:
    from ..client.server_watch import ServerWatch

FAST_FAIL_S = 0.05  # a request that failed faster than this holds its slot this long
OVERLOADED = (records.ERR_HTTP_429, records.ERR_HTTP_503, records.ERR_SHED)  # the server says it is overloaded: back off


# (t_intended) -> (step index, concurrency, phase) of a request sent now / scheduled then
Stamp = Callable[[float | None], tuple[int, int, str]]


@dataclass
class Slot:
    streak: int = 0  # consecutive overload answers of this slot


def backoff_s(streak: int) -> float:
    return min(OVERLOAD_BACKOFF_MAX_S, FAST_FAIL_S * 2 ** min(streak, 16))


class Sender:
    def __init__(
        self,
        client: httpx.AsyncClient,
        target: Target,
        hooks: RequestHooks,
        stamp: Stamp,
        wall_offset: float,
        ids: Iterator[int] | None = None,
        workload: WorkloadConfig | None = None,
    ) -> None:
        self.client = client
        self.target = target
        self.hooks = hooks  # what its requests tell (subscribed to by its owner: engine/core/wiring.py)
        self._stamp = stamp
        self._wall_offset = wall_offset
        self._ids = ids if ids is not None else itertools.count(1)  # request ids, shared by every sender of a session
        self._free: list[Slot] = []
        self.backing_off = 0
        self.in_flight: dict[int, RequestRecord] = {}
        self.cursor: dict[int, int] = {}  # rid -> chunks already harvested
        self.continuous_usage = True
        self.watch: ServerWatch | None = None  # the target's health watch (engine/core/targets.py)
        # request shaping every body carries (--extra-body, --no-ignore-eos; engine/workload/request_shape.py)
        self.extra_body: dict | None = None
        self.ignore_eos = True
        if workload is not None:
            self.shape(workload)

    def shape(self, wl: WorkloadConfig) -> None:
        """Every body from now on carries `wl`'s extra body and ignore_eos."""
        self.extra_body = json.loads(wl.extra_body) if wl.extra_body else None
        self.ignore_eos = wl.ignore_eos

    async def send(
        self,
        prompt: str,
        max_tokens: int,
        expected: int,
        phase: str | None = None,
        *,
        t_intended: float | None = None,
        turn: int = 0,
        messages: list[dict] | None = None,
    ) -> RequestRecord:
        """One request; `phase` overrides the step's (calibration). `t_intended`: its
        scheduled send time (open loop). A multi-turn request (`turn` >= 1) collects its
        answer text (`rec.answer`) and sends `messages` (chat) as the conversation so far."""
        step, c, step_phase = self._stamp(t_intended)
        rec = RequestRecord(
            rid=next(self._ids),
            phase=phase or step_phase,
            step=step,
            concurrency=c,
            t_send=time.perf_counter(),
            expected_input_tokens=expected,
            max_tokens=max_tokens,
            t_intended=t_intended,
            turn=turn,
            answer=[] if turn else None,
            target=self.target.url,
        )
        tgt = self.target
        body = build_body(tgt.api, tgt.model, prompt, max_tokens, continuous_usage=self.continuous_usage,
                          messages=messages, extra=self.extra_body, ignore_eos=self.ignore_eos)
        self.in_flight[rec.rid] = rec
        hooks = self.hooks
        hooks.sent.fire(rec)
        try:
            await run_request(self.client, tgt.url + PATHS[tgt.api], tgt.api, body, rec, hooks, self._wall_offset)
            watch = self.watch
            if watch is not None and rec.status == records.FAILED:
                await watch.judge(rec)  # connect / disconnect: server_gone if the server died
        finally:
            try:
                hooks.tokens.flush()  # its last tokens (and every other's so far) are in before its end
            finally:
                hooks.ended.fire(rec)
            self.in_flight.pop(rec.rid, None)
            self.cursor.pop(rec.rid, None)
        return rec

    async def preopen(self, n: int) -> int:
        """`n` connections to the target open and idle before `n` requests start (a closed loop's
        rise): no TTFT of theirs waits on a connect (engine/client/http.py preopen)."""
        return await preopen(self.client, self.target.url, n)

    async def slot_request(self, prompt: str, max_tokens: int, expected: int, *, turn: int = 0, messages: list[dict] | None = None) -> RequestRecord:
        """One request of the closed-loop pool, then this slot's pause when it failed (see
        above). (An open loop sends on its schedule whatever the answers: no slot pauses.)"""
        slot = self._free.pop() if self._free else Slot()
        try:
            rec = await self.send(prompt, max_tokens, expected, turn=turn, messages=messages)
            if rec.status == records.FAILED and rec.error_kind in OVERLOADED:
                slot.streak += 1
                self.hooks.overloaded.fire(rec.error_kind)
                await self._pause(backoff_s(slot.streak))
            elif rec.status == records.FAILED and rec.e2e is not None and rec.e2e < FAST_FAIL_S:
                await self._pause(FAST_FAIL_S - rec.e2e)
            elif rec.status == records.OK:
                slot.streak = 0
            return rec
        finally:
            self._free.append(slot)

    async def _pause(self, seconds: float) -> None:
        self.backing_off += 1
        try:
            await asyncio.sleep(seconds)
        finally:
            self.backing_off -= 1
