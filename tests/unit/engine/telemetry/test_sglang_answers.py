"""What redline reads of a real SGLang server (issue 43), against SGLang's own answers by version.

The fixtures (tests/fixtures/sglang/, README there) were written from the sglang 0.5.9 and 0.5.23
wheels' code. These tests need no server: they hand SGLang's bodies to the readers that meet
them live (ServerInfo.from_sglang, parse_server_metrics, the poller's windows, the step's view,
the cap detector).
"""

from __future__ import annotations

import json
import re

import pytest

from redline.engine.telemetry.cap import CapDetector, cap_cause, cap_warning
from redline.engine.telemetry.server_info import ServerInfo, cache_report_hint, credential_name, scrub_server_info
from redline.engine.telemetry.server_metrics import CounterWindow, PrefixRateWindow, parse_server_metrics
from redline.engine.telemetry.server_view import ServerStepView

from helpers import FIXTURES

SGLANG = FIXTURES / "sglang"
VERSIONS = ("0.5.9", "0.5.23")
ATTN_DP = {"0.5.9": "server_info_dp_attention", "0.5.23": "server_info_attn_dp"}
ATTN_DP_METRICS = {"0.5.9": "metrics_dp_attention", "0.5.23": "metrics_attn_dp"}


def info(version: str, name: str) -> ServerInfo:
    return ServerInfo.from_sglang(json.loads((SGLANG / version / f"{name}.json").read_text()), source="/server_info")


def metrics(version: str, name: str, t: float = 0.0):
    s = parse_server_metrics((SGLANG / version / f"{name}.txt").read_text(), t)
    assert s is not None and s.kind == "sglang"
    return s


# -- case 3: the effective limits live in internal_states -------------------------------------
@pytest.mark.parametrize("version", VERSIONS)
def test_effective_limits_come_from_internal_states_not_the_typed_top_level(version):
    raw = json.loads((SGLANG / version / "server_info_pp8.json").read_text())
    assert raw["pp_max_micro_batch_size"] is None  # what the operator typed: nothing
    i = info(version, "server_info_pp8")
    assert (i.max_running_requests, i.pp_size, i.pp_micro_batch_cap, i.pp_micro_batches) == (64, 8, 8, 8)
    assert i.max_total_tokens == raw["max_total_num_tokens"] == 1_048_576
    assert i.caps_text() == "max_running=64 tp=1 pp=8 micro-batch cap=8"
    # nothing typed at all: the scheduler's own cap, which the top level does not hold
    d = info(version, "server_info_default")
    assert json.loads((SGLANG / version / "server_info_default.json").read_text())["max_running_requests"] is None
    assert d.max_running_requests == 4096 and d.pp_micro_batch_cap is None and d.tp_size == 2


@pytest.mark.parametrize("version", VERSIONS)
def test_the_pp_cap_is_named_from_the_server_info_not_unknown(version):
    """Case 3 and the client side of case 2: at C=64 on pp 8 the gauge reads one micro-batch
    (8) and the queue is empty; the cause is the micro-batch, named in the operator's words."""
    i = info(version, "server_info_pp8")
    s = metrics(version, "metrics_pp8_busy")
    assert (s.running, s.queued) == (8.0, 0.0)  # the max over the pp ranks' views: one micro-batch
    assert cap_cause(i, s) == "micro-batches of 8 from max_running_requests 64 / pp 8: GPUs underfed; raise --max-running-requests (--pp-max-micro-batch-size alone runs no more)"
    assert cap_warning(i, 64, s).startswith(
        "server cap: client holds 64 in flight, server runs 8 a micro-batch, queue 0 — micro-batches of 8")
    det = CapDetector(i)
    fired = [w for t in range(8) if (w := det.update(float(t), 64, 64, metrics(version, "metrics_pp8_busy", float(t))))]
    assert len(fired) == 1 and "GPUs underfed" in fired[0]
    # the top level alone (what redline read before): no cap named
    top = ServerInfo(kind="sglang", tp_size=1, pp_size=8)
    assert cap_cause(top, s).startswith("unknown cause")


