"""The simulated inference server (engine.sim), tested the way a client sees it.

Every server here is started by the test itself on 127.0.0.1 (a subprocess via
spawn_sim_process, or a thread via start_sim_thread); every wait is bounded.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import subprocess
import sys
import time
from collections import Counter
from typing import Any, AsyncIterator

import aiohttp
import pytest

from redline.engine.sim.model import BatchModel
from redline.engine.sim.profiles import PROFILES, SimProfile, apply_overrides, get_profile
from redline.engine.sim.serve import SimProcess, WarmSim, spawn_sim_process, start_sim_thread
from redline.engine.sim.tokens import count_tokens

from helpers import until

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
GENERATE = "/generate"


# ---- helpers ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def healthy(shared_sim) -> SimProcess:
    """One healthy simulator shared by the read-only shape tests of this module."""
    return shared_sim("healthy")


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), timeout=timeout
    ) as s:
        yield s


def chat_body(content: str = "hello", max_tokens: int = 12, stream: bool = True,
              usage: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "redline-sim-70b", "max_tokens": max_tokens,
                            "messages": [{"role": "user", "content": content}],
                            "stream": stream, "ignore_eos": True}
    if usage:
        body["stream_options"] = {"include_usage": True}
    return body


def split_events(raw: bytes) -> list[str]:
    """SSE events of a finished stream, as the text after ``data: ``."""
    events = [e for e in raw.decode().split("\n\n") if e.strip()]
    assert all(e.startswith("data: ") for e in events), events
    return [e[len("data: "):] for e in events]


async def get_json(s: aiohttp.ClientSession, url: str) -> Any:
    async with s.get(url) as r:
        assert r.status == 200, (url, r.status)
        return await r.json()


async def get_text(s: aiohttp.ClientSession, url: str) -> str:
    async with s.get(url) as r:
        assert r.status == 200, (url, r.status)
        return await r.text()


async def metric_values(s: aiohttp.ClientSession, url: str) -> dict[str, float]:
    """``name -> value`` of the single-sample series in Prometheus text."""
    async with s.get(url) as r:
        assert r.status == 200
        text = await r.text()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name = line.split("{", 1)[0].split(" ", 1)[0]
            out[name] = float(line.rsplit(" ", 1)[1])
    return out


async def hold_streams(s: aiohttp.ClientSession, url: str, n: int,
                       max_tokens: int = 2000) -> list[asyncio.Task[None]]:
    """Open ``n`` long chat streams that read until cancelled."""

    async def one() -> None:
        async with s.post(url + CHAT, json=chat_body(max_tokens=max_tokens)) as r:
            async for _ in r.content:
                pass

    return [asyncio.create_task(one()) for _ in range(n)]


async def cancel_all(tasks: list[asyncio.Task[None]]) -> None:
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


# ---- profiles and command line --------------------------------------------------------


def test_profiles_and_unknown_name() -> None:
    assert list(PROFILES) == ["healthy", "pp-capped", "fragile", "flaky", "hung", "shedding"]
    # the profiles whose breaks the performance model alone cannot forecast
    assert [n for n, p in PROFILES.items() if p.has_faults] == ["fragile", "flaky", "hung", "shedding"]
    assert PROFILES["shedding"].max_queued_requests == 16 and PROFILES["hung"].hang_after == 200
    # SGLang's pp: 8 micro-batches of 64 // 8 = 8, 64 running in all (engine/sim/pipeline.py)
    pp = get_profile("pp-capped")
    assert (pp.running_cap, pp.micro_batch_cap, pp.micro_batches) == (64, 8, 8)
    assert pp.max_running_requests == 64 and pp.pp_max_micro_batch_size is None
    with pytest.raises(ValueError, match=r"unknown profile 'x' \(expected one of: healthy, "
                                         r"pp-capped, fragile, flaky, hung, shedding\)"):
        get_profile("x")
    tuned = apply_overrides(get_profile("healthy"), {"error_429_rate": "0.5",
                                                     "stall_after_tokens": "3"})
    assert tuned.error_429_rate == 0.5 and tuned.stall_after_tokens == 3
    with pytest.raises(ValueError, match="bad value 'lots'"):
        apply_overrides(get_profile("healthy"), {"tokens_per_chunk": "lots"})


def test_healthy_curve_saturates_in_the_model() -> None:
    p = get_profile("healthy")
    t32, t128, t192 = (p.steady_throughput(c) for c in (32, 128, 192))
    assert t128 > 2.5 * t32
    assert t192 < 1.1 * t128


def test_time_scale_scales_every_step_and_defaults_to_real_time() -> None:
    """`--set time_scale=X` (tests that need the shape of time, not its length): every
    iteration, decode, collapse and prefill alike, takes X times as long; 1.0 is the default."""
    for name in PROFILES:
        p = get_profile(name)
        assert p.time_scale == 1.0
        fast = apply_overrides(p, {"time_scale": "0.25"})
        for batch, prefill in ((1, 0), (8, 512), (64, 0), (200, 4096)):
            assert fast.step_time(batch, prefill) == pytest.approx(0.25 * p.step_time(batch, prefill))
        assert fast.steady_throughput(32) == pytest.approx(4 * p.steady_throughput(32))
    assert get_profile("healthy").step_time(32) == 0.040 + 0.0002 * 32  # unscaled: as before
    for bad in ("0", "-1"):
        with pytest.raises(ValueError, match="time_scale must be > 0"):
            apply_overrides(get_profile("healthy"), {"time_scale": bad})


def test_cli_unknown_profile_exits_2_with_one_line() -> None:
    proc = subprocess.run([sys.executable, "-m", "redline.engine.sim", "--sim-profile", "nope"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr == ("redline sim: unknown profile 'nope' (expected one of: healthy, "
                           "pp-capped, fragile, flaky, hung, shedding)\n")


# ---- endpoint shapes -------------------------------------------------------------------


async def test_info_endpoints(healthy: SimProcess, session: aiohttp.ClientSession) -> None:
    async with session.get(healthy.url + "/health") as r:
        assert r.status == 200 and await r.text() == "OK"
    models = await get_json(session, healthy.url + "/v1/models")
    assert models["object"] == "list"
    (m,) = models["data"]
    assert m["id"] == "redline-sim-70b" and m["owned_by"] == "redline-sim"
    assert m["object"] == "model" and m["max_model_len"] >= 4096
    for path in ("/get_server_info", "/server_info"):
        info = await get_json(session, healthy.url + path)
        # SGLang's arguments: the typed ones (tp 8, max_running_requests 256), its defaults else
        assert info["tp_size"] == 8 and info["pp_size"] == 1 and info["dp_size"] == 1
        assert info["max_running_requests"] == 256 and info["chunked_prefill_size"] is None
        assert info["version"] == "0.5.23" and info["status"] == "ready"
        sim_info = dict(info["redline_sim"])
        assert sim_info.pop("settings")["decode_base_s"] == 0.04
        assert sim_info == {"profile": "healthy", "gpus": 8, "pp_max_micro_batch_size": None,
                            "running_cap": 256, "seed": 0}
        assert info["max_total_num_tokens"] >= 256 * (1024 + 2048)
        (st,) = info["internal_states"]
        assert st["effective_max_running_requests_per_dp"] == 256 and st["chunked_prefill_size"] == 8192
        assert st["memory_usage"]["token_capacity"] == info["max_total_num_tokens"]
        assert {"model_path", "served_model_name", "launch_command"} <= info.keys()
    state = await get_json(session, healthy.url + "/sim/state")
    assert state["deprecated_info_calls"] == 1  # /get_server_info (SGLang logs a warning for each)
    assert {"t", "running", "queued", "completed", "failed", "aborted", "received",
            "prompt_tokens_total", "generation_tokens_total"} <= state.keys()
    assert state["profile"] == "healthy"
    assert abs(state["t"] - time.time()) < 5


async def test_metrics_and_dcgm_text(healthy: SimProcess,
                                     session: aiohttp.ClientSession) -> None:
    async with session.get(healthy.url + "/metrics") as r:
        text = await r.text()
    sched = 'engine_type="unified",model_name="redline-sim-70b",moe_ep_rank="0",pp_rank="0",tp_rank="0"'
    for name in ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage",
                 "sglang:gen_throughput", "sglang:spec_accept_length"):  # SGLang 0.5.23's scheduler labels
        assert f'{name}{{{sched}}} ' in text, name
    for name in ("sglang:prompt_tokens_total", "sglang:generation_tokens_total", "sglang:num_requests_total"):
        # its tokenizer's, by then holding its own warm-up request (8 tokens, not streamed)
        assert f'{name}{{engine_type="unified",is_streaming="false",model_name="redline-sim-70b"}} ' in text, name
    for name in ("redline_sim:requests_completed_total", "redline_sim:requests_failed_total",
                 "redline_sim:requests_aborted_total"):
        assert f'{name}{{model_name="redline-sim-70b"}} ' in text, name
    async with session.get(healthy.url + "/dcgm/metrics") as r:
        dcgm = await r.text()
    for name in ("DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED",
                 "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"):
        series = [ln for ln in dcgm.splitlines() if ln.startswith(name + "{")]
        assert len(series) == 8, name
        assert 'gpu="7"' in series[7] and 'device="nvidia7"' in series[7]
        assert 'UUID="GPU-' in series[0] and 'Hostname="redline-sim"' in series[0]
        assert 'modelName="NVIDIA H100 80GB HBM3 (simulated)"' in series[0]
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter" in dcgm


async def test_chat_stream_of_12_tokens(healthy: SimProcess,
                                        session: aiohttp.ClientSession) -> None:
    before = await get_json(session, healthy.url + "/sim/state")
    async with session.post(healthy.url + CHAT, json=chat_body(max_tokens=12)) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/event-stream")
        raw = await r.read()
    events = split_events(raw)
    assert events[-1] == "[DONE]"
    assert ": " not in "".join(events[:-1]).replace('"content":" ', "")  # compact JSON
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(isinstance(c["sim_t"], float) for c in chunks)
    # SGLang 0.5.23 (sse_utils.py build_sse_content): reasoning_content always, null
    assert chunks[0]["choices"][0]["delta"] == {"reasoning_content": None, "role": "assistant", "content": ""}
    content = [c for c in chunks[1:-2] if c["choices"]]
    assert len(content) == 12
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert [c["choices"][0]["finish_reason"] for c in content] == [None] * 12
    assert all(c["choices"][0]["delta"]["content"].startswith(" ") for c in content)
    # finish_reason in a chunk of its own
    assert chunks[-2]["choices"][0] == {"index": 0, "delta": {"reasoning_content": None}, "logprobs": None,
                                        "finish_reason": "length", "matched_stop": None}
    usage = chunks[-1]
    assert usage["choices"] == []
    assert usage["usage"]["completion_tokens"] == 12
    assert usage["usage"]["total_tokens"] == usage["usage"]["prompt_tokens"] + 12
    after = await get_json(session, healthy.url + "/sim/state")
    assert after["generation_tokens_total"] - before["generation_tokens_total"] == 12
    assert after["completed"] - before["completed"] == 1
    assert after["received"] - before["received"] == 1

    # Without include_usage there is no usage chunk; non-streaming gives one body.
    async with session.post(healthy.url + CHAT, json=chat_body(max_tokens=3, usage=False)) as r:
        events = split_events(await r.read())
    assert len(events) == 1 + 3 + 1 + 1  # role, 3 tokens, finish, [DONE]
    async with session.post(healthy.url + CHAT, json=chat_body(max_tokens=5, stream=False)) as r:
        body = await r.json()
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 5
    assert body["choices"][0]["message"]["content"].count(" ") == 5


async def test_generate_stream_is_cumulative(healthy: SimProcess,
                                             session: aiohttp.ClientSession) -> None:
    body = {"text": "The capital of France is", "stream": True,
            "sampling_params": {"max_new_tokens": 9, "ignore_eos": True}}
    async with session.post(healthy.url + GENERATE, json=body) as r:
        events = split_events(await r.read())
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert len(chunks) == 9
    texts = [c["text"] for c in chunks]
    assert all(b.startswith(a) and len(b) > len(a) for a, b in zip(texts, texts[1:], strict=False))
    assert [c["meta_info"]["completion_tokens"] for c in chunks] == list(range(1, 10))
    assert [c["meta_info"]["finish_reason"] for c in chunks[:-1]] == [None] * 8
    assert chunks[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 9}
    assert all("sim_t" in c for c in chunks)
    # the whole output_ids list in every chunk (tokenizer_manager.py _handle_batch_output)
    ids = [c["output_ids"] for c in chunks]
    assert [len(i) for i in ids] == list(range(1, 10)) and all(b[:len(a)] == a for a, b in zip(ids, ids[1:], strict=False))
    assert {"id", "prompt_tokens", "weight_version", "num_retractions", "cached_tokens"} <= chunks[0]["meta_info"].keys()
    assert "e2e_latency" in chunks[-1]["meta_info"] and "e2e_latency" not in chunks[0]["meta_info"]


async def test_completions_stream_and_prompt_tokens(healthy: SimProcess,
                                                    session: aiohttp.ClientSession) -> None:
    prompt = "Count the words in this deliberately long-ish prompt, please!"
    async with session.post(healthy.url + COMPLETIONS, json={
            "prompt": prompt, "max_tokens": 4, "stream": True,
            "stream_options": {"include_usage": True}}) as r:
        events = split_events(await r.read())
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "text_completion" for c in chunks)
    assert [c["choices"][0]["text"] != "" for c in chunks[:-1]] == [True] * 4
    assert chunks[3]["choices"][0]["finish_reason"] == "length"
    comp_prompt = chunks[-1]["usage"]["prompt_tokens"]
    assert comp_prompt == count_tokens(prompt) == math.ceil(len(prompt) / 4)

    async with session.post(healthy.url + GENERATE, json={
            "text": prompt, "sampling_params": {"max_new_tokens": 2}}) as r:
        gen = await r.json()
    assert gen["meta_info"]["prompt_tokens"] == comp_prompt
    assert gen["meta_info"]["completion_tokens"] == 2

    async with session.post(healthy.url + CHAT, json=chat_body(prompt, 2, stream=False)) as r:
        chat = await r.json()
    assert chat["usage"]["prompt_tokens"] == comp_prompt + 7



async def test_bad_request_is_400(healthy: SimProcess, session: aiohttp.ClientSession) -> None:
    async with session.post(healthy.url + CHAT, data=b"{not json") as r:
        assert r.status == 400
        assert "error" in await r.json()
    async with session.post(healthy.url + CHAT, json={"messages": [], "max_tokens": 3}) as r:
        assert r.status == 400
    async with session.post(healthy.url + COMPLETIONS, json={"prompt": "x",
                                                             "max_tokens": -1}) as r:
        assert r.status == 400


# ---- performance model over HTTP -------------------------------------------------------


@pytest.mark.server
async def test_pp_cap_is_visible_and_aborts_clear_at_once(
        session: aiohttp.ClientSession) -> None:
    """SGLang's pp (engine/sim/pipeline.py): 8 micro-batches of 64 // 8 = 8, 64 running in all;
    each pp rank's running gauge is one micro-batch, the rest queue; each GPU runs a batch of 8."""
    with spawn_sim_process("pp-capped") as sim:
        info = await get_json(session, sim.url + "/server_info")
        assert info["max_running_requests"] == 64 and info["pp_size"] == 8
        assert info["pp_max_micro_batch_size"] is None  # not typed: the scheduler derives it
        assert info["internal_states"][0]["pp_max_micro_batch_size"] == 8
        assert info["redline_sim"]["pp_max_micro_batch_size"] == 8
        tasks = await hold_streams(session, sim.url, 96)
        try:
            async def capped() -> bool:
                m = await metric_values(session, sim.url + "/metrics")
                return (m["sglang:num_running_reqs"], m["sglang:num_queue_reqs"]) == (8, 32)

            assert await until(capped, 10)
            state = await get_json(session, sim.url + "/sim/state")
            assert (state["running"], state["queued"], state["micro_batches"]) == (64, 32, [8] * 8)
            with_ranks = await get_text(session, sim.url + "/metrics")
            gauges = [ln for ln in with_ranks.splitlines() if ln.startswith("sglang:num_running_reqs{")]
            assert len(gauges) == 8 and all(ln.endswith(" 8.0") for ln in gauges)  # one per pp_rank
            assert sorted(ln.split('pp_rank="')[1][0] for ln in gauges) == list("01234567")
            m = await metric_values(session, sim.url + "/metrics")
            assert 0 < m["sglang:token_usage"] < 1
            gpu = await metric_values(session, sim.url + "/dcgm/metrics")
            assert 0.3 * 700 < gpu["DCGM_FI_DEV_POWER_USAGE"] < 0.5 * 700
        finally:
            await cancel_all(tasks)
        t0 = time.monotonic()

        async def drained() -> bool:
            st = await get_json(session, sim.url + "/sim/state")
            return st["running"] == 0 and st["queued"] == 0

        assert await until(drained, 1.0, interval=0.02)
        assert time.monotonic() - t0 <= 1.0
        state = await get_json(session, sim.url + "/sim/state")
        assert state["aborted"] == 96 and state["received"] == 96
        assert state["completed"] == 0 and state["failed"] == 0
        async def idle_gpus() -> bool:  # the passes in flight end within the pipe's 8 stage times
            return (await metric_values(session, sim.url + "/dcgm/metrics"))["DCGM_FI_DEV_GPU_UTIL"] == 0

        assert await until(idle_gpus, 1.0, interval=0.02)


