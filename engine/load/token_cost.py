"""What one streamed token costs this machine's load process: measured at start, in ~30 ms.

`--workers auto` (engine/load/worker_count.py) sizes the load by it. The measure runs the
engine's own read path on loopback TCP, in a fresh event loop of the engine's kind (uvloop):
STREAMS connections to a listener of its own on 127.0.0.1, each answering one streamed
response; ROUNDS times, a chunk (a vLLM chat chunk with continuous usage, ~300 bytes) is
written to every stream at once, as a lockstep server writes a decode step, and the loop reads
them all: the socket read and its kernel stamp (engine/client/kstamp.py), the HTTP parse and
the per-read delivery (engine/client/transport.py), the SSE split, chunk read and record
(engine/client/request.py, on the C road where it is built). Its CPU (this thread's, the
writes' own taken out) per chunk is the read path's cost; the rest of a token's cost in a
running engine (listeners, the ITL harvest, each request's send and end) is READ_PATH_SHARE of
the whole, measured by benchmarks/client_cost.py (it prints both).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import socket
import time
from dataclasses import dataclass
from typing import Callable

from ..constants import READ_PATH_SHARE
from ..loop import new_event_loop, wait_within

STREAMS = 64
ROUNDS = 10
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def _same(conn: asyncio.BaseProtocol) -> asyncio.BaseProtocol:
    """The protocol factory of one connection: that connection."""
    return conn


def _chunk(k: int) -> bytes:
    data = (b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1796413085,"model":"m",'
            b'"choices":[{"index":0,"delta":{"content":" of"},"logprobs":null,"finish_reason":null}],'
            b'"usage":{"prompt_tokens":31,"total_tokens":%d,"completion_tokens":%d}}\n\n' % (31 + k, k))
    return b"%x\r\n%s\r\n" % (len(data), data)


@dataclass(frozen=True)
class TokenCost:
    read_s: float  # CPU seconds per chunk of the read path, measured
    token_s: float  # ... of a whole token in a running engine (read_s / READ_PATH_SHARE)
    chunks: int  # how many the measure wrote ...
    read: int  # ... and how many of them reached a record (all: else the measure is short)


def measure(streams: int = STREAMS, rounds: int = ROUNDS) -> TokenCost:
    """Run the measure in a fresh event loop: in this thread, or, called from inside a
    running loop (a sweep's configuration starts its engine from the sweep's loop), in a
    thread of its own, waited for (30-100 ms, once at start)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _in_fresh_loop(streams, rounds)
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="redline-token-cost") as pool:
        return pool.submit(_in_fresh_loop, streams, rounds).result()


def _in_fresh_loop(streams: int, rounds: int) -> TokenCost:
    loop = new_event_loop()
    try:
        return loop.run_until_complete(_measure(streams, rounds))
    finally:
        loop.close()


async def _measure(streams: int, rounds: int) -> TokenCost:
    from ..client import fast_path, kstamp
    from ..client.api_formats import CHAT, make_decoder
    from ..client.request import _Stream
    from ..client.transport import LeanTransport, _Conn
    from ..measure.records import RequestRecord

    loop = asyncio.get_running_loop()
    owner = LeanTransport()
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    servers: list[socket.socket] = []
    conns: list[_Conn] = []
    recs: list[RequestRecord] = []
    got = [0]
    wanted = [0]
    done: list[asyncio.Future] = []

    try:
        listener.bind(("127.0.0.1", 0))
        listener.listen(streams)
        port = listener.getsockname()[1]
        for _ in range(streams):
            conn = _Conn(owner, ("http", "127.0.0.1", port), loop)
            if kstamp.ENABLED:
                await kstamp.open_connection(loop, "127.0.0.1", port, conn)
            else:
                await loop.create_connection(functools.partial(_same, conn), "127.0.0.1", port)
            s, _ = listener.accept()
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            servers.append(s)
            conn.active = True
            rec = RequestRecord(rid=len(conns), phase="live", step=0, concurrency=streams, t_send=0.0)
            recs.append(rec)
            stream = _Stream(rec, make_decoder(CHAT), False, None, lambda t, n: None, None, 0.0, None,
                             fast_path.splitter(CHAT, text=False))

            def on_reads(reads: list[tuple[float, bytes]], feed: Callable[[list[tuple[float, bytes]]], bool] = stream.feed) -> bool:
                ok = feed(reads)
                got[0] += len(reads)
                if got[0] >= wanted[0] and done and not done[-1].done():
                    done[-1].set_result(None)
                return ok

            conn.sink = on_reads
            conns.append(conn)
        for s in servers:
            s.sendall(HEAD)
        await _round(servers, b"", got, wanted, done, loop, warm=True)  # the heads: not measured
        cpu = 0.0
        for k in range(1, rounds + 1):
            cpu += await _round(servers, _chunk(k), got, wanted, done, loop)
        n = streams * rounds
        read_s = max(cpu, 0.0) / n
        return TokenCost(read_s, read_s / READ_PATH_SHARE, n, sum(len(r.chunk_times) for r in recs))
    finally:
        for c in conns:
            c._close()
        for s in servers:
            s.close()
        listener.close()
        await asyncio.sleep(0)  # the transports' connection_lost


async def _round(servers: list[socket.socket], data: bytes, got: list[int], wanted: list[int],
                 done: list[asyncio.Future], loop: asyncio.AbstractEventLoop, warm: bool = False) -> float:
    """Write `data` to every stream, then let the loop read them all: this thread's CPU for the
    reads (the writes' own taken out). Bounded: a read that never comes ends it after 2 s."""
    fut = loop.create_future()
    done.append(fut)
    got[0] = 0
    wanted[0] = len(servers) if data else 0
    for s in servers:
        if data:
            s.sendall(data)
    c1 = time.thread_time()
    if wanted[0]:
        try:
            await wait_within(asyncio.shield(fut), 2.0)
        except asyncio.TimeoutError:
            pass
    else:
        await asyncio.sleep(0.01)
    c2 = time.thread_time()
    return 0.0 if warm else c2 - c1
