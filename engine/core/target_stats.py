"""Many targets (`--url` given several times): data-parallel replicas, or one server per node.

Each target has its own client (connection pool), Sender, health watch and /metrics poller.
Requests are split evenly or by weight (smooth weighted round robin, as nginx does: over any
window the shares are within one request of the weights). A multi-turn session stays on the
target it started on (its prefix cache). A target that fails (connections refused and its
/health failing, engine/client/server_watch.py) is marked gone and skipped, its share carried by the
others; the engine holds the load only when every target is gone.

Per-target figures (`TargetStats`): requests, errors, output tok/s (counted as tokens arrive),
TTFT and E2E p50/p99 (live window on screen, whole session in summary.json), the server's
running and queued counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

from ..client.server_watch import SUSPECT_KINDS
from ..constants import ERROR_TEXT_CHARS, LATENCY_WINDOW_S, RATE_WINDOW_S
from ..measure import records
from ..measure.histogram import Digest, RollingDigest
from ..measure.live_metrics import RateWindow
from ..measure.records import RequestRecord

if TYPE_CHECKING:
    import httpx

    from ..client.server_watch import ServerWatch
    from ..client.target import Target
    from ..load.sender import Sender
    from ..telemetry.hub import TelemetryHub


class WeightsError(ValueError):
    """Weights that do not fit the targets (one line naming the value)."""


def parse_weights(text: str | Sequence[float] | None, n: int) -> tuple[float, ...]:
    """`2,1,1` (one positive number per target) -> weights; None -> all 1."""
    if text is None:
        return (1.0,) * n
    items = text.split(",") if isinstance(text, str) else list(text)
    try:
        ws = tuple(float(x) for x in items)
    except (TypeError, ValueError):
        raise WeightsError(f"--weights {text!r}: expected {n} positive numbers separated by commas, one per --url") from None
    if len(ws) != n or not all(w > 0 and w < float("inf") for w in ws):
        raise WeightsError(f"--weights {text!r}: expected {n} positive numbers separated by commas, one per --url")
    return ws


def _ms(v: float | None) -> float | None:
    return None if v is None else round(v * 1000.0, 3)


class TargetStats:
    """One target's figures: a subscriber of its Sender's events (engine/core/wiring.py), beside
    the engine's Measurements, so the session-wide figures stay the sum of the targets'."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.watch: ServerWatch | None = None
        self.sent = 0
        self.completed = 0
        self.failed = 0
        self.out_tokens_total = 0
        self.out_tokens = RateWindow(RATE_WINDOW_S)
        self.errors = RateWindow(RATE_WINDOW_S)
        self.ttft = RollingDigest(LATENCY_WINDOW_S)
        self.e2e = RollingDigest(LATENCY_WINDOW_S)
        self.ttft_all = Digest()
        self.e2e_all = Digest()

    # -- its Sender's events ----------------------------------------------------------
    def on_send(self, rec: RequestRecord) -> None:
        if rec.phase != "calibration":
            self.sent += 1

    def on_first(self, rec: RequestRecord) -> None:
        if rec.phase != "calibration" and rec.ttft is not None and rec.t_first is not None:
            self.ttft.add(rec.t_first, rec.ttft)
            self.ttft_all.add(rec.ttft)

    def on_tokens(self, t: float, n: int) -> None:
        self.out_tokens.add(t, n)
        self.out_tokens_total += n

    def on_token_reads(self, ts: Sequence[float], ns: Sequence[int]) -> None:
        """on_tokens of each read of a batch (engine/measure/hooks.py TokensHook.flush)."""
        self.out_tokens.add_many(ts, ns)
        self.out_tokens_total += sum(ns)

    def on_end(self, rec: RequestRecord) -> None:
        watch = self.watch
        if rec.phase != "calibration":
            t = rec.t_end if rec.t_end is not None else rec.t_send
            if rec.status == records.OK:
                self.completed += 1
                if rec.e2e is not None:
                    self.e2e.add(t, rec.e2e)
                    self.e2e_all.add(rec.e2e)
            elif rec.status == records.FAILED:
                self.failed += 1
                self.errors.add(t, 1)
        if rec.status == records.FAILED:  # its tokens are no throughput (calibration's neither)
            credits = rec.credits()
            self.out_tokens.remove_many(credits)
            self.out_tokens_total -= sum(n for _, n in credits)
        if watch is not None and rec.status == records.OK:
            watch.succeeded()  # a failure was judged by the Sender (engine/load/sender.py), or judge_remote_end

    def judge_remote_end(self, rec: RequestRecord) -> None:
        """A worker's request ended (engine/load/worker_pool.py), before its `ended` is fired:
        its worker judged whether the server had died (engine/load/worker.py: the worker's own
        watch made it `server_gone`); here a failure that may mean so asks this target's watch,
        which holds the load, and one still `connect` or `disconnect` is `server_gone` once that
        watch says the server is gone."""
        watch = self.watch
        if watch is not None and rec.status == records.FAILED and rec.error_kind in (*SUSPECT_KINDS, records.ERR_SERVER_GONE):
            if watch.gone and rec.error_kind != records.ERR_SERVER_GONE:
                rec.error_kind = records.ERR_SERVER_GONE
                rec.error_text = f"server gone: {rec.error_text}"[:ERROR_TEXT_CHARS]
            elif not watch.gone:
                watch.connect_failed()

    # -- reading -----------------------------------------------------------------------
    def live(self, now: float) -> dict:
        """The screen's row: live windows."""
        self.ttft.expire(now)
        self.e2e.expire(now)
        (t50, t99), _ = self.ttft.quantiles((0.5, 0.99))
        (e50, e99), _ = self.e2e.quantiles((0.5, 0.99))
        return {
            "url": self.url,
            "output_tok_s": round(self.out_tokens.rate(now), 1),
            "errors_s": round(self.errors.rate(now), 3),
            "ttft_p50_ms": _ms(t50), "ttft_p99_ms": _ms(t99),
            "e2e_p50_ms": _ms(e50), "e2e_p99_ms": _ms(e99),
            "gone": bool(self.watch is not None and self.watch.gone),
        }

    def summary(self, duration_s: float) -> dict:
        """summary.json's `targets` entry: the whole session."""
        d = duration_s if duration_s > 0 else 1.0
        return {
            "url": self.url,
            "requests": self.sent,
            "completed": self.completed,
            "errors": self.failed,
            "output_tokens": self.out_tokens_total,
            "output_tok_s": round(self.out_tokens_total / d, 3),
            "ttft_p50_ms": _ms(self.ttft_all.quantile(0.5)), "ttft_p99_ms": _ms(self.ttft_all.quantile(0.99)),
            "e2e_p50_ms": _ms(self.e2e_all.quantile(0.5)), "e2e_p99_ms": _ms(self.e2e_all.quantile(0.99)),
            "gone": bool(self.watch is not None and self.watch.gone),
        }


@dataclass
class TargetState:
    """One target of the session: what to send with, what watches it, what it measured."""

    index: int
    target: Target
    client: httpx.AsyncClient
    sender: Sender
    stats: TargetStats
    weight: float = 1.0
    telemetry: TelemetryHub | None = None
    current: float = field(default=0.0, repr=False)  # smooth weighted round robin

    @property
    def gone(self) -> bool:
        w = self.stats.watch
        return w is not None and w.gone

    @property
    def down(self) -> bool:
        """Gone or not ready (/health answers 503): no load goes to it."""
        w = self.stats.watch
        return w is not None and w.down
