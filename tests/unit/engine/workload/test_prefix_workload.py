"""Shared-prefix workloads (issue 16): the `prefix:groups=G,prefix_len=P,suffix_len=S` dataset,
the simulated server's prefix cache, and the server's prefix-cache hit rate in telemetry.

The server tests drive the sim on 127.0.0.1 with the dataset's own prompts (calibrated against
the sim as the engine calibrates random prompts) and check against the sim's exact counters
(`sglang:prompt_tokens_total`, `sglang:cached_tokens_total`, `sglang:cache_hit_rate`).

The expected hit rate of a run: the first request of each group finds nothing; every other
request finds the blocks of its group's prefix, 16 * floor(L / 64) tokens where L is the number
of characters it shares with the earlier prompts of its group (the prefix and the space after
it; the sim caches blocks of 16 tokens of 4 characters). So for n requests over G groups,

    hit rate = (n - G) * Pc / sum(prompt tokens)  ~=  (n - G) / n * P / (P + S)

with Pc = 16 * floor((len(prefix) + 1) / 64) ~= P.
"""

from __future__ import annotations

import asyncio
import dataclasses
import statistics
import time

import httpx
import pytest

from redline.engine.preset import PresetError, parse_preset
from redline.engine.sim.model import BatchModel, PrefixCache, PromptTokens, prompt_blocks
from redline.engine.sim.profiles import apply_overrides, get_profile
from redline.engine.sim.wire import parse_request
from redline.engine.telemetry.prom_text import parse_prometheus
from redline.engine.telemetry.server_metrics import PrefixRateWindow, ServerMetricsPoller, parse_server_metrics
from redline.engine.telemetry.types import ServerSample
from redline.engine.workload.prompts import (
    Calibration,
    PrefixSpec,
    PrefixSpecError,
    PromptSource,
    WorkloadConfig,
    WorkloadError,
    calibrate,
    load_dataset,
    needs_calibration,
    parse_prefix_spec,
)

from helpers import FIXTURES, common_prefix_len, main_in_process, run_preset_headless

BLOCK_TOKENS = 16  # the sim's default prefix_block_tokens
BLOCK_CHARS = 4 * BLOCK_TOKENS  # its fake tokenizer counts 4 characters a token
# Quick decode, no prefill cost: runs of dozens of requests take a fraction of a second.
QUICK = ("--set", "decode_base_s=0.002", "--set", "decode_per_seq_s=0", "--set", "prefill_per_token_s=0")


# -- the dataset spec -------------------------------------------------------------------------


def test_spec_parses_in_any_order_with_spaces():
    assert parse_prefix_spec("prefix:groups=8,prefix_len=2000,suffix_len=100") == PrefixSpec(8, 2000, 100)
    assert parse_prefix_spec("prefix: suffix_len=1 , groups=3,prefix_len=07") == PrefixSpec(3, 7, 1)
    assert needs_calibration("prefix:groups=1,prefix_len=1,suffix_len=1") and needs_calibration("random")
    assert not needs_calibration("jsonl:/x.jsonl")


