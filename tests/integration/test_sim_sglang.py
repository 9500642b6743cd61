"""The sim speaks SGLang as each version does (issue 43), held to the fixtures written from the
wheels (tests/fixtures/sglang/, make_fixtures.py) so sim and fixtures cannot drift: /metrics
names and label sets, /server_info keys; the chunks of chat, completions and /generate; the
errors, the profiler and the flush; the gauges' timing (engine/sim/sched_log.py) and pipeline
parallelism's micro-batches (engine/sim/pipeline.py)."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from redline.engine.sim.model import BatchModel
from redline.engine.sim.profiles import apply_overrides, get_profile
from redline.engine.sim.sched_log import IDLE_REFRESH_S, SchedulerLog

from helpers import FIXTURES, ROOT

SGLANG = FIXTURES / "sglang"

VERSIONS = ("0.5.9", "0.5.23")
CHAT = "/v1/chat/completions"


def _labels(text: str) -> dict[str, set[frozenset[str]]]:
    """sample name -> the label-name sets of its series (Prometheus text)."""
    out: dict[str, set[frozenset[str]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, set()).add(frozenset(s.labels))
    return out


def _sglang_only(found: dict[str, set[frozenset[str]]]) -> dict[str, set[frozenset[str]]]:
    return {k: v for k, v in found.items() if k.startswith("sglang:")}


def _chat(url: str, content: str = "hello", max_tokens: int = 4, **extra) -> list[dict]:
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens, "stream": True, **extra}
    r = httpx.post(url + CHAT, json=body, timeout=30)
    assert r.status_code == 200, r.text
    return [json.loads(ln[6:]) for ln in r.text.split("\n") if ln.startswith("data: {")]


def _scenario(sim_factory, version: str, fixture: str) -> str:
    """The sim's /metrics after the load the fixture describes."""
    v = ("--sglang", version)
    if fixture == "metrics_pp8_busy":
        sim = sim_factory("pp-capped", extra_args=v)
        _chat(sim.url, max_tokens=2)
    elif fixture in ("metrics_retract_before", "metrics_idle_stale"):
        sim = sim_factory("healthy", extra_args=v)
        _chat(sim.url, max_tokens=2)
    elif fixture == "metrics_retract_after":  # a KV budget of 600 tokens, 4 answers of 200: retractions
        sim = sim_factory("healthy", extra_args=(*v, "--set", "kv_reserve_output=false", "--set", "kv_budget_tokens=600",
                                                 "--set", "decode_base_s=0.002"))
        with httpx.Client(timeout=30) as c:
            async def many() -> None:
                async with httpx.AsyncClient(timeout=30) as ac:
                    await asyncio.gather(*(ac.post(sim.url + CHAT, json={"messages": [{"role": "user", "content": "x" * 40}],
                                                                           "max_tokens": 200}) for _ in range(4)))
            asyncio.run(many())
            assert c.get(sim.url + "/sim/state").json()["preemptions_total"] > 0
    elif fixture == "metrics_prefix_cached":  # one long prompt twice: the second finds it cached
        sim = sim_factory("healthy", extra_args=v)
        for _ in range(2):
            _chat(sim.url, "shared prefix " * 40, max_tokens=2)
    elif fixture == "metrics_priority":
        sim = sim_factory("healthy", extra_args=(*v, "--set", "enable_priority_scheduling=true"))
        for prio in (0, 10):
            _chat(sim.url, max_tokens=2, priority=prio)
    else:  # a scheduler per data-parallel rank: dp_rank labels
        sim = sim_factory("healthy", extra_args=(*v, "--set", "dp_size=4", "--set", "tp_size=2"))
        _chat(sim.url, max_tokens=2)
    return httpx.get(sim.url + "/metrics", timeout=10).text


