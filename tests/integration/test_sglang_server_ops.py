"""redline's flush, profiler and admin key against a server that answers as SGLang 0.5.9 and
0.5.23 do (tests/helpers/sglang.py, from the fixtures written from the wheels' code): issue 43
cases 1, 3, 7 and 10, end to end through a preset run and its session."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from pathlib import Path

import httpx
import pytest

from redline.engine.core.config import EngineConfig
from redline.engine.core.engine import Engine
from redline.engine.preset import parse_preset
from redline.engine.report.export import export_session
from redline.engine.run.preset_runner import run_preset
from redline.engine.workload.prompts import WorkloadConfig

from helpers import SglangFixture

pytestmark = pytest.mark.server

API_KEY = "sk-fixture-api-key-0001"  # the keys in server_info_keys.json
ADMIN_KEY = "adm-fixture-admin-key-0002"


def _preset(concurrency: list[int], *, hold_s: float = 1.2, **ramp):
    d = {"workload": {"api": "generate", "input_len": 16, "output_len": 32},
         "ramp": {"concurrency": concurrency, "warmup_s": 0, "hold_s": hold_s, "min_requests": 1, "max_hold_s": hold_s},
         "after": {"probe_s": 0}}
    p = parse_preset(d, "t.toml")
    return dataclasses.replace(p, ramp=dataclasses.replace(p.ramp, **ramp)) if ramp else p


async def _run(url: str, out: Path, preset, **kw):
    cfg = EngineConfig(url=url, out_dir=out, live_steps=False, start_paused=True, use_nvml=False, concurrency=2,
                       api="generate", workload=WorkloadConfig(input_len=16, output_len=32), **kw)
    e = Engine(cfg)
    await e.start()
    try:
        return await run_preset(e, preset), e
    finally:
        await e.stop("preset finished")


def _events(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "events.ndjson").read_text().splitlines() if line.strip()]


def _steps(out: Path) -> list[dict]:
    return json.loads((out / "summary.json").read_text())["steps"]


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
def test_the_flush_follows_the_servers_answer_not_its_stale_gauges(tmp_path, version):
    """Case 1: 0.5.9's gauges still say 31 running after the load (metrics_idle_stale), and the
    server refuses a flush for 0.6 s after the last stream ends. redline asks /flush_cache until
    it is done, never waiting on the gauges: every step is flushed, none while busy."""
    metrics = "metrics_idle_stale" if version == "0.5.9" else "metrics_retract_before"
    with SglangFixture(version, metrics=metrics, hold_s=0.6) as srv:
        out, _ = asyncio.run(_run(srv.url, tmp_path / "s", _preset([2, 4], flush_cache=True)))
        flushes = list(srv.flushes)
        paths = list(srv.info_paths)
    assert paths == ["/server_info"]  # case 3: the current path first; the deprecated one never asked
    assert [s.concurrency for s in out.steps] == [2, 4]
    refused = [f for f in flushes if not f["ok"]]
    assert refused and all(f["status"] == 400 for f in refused)  # it did refuse (the server still held requests)
    ok = [f for f in flushes if f["ok"]]
    assert len(ok) == 2 and all(f["running"] == 0 for f in flushes)
    assert all(f["query"].get("timeout") == "10" for f in flushes)  # 0.5.23 waits for idle itself; 0.5.9 ignores it
    for step, f in zip(_steps(tmp_path / "s"), ok, strict=False):
        assert step["cache_flush"]["ok"] and step["cache_flush"]["tries"] >= 2
        assert step["t_start"] >= f["t"]
    ev = _events(tmp_path / "s")
    assert not [e for e in ev if "not flushed" in e["text"]]
    assert [e["text"] for e in ev if e["text"].startswith("cache flushed before")][0].count("refused") == 1


def test_a_flush_refused_for_good_says_so(tmp_path):
    """The server keeps refusing (another client's load): redline stops asking after its
    limit and says it was refused, with the status, not a metrics timeout."""
    from redline.engine.run.server_ops import ServerOps

    async def go():
        with SglangFixture("0.5.9", hold_s=3600) as srv:
            srv.last_end = time.monotonic()  # a stream just ended: the server still holds it
            async with httpx.AsyncClient() as client:
                ops = ServerOps(client, srv.url, "sglang", lambda *a, **k: None, lambda t: None)
                return await ops.flush_cache(max_s=1.0), len(srv.flushes)

    res, calls = asyncio.run(go())
    assert not res.ok and res.status == 400 and res.tries == calls >= 3 and 0.9 <= res.waited_s < 3.0
    assert "operation will not be performed" in res.said  # 0.5.9's refusal reads as its success text


def test_the_admin_key_opens_the_ops_and_no_key_reaches_the_session(tmp_path):
    """Case 10: the server was started with --api-key and --admin-api-key (both in its
    /server_info, in clear). --admin-key is the bearer of /flush_cache and the profiler, not of
    /generate; neither key is in any session file or export."""
    with SglangFixture("0.5.23", info="server_info_keys", metrics="metrics_retract_before", admin_key=ADMIN_KEY) as srv:
        preset = _preset([2, 3], flush_cache=True, profile=(3,))
        out, e = asyncio.run(_run(srv.url, tmp_path / "s", preset, admin_key=ADMIN_KEY, profile_s=0.3))
        seen = {k: set(v) for k, v in srv.auth_seen.items()}
        flushes = list(srv.flushes)
    assert seen["/flush_cache"] == seen["/start_profile"] == seen["/stop_profile"] == {f"Bearer {ADMIN_KEY}"}
    assert seen["/generate"] == {""}  # the admin key goes to the control endpoints only
    assert all(f["ok"] for f in flushes) and out.steps[1].profiles and out.steps[1].profiles[0]["ok"]
    meta = json.loads((tmp_path / "s" / "meta.json").read_text())
    assert meta["server_info"]["api_key"] == meta["server_info"]["admin_api_key"] == "***"
    assert "internal_states" in meta["server_info"]
    _no_keys_anywhere(tmp_path / "s")


def test_without_the_admin_key_one_warning_names_it(tmp_path):
    with SglangFixture("0.5.23", info="server_info_keys", metrics="metrics_retract_before", admin_key=ADMIN_KEY) as srv:
        preset = _preset([2, 3], flush_cache=True, profile=(2, 3))
        out, _ = asyncio.run(_run(srv.url, tmp_path / "s", preset, profile_s=0.3))
        flushes = list(srv.flushes)
    assert len(flushes) == 1 and flushes[0]["status"] == 401  # asked once, then skipped
    assert all(s.cache_flush is None and s.profiles is None for s in out.steps)
    warned = [e["text"] for e in _events(tmp_path / "s") if e["kind"] == "warning" and ("401" in e["text"])]
    assert len(warned) == 2 and all("--admin-key" in w and "REDLINE_ADMIN_KEY" in w for w in warned), warned  # flush, profiler
    _no_keys_anywhere(tmp_path / "s")


def _no_keys_anywhere(session: Path) -> None:
    export_session(session, "ndjson")
    export_session(session, "csv")
    for f in session.rglob("*"):
        if f.is_file():
            data = f.read_bytes()
            assert API_KEY.encode() not in data and ADMIN_KEY.encode() not in data, f


def test_the_trace_is_found_in_the_profiler_dir_and_the_stalled_step_marked(tmp_path, monkeypatch):
    """Case 7: SGLang's /stop_profile names no path and answers once the trace is written (here
    1.2 s, streams paused meanwhile). redline waits for it, finds the file SGLang wrote with its
    profile_prefix in SGLANG_TORCH_PROFILER_DIR, and marks the step it stalled `profiled`."""
    prof = tmp_path / "prof"
    monkeypatch.setenv("SGLANG_TORCH_PROFILER_DIR", str(prof))  # the server's (it runs here) and redline's
    with SglangFixture("0.5.23", metrics="metrics_retract_before", export_s=1.2) as srv:
        preset = _preset([2, 3], hold_s=2.5, profile=(3,))
        out, _ = asyncio.run(_run(srv.url, tmp_path / "s", preset, profile_s=0.4))
        calls, traces = list(srv.profile_calls), list(srv.traces)
    start, stop = calls
    assert start["body"]["profile_prefix"].startswith("redline-") and "output_dir" not in start["body"]
    (trace,) = traces
    assert Path(trace).parent == prof and Path(trace).name.startswith(start["body"]["profile_prefix"] + "-")
    c2, c3 = _steps(tmp_path / "s")
    assert not c2["profiled"] and c3["profiled"]
    (p,) = c3["profiles"]
    assert p["ok"] and p["trace"] == trace and p["stopped_by"] == "profile_s" and p["stop_s"] >= 1.1
    line = [e["text"] for e in _events(tmp_path / "s") if e["text"].startswith("profiler stopped")][0]
    assert f"trace on the server: {trace}" in line and "to write it" in line


def test_a_stop_that_fails_is_a_failure_with_its_text(tmp_path, monkeypatch):
    monkeypatch.setenv("SGLANG_TORCH_PROFILER_DIR", str(tmp_path / "prof"))
    with SglangFixture("0.5.9", metrics="metrics_retract_before", fail_stop=True) as srv:
        out, _ = asyncio.run(_run(srv.url, tmp_path / "s", _preset([2], hold_s=1.5, profile=(2,)), profile_s=0.3))
    (p,) = out.steps[0].profiles
    assert not p["ok"] and p["server_said"] == "Internal Server Error"
    warn = [e["text"] for e in _events(tmp_path / "s") if e["kind"] == "warning" and "stop_profile" in e["text"]]
    assert len(warn) == 1 and "HTTP 500: Internal Server Error" in warn[0] and "log says why" in warn[0], warn
    assert p["trace"].startswith("/tmp/redline-") and "SGLANG_TORCH_PROFILER_DIR, default /tmp" in p["trace"]  # where it would be, no file


@pytest.mark.parametrize("how", ["flag", "env"])
def test_redline_run_admin_key_from_the_flag_or_the_environment(tmp_path, monkeypatch, capsys, how):
    """`redline run ... --flush-cache --admin-key KEY` (or REDLINE_ADMIN_KEY): the flush is let
    in; the key is masked in meta.json's command line and in no file."""
    from helpers import main_in_process, write_preset

    monkeypatch.setenv("CI", "true")
    monkeypatch.delenv("REDLINE_ADMIN_KEY", raising=False)
    extra = ["--admin-key", ADMIN_KEY] if how == "flag" else []
    if how == "env":
        monkeypatch.setenv("REDLINE_ADMIN_KEY", ADMIN_KEY)
    preset = write_preset(tmp_path, "short", concurrency=[2], input_len=8, output_len=4, hold_s=1.0, exact=True)
    with SglangFixture("0.5.9", info="server_info_keys", metrics="metrics_idle_stale", admin_key=ADMIN_KEY) as srv:
        rc = main_in_process(["run", str(preset), "--headless", "--url", srv.url, "--out", str(tmp_path / "s"),
                              "--no-nvml", "--api", "generate", "--flush-cache", *extra])
        flushes = list(srv.flushes)
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert flushes and flushes[-1]["ok"] and ADMIN_KEY not in out + err
    meta = json.loads((tmp_path / "s" / "meta.json").read_text())
    if how == "flag":
        assert meta["command_line"][meta["command_line"].index("--admin-key") + 1] == "***"
    _no_keys_anywhere(tmp_path / "s")