@pytest.mark.parametrize(
    "spec, needles",
    [
        ("prefix:groups=0,prefix_len=10,suffix_len=5", ["groups must be a whole number >= 1, got '0'"]),
        ("prefix:groups=2,prefix_len=-3,suffix_len=5", ["prefix_len must be a whole number >= 1, got '-3'"]),
        ("prefix:groups=2,prefix_len=10,suffix_len=1.5", ["suffix_len must be a whole number >= 1, got '1.5'"]),
        ("prefix:groups=2,prefix_len=10,suffix_len=", ["suffix_len must be a whole number >= 1, got ''"]),
        ("prefix:groups=2,prefix_len=10", ["missing suffix_len"]),
        ("prefix:groups=2", ["missing prefix_len and suffix_len"]),
        ("prefix:", ["after 'prefix:'"]),
        ("prefix:groups=2,groups=3,prefix_len=1,suffix_len=1", ["groups given twice"]),
        ("prefix:groups=2,prefix_len=1,suffix_len=1,ratio=3", ["unknown key 'ratio'"]),
        ("prefix:groups=2,,prefix_len=1,suffix_len=1", ["empty item"]),
        ("prefix:groups,prefix_len=1,suffix_len=1", ["groups has no value"]),
        ("prefix:groups=2000000,prefix_len=1,suffix_len=1", ["groups must be at most 1000000"]),
        ("prefix:groups=1,prefix_len=9000000,suffix_len=2000000", ["prefix_len + suffix_len must be at most 10000000"]),
    ],
)
def test_bad_spec_gives_one_line_naming_it(spec, needles):
    with pytest.raises(PrefixSpecError) as e:
        parse_prefix_spec(spec)
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(f"dataset {spec!r}: ")
    assert "expected prefix:groups=G,prefix_len=P,suffix_len=S" in msg
    for n in needles:
        assert n in msg, (n, msg)
    with pytest.raises(WorkloadError) as e2:  # what --dataset and presets go through
        load_dataset(spec, 16)
    assert str(e2.value) == msg


def test_unknown_kind_names_the_prefix_form():
    with pytest.raises(WorkloadError) as e:
        load_dataset("prefixes:groups=1", 16)
    assert "prefix:groups=G,prefix_len=P,suffix_len=S" in str(e.value)
    assert "random, sharegpt:PATH or jsonl:PATH" in str(e.value)


def test_load_dataset_accepts_a_prefix_spec():
    items = load_dataset("prefix:groups=3,prefix_len=10,suffix_len=4", 7)
    assert len(items) == 3 and all(p.max_tokens == 7 for p in items)


def test_preset_accepts_a_prefix_dataset_and_refuses_a_bad_one():
    ok = parse_preset({"ramp": {"concurrency": [1]}, "workload": {"dataset": "prefix:groups=4,prefix_len=500,suffix_len=50"}}, "x.toml")
    assert ok.workload.dataset == "prefix:groups=4,prefix_len=500,suffix_len=50"
    with pytest.raises(PresetError) as e:
        parse_preset({"ramp": {"concurrency": [1]}, "workload": {"dataset": "prefix:groups=0,prefix_len=5,suffix_len=5"}}, "x.toml")
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith("x.toml: [workload].dataset: groups must be a whole number >= 1, got '0'"), msg
    assert "prefix:groups=G,prefix_len=P,suffix_len=S" in msg
    with pytest.raises(PresetError) as e:
        parse_preset({"ramp": {"concurrency": [1]}, "workload": {"dataset": "csv:x"}}, "x.toml")
    assert "prefix:groups=G,prefix_len=P,suffix_len=S" in str(e.value)


def test_cli_refuses_a_bad_prefix_dataset_before_connecting(capsys):
    """A bad spec: exit 2 with one line; a good one passes the check and reaches the (closed)
    target: exit 3. Both without the built-in sim."""
    closed = "http://127.0.0.1:9"  # discard port, nothing listens
    rc = main_in_process(["--url", closed, "--dataset", "prefix:groups=0,prefix_len=10,suffix_len=5"])
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "'prefix:groups=0,prefix_len=10,suffix_len=5'" in lines[0]
    assert "groups must be a whole number >= 1" in lines[0]
    rc = main_in_process(["--url", closed, "--dataset", "prefix:groups=2,prefix_len=10,suffix_len=5"])
    err = capsys.readouterr().err
    assert rc == 3 and "cannot reach" in err, err


# -- the prompts ------------------------------------------------------------------------------