@pytest.mark.parametrize("version", VERSIONS)
def test_the_sims_metrics_have_the_fixtures_names_and_label_sets(sim_factory, version):
    """Every series name of every /metrics fixture of the version is in the sim's /metrics after
    the same load, with the same label names: scheduler gauges per pp rank, tokenizer counters
    at finish, the retraction counter once retractions came, cached tokens once some were."""
    checked = 0
    for path in sorted((SGLANG / version).glob("metrics_*.txt")):
        want = _sglang_only(_labels(path.read_text()))
        got = _sglang_only(_labels(_scenario(sim_factory, version, path.stem)))
        for name, label_sets in want.items():
            assert name in got, (path.name, name, sorted(got))
            assert got[name] == label_sets, (path.name, name, got[name], label_sets)
            checked += 1
    assert checked > 60


@pytest.mark.parametrize("version", VERSIONS)
def test_the_sims_server_info_has_the_fixtures_keys(sim_factory, version):
    """/server_info's top level and internal_states hold the fixture's keys (the sim adds its
    own redline_sim block); pp 8 as the seed typed it: pp_max_micro_batch_size None on top, the
    scheduler's 64 // 8 = 8 in internal_states; /get_server_info is the same body."""
    want = json.loads((SGLANG / version / "server_info_pp8.json").read_text())
    sim = sim_factory("pp-capped", extra_args=("--sglang", version))
    info = httpx.get(sim.url + "/server_info", timeout=10).json()
    assert set(info) - {"redline_sim"} == set(want)
    assert set(info["internal_states"][0]) == set(want["internal_states"][0])
    assert (info["version"], info["status"], info["tp_size"], info["pp_size"], info["max_running_requests"]) == (version, "ready", 1, 8, 64)
    assert info["pp_max_micro_batch_size"] is None and info["internal_states"][0]["pp_max_micro_batch_size"] == 8
    assert info["max_total_num_tokens"] == info["internal_states"][0]["memory_usage"]["token_capacity"]
    old = httpx.get(sim.url + "/get_server_info", timeout=10).json()
    assert set(old) == set(info) and httpx.get(sim.url + "/sim/state").json()["deprecated_info_calls"] == 1


# -- the chunks ---------------------------------------------------------------------------------

def test_chat_chunks_carry_the_nulls_each_version_writes(sim_factory):
    """0.5.9 (pydantic): every delta has reasoning_content and tool_calls null, every chunk
    "usage": null; 0.5.23 (msgspec): reasoning_content null only. Both: a role chunk, the
    content chunks, finish_reason in a chunk of its own, then the usage chunk."""
    old = sim_factory("healthy", extra_args=("--sglang", "0.5.9"))
    new = sim_factory("healthy")
    a = _chat(old.url, max_tokens=3, stream_options={"include_usage": True})
    b = _chat(new.url, max_tokens=3, stream_options={"include_usage": True})
    for chunks in (a, b):
        assert len(chunks) == 1 + 3 + 1 + 1 and chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 3
        assert [c["choices"][0]["finish_reason"] for c in chunks[:-1]] == [None] * 4 + ["length"]
    assert a[0]["choices"][0]["delta"] == {"role": "assistant", "content": "", "reasoning_content": None, "tool_calls": None}
    assert all(c["usage"] is None for c in a[:-1]) and all(c["choices"][0]["delta"]["tool_calls"] is None for c in a[:-1])
    assert a[-2]["choices"][0]["delta"] == {"role": None, "content": None, "reasoning_content": None, "tool_calls": None}
    assert b[0]["choices"][0]["delta"] == {"reasoning_content": None, "role": "assistant", "content": ""}
    assert all("usage" not in c and "tool_calls" not in c["choices"][0]["delta"] for c in b[:-1])
    assert b[-2]["choices"][0]["delta"] == {"reasoning_content": None}


def test_a_reasoning_model_streams_its_thinking_first(sim_factory):
    sim = sim_factory("healthy", extra_args=("--set", "reasoning_tokens=2"))
    chunks = _chat(sim.url, max_tokens=4)
    deltas = [c["choices"][0]["delta"] for c in chunks[1:5]]
    assert [bool(d.get("reasoning_content")) for d in deltas] == [True, True, False, False]
    assert [bool(d.get("content")) for d in deltas] == [False, False, True, True]


