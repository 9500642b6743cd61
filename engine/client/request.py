"""One streamed request, timed where its bytes arrive.

One timestamp per socket read: every event completed by that read shares it (the bytes
arrived together). The lean transport stamps each read with the kernel's receive time
(plain http:// on Linux, engine/client/kstamp.py; else in its protocol's data_received, before any
parsing) and hands (stamp, bytes) to this module's per-read path (`_Stream.feed`)
from a loop callback (`_Body.pump`: no wake-up of the request's task per read), so a slow
parse of one stream never delays another stream's timestamp; other transports get
perf_counter() when the read reaches this loop. A read's tokens reach its `tokens` hook (engine/measure/hooks.py) in one call. TTFT ends at the first event with a token of any kind
(reasoning or answer), `t_first_answer` at the first answer token; chunk gaps are between
content events (RequestRecord.itls() spreads them per token on SGLang /generate, as
bench_serving does). Output tokens are credited as they arrive: the exact delta of the
server's cumulative count where a chunk carries one (SGLang meta_info, OpenAI continuous
usage), else a provisional 1 per content chunk that the final usage corrects.

Multi-turn sessions send the server's answers back: when `rec.answer` is a list before the
request, the answer text (not reasoning) is collected into it as it streams, one piece per
chunk for the OpenAI APIs; SGLang /generate's text is cumulative, so there the list holds
one element, the latest text. The answer is `"".join(rec.answer)`. With `rec.answer` None
(single-turn) the decoder never reads the text.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import sys
import time
from typing import Any, Callable

import httpx

from ..constants import ERROR_BODY_BYTES, ERROR_TEXT_CHARS
from ..measure import records
from ..measure.hooks import RequestHooks
from ..measure.records import RequestRecord
from ..text import one_line
from . import fast_path
from .api_formats import GENERATE, Event, MalformedEvent, make_decoder
from .sse import DONE, SSEDecoder, too_big
from .transport import BODY_EXTENSION, SENT_EXTENSION

# a request's hooks as the per-read path fires them (engine/measure/hooks.py RequestHooks):
# tokens(t, output_tokens) as tokens arrive (live throughput); lag(lag_s) with (receive wall
# time - server send time) when the server stamps chunks; first_token(rec) once, when
# rec.t_first (the first token of any kind) is set.
TokensCallback = Callable[[float, int], None]
LagCallback = Callable[[float], None]
FirstCallback = Callable[[RequestRecord], None]


def _fail(rec: RequestRecord, kind: str, text: str, client: httpx.AsyncClient | None = None) -> None:
    if rec.status != records.FAILED:  # keep the first cause
        rec.status = records.FAILED
        rec.error_kind = kind
        rec.error_text = scrub_key(one_line(text), client)[:ERROR_TEXT_CHARS]


# Statuses by which a server sheds load: given inside a 200 stream (SGLang's abort status_code,
# its error event's code), the request failed as `shed`, and its slot backs off (engine/load/sender.py)
SHED_STATUSES = (503, 429)


def refusal(ev: Event) -> tuple[str, int | None, str]:
    """(error kind, the server's status or None, one-line text) of an error event or an
    in-stream abort. An abort (finish_reason "abort") or an error with a status in
    SHED_STATUSES is `shed`: the server refused the request inside its 200 stream, as SGLang
    does when its queue is full (--max-queued-requests). Any other error event is
    `server_error`."""
    status, msg = ev.status, ev.error
    shed = status in SHED_STATUSES if status is not None else ev.abort
    if status is not None:
        text = f"in-stream {status}: {msg}" if msg else f"in-stream {status}"
    elif ev.abort:
        text = f"in-stream abort: {msg}" if msg else 'in-stream abort (finish_reason "abort")'
    else:
        text = msg or "error object in the stream"
    return (records.ERR_SHED if shed else records.ERR_SERVER), status, text


def scrub_key(text: str, client: httpx.AsyncClient | None) -> str:
    """The client's bearer token and secret --header values masked out of `text` (a server
    may echo them in an error).

    Error texts reach the screen and the in-memory log before any file writer scrubs them.
    """
    if client is None or not text:
        return text
    secrets = getattr(client.auth, "secrets", None)  # an httpx.Auth that holds them (per-origin auth)
    if not isinstance(secrets, tuple):
        auth = client.headers.get("authorization")
        if not auth:
            return text
        secrets = (auth[7:] if auth[:7].lower() == "bearer " else auth,)
    keys = [k.strip() for k in secrets if isinstance(k, str) and len(k.strip()) >= 4]
    if not keys:
        return text
    from ..session.scrub import Scrubber  # only on a failure that has a key to hide

    return Scrubber(keys).text(text)


def _chain(exc: BaseException) -> list[BaseException]:
    """exc and what caused it (__cause__, else __context__), outermost first."""
    out: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and len(out) < 10 and all(e is not x for x in out):
        out.append(e)
        e = e.__cause__ or e.__context__
    return out


def _msg(exc: BaseException) -> str:
    """An exception as a short text: its message, else its class name."""
    return one_line(str(exc)) or exc.__class__.__name__


# A server whose answer is no HTTP response, as each transport says so: lean (httptools),
# aiohttp, httpx (h11)
NOT_HTTP_SIGNS = ("malformed HTTP response", "Bad status line", "illegal status line")
NOT_HTTP = "does not speak HTTP (its answer is not an HTTP response)"


def classify_error(exc: BaseException, responded: bool) -> tuple[str, str]:
    """(error kind, one-line text) for an exception raised while sending or streaming.

    Transport-neutral: it reads the exception's whole cause chain, because httpx-aiohttp maps
    every aiohttp connection error (refused, reset, closed) to httpx.ConnectTimeout.
    `responded`: an HTTP status had arrived. A connection that fails before any response
    (refused, DNS, TLS, closed or reset before the status line) is `connect`: that is what
    a gone server (or an SSH tunnel to one) looks like; after it, `disconnect`.
    """
    chain = _chain(exc)
    # The aiohttp transport wraps aiohttp's errors in httpx's, not always faithfully. Only
    # when aiohttp is loaded can its errors occur: no import here (180 ms of start-up).
    aio = sys.modules.get("aiohttp")
    wrapped = aio is not None and any(isinstance(e, aio.ClientError) for e in chain)
    # httpx.ConnectTimeout on top of an aiohttp error says nothing (the mapping's artefact).
    evidence = [e for e in chain if not (wrapped and isinstance(e, httpx.ConnectTimeout))]

    def find(*types: type) -> BaseException | None:
        return next((e for e in evidence if isinstance(e, types)), None)

    if (e := find(ssl.SSLCertVerificationError)) is not None:
        why = getattr(e, "verify_message", None) or getattr(e, "reason", None) or _msg(e)
        return records.ERR_CONNECT, f"TLS certificate verification failed ({why}); --insecure skips verification"
    if find(ConnectionRefusedError) is not None:
        return records.ERR_CONNECT, "connection refused"
    if (e := find(socket.gaierror)) is not None or (aio is not None and (e := find(aio.ClientConnectorDNSError)) is not None):
        return records.ERR_CONNECT, f"cannot resolve the host name ({getattr(e, 'strerror', None) or _msg(e)})"
    if (aio is not None and find(aio.ConnectionTimeoutError) is not None) or find(httpx.ConnectTimeout) is not None:
        return records.ERR_CONNECT, "connect timeout"
    if (e := find(httpx.TimeoutException, TimeoutError)) is not None:
        if responded:
            return records.ERR_TIMEOUT, f"no data for the request timeout ({e.__class__.__name__})"
        return records.ERR_TIMEOUT, f"no response within the request timeout ({e.__class__.__name__})"
    if (e := find(ssl.SSLError)) is not None:
        return (records.ERR_DISCONNECT if responded else records.ERR_CONNECT), f"TLS error: {getattr(e, 'reason', None) or _msg(e)}"
    if (aio is not None and (e := find(aio.ClientConnectorError)) is not None) or (e := find(httpx.ConnectError)) is not None:
        return records.ERR_CONNECT, f"cannot connect: {_msg(e)}"
    if not responded and any(sign in _msg(e) for e in evidence for sign in NOT_HTTP_SIGNS):
        return records.ERR_CONNECT, NOT_HTTP  # an SSH port, a database: its first bytes are no status line
    closed_types: tuple[type, ...] = (ConnectionError, httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError, httpx.NetworkError)
    if aio is not None:
        closed_types += (aio.ServerDisconnectedError, aio.ClientOSError, aio.ClientPayloadError)
    if (e := find(*closed_types)) is not None:
        if responded:
            return records.ERR_DISCONNECT, f"stream broke: {e.__class__.__name__} {_msg(e)}"
        return records.ERR_CONNECT, f"server closed the connection before responding ({e.__class__.__name__} {_msg(e)})"
    return records.ERR_OTHER, f"{exc.__class__.__name__}: {_msg(exc)}"


def _error_body_text(status: int, body: bytes) -> str:
    """HTTP status + the server's own message (OpenAI `error.message`, FastAPI `detail`)."""
    text = body.decode("utf-8", "replace").strip()
    try:
        obj = json.loads(text) if text[:1] in ("{", "[") else None
    except (ValueError, RecursionError):
        obj = None
    if isinstance(obj, dict):
        for k in ("error", "detail", "message"):
            v = obj.get(k)
            if isinstance(v, dict):
                v = v.get("message") or v.get("detail") or v.get("type") or None
            if isinstance(v, str) and v.strip():
                text = v
                break
    return f"HTTP {status}: {text}" if text else f"HTTP {status}"