def test_groups_share_their_prefix_and_differ_right_after():
    cal = Calibration(overhead=7.0, per_word=1.5, measured=True)
    cfg = WorkloadConfig(dataset="prefix:groups=3,prefix_len=300,suffix_len=30", output_len=9, seed=4)
    src = PromptSource(cfg, cal)
    prompts = [src.next() for _ in range(12)]
    prefixes = [src._prefix.prefix(g) for g in range(3)]
    assert len(set(prefixes)) == 3
    assert len({p[:9] for p in prefixes}) == 3  # groups differ from the first word
    for i, p in enumerate(prompts):
        group = i % 3  # requests cycle over the groups
        assert p.text.startswith(prefixes[group] + " ")
        assert p.max_tokens == 9 and p.expected_input_tokens == 330
        assert len(prefixes[group].split()) == round(300 / 1.5)
        assert len(p.text.split()) == cal.words_for(330)
    for g in range(3):
        texts = [p.text for p in prompts[g::3]]
        assert len(set(texts)) == 4  # every suffix is its own
        for a in texts:
            for b in texts:
                if a is not b:  # they part within the suffix's 9-digit id
                    assert len(prefixes[g]) + 1 <= common_prefix_len(a, b) < len(prefixes[g]) + 1 + 9
    again = PromptSource(cfg, cal)
    assert [again.next().text for _ in range(12)] == [p.text for p in prompts]  # seeded
    other = PromptSource(dataclasses.replace(cfg, seed=5), cal)
    assert other.next().text[:9] != prompts[0].text[:9]


# -- the sim's prefix cache, in process -------------------------------------------------------


def test_prompt_blocks_chain_and_cut_full_blocks_only():
    a = "x" * 200 + "tail one"
    b = "x" * 200 + "tail two"
    ba, bb = prompt_blocks(a, 16), prompt_blocks(b, 16)
    assert len(ba) == len(a) // 64 == 3 and ba == bb  # the tails sit in the unhashed partial block
    assert prompt_blocks("y" + a[1:], 16)[2] != ba[2]  # a key names the whole prefix before it
    assert prompt_blocks(list(range(40)), 16) == prompt_blocks(list(range(32)) + [0] * 8, 16)
    assert len(prompt_blocks(list(range(40)), 16)) == 2


def test_prefix_cache_lru_evicts_deepest_blocks_first():
    cache = PrefixCache(capacity_tokens=4 * 16, block_tokens=16)
    cache.insert((1, 2, 3))
    assert cache.match((1, 2, 3, 4)) == 3 and cache.held_tokens == 48
    cache.insert((7, 8))  # 5 blocks > 4: the least recent is the deepest block of 1-2-3
    assert cache.match((1, 2, 3)) == 2 and cache.match((7, 8)) == 2
    assert PrefixCache(0, 16).enabled is False


def test_parse_request_carries_blocks_on_every_api():
    prof = get_profile("healthy")
    text = "z" * 640
    chat = parse_request("chat", {"messages": [{"role": "user", "content": text}]}, prof)
    comp = parse_request("completions", {"prompt": text}, prof)
    gen = parse_request("generate", {"input_ids": list(range(170))}, prof)
    assert isinstance(chat.prompt_tokens, PromptTokens) and chat.prompt_tokens == 160 + prof.chat_template_tokens
    assert chat.prompt_tokens.blocks == comp.prompt_tokens.blocks == prompt_blocks(text, 16)
    assert len(gen.prompt_tokens.blocks) == 10 and gen.prompt_tokens == 170
    off = parse_request("chat", {"messages": [{"role": "user", "content": text}]}, dataclasses.replace(prof, prefix_cache_tokens=0))
    assert type(off.prompt_tokens) is int


async def _run_to_end(model: BatchModel, prompt_tokens: int) -> tuple[float, int]:
    t0 = time.perf_counter()
    req = model.submit(prompt_tokens, 1)
    await req.next_tokens()
    return time.perf_counter() - t0, req.cached_tokens


