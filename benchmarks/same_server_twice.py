"""Two runs of one server must read `no clear difference` at every load in at least 19 sweeps
of 20 (issue 44): `redline sweep --url U --url U --repeats 3` against one built-in sim, again
and again with another workload seed each time, counting the sweeps in which any comparison
(a load, a figure) was called `better` or `worse`.

    python benchmarks/same_server_twice.py                 # 20 sweeps, ~12 min on 2 busy cores
    python benchmarks/same_server_twice.py --sweeps 5 --keep /tmp/twice

Each sweep: the same short staircase (C = 4, 16, 32 by default) run 3 times as configuration
a, then 3 times as b, against the same sim (pp-capped at a quarter time scale, so its cap
makes C=16 and 32 queue). The comparisons are Holm-Bonferroni at 95 % over every load and
figure of the sweep (engine/sweep/answers.py); the rate of sweeps with any call should stay
at or under 5 %. A sweep with a call prints what was called.
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

from _bench import sim

PRESET = """name = "twice"
[workload]
input_len = 16
output_len = 32
[ramp]
concurrency = {steps}
warmup_s = {warmup}
hold_s = {hold}
min_requests = 4
max_hold_s = {max_hold}
[after]
probe_s = 0
"""


def one_sweep(url: str, preset: Path, out: Path, seed: int, repeats: int) -> dict:
    subprocess.run([sys.executable, "-m", "redline.tui.cli", "sweep", "--url", url, "--url", url, "--repeats", str(repeats),
                    "--preset", str(preset), "--headless", "--no-nvml", "--seed", str(seed), "--out", str(out)],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return json.loads((out / "sweep.json").read_text())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweeps", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", default="4,16,32", help="the staircase's concurrencies")
    ap.add_argument("--warmup", type=float, default=0.5)
    ap.add_argument("--hold", type=float, default=2.0)
    ap.add_argument("--time-scale", type=float, default=0.25, help="the sim's time_scale")
    ap.add_argument("--sim-profile", dest="profile", default="pp-capped")
    ap.add_argument("--keep", type=Path, default=None, help="keep each sweep's directory here")
    a = ap.parse_args(argv)
    steps = [int(s) for s in a.steps.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="redline-twice-"))
    called = 0
    t0 = time.monotonic()
    try:
        preset = tmp / "twice.toml"
        preset.write_text(PRESET.format(steps=steps, warmup=a.warmup, hold=a.hold, max_hold=a.hold * 1.5))
        with sim(a.profile, [f"time_scale={a.time_scale}"]) as s:
            for i in range(a.sweeps):
                out = (a.keep or tmp) / f"sweep{i + 1}"
                doc = one_sweep(s.url, preset, out, seed=1000 + 10 * i, repeats=a.repeats)
                rows = doc.get("comparisons") or []
                calls = [r for r in rows if r["verdict"] != "no clear difference"]
                called += bool(calls)
                said = "; ".join(f"{r['metric']} at {r['load']} {r['verdict']} ({r['change_pct']:+.1f} %, {r['ci_pct']})" for r in calls)
                print(f"sweep {i + 1:2d}: {len(rows)} comparisons, {len(calls)} called" + (f": {said}" if said else ""), flush=True)
    finally:
        if a.keep is None:
            shutil.rmtree(tmp, ignore_errors=True)
    rate = called / max(1, a.sweeps)
    print(f"{called} of {a.sweeps} sweeps called a difference between two runs of one server ({100 * rate:.0f} %; "
          f"at most 5 % wanted) in {time.monotonic() - t0:.0f} s")
    return 0 if rate <= 0.05 else 1


if __name__ == "__main__":
    from _bench import run_main

    run_main(main)
