"""Issue 42 "See it break", the preset runner's part: a server that hangs, refuses or dies is
judged broken by the ramp, the search and the probe, and every output says where and why.

Each test starts its own sim on 127.0.0.1 (tests/conftest.py), with FAST decode steps and
short holds, so a ramp runs in seconds.
"""

from __future__ import annotations

import json
import re

import httpx
from helpers import run_preset_headless

from redline.engine.preset import parse_preset
from redline.engine.run.config import EngineConfig
from redline.engine.workload.prompts import WorkloadConfig

FAST = ("--set", "decode_base_s=0.01", "--set", "decode_per_seq_s=0.0001")


def _cfg(url: str, tmp_path, conc: int = 4, out_len: int = 64, **kw) -> EngineConfig:
    return EngineConfig(url=url, concurrency=conc, workload=WorkloadConfig(input_len=16, output_len=out_len),
                        out_dir=tmp_path / "s", live_steps=False, use_nvml=False, **kw)


def _events(tmp_path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "s" / "events.ndjson").read_text().splitlines() if line.strip()]


def t_first_break(tmp_path) -> float:
    return next(e["t"] for e in _events(tmp_path) if e["kind"] == "break")


def _summary(tmp_path) -> dict:
    return json.loads((tmp_path / "s" / "summary.json").read_text())


def test_a_hung_server_breaks_as_stalled_within_stall_s(sim_factory, tmp_path):
    """Every request stops streaming after 16 tokens and the connection stays open: nothing
    fails, nothing ends, and no rule on a step's figures could fire. The ramp ends as
    `stalled` at the step it hung in, stall_s (1.5 s) after the last token the sim wrote,
    naming how many waited and how long; the probe after it stalls the same way and ends."""
    sim = sim_factory("healthy", extra_args=(*FAST, "--set", "stall_after_tokens=16"))
    preset = parse_preset({"workload": {"input_len": 16, "output_len": 64},
                           "ramp": {"concurrency": [4, 8], "warmup_s": 0.5, "hold_s": 3.0, "min_requests": 1},
                           "stop": {"stall_s": 1.5, "error_rate": 0.05}, "after": {"probe_s": 2.0}}, "hang.toml")
    out = run_preset_headless(_cfg(sim.url, tmp_path), preset)
    br = out.break_result
    assert br is not None and br.reason == "stalled" and br.concurrency == 4, br
    assert re.fullmatch(r"stalled: 4 requests in flight, no token for 1\.\d s at C=4", br.detail), br.detail
    assert br.last_good == "none" and br.good_text == "no step passed"
    assert [s.concurrency for s in out.steps] in ([], [4])  # no step above the hang was run
    summary = _summary(tmp_path)
    assert summary["break"]["reason"] == "stalled" and summary["break"]["concurrency"] == 4
    # said within stall_s (plus a poll and a busy machine's slack) of the sim's last write
    rows = httpx.get(sim.url + "/sim/requests?chunks=1", timeout=5).json()
    last_write = max(t for r in rows for t in r["chunk_times"] if t < t_first_break(tmp_path))
    ev = _events(tmp_path)
    t_break = next(e["t"] for e in ev if e["kind"] == "break" and e["text"].startswith("stalled: 4 requests"))
    assert 1.5 <= t_break - last_write <= 1.5 + 1.5, t_break - last_write
    # the probe: its one request hangs too; it ends on the same rule, said so
    assert any(e["kind"] == "break" and re.match(r"probe: stalled: 1 request in flight, no token for 1\.\d s at C=1", e["text"]) for e in ev), ev
    assert out.probe is not None and out.probe.partial and out.probe.phase == "probe"