def test_0_5_23_answers_a_queued_stream_at_its_first_token_and_0_5_9_at_once(sim_factory):
    """serving_chat.py 0.5.23 awaits the first chunk before the 200; 0.5.9 sends the 200 and
    then waits: behind a request that holds the only slot, the headers come late on 0.5.23 only."""
    took = {}
    for version in VERSIONS:
        sim = sim_factory("healthy", extra_args=("--sglang", version, "--set", "max_running_requests=1"))

        async def run(sim=sim) -> float:
            async with httpx.AsyncClient(timeout=30) as c:
                hog = asyncio.create_task(c.post(sim.url + CHAT, json={"messages": [{"role": "user", "content": "a"}], "max_tokens": 25}))
                await asyncio.sleep(0.2)
                t0 = time.monotonic()
                async with c.stream("POST", sim.url + CHAT, json={"messages": [{"role": "user", "content": "b"}], "max_tokens": 2,
                                                                    "stream": True}) as r:
                    headers = time.monotonic() - t0
                    async for _ in r.aiter_bytes():
                        pass
                await hog
                return headers

        took[version] = asyncio.run(run())
    assert took["0.5.9"] < 0.3 and took["0.5.23"] > 0.5, took  # the hog holds the slot ~0.8 s after the wait


def test_generate_chunks_carry_every_output_id_and_the_versions_meta_info(sim_factory):
    """tokenizer_manager.py _handle_batch_output: the text so far and the whole output_ids list in
    each chunk; 0.5.9 total_retractions, 0.5.23 num_retractions and reasoning_tokens; e2e_latency
    at the end. 0.5.23 with --incremental-streaming-output: each chunk's text and ids only."""
    body = {"text": "The capital of France is", "stream": True, "sampling_params": {"max_new_tokens": 5}}
    seen = {}
    for version, extra in (("0.5.9", ()), ("0.5.23", ()), ("0.5.23", ("--set", "incremental_streaming_output=true"))):
        sim = sim_factory("healthy", extra_args=("--sglang", version, *extra))
        r = httpx.post(sim.url + "/generate", json=body, timeout=30)
        seen[(version, bool(extra))] = [json.loads(ln[6:]) for ln in r.text.split("\n") if ln.startswith("data: {")]
    old, new, inc = seen[("0.5.9", False)], seen[("0.5.23", False)], seen[("0.5.23", True)]
    for chunks in (old, new):
        assert [len(c["output_ids"]) for c in chunks] == [1, 2, 3, 4, 5]
        assert all(b["text"].startswith(a["text"]) and b["output_ids"][:len(a["output_ids"])] == a["output_ids"]
                   for a, b in zip(chunks, chunks[1:], strict=False))
        assert [c["meta_info"]["completion_tokens"] for c in chunks] == [1, 2, 3, 4, 5]
        assert "e2e_latency" in chunks[-1]["meta_info"] and chunks[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 5}
    assert "total_retractions" in old[0]["meta_info"] and "num_retractions" not in old[0]["meta_info"]
    assert {"num_retractions", "reasoning_tokens", "request_received_ts"} <= new[0]["meta_info"].keys()
    assert [len(c["output_ids"]) for c in inc] == [1] * 5 and [c["meta_info"]["completion_tokens"] for c in inc] == [1, 2, 3, 4, 5]
    assert "".join(c["text"] for c in inc).count(" ") == 5 and inc[1]["text"].count(" ") == 1  # deltas


def test_incremental_output_is_refused_on_0_5_9():
    with pytest.raises(ValueError, match="incremental_streaming_output needs sglang_version 0.5.23"):
        apply_overrides(get_profile("healthy"), {"sglang_version": "0.5.9", "incremental_streaming_output": "true"})


