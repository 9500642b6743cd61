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
from .errors import EXIT_BAD_INPUT, EXIT_GATE_FAILED, EXIT_OK, EXIT_UNREACHABLE, UsageError
from .launch import DEFAULT_PROFILE as DEFAULT_SIM_PROFILE, checked_config, running_target, session_saved

if TYPE_CHECKING:
    from ...engine.api import Preset

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _err(text: str) -> None:
    print(f"redline: error: {text}", file=sys.stderr)


# -- redline (no command): the TUI ---------------------------------------------------------
def cmd_tui(args: argparse.Namespace) -> int:
    cfg = checked_config(args)
    if getattr(args, "headless", False):
        import asyncio  # here, not at the top: `redline --help` and the TUI's first frame do not wait for it

        with running_target(cfg, args) as cfg:
            return asyncio.run(_held(cfg))
    return _tui(args, cfg, preset=None)


async def _start_engine(engine, futures: list, caught: list) -> int | None:
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


async def _held(cfg) -> int:
    """`redline --headless [--control PORT]`: hold the starting load until an API call changes
    it; POST /v1/stop ends the session (exit 0), a signal too (exit 128+N)."""
    import asyncio

    from ...engine.api import Engine, execute, format_step_table

    engine = Engine(cfg)
    engine.dispatch = execute
    engine.events.on_warning = _warning_printer()
    loop = asyncio.get_running_loop()
    caught: list[signal.Signals] = []
    stopped: list[str] = []
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

    engine.on_stop_request = on_stop_request
    for sig in SIGNALS:
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        try:
            refused = await _start_engine(engine, starting, caught)
            if refused is not None:
                return refused
        except asyncio.CancelledError:
            if not caught:
                raise
        starting.clear()
        if not caught:
            ctl = f"control {engine.control.url}" if engine.control is not None else "no --control: a signal ends it"
            print(f"redline: holding {engine.load_text} against {_against(engine)}; {ctl}; session {cfg.out_dir}", flush=True)
            await done.wait()
    finally:
        reason = f"signal {caught[0].name}" if caught else (stopped[0] if stopped else "quit")
        await engine.stop(reason)
        for sig in SIGNALS:
            loop.remove_signal_handler(sig)
    if caught:
        print(f"redline: stopped by {caught[0].name}; all load stopped, {session_saved(cfg.out_dir)}", file=sys.stderr)
        return 128 + caught[0].value
    if engine.steps or engine.probe_result is not None:
        print()
        print(format_step_table(list(engine.steps), engine.break_result, engine.probe_result))
    print(f"\nredline: {reason}; session: {cfg.out_dir}", flush=True)
    return EXIT_OK


def _tui(args: argparse.Namespace, cfg, preset: Preset | None) -> int:
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
    cfg = checked_config(args, preset)
    if not args.headless:
        if getattr(args, "gate", None) or getattr(args, "junit", None):
            flag = "--gate" if getattr(args, "gate", None) else "--junit"
            raise UsageError(f"{flag}: a gate is checked at the end of an unattended run; add --headless")
        return _tui(args, cfg, preset=preset)
    import asyncio

    from .launch import BUILTIN_SIM

    sim_profile = (args.profile or DEFAULT_SIM_PROFILE) if cfg.url == BUILTIN_SIM else None
    with running_target(cfg, args) as cfg:
        return asyncio.run(_headless(cfg, preset, gate, getattr(args, "junit", None), sim_profile))


def run_gate(args: argparse.Namespace, preset: Preset) -> list | None:
    """The gate of `redline run`: --gate, else the preset's [gate]; None without one. Checked
    here, before anything starts (UsageError: one line, exit 2)."""
    from ...engine.report.api import GateError, has_relative, parse_gate

    spec = getattr(args, "gate", None)
    junit = getattr(args, "junit", None)
    try:
        if spec is not None:
            conds = parse_gate(spec)
        elif getattr(preset, "gate", None):
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
        _check_out_file(junit, "--junit", "report.xml")
    return conds


def _check_out_file(path: Path, flag: str, example: str) -> None:
    parent = path.parent if str(path.parent) else Path(".")
    if path.exists() and path.is_dir():
        raise UsageError(f"{flag} {path}: is a directory; expected a file name such as {example}")
    if not parent.is_dir():
        raise UsageError(f"{flag} {path}: directory {parent} does not exist")


