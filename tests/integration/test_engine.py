"""The engine against a simulated server the test starts: its numbers equal the server's."""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import time
import weakref

import pytest

from redline.engine.client.api_formats import CHAT, COMPLETIONS, GENERATE, PATHS, build_body
from redline.engine.client.http import make_client
from redline.engine.client.request import run_request
from redline.engine.core.config import EngineConfig
from redline.engine.core.engine import Engine
from redline.engine.measure import records
from redline.engine.measure.hooks import RequestHooks
from redline.engine.measure.records import RequestRecord
from redline.engine.workload.prompts import WorkloadConfig

from helpers import CAP8_SIM, ROOT, sim_state_async as state, until

SHORT = WorkloadConfig(input_len=32, output_len=24)


async def started(url: str, c: int, workload: WorkloadConfig = SHORT, **kw) -> Engine:
    e = Engine(EngineConfig(url=url, concurrency=c, workload=workload, **kw))
    await e.start()
    return e


async def drain(e: Engine, timeout: float = 20.0) -> None:
    """Pause and let in-flight requests finish, so counts can be compared exactly."""
    e.pause()
    assert await until(lambda: _true(e.controller.in_flight == 0), timeout) is not None


async def _true(v: bool) -> bool:
    return v


@pytest.mark.parametrize(
    "profile,c",
    [("healthy", 24), ("pp-capped", 24)],  # below the healthy cap; 3x above pp-capped's 8
)
async def test_throughput_matches_server_counters(sim_factory, profile, c):
    # the sim at half time scale, the fill and the window halved (0.75 s, 2 s; were 1.5 s, 4 s):
    # the same tokens in the window at twice the rate
    sim = sim_factory(profile, extra_args=("--set", "time_scale=0.5"))
    e = await started(sim.url, c, WorkloadConfig(input_len=32, output_len=64), telemetry=False)
    try:
        # a window of ~2100 (healthy) / ~520 (pp-capped) tokens: the two counts differ by the
        # tokens in transit at its two ends (one decode step's, 24 / 8 tokens), inside the 10 %
        await asyncio.sleep(0.75)  # every slot filled
        s0, tok0, t0 = await state(sim.url), e.metrics.output_tokens_total, time.perf_counter()
        await asyncio.sleep(2.0)
        s1, tok1, t1 = await state(sim.url), e.metrics.output_tokens_total, time.perf_counter()
    finally:
        await e.stop()
    ours = (tok1 - tok0) / (t1 - t0)
    theirs = (s1["generation_tokens_total"] - s0["generation_tokens_total"]) / (s1["t"] - s0["t"])
    assert theirs > 50
    assert abs(ours - theirs) / theirs < 0.10, (ours, theirs)


async def test_completed_and_failed_equal_server_counts(sim_factory):
    sim = sim_factory("flaky", seed=3, extra_args=("--set", "time_scale=0.25"))  # counts, not times: 150 ends sooner
    e = await started(sim.url, 32, WorkloadConfig(input_len=16, output_len=16), telemetry=False)
    try:
        await until(lambda: _true(e.metrics.completed + e.metrics.failed >= 150), 30.0)
        await drain(e)
        st = await state(sim.url)
    finally:
        await e.stop()
    m = e.metrics
    assert m.failed > 0, "the flaky profile should have produced failures"
    assert m.completed == st["completed"]
    assert m.failed == st["failed"]
    assert m.completed + m.failed + m.cancelled == st["received"]
    kinds = set(m.errors_by_kind)
    assert kinds <= {records.ERR_HTTP_500, records.ERR_DISCONNECT, records.ERR_MALFORMED}, kinds