def test_a_prompt_too_long_is_answered_as_each_version_and_route_does(sim_factory):
    """tokenizer_manager.py _validate_one_request's ValueError: 0.5.23's OpenAI routes HTTP 400
    with an ErrorResponse (the stream is primed before the 200); 0.5.9's stream a 200 and an
    error event; /generate a 200 and {"error": ...} when streaming, else HTTP 400."""
    long = {"messages": [{"role": "user", "content": "x" * 8}], "max_tokens": 40000, "stream": True}
    msg = "Requested token count exceeds the model's maximum context length of 32768 tokens."
    new = sim_factory("healthy")
    old = sim_factory("healthy", extra_args=("--sglang", "0.5.9"))
    r = httpx.post(new.url + CHAT, json=long, timeout=10)
    assert r.status_code == 400 and r.json()["object"] == "error" and r.json()["code"] == 400 and r.json()["message"].startswith(msg)
    r = httpx.post(old.url + CHAT, json=long, timeout=10)
    assert r.status_code == 200 and r.text.endswith("data: [DONE]\n\n")
    event = json.loads(r.text.split("\n")[0][6:])
    assert event["error"]["object"] == "error" and event["error"]["message"].startswith(msg)
    gen = {"text": "x", "stream": True, "sampling_params": {"max_new_tokens": 40000}}
    for sim in (old, new):
        r = httpx.post(sim.url + "/generate", json=gen, timeout=10)
        assert r.status_code == 200 and json.loads(r.text.split("\n")[0][6:])["error"]["message"].startswith(msg)
        r = httpx.post(sim.url + "/generate", json={**gen, "stream": False}, timeout=10)
        assert r.status_code == 400 and r.json()["error"]["message"].startswith(msg)


# -- the server operations ---------------------------------------------------------------------

def test_the_profilers_answers_its_export_stall_and_its_trace_files(sim_factory, tmp_path):
    """/stop_profile answers "Stop profiling. This will take some time." with no path, once the
    trace is exported: no token for profile_export_s; the files are named as SGLang names them,
    one per rank, in the directory asked for. Refusals are Starlette's plain 500."""
    sim = sim_factory("pp-capped", extra_args=("--set", "profile_export_s=0.6", "--set", "tp_size=2"))
    with httpx.Client(timeout=30) as c:
        assert c.post(sim.url + "/stop_profile").status_code == 500
        r = c.post(sim.url + "/start_profile", json={"output_dir": str(tmp_path), "profile_prefix": "me"})
        assert (r.status_code, r.text) == (200, "Start profiling.\n")
        assert c.post(sim.url + "/start_profile", json={}).text == "Internal Server Error"

        async def gaps() -> tuple[float, str]:
            async with httpx.AsyncClient(timeout=30) as ac:
                times: list[float] = []

                async def stream() -> None:
                    async with ac.stream("POST", sim.url + CHAT, json={"messages": [{"role": "user", "content": "a"}],
                                                                       "max_tokens": 60, "stream": True}) as s:
                        async for ln in s.aiter_lines():
                            if ln.startswith("data: {"):
                                times.append(time.monotonic())

                task = asyncio.create_task(stream())
                await asyncio.sleep(0.8)
                stop = await ac.post(sim.url + "/stop_profile")
                await task
                return max(b - a for a, b in zip(times, times[1:], strict=False)), stop.text

        gap, said = asyncio.run(gaps())
    assert said == "Stop profiling. This will take some time.\n"
    assert gap >= 0.55  # the scheduler made no token while it wrote the trace
    names = sorted(p.name for p in tmp_path.iterdir())
    assert len(names) == 16 and all(n.startswith("me-") and n.endswith(".trace.json.gz") for n in names)
    assert any(n.endswith("-TP-1-PP-7.trace.json.gz") for n in names)


