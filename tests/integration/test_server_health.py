"""Health as SGLang answers it (issue 42 case 5): its /health runs a one-token generation, so it
answers after a second or more, and 503 while it starts, shuts down or hangs. A slow /health
never makes a server gone; a 503 is "not ready", never "up"; the requests that failed because
the server died are `server_gone`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time

import httpx
import pytest
from aiohttp import web

from redline.engine.client.server_watch import GONE, NOT_READY, UP, ServerWatch
from redline.engine.constants import HEALTH_FAILS_GONE
from redline.engine.core.config import EngineConfig
from redline.engine.core.engine import SERVER_NOT_READY, Engine
from redline.engine.measure import records
from redline.engine.measure.records import RequestRecord
from redline.engine.report.export import read_table
from redline.engine.sim.profiles import get_profile
from redline.engine.sim.serve import start_sim_thread
from redline.engine.workload.prompts import WorkloadConfig

from helpers import ThreadedServer, until


def _watch(answer):
    """A ServerWatch whose /health is `answer(request)` (an async MockTransport handler)."""
    events: list[str] = []
    client = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    w = ServerWatch(client, "http://127.0.0.1:1/health", lambda: events.append("gone"), lambda: events.append("back"),
                    lambda k, t: events.append(k), on_not_ready=lambda: events.append("not ready"))
    return w, events


def _failed(kind: str = records.ERR_DISCONNECT, text: str = "stream broke") -> RequestRecord:
    return RequestRecord(rid=1, phase="live", step=0, concurrency=1, t_send=0.0, status=records.FAILED, error_kind=kind, error_text=text)


def test_a_health_check_slower_than_the_old_2_s_budget_is_up():
    """SGLang's /health under load: 2.5 s. The requests that broke wait for it, and stay
    `disconnect`: the server is up (the old 2 s budget called it gone)."""

    async def slow(request):
        await asyncio.sleep(2.5)
        return httpx.Response(200, text="OK")

    async def go():
        w, events = _watch(slow)
        recs = [_failed() for _ in range(4)]
        t0 = time.monotonic()
        await asyncio.gather(*(w.judge(r) for r in recs))
        took = time.monotonic() - t0
        await w.stop()
        return w, events, recs, took

    w, events, recs, took = asyncio.run(go())
    assert w.state == UP and not w.gone and "gone" not in events
    assert 2.4 < took < 4.0  # each waited for the one shared ask
    assert {r.error_kind for r in recs} == {records.ERR_DISCONNECT}
    assert events == ["notice"]  # 4 failures in a row, but /health answers: said once


def test_a_health_503_is_not_ready_not_up_and_200_brings_it_back():
    status = [503]

    def answer(request):
        return httpx.Response(status[0])

    async def go():
        w, events = _watch(answer)
        rec = _failed(records.ERR_CONNECT, "connection refused")
        await w.judge(rec)
        seen = (w.state, w.gone, w.down, list(events), rec.error_kind)
        status[0] = 200
        assert await until(lambda: w.state == UP, 5)
        await w.stop()
        return seen, events

    (state, gone, down, events_then, kind), events = asyncio.run(go())
    assert state == NOT_READY and not gone and down  # the server is there, it says it cannot serve
    assert events_then == ["not ready"] and kind == records.ERR_CONNECT  # not a death: its kind stays
    assert events[-1] == "back"


def test_refused_health_asks_make_it_gone_and_every_waiting_request_server_gone():
    asked = []

    def refused(request):
        asked.append(time.monotonic())
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    async def go():
        w, events = _watch(refused)
        recs = [_failed() for _ in range(5)]
        await asyncio.gather(*(w.judge(r) for r in recs))
        late = _failed(records.ERR_CONNECT, "connection refused")
        await w.judge(late)  # once gone: at once
        await w.stop()
        return w, events, recs + [late]

    w, events, recs = asyncio.run(go())
    assert w.state == GONE and events.count("gone") == 1
    assert len(asked) >= HEALTH_FAILS_GONE and asked[1] - asked[0] >= 0.15  # asked twice, apart
    assert {r.error_kind for r in recs} == {records.ERR_SERVER_GONE}
    assert recs[0].error_text == "server gone: stream broke"


# -- the sim's health ---------------------------------------------------------------------------
@pytest.mark.server
def test_a_hung_sim_stops_producing_tokens_and_its_health_still_answers():
    """hang_after=6: after 6 completions no token comes again; connections are still taken and
    /health answers 200, after its health_delay_s, as a hang SGLang's check misses; with
    health_watchdog_s (SGLang's HEALTH_CHECK_TIMEOUT) it answers 503 after that long."""
    prof = dataclasses.replace(get_profile("healthy"), decode_base_s=0.002, decode_per_seq_s=0.0, hang_after=6, health_delay_s=0.3)
    with start_sim_thread(prof) as sim:

        async def go():
            async with httpx.AsyncClient(timeout=10) as c:
                body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": True}

                async def one():
                    async with c.stream("POST", sim.url + "/v1/chat/completions", json=body) as r:
                        async for _ in r.aiter_raw():
                            pass

                for _ in range(6):
                    await one()
                hung = [asyncio.create_task(one()) for _ in range(3)]
                await asyncio.sleep(0.5)
                t0 = time.monotonic()
                h = await c.get(sim.url + "/health")
                took = time.monotonic() - t0
                state = (await c.get(sim.url + "/sim/state")).json()
                for t in hung:
                    t.cancel()
                await asyncio.gather(*hung, return_exceptions=True)
                return h.status_code, took, state

        code, took, state = asyncio.run(go())
    assert code == 200 and took >= 0.29
    assert state["hung"] and state["completed"] == 6 and state["queued"] + state["running"] == 3
    assert state["generation_tokens_total"] == 24  # 6 x 4, not one more
    # the sim's one-outcome rule holds (stats.py): every request received is inside or ended once
    assert state["received"] == 9 == state["running"] + state["queued"] + state["completed"] + state["failed"] + state["aborted"]

    watchdog = dataclasses.replace(prof, health_watchdog_s=0.2, hang_after=0)
    with start_sim_thread(watchdog) as sim:
        t0 = time.monotonic()
        assert httpx.get(sim.url + "/health", timeout=5).status_code == 503
        assert time.monotonic() - t0 >= 0.19


@pytest.mark.server
def test_a_starting_sim_answers_health_503_then_200():
    prof = dataclasses.replace(get_profile("healthy"), startup_s=0.5)
    with start_sim_thread(prof) as sim:
        assert httpx.get(sim.url + "/health", timeout=5).status_code == 503
        time.sleep(0.6)
        assert httpx.get(sim.url + "/health", timeout=5).status_code == 200


# -- the engine ---------------------------------------------------------------------------------
@pytest.mark.parametrize("delay", [1.1, 1.8])
async def test_a_slow_health_never_gives_server_gone_over_a_run(sim_factory, delay):
    """A sim whose /health takes 1.1 s or 1.8 s (SGLang's) and whose streams often break (30 %
    disconnect): every break asks /health, none ever makes the server gone, and the breaks stay
    `disconnect`."""
    sim = sim_factory("healthy", extra_args=("--set", f"health_delay_s={delay}", "--set", "disconnect_rate=0.3",
                                             "--set", "decode_base_s=0.01", "--set", "decode_per_seq_s=0"))
    e = Engine(EngineConfig(url=sim.url, concurrency=8, telemetry=False, calibrate=False, workload=WorkloadConfig(input_len=16, output_len=16)))
    await e.start()
    seen = set()
    try:
        t_end = time.monotonic() + 2 * delay + 2.5
        while time.monotonic() < t_end:
            seen.add((e.server_gone, e.state))
            await asyncio.sleep(0.05)
    finally:
        await e.stop()
    kinds = e.metrics.errors_by_kind
    assert kinds.get(records.ERR_DISCONNECT, 0) >= 10 and records.ERR_SERVER_GONE not in kinds, kinds
    assert {gone for gone, _ in seen} == {False}
    assert not {s for _, s in seen} & {"server gone", SERVER_NOT_READY}
    assert e.metrics.completed >= 20  # the load went on


class _NotReady(ThreadedServer):
    """Lists a model; its chat endpoint hangs up (a server shutting down) while /health says
    503, until `ready`: then it streams."""

    def __init__(self) -> None:
        self.ready = False
        self.chats = 0
        super().__init__()

    def app(self) -> web.Application:
        async def models(request):
            return web.json_response({"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "x"}]})

        async def health(request):
            return web.Response(status=200 if self.ready else 503)

        async def chat(request):
            self.chats += 1
            if not self.ready:
                request.transport.close()
                return web.Response()
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            await resp.write(b'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n')
            await resp.write(b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}\n\ndata: [DONE]\n\n')
            return resp

        app = web.Application()
        app.router.add_get("/v1/models", models)
        app.router.add_get("/health", health)
        app.router.add_post("/v1/chat/completions", chat)
        return app


async def test_a_server_whose_health_answers_503_is_not_ready_and_its_load_is_held(tmp_path):
    with _NotReady() as srv:
        e = Engine(EngineConfig(url=srv.url, concurrency=4, telemetry=False, calibrate=False,
                                workload=WorkloadConfig(input_len=8, output_len=1)))
        await e.start()
        try:
            assert await until(lambda: e.state == SERVER_NOT_READY, 5), e.state
            assert not e.server_gone  # not ready is not gone: the server is there
            assert await until(lambda: any("server not ready" in line.text for line in e.snapshot.log), 2)
            n0 = srv.chats
            await asyncio.sleep(1.0)
            assert srv.chats - n0 <= 4  # the load is held: no hot loop against it
            assert set(e.metrics.errors_by_kind) <= {records.ERR_CONNECT}  # not victims of a death
            srv.ready = True
            assert await until(lambda: e.metrics.completed >= 8, 10)
            assert e.state == "running"
        finally:
            await e.stop()


@pytest.mark.parametrize("workers", [1, 2])
async def test_the_requests_a_crash_kills_are_server_gone_with_and_without_workers(sim_factory, tmp_path, workers):
    """Deaths and their victims: the server dies under load (fragile, crash once its load passes
    12). Every request that failed then, broken mid-stream or refused, is `server_gone` on its
    row, in one process and with two worker processes (each worker's own watch judges its
    requests; the coordinator's holds the load)."""
    sim = sim_factory("fragile", extra_args=("--set", "crash_above=12", "--set", "overload_above=none"))
    e = Engine(EngineConfig(url=sim.url, concurrency=8, workers=workers, telemetry=False, calibrate=False,
                            out_dir=tmp_path / "s", use_nvml=False, workload=WorkloadConfig(input_len=16, output_len=400)))
    await e.start()
    try:
        assert await until(lambda: e.metrics.completed + e.in_flight >= 1, 10)
        e.set_concurrency(16)  # past the crash load
        assert await until(lambda: sim.proc.poll() is not None, 10), "the sim should have crashed"
        assert await until(lambda: e.server_gone, 10)
        assert await until(lambda: e.metrics.failed >= 16, 10), e.metrics.errors_by_kind
    finally:
        await e.stop()
    rows = read_table(tmp_path / "s", "requests")
    failed = rows.filter(rows["status"] == "failed")
    assert failed.height >= 16
    assert set(failed["error_kind"].to_list()) == {records.ERR_SERVER_GONE}, failed["error_kind"].value_counts()
    assert all(t.startswith("server gone: ") for t in failed["error_text"].to_list())


def test_a_dying_server_that_says_503_once_then_refuses_is_gone_and_its_victims_server_gone():
    """The race of a crash: the first ask gets the dying server's 503, the next ones are
    refused. That is a death (its victims server_gone), not a server that is not ready."""
    answers = iter([503])

    def dying(request):
        status = next(answers, None)
        if status is None:
            raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
        return httpx.Response(status)

    async def go():
        w, events = _watch(dying)
        rec = _failed()
        await w.judge(rec)
        await w.stop()
        return w, events, rec

    w, events, rec = asyncio.run(go())
    assert w.state == GONE and "not ready" not in events and events.count("gone") == 1
    assert rec.error_kind == records.ERR_SERVER_GONE
