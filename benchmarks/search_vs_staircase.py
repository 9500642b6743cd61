"""Time to the knee: the adaptive search against a fine fixed staircase, on the built-in sim.

    python benchmarks/search_vs_staircase.py                 # healthy profile (knee near 128)
    python benchmarks/search_vs_staircase.py --sim-profile pp-capped --start 4 --max 64

Both runs use the same workload and the same warm-up and hold per step, headless, against a
simulated server this script starts on 127.0.0.1 (one per run). The staircase steps through
every multiple of --fine between start and max; its knee is the smallest C within the plateau
gain of its best tok/s. The search's knee must agree within one bisection step.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from redline.engine.sim.serve import spawn_sim_process

PRESET = """
name = "{name}"
[workload]
input_len = 32
output_len = 128
[ramp]
{ramp}
warmup_s = {warmup}
hold_s = {hold}
min_requests = {min_requests}
{stop}
"""


def run(profile: str, ramp: str, warmup: float, hold: float, name: str, stop: str = "", min_requests: int = 8,
        keep: Path | None = None, workers: str = "auto") -> tuple[float, dict]:
    sim = spawn_sim_process(profile=profile)
    tmp = Path(tempfile.mkdtemp(prefix="redline-knee-"))
    try:
        f = tmp / "p.toml"
        f.write_text(PRESET.format(name=name, ramp=ramp, warmup=warmup, hold=hold, stop=stop, min_requests=min_requests))
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-m", "redline.tui.cli", "run", str(f), "--headless", "--url", sim.url,
                        "--out", str(tmp / "s"), "--no-nvml", "--max-concurrency", "100000", "--workers", workers], check=True, stdout=subprocess.DEVNULL)
        took = time.monotonic() - t0
        if keep is not None:
            shutil.copytree(tmp / "s", keep / name, dirs_exist_ok=True)
        return took, json.loads((tmp / "s" / "summary.json").read_text())
    finally:
        sim.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def timeline(summary: dict) -> list[str]:
    """Where a run's time went, one line per step: when it opened (seconds from the first
    step's open), its warm-up, its measured hold, steady or not, own requests completed of
    those sent, output tok/s."""
    steps = summary["steps"]
    if not steps:
        return []
    t_first = steps[0]["t_start"] - steps[0]["warmup_s"]
    out = []
    for s in steps:
        opened = s["t_start"] - s["warmup_s"] - t_first
        out.append(f"  C={s['concurrency']:<4} at {opened:6.1f} s  warm-up {s['warmup_s']:5.1f} s  hold {s['duration_s']:5.1f} s  "
                   f"{'steady  ' if s['steady'] else 'UNSTEADY'}  own {s['completed']}/{s['requests_sent']} done  "
                   f"{s['output_throughput']:7.1f} tok/s")
    return out


def staircase_knee(steps: list[dict], gain: float = 0.05) -> int:
    best = max(s["output_throughput"] for s in steps)
    return min(s["concurrency"] for s in steps if s["output_throughput"] >= (1 - gain) * best)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sim-profile", dest="profile", default="healthy")
    ap.add_argument("--start", type=int, default=8)
    ap.add_argument("--max", type=int, default=512)
    ap.add_argument("--fine", type=int, default=16, help="the staircase's step")
    ap.add_argument("--resolution", type=float, default=0.05)
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--hold", type=float, default=4.0)
    ap.add_argument("--min-requests", type=int, default=8, help="own requests a step must complete")
    ap.add_argument("--no-staircase", action="store_true", help="time the search alone")
    ap.add_argument("--timeline", action="store_true", help="print each step's warm-up, hold and steadiness")
    ap.add_argument("--workers", default="auto", help="redline's --workers (default auto, redline's own default: worker processes when the search's max is above 256)")
    ap.add_argument("--keep", type=Path, default=None, help="copy each run's session directory here")
    a = ap.parse_args(argv)
    search_ramp = f'mode = "search"\nstart = {a.start}\nmax = {a.max}\nresolution = {a.resolution}'
    t_s, s = run(a.profile, search_ramp, a.warmup, a.hold, "search", stop="[stop]\nplateau_gain = 0.05", min_requests=a.min_requests, keep=a.keep, workers=a.workers)
    knee_s = s["search"]["knee_concurrency"]
    print(f"{a.profile}: knee by search C={knee_s} in {t_s:.0f} s ({len(s['search']['points'])} points: {s['search']['points']})", flush=True)
    if a.timeline:
        print("\n".join(timeline(s)), flush=True)
    if a.no_staircase:
        return 0
    stairs = list(range(a.fine, a.max + 1, a.fine))
    stair_ramp = f"concurrency = {[c for c in stairs if c >= a.start] or [a.start]}"
    # the staircase must see the whole curve: no stop rule ends it early
    t_f, f = run(a.profile, stair_ramp.replace("\n", " "), a.warmup, a.hold, "staircase", min_requests=a.min_requests, keep=a.keep, workers=a.workers)
    knee_f = staircase_knee(f["steps"])
    print(f"{a.profile}: knee by a staircase of {len(f['steps'])} steps every {a.fine}: C={knee_f} in {t_f:.0f} s")
    print(f"agreement: |{knee_s} - {knee_f}| = {abs(knee_s - knee_f)} (one staircase step: {a.fine})")
    return 0


if __name__ == "__main__":
    from _bench import run_main

    run_main(main)