async def test_abort_leaves_server_empty_within_1s(sim_factory):
    sim = sim_factory("pp-capped", extra_args=CAP8_SIM)  # 8 running + a queue
    e = await started(sim.url, 32, telemetry=False)
    try:
        assert await until(lambda: _q(sim.url, lambda s: s["running"] == 8 and s["queued"] > 0), 5.0) is not None
        t0 = time.monotonic()
        e.pause()  # no refill: this checks the cancellation alone (probe sends one more)
        await e.abort()
        took = await until(lambda: _q(sim.url, lambda s: s["running"] == 0 and s["queued"] == 0), 1.0)
        assert took is not None, await state(sim.url)
        assert time.monotonic() - t0 < 1.0 + 0.5
    finally:
        await e.stop()


async def _q(url, pred) -> bool:
    return pred(await state(url))


async def test_probe_drops_to_one_and_restore_returns(sim_factory):
    sim = sim_factory("healthy")
    e = await started(sim.url, 16, telemetry=False)
    try:
        assert await until(lambda: _q(sim.url, lambda s: s["running"] == 16), 3.0) is not None
        await e.probe()
        assert e.controller.concurrency == 1 and e.controller.previous == 16
        assert await until(lambda: _q(sim.url, lambda s: s["running"] <= 1), 1.0) is not None
        assert e.snapshot.state in ("probe", "running")
        e.restore()
        assert e.controller.concurrency == 16 and not e.controller.probing
        assert await until(lambda: _q(sim.url, lambda s: s["running"] == 16), 1.0) is not None
    finally:
        await e.stop()


async def test_set_concurrency_moves_server_running_within_1s(sim_factory):
    sim = sim_factory("healthy")
    e = await started(sim.url, 4, WorkloadConfig(input_len=16, output_len=60), telemetry=False)
    try:
        assert await until(lambda: _q(sim.url, lambda s: s["running"] == 4), 3.0) is not None
        e.set_concurrency(40)
        assert await until(lambda: _q(sim.url, lambda s: s["running"] == 40), 1.0) is not None
        e.set_concurrency(10)  # lowering: no new sends until in-flight < 10
        assert await until(lambda: _q(sim.url, lambda s: s["running"] == 10), 8.0) is not None
        assert e.controller.in_flight == 10
        e.pause()
        assert e.snapshot.state == "paused" or e.state == "paused"
    finally:
        await e.stop()
    assert (await state(sim.url))["running"] == 0


async def test_apis_report_the_same_tokens(sim_factory):
    sim = sim_factory("healthy", extra_args=("--set", "time_scale=0.25"))  # tokens and their order, not their times
    client = make_client()
    prompt = "the quick brown fox jumps over the lazy dog " * 8
    got = {}
    try:
        for api in (CHAT, COMPLETIONS, GENERATE):
            rec = RequestRecord(rid=1, phase="live", step=0, concurrency=1, t_send=0.0)
            await run_request(client, sim.url + PATHS[api], api, build_body(api, "redline-sim-70b", prompt, 37), rec, RequestHooks())
            assert rec.status == records.OK, rec.error_text
            assert rec.usage_reported
            got[api] = rec
    finally:
        await client.aclose()
    assert {r.output_tokens for r in got.values()} == {37}
    assert got[COMPLETIONS].input_tokens == got[GENERATE].input_tokens
    assert got[CHAT].input_tokens > got[COMPLETIONS].input_tokens  # the chat template's tokens
    for r in got.values():
        assert r.ttft is not None and 0 < r.ttft < r.e2e
        assert len(r.chunk_times) == 37  # one token per chunk on this profile


async def test_merged_chunks_count_tokens_from_usage(sim_factory):
    sim = sim_factory("healthy", extra_args=("--set", "tokens_per_chunk=4", "--set", "time_scale=0.25"))  # counts, not times
    e = await started(sim.url, 2, WorkloadConfig(input_len=16, output_len=40), telemetry=False, calibrate=False)
    try:
        assert await until(lambda: _true(e.metrics.completed >= 4), 15.0) is not None
        await drain(e)
        st = await state(sim.url)
    finally:
        await e.stop()
    assert e.metrics.output_tokens_total == st["generation_tokens_total"]


