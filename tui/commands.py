"""What each `redline` command does once its arguments parsed."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path

from redline.engine.session import SessionError

from .errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_UNREACHABLE, UsageError
from .launch import (
    check_args,
    engine_config,
    target_url,
    workload_from_args,
    workload_from_preset,
)

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _err(text: str) -> None:
    print(f"redline: error: {text}", file=sys.stderr)


def _load_preset(path: str):
    from redline.engine.builtin_presets import resolve_preset
    from redline.engine.preset import PresetError, load_preset

    try:
        return load_preset(resolve_preset(path))
    except PresetError as exc:
        raise UsageError(str(exc)) from None


# -- run (headless) ------------------------------------------------------------------------
def cmd_run(args: argparse.Namespace) -> int:
    preset = _load_preset(args.preset)
    check_args(args)
    workload = workload_from_preset(preset, args.seed)
    if args.url is None and preset.target.url is None and args.profile is None:
        pass  # the built-in sim, healthy profile
    if not args.headless:
        return cmd_tui(args, preset=preset)
    with target_url(args, preset.target.url) as url:
        cfg = engine_config(
            args,
            url,
            workload,
            concurrency=preset.ramp.concurrency[0],
            api=args.api or preset.workload.api,
            model=args.model or preset.workload.model,
            live_steps=False,
        )
        return asyncio.run(_headless(cfg, preset))


async def _headless(cfg, preset) -> int:
    from redline.engine.core import Engine
    from redline.engine.runner import run_preset
    from redline.engine.target import TargetError, TargetUnreachable

    engine = Engine(cfg)
    loop = asyncio.get_running_loop()
    caught: list[signal.Signals] = []
    work: list[asyncio.Future] = []  # what a signal cancels: start-up, then the preset

    def on_signal(sig: signal.Signals) -> None:
        caught.append(sig)
        for fut in work:
            fut.cancel()

    for sig in SIGNALS:  # before start-up: a signal during detection must close the log too
        loop.add_signal_handler(sig, on_signal, sig)
    out = None
    try:
        try:
            work.append(asyncio.ensure_future(engine.start()))
            await work[-1]
        except (TargetError, SessionError) as exc:
            _err(str(exc))
            return EXIT_BAD_INPUT
        except TargetUnreachable as exc:
            _err(str(exc))
            return EXIT_UNREACHABLE
        if cfg.insecure:
            print("redline: warning: TLS certificate verification is OFF (--insecure)", file=sys.stderr, flush=True)
        lo, hi = preset.duration_bounds()
        print(f"redline: preset {preset.name} against {engine.target.url} ({engine.target.info.kind}, {engine.target.model}); "
              f"{lo:.0f}-{hi:.0f} s unless a rule fires; session {cfg.out_dir}", flush=True)
        work.append(asyncio.ensure_future(run_preset(engine, preset, on_line=lambda s: print(s, flush=True))))
        out = await work[-1]
    except asyncio.CancelledError:
        if not caught:
            raise
    finally:
        reason = f"signal {caught[0].name}" if caught else "preset finished"
        await engine.stop(reason)
        for sig in SIGNALS:
            loop.remove_signal_handler(sig)
    if caught:
        print(f"redline: stopped by {caught[0].name}; all load stopped, session saved in {cfg.out_dir}", file=sys.stderr)
        return 128 + caught[0].value
    print()
    from redline.engine.session import format_step_table

    print(format_step_table(out.steps, out.break_result, out.probe))
    print(f"\nsession: {cfg.out_dir}")
    return EXIT_OK


# -- the TUI -------------------------------------------------------------------------------
def cmd_tui(args: argparse.Namespace, preset=None) -> int:
    check_args(args)
    if preset is not None:
        workload = workload_from_preset(preset, args.seed)
        concurrency = preset.ramp.concurrency[0]
        api = args.api or preset.workload.api
        model = args.model or preset.workload.model
        preset_url = preset.target.url
    else:
        workload = workload_from_args(args)
        concurrency = args.concurrency
        api, model, preset_url = args.api, args.model, None
    from .report_cmd import load_compare_session
    from .run_app import run_tui

    compare = load_compare_session(getattr(args, "compare", None))
    with target_url(args, preset_url) as url:
        cfg = engine_config(args, url, workload, concurrency=concurrency, api=api, model=model, live_steps=preset is None)
        return run_tui(cfg, args, preset=preset, compare=compare)


def cmd_presets(args: argparse.Namespace) -> int:
    from redline.engine.builtin_presets import builtin_presets

    found = builtin_presets()
    width = max((len(b.name) for b in found), default=0)
    for b in found:
        print(f"{b.name:<{width}}  {b.description}")
    return EXIT_OK


# -- sessions ------------------------------------------------------------------------------
def cmd_export(args: argparse.Namespace) -> int:
    from redline.engine.session import export_session

    try:
        paths = export_session(args.session_dir, args.format, args.output)
    except SessionError as exc:
        raise UsageError(str(exc)) from None
    for p in paths:
        print(p)
    return EXIT_OK


def cmd_preset_from(args: argparse.Namespace) -> int:
    import json

    from redline.engine.preset import PresetError, WorkloadSpec, timeline_preset
    from redline.engine.session import concurrency_timeline
    from redline.engine.session.paths import check_session_dir

    try:
        d = check_session_dir(args.session_dir)
        meta = json.loads((d / "meta.json").read_text())
        segs = concurrency_timeline(d)
    except (SessionError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    points, t = [], 0.0
    for dur, c in segs:
        points.append((t, c))
        t += dur
    wl = meta.get("workload") or {}
    tgt = meta.get("target") or {}
    try:
        spec = WorkloadSpec(
            api=tgt.get("api") or "chat",
            dataset=wl.get("dataset") or "random",
            input_len=int(wl.get("input_len") or 32),
            output_len=int(wl.get("output_len") or 128),
        )
        # a session against the built-in sim had an ephemeral port: replay on a new sim
        url = None if "redline_sim" in (meta.get("server_info") or {}) else tgt.get("url")
        text = timeline_preset(Path(args.output).stem, url, spec, points, end_s=t)
    except PresetError as exc:
        raise UsageError(f"{d}: {exc}") from None
    Path(args.output).write_text(text)
    print(f"wrote {args.output}: {len(segs)} segments, {t:.0f} s")
    return EXIT_OK