@pytest.mark.parametrize("version", VERSIONS)
def test_attention_dp_caps_read_per_rank_times_dp(version):
    """Case 11, client side: four attention-DP schedulers of 32 each run 128."""
    i = info(version, ATTN_DP[version])
    assert (i.attn_dp_size, i.dp_ranks, i.max_running_requests) == (4, 4, 32)
    s = metrics(version, ATTN_DP_METRICS[version])
    assert (s.running, s.queued) == (128.0, 24.0)  # summed over dp_rank: each its own batch
    assert cap_cause(i, s) == "max_running_requests 32 × dp 4 (attention DP)"


# -- case 10: the server's keys are masked ----------------------------------------------------
@pytest.mark.parametrize("version", VERSIONS)
def test_the_servers_keys_never_reach_the_kept_info(version):
    raw = json.loads((SGLANG / version / "server_info_keys.json").read_text())
    assert raw["api_key"] and raw["admin_api_key"]  # SGLang hands them out in clear
    i = info(version, "server_info_keys")
    text = json.dumps(i.raw)
    assert raw["api_key"] not in text and raw["admin_api_key"] not in text
    assert i.raw["api_key"] == i.raw["admin_api_key"] == "***"
    assert set(i.secrets) == {raw["api_key"], raw["admin_api_key"]} and i.admin_key_set and i.api_key_set
    if version == "0.5.23":  # its launch_command repeats them
        assert "--api-key ***" in i.raw["launch_command"]
    assert i.raw["tokenizer_path"] == raw["tokenizer_path"] and i.raw["max_total_num_tokens"] == 1_048_576  # not credentials
    assert i.raw["api_key"] != raw["api_key"] and raw["api_key"] in json.dumps(raw)  # the input is not changed


def test_credential_names_and_url_passwords():
    assert all(credential_name(n) for n in ("api_key", "admin_api_key", "hf_token", "ssl_keyfile_password", "apiKey", "watermark_key"))
    assert not any(credential_name(n) for n in ("tokenizer_path", "max_total_num_tokens", "ssl_keyfile", "kv_cache_dtype", "keep_mm_feature"))
    out, secrets = scrub_server_info({"model_path": "https://u:pw123@hub/m", "nested": [{"auth_token": "t0k"}], "api_key": None,
                                      "note": "started with t0k"})
    assert out == {"model_path": "https://u:***@hub/m", "nested": [{"auth_token": "***"}], "api_key": None, "note": "started with ***"}
    assert set(secrets) == {"pw123", "t0k"}


# -- case 4: the priority label's total -------------------------------------------------------
def test_priority_scheduling_counts_the_total_once():
    s = metrics("0.5.23", "metrics_priority")
    assert (s.running, s.queued) == (48.0, 5.0)  # not 96 and 10: the per-priority series are left out
    assert s.prompt_tokens_total == 100_000.0  # token counters split by the request's priority: summed
    assert info("0.5.23", "server_info_priority").priority_scheduling is True


# -- case 5: spec gauges are 0.0 without speculative decoding -----------------------------------
@pytest.mark.parametrize("version", VERSIONS)
def test_spec_gauges_at_zero_are_off(version):
    text = (SGLANG / version / "metrics_pp8_busy.txt").read_text()
    assert "sglang:spec_accept_length{" in text  # exported...
    s = metrics(version, "metrics_pp8_busy")
    assert s.spec_accept_length is None and s.spec_acceptance_rate is None  # ... and read as off
    view = ServerStepView()
    for t in range(3):
        view.note(metrics(version, "metrics_pp8_busy", float(t)))
    assert view.result()["spec_accept_length"] is None and view.result()["spec_acceptance_rate"] is None
    on = re.sub(r"^(sglang:spec_accept_length\{.*\}) 0\.0$", r"\1 2.5", text, flags=re.M)
    on = re.sub(r"^(sglang:spec_accept_rate\{.*\}) 0\.0$", r"\1 0.5", on, flags=re.M)
    assert (parse_server_metrics(on, 0.0).spec_accept_length, parse_server_metrics(on, 0.0).spec_acceptance_rate) == (2.5, 0.5)


