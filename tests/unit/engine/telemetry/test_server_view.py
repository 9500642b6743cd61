"""The server's own view, without a server (issue 25): parsing SGLang's and vLLM's metrics for
preemptions and speculative decoding, a step's view of its samples, the cap detector's cause,
the decoders' cached tokens, and the sim's model (flush refused while busy, preemption, the
speculative-decoding credit)."""

from __future__ import annotations

import asyncio
import dataclasses

from redline.engine.client.api_formats import CHAT, COMPLETIONS, make_decoder
from redline.engine.sim.model import BatchModel, PromptTokens, prompt_blocks
from redline.engine.sim.profiles import apply_overrides, get_profile
from redline.engine.telemetry.cap import cap_cause
from redline.engine.telemetry.server_info import ServerInfo
from redline.engine.telemetry.server_metrics import CounterWindow, ServerMetricsPoller, parse_server_metrics
from redline.engine.telemetry.server_view import ServerStepView
from redline.engine.telemetry.types import ServerSample

VLLM = """vllm:num_requests_running{{engine="0"}} 8
vllm:num_requests_waiting{{engine="0"}} 2
vllm:kv_cache_usage_perc{{engine="0"}} 0.97
vllm:num_preemptions_total{{engine="0"}} {pre}
vllm:spec_decode_num_drafts_total{{engine="0"}} {drafts}
vllm:spec_decode_num_draft_tokens_total{{engine="0"}} {dtok}
vllm:spec_decode_num_accepted_tokens_total{{engine="0"}} {acc}
"""


def test_sglang_spec_gauges_and_retractions_are_read():
    s = parse_server_metrics(
        'sglang:num_running_reqs{model_name="m",tp_rank="0"} 4\n'
        'sglang:num_running_reqs{model_name="m",tp_rank="1"} 4\n'
        'sglang:spec_accept_length{model_name="m"} 2.75\n'
        'sglang:spec_accept_rate{model_name="m"} 0.58\n'
        'sglang:num_retracted_requests_total{model_name="m"} 9\n', 1.0)
    assert s is not None and s.kind == "sglang" and s.running == 4  # rank views, not summed
    assert (s.spec_accept_length, s.spec_acceptance_rate, s.preemptions_total) == (2.75, 0.58, 9)


def test_vllm_spec_counters_become_accept_length_and_rate_over_the_window():
    """vLLM gives counters: 1 + accepted/drafts and accepted/draft tokens, over the poller's
    window; preemptions over it too."""
    w_spec = CounterWindow(("spec_accepted_total", "spec_drafts_total", "spec_draft_tokens_total"))
    w_pre = CounterWindow(("preemptions_total",))
    s0 = parse_server_metrics(VLLM.format(pre=5, drafts=100, dtok=300, acc=150), 0.0)
    s1 = parse_server_metrics(VLLM.format(pre=12, drafts=300, dtok=900, acc=500), 2.0)
    assert s0 is not None and s1 is not None and s0.kind == "vllm" and s0.spec_accept_length is None
    assert w_spec.update(s0) is None and w_pre.update(s0) is None  # one sample: no window yet
    assert w_spec.update(s1) == (350, 200, 600) and w_pre.update(s1) == (7,)
    poller = ServerMetricsPoller.__new__(ServerMetricsPoller)
    poller._preempt, poller._spec = CounterWindow(("preemptions_total",)), CounterWindow(("spec_accepted_total", "spec_drafts_total", "spec_draft_tokens_total"))
    poller._with_windows(s0)
    out = poller._with_windows(s1)
    assert out.spec_accept_length == 1 + 350 / 200 and out.spec_acceptance_rate == 350 / 600
    assert out.preemptions_recent == 7
    # a restarted server (counters back to 0): the window starts again, nothing negative
    s2 = parse_server_metrics(VLLM.format(pre=0, drafts=0, dtok=0, acc=0), 3.0)
    assert poller._with_windows(s2).preemptions_recent is None


