"""Start the engine thread, then the app; whatever happens, stop the load on the way out."""

from __future__ import annotations

import argparse
import sys

from engine.config import EngineConfig
from engine.host import EngineProcess
from engine.preset import Preset
from engine.target import TargetError, TargetUnreachable

from .errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_UNREACHABLE


def run_tui(cfg: EngineConfig, args: argparse.Namespace, preset: Preset | None = None, compare=None) -> int:
    host = EngineProcess(cfg)
    try:
        host.start()
    except TargetError as exc:
        print(f"redline: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except TargetUnreachable as exc:
        print(f"redline: error: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    from .app import RedlineApp

    app = RedlineApp(host, step=args.step, preset=preset, compare=compare)
    app.hard_exit = True
    try:
        app.run()
    finally:
        host.stop(app.exit_reason)
    print(f"redline: session saved in {cfg.out_dir}")
    return EXIT_OK