async def test_model_skips_the_prefill_of_cached_blocks_exactly():
    prof = apply_overrides(get_profile("healthy"), {
        "decode_base_s": "0.001", "decode_per_seq_s": "0", "prefill_per_token_s": "0.0001"})
    model = BatchModel(prof)
    task = asyncio.create_task(model.run())
    try:
        shared = "s" * (64 * 30)  # 30 blocks, 480 tokens
        first = parse_request("completions", {"prompt": shared + " one " + "a" * 100}, prof)
        second = parse_request("completions", {"prompt": shared + " two " + "b" * 100}, prof)
        t1, c1 = await _run_to_end(model, first.prompt_tokens)
        t2, c2 = await _run_to_end(model, second.prompt_tokens)
        snap = model.snapshot()
    finally:
        model.close()
        task.cancel()
    assert (c1, c2) == (0, 480)
    assert snap.prefix_queried_tokens == int(first.prompt_tokens) + int(second.prompt_tokens)
    assert snap.prefix_hit_tokens == 480
    assert snap.cache_hit_rate == pytest.approx(480 / int(second.prompt_tokens))  # the last batch
    assert snap.prefix_hit_rate == pytest.approx(480 / snap.prefix_queried_tokens)
    assert snap.prefix_cache_state()["hit_tokens"] == 480
    assert t1 > 0.04 and t2 < t1 - 0.035, (t1, t2)  # 480 tokens x 0.1 ms of prefill skipped


# -- against the sim --------------------------------------------------------------------------


async def _chat(client: httpx.AsyncClient, url: str, text: str, max_tokens: int = 1) -> int:
    r = await client.post(url + "/v1/chat/completions", json={
        "model": "m", "messages": [{"role": "user", "content": text}], "max_tokens": max_tokens})
    r.raise_for_status()
    return r.json()["usage"]["prompt_tokens"]


async def _ttft(client: httpx.AsyncClient, url: str, text: str) -> float:
    t0 = time.perf_counter()
    async with client.stream("POST", url + "/v1/chat/completions", json={
            "model": "m", "messages": [{"role": "user", "content": text}], "max_tokens": 2, "stream": True}) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if '"content":"' in line and '"content":""' not in line:
                return time.perf_counter() - t0
    raise AssertionError("no token came")


async def _calibrated(client: httpx.AsyncClient, url: str) -> Calibration:
    cal = await calibrate(lambda text: _chat(client, url, text), seed=0)
    assert cal.measured
    return cal


def _metrics(url: str) -> dict[str, float]:
    samples = parse_prometheus(httpx.get(url + "/metrics", timeout=5).text)
    return {name: sum(v for _, v in samples.get(name, [])) for name in (
        "sglang:prompt_tokens_total", "sglang:cached_tokens_total", "sglang:cache_hit_rate")}


@pytest.mark.parametrize("groups, prefix_len, suffix_len", [(3, 600, 60), (2, 100, 20), (1, 2000, 10)])
async def test_prompts_have_the_stated_token_counts(sim_factory, groups, prefix_len, suffix_len):
    sim = sim_factory("healthy", extra_args=QUICK)
    async with httpx.AsyncClient(timeout=10) as client:
        cal = await _calibrated(client, sim.url)
        src = PromptSource(WorkloadConfig(dataset=f"prefix:groups={groups},prefix_len={prefix_len},suffix_len={suffix_len}", seed=3), cal)
        prompts = [src.next() for _ in range(2 * groups)]
        counts = await asyncio.gather(*(_chat(client, sim.url, p.text) for p in prompts))
        prefix_alone = await _chat(client, sim.url, src._prefix.prefix(0))
    want = prefix_len + suffix_len
    for n in counts:
        assert abs(n - want) <= 0.05 * want, (counts, want)
    assert all(p.expected_input_tokens == want for p in prompts)
    # the prefix is P tokens (the chat template's overhead comes with any prompt)
    assert abs(prefix_alone - cal.overhead - prefix_len) <= 0.05 * prefix_len, (prefix_alone, cal)


