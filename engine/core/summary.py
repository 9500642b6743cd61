"""What a session's meta.json and summary.json say (docs/session-format.md): built here
from the engine's parts, written by the SessionWriter (session/writer.py) off the loop."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Protocol

from .. import __version__
from ..rules.verdicts import slo_verdict, summary_knee

if TYPE_CHECKING:
    from ..client.target import Target
    from ..measure.live_metrics import LiveMetrics
    from ..measure.slo import Slo
    from ..measure.step_book import StepBook
    from ..measure.step_result import StepResult
    from .config import EngineConfig
    from .held_load import HeldLoad
    from .lifetime import Lifetime
    from .live_steps import LiveSteps
    from .measurements import Measurements
    from .targets import TargetSet


class Summarized(Protocol):
    """What summary.json reads of the engine."""

    config: EngineConfig
    book: StepBook
    metrics: LiveMetrics
    measurements: Measurements
    targets: TargetSet
    load: HeldLoad
    live: LiveSteps
    life: Lifetime

    @property
    def target(self) -> Target | None: ...


def default_label(tgt: Target) -> str:
    """A session's label when none is given: the model (or the server's kind), tp and pp."""
    info = tgt.info
    parts = [tgt.model or info.kind]
    if info.tp_size:
        parts.append(f"tp{info.tp_size}")
    if info.pp_size and info.pp_size > 1:
        parts.append(f"pp{info.pp_size}")
    return " ".join(parts)


def session_meta(cfg: EngineConfig, tgt: Target) -> dict:
    """meta.json: who ran what against what (written once, at the session's start)."""
    return {
        "redline_version": __version__,
        "command_line": list(cfg.command_line),
        "label": cfg.label or default_label(tgt),
        "target": tgt.describe(),
        **({"more_targets": list(cfg.more_urls), "weights": list(cfg.weights or ())} if cfg.more_urls else {}),
        "server_info": tgt.info.raw or {"kind": tgt.info.kind, "model": tgt.info.model},
        "workload": cfg.workload.describe(full=True),  # request shaping and seed included, secret header values masked
        "percentiles": list(cfg.percentiles),  # what steps and the run summary carry (--percentiles)
        "concurrency": cfg.concurrency,
        "arrival": cfg.arrival,
        **({"rate": cfg.rate} if cfg.rate is not None and cfg.workload.trace is None else {}),
        "host": _node(),
        **(cfg.meta_extra or {}),
    }


def summary_doc(e: Summarized) -> dict[str, Any]:
    """summary.json: the steps, the knee (engine/rules/verdicts.py), the break, the probe, the
    search, the SLO, the targets and the workers (one process: itself, as worker 0), as they stand now (rewritten at each
    step and at the end)."""
    b, cfg, tgt = e.book, e.config, e.target
    assert tgt is not None
    return {
        "target": tgt.describe(),
        "label": cfg.label or default_label(tgt),
        "steps": [step_doc(s, cfg.slo) for s in b.steps],
        **summary_knee(b.steps, b.search, b.plateau_gain),
        "break": b.break_result.to_dict() if b.break_result else None,
        **({"cause": b.cause} if b.cause else {}),  # the cap detector's finding beside it (engine/run/ramp_record.py)
        "probe": b.probe_result.to_dict() if b.probe_result else None,
        **({"search": b.search} if b.search is not None else {}),
        **({"slo": cfg.slo.to_dict()} if cfg.slo is not None else {}),
        "targets": [st.stats.summary(time.perf_counter() - e.life.t0) for st in e.targets],
        "workers": workers_doc(e),
        # the whole run at once, as bench_serving reports it (engine/measure/run_totals.py)
        "run": e.measurements.totals.summary(cfg.percentiles),
    }


def step_doc(s: StepResult, slo: Slo | None) -> dict[str, Any]:
    """One step of summary.json: its StepResult, and with an SLO the engine's verdict on it,
    `meets_slo` (true: met; false: a bound missed; null: not proven, e.g. nothing judged:
    engine/rules/verdicts.py slo_verdict), which the HTML page and readers take as it is."""
    d = s.to_dict()
    if slo is not None and slo.any:
        state, _ = slo_verdict(slo, s)
        d["meets_slo"] = {"pass": True, "fail": False}.get(state)
    return d


def workers_doc(e: Summarized) -> list[dict[str, Any]]:
    """summary.json's workers: this process as worker 0 (the load in it), or the pool's; a
    load that moved to worker processes (engine/core/load_move.py): both, this one as it was
    when its last request ended."""
    pool, moved = e.load.pool, e.load.moved
    if pool is None:
        return [this_process(e)]
    return ([moved] if moved is not None else []) + pool.summary()


def this_process(e: Summarized, held_until: float | None = None) -> dict[str, Any]:
    """The load held in this process, as one worker (the same shape as --workers N); with
    `held_until` (a move's end: perf seconds), what it held until then, less what the pool
    took since, and `held_until_s` (seconds into the run)."""
    now = time.perf_counter() if held_until is None else held_until
    d = max(now - e.life.t0, 1e-9)
    lag = e.metrics.lag.quantile(0.99) if e.metrics.lag.count else None
    requests, tokens = e.measurements.ended, e.metrics.output_tokens_total
    pool = e.load.pool
    if held_until is not None and pool is not None:
        requests -= sum(s.requests for s in pool.states)
        tokens -= sum(s.tokens for s in pool.states)
    row: dict[str, Any] = {
        "worker": 0, "node": _node(), "alive": held_until is None,
        "share": e.live.concurrency() if e.load.controller is not None and held_until is None else 0,
        "requests": requests, "output_tok_s": round(tokens / d, 3),
        "lag_p99_ms": None if lag is None else round(lag * 1000.0, 3),
        "cpu_pct": round(100.0 * (time.process_time() - e.life.cpu0) / d, 1),
    }
    if held_until is not None:
        row["held_until_s"] = round(d, 3)
    return row


def _node() -> str:
    """This machine's network name (platform is imported here, on a session's first write:
    not at every engine start)."""
    import platform

    return platform.node()
