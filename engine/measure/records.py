"""Per-request records: what one request did, measured where its bytes arrived.

Times are `time.perf_counter()` seconds (CLOCK_MONOTONIC on Linux, shared by every
process on the host). `Clock` converts them to wall-clock epoch seconds for files.
"""

from __future__ import annotations

import time
from array import array
from bisect import bisect_left
from dataclasses import dataclass, field
from operator import sub
from typing import NamedTuple, Sequence

from .log_bins import quantile

# Outcome of a request (RequestRecord.status).
OK = "ok"
FAILED = "failed"
CANCELLED = "cancelled"  # aborted by the operator, a step change or redline exiting

# Error kinds (RequestRecord.error_kind). One place for every kind the engine reports.
ERR_HTTP_429 = "http_429"
ERR_HTTP_4XX = "http_4xx"
ERR_HTTP_500 = "http_500"
ERR_HTTP_503 = "http_503"
ERR_HTTP_5XX = "http_5xx"
ERR_CONNECT = "connect"  # connection refused / DNS / TLS before any byte
ERR_DISCONNECT = "disconnect"  # the stream ended before its end marker
ERR_MALFORMED = "malformed"  # an SSE event that is not the JSON the API promises
ERR_TIMEOUT = "timeout"  # --request-timeout passed (a stalled stream)
ERR_SERVER = "server_error"  # an error object inside a 200 stream
# the server refused it inside a 200 stream: SGLang's in-stream abort (`finish_reason` "abort",
# /generate's meta_info.finish_reason.type "abort", an error event with status 503 or 429),
# as SGLang sheds load (--max-queued-requests); the sender backs off as for an HTTP 503
ERR_SHED = "shed"
ERR_EMPTY = "empty"  # the stream ended ok with 0 output tokens when tokens were asked for
# it failed because the server died: refused or broken while the server was gone, or while
# its health check was deciding that it was (engine/client/server_watch.py); not an error of
# the step that sent it
ERR_SERVER_GONE = "server_gone"
ERR_OTHER = "other"

ERROR_KINDS = (
    ERR_HTTP_429,
    ERR_HTTP_4XX,
    ERR_HTTP_500,
    ERR_HTTP_503,
    ERR_HTTP_5XX,
    ERR_CONNECT,
    ERR_DISCONNECT,
    ERR_MALFORMED,
    ERR_TIMEOUT,
    ERR_SERVER,
    ERR_SHED,
    ERR_EMPTY,
    ERR_SERVER_GONE,
    ERR_OTHER,
)


def http_error_kind(status: int) -> str:
    """Map an HTTP status to an error kind."""
    if status == 429:
        return ERR_HTTP_429
    if status == 500:
        return ERR_HTTP_500
    if status == 503:
        return ERR_HTTP_503
    if 500 <= status < 600:
        return ERR_HTTP_5XX
    return ERR_HTTP_4XX


class _Coalesced(tuple):
    """The inter-token latencies of a chunk read coalesced: none (see COALESCED)."""

    __slots__ = ()


# The ITLs entry (`gaps_from`) of a content chunk that arrived in one socket read with others
# of its stream: they share the read's stamp (the kernel's is the newest packet's), so the
# gaps they close read ~0 and ~k intervals where the server wrote k of one. They are no
# measurement of the server: empty (no ITL, no chunk gap), told apart by identity
# (`vs is COALESCED`) from a chunk that brought no token, and counted in the step's
# `coalesced_chunks` share (docs/numbers.md, "Coalesced reads").
COALESCED: tuple[float, ...] = _Coalesced()


def chunk_gaps(ts: array[float], start: int, coalesced: list[int] | None) -> tuple[array[float], array[float], list[float]]:
    """RequestRecord.gaps_from of an OpenAI stream (one ITL a chunk: its chunk gap) from chunk
    `start` (>= 1) on, as arrays: the measured chunks' arrivals and their gaps, and the arrivals
    of the chunks read coalesced, cut out (the chunk after one is measured from its stamp)."""
    n = len(ts)
    seg = ts[start:n]
    gaps = array("d", map(sub, seg, ts[start - 1 : n - 1]))
    if not coalesced or coalesced[-1] < start:
        return seg, gaps, []
    merged = [i - start for i in coalesced[bisect_left(coalesced, start):] if i < n]
    merged_t = [seg[j] for j in merged]
    for j in reversed(merged):
        del seg[j]
        del gaps[j]
    return seg, gaps, merged_t


class RequestFigures(NamedTuple):
    """One request's chunk figures: content chunks, ITL mean (first to last chunk over the
    gaps), the largest chunk gap, the p99 of its inter-token latencies (None below 2 chunks)."""

    chunks: int
    itl_mean: float | None
    itl_max: float | None
    itl_p99: float | None