class _Stream:
    """One response's per-read path: SSE split, decode, record, listeners.

    `feed(reads)` takes (stamp, bytes) pairs, one per socket read, straight from the lean
    transport's loop callback (engine/client/transport.py `_Body.pump`), or one at a time from any
    other transport's iterator. Every event a read completes shares the read's stamp; the
    tokens of a read go to `on_tokens` in one call (same time, their sum). Returns False to
    stop reading (an event past the size limit).
    """

    __slots__ = ("rec", "client", "decode", "sse", "fast", "on_tokens", "on_lag", "wall_offset", "on_first",
                 "answer", "cumulative", "done", "counted", "completion_tokens", "events", "first_bytes", "t")

    def __init__(self, rec: RequestRecord, decode: Callable[[bytes], Event], cumulative: bool, client: httpx.AsyncClient | None,
                 on_tokens: TokensCallback, on_lag: LagCallback | None, wall_offset: float, on_first: FirstCallback | None,
                 fast: Any = None) -> None:
        self.rec = rec
        self.client = client
        self.decode = decode
        self.sse = SSEDecoder()
        self.fast = fast                      # the C road's splitter (engine/client/fast_path.py), or None
        self.on_tokens = on_tokens
        self.on_lag = on_lag
        self.wall_offset = wall_offset
        self.on_first = on_first
        self.answer = rec.answer  # a list: collect the answer text (multi-turn), else None
        self.cumulative = cumulative  # /generate's text is the whole text so far
        self.done = False  # [DONE] seen
        self.counted = 0  # output tokens reported through on_tokens so far
        self.completion_tokens: int | None = None  # the server's exact total, its last report
        self.events = 0
        self.first_bytes = b""
        self.t = rec.t_send  # the stamp of the last read

    def feed(self, reads: list[tuple[float, bytes]]) -> bool:
        if self.fast is not None:
            return self._feed_fast(reads)
        rec = self.rec
        feed_sse = self.sse.feed
        times = rec.chunk_times
        for t, data in reads:
            self.t = t
            n0 = len(times)
            try:
                payloads = feed_sse(data)
            except MalformedEvent as exc:  # an event past the size limit: stop reading
                _fail(rec, records.ERR_MALFORMED, str(exc), self.client)
                return False
            if not self.events and len(self.first_bytes) < 80:
                self.first_bytes += data[: 80 - len(self.first_bytes)]
            self.events += len(payloads)
            new = self._events(payloads, t, 0)  # output tokens this read brought
            if len(times) - n0 > 1:  # one read, several of its chunks: they share its stamp
                _coalesced(rec, n0, len(times))
            if new:
                self.counted += new
                self.on_tokens(t, new)
        return True

    def _feed_fast(self, reads: list[tuple[float, bytes]]) -> bool:
        """feed() on the C road (engine/client/fast_path.py): one call per read splits its events
        and reads the chunks it can, appending their stamps and tokens; what it leaves (an
        error, an odd shape: in order, from the first such event on) takes the Python road."""
        rec = self.rec
        times, tokens = rec.chunk_times, rec.chunk_tokens
        fast = self.fast
        # once its first answer token is in, most reads say only their tokens (and usage, which
        # the splitter keeps: the next full answer or take_usage brings it): feed_tokens says
        # those with a bare int, no tuple to build and take apart
        feed = fast.feed if rec.t_first_answer is None else fast.feed_tokens
        for t, data in reads:
            self.t = t
            n0 = len(times)
            got = feed(data, t, self.counted, times, tokens)
            if got.__class__ is int:
                if len(times) - n0 > 1:
                    _coalesced(rec, n0, len(times))
                if got:
                    self.counted += got
                    self.on_tokens(t, got)
                continue
            new, events, flags, pt, ct, cached, lags, rest = got
            if flags & fast_path.TOO_BIG:  # as the Python road: this read's events are not taken
                del times[n0:], tokens[n0:]
                _fail(rec, records.ERR_MALFORMED, str(too_big()), self.client)
                return False
            if not self.events and len(self.first_bytes) < 80:
                self.first_bytes += data[: 80 - len(self.first_bytes)]
            self.events += events
            if flags:
                if flags & fast_path.DONE:
                    self.done = True
                if flags & fast_path.CONTENT and rec.t_first is None:
                    rec.t_first = t
                    if self.on_first is not None:
                        self.on_first(rec)
                if flags & fast_path.ANSWER and rec.t_first_answer is None:
                    rec.t_first_answer = t
            self._usage(pt, ct, cached)
            if lags is not None and self.on_lag is not None:
                for sim_t in lags:
                    self._lag(t, sim_t)
            if rest is not None:
                new = self._events(rest, t, new)
            if len(times) - n0 > 1:  # one read, several of its chunks: they share its stamp
                _coalesced(rec, n0, len(times))
            if new:
                self.counted += new
                self.on_tokens(t, new)
        return True

    def take_usage(self) -> None:
        """The usage the C road's brief reads kept (feed_tokens), onto the record (its last
        report, as every event's usage lands on the Python road), and their events counted:
        at the stream's end, before anything reads them."""
        if self.fast is None:
            return
        pt, ct, cached, events = self.fast.usage()
        self.events += events
        self._usage(pt, ct, cached)

    def _usage(self, pt: int, ct: int, cached: int) -> None:
        """A usage report from the C road (-1: not said) onto the record."""
        rec = self.rec
        if pt >= 0:
            rec.input_tokens = pt
            rec.usage_reported = True
        if cached >= 0:
            rec.cached_tokens = cached
        if ct >= 0:
            self.completion_tokens = ct

    def _lag(self, t: float, sim_t: float) -> None:
        lag = t + self.wall_offset - sim_t
        if self.on_lag is not None:  # (only a stream with a lag listener reads the sim's stamps)
            self.on_lag(lag)
        rec = self.rec
        if rec.max_lag_s is None or lag > rec.max_lag_s:
            rec.max_lag_s = lag

    def _events(self, payloads: list[bytes], t: float, new: int) -> int:
        """The events of one read stamped t, in order (the Python road); `new`: the output
        tokens the read brought before them. Returns the read's tokens with theirs."""
        rec = self.rec
        decode = self.decode
        for payload in payloads:
            if payload == DONE:
                self.done = True
                continue
            try:
                ev: Event = decode(payload)
            except MalformedEvent as exc:
                _fail(rec, records.ERR_MALFORMED, str(exc), self.client)
                continue
            if ev.error is not None or ev.abort:
                if rec.status != records.FAILED:
                    kind, status, text = refusal(ev)
                    if status is not None:
                        rec.http_status = status  # the server's status for it, given in the stream
                    _fail(rec, kind, text, self.client)
                if not ev.abort:
                    continue  # an error event carries no tokens; an abort may (counted below)
            if ev.sim_t is not None and self.on_lag is not None:
                self._lag(t, ev.sim_t)
            if ev.prompt_tokens is not None:
                rec.input_tokens = ev.prompt_tokens
                rec.usage_reported = True
            if ev.cached_tokens is not None:
                rec.cached_tokens = ev.cached_tokens
            ct = ev.completion_tokens
            if ct is not None:  # cumulative: credit exactly what is new
                self.completion_tokens = ct
                counted = self.counted + new
                n = ct - counted if ct > counted else 0
            else:
                n = ev.tokens
            if ev.content:
                if rec.t_first is None:
                    rec.t_first = t
                    if self.on_first is not None:
                        self.on_first(rec)
                if ev.answer and rec.t_first_answer is None:
                    rec.t_first_answer = t
                if self.answer is not None and ev.text:
                    if self.cumulative and self.answer:
                        self.answer[0] = ev.text  # /generate: the whole text so far
                    else:
                        self.answer.append(ev.text)
                rec.chunk_times.append(t)
                rec.chunk_tokens.append(n)
            new += n
        return new

    def close(self) -> None:
        """The body ended: an event not followed by a blank line still counts."""
        rec = self.rec
        if rec.status != records.FAILED or rec.error_kind != records.ERR_MALFORMED:
            try:
                for payload in (self.fast.close() if self.fast is not None else self.sse.close()):
                    self.done = self.done or payload == DONE
                    self.events += 1
            except MalformedEvent as exc:
                _fail(rec, records.ERR_MALFORMED, str(exc), self.client)