async def _server_rate(s: aiohttp.ClientSession, url: str, concurrency: int,
                       window: float = 2.0) -> tuple[float, dict[str, float]]:
    """Output tok/s of the server with ``concurrency`` streams in flight, and its GPUs."""
    tasks = await hold_streams(s, url, concurrency, max_tokens=200)
    try:
        async def all_running() -> bool:
            return (await get_json(s, url + "/sim/state"))["running"] == concurrency

        assert await until(all_running, 10)
        await asyncio.sleep(0.3)
        a = await get_json(s, url + "/sim/state")
        await asyncio.sleep(window)
        b = await get_json(s, url + "/sim/state")
        gpus = await metric_values(s, url + "/dcgm/metrics")
    finally:
        await cancel_all(tasks)
    rate = (b["generation_tokens_total"] - a["generation_tokens_total"]) / (b["t"] - a["t"])
    return rate, gpus


@pytest.mark.server
async def test_healthy_throughput_plateaus(session: aiohttp.ClientSession) -> None:
    with spawn_sim_process("healthy") as sim:
        idle = await metric_values(session, sim.url + "/dcgm/metrics")
        rates: dict[int, float] = {}
        gpus: dict[int, dict[str, float]] = {}
        for c in (32, 128, 192):
            rates[c], gpus[c] = await _server_rate(session, sim.url, c)

        async def drained() -> bool:
            st = await get_json(session, sim.url + "/sim/state")
            return st["running"] == 0 and st["queued"] == 0

        assert await until(drained, 1.0)
        after = await metric_values(session, sim.url + "/dcgm/metrics")
    assert rates[128] > 2.0 * rates[32], rates
    assert rates[192] < 1.10 * rates[128], rates
    assert 500 < rates[32] < 900, rates
    power = "DCGM_FI_DEV_POWER_USAGE"
    assert idle[power] < 100 and idle["DCGM_FI_DEV_GPU_UTIL"] == 0
    assert idle[power] < gpus[32][power] < gpus[128][power] <= 700
    assert gpus[128]["DCGM_FI_DEV_GPU_UTIL"] >= 95
    assert after[power] < 100 and after["DCGM_FI_DEV_GPU_UTIL"] == 0
    energy = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
    assert after[energy] > idle[energy]


