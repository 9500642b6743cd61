"""Prometheus parsing, server /metrics (SGLang, vLLM) and dcgm-exporter parsing."""

from __future__ import annotations

import math

import pytest

from redline.engine.telemetry.dcgm import (
    DCGM_FP64_BLANK,
    DCGM_INT32_BLANK,
    DCGM_INT64_BLANK,
    dcgm_parser,
    is_dcgm_blank,
    parse_dcgm,
)
from redline.engine.telemetry.prom_text import PromParser, TelemetryParseError, parse_prometheus
from redline.engine.telemetry.server_metrics import parse_server_metrics, server_metrics_parser

from helpers import FIXTURES


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def _norm(samples):
    return {k: sorted((sorted(lab.items()), v) for lab, v in rows) for k, rows in samples.items()}


# -- parse_prometheus ----------------------------------------------------------------------


def test_keys_are_sample_names_as_written():
    sg = parse_prometheus(fixture("sglang_metrics.txt"))
    # a counter declared with _total keeps it (prometheus_client strips it from the family)
    assert "sglang:generation_tokens_total" in sg
    assert "sglang:generation_tokens" not in sg
    assert sg["sglang:generation_tokens_total"] == [
        ({"model_name": "Qwen/Qwen3-30B-A3B-Instruct-2507"}, 9871234.0)
    ]
    assert "sglang:time_to_first_token_seconds_bucket" in sg
    assert "sglang:time_to_first_token_seconds_count" in sg

    dc = parse_prometheus(fixture("dcgm_metrics.txt"))
    # a counter declared WITHOUT _total: prometheus_client renames its samples, we undo it
    assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" in dc
    assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total" not in dc
    labels, value = dc["DCGM_FI_DEV_POWER_USAGE"][0]
    assert labels["gpu"] == "0" and labels["modelName"] == "NVIDIA H100 PCIe"
    assert labels["Hostname"] == "gpu-node-07" and labels["device"] == "nvidia0"
    assert value == pytest.approx(212.503)


def test_vllm_fixture_parses_whole():
    samples = parse_prometheus(fixture("vllm_metrics_under_load.txt"))
    assert samples["vllm:num_requests_running"][0][1] == 8.0
    assert samples["vllm:num_requests_waiting"][0][1] == 24.0
    assert "vllm:generation_tokens_total" in samples
    assert "python_gc_objects_collected_total" in samples


def test_empty_and_comment_only_text():
    assert parse_prometheus("") == {}
    assert parse_prometheus("# just a comment\n\n") == {}


@pytest.mark.parametrize(
    "text",
    [
        "<html><body>502 Bad Gateway</body></html>\n",
        '{"detail":"Not Found"}',
        "404 page not found\n",
        "foo bar\n",
        'foo{a=b} 1\n',
        "foo{ 1\n",
        "# TYPE\n",
    ],
)
def test_malformed_text_raises_one_line_error(text):
    with pytest.raises(TelemetryParseError) as info:
        parse_prometheus(text)
    assert isinstance(info.value, ValueError)
    msg = str(info.value)
    assert msg.startswith("not Prometheus text")
    assert "\n" not in msg and len(msg) < 200


def test_names_filter_parses_only_wanted_metrics():
    text = fixture("vllm_metrics_under_load.txt") + "garbage line that would not parse\n"
    with pytest.raises(TelemetryParseError):
        parse_prometheus(text)
    got = parse_prometheus(text, names=["vllm:num_requests_running"])
    assert set(got) == {"vllm:num_requests_running"}


@pytest.mark.parametrize("name", ["sglang_metrics.txt", "vllm_metrics_under_load.txt", "dcgm_metrics.txt"])
def test_caching_parser_matches_plain_parser(name):
    text = fixture(name)
    parser = PromParser()
    first = parser.parse(text)
    second = parser.parse(text)  # from the series cache
    assert _norm(first) == _norm(second) == _norm(parse_prometheus(text))


