"""Start-up: time to the first drawn frame of plain `redline`, and time of `redline --help`.

    python benchmarks/startup.py [--runs 3]

`redline` with no arguments starts the built-in sim, the engine process and the TUI. It runs
here in a real terminal (tmux, 80x24) in a temporary directory (its session goes there); the
time is from starting it to the first screen capture that shows "C=" (the status header,
drawn from the engine's first snapshot). Screens are polled every 10 ms, so the figure is
good to about 10-20 ms. It is then quit with its own `q` key. `redline --help` is timed as a
plain subprocess.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# A private tmux server (its own socket): never touches anyone else's sessions; killed at the end.
TMUX = ["tmux", "-L", f"redline-bench-{os.getpid()}"]


def redline_cmd() -> list[str]:
    exe = os.path.join(os.path.dirname(sys.executable), "redline")
    return [exe] if os.path.exists(exe) else [sys.executable, "-m", "redline.tui.cli"]


def time_help(runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        r = subprocess.run(redline_cmd() + ["--help"], capture_output=True, text=True)
        out.append(time.perf_counter() - t0)
        if r.returncode != 0 or "usage" not in r.stdout:
            raise RuntimeError(f"redline --help failed: {r.stderr[-500:]}")
    return out


def time_first_frame(timeout: float = 60.0) -> float:
    name = f"redline-startup-{os.getpid()}"
    cwd = tempfile.mkdtemp(prefix="redline-startup-")
    shell = "cd " + cwd + " && exec " + " ".join(redline_cmd())
    try:
        t0 = time.perf_counter()
        subprocess.run(TMUX + ["new-session", "-d", "-s", name, "-x", "80", "-y", "24", shell], check=True)
        end = time.monotonic() + timeout
        took = None
        while time.monotonic() < end:
            screen = subprocess.run(TMUX + ["capture-pane", "-p", "-t", name], capture_output=True, text=True).stdout
            if "C=" in screen:
                took = time.perf_counter() - t0
                break
            time.sleep(0.01)
        if took is None:
            raise RuntimeError(f"no frame with 'C=' within {timeout:g} s; screen:\n{screen}")
        time.sleep(1.0)
        subprocess.run(TMUX + ["send-keys", "-t", name, "q"], check=True)
        end = time.monotonic() + 20
        while time.monotonic() < end and subprocess.run(TMUX + ["has-session", "-t", name], capture_output=True).returncode == 0:
            time.sleep(0.1)
        return took
    finally:
        subprocess.run(TMUX + ["kill-session", "-t", name], capture_output=True)
        shutil.rmtree(cwd, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3, help="runs of each (default 3); the median is shown")
    args = p.parse_args()
    if shutil.which("tmux") is None:
        raise SystemExit("startup.py: needs tmux (apt-get install tmux)")
    from _bench import machine, table

    print(f"# start-up ({machine()})")
    helps = time_help(max(args.runs, 1) + 1)[1:]  # the first run warms the file cache
    frames = []
    for _ in range(max(args.runs, 1)):
        frames.append(time_first_frame())
        print(f"  first frame {frames[-1]:.2f} s", file=sys.stderr, flush=True)
    rows = [("plain `redline`: first frame showing C=", f"{statistics.median(frames):.2f}", f"{min(frames):.2f}", f"{max(frames):.2f}"),
            ("`redline --help`", f"{statistics.median(helps):.2f}", f"{min(helps):.2f}", f"{max(helps):.2f}")]
    print()
    print(table(("what", "median s", "min s", "max s"), rows))


if __name__ == "__main__":
    from _bench import run_main

    run_main(main)
