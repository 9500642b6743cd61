"""The Snapshot the screen draws, built from the engine's parts a few times a second.

Nothing is computed here: every number comes from where it is measured (metrics.py for the
live windows, steps.py through stepbook.py for steps, telemetry/ for server, GPUs and the
client itself), so a reader finds the source of a figure in one hop.
"""

from __future__ import annotations

from itertools import islice
from typing import Any

from ..rules.verdicts import knee_from_summary, summary_knee
from .snapshot import Snapshot

RECENT_ROWS = 4  # timeline rows a snapshot carries: a screen held up to this many seconds misses none


def _server(st) -> dict:
    """A target's own running / queued counts (its /metrics; the first target's is the hub's)."""
    srv = st.telemetry.server if st.telemetry is not None else None
    return {"running": srv.running if srv else None, "queued": srv.queued if srv else None}


def build_snapshot(engine: Any, now: float, done: bool = False) -> Snapshot:
    m = engine.metrics
    out, inp, req, err = m.rates(now)
    good_req, good_tok = m.goodput(now)
    lane_ttft, lane_itl = engine.lane_stats.p50_ms(now)
    st = m.percentiles
    ctl = engine.controller
    tgt = engine.target
    cfg = engine.config
    book = engine.book
    h = engine.ticker.health
    tel = engine.telemetry
    return Snapshot(
        t=now,
        elapsed_s=now - engine.t0,
        state=engine.state,
        target_c=ctl.target if ctl else cfg.concurrency,
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
        trace_progress=engine.trace.progress() if engine.trace is not None else None,
        targets=tuple(st.stats.live(now) | _server(st) for st in engine.targets) if len(engine.targets) > 1 else (),
        workers=tuple(engine.pool.summary()) if engine.pool is not None else (),
        probing=ctl.probing if ctl else False,
        preset_running=engine.driver_running,
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
        lane_on=engine.lane is not None and engine.lane.on,
        lane_ttft_ms=lane_ttft,
        lane_ttft_bound=engine.lane_stats.ttft_bound,
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
        failures_in_a_row=engine.recorder.streak.count,
        last_failure=engine.recorder.streak.reason,
        output_tokens_total=m.output_tokens_total,
        steps=tuple(book.steps),
        current_step=book.live_result,
        break_result=book.break_result,
        probe_result=book.probe_result,
        knee=knee_from_summary(summary_knee(book.steps, book.search, book.plateau_gain)),  # the one verdict, not the screen's own
        preset=engine.preset_line,
        server=tel.server if tel else None,
        gpus=tuple(tel.gpus) if tel else (),
        client_cpu_pct=h.cpu_pct if h else None,
        loop_lag_ms=h.loop_lag_ms if h else None,
        client_overloaded=h.overloaded if h else False,
        warnings=engine.events.warnings(server_gone=engine.server_gone),
        tok_per_joule=engine.ticker.row.get("tok_per_joule"),
        second=engine.ticker.second,
        row=engine.ticker.row,
        recent=tuple(islice(reversed(engine.history), RECENT_ROWS))[::-1],
        log=engine.events.recent(50),
        session_dir=str(cfg.out_dir or ""),
        session_error=engine.session.error if engine.session else None,
        session_lost_rows=engine.session.lost_rows if engine.session else 0,
        done=done,
        finished=engine.finished,
    )