# ---- faults ----------------------------------------------------------------------------


@pytest.mark.server
async def test_fragile_refuses_then_dies(session: aiohttp.ClientSession) -> None:
    with spawn_sim_process("fragile") as sim:
        async with session.get(sim.url + "/health") as r:
            assert r.status == 200
        tasks = await hold_streams(session, sim.url, 48)

        async def loaded() -> bool:
            st = await get_json(session, sim.url + "/sim/state")
            return st["running"] + st["queued"] == 48

        assert await until(loaded, 10)
        async with session.get(sim.url + "/health") as r:
            assert r.status == 503
        statuses: list[int] = []
        bodies: list[Any] = []
        for _ in range(12):  # streams answer their status at once; leaving aborts them
            async with session.post(sim.url + CHAT, json=chat_body(max_tokens=2000)) as r:
                statuses.append(r.status)
                if r.status == 503:
                    bodies.append(await r.json())
            if statuses[-1] == 503:
                break
        assert 503 in statuses
        assert bodies[0]["error"]["type"] == "overloaded"
        assert bodies[0]["error"]["message"]

        # Heavy load: clients retry at once on 503, the load passes the limits, it dies.
        stop = asyncio.Event()

        async def pusher() -> None:
            while not stop.is_set():
                try:
                    async with session.post(sim.url + CHAT, json=chat_body(max_tokens=2000)) as r:
                        if r.status == 503:
                            continue
                        async for _ in r.content:
                            pass
                except aiohttp.ClientError:
                    await asyncio.sleep(0.05)

        pushers = [asyncio.create_task(pusher()) for _ in range(110)]
        try:
            code = await asyncio.to_thread(sim.wait, 15.0)
        finally:
            stop.set()
            await cancel_all(pushers + tasks)
        assert code == 1
        assert "redline sim: crashed" in sim.stderr_text()