async def _headless(cfg, preset: Preset, gate: list | None = None, junit: Path | None = None, sim_profile: str | None = None) -> int:
    import asyncio

    from ...engine.api import Engine, execute, format_step_table, knee_from_summary, run_preset

    engine = Engine(cfg)
    engine.dispatch = execute
    engine.events.on_warning = _warning_printer()
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

    engine.on_stop_request = on_stop_request

    for sig in SIGNALS:  # before start-up: a signal during detection must close the log too
        loop.add_signal_handler(sig, on_signal, sig)
    out = None
    try:
        refused = await _start_engine(engine, work, caught)
        if refused is not None:
            return refused
        if cfg.insecure:
            print("redline: warning: TLS certificate verification is OFF (--insecure)", file=sys.stderr, flush=True)
        print(f"redline: preset {preset.name} against {_against(engine)}; "
              f"{api.duration_text(preset, sim_profile)}; session {cfg.out_dir}", flush=True)
        work.append(asyncio.ensure_future(run_preset(engine, preset, on_line=lambda s: print(s, flush=True))))
        if cfg.control is not None:  # an API command that takes the wheel cancels the preset
            engine.driver = work[-1]
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
        await engine.stop(reason)
        for sig in SIGNALS:
            loop.remove_signal_handler(sig)
    if caught:
        print(f"redline: stopped by {caught[0].name}; all load stopped, {session_saved(cfg.out_dir)}", file=sys.stderr)
        return 128 + caught[0].value
    from ...engine.api import RunOutcome, summary_knee

    # one record: the table prints each step's final figures (completed by requests that ended
    # after its close), as summary.json, `redline report` and the HTML page read them
    out = RunOutcome(steps=list(engine.steps), break_result=engine.break_result, probe=engine.probe_result,
                     search=out.search if out is not None else engine.book.search)
    if engine.session is not None:  # what summary.json says of each step (engine/session/writer.py)
        for st in [*out.steps, *([out.probe] if out.probe is not None else [])]:
            st.client_limited = st.client_limited or engine.session.client_limited(st.t_start, st.duration_s)
    print()
    print(format_step_table(out.steps, out.break_result, out.probe,
                            knee_from_summary(summary_knee(out.steps, out.search, engine.book.plateau_gain))))
    if cfg.more_urls and cfg.out_dir is not None:
        from .report import session_targets_table

        table = session_targets_table(cfg.out_dir)
        if table:
            print()
            print(table)
    print(f"\nsession: {cfg.out_dir}")
    if gate is not None:
        return _run_gate_end(cfg, out, gate, junit)
    return EXIT_OK


def _run_gate_end(cfg, out, gate: list, junit: Path | None) -> int:
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
            session = GateSession.load(cfg.out_dir)
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


def _against(engine) -> str:
    """The banner's target: `URL (kind, model)`, or with several, each URL and its weight."""
    tgt = engine.target
    states = getattr(engine, "targets", None) or []
    if len(states) < 2:
        return f"{tgt.url} ({tgt.info.kind}, {tgt.model or 'model ?'})"
    urls = ", ".join(f"{st.target.url} (weight {st.weight:g})" for st in states)
    return f"{len(states)} targets ({tgt.info.kind}, {tgt.model or 'model ?'}): {urls}"


# -- redline presets -----------------------------------------------------------------------
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
    from ...engine.report.api import export_session

    try:
        paths = export_session(args.session_dir, args.format, args.output)
    except api.SessionError as exc:
        raise UsageError(str(exc)) from None
    for p in paths:
        print(p)
    return EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    from .report import report_text

    png: Path | None = args.png
    if png is not None:
        _check_png_target(png)  # before any output: a bad --png is a one-line error, exit 2
    html: Path | None = getattr(args, "html", None)
    if html is not None:
        _check_html_target(html)
    gate = report_gate(args)
    try:
        text, sessions = report_text(args.session_dirs)
    except api.SessionError as exc:
        raise UsageError(str(exc)) from None
    if html is not None:  # before any output too
        from ...engine.report.api import HtmlUnavailable, collect, write_html

        try:
            write_html([collect(s.path, s) for s in sessions], html)
        except HtmlUnavailable as exc:
            raise UsageError(f"--html {html}: {exc}") from None
        except OSError as exc:
            raise UsageError(f"--html {html}: cannot write: {exc.strerror or exc}") from None
    if png is not None:  # before any output too: an error is the only line printed
        from .plots import PngUnavailable, write_png

        try:
            write_png(sessions, png)
        except PngUnavailable as exc:
            raise UsageError(str(exc)) from None
        except OSError as exc:
            raise UsageError(f"--png {png}: cannot write: {exc.strerror or exc}") from None
    try:
        print(text)
        if not args.no_plot:
            from .plots import terminal_curves

            w, h = _plot_size()
            print()
            print(terminal_curves(sessions, w, h, color=_use_color()))
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
        _check_out_file(junit, "--junit", "report.xml")
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
    else:
        outcomes = evaluate(gate, cand)
        title = f"gate: {cand.label}"
    print()
    print(format_outcomes(outcomes, title))
    rc = EXIT_OK
    junit: Path | None = getattr(args, "junit", None)
    if junit is not None:
        try:
            junit.write_text(junit_xml(outcomes, title), encoding="utf-8")
        except OSError as exc:
            _err(f"--junit {junit}: cannot write: {exc.strerror or exc}")
            rc = EXIT_BAD_INPUT
    if not passed(outcomes):
        print(f"redline: {failure_line(outcomes)}", file=sys.stderr, flush=True)
        return EXIT_GATE_FAILED
    return rc


def _check_html_target(path: Path) -> None:
    from ...engine.report.api import HTML_EXTRA_HINT, html_available

    if not html_available():
        raise UsageError(f"--html {path}: needs plotly, the html extra: {HTML_EXTRA_HINT}")
    _check_out_file(path, "--html", "report.html")


def _check_png_target(path: Path) -> None:
    from .plots import PNG_EXTRA_HINT, png_available

    if not png_available():
        raise UsageError(f"--png {path}: needs matplotlib, the png extra: {PNG_EXTRA_HINT}")
    parent = path.parent if str(path.parent) else Path(".")
    if path.exists() and path.is_dir():
        raise UsageError(f"--png {path}: is a directory; expected a file name such as curves.png")
    if not parent.is_dir():
        raise UsageError(f"--png {path}: directory {parent} does not exist")


def _use_color() -> bool:
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def _plot_size() -> tuple[int, int]:
    if not sys.stdout.isatty():
        return 80, 24
    import shutil

    cols = shutil.get_terminal_size((80, 24)).columns
    return max(60, min(cols, 160)), 24


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
