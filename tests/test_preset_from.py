"""A recorded session written back as a preset replays its concurrency timeline."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

from redline.engine.config import EngineConfig
from redline.engine.core import Engine
from redline.engine.preset import load_preset
from redline.engine.workload import WorkloadConfig

ROOT = Path(__file__).resolve().parent.parent


async def test_preset_from_replays_the_timeline(healthy_sim, tmp_path):
    out = tmp_path / "s"
    e = Engine(EngineConfig(url=healthy_sim.url, concurrency=4, workload=WorkloadConfig(input_len=16, output_len=24), out_dir=out))
    await e.start()
    try:
        await asyncio.sleep(3.2)
        e.set_concurrency(12)
        await asyncio.sleep(4.2)
        e.pause()
        await asyncio.sleep(2.1)
        e.resume()
        e.set_concurrency(2)
        await asyncio.sleep(3.2)
    finally:
        await e.stop()
    f = tmp_path / "replay.toml"
    r = subprocess.run([sys.executable, "-m", "tui", "preset-from", str(out), "-o", str(f)], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    p = load_preset(f)
    assert p.ramp.concurrency == (4, 12, 2)  # the paused period is left out
    d = p.ramp.durations_s
    assert abs(d[0] - 3) <= 1.2 and abs(d[1] - 4) <= 1.2 and abs(d[2] - 3) <= 1.5, d
    assert p.target.url is None  # recorded against a redline sim (ephemeral port): replays on a new one
    assert p.workload.input_len == 16 and p.workload.output_len == 24


def test_preset_from_bad_dir_is_one_line(tmp_path):
    r = subprocess.run([sys.executable, "-m", "tui", "preset-from", str(tmp_path / "nope"), "-o", str(tmp_path / "x.toml")], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
