"""Take the README's pictures of the screen from the built-in simulated server.

    python docs/screens.py            # writes docs/screen-80x24.svg and docs/screen-160x44.svg

Each picture is a real session: a sim on 127.0.0.1, the engine in its own process (as
`redline` runs it), the app driven by keys (Textual's Pilot) and saved with
App.save_screenshot. About two minutes in all; on a busy machine the client-health warning
may show (it is right to).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from redline.engine.config import EngineConfig
from redline.engine.host import EngineProcess
from redline.engine.sim.serve import spawn_sim_process
from redline.tui.app import RedlineApp

HERE = Path(__file__).resolve().parent


async def shoot(profile: str, size: tuple[int, int], script: list[tuple[float, tuple[str, ...]]], out: Path, start_c: int = 8) -> None:
    """Run `script` ((seconds to wait, keys to press) ...) against a fresh sim; save `out`."""
    sim = spawn_sim_process(profile=profile)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            host = EngineProcess(EngineConfig(url=sim.url, concurrency=start_c, out_dir=Path(tmp) / "session"))
            host.start()
            try:
                app = RedlineApp(host, step=8)
                async with app.run_test(size=size) as pilot:
                    for wait, keys in script:
                        await pilot.pause(wait)
                        if keys:
                            await pilot.press(*keys)
                    await pilot.pause(0.5)
                    app.save_screenshot(out.name, path=str(out.parent))
            finally:
                host.stop()
    finally:
        sim.stop()
    print(f"wrote {out}")


async def main() -> None:
    # 80x24: the PP micro-batch cap story (C=8, then C=32 held; the server runs 8)
    await shoot("pp-capped", (80, 24), [(20, ("right_square_bracket", "right_square_bracket")), (28, ())],
                HERE / "screen-80x24.svg")
    # wide: a healthy server ramped 8 → 16 → 32 → 64, a probe, back to 64
    await shoot("healthy", (160, 44), [(14, ("right_square_bracket",)), (14, ("right_square_bracket",)),
                                       (14, ("right_square_bracket",)), (16, ("a",)), (14, ("r",)), (10, ())],
                HERE / "screen-160x44.svg")


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
