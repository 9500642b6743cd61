"""One streamed request, timed where its bytes arrive.

One timestamp per socket read: every event completed by that read shares it (the bytes
arrived together). TTFT ends at the first event with content; ITL gaps are between content
events; output tokens come from the server's usage / meta_info when it reports them.
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable

import httpx

from . import records as R
from .apis import Event, MalformedEvent, make_decoder
from .constants import ERROR_BODY_BYTES, ERROR_TEXT_CHARS
from .records import RequestRecord
from .sse import DONE, SSEDecoder

# on_tokens(t, output_tokens) is called as tokens arrive (live throughput);
# on_lag(lag_s) with (receive wall time - server send time) when the server stamps chunks.
TokensCallback = Callable[[float, int], None]
LagCallback = Callable[[float], None]


def _fail(rec: RequestRecord, kind: str, text: str) -> None:
    if rec.status != R.FAILED:  # keep the first cause
        rec.status = R.FAILED
        rec.error_kind = kind
        rec.error_text = text[:ERROR_TEXT_CHARS]


async def run_request(
    client: httpx.AsyncClient,
    url: str,
    api: str,
    body: dict,
    rec: RequestRecord,
    on_tokens: TokensCallback,
    on_lag: LagCallback | None = None,
    wall_offset: float = 0.0,
) -> RequestRecord:
    """Send, stream, record. Never raises except CancelledError (then rec is CANCELLED).

    `wall_offset` = time.time() - time.perf_counter(), to compare with the server's stamps.
    """
    perf = time.perf_counter
    decode = make_decoder(api)
    sse = SSEDecoder()
    done = False
    counted = 0  # provisional output tokens reported through on_tokens
    ts = rec.chunk_times
    toks = rec.chunk_tokens
    completion_tokens: int | None = None
    rec.t_send = perf()
    try:
        async with client.stream("POST", url, json=body) as resp:
            rec.http_status = resp.status_code
            if resp.status_code != 200:
                text = b""
                async for part in resp.aiter_raw():
                    text += part
                    if len(text) >= ERROR_BODY_BYTES:
                        break
                rec.t_end = perf()
                _fail(rec, R.http_error_kind(resp.status_code), f"HTTP {resp.status_code}: {text.decode('utf-8', 'replace').strip()}")
                return rec
            t = rec.t_send
            async for data in resp.aiter_raw():
                t = perf()
                for payload in sse.feed(data):
                    if payload == DONE:
                        done = True
                        continue
                    try:
                        ev: Event = decode(payload)
                    except MalformedEvent as exc:
                        _fail(rec, R.ERR_MALFORMED, str(exc))
                        continue
                    if ev.error is not None:
                        _fail(rec, R.ERR_SERVER, ev.error)
                        continue
                    if ev.sim_t is not None and on_lag is not None:
                        lag = t + wall_offset - ev.sim_t
                        on_lag(lag)
                        if rec.max_lag_s is None or lag > rec.max_lag_s:
                            rec.max_lag_s = lag
                    if ev.prompt_tokens is not None:
                        rec.input_tokens = ev.prompt_tokens
                        rec.usage_reported = True
                    if ev.completion_tokens is not None:
                        completion_tokens = ev.completion_tokens
                    if ev.content:
                        if rec.t_first is None:
                            rec.t_first = t
                        ts.append(t)
                        toks.append(ev.tokens)
                        if ev.tokens:
                            counted += ev.tokens
                            on_tokens(t, ev.tokens)
            for payload in sse.close():
                done = done or payload == DONE
            rec.t_end = t
    except asyncio.CancelledError:
        rec.t_end = perf()
        rec.status = R.CANCELLED
        _settle_tokens(rec, completion_tokens, counted, on_tokens)
        raise
    except httpx.TimeoutException as exc:
        rec.t_end = perf()
        if isinstance(exc, httpx.ConnectTimeout) and rec.t_first is None:
            _fail(rec, R.ERR_CONNECT, f"connect timeout: {exc}")
        else:
            _fail(rec, R.ERR_TIMEOUT, f"no data for the request timeout ({exc.__class__.__name__})")
    except httpx.ConnectError as exc:
        rec.t_end = perf()
        _fail(rec, R.ERR_CONNECT, f"connect: {exc}")
    except (httpx.ReadError, httpx.RemoteProtocolError, httpx.WriteError) as exc:
        rec.t_end = perf()
        _fail(rec, R.ERR_DISCONNECT, f"stream broke: {exc.__class__.__name__} {exc}")
    except httpx.HTTPError as exc:
        rec.t_end = perf()
        _fail(rec, R.ERR_OTHER, f"{exc.__class__.__name__}: {exc}")
    else:
        if not done and rec.status == R.OK:
            _fail(rec, R.ERR_DISCONNECT, "stream ended before [DONE]")
    _settle_tokens(rec, completion_tokens, counted, on_tokens)
    return rec


def _settle_tokens(rec: RequestRecord, completion_tokens: int | None, counted: int, on_tokens: TokensCallback) -> None:
    """Exact output tokens from usage when given; live counters get the difference."""
    if completion_tokens is not None:
        rec.output_tokens = completion_tokens
        rec.usage_reported = True
        if completion_tokens > counted and rec.t_end is not None:
            on_tokens(rec.t_end, completion_tokens - counted)
    else:
        rec.output_tokens = counted