def test_flush_cache_refuses_by_version_while_a_request_runs(sim_factory):
    """0.5.9 refuses (400) with its success text; 0.5.23 "Flush cache failed.", and with
    ?timeout= waits for idle, then flushes (or "Timed out waiting for idle state.")."""
    said = {}
    for version in VERSIONS:
        sim = sim_factory("healthy", extra_args=("--sglang", version))

        async def run(sim=sim) -> list[tuple[int, str]]:
            async with httpx.AsyncClient(timeout=30) as c:
                hog = asyncio.create_task(c.post(sim.url + CHAT, json={"messages": [{"role": "user", "content": "a"}], "max_tokens": 20}))
                await asyncio.sleep(0.2)
                out = []
                for q in ("", "?timeout=0.1", "?timeout=5"):
                    r = await c.post(sim.url + "/flush_cache" + q)
                    out.append((r.status_code, r.text))
                await hog
                return out

        said[version] = asyncio.run(run())
    flushed = "Cache flushed.\nPlease check backend logs"
    (a, b, c) = said["0.5.9"]
    assert a[0] == b[0] == 400 and a[1].startswith(flushed) and c[0] == 400  # 0.5.9 takes no timeout
    (a, b, c) = said["0.5.23"]
    assert a == (400, "Flush cache failed.\n") and b == (400, "Timed out waiting for idle state.")
    assert c[0] == 200 and c[1].startswith(flushed)


def test_flush_cache_flushes_on_the_0_5_9_sim(tmp_path, sim_factory):
    """Done when (issue 43 case 1): `--flush-cache` flushes on the 0.5.9 sim, whose gauges keep
    the last decode log's batch after the load (refreshed when idle only 30 s later): redline
    asks /flush_cache until it answers 200 and never waits on the gauges."""
    from helpers import finish, start_headless, write_preset

    sim = sim_factory("healthy", extra_args=("--sglang", "0.5.9", "--set", "decode_base_s=0.01", "--set", "decode_log_interval=10"))
    preset = write_preset(tmp_path, "two", concurrency=[4, 8], hold_s=1.0, max_hold_s=1.5, output_len=40)
    rc, out, err = finish(start_headless(sim.url, preset, tmp_path / "s", "--flush-cache"), 120)
    assert rc == 0, err
    state = httpx.get(sim.url + "/sim/state").json()
    done = [c for c in state["flush_calls"] if c["ok"]]
    assert len(done) == 2 and all(c["running"] == 0 and c["queued"] == 0 for c in done), state["flush_calls"]
    steps = json.loads((tmp_path / "s" / "summary.json").read_text())["steps"]
    assert all(s["cache_flush"]["ok"] for s in steps), [s["cache_flush"] for s in steps]
    gauges = {f.name: f.samples[0].value for f in text_string_to_metric_families(httpx.get(sim.url + "/metrics").text)}
    assert state["running"] == 0 and gauges["sglang:num_running_reqs"] > 0  # 0.5.9's stale gauge, as SGLang's
    assert "not flushed" not in out


# -- the gauges' timing ---------------------------------------------------------------------------

class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


@pytest.mark.parametrize("version", VERSIONS)
def test_the_gauges_are_written_at_prefill_every_40_decodes_and_when_idle(version):
    clock = Clock()
    log = SchedulerLog(version, 40, 1000, clock=clock)
    log.prefill([None] * 3, [None] * 2, 500, hit_tokens=30, prompt_tokens=100)  # 3 ran before it
    s = log.stats
    assert (s.running, s.queued, s.used_tokens, s.token_usage, s.cache_hit_rate) == (3, 2, 500, 0.5, 0.3)
    for _ in range(39):
        clock.t += 0.05
        log.decode([None] * 5, [], 600, tokens=5)
    assert log.stats.running == 3  # no decode log yet
    clock.t += 0.05
    log.decode([None] * 5, [], 600, tokens=5)
    s = log.stats
    assert s.running == 5 and s.gen_throughput == pytest.approx(200 / 2.0) and s.spec_accept_length == 0.0
    assert s.cache_hit_rate == (0.0 if version == "0.5.9" else 0.3)  # 0.5.9 zeroes it at each decode log
    clock.t += 5.0  # idle 5 s after the load
    idle = log.read(True, [], 0)
    if version == "0.5.9":
        assert idle.running == 5 and idle.gen_throughput == pytest.approx(100.0)  # stale until 30 s after the last write
        clock.t += IDLE_REFRESH_S
        assert log.read(True, [], 0).running == 0
    else:
        assert idle.running == 0 and idle.gen_throughput == 0.0  # the stale gauge is written at once


