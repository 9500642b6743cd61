"""The headless runner (`redline run PRESET --headless`, and each configuration of `redline
sweep --headless`): start the engine, run the preset, print a line per step and the final
table (the steps' final figures, as summary.json and `redline report` read them), the gate at
the end; a signal stops all load and saves the session, exit 128 + N."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ...engine import api
from ..exits import (
    EXIT_BAD_INPUT,
    EXIT_GATE_FAILED,
    EXIT_OK,
    EXIT_UNREACHABLE,
    ended_status,
    engine_loss,
    session_saved,
)

if TYPE_CHECKING:
    import asyncio

    from ...engine.api import Engine, EngineConfig, Preset, RunOutcome
    from ...engine.report.api import Condition

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _err(text: str) -> None:
    print(f"redline: error: {text}", file=sys.stderr)


def headless_engine(cfg):
    """The engine as a headless run drives it (a preset's or a held load): commands run in
    this process, warnings printed as they come."""
    from ...engine.api import new_engine

    engine = new_engine(cfg)
    engine.events.on_warning = _warning_printer()
    return engine


async def start_engine(engine: Engine, futures: list[asyncio.Future], caught: list[signal.Signals]) -> int | None:
    """Start `engine` (its start future kept in `futures`, so a signal can cancel it); the
    exit status when the target or the session refuses, else None. A signal (in `caught`)
    that cancelled the start is a CancelledError here even where the cancelled connection
    surfaced as a failure (httpx can turn a cancelled read into a timeout): not "unreachable"."""
    import asyncio

    try:
        futures.append(asyncio.ensure_future(api.start_engine(engine)))
        await futures[-1]
    except (api.TargetError, api.SessionError, api.TargetUnreachable) as exc:
        if caught:
            raise asyncio.CancelledError from None
        _err(str(exc))
        return EXIT_UNREACHABLE if isinstance(exc, api.TargetUnreachable) else EXIT_BAD_INPUT
    return None


async def refused_everything(engine: Engine, poll_s: float = 0.05) -> str:
    """Until CONSECUTIVE_FAILURES_END of the load's requests failed in a row (the server
    refuses everything: a model it does not serve, a proxy's 404); then the line that ends a
    held headless run, the server's own reason in it. Failures because the server went are not
    refusals (it may come back)."""
    import asyncio

    from ...engine.api import CONSECUTIVE_FAILURES_END

    while True:
        streak = engine.failure_streak
        if streak.count >= CONSECUTIVE_FAILURES_END and streak.kind != "server_gone" and not engine.server_gone:
            return f"{streak.count} requests failed in a row: {streak.reason or streak.kind}"
        await asyncio.sleep(poll_s)


def print_run_summary(engine: Engine, so_far: bool = False) -> None:
    """The whole run's figures as `vllm bench serve` and bench_serving print them (the
    percentiles asked for), once any load request ended; `so_far`: a signal cut it short."""
    from ...engine.api import format_run_summary

    t, qs = engine.totals, engine.config.percentiles
    if t.completed or t.failed:
        print()
        print(format_run_summary(t.summary(qs), qs, title="Serving Benchmark Result" + (" (so far)" if so_far else "")), flush=True)


async def run_headless(cfg: EngineConfig, preset: Preset, gate: list[Condition] | None = None, junit: Path | None = None,
                       sim_profile: str | None = None,
                       progress_s: float | None = None) -> int:
    import asyncio

    from ...engine.api import format_step_table, knees_from_summary, run_preset
    from .progress import Progress

    engine = headless_engine(cfg)
    loop = asyncio.get_running_loop()
    caught: list[signal.Signals] = []
    work: list[asyncio.Future] = []  # what a signal cancels: start-up, then the preset
    stopped: list[str] = []  # POST /v1/stop (--control)
    held = asyncio.Event()  # after the API took the wheel from the preset: until stop or a signal

    def on_signal(sig: signal.Signals) -> None:
        caught.append(sig)
        held.set()
        for fut in work:
            fut.cancel()

    def on_stop_request(reason: str) -> None:
        stopped.append(reason)
        held.set()
        for fut in work:
            fut.cancel()

    engine.steering.on_stop_request = on_stop_request

    for sig in SIGNALS:  # before start-up: a signal during detection must close the log too
        loop.add_signal_handler(sig, on_signal, sig)
    out = None
    try:
        refused = await start_engine(engine, work, caught)
        if refused is not None:
            return refused
        if cfg.insecure:
            print("redline: warning: TLS certificate verification is OFF (--insecure)", file=sys.stderr, flush=True)
        print(f"redline: preset {preset.name} against {target_line(engine)}; "
              f"{api.duration_text(preset, sim_profile)}; session {cfg.out_dir}", flush=True)
        progress = Progress(engine, progress_s)
        ticking = asyncio.ensure_future(progress.run())
        work.append(asyncio.ensure_future(run_preset(engine, preset, on_line=progress.say)))
        if cfg.control is not None:  # an API command that takes the wheel cancels the preset
            engine.steering.drive(work[-1])
        try:
            out = await work[-1]
        except asyncio.CancelledError:
            if caught or stopped or not work[-1].cancelled():
                raise
            print(f"redline: preset {preset.name} cancelled through the control API; holding {engine.load_text} "
                  "until POST /v1/stop or a signal", flush=True)
            await held.wait()
    except asyncio.CancelledError:
        if not caught and not stopped:
            raise
    finally:
        reason = f"signal {caught[0].name}" if caught else stopped[0] if stopped else "preset finished"
        if "ticking" in locals():
            ticking.cancel()
            await asyncio.gather(ticking, return_exceptions=True)
        await engine.stop(reason)
        for sig in SIGNALS:
            loop.remove_signal_handler(sig)
    if caught:
        print_run_summary(engine, so_far=True)  # what finished, in bench_serving's layout
        if engine.steps or engine.probe_result is not None:  # the steps so far, the cut one marked partial
            print()
            print(format_step_table(list(engine.steps), engine.break_result, engine.probe_result), flush=True)
        print(f"redline: stopped by {caught[0].name}; all load stopped, {session_saved(cfg.out_dir, engine_loss(engine))}",
              file=sys.stderr)
        return 128 + caught[0].value
    from ...engine.api import RunOutcome, summary_knee

    # one record: the table prints each step's final figures (completed by requests that ended
    # after its close), as summary.json, `redline report` and the HTML page read them
    out = RunOutcome(steps=list(engine.steps), break_result=engine.break_result, probe=engine.probe_result,
                     search=out.search if out is not None else engine.book.search)
    if engine.session is not None:  # what summary.json says of each step (engine/session/writer.py)
        for st in [*out.steps, *([out.probe] if out.probe is not None else [])]:
            st.client_limited = st.client_limited or engine.session.client_limited(st.t_start, st.duration_s, st.to_dict())
    print()
    print(format_step_table(out.steps, out.break_result, out.probe,
                            knees_from_summary(summary_knee(out.steps, out.search, engine.book.plateau_gain)), engine.book.cause))
    if cfg.more_urls and cfg.out_dir is not None:
        from .report import session_targets_table

        table = session_targets_table(cfg.out_dir)
        if table:
            print()
            print(table)
    print(f"\nsession: {cfg.out_dir}")
    rc = run_gate_end(cfg, out, gate, junit) if gate is not None else EXIT_OK
    return ended_status(engine_loss(engine), rc)


def run_gate_end(cfg: EngineConfig, out: RunOutcome, gate: list[Condition], junit: Path | None) -> int:
    """The gate at the end of a headless run: judged on summary.json as written (the steps'
    final figures), else on the run's outcome; PASS/FAIL lines, summary.json's `gate`, the
    JUnit file; EXIT_GATE_FAILED when a condition failed."""
    from ...engine.report.api import (
        SUMMARY,
        GateSession,
        evaluate,
        failure_line,
        format_outcomes,
        gate_dict,
        junit_xml,
        passed,
        session_from_steps,
    )

    summary_path = Path(cfg.out_dir) / SUMMARY if cfg.out_dir is not None else None
    session = None
    if summary_path is not None and summary_path.is_file():
        try:
            session = GateSession.load(summary_path.parent)
        except api.SessionError:
            session = None
    if session is None:
        s = session_from_steps(cfg.label or "session", out.steps, out.break_result, out.probe)
        summ = {"search": out.search, "slo": cfg.slo.to_dict() if cfg.slo is not None else None}
        session = GateSession(s.label, tuple(s.steps), {k: v for k, v in summ.items() if v is not None}, s)
    outcomes = evaluate(gate, session)
    print()
    print(format_outcomes(outcomes))
    if summary_path is not None and summary_path.is_file():
        _add_to_summary(summary_path, "gate", gate_dict(outcomes))
    rc = EXIT_OK
    if junit is not None:
        try:
            junit.write_text(junit_xml(outcomes, f"redline gate: {session.label}"), encoding="utf-8")
        except OSError as exc:
            _err(f"--junit {junit}: cannot write: {exc.strerror or exc}")
            rc = EXIT_BAD_INPUT
    if not passed(outcomes):
        print(f"redline: {failure_line(outcomes)}", file=sys.stderr, flush=True)
        return EXIT_GATE_FAILED
    return rc


def _add_to_summary(path: Path, key: str, value: object) -> None:
    """summary.json with `key` set, rewritten atomically (the session's log is closed by now)."""
    import json

    from ...engine.report.api import dumps_doc, write_text_atomic

    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(doc, dict):
            doc[key] = value
            write_text_atomic(path, dumps_doc(doc) + "\n")
    except (OSError, ValueError) as exc:
        _err(f"cannot add the gate to {path}: {exc}")


def _warning_printer():
    """Headless: each warning (server cap, client health, ...) printed once, the first time
    its key is raised; later episodes of it are in events.ndjson and flag their steps."""
    seen: set[str] = set()

    def show(key: str, text: str) -> None:
        if key not in seen:
            seen.add(key)
            print(f"redline: warning: {text}", file=sys.stderr, flush=True)

    return show


def target_line(engine: Engine) -> str:
    """The banner's target: `URL (kind, model)`, or with several, each URL and its weight."""
    tgt = engine.target
    assert tgt is not None  # (the banner follows the start)
    states = getattr(engine, "targets", None) or []
    if len(states) < 2:
        return f"{tgt.url} ({tgt.info.kind}, {tgt.model or 'model ?'})"
    urls = ", ".join(f"{st.target.url} (weight {st.weight:g})" for st in states)
    return f"{len(states)} targets ({tgt.info.kind}, {tgt.model or 'model ?'}): {urls}"


# -- redline presets -----------------------------------------------------------------------
