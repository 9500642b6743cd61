"""Server faults: each is counted by kind, shown and logged; redline neither crashes nor hangs;
when the server comes back, load resumes at the set concurrency.

Against the sim's fault knobs (`--set FIELD=VALUE`), a sim process killed, crashed, frozen or
restarted on the same port, and small servers the tests start on 127.0.0.1 for the faults the
sim does not make (a server that accepts and hangs up: an SSH tunnel to a dead server).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from redline.engine.client.api_formats import CHAT, PATHS, build_body
from redline.engine.client.http import TRANSPORTS, make_client
from redline.engine.client.request import run_request
from redline.engine.core.config import EngineConfig
from redline.engine.core.engine import SERVER_GONE, Engine
from redline.engine.measure import records
from redline.engine.measure.hooks import RequestHooks
from redline.engine.measure.records import RequestRecord
from redline.engine.report.export import read_table
from redline.engine.sim.serve import LISTENING_PREFIX
from redline.engine.workload.prompts import WorkloadConfig

from helpers import (
    ROOT,
    MiniServer,
    finish,
    free_port,
    raw_server,
    sim_running,
    sim_state_async as state,
    start_headless,
    until,
    wait_for,
    write_preset,
)

SHORT = WorkloadConfig(input_len=16, output_len=16)

pytestmark = pytest.mark.server  # every test here starts a server (the sim, MiniServer, raw_server)


# -- helpers ------------------------------------------------------------------------------
async def started(url: str, c: int, tmp_path: Path | None = None, **kw) -> Engine:
    kw.setdefault("workload", SHORT)
    kw.setdefault("telemetry", False)
    kw.setdefault("calibrate", False)
    e = Engine(EngineConfig(url=url, concurrency=c, out_dir=tmp_path, **kw))
    await e.start()
    return e


async def stop_within(e: Engine, seconds: float = 5.0) -> float:
    t0 = time.monotonic()
    await asyncio.wait_for(e.stop(), seconds)
    return time.monotonic() - t0


def attempts(e: Engine) -> int:
    m = e.metrics
    return m.completed + m.failed + m.cancelled


def spawn_sim_on(port: int, profile: str = "healthy", *extra: str) -> subprocess.Popen:
    """`python -m redline.engine.sim --port P` (a restart on the same port); waits for it to listen."""
    p = subprocess.Popen(
        [sys.executable, "-m", "redline.engine.sim", "--port", str(port), "--sim-profile", profile, *extra],
        cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )
    line = p.stdout.readline().decode()  # the sim prints it once bound, or exits
    assert line.startswith(LISTENING_PREFIX), (line, p.stderr.read().decode() if p.poll() is not None else "")
    return p


def end_proc(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(3)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(3)
    for f in (p.stdout, p.stderr):
        if f is not None:
            f.close()


# -- HTTP errors, disconnects, malformed events: counted by kind, shown, logged -------------
@pytest.mark.parametrize(
    "settings,kinds",
    [
        (("error_500_rate=0.3", "error_429_rate=0.3"), {"http_500": records.ERR_HTTP_500, "http_429": records.ERR_HTTP_429}),
        (("overload_above=3",), {"overloaded": records.ERR_HTTP_503}),
        (("disconnect_rate=0.3", "malformed_rate=0.3"), {"disconnect": records.ERR_DISCONNECT, "malformed": records.ERR_MALFORMED}),
    ],
    ids=["500-429", "503", "disconnect-malformed"],
)
async def test_server_errors_are_counted_by_kind_shown_and_logged(sim_factory, tmp_path, settings, kinds):
    extra = tuple(a for s in (*settings, "decode_base_s=0.005") for a in ("--set", s))  # a fast pace
    sim = sim_factory("healthy", extra_args=extra)
    e = await started(sim.url, 8, tmp_path / "s")
    try:
        assert await until(lambda: all(e.metrics.errors_by_kind.get(k, 0) >= 2 for k in kinds.values()), 10)
        e.pause()  # let in-flight requests end, so the counts compare exactly
        assert await until(lambda: e.controller.in_flight == 0, 10)
        await asyncio.sleep(1.1)  # one tick: error lines reach the log, the last errors the snapshot
        st = await state(sim.url)
        snap = e.snapshot
        assert snap.state == "paused"  # not crashed, not gone
    finally:
        assert await stop_within(e) < 5
    ours = {k: v for k, v in e.metrics.errors_by_kind.items() if v}
    assert ours == {ours_k: st["failures"][sim_k] for sim_k, ours_k in kinds.items()}, (ours, st["failures"])
    assert e.metrics.completed == st["completed"] and e.metrics.failed == st["failed"]
    assert snap.errors_by_kind == ours  # shown: the snapshot the screen draws
    shown = " ".join(line.text for line in snap.log if line.kind == "error")
    assert all(k in shown for k in kinds.values()), shown
    reqs = read_table(tmp_path / "s", "requests")  # logged: one row per request, with its kind
    failed = reqs.filter(reqs["status"] == "failed")
    assert dict(zip(*failed["error_kind"].value_counts(sort=True).to_dict(as_series=False).values(), strict=False)) == ours
    assert all("\n" not in t and 0 < len(t) <= 200 for t in failed["error_text"].to_list())
    events = read_table(tmp_path / "s", "events")
    logged = " ".join(events.filter(events["kind"] == "error")["text"].to_list())
    assert all(k in logged for k in kinds.values())


async def test_stalled_stream_times_out_within_the_request_timeout(sim_factory, tmp_path):
    sim = sim_factory("healthy", extra_args=("--set", "stall_after_tokens=3"))
    timeout = 0.6
    e = await started(sim.url, 4, tmp_path / "s", request_timeout=timeout)
    try:
        assert await until(lambda: e.metrics.errors_by_kind.get(records.ERR_TIMEOUT, 0) >= 8, 10)
        snap = e.snapshot
    finally:
        assert await stop_within(e) < 5
    assert set(k for k, v in e.metrics.errors_by_kind.items() if v) == {records.ERR_TIMEOUT}
    assert snap.state == "running"
    reqs = read_table(tmp_path / "s", "requests")
    failed = reqs.filter(reqs["error_kind"] == records.ERR_TIMEOUT)
    assert failed.height >= 8
    assert set(failed["chunks"].to_list()) == {3}  # the three tokens before the stall were measured
    e2e = failed["e2e_ms"].to_list()
    # silent for `timeout` after the 3rd token: ends within timeout + slack, never much later
    assert all(timeout * 1000 <= ms < (timeout + 1.0) * 1000 for ms in e2e), e2e
    assert all("request timeout" in t for t in failed["error_text"].to_list())


# -- the server goes away and comes back ----------------------------------------------------
async def test_killed_server_is_gone_without_hot_loop_and_load_resumes_on_restart(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    first = spawn_sim_on(port)
    second = None
    c = 8
    try:
        e = await started(url, c, tmp_path / "s", workload=WorkloadConfig(input_len=16, output_len=200))
        try:
            assert await until(lambda: _running_is(url, c), 10)
            first.kill()
            first.wait(5)
            t0 = time.monotonic()
            assert await until(lambda: e.server_gone, 5), e.metrics.errors_by_kind
            assert await until(lambda: e.snapshot.state == SERVER_GONE, 1.0)
            gone_after = time.monotonic() - t0
            # every stream that was running broke (and any new connection was refused): each
            # waited for the health watch's verdict, so every one is a victim of the death,
            # `server_gone`, none a `disconnect` or `connect` error of the load that sent it
            kinds = e.metrics.errors_by_kind
            assert kinds.get(records.ERR_SERVER_GONE, 0) >= c and set(kinds) == {records.ERR_SERVER_GONE}, kinds
            assert gone_after < 3
            # no hot loop: while gone, nothing is sent (the reconnect loop only asks /health)
            n0 = attempts(e)
            await asyncio.sleep(1.5)
            assert attempts(e) - n0 <= 2 and e.controller.in_flight == 0
            assert attempts(e) <= 2 * c + 8  # in all, since the kill: a few per slot at most
            assert any("server gone" in line.text for line in e.snapshot.log)
            # the same server comes back on the same port: load resumes at C
            second = spawn_sim_on(port)
            t1 = time.monotonic()
            assert await until(lambda: _running_is(url, c), 10), "load did not resume at C"
            assert not e.server_gone
            assert await until(lambda: e.snapshot.state == "running", 1.0)  # the next snapshot says so
            assert time.monotonic() - t1 < 6
            assert e.controller.concurrency == c
        finally:
            assert await stop_within(e) < 5
        events = read_table(tmp_path / "s", "events")["text"].to_list()
        assert any(t.startswith("server gone") for t in events)
        assert any(t.startswith("server back: resuming at C=8") for t in events)
        st = await state(url)
        assert st["running"] == 0  # stop left nothing running on the restarted server
    finally:
        end_proc(first)
        if second is not None:
            end_proc(second)


async def _running_is(url: str, n: int) -> bool:
    return (await state(url))["running"] == n


async def test_server_crashing_under_load_neither_crashes_nor_hangs_redline(sim_factory, tmp_path):
    """The fragile story, made quick: the server dies once its load passes 20."""
    sim = sim_factory("fragile", extra_args=("--set", "crash_above=20", "--set", "overload_above=none"))
    e = await started(sim.url, 24, tmp_path / "s")
    try:
        assert await until(lambda: sim.proc.poll() is not None, 10), "the sim should have crashed"
        assert sim.proc.returncode == 1
        assert "crashed" in sim.stderr_text()
        assert await until(lambda: e.server_gone, 5)
        assert await until(lambda: e.snapshot.state == SERVER_GONE, 1.0)
        # the requests sent before the load was held end (refused, each slot's 50 ms pause):
        # then nothing more is sent while the server is gone. (Counted from the moment the
        # screen said so, a loaded CI machine still delivered 7 of those ends in the next second.)
        assert await until(lambda: e.controller.in_flight == 0, 5)
        n0 = attempts(e)
        await asyncio.sleep(1.0)
        assert attempts(e) - n0 <= 2
    finally:
        took = await stop_within(e)
    assert took < 3
    assert e.snapshot.done and e.snapshot.state == "stopped"
    meta = json.loads((tmp_path / "s" / "meta.json").read_text())
    assert meta["ended_at"] and meta["end_reason"] == "quit"


async def test_frozen_server_does_not_hang_stop(sim_factory):
    """SIGSTOP the server: streams hang mid-way, telemetry polls hang; stop() still returns."""
    sim = sim_factory("healthy")
    e = await started(sim.url, 8, telemetry=True, workload=WorkloadConfig(input_len=16, output_len=400))
    try:
        assert await until(lambda: _running_is(sim.url, 8), 10)
        os.kill(sim.proc.pid, signal.SIGSTOP)
        await asyncio.sleep(1.0)
        assert e.controller.in_flight == 8
    finally:
        try:
            took = await stop_within(e, 8)
        finally:
            os.kill(sim.proc.pid, signal.SIGCONT)
    assert took < 3
    assert e.controller.in_flight == 0
    assert await until(lambda: _running_is(sim.url, 0), 3)  # the server saw every client leave


async def test_server_that_hangs_up_is_gone_and_comes_back(tmp_path):
    """An SSH tunnel whose far end died: connections are accepted, then closed with no reply.
    That is a gone server (connect errors), not a flood of fast `disconnect` retries.
    (Every transport maps this the same way: test_each_transport_maps_faults_to_the_same_kinds.)"""
    with MiniServer(chunks=40, delay_s=0.01) as srv:
        e = await started(srv.url, 6, tmp_path / "s")
        try:
            assert await until(lambda: e.metrics.completed >= 6, 10)
            srv.dead = True
            assert await until(lambda: e.server_gone, 5), e.metrics.errors_by_kind
            # each hung-up request waited for /health's verdict (hung up too): server_gone
            assert e.metrics.errors_by_kind.get(records.ERR_SERVER_GONE, 0) >= 6, e.metrics.errors_by_kind
            assert set(e.metrics.errors_by_kind) == {records.ERR_SERVER_GONE}
            n0 = len(srv.auth_seen("/v1/chat"))
            await asyncio.sleep(1.0)
            assert len(srv.auth_seen("/v1/chat")) - n0 <= 2  # no hot loop against it
            srv.dead = False
            assert await until(lambda: not e.server_gone and e.controller.in_flight == 6, 8)
            done = e.metrics.completed
            assert await until(lambda: e.metrics.completed > done + 6, 10)
        finally:
            assert await stop_within(e) < 5


# -- one request: every transport maps each fault to the same kind ------------------------
async def one(client: httpx.AsyncClient, url: str) -> RequestRecord:
    rec = RequestRecord(rid=1, phase="live", step=0, concurrency=1, t_send=0.0)
    return await run_request(client, url + PATHS[CHAT], CHAT, build_body(CHAT, "m", "hi", 8), rec, RequestHooks())


async def _hang_up_at_once(reader, writer) -> None:
    writer.close()


async def _reset_after_headers(reader, writer) -> None:
    await reader.readuntil(b"\r\n\r\n")
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
    chunk = b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'
    writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
    await writer.drain()
    await asyncio.sleep(0.1)
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # RST on close
    writer.transport.abort()


async def _never_answer(reader, writer) -> None:
    await asyncio.sleep(30)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_each_transport_maps_faults_to_the_same_kinds(transport):
    refused = free_port()
    client = make_client(transport=transport, request_timeout=0.5)
    try:
        rec = await one(client, f"http://127.0.0.1:{refused}")
        assert (rec.error_kind, rec.error_text, rec.http_status) == (records.ERR_CONNECT, "connection refused", 0)
        with raw_server(_hang_up_at_once) as port:
            rec = await one(client, f"http://127.0.0.1:{port}")
        assert rec.error_kind == records.ERR_CONNECT and "closed the connection before responding" in rec.error_text, rec.error_text
        with raw_server(_reset_after_headers) as port:
            rec = await one(client, f"http://127.0.0.1:{port}")
        assert rec.error_kind == records.ERR_DISCONNECT and rec.http_status == 200 and len(rec.chunk_times) == 1, rec.error_text
        with raw_server(_never_answer) as port:
            t0 = time.monotonic()
            rec = await one(client, f"http://127.0.0.1:{port}")
            took = time.monotonic() - t0
        assert rec.error_kind == records.ERR_TIMEOUT and 0.5 <= took < 2.0, (rec.error_kind, rec.error_text, took)
    finally:
        await client.aclose()


async def test_detection_against_a_silent_server_gives_up_after_one_timeout(monkeypatch):
    """A server that accepts and never answers: one detection timeout, not one per endpoint."""
    import redline.engine.client.target as target

    monkeypatch.setattr(target, "DETECT_TIMEOUT_S", 0.5)
    with raw_server(_never_answer) as port:
        client = make_client()
        t0 = time.monotonic()
        try:
            with pytest.raises(target.TargetUnreachable, match="no response within 0.5 s"):
                await target.detect(client, f"http://127.0.0.1:{port}")
        finally:
            await client.aclose()
        assert time.monotonic() - t0 < 1.5


# -- signals: no load keeps running, no hang, the exit status says which signal -------------
# (tests/e2e/test_session_signals.py covers signals during a healthy run and what the session log
# holds; these cover the moments around it: a server that hangs, and start-up.)
def long_preset(tmp_path: Path, c: int = 8) -> Path:
    return write_preset(tmp_path, "long", concurrency=[c], output_len=400)


def test_signal_while_the_server_hangs_exits_at_once_and_leaves_no_load(sim_factory, tmp_path):
    """The SSH link drops (SIGHUP) while the server is frozen mid-stream: redline must not wait
    for streams that will never end. It exits at once, and once the server runs again it finds
    every connection closed."""
    sim = sim_factory("healthy")
    proc = start_headless(sim.url, long_preset(tmp_path), tmp_path / "s")
    try:
        assert wait_for(lambda: sim_running(sim.url) == 8, 20), proc.stderr
        os.kill(sim.proc.pid, signal.SIGSTOP)
        time.sleep(0.5)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGHUP)
        rc, out, err = finish(proc, 10)
        took = time.monotonic() - t0
    finally:
        os.kill(sim.proc.pid, signal.SIGCONT)
        if proc.poll() is None:
            proc.kill()
    assert rc == 128 + signal.SIGHUP, (rc, err)
    assert took < 4, took
    assert "Traceback" not in err
    assert wait_for(lambda: sim_running(sim.url) == 0, 3), "load survived redline"
    meta = json.loads((tmp_path / "s" / "meta.json").read_text())
    assert meta["ended_at"] and meta["end_reason"] == "signal SIGHUP"


@pytest.fixture
def slow_start_sim(sim_factory):
    """Calibration takes seconds here (slow prefill): a window to signal redline while it starts."""
    return sim_factory("healthy", extra_args=("--set", "prefill_per_token_s=0.03"))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_signal_during_startup_stops_everything_and_completes_the_log(slow_start_sim, tmp_path, sig):
    sim = slow_start_sim
    proc = start_headless(sim.url, long_preset(tmp_path), tmp_path / "s")
    try:
        assert wait_for(lambda: sim_running(sim.url) >= 1, 20)  # a calibration request is in flight
        t0 = time.monotonic()
        proc.send_signal(sig)
        assert wait_for(lambda: sim_running(sim.url) == 0, 2), "load kept running after the signal"
        rc, out, err = finish(proc, 10)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "Traceback" not in err and "Unclosed" not in err, err
    assert took < 4
    meta = json.loads((tmp_path / "s" / "meta.json").read_text())
    assert meta["ended_at"] and meta["end_reason"] == f"signal {sig.name}"
    assert rc == 128 + sig, (rc, err)
