"""Faults around the engine: a session log that cannot be written is said on screen and in
the log (rows are never lost silently), and the disk never holds the loop."""

from __future__ import annotations

import asyncio
import errno
import time

import pytest

from redline.engine.core.config import EngineConfig
from redline.engine.core.engine import Engine
from redline.engine.session import writer as writer_mod
from redline.engine.workload.prompts import WorkloadConfig


async def _until(pred, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        await asyncio.sleep(0.05)
    return pred()


async def test_disk_full_is_shown_and_logged(healthy_sim, tmp_path, monkeypatch):
    e = Engine(EngineConfig(url=healthy_sim.url, concurrency=4, workload=WorkloadConfig(input_len=8, output_len=16), out_dir=tmp_path / "s", use_nvml=False))
    await e.start()
    try:
        def full(fd, data):
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(writer_mod, "_write_all", full)
        shown = await _until(lambda: any("No space left on device" in w for w in e.snapshot.warnings), 5.0)
        assert shown, e.snapshot.warnings
        warning = next(w for w in e.snapshot.warnings if "No space" in w)
        assert "rows lost" in warning and any(t in warning for t in ("requests.ndjson", "timeline.ndjson", "events.ndjson"))
        assert e.snapshot.session_error and "No space left on device" in e.snapshot.session_error
        assert any(line.kind == "warning" and "No space" in line.text for line in e.snapshot.log)
        assert e.session.lost_rows > 0
    finally:
        monkeypatch.undo()
        await e.stop("quit")


@pytest.mark.timing  # the loop's wake-ups within 150 ms (169 in CI beside the server part)
async def test_a_slow_disk_does_not_hold_the_loop(healthy_sim, tmp_path, monkeypatch):
    """Session writes run on their own thread: a 300 ms write leaves the loop free."""
    e = Engine(EngineConfig(url=healthy_sim.url, concurrency=2, workload=WorkloadConfig(input_len=8, output_len=16), out_dir=tmp_path / "s", use_nvml=False))
    await e.start()
    real = writer_mod._write_all

    def slow(fd, data):
        time.sleep(0.3)
        real(fd, data)

    monkeypatch.setattr(writer_mod, "_write_all", slow)
    try:
        worst = 0.0
        end = time.perf_counter() + 3.0
        while time.perf_counter() < end:
            t = time.perf_counter()
            await asyncio.sleep(0.01)
            worst = max(worst, time.perf_counter() - t - 0.01)
        assert worst < 0.15, f"loop held {worst * 1000:.0f} ms"
    finally:
        monkeypatch.undo()
        await e.stop("quit")
    assert (tmp_path / "s" / "requests.ndjson").read_text().count("\n") > 0  # nothing lost