def test_caching_parser_sees_new_values_and_new_series():
    parser = PromParser()
    a = parser.parse('# TYPE e counter\ne{gpu="0"} 10\n# TYPE g gauge\ng{x="1"} 1\n')
    assert a == {"e": [({"gpu": "0"}, 10.0)], "g": [({"x": "1"}, 1.0)]}
    b = parser.parse('# TYPE e counter\ne{gpu="0"} 25 1700000000000\n# TYPE g gauge\ng{x="1"} NaN\ng{x="2"} 7\n')
    assert b["e"] == [({"gpu": "0"}, 25.0)]
    assert math.isnan(b["g"][0][1]) and b["g"][1] == ({"x": "2"}, 7.0)
    with pytest.raises(TelemetryParseError):
        parser.parse('g{x="1"} not-a-number\n')


# -- server /metrics -----------------------------------------------------------------------


def test_sglang_fixture_sums_dp_ranks():
    s = parse_server_metrics(fixture("sglang_metrics.txt"), t=12.5)
    assert s is not None
    assert s.kind == "sglang" and s.t == 12.5
    assert s.running == 58.0  # dp_rank 0: 30 + dp_rank 1: 28
    assert s.queued == 7.0
    assert s.kv_usage == pytest.approx(0.61)  # the fuller replica
    assert s.gen_throughput == pytest.approx(2843.0)
    assert s.gen_tokens_total == 9871234.0
    assert s.prompt_tokens_total == 12498112.0


def test_vllm_fixture_running_8_waiting_24():
    s = parse_server_metrics(fixture("vllm_metrics_under_load.txt"), t=1.0)
    assert s is not None
    assert s.kind == "vllm"
    assert s.running == 8.0
    assert s.queued == 24.0
    assert s.kv_usage == pytest.approx(0.0019533634476864847)
    assert s.gen_throughput is None  # vLLM v1 has no gauge; the poller derives it
    assert s.gen_tokens_total == 7393.0


def test_vllm_several_engines_and_old_kv_name():
    text = (
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{engine="0",model_name="m"} 5.0\n'
        'vllm:num_requests_running{engine="1",model_name="m"} 7.0\n'
        "# TYPE vllm:num_requests_waiting gauge\n"
        'vllm:num_requests_waiting{engine="0",model_name="m"} 1.0\n'
        'vllm:num_requests_waiting{engine="1",model_name="m"} 2.0\n'
        "# TYPE vllm:gpu_cache_usage_perc gauge\n"
        'vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.4\n'
        'vllm:gpu_cache_usage_perc{engine="1",model_name="m"} 0.9\n'
    )
    s = parse_server_metrics(text, t=0.0)
    assert s is not None and (s.running, s.queued, s.kv_usage) == (12.0, 3.0, 0.9)


def test_sglang_rank_views_are_not_double_counted():
    # the same scheduler reported from two pp ranks: max, not sum; two dp ranks: sum
    text = (
        "# TYPE sglang:num_running_reqs gauge\n"
        'sglang:num_running_reqs{model_name="m",tp_rank="0",pp_rank="0",dp_rank="0"} 8.0\n'
        'sglang:num_running_reqs{model_name="m",tp_rank="0",pp_rank="1",dp_rank="0"} 8.0\n'
        'sglang:num_running_reqs{model_name="m",tp_rank="0",pp_rank="0",dp_rank="1"} 6.0\n'
        "# TYPE sglang:num_queue_reqs gauge\n"
        'sglang:num_queue_reqs{model_name="m",tp_rank="0",pp_rank="0",dp_rank="0"} 56.0\n'
        'sglang:num_queue_reqs{model_name="m",tp_rank="0",pp_rank="1",dp_rank="0"} 56.0\n'
    )
    s = parse_server_metrics(text, t=0.0)
    assert s is not None and s.running == 14.0 and s.queued == 56.0 and s.kv_usage is None


def test_no_known_family_gives_none():
    text = "# TYPE python_info gauge\npython_info{version=\"3.11\"} 1.0\n"
    assert parse_server_metrics(text, t=0.0) is None
    assert parse_server_metrics("", t=0.0) is None


def test_server_metrics_malformed_family_line_raises():
    with pytest.raises(TelemetryParseError):
        parse_server_metrics("sglang:num_running_reqs{model_name=m} 3\n", t=0.0)


