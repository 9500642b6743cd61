"""`redline sweep`: the command line half of a sweep (the engine half: engine/sweep/). Its
flags and checks (one line, exit 2, before anything starts), `--dry-run`, and each
configuration's run exactly as `redline run PRESET --headless` does, into `OUT/<label>/`.

A signal while a preset runs ends that run as `redline run` ends it (its session saved); one
while a server starts or stops ends the sweep there; either way the current server's whole
process group is stopped, every finished configuration kept in `OUT/sweep.json`, and the exit
status is 130 / 143 / 129.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import sys
import time
from pathlib import Path

from ...engine import api
from .errors import EXIT_GATE_FAILED, EXIT_OK, EXIT_ROWS_LOST, UsageError

DEFAULT_PRESET = "until-it-breaks"


def sweep_spec(args: argparse.Namespace):
    """The sweep the flags (and a [sweep] file) describe, checked; UsageError otherwise."""
    SweepError, SweepSpec, load_sweep_file, spec_from_args = api.SweepError, api.SweepSpec, api.load_sweep_file, api.spec_from_args

    try:
        spec = load_sweep_file(args.file) if args.file is not None else SweepSpec()
        flags = spec_from_args(args.grid)
        if args.serve is not None:
            spec.serve = args.serve
        if args.grid:  # the flags' grid replaces the file's
            spec.configs, spec.grid = flags.configs, flags.grid
        if args.url:
            spec.urls = list(args.url)
        for name, attr in (("preset", "preset"), ("port", "port"), ("url_template", "url_template"),
                           ("ready_timeout", "ready_timeout_s"), ("cooldown", "cooldown_s")):
            v = getattr(args, name)
            if v is not None:
                setattr(spec, attr, v)
        spec.check()
    except SweepError as exc:
        raise UsageError(str(exc)) from None
    return spec


def cmd_sweep(args: argparse.Namespace) -> int:
    spec = sweep_spec(args)
    name = spec.preset or DEFAULT_PRESET
    try:
        preset = api.load_preset(api.resolve_preset(name))
    except api.PresetError as exc:
        raise UsageError(str(exc)) from None
    spec.preset = preset.name  # sweep.json names the preset run
    configs = spec.expand(api.free_port)
    gate = _gate(args.gate)
    if args.dry_run:
        print(f"redline sweep: {len(configs)} configurations, preset {preset.name}")
        for i, c in enumerate(configs, 1):
            print(f"  {i}. {c.label}: {c.describe()}" + (f"  ->  {c.url}" if c.command else ""))
        return EXIT_OK
    if not args.headless and not _on_a_terminal():
        raise UsageError("redline sweep: no terminal to draw on (stdin and stderr must be one); add --headless "
                         "(each configuration's progress, step lines and the comparison are printed)")
    out = args.out if args.out is not None else Path("redline-sessions") / time.strftime("sweep-%Y%m%dT%H%M%SZ", time.gmtime())
    if out.exists() and any(out.iterdir()):
        raise UsageError(f"--out {out}: not empty; a sweep writes each configuration's session under it (give a new directory)")
    for c in configs:  # every configuration's checks, before any server starts
        _config(args, c, out / c.label, preset, None)
    if not args.headless:
        from ..sweep_view import run_sweep_tui

        rc = run_sweep_tui(args, spec, configs, preset, out, lambda c, session, startup_s: _config(args, c, session, preset, startup_s))
        if rc:
            return rc
        doc = _load(out)
        return _rows_lost(doc, _check_gate(gate, doc) if gate is not None else EXIT_OK)
    return asyncio.run(_sweep(args, spec, configs, preset, out, gate))


def _rows_lost(doc: dict, rc: int, lost: tuple[str, ...] = ()) -> int:
    """The sweep's exit status once every configuration ran: `rc` (a failed gate's 4), else
    EXIT_ROWS_LOST when a configuration's session log lost rows (its sweep.json entry's
    `write_error`, or its run's exit 5: `lost`, labels), each said in one line."""
    said = []
    for e in doc.get("configurations") or []:
        if isinstance(e, dict) and e.get("write_error"):
            said.append(e.get("label"))
            print(f"redline: sweep {e.get('label')}: session saved, {api.loss_line(e.get('lost_rows') or 0, e['write_error'])}",
                  file=sys.stderr, flush=True)
    for label in lost:
        if label not in said:
            said.append(label)
            print(f"redline: sweep {label}: session saved with rows lost (its run exited {EXIT_ROWS_LOST})", file=sys.stderr, flush=True)
    return rc or (EXIT_ROWS_LOST if said else EXIT_OK)


def _on_a_terminal() -> bool:
    from ..run_app import on_a_terminal

    return on_a_terminal()


def _check_gate(gate, doc: dict) -> int:
    lines, ok = api.check_sweep(gate, doc)
    print()
    print("\n".join(lines))
    return EXIT_OK if ok else EXIT_GATE_FAILED


