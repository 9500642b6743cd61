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
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ...engine import api
from ..exits import EXIT_GATE_FAILED, EXIT_OK, EXIT_ROWS_LOST
from .errors import UsageError

if TYPE_CHECKING:
    from ...engine.api import EngineConfig, Preset, SweepConfig, SweepGate, SweepSpec
    from ...engine.report.api import Condition

DEFAULT_PRESET = "until-it-breaks"


def sweep_spec(args: argparse.Namespace) -> SweepSpec:
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
                           ("ready_timeout", "ready_timeout_s"), ("cooldown", "cooldown_s"), ("repeats", "repeats"),
                           ("gpus", "gpus")):
            v = getattr(args, name, None)
            if v is not None:
                setattr(spec, attr, v)
        if getattr(args, "restart_each", False):
            spec.restart_each = True
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
    if getattr(args, "repeats", None) is None and preset.repeats > 1:
        spec.repeats = preset.repeats  # the preset's [ramp] repeats, unless --repeats says
    configs = spec.expand(api.free_port)
    gate = _gate(args.gate)
    if args.dry_run:
        times = f", {spec.repeats} repeats each" + (" (the server relaunched before each)" if spec.restart_each else "") if spec.repeats > 1 else ""
        print(f"redline sweep: {len(configs)} configurations, preset {preset.name}{times}")
        for i, c in enumerate(configs, 1):
            print(f"  {i}. {c.label}: {c.describe()}" + (f"  ->  {c.url}" if c.command else ""))
        return EXIT_OK
    if not args.headless and not _on_a_terminal():
        raise UsageError("redline sweep: no terminal to draw on (stdin and stderr must be one); add --headless "
                         "(each configuration's progress, step lines and the comparison are printed)")
    out = _out_dir(args)
    digest = api.preset_digest(preset)
    if getattr(args, "resume", False):
        try:
            api.check_resume(out, spec, configs, digest)  # the recorded sweep is this one: one line, exit 2
        except api.SweepError as exc:
            raise UsageError(str(exc)) from None
    for c in configs:  # every configuration's checks, before any server starts (one kept or moved aside by --resume: its own)
        if not (out / c.label).exists():
            _config(args, c, out / c.label, preset, None)
    return run_configs(args, spec, configs, preset, out, gate, digest)


def _out_dir(args: argparse.Namespace) -> Path:
    """--out: a new (or empty) directory; with --resume, the stopped sweep's."""
    resume = getattr(args, "resume", False)
    if resume and args.out is None:
        raise UsageError("--resume: give the --out of the sweep to resume (the directory holding its sweep.json)")
    out = args.out if args.out is not None else Path("redline-sessions") / time.strftime("sweep-%Y%m%dT%H%M%SZ", time.gmtime())
    if not resume and out.exists() and any(out.iterdir()):
        hint = " (it holds a sweep: add --resume to go on where it stopped)" if (out / api.SWEEP_FILE).is_file() else ""
        raise UsageError(f"--out {out}: not empty; a sweep writes each configuration's session under it (give a new directory){hint}")
    return out


def run_configs(args: argparse.Namespace, spec: SweepSpec, configs: list[SweepConfig], preset: Preset, out: Path,
                gate: SweepGate | None, digest: str | None = None) -> int:
    """The sweep's configurations on a terminal or headless, then the gate; the exit status."""
    resume = bool(getattr(args, "resume", False))
    try:
        if not args.headless:
            from ..sweep_view import run_sweep_tui

            def make_config(c: SweepConfig, session: Path, startup_s: float | None, k: int = 1) -> EngineConfig:
                return _config(args, c, session, preset, startup_s, k, spec.repeats)

            rc = run_sweep_tui(args, spec, configs, preset, out, make_config, digest=digest, resume=resume)
            if rc:
                return rc
            doc = _load(out)
            return _rows_lost(doc, _check_gate(gate, doc) if gate is not None else EXIT_OK)
        return asyncio.run(_sweep(args, spec, configs, preset, out, gate, digest, resume))
    except api.SweepError as exc:
        raise UsageError(str(exc)) from None


def run_repeats(args: argparse.Namespace, preset: Preset, repeats: int, gate: list[Condition] | None) -> int:
    """`redline run PRESET --repeats N`: the preset N times against one server (the built-in
    sim started once for all), as a sweep of one configuration labelled --label (else the
    preset's name): OUT/sweep.json and OUT/LABEL/r1..rN, `redline report OUT` its intervals."""
    import re

    from ..builtin_sim import running_target
    from .launch import checked_config

    if gate is not None or getattr(args, "junit", None) is not None:
        raise UsageError("--repeats: a gate judges one run; gate the repeats' sessions one by one "
                         "(redline report OUT/LABEL/r1 --gate ...) or a sweep's configurations (redline report OUT --gate ...)")
    if getattr(args, "url", None) and len(args.url) > 1:
        raise UsageError("--repeats: one --url (the server each repeat runs against); for several servers: redline sweep --url A --url B --repeats N")
    if not args.headless and not _on_a_terminal():
        raise UsageError("redline run --repeats: no terminal to draw on (stdin and stderr must be one); add --headless")
    label = re.sub(r"[^A-Za-z0-9_.-]+", "_", args.label or preset.name) or "run"
    out = args.out if args.out is not None else Path("redline-sessions") / time.strftime(f"{label}-%Y%m%dT%H%M%SZ", time.gmtime())
    if out.exists() and any(out.iterdir()):
        raise UsageError(f"--out {out}: not empty; --repeats writes each repeat's session under it (give a new directory)")
    cfg = checked_config(copy.copy(args), preset)  # every value checked before the sim starts
    with running_target(cfg, args) as cfg:
        spec = api.SweepSpec(urls=[cfg.url], preset=preset.name, repeats=repeats, gpus=getattr(args, "gpus", None))
        config = api.SweepConfig({"url": cfg.url}, label, (), cfg.url)
        a = copy.copy(args)
        a.label, a.profile = label, None  # the sim (if built in) runs already: each repeat is a run against its URL
        return run_configs(a, spec, [config], preset, out, None, api.preset_digest(preset))


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