def test_server_metrics_cached_parser_same_answer():
    parser = server_metrics_parser()
    for name in ("sglang_metrics.txt", "vllm_metrics_under_load.txt"):
        text = fixture(name)
        assert parse_server_metrics(text, 1.0, parser=parser) == parse_server_metrics(text, 1.0)
        assert parse_server_metrics(text, 1.0, parser=parser) == parse_server_metrics(text, 1.0)


# -- dcgm-exporter -------------------------------------------------------------------------


def test_dcgm_fixture_values_and_sentinels():
    gpus = parse_dcgm(fixture("dcgm_metrics.txt"))
    assert [g.index for g in gpus] == [0, 1, 2, 3]
    g0, g1, g2, g3 = gpus
    assert g0.name == "NVIDIA H100 PCIe"
    assert g0.power_w == pytest.approx(212.503)
    assert g0.power_limit_w == pytest.approx(350.0)
    assert g0.power_pct == pytest.approx(100 * 212.503 / 350.0)
    assert g0.util_pct == 87.0
    assert g0.mem_used_mib == 71234.0
    assert g0.mem_total_mib == 71234.0 + 9412.0 + 913.0  # used + free + reserved
    assert g0.temp_c == 61.0
    assert g0.energy_j == pytest.approx(123456789.012)  # mJ -> J
    # sentinels -> None
    assert g1.energy_j is None  # int64 NOT_SUPPORTED 9223372036854775794
    assert g1.temp_c == 64.0
    assert g2.temp_c is None  # int32 blank 2147483632
    assert g3.power_w is None  # fp64 blank 2**47
    assert g3.power_limit_w is None  # 1.4411518807585587e+17
    assert g3.power_pct is None
    assert g3.util_pct == 0.0 and g3.temp_c == 55.0


def test_dcgm_sorted_by_index_and_limit_fallbacks():
    text = (
        "# TYPE DCGM_FI_DEV_POWER_USAGE gauge\n"
        'DCGM_FI_DEV_POWER_USAGE{gpu="10",device="nvidia10",modelName="X"} 100.5\n'
        'DCGM_FI_DEV_POWER_USAGE{gpu="2",device="nvidia2",modelName="X"} 90.0\n'
        'DCGM_FI_DEV_POWER_USAGE{device="nvidia7",modelName="X"} 80.0\n'
        "# TYPE DCGM_FI_DEV_ENFORCED_POWER_LIMIT gauge\n"
        'DCGM_FI_DEV_ENFORCED_POWER_LIMIT{gpu="2"} 300.0\n'
        "# TYPE DCGM_FI_DEV_POWER_MGMT_LIMIT gauge\n"
        'DCGM_FI_DEV_POWER_MGMT_LIMIT{gpu="2"} 350.0\n'
        'DCGM_FI_DEV_POWER_MGMT_LIMIT{gpu="10"} 400.0\n'
        "# TYPE DCGM_FI_DEV_FB_USED gauge\n"
        'DCGM_FI_DEV_FB_USED{gpu="2"} 1000\n'
    )
    gpus = parse_dcgm(text)
    assert [g.index for g in gpus] == [2, 7, 10]
    assert gpus[0].power_limit_w == 300.0  # enforced limit preferred
    assert gpus[2].power_limit_w == 400.0
    assert gpus[0].mem_used_mib == 1000.0 and gpus[0].mem_total_mib is None  # no free: no total
    assert gpus[1].power_w == 80.0


def test_dcgm_cached_parser_and_empty():
    parser = dcgm_parser()
    text = fixture("dcgm_metrics.txt")
    assert parse_dcgm(text, parser=parser) == parse_dcgm(text, parser=parser) == parse_dcgm(text)
    assert parse_dcgm("") == []
    assert parse_dcgm(fixture("sglang_metrics.txt")) == []


@pytest.mark.parametrize(
    "value",
    [DCGM_INT32_BLANK, DCGM_INT32_BLANK + 2, DCGM_INT64_BLANK, 9223372036854775794,
     DCGM_FP64_BLANK, DCGM_FP64_BLANK + 3, 1.4411518807585587e17, float("nan"), float("inf")],
)
def test_dcgm_blank_values(value):
    assert is_dcgm_blank(float(value))


@pytest.mark.parametrize("value", [0.0, 61.0, 350.0, 81559.0, 123456789012.0])
def test_dcgm_real_values_are_not_blank(value):
    assert not is_dcgm_blank(value)