def _gate(text: str | None):
    if text is None:
        return None
    try:
        return api.parse_sweep_gate(text)
    except api.SweepGateError as exc:
        raise UsageError(str(exc)) from None


def _config(args: argparse.Namespace, c, session: Path, preset, startup_s: float | None):
    """`redline run PRESET --headless --url URL --out OUT/label --label LABEL`'s config."""
    import dataclasses

    from .launch import checked_config

    a = copy.copy(args)
    a.url, a.out, a.label = [c.url], session, c.label
    a.argv = list(getattr(args, "argv", ["redline", "sweep"]))
    cfg = checked_config(a, preset)
    extra = {"sweep": {"label": c.label, "values": dict(c.values), "command": list(c.command), "url": c.url, "startup_s": startup_s}}
    return dataclasses.replace(cfg, meta_extra=extra)


async def _sweep(args, spec, configs, preset, out: Path, gate) -> int:
    from .headless import SIGNALS, run_headless

    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    caught: list = []
    lost: list[str] = []  # configurations whose run exited EXIT_ROWS_LOST

    def on_signal(sig) -> None:
        caught.append(sig)
        assert task is not None
        task.cancel()

    def install() -> None:
        for sig in SIGNALS:
            loop.add_signal_handler(sig, on_signal, sig)

    def uninstall() -> None:
        for sig in SIGNALS:
            loop.remove_signal_handler(sig)

    async def run_one(c, session: Path, startup_s: float | None) -> int:
        cfg = _config(args, c, session, preset, startup_s)
        uninstall()  # the run's own handlers: a signal ends it as it ends `redline run`
        try:
            rc = await run_headless(cfg, preset)
        finally:
            install()
        if rc == EXIT_ROWS_LOST:  # said in its sweep.json entry; the sweep goes on (and exits 5)
            lost.append(c.label)
        return rc

    install()
    print(f"redline: sweep of {len(configs)} configurations ({', '.join(c.label for c in configs)}), preset {preset.name}, into {out}", flush=True)
    try:
        outcome = await api.run_sweep(spec, out, run_one, on_line=lambda s: print(s, flush=True), configs=configs)
    except asyncio.CancelledError:
        if not caught:
            raise
        print(f"redline: sweep stopped by {caught[0].name}; every finished configuration is in {out / 'sweep.json'}", file=sys.stderr)
        return 128 + caught[0].value
    finally:
        uninstall()
    doc = _load(out)
    print()
    print(api.format_sweep(doc))
    if outcome.status:
        print(f"redline: sweep stopped; every finished configuration is in {out / 'sweep.json'}", file=sys.stderr)
        return outcome.status
    return _rows_lost(doc, _check_gate(gate, doc) if gate is not None else EXIT_OK, tuple(lost))


def sweep_report(args: argparse.Namespace, out: Path) -> int:
    """`redline report OUT` of a sweep: its table, then the sessions of the configurations that
    ran side by side (the comparison, the overlaid curves, `--html` one page), `--gate` on it."""
    from ...engine.report import api as reports
    from .report import format_comparison
    from .terminal import _check_html_target, _check_png_target, print_curves, write_html_page, write_png_file

    doc = _load(out)
    gate = _gate(args.gate)
    if getattr(args, "junit", None) is not None:
        raise UsageError(f"--junit {args.junit}: a sweep's gate has no JUnit report; its PASS/FAIL lines and exit "
                         "status 4 say the verdict (or gate each configuration's session: redline report OUT/LABEL --gate ... --junit FILE)")
    html, png = getattr(args, "html", None), getattr(args, "png", None)
    if html is not None:
        _check_html_target(html)
    if png is not None:
        _check_png_target(png)
    dirs = [Path(e["session_dir"]) for e in doc["configurations"]
            if isinstance(e, dict) and e.get("session_dir") and (Path(e["session_dir"]) / reports.SUMMARY).is_file()]
    try:
        sessions = reports.load_sessions(dirs) if dirs else []
    except reports.SessionError as exc:
        raise UsageError(str(exc)) from None
    if html is not None and sessions:
        write_html_page(sessions, html)
    if png is not None and sessions:
        write_png_file(sessions, png)
    print(api.format_sweep(doc))
    if sessions:
        print()
        print(format_comparison(sessions))
        if not args.no_plot:
            print_curves(sessions)
    for path in (png, html):
        if path is not None and sessions:
            print(f"\nwrote {path}")
    if gate is not None:
        return _check_gate(gate, doc)
    return EXIT_OK


def _load(out: Path) -> dict:
    doc = api.load_sweep(out)
    if doc is None:
        raise UsageError(f"{out}: no sweep.json")
    return doc


__all__ = ["DEFAULT_PRESET", "cmd_sweep", "sweep_report"]
