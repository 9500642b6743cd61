"""One handler per `redline` command (tui/cli/arguments.py parses and dispatches here).

Each takes the parsed arguments and returns the exit status; a bad value raises UsageError
(one line, exit 2, printed by cli.main). The work itself is the engine's: these only pick
it, and print.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (`redline --help`)

from ...engine import api
from ..builtin_sim import BUILTIN_SIM, DEFAULT_SIM_PROFILE, running_target
from ..exits import (
    EXIT_BAD_INPUT,
    EXIT_GATE_FAILED,
    EXIT_OK,
    EXIT_UNREACHABLE,
    ended_status,
    engine_loss,
    session_saved,
)
from .errors import UsageError
from .launch import checked_config

if TYPE_CHECKING:
    from ...engine.api import EngineConfig, Preset
    from ...engine.report.api import Condition

from .headless import SIGNALS, run_headless, start_engine, target_line
from .terminal import check_html_target, check_out_file, check_png_target, print_curves, write_html_page, write_png_file


def _err(text: str) -> None:
    print(f"redline: error: {text}", file=sys.stderr)


# -- redline (no command): the TUI ---------------------------------------------------------
def cmd_tui(args: argparse.Namespace) -> int:
    cfg = checked_config(args)
    check_result_file(args)
    if getattr(args, "headless", False):
        import asyncio  # here, not at the top: `redline --help` and the TUI's first frame do not wait for it

        with running_target(cfg, args) as cfg:
            return save_result(args, cfg.out_dir, asyncio.run(_held(cfg, getattr(args, "progress_s", None))))
    return save_result(args, cfg.out_dir, _tui(args, cfg, preset=None))


def check_result_file(args: argparse.Namespace) -> None:
    """--result-filename FILE (bench_serving's and `vllm bench serve`'s name): a file that can
    be written, checked before anything starts."""
    path = getattr(args, "result_filename", None)
    if path is not None:
        check_out_file(path, "--result-filename", "result.json")


def save_result(args: argparse.Namespace, out_dir: Path | None, rc: int) -> int:
    """At the end of a run (a signal's too: nothing recorded is lost): --result-filename gets
    a copy of summary.json; --save-result names where the summary is. The exit status `rc`
    is kept, unless the copy cannot be written (exit 2, one line)."""
    path = getattr(args, "result_filename", None)
    if path is None and not getattr(args, "save_result", False):
        return rc
    summary = Path(out_dir) / "summary.json" if out_dir is not None else None
    if summary is None or not summary.is_file():
        _err(f"{'--result-filename ' + str(path) if path is not None else '--save-result'}: no summary was written "
             "(the run stopped before it began)")
        return rc if rc != EXIT_OK else EXIT_BAD_INPUT
    if path is None:
        print(f"redline: summary saved: {summary}", file=sys.stderr, flush=True)
        return rc
    try:
        path.write_bytes(summary.read_bytes())
    except OSError as exc:
        _err(f"--result-filename {path}: cannot write: {exc.strerror or exc}")
        return EXIT_BAD_INPUT
    print(f"redline: summary written to {path} (a copy of {summary})", file=sys.stderr, flush=True)
    return rc


async def _held(cfg: EngineConfig, progress_s: float | None = None) -> int:
    """`redline --headless [--control PORT]`: hold the starting load until an API call changes
    it; POST /v1/stop ends the session (exit 0), a signal too (exit 128+N). A fixed-size run
    (--num-requests, --duration) ends by itself (exit 0). The end prints the whole run in
    bench_serving's layout (what finished, when a signal stopped it), then the step table."""
    import asyncio

    from ...engine.api import format_step_table
    from .headless import headless_engine, print_run_summary, refused_everything
    from .progress import Progress

    engine = headless_engine(cfg)
    loop = asyncio.get_running_loop()
    caught: list[signal.Signals] = []
    stopped: list[str] = []
    refusal: list[str] = []  # the server refused CONSECUTIVE_FAILURES_END requests in a row
    done = asyncio.Event()
    starting: list[asyncio.Future] = []

    def on_signal(sig: signal.Signals) -> None:
        caught.append(sig)
        done.set()
        for fut in starting:
            fut.cancel()

    def on_stop_request(reason: str) -> None:
        stopped.append(reason)
        done.set()

    engine.steering.on_stop_request = on_stop_request
    for sig in SIGNALS:
        loop.add_signal_handler(sig, on_signal, sig)
    ticking = None
    try:
        try:
            refused = await start_engine(engine, starting, caught)
            if refused is not None:
                return refused
        except asyncio.CancelledError:
            if not caught:
                raise
        starting.clear()
        if not caught:
            ctl = f"control {engine.control.url}" if engine.control is not None else "no --control: a signal ends it"
            size = ("; " + " or ".join(x for x in (f"{cfg.num_requests} requests" if cfg.num_requests else "",
                                                   f"{cfg.duration_s:g} s" if cfg.duration_s else "") if x)) if (cfg.num_requests or cfg.duration_s) else ""
            print(f"redline: holding {engine.load_text} against {target_line(engine)}{size}; {ctl}; session {cfg.out_dir}", flush=True)
            ticking = asyncio.ensure_future(Progress(engine, progress_s).run())
            ended = asyncio.ensure_future(engine.run_done.wait())
            waiting = asyncio.ensure_future(done.wait())
            failing = asyncio.ensure_future(refused_everything(engine))  # the server refuses everything: the run ends (exit 3)
            await asyncio.wait((ended, waiting, failing), return_when=asyncio.FIRST_COMPLETED)
            if failing.done() and not waiting.done():
                refusal.append(failing.result())
            for fut in (ended, waiting, failing):
                fut.cancel()
    finally:
        if ticking is not None:
            ticking.cancel()
            await asyncio.gather(ticking, return_exceptions=True)
        reason = f"signal {caught[0].name}" if caught else (stopped[0] if stopped else refusal[0] if refusal else (
            f"fixed-size run done ({engine.finished})" if engine.finished else "quit"))
        live = getattr(engine.book, "live", None)
        if caught and live is not None:  # the step the signal cut short (a preset's runner marks its own)
            live.partial = True
        await engine.stop(reason)
        for sig in SIGNALS:
            loop.remove_signal_handler(sig)
    print_run_summary(engine, so_far=bool(caught))
    if engine.steps or engine.probe_result is not None:  # a signal's too: the step it cut marked partial
        print()
        print(format_step_table(list(engine.steps), engine.break_result, engine.probe_result), flush=True)
    if caught:
        print(f"redline: stopped by {caught[0].name}; all load stopped, {session_saved(cfg.out_dir, engine_loss(engine))}",
              file=sys.stderr)
        return 128 + caught[0].value
    if refusal:
        print(f"redline: error: {refusal[0]}; all load stopped, {session_saved(cfg.out_dir, engine_loss(engine))}", file=sys.stderr)
        return ended_status(engine_loss(engine), EXIT_UNREACHABLE)
    print(f"\nredline: {reason}; session: {cfg.out_dir}", flush=True)
    return ended_status(engine_loss(engine), EXIT_OK)


def _tui(args: argparse.Namespace, cfg: EngineConfig, preset: Preset | None) -> int:
    from ..run_app import run_tui

    compare = None
    if getattr(args, "compare", None) is not None:  # checked before the sim starts too
        from .report import load_compare_session

        compare = load_compare_session(args.compare)
    return run_tui(cfg, args, preset=preset, compare=compare)  # it starts the target (the built-in sim)


# -- redline run PRESET --------------------------------------------------------------------
def cmd_run(args: argparse.Namespace) -> int:
    try:
        preset = api.load_preset(api.resolve_preset(args.preset))
    except api.PresetError as exc:
        raise UsageError(str(exc)) from None
    if getattr(args, "search", False):
        preset = api.as_search(preset, args.max_concurrency)
    gate = run_gate(args, preset)  # a bad spec: one line, exit 2, before any load
    repeats = getattr(args, "repeats", None) or preset.repeats
    if repeats > 1:  # a sweep of one configuration: OUT/sweep.json, OUT/LABEL/r1..rN (issue 44)
        from .sweep_cmd import run_repeats

        return run_repeats(args, preset, repeats, gate)
    cfg = checked_config(args, preset)
    check_result_file(args)
    if not args.headless:
        if getattr(args, "gate", None) or getattr(args, "junit", None):
            flag = "--gate" if getattr(args, "gate", None) else "--junit"
            raise UsageError(f"{flag}: a gate is checked at the end of an unattended run; add --headless")
        return save_result(args, cfg.out_dir, _tui(args, cfg, preset=preset))
    import asyncio

    sim_profile = (args.profile or DEFAULT_SIM_PROFILE) if cfg.url == BUILTIN_SIM else None
    with running_target(cfg, args) as cfg:
        rc = asyncio.run(run_headless(cfg, preset, gate, getattr(args, "junit", None), sim_profile, getattr(args, "progress_s", None)))
    return save_result(args, cfg.out_dir, rc)


def run_gate(args: argparse.Namespace, preset: Preset) -> list[Condition] | None:
    """The gate of `redline run`: --gate, else the preset's [gate]; None without one. Checked
    here, before anything starts (UsageError: one line, exit 2)."""
    from ...engine.report.api import GateError, has_relative, parse_gate

    spec = getattr(args, "gate", None)
    junit = getattr(args, "junit", None)
    try:
        if spec is not None:
            conds = parse_gate(spec)
        elif preset.gate:
            conds = parse_gate(list(preset.gate), flag=f"{preset.name}: [gate]")
        else:
            conds = None
    except GateError as exc:
        raise UsageError(str(exc)) from None
    if conds is not None and has_relative(conds):
        bad = next(c for c in conds if c.relative is not None)
        raise UsageError(f"--gate {bad.text!r}: a change needs a baseline session; compare with "
                         "redline report BASELINE CANDIDATE --gate ...")
    if junit is not None:
        if conds is None:
            raise UsageError(f"--junit {junit}: there is no gate to report (give --gate SPEC or a preset [gate])")
        check_out_file(junit, "--junit", "report.xml")
    return conds


def cmd_presets(args: argparse.Namespace) -> int:
    """Every shipped preset: its description and how long it runs on the built-in sim."""
    found = api.builtin_presets()
    width = max((len(b.name) for b in found), default=0)
    for b in found:
        print(f"{b.name:<{width}}  {b.description}")
        try:
            print(f"{'':<{width}}  {api.duration_text(api.load_preset(b.path), DEFAULT_SIM_PROFILE)}")
        except api.PresetError:
            pass  # its description says it is invalid
    return EXIT_OK


# -- redline sim ---------------------------------------------------------------------------
def cmd_sim(args: argparse.Namespace) -> int:
    return api.run_from_args(args)


# -- sessions: export, report, preset-from -------------------------------------------------
def cmd_export(args: argparse.Namespace) -> int:
    from ...engine.report.api import dropped_text, export_session

    dropped: dict = {}
    try:
        paths = export_session(args.session_dir, args.format, args.output, dropped)
    except api.SessionError as exc:
        raise UsageError(str(exc)) from None
    for path, n in dropped.items():  # what the export left out, one line a file
        print(f"redline: warning: {dropped_text(path, n)}", file=sys.stderr)
    for p in paths:
        print(p)
    return EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    from .report import report_text

    sweeps = [d for d in args.session_dirs if api.load_sweep(d) is not None]
    if sweeps:
        from .sweep_cmd import sweep_report, sweeps_report

        if len(args.session_dirs) == 1:
            return sweep_report(args, args.session_dirs[0])
        return sweeps_report(args, args.session_dirs)  # runs with --repeats (sweeps of one), sweeps, sessions side by side

    png: Path | None = args.png
    if png is not None:
        check_png_target(png)  # before any output: a bad --png is a one-line error, exit 2
    html: Path | None = getattr(args, "html", None)
    if html is not None:
        check_html_target(html)
    gate = report_gate(args)
    try:
        text, sessions = report_text(args.session_dirs)
    except api.SessionError as exc:
        raise UsageError(str(exc)) from None
    if html is not None:  # before any output too
        write_html_page(sessions, html)
    if png is not None:  # before any output too: an error is the only line printed
        write_png_file(sessions, png)
    for d in args.session_dirs:
        log_warnings(d)
    try:
        print(text)
        if len(args.session_dirs) > 1:  # their differences with intervals, the Pareto front, the fingerprints (issue 44)
            more = api.format_answers(api.merged_doc(args.session_dirs))
            if more:
                print(f"\n{more}")
        if not args.no_plot:
            print_curves(sessions)
        if png is not None:
            print(f"\nwrote {png}")
        if html is not None:
            print(f"{'' if png is not None else chr(10)}wrote {html}")
        sys.stdout.flush()
    except BrokenPipeError:  # `redline report ... | head`: the reader has what it wanted
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    if gate is not None:
        return _report_gate_end(args, gate)
    return EXIT_OK


def log_warnings(session_dir: Path) -> None:
    """What `redline report` says, on stderr, of a session log that could not keep every row:
    the loss its writer recorded (meta.json lost_rows, write_error) and each table file's
    partial lines, one line each."""
    from ...engine.report.api import dropped_lines, dropped_text, loss_line, recorded_loss

    loss = recorded_loss(session_dir)
    if loss is not None:
        print(f"redline: warning: {session_dir}: its log lost rows as it ran: {loss_line(*loss)}", file=sys.stderr)
    try:
        dropped = dropped_lines(session_dir)
    except api.SessionError as exc:
        print(f"redline: warning: {exc}", file=sys.stderr)
        return
    for path, n in dropped.items():
        print(f"redline: warning: {dropped_text(path, n)}", file=sys.stderr)


def report_gate(args: argparse.Namespace) -> list | None:
    """`redline report ... --gate SPEC`: checked before anything is read (one line, exit 2).
    A change (tok_s>=-5%) compares two sessions, BASELINE CANDIDATE."""
    from ...engine.report.api import GateError, has_relative, parse_gate

    spec, junit = getattr(args, "gate", None), getattr(args, "junit", None)
    if spec is None:
        if junit is not None:
            raise UsageError(f"--junit {junit}: there is no gate to report (give --gate SPEC)")
        return None
    try:
        conds = parse_gate(spec)
    except GateError as exc:
        raise UsageError(str(exc)) from None
    if has_relative(conds) and len(args.session_dirs) != 2:
        bad = next(c for c in conds if c.relative is not None)
        raise UsageError(f"--gate {bad.text!r}: a change compares two sessions: redline report BASELINE CANDIDATE --gate ... "
                         f"(got {len(args.session_dirs)})")
    if junit is not None:
        check_out_file(junit, "--junit", "report.xml")
    return conds


def _report_gate_end(args: argparse.Namespace, gate: list) -> int:
    """The gate of `redline report`: changes of the candidate (the second session) against
    the baseline (the first), absolute conditions on the last session."""
    from ...engine.report.api import (
        GateSession,
        evaluate,
        failure_line,
        format_outcomes,
        gate_compare as compare,
        junit_xml,
        passed,
        workload_line,
    )

    try:
        sessions = [GateSession.load(d) for d in args.session_dirs]
    except api.SessionError as exc:
        raise UsageError(str(exc)) from None
    cand = sessions[-1]
    if len(sessions) == 2:
        base = sessions[0]
        if base.label == cand.label:
            base.label, cand.label = f"{base.label} ({args.session_dirs[0]})", f"{cand.label} ({args.session_dirs[1]})"
        outcomes = compare(gate, base, cand)
        title = f"gate: {cand.label} against baseline {base.label}"
        # comparable, or said so: both workloads named, one warning line when they differ
        ahead = workload_line([base.session, cand.session], [f"baseline {base.label}", f"candidate {cand.label}"])
    else:
        outcomes = evaluate(gate, cand)
        title, ahead = f"gate: {cand.label}", None
    print()
    if ahead:
        print(ahead)
    print(format_outcomes(outcomes, title))
    rc = EXIT_OK
    junit: Path | None = getattr(args, "junit", None)
    if junit is not None:
        try:
            junit.write_text(junit_xml(outcomes, title, workload=ahead), encoding="utf-8")
        except OSError as exc:
            _err(f"--junit {junit}: cannot write: {exc.strerror or exc}")
            rc = EXIT_BAD_INPUT
    if not passed(outcomes):
        print(f"redline: {failure_line(outcomes)}", file=sys.stderr, flush=True)
        return EXIT_GATE_FAILED
    return rc


def cmd_preset_from(args: argparse.Namespace) -> int:
    out: Path = args.output
    try:
        from ...engine.report.api import preset_from_session

        replay = preset_from_session(args.session_dir, out.stem or "replay")
    except api.PresetError as exc:
        raise UsageError(str(exc)) from None
    try:
        out.write_text(replay.toml, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"-o {str(out)!r}: cannot write: {exc.strerror or exc}") from None
    from ...engine.report.api import steps_text

    line = f"wrote {out}: {steps_text(replay.steps, replay.seconds - replay.probe_s, replay.probe_s)}"
    if replay.left_out_s >= 0.5:
        line += f" ({replay.left_out_s:.0f} s paused or stopped left out)"
    print(line)
    return EXIT_OK