def _coalesced(rec: RequestRecord, i: int, j: int) -> None:
    """Content chunks i..j-1 came in one socket read: their ITLs are no measurement
    (RequestRecord.coalesced, engine/measure/records.py COALESCED)."""
    if rec.coalesced is None:
        rec.coalesced = []
    rec.coalesced.extend(range(i, j))


async def run_request(
    client: httpx.AsyncClient,
    url: str,
    api: str,
    body: dict,
    rec: RequestRecord,
    hooks: RequestHooks,
    wall_offset: float = 0.0,
) -> RequestRecord:
    """Send, stream, record. Never raises except CancelledError (then rec is CANCELLED).

    Fires `hooks` (engine/measure/hooks.py), each one's subscribers as they stand now:
    `tokens(t, n)`: n output tokens arrived at t (exact deltas where the server counts,
    provisional otherwise; the exact total is settled by the end); `first_token(rec)`: once,
    right when rec.t_first is set (first token of any kind); `lag(s)`: a chunk's receive wall
    time - the server's send stamp, computed only when someone listens.
    `wall_offset` = time.time() - time.perf_counter(), to compare with the server's stamps.
    """
    perf = time.perf_counter
    on_tokens: TokensCallback = hooks.tokens.sink
    on_lag: LagCallback | None = hooks.lag.fire if hooks.lag else None
    on_first: FirstCallback | None = hooks.first_token.fire if hooks.first_token else None
    decode = make_decoder(api) if rec.answer is None else make_decoder(api, text=True)
    stream = _Stream(rec, decode, api == GENERATE, client, on_tokens, on_lag, wall_offset, on_first,
                     fast_path.splitter(api, text=rec.answer is not None))
    rec.spread_itl = api == GENERATE
    rec.t_send = stream.t = perf()
    resp: httpx.Response | None = None
    try:
        async with client.stream("POST", url, json=body) as resp:
            rec.http_status = resp.status_code
            t_sent = resp.extensions.get(SENT_EXTENSION)
            if t_sent is not None:
                rec.send_wait = t_sent - rec.t_send
            if resp.status_code != 200:
                text = b""
                async for part in resp.aiter_raw():
                    text += part
                    if len(text) >= ERROR_BODY_BYTES:
                        break
                rec.t_end = perf()
                _fail(rec, records.http_error_kind(resp.status_code), _error_body_text(resp.status_code, text[:ERROR_BODY_BYTES]), client)
                return rec
            lean = resp.extensions.get(BODY_EXTENSION)
            if lean is not None:  # the lean transport: reads straight from its loop callback
                ended = await lean.pump(stream.feed)
            else:
                ended = True
                async for data in resp.aiter_raw():
                    t = getattr(data, "t", None)  # a Stamped read (the lean transport's iterator)
                    if not stream.feed([(perf() if t is None else t, data)]):
                        ended = False
                        break
            if ended:
                stream.close()
            rec.t_end = stream.t
    except asyncio.CancelledError:
        rec.t_end = perf()
        rec.status = records.CANCELLED
        stream.take_usage()
        _settle_tokens(rec, stream.completion_tokens, stream.counted, on_tokens)
        raise
    except Exception as exc:  # noqa: BLE001 - run_request never raises: every failure is counted
        rec.t_end = perf()
        kind, why = classify_error(exc, responded=rec.http_status != 0)
        _fail(rec, kind, why, client)
    else:
        if not stream.done and rec.status == records.OK:
            if stream.events == 0 and stream.first_bytes:
                _fail(rec, records.ERR_MALFORMED, f"response is not an SSE stream: {stream.first_bytes!r}", client)
            else:
                _fail(rec, records.ERR_DISCONNECT, "stream ended before [DONE]", client)
    finally:
        if resp is not None:
            _unbind(resp)
    stream.take_usage()
    _settle_tokens(rec, stream.completion_tokens, stream.counted, on_tokens)
    if rec.status == records.OK and rec.max_tokens > 0 and rec.output_tokens == 0:
        _fail(rec, records.ERR_EMPTY, f"the stream ended without an output token ({rec.max_tokens} asked for)", client)
    return rec


_UNBOUND = httpx.ByteStream(b"")


def _unbind(resp: httpx.Response) -> None:
    """Break the reference cycle httpx leaves behind a closed response: its client binds the
    response's stream to the response (BoundAsyncStream <-> Response), so the response, its
    request, headers and URL (14 objects a request) outlive it until a full garbage collection.
    At C=1024 two load workers piled up 24,000 of them in 10 s, and each collection held a
    worker's loop 45-90 ms (benchmarks/scale_gap.py): the send stamps of TTFT carry that."""
    resp.stream = _UNBOUND


def _settle_tokens(rec: RequestRecord, completion_tokens: int | None, counted: int, on_tokens: TokensCallback) -> None:
    """Exact output tokens from usage when given; live counters get the difference."""
    if completion_tokens is not None:
        rec.output_tokens = completion_tokens
        rec.usage_reported = True
        if completion_tokens > counted and rec.t_end is not None:
            on_tokens(rec.t_end, completion_tokens - counted)
    else:
        rec.output_tokens = counted
