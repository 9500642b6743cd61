"""Presets "until it breaks" against the sim's profiles, run in-process; every step's
throughput checked against the sim's own token counter. (The same through the CLI, with its
printed lines and exit status, and the pp-capped profile's plateau at its cap:
tests/integration/test_compare.py, which runs both for its sessions; live throughput against the sim's
counter on pp-capped: tests/integration/test_engine.py.)

Each ramp starts near the interesting part of its profile's curve: a step costs at least
warm-up + STEADY_MIN_S (4 s) of measurement, and a run stops at its first break."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from redline.engine.core.config import EngineConfig
from redline.engine.core.engine import Engine
from redline.engine.preset import parse_preset
from redline.engine.run.preset_runner import run_preset
from redline.engine.workload.prompts import WorkloadConfig


def preset(concurrency, *, output_len=32, warmup=0.5, hold=4.0, max_hold=8.0, probe=0.0, **stop):
    stop = stop or {"plateau_gain": 0.05}
    return parse_preset(
        {
            "workload": {"api": "chat", "input_len": 16, "output_len": output_len},
            "ramp": {"concurrency": list(concurrency), "warmup_s": warmup, "hold_s": hold, "min_requests": 2, "max_hold_s": max_hold},
            "stop": stop,
            "after": {"probe_s": probe},
        },
        "test-preset",
    )


async def run_against(url: str, p, tmp_path: Path):
    """Run the preset in-process while sampling the sim's own token counter."""
    cfg = EngineConfig(
        url=url,
        concurrency=p.ramp.concurrency[0],
        workload=WorkloadConfig(input_len=p.workload.input_len, output_len=p.workload.output_len),
        live_steps=False,
        out_dir=tmp_path / "session",
    )
    e = Engine(cfg)
    await e.start()
    samples: list[tuple[float, int]] = []

    async def sample() -> None:
        async with httpx.AsyncClient() as c:
            while True:
                try:
                    s = (await c.get(url + "/sim/state", timeout=2)).json()
                    samples.append((s["t"], s["generation_tokens_total"]))
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.1)

    sampler = asyncio.create_task(sample())
    try:
        out = await run_preset(e, p)
        await asyncio.sleep(0.3)  # one more sample after the last step's end
    finally:
        sampler.cancel()
        await e.stop("preset finished")
    return out, samples


def sim_rate(samples, t0: float, t1: float) -> float:
    """The sim's own output tok/s over [t0, t1], interpolated from its counter samples."""

    def at(t: float) -> float:
        for (ta, va), (tb, vb) in zip(samples, samples[1:], strict=False):
            if ta <= t <= tb:
                return va + (vb - va) * (t - ta) / (tb - ta)
        raise AssertionError(f"no sample around {t}")

    return (at(t1) - at(t0)) / (t1 - t0)


def assert_steps_match_sim(out, samples) -> None:
    for s in out.steps:
        theirs = sim_rate(samples, s.t_start, s.t_start + s.duration_s)
        assert abs(s.output_throughput - theirs) / theirs < 0.10, (s.concurrency, s.output_throughput, theirs)


@pytest.mark.timing  # the sim's samples on time
@pytest.mark.slow
async def test_healthy_breaks_by_plateau_near_saturation(sim_factory, tmp_path):
    # a decode log every 8 iterations (SGLang's --decode-log-interval 8): at 40, C=224's 110 ms
    # steps write the running gauge once in 4.5 s, which a 4 s step may never see
    sim = sim_factory("healthy", extra_args=("--set", "decode_log_interval=8"))
    # the model: ~1620 tok/s at C=96, its 2000 tok/s ceiling from C=160 on
    out, samples = await run_against(sim.url, preset([96, 160, 224]), tmp_path)
    br = out.break_result
    assert br is not None and br.reason == "plateau", br
    assert (br.concurrency, br.last_good_concurrency) == (224, 160), br  # saturated near C=128
    # the running gauge as SGLang writes it (a decode log every 40 iterations, each prefill the
    # batch before it joins): the step's highest reading is its full batch, or a refill short of it
    assert all(0.9 * s.concurrency <= s.server_max_running <= s.concurrency for s in out.steps), [
        (s.concurrency, s.server_max_running) for s in out.steps]
    assert_steps_match_sim(out, samples)
    summary = json.loads((tmp_path / "session" / "summary.json").read_text())
    assert summary["break"]["reason"] == "plateau"
    assert [s["concurrency"] for s in summary["steps"]] == [s.concurrency for s in out.steps]
    for key in ("output_throughput", "median_ttft_ms", "p99_itl_ms", "mean_tpot_ms", "steady", "server_max_running"):
        assert key in summary["steps"][0]


@pytest.mark.slow
async def test_fragile_breaks_by_errors(sim_factory, tmp_path):
    """At C=64 the fragile server (503s from 48 in it, dies above 96) refuses requests but lives."""
    sim = sim_factory("fragile")
    # each step ends after hold_s, steady or not: a server refusing requests is not steady
    p = preset([16, 64, 160], max_hold=4.0, error_rate=0.05, plateau_gain=0.05)
    out, _ = await run_against(sim.url, p, tmp_path)
    br = out.break_result
    assert br is not None and br.reason == "errors", br
    assert (br.concurrency, br.last_good_concurrency) == (64, 16), br
    assert sim.proc.poll() is None  # the ramp stopped before the load that kills it
