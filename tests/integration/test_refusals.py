"""A server that refuses: SGLang's in-stream shedding, aborts half-way, an ok stream with no
token, a model the server does not serve (issue 42 cases 4 and 14).

Against the sim's fault knobs (`max_queued_requests`, `fail_midstream_rate`, `strict_model`,
`sglang_version`): each request's kind, status, message and partial tokens are held to the
sim's own record of what it sent (/sim/state, /sim/requests).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path

import httpx
import pytest

from redline.engine.client.api_formats import CHAT, COMPLETIONS, GENERATE, PATHS, build_body, make_decoder
from redline.engine.client.http import make_client
from redline.engine.client.request import refusal, run_request
from redline.engine.client.target import TargetUnreachable, detect
from redline.engine.constants import CONSECUTIVE_FAILURES_END
from redline.engine.core.config import EngineConfig
from redline.engine.core.engine import Engine
from redline.engine.core.measurements import FailureStreak
from redline.engine.load.sender import OVERLOADED
from redline.engine.measure import records
from redline.engine.measure.hooks import RequestHooks
from redline.engine.measure.records import RequestRecord
from redline.engine.report.export import read_table
from redline.engine.sim.profiles import get_profile
from redline.engine.sim.refusals import QUEUE_FULL
from redline.engine.sim.serve import start_sim_thread
from redline.engine.workload.prompts import WorkloadConfig

from helpers import MiniServer, finish, start_headless, until, write_preset

MODEL = "redline-sim-70b"
APIS = (CHAT, COMPLETIONS, GENERATE)


def _profile(**knobs):
    return dataclasses.replace(get_profile("healthy"), decode_base_s=0.002, decode_per_seq_s=0.0, **knobs)


async def _one(client: httpx.AsyncClient, url: str, api: str, max_tokens: int = 8) -> RequestRecord:
    rec = RequestRecord(rid=1, phase="live", step=0, concurrency=1, t_send=0.0, max_tokens=max_tokens)
    return await run_request(client, url + PATHS[api], api, build_body(api, MODEL, "hello there", max_tokens), rec, RequestHooks())


def _truth(url: str) -> tuple[dict, list[dict]]:
    state = httpx.get(url + "/sim/state", timeout=5).json()
    return state, httpx.get(url + "/sim/requests", timeout=5).json()


# -- the decoders: SGLang's ways of refusing, as bytes -----------------------------------------
def test_each_in_stream_refusal_is_read_with_its_status_and_message():
    chat, gen = make_decoder(CHAT), make_decoder(GENERATE)
    # 0.5.23 chat / completions: an error event with the status as its code
    ev = chat(b'{"error":{"object":"error","message":"The request queue is full.","type":"SERVICE_UNAVAILABLE","param":null,"code":503}}')
    assert refusal(ev) == (records.ERR_SHED, 503, "in-stream 503: The request queue is full.")
    # /generate: meta_info.finish_reason of type abort, its status_code and message
    ev = gen(b'{"text":"","output_ids":[],"meta_info":{"id":"x","finish_reason":{"type":"abort","status_code":503,'
             b'"message":"The request queue is full."},"completion_tokens":0}}')
    assert ev.abort and refusal(ev) == (records.ERR_SHED, 503, "in-stream 503: The request queue is full.")
    # a choice's finish_reason "abort" (a graceful abort: no status, no message): shed too
    ev = chat(b'{"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"abort"}]}')
    assert ev.abort and refusal(ev) == (records.ERR_SHED, None, 'in-stream abort (finish_reason "abort")')
    # an abort with an internal error's status is a server error, not load shedding
    ev = gen(b'{"text":"ab","meta_info":{"finish_reason":{"type":"abort","status_code":500,"message":"boom"},"completion_tokens":2}}')
    assert refusal(ev) == (records.ERR_SERVER, 500, "in-stream 500: boom")
    # an error event without a code keeps its plain message, as before
    ev = chat(b'{"error":{"message":"bad things"}}')
    assert refusal(ev) == (records.ERR_SERVER, None, "bad things")
    # 429 in the stream is shedding as well; a slot backs off on shed as on HTTP 503
    ev = chat(b'{"error":{"message":"slow down","code":429}}')
    assert refusal(ev)[:2] == (records.ERR_SHED, 429)
    assert records.ERR_SHED in OVERLOADED and records.ERR_SHED in records.ERROR_KINDS


def test_an_abort_chunk_is_read_as_text_and_abort():
    """A chunk that carries text and its abort is read as both."""
    payload = b'{"id":"c","choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"abort"}]}'
    from redline.engine.client.api_formats import OpenAIDecoder

    d = OpenAIDecoder(CHAT)
    ev = d.decode(payload)
    assert ev.abort and ev.content and ev.tokens == 1


# -- against the sim ---------------------------------------------------------------------------
@pytest.mark.server
@pytest.mark.parametrize("version", ["0.5.23", "0.5.9"])
def test_a_full_queue_sheds_each_api_as_the_version_does(version):
    """max_queued_requests=0: SGLang refuses every request (`len(queue) + 1 <= 0` never holds)
    inside its 200 stream. 0.5.23: each API says so with status 503 and the message; 0.5.9's
    chat and completions streams break instead (their KeyError on the abort), /generate says it."""
    with start_sim_thread(_profile(max_queued_requests=0, sglang_version=version)) as sim:

        async def go():
            async with make_client() as c:
                return [await _one(c, sim.url, api) for api in APIS]

        recs = asyncio.run(go())
        state, truth = _truth(sim.url)
    assert state["failures"] == {"shed": 3} and state["received"] == 3
    assert all(r["tokens"] == 0 for r in truth)
    for api, rec in zip(APIS, recs, strict=False):
        assert rec.status == records.FAILED and rec.output_tokens == 0 and rec.t_first is None, (api, rec)
        if version == "0.5.9" and api != GENERATE:
            assert rec.error_kind == records.ERR_DISCONNECT and rec.http_status == 200, (api, rec.error_kind, rec.error_text)
        else:
            assert rec.error_kind == records.ERR_SHED, (api, rec.error_kind, rec.error_text)
            assert rec.http_status == 503 and rec.error_text == f"in-stream 503: {QUEUE_FULL}"


@pytest.mark.server
@pytest.mark.parametrize("version", ["0.5.23", "0.5.9"])
def test_a_request_aborted_half_way_keeps_its_partial_tokens(version):
    """fail_midstream_rate=1: every request is aborted after max_tokens // 2 tokens. Its kind
    is server_error (status 500) or disconnect (0.5.9's chat and completions), and what it
    received is what the sim sent it."""
    with start_sim_thread(_profile(fail_midstream_rate=1.0, sglang_version=version)) as sim:

        async def go():
            async with make_client() as c:
                return [await _one(c, sim.url, api, max_tokens=10) for api in APIS]

        recs = asyncio.run(go())
        state, truth = _truth(sim.url)
    assert state["failures"] == {"midstream": 3}
    assert [r["tokens"] for r in truth] == [5, 5, 5]  # half of 10 sent to each
    for api, rec in zip(APIS, recs, strict=False):
        assert rec.status == records.FAILED
        assert rec.output_tokens == 5 and len(rec.chunk_times) == 5, (api, rec.output_tokens, len(rec.chunk_times))
        if version == "0.5.9" and api != GENERATE:
            assert rec.error_kind == records.ERR_DISCONNECT, (api, rec.error_text)
        else:
            assert rec.error_kind == records.ERR_SERVER and rec.http_status == 500, (api, rec.error_kind, rec.error_text)
            assert rec.error_text.startswith("in-stream 500: ")


@pytest.mark.server
def test_an_ok_stream_with_no_token_is_empty():
    with MiniServer(chunks=0) as srv:

        async def go():
            async with make_client() as c:
                return await _one(c, srv.url, CHAT, max_tokens=8)

        rec = asyncio.run(go())
    assert rec.status == records.FAILED and rec.error_kind == records.ERR_EMPTY and rec.http_status == 200
    assert rec.error_text == "the stream ended without an output token (8 asked for)"


@pytest.mark.server
def test_a_model_the_server_does_not_list_is_refused_with_the_list():
    with start_sim_thread(_profile(strict_model=True)) as sim:

        async def go(model):
            async with make_client() as c:
                return await detect(c, sim.url, None, model)

        with pytest.raises(TargetUnreachable) as err:
            asyncio.run(go("llama-3-70b"))
        assert str(err.value) == f"model 'llama-3-70b' is not served by {sim.url}: its /v1/models lists 'redline-sim-70b' (--model picks one)"
        assert asyncio.run(go(MODEL)).model == MODEL  # the one it lists
        # and what the strict server would have answered: vLLM's 404, read as the reason
        async def wrong():
            async with make_client() as c:
                rec = RequestRecord(rid=1, phase="live", step=0, concurrency=1, t_send=0.0, max_tokens=4)
                return await run_request(c, sim.url + PATHS[CHAT], CHAT, build_body(CHAT, "llama-3-70b", "hi", 4), rec, RequestHooks())

        rec = asyncio.run(wrong())
    assert rec.error_kind == records.ERR_HTTP_4XX and rec.error_text == "HTTP 404: The model 'llama-3-70b' does not exist."


def test_the_failure_streak_counts_failures_in_a_row_and_keeps_the_last_reason():
    s = FailureStreak()

    def end(status, kind="", text="", phase="live"):
        rec = RequestRecord(rid=1, phase=phase, step=0, concurrency=1, t_send=0.0, status=status, error_kind=kind, error_text=text)
        s.on_end(rec)

    for _ in range(3):
        end(records.FAILED, records.ERR_HTTP_4XX, "HTTP 404: The model 'x' does not exist.")
    end(records.CANCELLED)  # neither a failure nor a success
    end(records.OK, phase="calibration")  # start-up's own: not the load's
    assert (s.count, s.kind, s.reason) == (3, records.ERR_HTTP_4XX, "HTTP 404: The model 'x' does not exist.")
    end(records.OK)
    assert s.count == 0 and s.reason  # the last reason stays for who reads it after the streak


# -- the engine against the sim -----------------------------------------------------------------
async def _engine(url: str, c: int, out: Path | None = None, **kw) -> Engine:
    kw.setdefault("workload", WorkloadConfig(input_len=16, output_len=8))
    e = Engine(EngineConfig(url=url, concurrency=c, out_dir=out, telemetry=False, calibrate=False, **kw))
    await e.start()
    return e


async def test_shed_requests_back_off_and_the_streak_names_the_servers_reason(sim_factory):
    """Every request is shed (max_queued_requests=0) at C=8: each slot backs off as for an HTTP
    503, doubling from 50 ms to 2 s, so the sim receives fewer requests each second (its own
    arrival times), and the failure streak passes CONSECUTIVE_FAILURES_END with the server's
    reason."""
    sim = sim_factory("healthy", extra_args=("--set", "max_queued_requests=0"))
    e = await _engine(sim.url, 8)
    try:
        t0 = time.time()
        assert await until(lambda: e.failure_streak.count >= CONSECUTIVE_FAILURES_END, 10)
        await asyncio.sleep(max(0.0, 3.2 - (time.time() - t0)))
        snap = e.snapshot
    finally:
        await e.stop()
    state, truth = _truth(sim.url)
    assert state["failures"] == {"shed": state["received"]} and state["completed"] == 0
    assert set(e.metrics.errors_by_kind) == {records.ERR_SHED}
    arrivals = sorted(r["t_arrive"] - t0 for r in truth)
    per_second = [sum(1 for a in arrivals if k <= a < k + 1) for k in range(3)]
    # a slot's sends at ~0, 0.1, 0.3, 0.7, 1.5, 3.1 s: at most 4 in the first second, 1 in
    # the second, 0-1 in the third; without back-off (a 50 ms pause) it would be ~20 a second
    assert per_second[0] <= 8 * 4 + 8 and per_second[1] <= 8 * 1 + 8 and per_second[2] <= 8 * 1 + 4, per_second
    assert per_second[0] > per_second[2], per_second
    assert len(arrivals) <= 8 * 7, len(arrivals)
    assert snap.failures_in_a_row >= CONSECUTIVE_FAILURES_END
    assert snap.last_failure == e.failure_streak.reason == f"in-stream 503: {QUEUE_FULL}"
    assert "overloaded" in " ".join(snap.warnings)  # the overload warning, as for HTTP 503


@pytest.mark.parametrize("version,kind", [("0.5.23", records.ERR_SERVER), ("0.5.9", records.ERR_DISCONNECT)])
async def test_every_request_failing_half_way_is_recorded_with_its_partial_tokens(sim_factory, tmp_path, version, kind):
    """fail_midstream_rate=1 at C=4: every load request's row is failed, of kind server_error
    (0.5.23: an error event, status 500) or disconnect (0.5.9), with the tokens the sim sent it
    (half of its 8) on the row; the sim's server stays up (no request is server_gone)."""
    sim = sim_factory("healthy", extra_args=("--set", "fail_midstream_rate=1", "--set", f"sglang_version={version}",
                                             "--set", "decode_base_s=0.01", "--set", "decode_per_seq_s=0"))
    e = await _engine(sim.url, 4, tmp_path / "s")
    try:
        assert await until(lambda: e.metrics.failed >= 12, 10)
    finally:
        await e.stop()
    rows = read_table(tmp_path / "s", "requests")
    ended = rows.filter(rows["status"] != "cancelled")
    assert ended.height >= 12
    assert set(ended["status"].to_list()) == {"failed"} and set(ended["error_kind"].to_list()) == {kind}
    assert set(ended["output_tokens"].to_list()) == {4}
    state, truth = _truth(sim.url)
    assert state["failures"]["midstream"] >= ended.height and state["completed"] == 0
    assert {r["tokens"] for r in truth if r["outcome"] == "failed"} == {4}
    assert not e.server_gone


def test_the_wrong_model_on_a_strict_server_is_refused_at_start_with_exit_3(sim_factory, tmp_path):
    """Issue 42 case 14: `redline run PRESET --headless --url URL --model llama-3-70b` against a
    server that 404s it: one line naming the model and the models the server lists, exit 3,
    before any load (the sim received no generation request)."""
    sim = sim_factory("healthy", extra_args=("--set", "strict_model=true"))
    preset = write_preset(tmp_path, "p", concurrency=[2], hold_s=2)
    t0 = time.monotonic()
    code, out, err = finish(start_headless(sim.url, preset, tmp_path / "s", "--model", "llama-3-70b"), 60)
    assert code == 3, (code, out, err)
    assert time.monotonic() - t0 < 30
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines == [f"redline: error: model 'llama-3-70b' is not served by {sim.url}: its /v1/models lists 'redline-sim-70b' (--model picks one)"], err
    assert httpx.get(sim.url + "/sim/state", timeout=5).json()["received"] == 0


async def test_calibration_that_the_server_refuses_says_the_servers_reason(sim_factory):
    """Start-up's calibration requests shed by the server: the warning names the server's
    reason, not a missing prompt_tokens."""
    sim = sim_factory("healthy", extra_args=("--set", "max_queued_requests=0"))
    e = Engine(EngineConfig(url=sim.url, concurrency=1, telemetry=False, calibrate=True, start_paused=True,
                            workload=WorkloadConfig(input_len=16, output_len=8)))
    await e.start()
    try:
        texts = [line.text for line in e.events.recent(50)]
    finally:
        await e.stop()
    assert f"calibration requests failed (in-stream 503: {QUEUE_FULL}): input lengths are approximate (1 token per word)" in texts, texts
    assert not any("no prompt_tokens" in t for t in texts)