def test_an_unsendable_admin_key_is_one_line_not_echoed(tmp_path, monkeypatch, capsys):
    from helpers import main_in_process

    monkeypatch.setenv("CI", "true")
    monkeypatch.setenv("REDLINE_ADMIN_KEY", "adm\r\nX-Evil: 1")
    rc = main_in_process(["--url", "http://127.0.0.1:9", "--headless", "--out", str(tmp_path / "s")])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "REDLINE_ADMIN_KEY" in err and "Evil" not in err, err


def test_the_trace_export_is_not_a_stall(tmp_path, monkeypatch):
    """The export holds every stream (no token for 1.8 s) inside the step, past `[stop] stall_s
    = 1`: redline made that silence itself, so the ramp goes on (it would end as `stalled`)."""
    monkeypatch.setenv("SGLANG_TORCH_PROFILER_DIR", str(tmp_path / "prof"))
    with SglangFixture("0.5.23", metrics="metrics_retract_before", export_s=1.8, chunks=400, delay_s=0.02) as srv:
        preset = _preset([2, 3], hold_s=3.5, profile=(2,))
        preset = dataclasses.replace(preset, stop=dataclasses.replace(preset.stop, stall_s=1.0))
        out, _ = asyncio.run(_run(srv.url, tmp_path / "s", preset, profile_s=0.3))
    assert out.break_result is None or out.break_result.reason != "stalled", out.break_result
    assert [s.concurrency for s in out.steps] == [2, 3] and out.steps[0].profiled and not out.steps[1].profiled
    assert out.steps[0].profiles[0]["stop_s"] >= 1.7
