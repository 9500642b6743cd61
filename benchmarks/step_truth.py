"""Step truth: does each step's TTFT / E2E / ITL describe the load it is labelled with?

The until-it-breaks case in miniature: a server with a running cap (8), outputs long enough
that requests outlive a step, and a ramp across the cap. The simulated server keeps its own
clock of every request (arrival, each chunk written, end: /sim/requests); this prints, per
step, redline's figures next to the sim's for the same window.

    python benchmarks/step_truth.py                      # redline from this checkout
    python benchmarks/step_truth.py --redline /old/venv/bin/redline   # another build

Starts its own simulated server on 127.0.0.1 and stops it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

from redline.engine.sim.serve import spawn_sim_process
from redline.engine.sim.truth import window_truth

PRESET = """
name = "step-truth"
description = "cap 8, {out}-token outputs, ramp across the cap"
[workload]
api = "chat"
input_len = 32
output_len = {out}
[ramp]
concurrency = {ramp}
warmup_s = {warmup}
hold_s = {hold}
min_requests = {min_requests}
max_hold_s = {max_hold}
"""

SIM_SET = ("max_running_requests=8", "ceiling_tok_s=100000", "decode_base_s={decode}", "decode_per_seq_s=0.0005")


def run(redline: list[str], out_len: int, ramp: list[int], warmup: float, hold: float, min_requests: int, max_hold: float, decode: float) -> list[dict]:
    extra: list[str] = []
    for s in SIM_SET:
        extra += ["--set", s.format(decode=decode)]
    sim = spawn_sim_process(profile="healthy", extra_args=tuple(extra))
    tmp = Path(tempfile.mkdtemp(prefix="redline-truth-"))
    try:
        preset = tmp / "truth.toml"
        preset.write_text(PRESET.format(out=out_len, ramp=ramp, warmup=warmup, hold=hold, min_requests=min_requests, max_hold=max_hold))
        out = tmp / "session"
        cmd = [*redline, "run", str(preset), "--headless", "--url", sim.url, "--out", str(out), "--no-nvml"]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        records = httpx.get(sim.url + "/sim/requests?chunks=1", timeout=30).json()
        summary = json.loads((out / "summary.json").read_text())
    finally:
        sim.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    rows = []
    for s in summary["steps"]:
        t0 = s["t_start"]
        truth = window_truth(records, t0, t0 + s["duration_s"])
        rows.append({"step": s, "truth": truth})
    return rows


def _pct(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0:
        return "    -"
    return f"{(a / b - 1) * 100:+5.0f}%"


def _f(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--redline", default=None, help="the redline command to measure (default: this checkout's)")
    ap.add_argument("--output-len", type=int, default=300)
    ap.add_argument("--ramp", default="4,8,16,24")
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--hold", type=float, default=6.0)
    ap.add_argument("--min-requests", type=int, default=8)
    ap.add_argument("--max-hold", type=float, default=40.0)
    ap.add_argument("--decode", type=float, default=0.02, help="the sim's decode step, s")
    a = ap.parse_args(argv)
    redline = a.redline.split() if a.redline else [sys.executable, "-m", "redline.tui.cli"]
    rows = run(redline, a.output_len, [int(x) for x in a.ramp.split(",")], a.warmup, a.hold, a.min_requests, a.max_hold, a.decode)
    print(f"cap 8, {a.output_len}-token outputs, ramp {a.ramp}: redline's step figures vs the sim's clock (ms)")
    print("   C   TTFT p50 redline / sim     diff   E2E p50 redline / sim     diff   ITL p50 redline / sim gap   diff   sent in step: n, TTFT p50 (sim)")
    for r in rows:
        s, t = r["step"], r["truth"]
        print(
            f"{s['concurrency']:>4}   {_f(s['median_ttft_ms']):>8} / {_f(t['median_ttft_ms']):<8} {_pct(s['median_ttft_ms'], t['median_ttft_ms'])}"
            f"   {_f(s['median_e2e_latency_ms']):>7} / {_f(t['median_e2e_ms']):<8} {_pct(s['median_e2e_latency_ms'], t['median_e2e_ms'])}"
            f"   {s['median_itl_ms'] or 0:>7.1f} / {t['median_gap_ms'] or 0:<8.1f} {_pct(s['median_itl_ms'], t['median_gap_ms'])}"
            f"   {t['sent']:>4}, {_f(t['median_ttft_all_ms'])}"
        )
    return 0


if __name__ == "__main__":
    from _bench import run_main

    run_main(main)
