"""A recorded session written back as a preset replays its concurrency timeline."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from redline.engine.core.config import EngineConfig
from redline.engine.core.engine import Engine
from redline.engine.preset import PresetError, load_preset, parse_preset
from redline.engine.report.preset_from import preset_from_session
from redline.engine.session import SessionWriter
from redline.engine.workload.prompts import WorkloadConfig
from redline.tui import cli

from helpers import run_preset_headless

REDLINE = [sys.executable, "-m", "redline.tui"]


@pytest.mark.slow
async def test_preset_from_replays_the_timeline(healthy_sim, tmp_path):
    out = tmp_path / "s"
    e = Engine(EngineConfig(url=healthy_sim.url, concurrency=4, workload=WorkloadConfig(input_len=16, output_len=24), out_dir=out))
    await e.start()
    try:
        await asyncio.sleep(3.2)
        e.set_concurrency(12)
        await asyncio.sleep(4.2)
        e.pause()
        await asyncio.sleep(2.1)
        e.resume()
        e.set_concurrency(2)
        await asyncio.sleep(3.2)
    finally:
        await e.stop()
    f = tmp_path / "replay.toml"
    r = subprocess.run([*REDLINE, "preset-from", str(out), "-o", str(f)], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    p = load_preset(f)
    assert p.ramp.concurrency == (4, 12, 2)  # the paused period is left out
    d = p.ramp.durations_s
    assert abs(d[0] - 3) <= 1.2 and abs(d[1] - 4) <= 1.2 and abs(d[2] - 3) <= 1.5, d
    assert p.target.url is None  # recorded against a redline sim (ephemeral port): replays on a new one
    assert p.workload.input_len == 16 and p.workload.output_len == 24


def test_preset_from_bad_dir_is_one_line(tmp_path):
    r = subprocess.run([*REDLINE, "preset-from", str(tmp_path / "nope"), "-o", str(tmp_path / "x.toml")],
                       capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert "nope" in r.stderr


# -- a session written by SessionWriter (no server): fast checks of the command's edges ------
def recorded(tmp_path: Path, url: str = "http://gpu-host:30000") -> Path:
    """A session that held C=8 for 3 s, paused 2 s, then C=16 for 4 s, against `url`."""
    d = tmp_path / "session"
    w = SessionWriter(d, {"target": {"url": url, "api": "completions"}, "server_info": {"kind": "sglang"},
                          "workload": {"dataset": "random", "input_len": 100, "output_len": 200}}, fsync=False)
    t0 = 1.7e9
    for i in range(9):
        state, c = ("paused", 8) if 3 <= i < 5 else ("running", 8 if i < 3 else 16)
        w.add_timeline({"t": t0 + i, "elapsed_s": float(i), "state": state, "target_c": c})
    w.close()
    return d


def test_preset_from_session_keeps_target_and_workload(tmp_path):
    replay = preset_from_session(recorded(tmp_path), "again")
    f = tmp_path / "again.toml"
    f.write_text(replay.toml)
    p = load_preset(f)
    assert p.name == "again" and p.target.url == "http://gpu-host:30000"
    assert p.workload.api == "completions" and (p.workload.input_len, p.workload.output_len) == (100, 200)
    assert p.ramp.concurrency == (8, 16) and p.ramp.durations_s == (3, 4)
    assert replay.steps == 2 and replay.seconds == pytest.approx(7)  # the steps the file has
    assert replay.left_out_s == pytest.approx(2) and replay.probe_s == 0


def test_preset_from_session_not_a_session(tmp_path):
    with pytest.raises(PresetError, match="session directory not found"):
        preset_from_session(tmp_path / "none", "x")


@pytest.mark.parametrize("where", ["missing-dir/replay.toml", "a-directory"])
def test_preset_from_unwritable_output_is_one_line(tmp_path, capsys, where):
    """-o into a folder that does not exist, or onto a directory: one line naming it, exit 2."""
    d = recorded(tmp_path)
    (tmp_path / "a-directory").mkdir()
    target = tmp_path / where
    rc = cli.main(["preset-from", str(d), "-o", str(target)])
    out = capsys.readouterr()
    assert rc == 2 and out.out == ""
    lines = out.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("redline: error: -o ") and str(target) in lines[0], out.err
    assert "cannot write" in lines[0]


def test_preset_from_prints_what_it_wrote(tmp_path, capsys):
    f = tmp_path / "r.toml"
    assert cli.main(["preset-from", str(recorded(tmp_path)), "-o", str(f)]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {f}: 2 steps, 7 s (2 s paused or stopped left out)"
    assert load_preset(f).ramp.concurrency == (8, 16)


# -- issue 27: a replayed probe aborts as the original did; one count everywhere --------------
def probed(tmp_path: Path, inner: bool = False) -> Path:
    """A preset-like session: C=8 for 4 s, C=64 for 4 s, (with `inner`: a probe for 2 s and
    C=64 again for 2 s,) then the C=1 probe for 3 s, then stopped."""
    d = tmp_path / "probed"
    w = SessionWriter(d, {"target": {"url": "http://gpu-host:30000", "api": "chat"}, "server_info": {"kind": "sglang"},
                          "workload": {"dataset": "random", "input_len": 32, "output_len": 64}}, fsync=False)
    plan = [("preset", 8)] * 4 + [("preset", 64)] * 4
    if inner:
        plan += [("probe", 1)] * 2 + [("preset", 64)] * 2
    plan += [("probe", 1)] * 3 + [("stopped", 1)] * 2
    for i, (state, c) in enumerate(plan):
        w.add_timeline({"t": 1.7e9 + i, "elapsed_s": float(i), "state": state, "target_c": c, "mode": "concurrency"})
    w.close()
    return d


def test_closing_probe_is_replayed_as_a_probe(tmp_path, capsys):
    f = tmp_path / "r.toml"
    assert cli.main(["preset-from", str(probed(tmp_path)), "-o", str(f)]) == 0
    out = capsys.readouterr().out.strip()
    p = load_preset(f)
    assert p.ramp.concurrency == (8, 64)  # not a C=1 step the C=64 load drains into
    assert p.after.probe_s == 3  # the runner's probe: abort what is in flight, then C=1
    assert out == f"wrote {f}: 2 steps, 8 s, then a 3 s C=1 probe"
    assert p.description == "replay of a recorded session: 2 steps, 8 s, then a 3 s C=1 probe"


def test_printed_count_is_the_files_step_count(tmp_path, capsys):
    import re

    for d in (recorded(tmp_path), probed(tmp_path, inner=True)):
        f = tmp_path / f"{d.name}.toml"
        assert cli.main(["preset-from", str(d), "-o", str(f)]) == 0
        said = int(re.search(r": (\d+) steps?,", capsys.readouterr().out).group(1))
        p = load_preset(f)
        assert said == len(p.ramp.concurrency) == len(p.ramp.steps())
        assert f"{said} step" in p.description


def test_probe_inside_the_timeline_is_replayed_as_a_probe_step(tmp_path, capsys):
    f = tmp_path / "r.toml"
    assert cli.main(["preset-from", str(probed(tmp_path, inner=True)), "-o", str(f)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines == [f"wrote {f}: 4 steps, 12 s, then a 3 s C=1 probe"]
    p = load_preset(f)
    assert p.ramp.concurrency == (8, 64, 1, 64)
    assert p.ramp.probes == (False, False, True, False)
    assert [s.probe for s in p.ramp.steps()] == [False, False, True, False]
    assert "probes" in f.read_text()  # written, and read back above


def test_probes_key_one_line_errors():
    base = {"concurrency": [8, 1], "durations_s": [1.0, 1.0]}
    with pytest.raises(PresetError, match=r"\[ramp\]\.probes.*a list of 2 true/false"):
        parse_preset({"ramp": {**base, "probes": [True]}}, "p.toml")
    with pytest.raises(PresetError, match=r"position 1.*C=8"):
        parse_preset({"ramp": {**base, "probes": [True, False]}}, "p.toml")
    with pytest.raises(PresetError, match=r"\[ramp\]\.probes.*only used with durations_s"):
        parse_preset({"ramp": {"concurrency": [8, 1], "probes": [False, True]}}, "p.toml")


def test_a_replayed_inner_probe_aborts_what_is_in_flight_as_the_original_did(sim_factory, tmp_path):
    """C=16 with long answers, then the probe step: the C=16 requests still running are
    cancelled when it opens (the sim sees them leave), and the probe step's own requests are
    one at a time: its figures hold no drained C=16 load."""
    sim = sim_factory("healthy")
    preset = parse_preset({"ramp": {"concurrency": [16, 1], "durations_s": [1.5, 2.0], "probes": [False, True]},
                           "workload": {"input_len": 16, "output_len": 400}}, "p.toml")
    out = tmp_path / "s"
    res = run_preset_headless(EngineConfig(url=sim.url, workload=WorkloadConfig(input_len=16, output_len=400),
                                           use_nvml=False, live_steps=False, out_dir=out), preset)
    assert [s.concurrency for s in res.steps] == [16, 1]
    rows = pl.read_ndjson(out / "requests.ndjson").filter(pl.col("phase") != "calibration")
    first, probe = rows.filter(pl.col("step") == 1), rows.filter(pl.col("step") == 2)
    assert first.filter(pl.col("status") == "cancelled").height >= 8  # aborted at the probe, as `a` does
    assert probe.height >= 1 and probe["concurrency"].max() == 1
    events = (out / "events.ndjson").read_text()
    assert "abort + C=1 probe" in events
