"""redline itself: the console script, `main` in this process, a preset file, a headless run as a process or in-process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .paths import ROOT


# -- redline itself ---------------------------------------------------------------------------
def redline_command() -> list[str]:
    """The installed console script (what an operator runs), else its exact equivalent."""
    script = Path(sys.executable).with_name("redline")
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-m", "redline.tui"]


def main_in_process(argv: list[str]) -> int:
    """`redline ARGV` in this process; the exit status (argparse's errors included)."""
    from redline.tui import cli

    try:
        return cli.main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


def write_preset(tmp_path: Path, name: str, *, concurrency: list[int], input_len: int = 16,
                 output_len: int = 64, hold_s: float = 60, exact: bool = False, extra: str = "",
                 max_hold_s: float | None = None) -> Path:
    """A preset file holding each concurrency `hold_s` seconds (long by default: a run to stop).
    `exact`: each step lasts exactly hold_s, all of it measured (no warm-up, no waiting for a
    steady window): a short run that only has to send load. `max_hold_s`: the ramp's own
    (max_hold_s = hold_s: each step closes at hold_s, steady or not, with a warm-up-free
    measured window, for a run that reads what its steps sent, not a steady throughput)."""
    ramp = (f"durations_s = {[hold_s] * len(concurrency)}\n" if exact
            else f"warmup_s = 0\nhold_s = {hold_s}\nmin_requests = 1\n"
            + (f"max_hold_s = {max_hold_s}\n" if max_hold_s is not None else ""))
    f = tmp_path / f"{name}.toml"
    f.write_text(
        f"[workload]\ninput_len = {input_len}\noutput_len = {output_len}\n"
        f"[ramp]\nconcurrency = {list(concurrency)}\n{ramp}{extra}"
    )
    return f


def start_headless(url: str, preset: Path, out: Path, *args: str, env: dict | None = None) -> subprocess.Popen:
    """`redline run PRESET --headless --url URL --out OUT --no-nvml ARGS` in its own session
    (a signal to it reaches redline alone); text pipes."""
    return subprocess.Popen(
        [*redline_command(), "run", str(preset), "--headless", "--url", url, "--out", str(out), "--no-nvml", *args],
        cwd=ROOT, env={**os.environ, "CI": "true", **(env or {})}, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )


def finish(proc: subprocess.Popen, timeout: float) -> tuple[int | None, str, str]:
    """(exit status or None if it had to be killed, stdout, stderr)."""
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return None, out, err


def steady_in(preset, seconds: int):
    """`preset` with its steps called steady on `seconds` whole measured seconds instead of
    STEADY_MIN_S (4): for a search on a sim whose decode steps are 10-25 ms, where 2 s hold
    80-200 of them (RampSpec.steady_min_s; the halves must still agree within 10 %)."""
    import dataclasses

    return dataclasses.replace(preset, ramp=dataclasses.replace(preset.ramp, steady_min_s=seconds))


def run_preset_headless(cfg, preset, on_line=None):
    """Start an Engine on `cfg`, run `preset` on it as `redline run --headless` does, stop it
    (the session log complete); returns the RunOutcome. `on_line`: each line the run prints."""
    import asyncio

    from redline.engine.core.engine import Engine
    from redline.engine.run.preset_runner import run_preset

    async def go():
        e = Engine(cfg)
        await e.start()
        try:
            return await run_preset(e, preset, **({"on_line": on_line} if on_line is not None else {}))
        finally:
            await e.stop("preset finished")

    return asyncio.run(go())
