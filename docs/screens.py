"""Take the README's pictures of the screen from the built-in simulated server.

    python docs/screens.py            # writes docs/screen-80x24.svg and docs/screen-160x44.svg
    python docs/screens.py --out /tmp --only 80x24    # one picture, elsewhere

Each picture is a real session: a sim on 127.0.0.1, the engine in its own process (as
`redline` runs it), the app driven by keys (Textual's Pilot) and saved with
App.save_screenshot. About two minutes in all; on a busy machine the client-health warning
may show (it is right to).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHOTS = ("80x24", "160x44")


async def shoot(profile: str, size: tuple[int, int], script: list[tuple[float, tuple[str, ...]]], out: Path, start_c: int = 8) -> None:
    """Run `script` ((seconds to wait, keys to press) ...) against a fresh sim; save `out`."""
    from redline.engine.core.config import EngineConfig
    from redline.engine.host import EngineProcess
    from redline.engine.sim.serve import spawn_sim_process
    from redline.tui.app import RedlineApp

    sim = spawn_sim_process(profile=profile)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            host = EngineProcess(EngineConfig(url=sim.url, concurrency=start_c, out_dir=Path(tmp) / "session"))
            host.start()
            try:
                app = RedlineApp(host, step=8)
                # a signal stops this script, not the app: the app's handlers (installed as it
                # mounts) call this script's, and this script's are taken back once it is up
                app._on_signal = _STOP[0]
                async with app.run_test(size=size) as pilot:
                    _take_signals()
                    for wait, keys in script:
                        await pilot.pause(wait)
                        if keys:
                            await pilot.press(*keys)
                    await pilot.pause(0.5)
                    # written whole under a temporary name, then renamed: a stopped run leaves
                    # the previous picture as it was
                    app.save_screenshot(f".{out.name}.tmp", path=str(out.parent))
                    (out.parent / f".{out.name}.tmp").replace(out)
            finally:
                host.stop()
    finally:
        sim.stop()
    print(f"wrote {out}", flush=True)


async def shoot_all(out_dir: Path, only: list[str]) -> None:
    if "80x24" in only:
        # 80x24: the PP micro-batch story (C=8, then C=96 typed and held: 64 run as 8 micro-batches
        # of 8, the gauge reads one, 32 queue)
        await shoot("pp-capped", (80, 24), [(20, ("c", "9", "6", "enter")), (28, ())],
                    out_dir / "screen-80x24.svg")
    if "160x44" in only:
        # wide: a healthy server ramped 8 → 16 → 32 → 64, a probe, back to 64
        await shoot("healthy", (160, 44), [(14, ("right_square_bracket",)), (14, ("right_square_bracket",)),
                                           (14, ("right_square_bracket",)), (16, ("a",)), (14, ("r",)), (10, ())],
                    out_dir / "screen-160x44.svg")


_STOP: list = []  # the handler of Ctrl-C and SIGTERM (run)


def _take_signals() -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, _STOP[0], sig)


async def run(out_dir: Path, only: list[str]) -> int:
    """shoot_all, stopped by Ctrl-C or SIGTERM (the sim and the engine process stopped, the
    pictures not yet taken left as they were): 130 / 143."""
    task = asyncio.ensure_future(shoot_all(out_dir, only))
    caught: list[signal.Signals] = []

    def stop(sig: signal.Signals) -> None:
        caught.append(sig)
        task.cancel()

    _STOP[:] = [stop]
    _take_signals()
    try:
        await task
    except asyncio.CancelledError:
        if not caught:
            raise
    if caught:
        print(f"screens.py: stopped by {caught[0].name}", file=sys.stderr)
        return 128 + caught[0]
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Take the README's pictures of the screen (real sessions against the "
                                 "built-in sim, about two minutes); Ctrl-C stops it and leaves the pictures as they were.")
    ap.add_argument("--out", type=Path, default=HERE, metavar="DIR", help=f"folder to write the SVGs to (default {HERE})")
    ap.add_argument("--only", choices=SHOTS, action="append", default=None, help="take only this picture (repeatable)")
    args = ap.parse_args(argv)
    if not args.out.is_dir():
        ap.error(f"--out {str(args.out)!r}: not a folder")
    return asyncio.run(run(args.out, args.only or list(SHOTS)))


if __name__ == "__main__":
    sys.exit(main())
