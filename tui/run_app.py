"""Start the engine process, then the app; whatever happens, stop the load on the way out."""

from __future__ import annotations

import argparse
import signal
import sys

from ..engine.api import EngineConfig, EngineError, EngineProcess, Preset, SessionError, TargetError, TargetUnreachable

from .errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_UNREACHABLE


SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def run_tui(cfg: EngineConfig, args: argparse.Namespace, preset: Preset | None = None, compare=None) -> int:
    # A signal before the app is up (the engine starts first) must still stop the load and
    # close the log with its own reason: remember it; the app acts on it once mounted.
    caught: list[signal.Signals] = []

    def early(signum: int, frame: object) -> None:
        caught.append(signal.Signals(signum))

    for sig in SIGNALS:
        signal.signal(sig, early)
    host = EngineProcess(cfg)
    try:
        host.start()
    except (TargetError, SessionError) as exc:
        print(f"redline: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except EngineError as exc:
        print(f"redline: error: engine failed to start: {exc}", file=sys.stderr)
        return 1
    except TargetUnreachable as exc:
        print(f"redline: error: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    if caught:
        host.stop(f"signal {caught[0].name}")
        return 128 + caught[0].value
    from .app import RedlineApp

    app = RedlineApp(host, step=args.step, rate_step=getattr(args, "rate_step", 1.0), preset=preset, compare=compare, early_signals=caught)
    app.hard_exit = True
    try:
        app.run()
    finally:
        host.stop(app.exit_reason)
    print(f"redline: session saved in {cfg.out_dir}")
    return EXIT_OK
