"""What one request leaves behind (engine/client/request.py): a finished request's response is
freed by its reference count, not left to the cyclic garbage collector. httpx binds a
response's stream to the response (a cycle); left alone, two load workers at C=1024 piled up
24,000 such objects every ten seconds, and each full collection held a worker's loop 45-90 ms.
"""

from __future__ import annotations

import gc

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
