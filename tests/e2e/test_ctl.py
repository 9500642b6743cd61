"""A held headless session (`redline --headless --control`) driven over HTTP and by
`redline ctl`, as scripts and agents do (issue 23): 16 at the server within 2 s of the POST,
the probe down to 1 within 1.5 s, a refusal leaving the load, stop -> exit 0 and a complete
session whose events name the API; a non-loopback bind without a token refused before
anything starts; a token: 401 without it, 200 with it, and in no session file."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from helpers import ROOT, finish, free_port, main_in_process, redline_command, sim_running, wait_for

TOKEN = "ctl-test-token-0123456789"


def held(url: str, port: int, out: Path, *args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [*redline_command(), "--headless", "--url", url, "--control", f"127.0.0.1:{port}", "--out", str(out),
         "--no-nvml", "--output-len", "3000", "--input-len", "16", *args],
        cwd=ROOT, env={**os.environ, "CI": "true", **(env or {})}, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )


def ctl(port: int, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*redline_command(), "ctl", "--control", str(port), *args], cwd=ROOT,
                          env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)


def up(c: httpx.Client) -> bool:
    return c.get("/v1/status").status_code == 200


@pytest.fixture
def sim(sim_factory):
    return sim_factory("healthy")


def test_headless_session_driven_over_http(sim, tmp_path):
    port, out = free_port(), tmp_path / "session"
    proc = held(sim.url, port, out, "--concurrency", "4")
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10.0) as c:
            assert wait_for(lambda: up(c), 30), finish(proc, 5)
            assert wait_for(lambda: sim_running(sim.url) == 4, 5)
            assert c.get("/v1/status").json()["concurrency"] == 4
            r = c.post("/v1/concurrency", json={"value": 16})
            t0 = time.monotonic()
            assert r.status_code == 200
            assert wait_for(lambda: sim_running(sim.url) == 16, 2.0 - (time.monotonic() - t0))
            took_16 = time.monotonic() - t0
            assert c.get("/v1/status").json()["concurrency"] == 16
            r = c.post("/v1/concurrency", json={"value": "sixteen"})
            assert r.status_code == 400 and "sixteen" in r.json()["error"]
            time.sleep(0.3)
            assert sim_running(sim.url) == 16 and proc.poll() is None  # the load holds
            line = ctl(port, "status")
            assert line.returncode == 0 and line.stdout.startswith("[RUNNING] C=16, in flight 16"), line
            assert len(line.stdout.strip().splitlines()) == 1
            r = c.post("/v1/probe")
            t1 = time.monotonic()
            assert r.status_code == 200
            assert wait_for(lambda: sim_running(sim.url) <= 1, 1.5 - (time.monotonic() - t1))
            took_probe = time.monotonic() - t1
            fams = {f.name: f for f in text_string_to_metric_families(c.get("/metrics").text)}
            assert any(s.name == "redline_ttft_seconds_bucket" for s in fams["redline_ttft_seconds"].samples)
            cancelled = [s.value for s in fams["redline_requests"].samples if s.labels.get("outcome") == "cancelled"]
            assert cancelled and cancelled[0] >= 15
            r = c.post("/v1/stop")
            assert r.status_code == 200
        code, stdout, stderr = finish(proc, 20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    assert code == 0, (stdout, stderr)
    assert "redline: holding C=4" in stdout and "api stop from 127.0.0.1:" in stdout
    meta = json.loads((out / "meta.json").read_text())
    assert meta["ended_at"] and meta["end_reason"].startswith("api stop from 127.0.0.1:")
    rows = [json.loads(x) for x in (out / "events.ndjson").read_text().splitlines() if x.strip()]
    api = [r["text"] for r in rows if r["kind"] == "api"]
    assert any(t.endswith(": concurrency value=16") for t in api)
    assert any(t.endswith(": probe") for t in api) and any(t.endswith(": stop") for t in api)
    assert any("refused" in t and "sixteen" in t for t in api)
    assert (out / "summary.json").is_file() and (out / "requests.ndjson").stat().st_size > 0
    assert wait_for(lambda: sim_running(sim.url) == 0, 5), "no load left behind"
    print(f"16 at the server {took_16:.2f} s after the POST; probe down to <= 1 in {took_probe:.2f} s")


def test_non_loopback_without_a_token_is_refused_before_anything_starts(tmp_path):
    out = tmp_path / "never"
    r = subprocess.run([*redline_command(), "--headless", "--control", "0.0.0.0:0", "--out", str(out)], cwd=ROOT,
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and "--control-token-env" in r.stderr
    assert not out.exists()
    assert main_in_process(["run", "quick", "--headless", "--control", "10.1.2.3:9999", "--out", str(out)]) == 2
    assert main_in_process(["--headless", "--control", "no-port", "--out", str(out)]) == 2
    assert main_in_process(["--headless", "--control", "8080", "--control-token-env", TOKEN, "--out", str(out)]) == 2
    assert not out.exists()


def test_a_port_in_use_is_refused(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert main_in_process(["--headless", "--control", str(port), "--out", str(tmp_path / "x")]) == 2
    assert not (tmp_path / "x").exists()


def test_token_401_200_and_never_written(sim, tmp_path):
    port, out = free_port(), tmp_path / "session"
    env = {"RL_CONTROL_TOKEN": TOKEN}
    proc = held(sim.url, port, out, "--concurrency", "2", "--control-token-env", "RL_CONTROL_TOKEN", env=env)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10.0) as c:
            assert wait_for(lambda: c.get("/v1/status").status_code == 401, 30), finish(proc, 5)
            assert c.post("/v1/concurrency", json={"value": 3}).status_code == 401
            auth = {"Authorization": f"Bearer {TOKEN}"}
            assert c.get("/v1/status", headers=auth).status_code == 200
            assert c.get("/metrics", headers=auth).status_code == 200
            # redline ctl: refused without the token (exit 1), works with it
            bare = ctl(port, "concurrency", "3")
            assert bare.returncode == 1 and "401" in bare.stderr
            with_token = ctl(port, "--control-token-env", "RL_CONTROL_TOKEN", "concurrency", "3", env=env)
            assert with_token.returncode == 0 and with_token.stdout.strip() == "C=3", with_token
            assert ctl(port, "--json", "status", env={"REDLINE_CONTROL_TOKEN": TOKEN}).returncode == 0
            assert ctl(port, "stop", env={"REDLINE_CONTROL_TOKEN": TOKEN}).returncode == 0
        code, stdout, stderr = finish(proc, 20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    assert code == 0, stderr
    assert TOKEN not in stdout and TOKEN not in stderr
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) >= 4
    for p in files:
        assert TOKEN.encode() not in p.read_bytes(), p
    meta = json.loads((out / "meta.json").read_text())
    argv = meta["command_line"]
    assert argv[argv.index("--control-token-env") + 1] == "***"  # redacted like any option named *token*


def test_ctl_exit_statuses(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("REDLINE_CONTROL", "REDLINE_CONTROL_TOKEN")}
    r = subprocess.run([*redline_command(), "ctl", "status"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "--control" in r.stderr
    r = subprocess.run([*redline_command(), "ctl", "--control", str(free_port()), "status"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 3 and "cannot reach" in r.stderr
    assert main_in_process(["ctl", "--control", "1", "concurrency", "many"]) == 2
    assert main_in_process(["ctl", "--control", "1", "frobnicate"]) == 2


def test_ctl_against_a_held_session(sim, tmp_path):
    port, out = free_port(), tmp_path / "session"
    proc = held(sim.url, port, out, "--concurrency", "2", "--max-concurrency", "32")
    env = {"REDLINE_CONTROL": f"http://127.0.0.1:{port}"}
    ramp = tmp_path / "api-ramp.toml"  # a file: ctl sends its text
    ramp.write_text('name = "api-ramp"\n[workload]\ninput_len = 16\noutput_len = 2500\n'
                    '[ramp]\nconcurrency = [2, 3]\nwarmup_s = 0\nhold_s = 60\nmin_requests = 1\n')
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10.0) as c:
            assert wait_for(lambda: up(c), 30), finish(proc, 5)

        def run(*args: str) -> subprocess.CompletedProcess:
            return subprocess.run([*redline_command(), "ctl", *args], cwd=ROOT, env={**os.environ, **env},
                                  capture_output=True, text=True, timeout=30)

        for args, line in ((("concurrency", "6"), "C=6"), (("rate", "2"), "rate 2 req/s (poisson, cap 32)"),
                           (("probe",), None), (("restore",), "back to rate 2 req/s (poisson, cap 32)"),
                           (("pause",), "paused"), (("resume",), "resumed at rate 2 req/s (poisson, cap 32)"),
                           (("concurrency", "4"), "C=4"), (("slo", "ttft=2s"), None), (("lane", "on"), "probe lane on"),
                           (("workload", "output_len=2500"), "workload output_len=2500"), (("search", "--start", "2", "--max", "8"), "knee search from C=2 up to 8"),
                           (("preset", str(ramp)), "preset api-ramp started (2 steps)")):
            r = run(*args)
            assert r.returncode == 0, (args, r.stdout, r.stderr)
            assert len(r.stdout.strip().splitlines()) == 1
            if line is not None:
                assert r.stdout.strip() == line, (args, r.stdout)
        r = run("concurrency", "0")
        assert r.returncode == 1 and "concurrency 0" in r.stderr and r.stdout == ""
        r = run("restore")
        assert r.returncode == 1 and "409" in r.stderr
        r = run("preset", "no-such-preset")
        assert r.returncode == 1
        r = run("preset", "quick")  # a shipped preset by name: its C=256 is above --max-concurrency 32
        assert r.returncode == 1 and "above --max-concurrency" in r.stderr
        r = run("--json", "status")
        assert r.returncode == 0 and json.loads(r.stdout)["state"] in ("preset", "running")
        assert run("stop").returncode == 0
        code, stdout, stderr = finish(proc, 20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    assert code == 0, stderr


def test_a_headless_preset_run_taken_over_and_stopped_through_the_api(sim, tmp_path):
    from helpers import start_headless, write_preset

    port, out = free_port(), tmp_path / "session"
    preset = write_preset(tmp_path, "long", concurrency=[2, 3], output_len=2000, hold_s=60)
    proc = start_headless(sim.url, preset, out, "--control", f"127.0.0.1:{port}")
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10.0) as c:
            assert wait_for(lambda: c.get("/v1/status").json()["state"] == "preset", 30), finish(proc, 5)
            assert c.post("/v1/concurrency", json={"value": 5}).status_code == 200
            assert wait_for(lambda: sim_running(sim.url) == 5, 3)
            assert wait_for(lambda: c.get("/v1/status").json()["state"] == "running", 2)  # the next snapshot
            assert not c.get("/v1/status").json()["preset"]["running"]
            time.sleep(0.5)
            assert proc.poll() is None  # held, not ended
            assert c.post("/v1/stop").status_code == 200
        code, stdout, stderr = finish(proc, 20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    assert code == 0, (stdout, stderr)
    assert "cancelled through the control API; holding C=5" in stdout
    assert json.loads((out / "meta.json").read_text())["end_reason"].startswith("api stop from")