async def test_unreachable_target_raises_before_load():
    from redline.engine.client.target import TargetUnreachable

    e = Engine(EngineConfig(url="http://127.0.0.1:9", concurrency=1))
    with pytest.raises(TargetUnreachable):
        await e.start()


def test_engine_never_imports_textual():
    code = (
        "import pkgutil, importlib, sys, redline.engine as engine\n"
        "for m in pkgutil.walk_packages(engine.__path__, 'redline.engine.'):\n"
        "    if m.name != 'redline.engine.sim.__main__': importlib.import_module(m.name)\n"
        "bad = [m for m in sys.modules if m == 'textual' or m.startswith('textual.')]\n"
        "assert not bad, bad\n"
        "print(len([m for m in sys.modules if m.startswith('redline.engine')]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.strip()) > 20


class _Cycle:
    def __init__(self) -> None:
        self.me = self  # only the cyclic collector frees it


async def test_a_running_engine_freezes_its_heap_each_second_and_its_stop_reclaims_what_froze(sim_factory):
    """engine/heap.py in the engine's own process: while the load runs, what lived a second
    leaves the collector's walks (a full collection does not reach it); the stop collects
    everything and leaves nothing frozen (a process that embeds the engine goes on with its
    collector as before)."""
    sim = sim_factory("healthy")
    enabled = gc.isenabled()
    gc.disable()  # no automatic collection: only the engine's freeze decides where the cycle goes
    gc.unfreeze()
    try:
        e = await started(sim.url, 8, telemetry=False)
        try:
            old = _Cycle()
            gone = weakref.ref(old)
            del old
            # the ticker's next freeze (once a second) takes the cycle with everything else
            assert await until(lambda: _true(gc.get_freeze_count() > 1000), 5.0) is not None, "the heap never froze"
            await asyncio.sleep(0.1)
            gc.collect()  # a full collection: the frozen cycle is out of its walk
            assert gone() is not None
            assert e.metrics.completed + e.in_flight > 0
        finally:
            await e.stop()
        assert gc.get_freeze_count() == 0
        assert gone() is None  # the stop's reclaim collected it
    finally:
        gc.unfreeze()
        if enabled:
            gc.enable()


@pytest.mark.server
async def test_a_rise_in_c_opens_its_connections_before_its_requests_clocks_start(sim_factory, monkeypatch):
    """C=2 -> 48 against the sim: every connection the rise opened was open before the first of
    its requests was stamped (so no TTFT of theirs holds a connect), and the 46 requests that
    started then took those connections (none opened its own). Send waits are recorded for all."""
    from redline.engine.client.transport import LeanTransport

    sim = sim_factory("healthy")
    opened_at: list[float] = []
    real = LeanTransport._connect

    async def connect(self, key, timeout):
        conn = await real(self, key, timeout)
        opened_at.append(time.perf_counter())  # the engine's own clock: its send stamps'
        return conn

    monkeypatch.setattr(LeanTransport, "_connect", connect)
    e = await started(sim.url, 2, telemetry=False, workload=WorkloadConfig(input_len=32, output_len=400))
    try:
        sender = e.measurements.load_sender
        assert await until(lambda: _true(len(sender.in_flight) == 2), 10.0) is not None
        sent: list[RequestRecord] = []
        sender.hooks.sent.add(sent.append)
        n0 = len(opened_at)
        e.set_concurrency(48)
        assert await until(lambda: _true(len(sent) >= 46), 10.0) is not None
        rise, during = sent[:46], opened_at[n0:]
        assert len(during) == 46  # one each, as before: no more, no fewer
        assert max(during) <= min(r.t_send for r in rise)  # all open before the first stamp
        assert await until(lambda: _true(all(r.send_wait is not None for r in rise)), 10.0) is not None
    finally:
        await e.stop()
