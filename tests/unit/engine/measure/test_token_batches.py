"""Tokens counted in batches (engine/measure/hooks.py TokensHook.add_batched, issue 47): the
engine's listeners take a request's reads in batches, flushed by its harvest, its snapshots and
each request's end, and every figure is the one the reads gave one by one.

- a step's tokens and its per-second tok/s, the live window's rate and totals, a target's: the
  same over reads that straddle the step's start, its seconds and its close, in batches of any
  size (each read keeps its own time);
- the hook hands batches in order, and per-read subscribers still hear each read at once;
- a request that fails mid-stream (a real socket, the Sender): its tokens are in before its
  end takes them back out, so the live output tok/s reads 0 and the failed count holds them
  all (flushed after the end, the live window's floor at zero had kept them as throughput).
"""

from __future__ import annotations

import asyncio
import json
import random

from redline.engine.client.api_formats import CHAT
from redline.engine.client.http import make_client
from redline.engine.client.target import Target
from redline.engine.core.event_log import EventLog
from redline.engine.core.measurements import Measurements
from redline.engine.core.target_stats import TargetStats
from redline.engine.core.wiring import load_hooks
from redline.engine.load.sender import Sender
from redline.engine.measure import records
from redline.engine.measure.hooks import RequestHooks, TokensHook
from redline.engine.measure.live_metrics import LiveMetrics
from redline.engine.measure.records import Clock
from redline.engine.measure.step_book import StepBook
from redline.engine.rules.verdicts import STEP_JUDGE

from helpers import ThreadServer

T0 = 1000.0  # the step opens here; reads run from 0.5 s before to 0.5 s after its close at T0 + 2.4


def _reads(seed: int) -> list[tuple[float, int]]:
    rng = random.Random(seed)
    t, out = T0 - 0.5, []
    while t < T0 + 2.9:
        t += rng.uniform(0.0, 0.004)
        out.append((t, rng.choice((1, 1, 1, 2, 5))))
    return out


def _engine_side() -> tuple[Measurements, StepBook, LiveMetrics, TargetStats]:
    clock = Clock.now()
    book = StepBook(clock, judge=STEP_JUDGE)
    metrics = LiveMetrics()
    return Measurements(metrics, book, EventLog(), clock), book, metrics, TargetStats("http://127.0.0.1:1")


def test_a_step_and_the_live_window_count_batches_as_they_counted_each_read():
    for seed in range(5):
        reads = _reads(seed)
        one, batched = _engine_side(), _engine_side()
        steps = []
        hook = RequestHooks().subscribe(batched[3]).subscribe(batched[0]).tokens
        assert hook.batched and not hook.subscribers  # both listeners take batches
        put = hook.sink
        rng = random.Random(seed)
        for side in (one, batched):
            steps.append(side[1].open_step(8, "ramp", T0))
        closed = False
        for t, n in reads:
            if not closed and t > T0 + 2.4:
                hook.flush()  # the step's close flushes first (engine/core/live_steps.py harvest_all)
                for side in (one, batched):
                    side[1].close_step(side[1].open[0], T0 + 2.4)
                closed = True
            one[0].on_tokens(t, n)
            one[3].on_tokens(t, n)
            put(t, n)
            if rng.random() < 0.08:  # a harvest or a request's end: batches of 1 to ~40 reads
                hook.flush()
        hook.flush()
        a, b = steps
        assert a.out_tokens == b.out_tokens > 0
        assert a.per_second == b.per_second and len(a.per_second) == 3  # 2.4 s: three seconds begun
        assert a.out_tokens == sum(n for t, n in reads if T0 <= t <= T0 + 2.4)
        for now in (T0 + 1.0, T0 + 2.9):
            assert one[2].rates(now)[0] == batched[2].rates(now)[0]
            assert one[3].out_tokens.rate(now) == batched[3].out_tokens.rate(now)
        assert one[2].output_tokens_total == batched[2].output_tokens_total == sum(n for _, n in reads)
        assert one[3].out_tokens_total == batched[3].out_tokens_total
        assert one[0].tokens_received == batched[0].tokens_received
        assert one[0].last_token_t == batched[0].last_token_t == reads[-1][0]


def test_the_hook_hands_batches_in_order_and_tells_per_read_subscribers_at_once():
    heard: list[tuple[float, int]] = []
    batches: list[list[tuple[float, int]]] = []
    hook = TokensHook(lambda t, n: heard.append((t, n)))
    hook.add_batched(lambda ts, ns: batches.append(list(zip(ts, ns, strict=True))))
    assert hook.sink == hook.fire  # a per-read subscriber: every read goes through fire
    hook.sink(1.0, 2)
    hook.sink(1.5, 1)
    assert heard == [(1.0, 2), (1.5, 1)] and batches == []
    hook.flush()
    hook.flush()  # nothing new: no call
    hook.fire(2.0, 3)
    hook.flush()
    assert batches == [[(1.0, 2), (1.5, 1)], [(2.0, 3)]]
    only = TokensHook()
    only.add_batched(lambda ts, ns: batches.append(list(zip(ts, ns, strict=True))))
    put = only.sink
    assert put != only.fire  # batched alone: the two appends
    put(3.0, 4)
    only.flush()
    assert batches[-1] == [(3.0, 4)]


def _breaks_after(tokens: int):
    """An OpenAI chat stream that sends `tokens` one-token chunks, then closes mid-stream."""

    def handler(sock, head, body, index):
        sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        for k in range(tokens):
            obj = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
                   "choices": [{"index": 0, "delta": {"content": f"t{k}"}, "finish_reason": None}]}
            data = b"data: " + json.dumps(obj).encode() + b"\n\n"
            sock.sendall(b"%x\r\n%s\r\n" % (len(data), data))
        return False  # closed with no [DONE] and no last chunk: the server went away

    return handler


def test_a_request_that_fails_mid_stream_takes_every_token_it_got_back_out():
    measurements, book, metrics, stats = _engine_side()
    hooks = load_hooks(stats, measurements, lambda lag: None, lambda kind: None)
    assert measurements.token_hooks == [hooks.tokens]

    async def go():
        with ThreadServer(_breaks_after(12)) as srv:
            async with make_client(transport="lean", origin=srv.url) as client:
                sender = Sender(client, Target(srv.url, CHAT, "m"), hooks, lambda t: (0, 8, "live"), 0.0)
                measurements.load_sender = sender
                return await sender.send("hi", 16, 1)

    rec = asyncio.run(go())
    assert rec.status == records.FAILED and rec.output_tokens == 12
    now = rec.t_end
    assert metrics.rates(now)[0] == 0.0  # none of its tokens is output tok/s
    assert metrics.failed_output_tokens_total == 12 and metrics.output_tokens_total == 0
    assert hooks.tokens._ts.tolist() == []  # nothing left held
