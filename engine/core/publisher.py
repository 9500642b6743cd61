"""The Snapshot the screen draws, built from the engine's parts a few times a second, and who
receives it (the host's pipe to the TUI: `Publisher`).

Nothing is computed here: every number comes from where it is measured
(engine/measure/live_metrics.py for the live windows, engine/measure/step_book.py for steps,
engine/telemetry/ for server, GPUs and the client itself), so a reader finds the source of a
figure in one hop.
"""

from __future__ import annotations

from itertools import islice
from typing import TYPE_CHECKING, Callable, Protocol

from ..rules.verdicts import knee_from_summary, summary_knee
from .snapshot import Snapshot

if TYPE_CHECKING:
    from ..client.target import Target
    from ..measure.live_metrics import LiveMetrics
    from ..measure.step_book import StepBook
    from ..telemetry.hub import TelemetryHub
    from .config import EngineConfig
    from .disk import Disk
    from .event_log import EventLog
    from .held_load import HeldLoad
    from .lifetime import Lifetime
    from .measurements import Measurements
    from .steering import Driven
    from .target_stats import TargetState
    from .targets import TargetSet
    from .ticker import Ticker

RECENT_ROWS = 4  # timeline rows a snapshot carries: a screen held up to this many seconds misses none


class Publisher:
    """The latest Snapshot, and its subscribers (each called with every new one)."""

    def __init__(self, first: Snapshot) -> None:
        self.snapshot = first
        self._subscribers: list[Callable[[Snapshot], None]] = []

    def subscribe(self, fn: Callable[[Snapshot], None]) -> None:
        self._subscribers.append(fn)

    def publish(self, snap: Snapshot) -> None:
        self.snapshot = snap
        for fn in self._subscribers:
            fn(snap)


class Pictured(Protocol):
    """What a Snapshot reads of the engine."""

    config: EngineConfig
    metrics: LiveMetrics
    book: StepBook
    events: EventLog
    measurements: Measurements
    targets: TargetSet
    load: HeldLoad
    telemetry: TelemetryHub | None
    ticker: Ticker
    disk: Disk
    life: Lifetime

    @property
    def steering(self) -> Driven: ...
    @property
    def target(self) -> Target | None: ...
    @property
    def state(self) -> str: ...
    @property
    def in_flight(self) -> int: ...
    @property
    def backing_off(self) -> int: ...
    @property
    def server_gone(self) -> bool: ...


def _server(st: TargetState) -> dict[str, float | None]:
    """A target's own running / queued counts (its /metrics; the first target's is the hub's)."""
    srv = st.telemetry.server if st.telemetry is not None else None
    return {"running": srv.running if srv else None, "queued": srv.queued if srv else None}


def build_snapshot(engine: Pictured, now: float, done: bool = False) -> Snapshot:
    engine.measurements.flush_tokens()  # the tokens read since the last harvest count in it
    m = engine.metrics
    out, inp, req, err = m.rates(now)
    good_req, good_tok = m.goodput(now)
    lane_stats = engine.measurements.lane_stats
    lane_ttft, lane_itl = lane_stats.p50_ms(now)
    st = m.percentiles
    load = engine.load
    ctl = load.controller
    tgt = engine.target
    cfg = engine.config
    book = engine.book
    ticker = engine.ticker
    h = ticker.health
    tel = engine.telemetry
    session = engine.disk.session
    return Snapshot(
        t=now,
        elapsed_s=now - engine.life.t0,
        state=engine.state,
        target_c=ctl.concurrency if ctl else cfg.concurrency,
        previous_c=ctl.previous if ctl else None,
        previous_rate=ctl.previous_rate if ctl else None,
        in_flight=engine.in_flight,
        backing_off=engine.backing_off,
        max_concurrency=ctl.max_concurrency if ctl else cfg.max_concurrency,
        mode=ctl.mode if ctl and not ctl.probing else "concurrency",
        target_rate=ctl.rate if ctl and not ctl.probing else None,
        arrival=ctl.arrival.describe() if ctl else cfg.arrival,
        schedule_lag_ms=st.schedule_lag.ms(),
        held_at_cap=ctl.waiting if ctl else 0,
        dropped_or_delayed=ctl.delayed + ctl.dropped if ctl else 0,
        workload=dict(book.workload or cfg.workload.describe()),
        turns=cfg.workload.turns,
        trace_progress=load.trace.progress() if load.trace is not None else None,
        targets=tuple(st.stats.live(now) | _server(st) for st in engine.targets) if len(engine.targets) > 1 else (),
        workers=tuple(load.pool.summary()) if load.pool is not None else (),
        probing=ctl.probing if ctl else False,
        preset_running=engine.steering.driving,
        url=tgt.url if tgt else cfg.url,
        model=tgt.model if tgt else "",
        api=tgt.api if tgt else "",
        server_kind=tgt.info.kind if tgt else "",
        caps=tgt.info.caps_text() if tgt else "",
        output_tok_s=out,
        input_tok_s=inp,
        req_s=req,
        errors_s=err,
        goodput_req_s=good_req,
        goodput_tok_s=good_tok,
        lane_on=load.lane is not None and load.lane.on,
        lane_ttft_ms=lane_ttft,
        lane_ttft_bound=lane_stats.ttft_bound,
        lane_itl_ms=lane_itl,
        slo=cfg.slo.describe() if cfg.slo is not None else "",
        ttft_ms=st.ttft.ms(),
        ttft_bound=st.ttft.bound_flags(),
        itl_ms=st.itl.ms(),
        tpot_ms=st.tpot.ms(),
        e2e_ms=st.e2e.ms(),
        completed=m.completed,
        failed=m.failed,
        cancelled=m.cancelled,
        errors_by_kind=dict(m.errors_by_kind),
        failures_in_a_row=engine.measurements.streak.count,
        last_failure=engine.measurements.streak.reason,
        output_tokens_total=m.output_tokens_total,
        steps=tuple(book.steps),
        current_step=book.live_result,
        break_result=book.break_result,
        probe_result=book.probe_result,
        knee=knee_from_summary(summary_knee(book.steps, book.search, book.plateau_gain)),  # the one verdict, not the screen's own
        preset=engine.steering.line,
        server=tel.server if tel else None,
        gpus=tuple(tel.gpus) if tel else (),
        client_cpu_pct=h.cpu_pct if h else None,
        loop_lag_ms=h.loop_lag_ms if h else None,
        client_overloaded=h.overloaded if h else False,
        warnings=engine.events.warnings(server_gone=engine.server_gone),
        tok_per_joule=ticker.row.get("tok_per_joule"),
        second=ticker.second,
        row=ticker.row,
        recent=tuple(islice(reversed(ticker.history), RECENT_ROWS))[::-1],
        log=engine.events.recent(50),
        session_dir=str(cfg.out_dir or ""),
        session_error=session.error if session else None,
        session_lost_rows=session.lost_rows if session else 0,
        done=done,
        finished=engine.life.finished,
    )