def test_a_steps_view_means_gauges_and_counts_counters_once_per_sample():
    v = ServerStepView()
    base = ServerSample(t=1.0, kind="sglang", gen_throughput=100.0, kv_usage=0.5, preemptions_total=10.0, spec_accept_length=2.0)
    v.note(base)
    v.note(base)  # a stale sample repeated: counted once
    v.note(dataclasses.replace(base, t=2.0, gen_throughput=300.0, kv_usage=0.9, preemptions_total=14.0, spec_accept_length=3.0))
    r = v.result()
    assert r["server_gen_throughput"] == 200.0 and r["server_kv_usage"] == 0.7 and r["server_kv_usage_max"] == 0.9
    assert r["server_preemptions"] == 4 and r["spec_accept_length"] == 2.5
    # vLLM: the window's counters, not the poller's recent gauges
    v = ServerStepView()
    for t, (acc, drafts, dtok) in enumerate(((100, 100, 300), (400, 300, 900))):
        v.note(ServerSample(t=float(t), kind="vllm", spec_accepted_total=acc, spec_drafts_total=drafts, spec_draft_tokens_total=dtok, spec_accept_length=9.9))
    r = v.result()
    assert r["spec_accept_length"] == 2.5 and r["spec_acceptance_rate"] == 0.5
    assert ServerStepView().result() == dict.fromkeys(r, None)


def test_cap_cause_names_preemption_first():
    info = ServerInfo(kind="sglang", max_running_requests=256)
    s = ServerSample(t=0.0, kind="sglang", running=20.0, queued=40.0, kv_usage=0.98, preemptions_recent=17.0)
    assert cap_cause(info, s).startswith("KV cache full: the server preempts (17 preempted in the last 10 s, KV 98 % used")
    assert "preempts" not in cap_cause(info, dataclasses.replace(s, preemptions_recent=0.0))


def test_decoders_read_cached_tokens():
    gen = make_decoder("generate")
    ev = gen(b'{"text":"a","meta_info":{"prompt_tokens":100,"completion_tokens":1,"cached_tokens":64}}')
    assert ev.cached_tokens == 64 and ev.prompt_tokens == 100
    assert make_decoder("generate")(b'{"text":"a","meta_info":{"completion_tokens":1}}').cached_tokens is None
    for api in (CHAT, COMPLETIONS):
        d = make_decoder(api)
        usage = b'"usage":{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12,"prompt_tokens_details":{"cached_tokens":8}}'
        ev = d(b'{"choices":[],' + usage + b"}")
        assert ev.cached_tokens == 8
        assert d(b'{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":2,"prompt_tokens_details":null}}').cached_tokens is None


# -- the sim's model ---------------------------------------------------------------------------
def _drive(model: BatchModel, reqs, until_done: bool = True, max_iters: int = 10_000) -> None:
    for _ in range(max_iters):
        model._emit() if model._running else None
        model._admit()
        if until_done and all(r.generated >= r.max_tokens for r in reqs):
            return
    raise AssertionError("the model never finished")


def test_flush_is_refused_while_busy_and_empties_the_cache():
    async def go():
        m = BatchModel(get_profile("healthy"))
        blocks = prompt_blocks("p" * 256, 16)
        r = m.submit(PromptTokens(64, blocks), 4)
        assert m.flush_cache() is False  # queued: refused
        m._admit()
        assert m.flush_cache() is False  # running: refused
        _drive(m, [r])
        m.release(r)
        assert m.snapshot().prefix_cache_held_tokens > 0
        assert m.flush_cache() is True and m.snapshot().prefix_cache_held_tokens == 0
        r2 = m.submit(PromptTokens(64, blocks), 4)
        m._admit()
        assert r2.cached_tokens == 0  # flushed: nothing to hit
        assert m.snapshot().flushes_total == 1

    asyncio.run(go())


def test_preemption_when_the_kv_budget_fills_and_every_request_still_ends():
    async def go():
        p = apply_overrides(get_profile("healthy"), {"kv_reserve_output": "false", "kv_budget_tokens": "400", "prefix_cache_tokens": "0"})
        m = BatchModel(p)
        reqs = [m.submit(20, 100) for _ in range(6)]
        _drive(m, reqs)
        snap = m.snapshot()
        assert snap.preemptions_total > 0 and sum(r.preempted for r in reqs) == snap.preemptions_total
        assert snap.generated_tokens_total == 600 and all(r.generated == 100 for r in reqs)
        # with reservations (the default) it never preempts: it queues instead
        m2 = BatchModel(dataclasses.replace(p, kv_reserve_output=True))
        reqs = [m2.submit(20, 100) for _ in range(6)]
        _drive(m2, reqs)
        assert m2.snapshot().preemptions_total == 0

    asyncio.run(go())


def test_spec_decoding_gives_the_accept_length_on_average():
    async def go():
        p = apply_overrides(get_profile("healthy"), {"spec_accept_length": "2.75"})
        m = BatchModel(p)
        reqs = [m.submit(20, 1100) for _ in range(4)]
        _drive(m, reqs)
        snap = m.snapshot()
        assert snap.generated_tokens_total == 4400
        assert abs(snap.generated_tokens_total / snap.spec_verify_steps_total - 2.75) < 0.01

    asyncio.run(go())