async def test_prefix_run_gives_the_expected_hit_rate_and_telemetry_reads_it(sim_factory):
    groups, prefix_len, suffix_len, n = 4, 800, 40, 24
    sim = sim_factory("healthy", extra_args=QUICK)
    async with httpx.AsyncClient(timeout=10) as client:
        cal = await _calibrated(client, sim.url)
        src = PromptSource(WorkloadConfig(dataset=f"prefix:groups={groups},prefix_len={prefix_len},suffix_len={suffix_len}", seed=11), cal)
        poller = ServerMetricsPoller(client, sim.url + "/metrics")
        before_sample = await poller.poll()
        before = _metrics(sim.url)
        prompts = [src.next() for _ in range(n)]
        sem = asyncio.Semaphore(8)

        async def one(text: str) -> int:
            async with sem:
                return await _chat(client, sim.url, text)

        counts = await asyncio.gather(*(one(p.text) for p in prompts))
        after = _metrics(sim.url)
        sample = await poller.poll()
        # one more request alone, of group 0: the gauge is its batch's (its own) hit rate
        last = src.next()
        last_count = await _chat(client, sim.url, last.text)
        gauge_text = httpx.get(sim.url + "/metrics", timeout=5).text
    assert before_sample is not None and before_sample.prefix_hit_rate is None  # one scrape: no interval yet

    queried = after["sglang:prompt_tokens_total"] - before["sglang:prompt_tokens_total"]
    hits = after["sglang:cached_tokens_total"] - before["sglang:cached_tokens_total"]
    assert queried == sum(counts)  # every prompt token is looked up
    # the first request of each group misses; each other hits its group's prefix blocks, Pc
    # tokens (a block more at most, when suffix ids share digits across a block boundary)
    pcs = [BLOCK_TOKENS * ((len(src._prefix.prefix(g)) + 1) // BLOCK_CHARS) for g in range(groups)]
    per_group = n // groups
    low = sum((per_group - 1) * pc for pc in pcs)
    assert low <= hits <= low + (n - groups) * BLOCK_TOKENS, (hits, pcs)
    assert all(abs(pc - prefix_len) <= 0.05 * prefix_len for pc in pcs), pcs
    measured = hits / queried
    formula = (n - groups) / n * prefix_len / (prefix_len + suffix_len)
    assert measured == pytest.approx(formula, abs=0.03), (measured, formula)
    assert measured > 0.7

    # telemetry: the poller's rate over the two scrapes is the sim's counters' ratio
    assert sample is not None and sample.kind == "sglang"
    assert sample.prefix_hits_total == after["sglang:cached_tokens_total"]
    assert sample.prefix_queries_total == after["sglang:prompt_tokens_total"]
    assert sample.prefix_hit_rate == pytest.approx(measured, rel=1e-12)

    # the gauge, as SGLang's: the hit rate of the last prefill batch (here one request)
    shared = max(common_prefix_len(last.text, p.text) for p in prompts[0::groups])
    expected_last = BLOCK_TOKENS * (shared // BLOCK_CHARS) / last_count
    gauge = sum(v for _, v in parse_prometheus(gauge_text)["sglang:cache_hit_rate"])
    assert gauge == pytest.approx(expected_last)
    assert parse_server_metrics(gauge_text, 1.0).prefix_hit_rate == pytest.approx(expected_last)


async def test_random_prompts_of_the_same_length_never_hit(sim_factory):
    sim = sim_factory("healthy", extra_args=QUICK)
    async with httpx.AsyncClient(timeout=10) as client:
        cal = await _calibrated(client, sim.url)
        src = PromptSource(WorkloadConfig(dataset="random", input_len=840, seed=2), cal)
        before = _metrics(sim.url)
        await asyncio.gather(*(_chat(client, sim.url, src.next().text) for _ in range(12)))
        after = _metrics(sim.url)
    assert after["sglang:prompt_tokens_total"] - before["sglang:prompt_tokens_total"] > 12 * 800
    assert after["sglang:cached_tokens_total"] == before["sglang:cached_tokens_total"] == 0
    assert after["sglang:cache_hit_rate"] == 0.0


async def test_a_long_shared_prefix_lowers_ttft(sim_factory):
    """3000 shared tokens at 0.1 ms each: a cold prompt waits ~0.3 s for its prefill, a warm one
    of the same length only for its suffix's."""
    sim = sim_factory("healthy", extra_args=(
        "--set", "decode_base_s=0.005", "--set", "decode_per_seq_s=0", "--set", "prefill_per_token_s=0.0001"))
    async with httpx.AsyncClient(timeout=10) as client:
        cal = await _calibrated(client, sim.url)
        shared = PromptSource(WorkloadConfig(dataset="prefix:groups=1,prefix_len=3000,suffix_len=30", seed=5), cal)
        rand = PromptSource(WorkloadConfig(dataset="random", input_len=3030, seed=5), cal)
        random_ttft = [await _ttft(client, sim.url, rand.next().text) for _ in range(3)]
        prefix_ttft = [await _ttft(client, sim.url, shared.next().text) for _ in range(4)]
    cold, warm = prefix_ttft[0], prefix_ttft[1:]
    assert min(random_ttft) > 0.25 and cold > 0.25, (random_ttft, cold)  # full prefill
    assert max(warm) < 0.3 * statistics.median(random_ttft), (warm, random_ttft)


# -- telemetry parsers ------------------------------------------------------------------------


def _vllm_text(queries: float, hits: float) -> str:
    return (
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{engine="0",model_name="m"} 4.0\n'
        "# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.\n"
        "# TYPE vllm:prefix_cache_queries_total counter\n"
        f'vllm:prefix_cache_queries_total{{engine="0",model_name="m"}} {queries}\n'
        "# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.\n"
        "# TYPE vllm:prefix_cache_hits_total counter\n"
        f'vllm:prefix_cache_hits_total{{engine="0",model_name="m"}} {hits}\n'
    )


def test_vllm_capture_counters():
    s = parse_server_metrics((FIXTURES / "vllm_metrics_under_load.txt").read_text(), 1.0)
    assert s is not None and s.kind == "vllm"
    assert (s.prefix_queries_total, s.prefix_hits_total) == (2060.0, 0.0)
    assert s.prefix_hit_rate is None  # counters alone: a rate needs two scrapes
    window = PrefixRateWindow()
    window.update(s)
    later = parse_server_metrics(_vllm_text(2060.0 + 4000.0, 3000.0), 2.0)
    assert window.update(later).prefix_hit_rate == pytest.approx(0.75)


def test_vllm_engines_are_summed_and_the_v0_gauge_is_read():
    two = _vllm_text(100.0, 40.0) + (
        'vllm:prefix_cache_queries_total{engine="1",model_name="m"} 300.0\n'
        'vllm:prefix_cache_hits_total{engine="1",model_name="m"} 200.0\n')
    s = parse_server_metrics(two, 0.0)
    assert (s.prefix_queries_total, s.prefix_hits_total) == (400.0, 240.0)
    v0 = (
        "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 1.0\n"
        "# TYPE vllm:gpu_prefix_cache_hit_rate gauge\nvllm:gpu_prefix_cache_hit_rate{model_name=\"m\"} 0.42\n")
    s0 = parse_server_metrics(v0, 0.0)
    assert s0.prefix_hit_rate == pytest.approx(0.42) and s0.prefix_queries_total is None
    assert PrefixRateWindow().update(s0).prefix_hit_rate == pytest.approx(0.42)  # no counters: the gauge stays


def test_sglang_gauge_averages_replicas_and_cached_tokens_sum_sources():
    s = parse_server_metrics((FIXTURES / "sglang_metrics.txt").read_text(), 1.0)
    assert s.prefix_hit_rate == pytest.approx((0.0731 + 0.0698) / 2)
    # prompt tokens counted and no cached_tokens_total series: none cached yet (SGLang makes the
    # series at its first hit, TokenizerMetricsCollector.observe_one_finished_request)
    assert s.prefix_hits_total == 0.0 and s.prefix_queries_total == s.prompt_tokens_total > 0
    text = (
        "# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{model_name=\"m\"} 3.0\n"
        "# TYPE sglang:prompt_tokens_total counter\nsglang:prompt_tokens_total{model_name=\"m\"} 1000.0\n"
        "# TYPE sglang:cached_tokens_total counter\n"
        'sglang:cached_tokens_total{model_name="m",cache_source="device"} 500.0\n'
        'sglang:cached_tokens_total{model_name="m",cache_source="host"} 100.0\n')
    s = parse_server_metrics(text, 0.0)
    assert (s.prefix_queries_total, s.prefix_hits_total) == (1000.0, 600.0)


def _counters(t: float, q: float, h: float) -> ServerSample:
    return ServerSample(t=t, kind="vllm", prefix_queries_total=q, prefix_hits_total=h)


def test_rate_window_spans_ten_seconds_skips_idle_and_restarts():
    w = PrefixRateWindow(window_s=10.0)
    assert w.update(_counters(0.0, 0, 0)).prefix_hit_rate is None
    assert w.update(_counters(1.0, 100, 50)).prefix_hit_rate == pytest.approx(0.5)
    assert w.update(_counters(2.0, 200, 150)).prefix_hit_rate == pytest.approx(0.75)  # 150 / 200 since t=0
    for t in range(3, 12):
        w.update(_counters(float(t), 200 + 100 * (t - 2), 150 + 100 * (t - 2)))
    # at t=11 the window starts at t=1 (the latest sample at or before 11 - 10)
    assert w.update(_counters(12.0, 1200, 1150)).prefix_hit_rate == pytest.approx((1150 - 150) / (1200 - 200))
    idle = PrefixRateWindow()
    idle.update(_counters(0.0, 500, 100))
    assert idle.update(_counters(1.0, 500, 100)).prefix_hit_rate is None  # no prompt in the window
    assert idle.update(_counters(2.0, 10, 5)).prefix_hit_rate is None  # a restarted server: start again
    assert idle.update(_counters(3.0, 20, 10)).prefix_hit_rate == pytest.approx(0.5)


@pytest.mark.slow
def test_step_reports_the_servers_prefix_hit_rate(sim_factory, tmp_path):
    """A step of a shared-prefix workload carries the hit rate the server's counters give over
    it, and the timeline has it per second; a random workload's step shows none hit. The step
    closes at 3 s (max_hold_s): the hit rate is the server's counters over the window, no
    steady throughput needed (which held it STEADY_MIN_S = 4 s or more)."""
    from redline.engine.core.config import EngineConfig
    from redline.engine.preset import parse_preset
    from redline.engine.workload.prompts import WorkloadConfig

    sim = sim_factory("healthy", extra_args=("--set", "decode_base_s=0.01", "--set", "decode_per_seq_s=0.0001"))
    preset = parse_preset({"ramp": {"concurrency": [8], "warmup_s": 1.0, "hold_s": 3.0, "min_requests": 4, "max_hold_s": 3.0}}, "p.toml")

    def run(dataset: str, out):
        cfg = EngineConfig(url=sim.url, concurrency=8, workload=WorkloadConfig(dataset=dataset, input_len=200, output_len=16),
                           out_dir=out, live_steps=False, use_nvml=False)

        return run_preset_headless(cfg, preset).steps[0]

    shared = run("prefix:groups=2,prefix_len=400,suffix_len=20", tmp_path / "a")
    assert shared.prefix_hit_rate is not None and shared.prefix_hit_rate > 0.7, shared.prefix_hit_rate
    import polars as pl

    tl = pl.read_ndjson(tmp_path / "a" / "timeline.ndjson")
    assert tl["server_prefix_hit_rate"].drop_nulls().max() > 0.7
    plain = run("random", tmp_path / "b")
    assert plain.prefix_hit_rate is not None and plain.prefix_hit_rate < 0.05
