"""What one request leaves behind (engine/client/request.py): a finished request's response is
freed by its reference count, not left to the cyclic garbage collector. httpx binds a
response's stream to the response (a cycle); left alone, two load workers at C=1024 piled up
24,000 such objects every ten seconds, and each full collection held a worker's loop 45-90 ms.
"""

from __future__ import annotations

import asyncio
import gc
import time

import httpx
import pytest

from redline.engine.client.api_formats import CHAT, PATHS
from redline.engine.client.http import make_client
from redline.engine.client.request import run_request
from redline.engine.measure import records
from redline.engine.measure.hooks import RequestHooks

from helpers import ThreadServer
from unit.engine.client.test_token_path import END, SSE_HEAD, event, frame, new_rec

N = 5


def _answer(c, head, body, i):
    if i == N - 1:  # the last one an error status: that road returns early
        c.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy")
        return True
    c.sendall(SSE_HEAD + frame(event(0, usage=1)) + frame(event(1, usage=2)) + frame(b"data: [DONE]\n\n") + END)
    return True


def _responses() -> int:
    return sum(1 for o in gc.get_objects() if isinstance(o, httpx.Response))


@pytest.mark.parametrize("transport", ["lean", "httpx"])
async def test_a_finished_requests_response_is_freed_without_the_garbage_collector(transport):
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()  # only reference counts free anything now
    try:
        before = _responses()
        with ThreadServer(_answer) as srv:
            client = make_client(transport=transport)
            try:
                recs = [new_rec() for _ in range(N)]
                for rec in recs:
                    await run_request(client, srv.url + PATHS[CHAT], CHAT, {}, rec, RequestHooks())
            finally:
                await client.aclose()
        assert [r.status for r in recs] == [records.OK] * (N - 1) + [records.FAILED]
        assert recs[-1].error_kind == records.http_error_kind(503)
        assert recs[0].output_tokens == 2
        assert _responses() == before
    finally:
        if enabled:
            gc.enable()


# -- the send wait: what a request's TTFT holds of the client ------------------------------------
SERVER_WAIT_S = 0.05  # the server's own time to the first token
BLOCK_S = 0.08  # the client's loop held between a request's send stamp and its write


def _late_answer(got: list[float]):
    def answer(c, head, body, i):
        got.append(time.perf_counter())  # its whole request is here (same clock: same process)
        time.sleep(SERVER_WAIT_S)
        c.sendall(SSE_HEAD + frame(event(0, usage=1)) + frame(event(1, usage=2)) + frame(b"data: [DONE]\n\n") + END)
        return True
    return answer


async def test_a_requests_send_wait_is_its_stamp_to_its_write_and_holds_the_clients_own_delay():
    """Ground truth from both ends of one socket, on one clock. A loop held 80 ms while the
    request's connection opens (its stamp taken, its bytes not yet written) is the client's
    wait: send_wait holds it, and TTFT less it is the server's time (50 ms and the wire). On
    the reused connection nothing holds the write."""
    got: list[float] = []
    with ThreadServer(_late_answer(got)) as srv:
        client = make_client(transport="lean")
        try:
            first, second = new_rec(), new_rec()
            first.t_send = second.t_send = time.perf_counter()  # run_request stamps its own
            asyncio.get_running_loop().call_soon(time.sleep, BLOCK_S)  # runs at the connect's first wait
            await run_request(client, srv.url + PATHS[CHAT], CHAT, {}, first, RequestHooks())
            await run_request(client, srv.url + PATHS[CHAT], CHAT, {}, second, RequestHooks())
        finally:
            await client.aclose()
    assert srv.connections == 1 and [r.status for r in (first, second)] == [records.OK] * 2
    assert got[0] >= first.t_send + BLOCK_S  # the held loop held its bytes: the server had them only after
    assert first.send_wait is not None and first.send_wait >= BLOCK_S
    for rec, t_got in zip((first, second), got, strict=True):
        assert rec.send_wait is not None
        # what is left of its TTFT is the server's own: from its having the request to the
        # first token's arrival (the kernel's stamp), within the write call's own time
        assert rec.ttft - rec.send_wait == pytest.approx(rec.t_first - t_got, abs=0.02)
        assert rec.t_first - t_got >= SERVER_WAIT_S
    assert second.send_wait < BLOCK_S  # nothing held the write on the reused connection


async def test_a_transport_that_does_not_say_when_it_wrote_leaves_the_send_wait_unknown():
    got: list[float] = []
    with ThreadServer(_late_answer(got)) as srv:
        client = make_client(transport="httpx")
        try:
            rec = new_rec()
            await run_request(client, srv.url + PATHS[CHAT], CHAT, {}, rec, RequestHooks())
        finally:
            await client.aclose()
    assert rec.status == records.OK and rec.ttft is not None and rec.send_wait is None