@dataclass(frozen=True)
class Clock:
    """Anchors perf_counter() to the wall clock once, so files carry epoch seconds."""

    wall0: float
    perf0: float

    @classmethod
    def now(cls) -> "Clock":
        return cls(wall0=time.time(), perf0=time.perf_counter())

    def wall(self, perf_t: float) -> float:
        return self.wall0 + (perf_t - self.perf0)

    def perf(self, wall_t: float) -> float:
        return self.perf0 + (wall_t - self.wall0)


@dataclass(slots=True)
class RequestRecord:
    """One request, from send to its end in any way.

    `chunk_times`/`chunk_tokens` hold one entry per content chunk (a chunk with reasoning or
    answer text; a socket read may carry several chunks: they share that read's timestamp,
    taken where the bytes arrived). `chunk_tokens` is how many output tokens the chunk
    carried: the server's exact count where it says (SGLang meta_info, OpenAI continuous
    usage), else a provisional 1. They live only until the record is summarised and
    spooled, so memory does not grow with session length.
    """

    rid: int
    phase: str  # "calibration" | "warmup" | "measure" | "live" | "probe"
    step: int  # index of the step (period at one concurrency) it was sent in
    concurrency: int  # the concurrency asked for when it was sent (an open loop: its in-flight cap)
    t_send: float
    expected_input_tokens: int = 0
    max_tokens: int = 0
    t_first: float | None = None  # first chunk with a token of any kind (reasoning or answer)
    t_end: float | None = None
    input_tokens: int = 0
    output_tokens: int = 0  # reasoning tokens included
    usage_reported: bool = False  # token counts came from the server's usage / meta_info
    # prompt tokens the server found in its prefix cache (usage.prompt_tokens_details /
    # meta_info.cached_tokens, its last report); None: the server did not say
    cached_tokens: int | None = None
    status: str = OK
    http_status: int = 0
    error_kind: str = ""
    error_text: str = ""
    chunk_times: array = field(default_factory=lambda: array("d"))
    chunk_tokens: array = field(default_factory=lambda: array("l"))
    max_lag_s: float | None = None  # worst (receive time - server's sim_t), sim only
    t_first_answer: float | None = None  # first chunk with answer content (not reasoning)
    spread_itl: bool = False  # ITL spreads a k-token chunk's gap over its k tokens (SGLang /generate)
    # open-loop rate mode: when the schedule meant it to be sent (latencies count from here,
    # so a send delayed by the in-flight cap or a late client is not hidden); None = t_send
    t_intended: float | None = None
    turn: int = 0  # multi-turn: the turn's index in its session, from 1 (0 = single-turn)
    answer: list[str] | None = None  # answer text pieces, collected only when a list is set (multi-turn)
    target: str = ""  # the base URL it was sent to (many targets: engine/core/target_stats.py)
    worker: int = 0  # the worker process that sent it (--workers N: engine/load/worker_pool.py)
    # a request a worker sent: its figures, measured there (`figures()`); its chunk
    # timestamps stay in the worker
    remote: RequestFigures | None = None
    # ... a failed one: when its output tokens arrived, as its worker counted them (`credits()`)
    remote_credits: list[tuple[float, int]] | None = None
    # it ended after its step had closed (engine/measure/own_requests.py WindowCut): what its step counts
    # of it, its age at the close (its E2E there, a lower bound) and its TPOT inside the window
    step_e2e: float | None = None
    step_tpot: float | None = None
    # the indices (ascending) of its content chunks that shared one socket read with another of
    # its content chunks (engine/client/request.py): their ITLs are COALESCED; None: none did
    coalesced: list[int] | None = None
    # its one SLO verdict (engine/rules/verdicts.py judge_request through its step's judge):
    # its own step's, on what it did in that step's window; else on its whole record. What
    # attainment, goodput (every window's, live and per step) and the rest read; None: not judged
    slo_met: bool | None = None
    # the send stamp to the write of its last byte (its connect, redline's own loop): what its
    # TTFT and E2E hold of the client (docs/numbers.md, "the client's own health"); None: not
    # known (a transport that does not tell: httpx's own, aiohttp)
    send_wait: float | None = None

    # -- derived figures (docs/numbers.md) ----------------------------------
    @property
    def t_start(self) -> float:
        """Where latencies count from: the intended send time in rate mode, else the send."""
        return self.t_send if self.t_intended is None else self.t_intended

    @property
    def schedule_lag(self) -> float | None:
        """Actual - intended send time (rate mode): the in-flight cap's wait plus client lateness."""
        return None if self.t_intended is None else self.t_send - self.t_intended

    @property
    def ttft(self) -> float | None:
        """Request sent (intended, in rate mode) -> first token of any kind received."""
        return None if self.t_first is None else self.t_first - self.t_start

    @property
    def ttfat(self) -> float | None:
        """Request sent (intended, in rate mode) -> first answer token received (after any reasoning)."""
        return None if self.t_first_answer is None else self.t_first_answer - self.t_start

    @property
    def e2e(self) -> float | None:
        """Request sent (intended, in rate mode) -> last byte."""
        return None if self.t_end is None else self.t_end - self.t_start

    def chunk_gaps(self) -> list[float]:
        """Raw gaps between consecutive content chunks (a k-token chunk is one gap)."""
        ts = self.chunk_times
        return [ts[i] - ts[i - 1] for i in range(1, len(ts))]

    def gaps_from(self, start: int) -> list[tuple[float, Sequence[float], float]]:
        """For each content chunk from index `start` on (the first chunk closes no gap: it is
        the TTFT): (its arrival time, the inter-token latencies it closes, its raw chunk gap).

        Inter-token latencies as SGLang's bench_serving computes them for this API:
        OpenAI APIs (chat, completions): one gap per content chunk, the chunk gap itself.
        SGLang /generate (`spread_itl`): a chunk that brings k new tokens gives k entries of
        gap/k (bench_serving's `adjust_itl`); a chunk that brings none gives no entry and its
        gap rolls into the next chunk's. The engine harvests these incrementally (by arrival
        time, twenty times a second); `itls()` is the whole request's.

        A chunk read coalesced (`coalesced`: in one socket read with another of its content
        chunks) closes a gap that is no measurement: its entry's ITLs are COALESCED (none).
        The last chunk of such a read carries the read's true stamp, so the gaps after it
        are measured again (on /generate the next chunk's spread starts from it).
        """
        ts = self.chunk_times
        n = len(ts)
        start = max(start, 1)
        out: list[tuple[float, Sequence[float], float]] = []
        if start >= n:
            return out
        co = self.coalesced
        merged = frozenset(co[bisect_left(co, start):]) if co and co[-1] >= start else ()  # ascending: the harvest's part
        if not self.spread_itl:
            if not merged:
                return [(b, [g := b - a], g) for a, b in zip(ts[start - 1 : n - 1], ts[start:n], strict=False)]
            return [(b, COALESCED if i in merged else [b - a], b - a)
                    for i, a, b in zip(range(start, n), ts[start - 1 : n - 1], ts[start:n], strict=False)]
        ks = self.chunk_tokens

        def k_at(i: int) -> int:
            return ks[i] if i < len(ks) else 1

        j = start - 1
        while j > 0 and k_at(j) <= 0:
            j -= 1
        last = ts[j]
        for i in range(start, n):
            raw = ts[i] - ts[i - 1]
            if i in merged:
                out.append((ts[i], COALESCED, raw))
                last = ts[i]
                continue
            k = k_at(i)
            if k <= 0:
                out.append((ts[i], [], raw))
                continue
            out.append((ts[i], [(ts[i] - last) / k] * k, raw))
            last = ts[i]
        return out

    def credits(self) -> list[tuple[float, int]]:
        """When its output tokens were counted as throughput, as they arrived: (arrival time,
        tokens) of each content chunk that brought some, and what the server's final count
        added at the end (engine/client/request.py credits each read's tokens as they arrive
        and settles the exact total at the end). A request that fails takes exactly these
        back out of every window that counted them (docs/numbers.md#failed-requests)."""
        if self.remote_credits is not None:
            return self.remote_credits
        ts, ks = self.chunk_times, self.chunk_tokens
        out = [(t, int(k)) for t, k in zip(ts, ks, strict=False) if k > 0]
        out += [(t, 1) for t in ts[len(ks):]]
        rest = self.output_tokens - sum(n for _, n in out)
        if rest > 0:
            out.append((self.t_end if self.t_end is not None else (ts[-1] if ts else self.t_send), rest))
        return out

    def itls(self) -> list[float]:
        """The request's inter-token latencies (see gaps_from)."""
        if not self.spread_itl:  # one per chunk: the chunk gaps, less those of chunks read coalesced
            return chunk_gaps(self.chunk_times, 1, self.coalesced)[1].tolist()
        return [v for _, vs, _ in self.gaps_from(1) for v in vs]

    def figures(self) -> RequestFigures:
        """Its own chunk figures, as its row and the SLO judge read them (a worker's
        request: as its worker measured them, `remote`)."""
        if self.remote is not None:
            return self.remote
        ts = self.chunk_times
        n = len(ts)
        if n < 2:
            return RequestFigures(n, None, None, None)
        return RequestFigures(n, (ts[-1] - ts[0]) / (n - 1), max(map(sub, ts[1:], ts[:-1])), quantile(sorted(self.itls()), 0.99))

    @property
    def tpot(self) -> float | None:
        """(E2E - TTFT) / (output_tokens - 1)."""
        if self.t_first is None or self.t_end is None or self.output_tokens < 2:
            return None
        return (self.t_end - self.t_first) / (self.output_tokens - 1)