# -- case 6: counters whose series start missing ----------------------------------------------
@pytest.mark.parametrize("version", VERSIONS)
def test_the_first_retraction_burst_is_counted(version):
    before, after = metrics(version, "metrics_retract_before", 0.0), metrics(version, "metrics_retract_after", 1.0)
    assert before.preemptions_total is None and after.preemptions_total == 17.0  # the series appears at 17
    w = CounterWindow(("preemptions_total",))
    assert w.update(before) is None
    assert w.update(after) == (17.0,)  # not taken for the baseline
    view = ServerStepView()
    view.note(before)
    view.note(after)
    assert view.result()["server_preemptions"] == 17
    # a server that never shows the counter: nothing said, not 0
    quiet = CounterWindow(("preemptions_total",))
    assert quiet.update(before) is None and quiet.update(metrics(version, "metrics_retract_before", 1.0)) is None
    only = ServerStepView()
    only.note(before)
    assert only.result()["server_preemptions"] is None


@pytest.mark.parametrize("version", VERSIONS)
def test_prefix_hits_read_from_counters_with_a_missing_cached_series(version):
    before = metrics(version, "metrics_retract_before", 0.0)  # prompt tokens counted, nothing cached yet
    assert before.prefix_hits_total == 0.0 and before.prefix_queries_total == before.prompt_tokens_total
    s = metrics(version, "metrics_prefix_cached", 10.0)
    assert s.prefix_hits_total == 61_000.0 and s.prefix_queries_total == 100_000.0
    if version == "0.5.9":
        assert s.prefix_hit_rate is None  # its gauge reads 0 after every decode log: no reading
    w = PrefixRateWindow()
    first = w.update(metrics(version, "metrics_prefix_cached", 0.0))
    assert first.prefix_hit_rate is None  # one scrape: no interval yet
    later = parse_server_metrics((SGLANG / version / "metrics_prefix_cached.txt").read_text()
                                 .replace("} 100000.0", "} 110000.0").replace("} 61000.0", "} 68000.0"), 5.0)
    assert w.update(later).prefix_hit_rate == pytest.approx(7000 / 10000)
    # SGLang counts at a request's finish: a window without a finish reaches back to the last one
    assert w.update(parse_server_metrics((SGLANG / version / "metrics_prefix_cached.txt").read_text()
                                         .replace("} 100000.0", "} 110000.0").replace("} 61000.0", "} 68000.0"), 30.0)).prefix_hit_rate == pytest.approx(0.7)


# -- case 9: cached tokens need --enable-cache-report -------------------------------------------
def test_the_cache_report_hint():
    off = info("0.5.23", "server_info_priority")
    assert off.cache_report is False
    hint = cache_report_hint(off, "chat")
    assert hint and "--enable-cache-report" in hint
    assert cache_report_hint(off, "generate") is None  # /generate's meta_info always carries them
    unknown = ServerInfo(kind="sglang")
    assert cache_report_hint(unknown, "chat", completed=3, reported=0) is None  # too few answers yet
    assert "--enable-cache-report" in (cache_report_hint(unknown, "chat", completed=8, reported=0) or "")
    assert cache_report_hint(unknown, "chat", completed=8, reported=2) is None
    on = ServerInfo(kind="sglang", cache_report=True)
    assert cache_report_hint(on, "chat", completed=100, reported=0) is None  # on: 0 cached is what it says
    assert "--enable-prompt-tokens-details" in (cache_report_hint(ServerInfo(kind="vllm"), "chat", completed=9) or "")


@pytest.mark.parametrize("version", VERSIONS)
def test_answers_fixture_says_what_redline_keys_on(version):
    a = json.loads((SGLANG / version / "answers.json").read_text())
    assert a["flush_refused"]["status"] == 400 and a["flush_ok"]["status"] == 200
    assert "/" not in a["stop_profile"]["body"]  # no path in SGLang's answer
    assert a["profile_failed"]["status"] == 500 and a["unauthorized"]["status"] == 401
    if version == "0.5.9":
        assert a["flush_refused"]["body"] == a["flush_ok"]["body"]  # only the status tells a refusal
