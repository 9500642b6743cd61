"""Start-up (issue 26): `redline --help`, and plain `redline` to its first drawn frame.

    python benchmarks/startup_bench.py [--runs 7] [--python-path DIR]

`redline --help` is timed as a plain subprocess. `redline` with no arguments starts the
built-in sim, the engine process and the TUI; it runs here in a real terminal (a private tmux
server, 80x24) in a temporary directory (its session goes there). Two times are taken from
starting it, polling the screen every 10 ms (good to about 10-20 ms):

  first frame   the first screen whose status header shows "C=" (the app drew its first
                snapshot: "[STARTING] C=8" while the engine starts, or a live one)
  live          the first screen showing "[RUNNING]" (the engine's first live snapshot)

For scale, two floors are timed the same way: `python -c pass` (the interpreter) and
`python -c "import textual.app"` (the UI toolkit alone, before it draws anything).

Each figure is the median of --runs runs (goals: --help < 0.1 s, first frame < 0.6 s, on a
quiet machine), after one warm-up run of each that is not counted. The measured processes may
write bytecode (PYTHONDONTWRITEBYTECODE is dropped for them), as an installed redline has it.

--python-path DIR runs `python -m redline.tui.cli` with PYTHONPATH=DIR instead of the installed
`redline`: DIR holds a `redline` folder (engine/, tui/, presets/ of another checkout, e.g. as
symbolic links), to compare two versions on the same machine.
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

TMUX = ["tmux", "-L", f"redline-startup-{os.getpid()}"]  # a private server: never anyone else's sessions
POLL_S = 0.01


def redline_cmd(python_path: str | None) -> list[str]:
    if python_path is None:
        exe = os.path.join(os.path.dirname(sys.executable), "redline")
        if os.path.exists(exe):
            return [exe]
    return [sys.executable, "-m", "redline.tui.cli"]


def bench_env(python_path: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if python_path is not None:
        env["PYTHONPATH"] = python_path
    return env


def time_help(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(cmd + ["--help"], capture_output=True, text=True, env=env)
    took = time.perf_counter() - t0
    if r.returncode != 0 or "usage" not in r.stdout:
        raise RuntimeError(f"redline --help failed: {r.stderr[-500:]}")
    return took


def time_python(code: str, env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    return time.perf_counter() - t0


def _screen(name: str) -> str:
    return subprocess.run(TMUX + ["capture-pane", "-p", "-t", name], capture_output=True, text=True).stdout


def time_first_frame(cmd: list[str], env: dict[str, str], timeout: float = 60.0) -> tuple[float, float]:
    """(first frame, live) in seconds from starting plain `redline`."""
    name = "startup"
    cwd = tempfile.mkdtemp(prefix="redline-startup-")
    exports = " ".join(f"{k}={shlex_quote(v)}" for k, v in env.items() if k in ("PYTHONPATH",))
    shell = f"cd {shlex_quote(cwd)} && unset PYTHONDONTWRITEBYTECODE && exec env {exports} " + " ".join(map(shlex_quote, cmd))
    frame = live = None
    screen = ""
    try:
        t0 = time.perf_counter()
        subprocess.run(TMUX + ["new-session", "-d", "-s", name, "-x", "80", "-y", "24", shell], check=True)
        end = time.monotonic() + timeout
        while time.monotonic() < end and live is None:
            screen = _screen(name)
            now = time.perf_counter() - t0
            if frame is None and "C=" in screen:
                frame = now
            if "[RUNNING]" in screen:
                live = now
                frame = frame if frame is not None else now
                break
            time.sleep(POLL_S)
        if live is None:
            raise RuntimeError(f"no live frame within {timeout:g} s; screen:\n{screen}")
        time.sleep(0.5)
        subprocess.run(TMUX + ["send-keys", "-t", name, "q"], check=True)
        end = time.monotonic() + 20
        while time.monotonic() < end and subprocess.run(TMUX + ["has-session", "-t", name], capture_output=True).returncode == 0:
            time.sleep(0.1)
        return frame, live
    finally:
        subprocess.run(TMUX + ["kill-server"], capture_output=True)
        shutil.rmtree(cwd, ignore_errors=True)


def shlex_quote(s: str) -> str:
    import shlex

    return shlex.quote(s)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=7, help="runs of each (default 7); the median is reported")
    p.add_argument("--python-path", default=None, metavar="DIR", help="run `python -m redline.tui.cli` with PYTHONPATH=DIR (another checkout)")
    p.add_argument("--help-only", action="store_true", help="time `redline --help` only (no tmux needed)")
    args = p.parse_args()
    runs = max(args.runs, 1)
    cmd, env = redline_cmd(args.python_path), bench_env(args.python_path)
    if not args.help_only and shutil.which("tmux") is None:
        raise SystemExit("startup_bench.py: needs tmux (apt-get install tmux), or --help-only")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"# start-up: {' '.join(cmd)}{' (PYTHONPATH=' + args.python_path + ')' if args.python_path else ''}; "
          f"{os.cpu_count()} cores, load average {load:.2f} at the start")
    time_help(cmd, env)  # warm-up: file cache, bytecode
    helps = [time_help(cmd, env) for _ in range(runs)]
    floors = [("floor: `python -c pass`", "pass"), ("floor: `python -c 'import textual.app'`", "import textual.app")]
    rows = [("`redline --help`", helps)]
    for what, code in floors:
        time_python(code, env)
        rows.append((what, [time_python(code, env) for _ in range(runs)]))
    if not args.help_only:
        time_first_frame(cmd, env)  # warm-up
        frames, lives = [], []
        for _ in range(runs):
            f, live = time_first_frame(cmd, env)
            frames.append(f)
            lives.append(live)
            print(f"  first frame {f:.3f} s, live {live:.3f} s", file=sys.stderr, flush=True)
        rows += [("plain `redline`: first frame (header drawn)", frames), ("plain `redline`: live ([RUNNING])", lives)]
    print()
    print("| what | median s | min s | max s | runs |")
    print("|---|---|---|---|---|")
    for what, xs in rows:
        print(f"| {what} | {statistics.median(xs):.3f} | {min(xs):.3f} | {max(xs):.3f} | {len(xs)} |")


if __name__ == "__main__":
    main()