def test_priority_scheduling_counts_each_priority_beside_the_total():
    log = SchedulerLog("0.5.23", 1, 1000, priority=True, clock=Clock())
    log.decode([0, 0, 10], [10], 10, tokens=3)
    assert (log.stats.running, log.stats.running_by_priority, log.stats.queued_by_priority) == (3, {0: 2, 10: 1}, {10: 1})
    log.decode([10], [], 10, tokens=1)
    assert log.stats.running_by_priority == {0: 0, 10: 1}  # a priority seen before is still written


# -- pipeline parallelism ---------------------------------------------------------------------------

@pytest.mark.parametrize("overrides,running,slots", [
    ({}, 64, [8] * 8),  # the seed: 8 micro-batches of 64 // 8 = 8
    ({"pp_max_micro_batch_size": "64"}, 64, None),  # the pool holds 64: a larger micro-batch runs no more
    ({"pp_max_micro_batch_size": "64", "max_running_requests": "512"}, 96, None),  # with a pool of 512 all 96 run
])
async def test_micro_batches_share_one_request_pool(overrides, running, slots):
    prof = apply_overrides(get_profile("pp-capped"), {"time_scale": "0.1", **overrides})
    m = BatchModel(prof)
    task = asyncio.create_task(m.run())
    try:
        reqs = [m.submit(16, 50) for _ in range(96)]
        for _ in range(200):
            await asyncio.sleep(0.01)
            if m.running == running:
                break
        snap = m.snapshot()
        assert (snap.running, snap.queued) == (running, 96 - running)
        assert sum(snap.micro_batches) == running and max(snap.micro_batches) <= prof.micro_batch_cap
        if slots is not None:
            assert list(snap.micro_batches) == slots
        assert await asyncio.wait_for(reqs[0].next_tokens(), 5) >= 1
    finally:
        m.close()
        task.cancel()


def test_a_token_every_round_of_the_stages():
    """Each of a micro-batch's tokens passes the 8 stages: at C=64 a request gets one every 8
    stage times of a batch of 8; the model's curve is flat past the pool of 64."""
    p = get_profile("pp-capped")
    assert p.token_interval(64) == pytest.approx(8 * p.step_time(8))
    assert p.steady_throughput(64) == pytest.approx(64 / (8 * p.step_time(8)))
    assert p.steady_throughput(256) == p.steady_throughput(64)
    big = apply_overrides(p, {"max_running_requests": "512", "pp_max_micro_batch_size": "64"})
    assert big.steady_throughput(512) > 2.5 * p.steady_throughput(512)


