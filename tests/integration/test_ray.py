"""Workers as Ray actors (issue 17, `--ray ADDRESS --workers N`): a local Ray cluster on
127.0.0.1, started and stopped by this test (its own process group: no other Ray on the
machine is touched), runs 2 actors; counts are checked against the sim's own record."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import polars as pl
import pytest

from redline.engine.core.config import EngineConfig
from redline.engine.core.engine import Engine
from redline.engine.workload.prompts import WorkloadConfig

from helpers import free_port

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'redline[ray]')")


@pytest.fixture(scope="module")
def ray_head():
    port = free_port()
    exe = os.path.join(os.path.dirname(sys.executable), "ray")
    proc = subprocess.Popen(
        [exe, "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={port}", "--num-cpus=2",
         "--include-dashboard=false", "--disable-usage-stats"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"},
    )
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:  # bounded: the head's GCS port answers
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail(f"ray start exited with {proc.returncode}")
                time.sleep(0.5)
        else:
            pytest.fail("the local Ray head did not come up within 90 s")
        time.sleep(2.0)  # the raylet registers after the GCS listens
        yield f"127.0.0.1:{port}"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(5)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.mark.slow
def test_two_ray_actors_give_the_same_counts(sim_factory, ray_head, tmp_path):
    sim = sim_factory("healthy")
    out = tmp_path / "s"

    async def go() -> Engine:
        e = Engine(EngineConfig(url=sim.url, workers=2, ray=ray_head, concurrency=6,
                                workload=WorkloadConfig(input_len=16, output_len=12), use_nvml=False, out_dir=out))
        await e.start()
        try:
            assert [s.alive for s in e.pool.states] == [True, True]
            await asyncio.sleep(3.5)
            assert e.in_flight == 6
            e.set_concurrency(10)
            done = e.metrics.completed
            await asyncio.sleep(3.5)
            assert e.metrics.completed > done and e.in_flight == 10
        finally:
            await e.stop()
        return e

    asyncio.run(go())
    rows = pl.read_ndjson(out / "requests.ndjson")
    truth = httpx.get(sim.url + "/sim/requests", timeout=30).json()
    assert rows.height == len(truth)  # every request the sim received is one row, and no other
    load = rows.filter(pl.col("phase") != "calibration")
    assert set(load["worker"].to_list()) == {0, 1}
    summary = json.loads((out / "summary.json").read_text())
    assert sum(w["requests"] for w in summary["workers"]) == load.height
    assert all(w["node"] for w in summary["workers"])
    assert [s["concurrency"] for s in summary["steps"]] == [6, 10]


def test_a_ray_address_with_no_head_is_one_line_at_once():
    from redline.engine.load.ray_pool import RayUnavailable, connect

    with pytest.raises(RayUnavailable) as exc:
        connect(f"127.0.0.1:{free_port()}")
    msg = str(exc.value)
    assert "no Ray head answers there" in msg and "\n" not in msg