@pytest.mark.server
async def test_flaky_produces_each_fault(session: aiohttp.ClientSession) -> None:
    client: Counter[str] = Counter()
    with spawn_sim_process("flaky", seed=0) as sim:
        sem = asyncio.Semaphore(50)

        async def one() -> None:
            async with sem:
                try:
                    async with session.post(sim.url + CHAT, json=chat_body(max_tokens=4)) as r:
                        if r.status != 200:
                            client[f"http_{r.status}"] += 1
                            return
                        raw = await r.read()
                except aiohttp.ClientPayloadError:
                    client["disconnect"] += 1
                    return
                bad = 0
                for e in split_events(raw)[:-1]:
                    try:
                        json.loads(e)
                    except ValueError:
                        bad += 1
                client["malformed" if bad else "ok"] += 1

        await asyncio.wait_for(asyncio.gather(*(one() for _ in range(200))), 60)
        state = await get_json(session, sim.url + "/sim/state")
    assert client["http_500"] >= 1 and client["disconnect"] >= 1 and client["malformed"] >= 1
    assert sum(client.values()) == 200
    assert state["received"] == 200
    assert state["failed"] == client["http_500"] + client["disconnect"] + client["malformed"]
    assert state["completed"] == client["ok"]
    assert state["failures"] == {k: v for k, v in client.items() if k != "ok"}