@pytest.mark.server
def test_the_seeds_sweep_mb_8_against_64(tmp_path):
    """Done when: `redline sweep` over the pp sim's micro-batch (a pool of 512, so that mb=64
    may run more than 64) tells the seed's story: mb=8 runs 64 requests at low tok/s with the
    GPUs underfed, the cap detector names micro-batches; mb=64 gives clearly more."""
    from helpers import finish, redline_command

    preset = tmp_path / "p.toml"
    preset.write_text('name = "pp-story"\n[workload]\ninput_len = 16\noutput_len = 24\n'
                      "[ramp]\nconcurrency = [64, 256]\nwarmup_s = 1\nhold_s = 5\nmin_requests = 2\nmax_hold_s = 8\n"
                      "[stop]\nplateau_gain = 0.05\n[after]\nprobe_s = 0\n")
    serve = ("redline sim --port {port} --sim-profile pp-capped --set max_running_requests=512 "
             "--set pp_max_micro_batch_size={mb} --set time_scale=0.5")
    import os
    import subprocess

    p = subprocess.Popen([*redline_command(), "sweep", "--serve", serve, "--grid", "mb=8|64", "--preset", str(preset),
                          "--headless", "--no-nvml", "--workers", "1", "--out", str(tmp_path / "sw")], cwd=ROOT,
                         env={**os.environ, "CI": "true"},
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    rc, out, err = finish(p, timeout=180)
    assert rc == 0, (out, err)
    mb8, mb64 = json.loads((tmp_path / "sw" / "sweep.json").read_text())["configurations"]
    assert mb8["status"] == mb64["status"] == "completed"
    assert mb64["max_output_throughput"] > 1.3 * mb8["max_output_throughput"], (mb8, mb64)
    steps = json.loads((tmp_path / "sw" / "mb8" / "summary.json").read_text())["steps"]
    assert [s["server_max_running"] for s in steps] == [8, 8]  # the gauge: one micro-batch
    events = [json.loads(ln) for ln in (tmp_path / "sw" / "mb8" / "events.ndjson").read_text().splitlines()]
    caps = [e["text"] for e in events if e["text"].startswith("server cap")]
    assert caps and "a micro-batch" in caps[0] and "micro-batches of 8" in caps[0], caps
    rows = [json.loads(ln) for ln in (tmp_path / "sw" / "mb8" / "timeline.ndjson").read_text().splitlines()]
    assert max(r.get("gpu0_power_w") or 0 for r in rows) < 0.55 * 700  # GPUs underfed at batch 8
    assert max(r.get("in_flight") or 0 for r in rows) >= 250


# -- the cap detector on SGLang's pp gauges ---------------------------------------------------------

def _pp_info(mrr: int, mb: int | None = None):
    from redline.engine.telemetry.server_info import ServerInfo

    return ServerInfo(kind="sglang", tp_size=1, pp_size=8, max_running_requests=mrr, pp_micro_batch_cap=mb or mrr // 8)


def _sample(t: float, running: float, queued: float):
    from redline.engine.telemetry.types import ServerSample

    return ServerSample(t=t, kind="sglang", running=running, queued=queued, kv_usage=0.2)


def test_the_cap_detector_reads_the_most_running_of_its_window():
    """A prefill log writes the micro-batch before its new requests join: 0 when they replace a
    micro-batch that just ended. Between decode logs of 8 the finding still names micro-batches."""
    from redline.engine.telemetry.cap import CapDetector

    det = CapDetector(_pp_info(512, 8))
    fired = [w for t in range(8) if (w := det.update(float(t), 256, 256, _sample(float(t), 0.0 if t % 2 else 8.0, 192.0)))]
    assert len(fired) == 1 and "server runs 8 a micro-batch" in fired[0] and "micro-batches of 8" in fired[0], fired
    assert det.finding is not None and det.finding.startswith("server runs 8 a micro-batch")


def test_full_micro_batches_with_room_in_the_pool_are_no_cap():
    """pp 8, micro-batches of 64, a pool of 512: 256 in flight fill 4 of them, nothing queues;
    the micro-batches are not what limits (512 would fill them all): no finding."""
    from redline.engine.telemetry.cap import CapDetector

    det = CapDetector(_pp_info(512, 64))
    assert not [t for t in range(8) if det.update(float(t), 256, 256, _sample(float(t), 64.0, 0.0))]
    det = CapDetector(_pp_info(64))  # the seed: 64 fill the 8 micro-batches of 8, the pool holds 64
    assert [t for t in range(8) if det.update(float(t), 64, 64, _sample(float(t), 8.0, 0.0))]


def test_an_idle_connection_is_closed_as_sglangs_uvicorn_closes_it(sim_factory):
    """uvicorn's timeout_keep_alive (5 s in both versions; 0.3 s here): a kept-alive connection
    left idle is closed by the server, one in use is not."""
    import socket

    sim = sim_factory("healthy", extra_args=("--set", "keepalive_s=0.3"))
    port = int(sim.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert s.recv(4096).startswith(b"HTTP/1.1 200")
        time.sleep(0.1)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")  # within the timeout: still open
        assert s.recv(4096).startswith(b"HTTP/1.1 200")
        time.sleep(1.0)
        assert s.recv(4096) == b""  # closed by the server
