"""Tokens of failed requests are no throughput (issue 42 case 3), against the sim's own clock:
half the requests drop their connection part-way through their output (`disconnect_rate` 0.5,
each at a token drawn from its seed), and the step's output tok/s holds the tokens of the
others, written inside its window, while `failed_output_tok_s` holds the dropped ones' (the
sim knows when it wrote each chunk and which request ended how: engine/sim/truth.py). The same
in one process and with `--workers 2`, whose workers send a failed request's token buckets."""

from __future__ import annotations

import json

import httpx
import pytest

from redline.engine.core.config import EngineConfig
from redline.engine.measure.step_result import StepResult
from redline.engine.preset import parse_preset
from redline.engine.workload.prompts import WorkloadConfig

from helpers import run_preset_headless

# 8 running at a time, 5 ms a token (a 40-token answer in ~0.2 s: every request ends well
# inside the 2 s window, so none that wrote tokens in it is still out when the step is final)
FAST = ("--set", "max_running_requests=8", "--set", "ceiling_tok_s=100000", "--set", "decode_base_s=0.01",
        "--set", "decode_per_seq_s=0", "--set", "time_scale=0.5", "--set", "disconnect_rate=0.5")
PRESET = {"name": "drops", "workload": {"api": "chat", "input_len": 16, "output_len": 40},
          "ramp": {"concurrency": [8], "warmup_s": 0.5, "hold_s": 2.0, "min_requests": 4, "max_hold_s": 4.0},
          "after": {"probe_s": 0}}


def _window_tokens(records: list[dict], t0: float, t1: float) -> tuple[int, int]:
    """(tokens written in [t0, t1] by requests that did not fail, ... by those that dropped)."""
    ok = failed = 0
    for r in records:
        n = sum(k for t, k in zip(r["chunk_times"], r["chunk_tokens"], strict=False) if t0 <= t <= t1)
        if r["outcome"] == "failed":  # the sim dropped its connection (the only fault set)
            failed += n
        else:
            ok += n
    return ok, failed


@pytest.mark.parametrize("workers", [0, 2])
def test_a_steps_output_tok_s_holds_no_failed_requests_tokens(sim_factory, tmp_path, workers):
    sim = sim_factory("healthy", extra_args=FAST)
    cfg = EngineConfig(url=sim.url, concurrency=8, workers=workers, workload=WorkloadConfig(input_len=16, output_len=40),
                       out_dir=tmp_path / "s", live_steps=False, use_nvml=False)
    outcome = run_preset_headless(cfg, parse_preset(PRESET, "drops.toml"))
    records = httpx.get(sim.url + "/sim/requests?chunks=1", timeout=30).json()
    (closing,) = outcome.steps
    (step,) = [StepResult.from_dict(d) for d in json.loads((tmp_path / "s" / "summary.json").read_text())["steps"]]
    assert step.final and step.failed >= 5 and step.completed >= 5, step
    ok, failed = _window_tokens(records, step.t_start, step.t_start + step.duration_s)
    d = step.duration_s
    # the client stamps a chunk a little after the sim wrote it: a few chunks at the window's
    # edges fall on either side; 6 % of the tokens covers them on a loaded 2-core machine
    assert step.output_throughput == pytest.approx(ok / d, rel=0.06), (step.output_throughput, ok / d, failed / d)
    assert step.failed_output_tok_s == pytest.approx(failed / d, rel=0.06), (step.failed_output_tok_s, failed / d)
    assert failed / d > 0.2 * (ok + failed) / d  # the drops were a real share of what was written
    assert closing.output_throughput <= step.output_throughput + step.failed_output_tok_s + 1e-6