# ---- thread form and custom profiles ---------------------------------------------------


@pytest.mark.server
async def test_thread_form_custom_profile(session: aiohttp.ClientSession) -> None:
    profile = dataclasses.replace(get_profile("healthy"), name="custom", tokens_per_chunk=4,
                                  decode_base_s=0.005)
    handle = start_sim_thread(profile, seed=3)
    try:
        assert handle.url == f"http://127.0.0.1:{handle.port}"
        async with session.post(handle.url + CHAT, json=chat_body(max_tokens=10)) as r:
            chunks = [json.loads(e) for e in split_events(await r.read())[:-1]]
        content = [c["choices"][0]["delta"]["content"] for c in chunks[1:-2]]  # role ... finish, usage
        assert [t.count(" ") for t in content] == [4, 4, 2]
        assert chunks[-1]["usage"]["completion_tokens"] == 10
        # No max tokens: the profile's default of 128.
        async with session.post(handle.url + COMPLETIONS, json={"prompt": "x"}) as r:
            assert (await r.json())["usage"]["completion_tokens"] == 128
        # Stopping under open streams ends them promptly.
        tasks = await hold_streams(session, handle.url, 3)
        await asyncio.sleep(0.2)
        t0 = time.monotonic()
        await asyncio.to_thread(handle.stop)
        assert time.monotonic() - t0 < 3
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 3)
    finally:
        handle.stop()
        handle.stop()
    with pytest.raises(aiohttp.ClientConnectionError):
        async with session.get(handle.url + "/health") as r:
            await r.read()