def _check_gate(gate: SweepGate, doc: dict) -> int:
    lines, ok = api.check_sweep(gate, doc)
    print()
    print("\n".join(lines))
    return EXIT_OK if ok else EXIT_GATE_FAILED


def _gate(text: str | None) -> SweepGate | None:
    if text is None:
        return None
    try:
        return api.parse_sweep_gate(text)
    except api.SweepGateError as exc:
        raise UsageError(str(exc)) from None


def _config(args: argparse.Namespace, c: SweepConfig, session: Path, preset: Preset, startup_s: float | None, repeat: int = 1,
            repeats: int = 1) -> EngineConfig:
    """`redline run PRESET --headless --url URL --out OUT/label --label LABEL`'s config. Repeat
    k's workload seed is the run's + k - 1: each repeat its own prompts (a server kept up
    between repeats finds none of the last one's in its prefix cache), every configuration
    the same ones at the same repeat."""
    import dataclasses

    from .launch import checked_config, seed_of

    a = copy.copy(args)
    a.url, a.out, a.label = [c.url], session, c.label
    a.argv = list(getattr(args, "argv", ["redline", "sweep"]))
    a.seed = seed_of(args, preset) + repeat - 1
    cfg = checked_config(a, preset)
    extra = {"sweep": {"label": c.label, "values": dict(c.values), "command": list(c.command), "url": c.url, "startup_s": startup_s,
                       **({"repeat": repeat, "repeats": repeats} if repeats > 1 else {})}}
    return dataclasses.replace(cfg, meta_extra=extra)


async def _sweep(args: argparse.Namespace, spec: SweepSpec, configs: list[SweepConfig], preset: Preset, out: Path,
                 gate: SweepGate | None, digest: str | None = None, resume: bool = False) -> int:
    from .headless import SIGNALS, run_headless

    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    caught: list = []
    lost: list[str] = []  # configurations whose run exited EXIT_ROWS_LOST

    def on_signal(sig: signal.Signals) -> None:
        caught.append(sig)
        assert task is not None
        task.cancel()

    def install() -> None:
        for sig in SIGNALS:
            loop.add_signal_handler(sig, on_signal, sig)

    def uninstall() -> None:
        for sig in SIGNALS:
            loop.remove_signal_handler(sig)

    async def run_one(c: SweepConfig, session: Path, startup_s: float | None, k: int = 1) -> int:
        cfg = _config(args, c, session, preset, startup_s, k, spec.repeats)
        uninstall()  # the run's own handlers: a signal ends it as it ends `redline run`
        try:
            rc = await run_headless(cfg, preset)
        finally:
            install()
        if rc == EXIT_ROWS_LOST:  # said in its sweep.json entry; the sweep goes on (and exits 5)
            lost.append(c.label)
        return rc

    install()
    times = f", {spec.repeats} repeats each" if spec.repeats > 1 else ""
    what = f"{len(configs)} configurations" if len(configs) != 1 else "1 configuration"
    print(f"redline: sweep of {what} ({', '.join(c.label for c in configs)}){times}, preset {preset.name}, into {out}", flush=True)
    try:
        outcome = await api.run_sweep(spec, out, run_one, on_line=lambda s: print(s, flush=True), configs=configs,
                                      estimate_s=estimate_s(preset), digest=digest, resume=resume)
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


def estimate_s(preset: Preset) -> float:
    """One run of the preset, if no stop rule fires: the middle of its bounds."""
    lo, hi = preset.duration_bounds()
    return (lo + hi) / 2.0


def sweep_report(args: argparse.Namespace, out: Path) -> int:
    """`redline report OUT` of a sweep: its table, then the sessions of the configurations that
    ran side by side (the comparison, the overlaid curves, `--html` one page), `--gate` on it."""
    from ...engine.report import api as reports
    from .report import format_comparison
    from .terminal import check_html_target, check_png_target, print_curves, write_html_page, write_png_file

    doc = _load(out)
    gate = _gate(args.gate)
    if getattr(args, "junit", None) is not None:
        raise UsageError(f"--junit {args.junit}: a sweep's gate has no JUnit report; its PASS/FAIL lines and exit "
                         "status 4 say the verdict (or gate each configuration's session: redline report OUT/LABEL --gate ... --junit FILE)")
    html, png = getattr(args, "html", None), getattr(args, "png", None)
    if html is not None:
        check_html_target(html)
    if png is not None:
        check_png_target(png)
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


def sweeps_report(args: argparse.Namespace, dirs: list[Path]) -> int:
    """`redline report A B ...` where one or more is a sweep (`redline run --repeats N` writes
    one of a single configuration): every configuration of each, and each session, compared
    as one sweep's are (labels made unique in order). --gate, --html and --png take one sweep."""
    for flag in ("gate", "html", "png", "junit"):
        if getattr(args, flag, None) is not None:
            raise UsageError(f"--{flag}: takes one sweep (redline report OUT --{flag} ...) or sessions only; "
                             f"got {len(dirs)} directories, a sweep among them")
    print(api.format_sweep(api.merged_doc(dirs)))
    return EXIT_OK


def _load(out: Path) -> dict:
    doc = api.load_sweep(out)
    if doc is None:
        raise UsageError(f"{out}: no sweep.json")
    return doc


__all__ = ["DEFAULT_PRESET", "cmd_sweep", "sweep_report", "sweeps_report"]
