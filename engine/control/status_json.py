"""GET /v1/status (engine/control/http_api.py): the engine's latest Snapshot as JSON.

`engine` is the running Engine; it is read, never changed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..rules.verdicts import summary_knee

if TYPE_CHECKING:
    from ..core.engine import Engine
    from ..measure.accumulator import StepAccumulator
    from ..measure.step_result import StepResult


def status_of(engine: Engine, url: str = "") -> dict[str, Any]:
    """GET /v1/status: the engine's latest Snapshot as JSON; the live figures carry the names
    of the timeline rows (docs/session-format.md#timelinendjson)."""
    s = engine.snapshot
    live: dict[str, Any] = {
        "output_tok_s": round(s.output_tok_s, 3), "input_tok_s": round(s.input_tok_s, 3),
        "req_s": round(s.req_s, 4), "errors_s": round(s.errors_s, 4),
    }
    if s.goodput_req_s is not None:
        live["goodput_req_s"] = round(s.goodput_req_s, 4)
        live["goodput_tok_s"] = None if s.goodput_tok_s is None else round(s.goodput_tok_s, 3)
    for name, p in (("ttft", s.ttft_ms), ("itl", s.itl_ms), ("e2e", s.e2e_ms)):
        for q in ("p50", "p90", "p99"):
            v = (p or {}).get(q)
            live[f"{name}_{q}_ms"] = None if v is None else round(v, 3)
    srv = s.server
    live["server_running"] = srv.running if srv else None
    live["server_queued"] = srv.queued if srv else None
    live["server_kv_usage"] = srv.kv_usage if srv else None
    ctl = engine.controller
    step = s.current_step
    return {
        "state": s.state,
        "mode": s.mode,
        "concurrency": s.target_c,
        "max_concurrency": s.max_concurrency,
        "rate": s.target_rate,
        "arrival": s.arrival if s.mode == "rate" else None,
        "in_flight": s.in_flight,
        "backing_off": s.backing_off,
        "paused": bool(ctl is not None and ctl.paused),
        "probing": s.probing,
        "previous_concurrency": s.previous_c if s.probing else None,
        "load": engine.load_text,
        "elapsed_s": round(s.elapsed_s, 3),
        **live,
        "timeline_row": {k: v for k, v in (s.row or {}).items() if not k.startswith("goodput_")},  # one goodput per reply: the live one above
        "step": step_of(engine, step),
        "steps_recorded": len(s.steps),
        # the session's knee as summary.json records it (engine/rules/verdicts.py): knee_concurrency,
        # knee_reason, max_throughput_concurrency (knee_rate, max_throughput_rate over rates)
        "knee": summary_knee(engine.book.steps, engine.book.search, engine.book.plateau_gain),
        # a preset's break and last good as they stand (judged again on final figures:
        # engine/run/ramp_record.py), as summary.json records them, and the cause beside them
        "break": engine.book.break_result.to_dict() if engine.book.break_result is not None else None,
        "cause": engine.book.cause,
        "preset": {"running": s.preset_running, "progress": s.preset},
        "completed": s.completed, "failed": s.failed, "cancelled": s.cancelled,
        "output_tokens_total": s.output_tokens_total,
        "errors_by_kind": s.errors_by_kind,
        "workload": s.workload,
        "slo": s.slo or None,
        "lane": s.lane_on,
        "warnings": list(s.warnings),
        "session_dir": s.session_dir,
        "session_error": s.session_error,
        "target": {"url": s.url, "model": s.model, "api": s.api, "server": s.server_kind},
        "targets": list(s.targets) if s.targets else [{"url": s.url, "output_tok_s": round(s.output_tok_s, 3)}],
        "workers": list(s.workers),
        "control": url,
        "done": s.done,
    }


def step_of(engine: Engine, result: StepResult | None) -> dict[str, Any] | None:
    """The step open now: index, phase, concurrency, and its figures so far (refreshed once a
    second; null in its first second)."""
    book = engine.book
    acc = book.live or book.current
    src: StepAccumulator | StepResult
    if acc is not None:
        src = acc
    elif result is not None:
        src = result
    else:
        return None
    return {"index": src.index, "phase": src.phase, "concurrency": src.concurrency,
            "result": None if result is None else result.to_dict()}