@pytest.mark.server
async def test_429_and_stall_faults(session: aiohttp.ClientSession) -> None:
    base = dataclasses.replace(get_profile("healthy"), decode_base_s=0.005)
    with start_sim_thread(dataclasses.replace(base, name="limits", error_429_rate=1.0)) as h:
        async with session.post(h.url + CHAT, json=chat_body()) as r:
            assert r.status == 429 and r.headers["Retry-After"] == "1"
    with start_sim_thread(dataclasses.replace(base, name="stall", stall_after_tokens=3)) as h:
        got: list[str] = []
        with pytest.raises(asyncio.TimeoutError):
            async with session.post(h.url + CHAT, json=chat_body(max_tokens=10),
                                    timeout=aiohttp.ClientTimeout(sock_read=0.5)) as r:
                async for line in r.content:
                    if line.startswith(b"data: {"):
                        got.append(line.decode())
        assert len(got) == 1 + 3  # role chunk + three tokens, then silence
        state = await get_json(session, h.url + "/sim/state")
        assert state["failures"] == {"stall": 1} and state["running"] == 0


@pytest.mark.server
async def test_thread_crash_closes_the_server(session: aiohttp.ClientSession) -> None:
    profile = dataclasses.replace(get_profile("healthy"), name="tiny-fragile",
                                  crash_sustained_above=4, crash_sustain_s=0.5)
    handle = start_sim_thread(profile)
    try:
        tasks = await hold_streams(session, handle.url, 6)
        t0 = time.monotonic()
        while handle.crashed is None and time.monotonic() - t0 < 5:
            await asyncio.sleep(0.02)
        assert handle.crashed is not None and "above 4 for 0.5 s" in handle.crashed
        assert time.monotonic() - t0 >= 0.4
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 5)
        assert not handle.alive
        with pytest.raises(aiohttp.ClientConnectionError):
            async with session.get(handle.url + "/health") as r:
                await r.read()
    finally:
        handle.stop()


# ---- the model without HTTP ------------------------------------------------------------


async def test_model_kv_budget_queues_and_release_frees() -> None:
    profile = SimProfile(name="kv", kv_budget_tokens=100, decode_base_s=0.001,
                         decode_per_seq_s=0.0, prefill_per_token_s=0.0, max_model_len=100)
    model = BatchModel(profile)
    runner = asyncio.create_task(model.run())
    try:
        reqs = [model.submit(prompt_tokens=10, max_tokens=30) for _ in range(3)]
        assert await asyncio.wait_for(reqs[0].next_tokens(), 1) >= 1
        assert (model.running, model.queued) == (2, 1)  # 3 x 40 tokens > 100
        snap = model.snapshot()
        assert snap.kv_reserved_tokens == 80 and 0 < snap.token_usage < 1
        model.release(reqs[0])
        assert (model.running, model.queued) == (1, 1)
        got = 0
        while got < 30:
            got += await asyncio.wait_for(reqs[2].next_tokens(), 1)
        assert (model.running, model.queued) == (0, 0)
        assert model.snapshot().finished_total == 2
        with pytest.raises(ValueError):
            model.submit(prompt_tokens=90, max_tokens=20)
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)


@pytest.mark.server
async def test_process_overrides_and_sigterm(session: aiohttp.ClientSession) -> None:
    sim = spawn_sim_process("healthy", seed=1, extra_args=("--set", "tokens_per_chunk=3"))
    try:
        info = await get_json(session, sim.url + "/get_server_info")
        assert info["redline_sim"]["settings"]["tokens_per_chunk"] == 3
        assert info["redline_sim"]["seed"] == 1
    finally:
        sim.stop()
    assert sim.proc.returncode == 0
    sim.stop()


def test_cli_bad_override_exits_2() -> None:
    proc = subprocess.run([sys.executable, "-m", "redline.engine.sim", "--set", "tokens_per_chunk=x"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert proc.stderr == ("redline sim: bad value 'x' for profile field 'tokens_per_chunk' "
                           "(expected int)\n")


@pytest.mark.server
def test_a_sim_started_ahead_serves_the_options_it_is_then_given():
    """WarmSim (the test fixtures' sims, started ahead of need): once given its options it is
    the server spawn_sim_process starts with them (profile, --set, on 127.0.0.1, ended by
    stop); bad options are the same one-line error; an unused one ends at close."""
    import httpx

    warm = WarmSim()
    sim = warm.start("pp-capped", 0, ("--set", "max_running_requests=4"))
    try:
        assert sim.url.startswith("http://127.0.0.1:")
        info = httpx.get(sim.url + "/get_server_info", timeout=5).json()
        assert info["max_running_requests"] == 4 and info["pp_size"] == 8
    finally:
        sim.stop()
    assert sim.proc.returncode is not None
    with pytest.raises(RuntimeError, match="unknown profile 'nope'"):
        WarmSim().start("nope")
    unused = WarmSim()
    unused.close()
    assert unused.proc.returncode is not None
