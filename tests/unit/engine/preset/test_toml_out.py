"""The preset writer (engine/preset/toml_out.py, tomli-w underneath) and the preset parser
agree: whatever parses is written back to TOML that parses to the same Preset.

Strings with quotes, backslashes, '#' and non-ASCII text; floats of any size the parser
takes; lists; [slo], [guard], [gate]; concurrency and rate search ramps; replays.
"""

from __future__ import annotations

import math
import sys

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from redline.engine.preset import MAX_SECONDS, PresetError, parse_preset, parse_toml, preset_to_toml

from helpers import examples

SOURCE = "presets/rt.toml"
SETTINGS = settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])

# one-line text a person might type, biased to what a hand-written TOML escaper gets wrong
TRICKY = st.sampled_from(['"', "\\", "'", "#", "=", "[", "]", "{", "é", "中", "😀", "\u00a0", "\\u0041", '"""', " "])
ONE_LINE = st.lists(st.one_of(TRICKY, st.characters(blacklist_categories=("Cc", "Cs"))), min_size=1, max_size=16).map(
    "".join
).filter(lambda s: s.strip())

SECONDS = st.floats(min_value=0.0, max_value=MAX_SECONDS, exclude_min=True, allow_nan=False)
FRACTION = st.floats(min_value=0.0, max_value=1.0, exclude_min=True, exclude_max=True, allow_nan=False)
MS = st.floats(min_value=1e-9, max_value=1e300, allow_nan=False, allow_infinity=False)
RATE = st.floats(min_value=1e-6, max_value=1_000_000.0, allow_nan=False)


def round_trip(data: dict) -> None:
    """Parse `data`; if it is a preset, writing it and reading the text back gives it again,
    and writing that gives the same text."""
    try:
        p = parse_preset(data, SOURCE)
    except PresetError:
        assume(False)
        return
    text = preset_to_toml(p, header="a header line\nwith \"quotes\" and \\ too")
    assert text.startswith("# redline preset: ")
    again = parse_toml(text, SOURCE)
    assert again == p, text
    assert preset_to_toml(again, header="a header line\nwith \"quotes\" and \\ too") == text


# ------------------------------------------------------------------------------ strings


@SETTINGS
@given(name=ONE_LINE, description=ONE_LINE, model=ONE_LINE)
def test_strings_with_quotes_backslashes_and_unicode(name, description, model):
    round_trip({
        "name": name,
        "description": description,
        "workload": {"model": model},
        "ramp": {"concurrency": [1, 2]},
    })


def test_a_dataset_path_with_quotes_backslashes_and_unicode(tmp_path):
    f = tmp_path / 'we"ird \\ path é 中 #1.jsonl'
    f.write_text('{"prompt": "hi"}\n')
    p = parse_preset({"workload": {"dataset": f"jsonl:{f}"}, "ramp": {"concurrency": [4]}}, SOURCE)
    text = preset_to_toml(p)
    assert parse_toml(text, SOURCE) == p
    assert tomllib.loads(text)["workload"]["dataset"] == f"jsonl:{f.resolve()}"


def test_the_header_and_each_table_are_commented():
    p = parse_preset({"description": "d", "ramp": {"concurrency": [1]}, "slo": {"ttft_ms": 200}}, SOURCE)
    text = preset_to_toml(p, header="first\nsecond")
    lines = text.splitlines()
    assert lines[:3] == ["# redline preset: rt", "# first", "# second"]
    for table in ("[workload]", "[ramp]", "[stop]", "[after]", "[slo]"):
        i = lines.index(table)
        assert lines[i - 1].startswith("# "), table


# ------------------------------------------------------------------------------ numbers and lists


@SETTINGS
@given(
    conc=st.lists(st.integers(1, 100_000), min_size=1, max_size=40, unique=True),
    warmup=st.one_of(st.just(0.0), SECONDS),
    hold=SECONDS,
    extra=st.floats(min_value=1.0, max_value=3.0),
    min_requests=st.integers(1, 10_000_000),
    stop=st.fixed_dictionaries({}, optional={
        "plateau_gain": st.floats(0.0, 1.0), "error_rate": st.floats(0.0, 0.999999),
        "collapse": FRACTION, "p99_ttft_ms": MS, "p99_itl_ms": MS,
    }),
    probe=st.one_of(st.just(0.0), SECONDS),
)
def test_floats_and_lists_of_a_concurrency_ramp(conc, warmup, hold, extra, min_requests, stop, probe):
    round_trip({
        "ramp": {"concurrency": conc, "warmup_s": warmup, "hold_s": hold, "min_requests": min_requests,
                 "max_hold_s": min(hold * extra, MAX_SECONDS)},
        "stop": stop,
        "after": {"probe_s": probe},
    })


@SETTINGS
@given(
    start=st.integers(1, 1000),
    step=st.one_of(st.integers(1, 500), st.floats(1.01, 10.0)),
    top=st.integers(1, 100_000),
)
def test_a_generated_ramp_is_written_as_its_list(start, step, top):
    key = "step" if isinstance(step, int) else "factor"
    round_trip({"ramp": {"start": start, key: step, "max": top}})


@SETTINGS
@given(
    rates=st.lists(RATE, min_size=1, max_size=20),
    arrival=st.sampled_from(["poisson", "constant", "gamma:2", "gamma:0.5"]),
    cap=st.one_of(st.none(), st.integers(1, 10_000)),
)
def test_a_rate_ramp(rates, arrival, cap):
    ramp = {"rate": rates, "arrival": arrival}
    if cap is not None:
        ramp["max_concurrency"] = cap
    round_trip({"ramp": ramp})


@SETTINGS
@given(
    steps=st.lists(
        st.tuples(st.integers(1, 500), SECONDS, st.one_of(st.just(0.0), RATE),
                  st.fixed_dictionaries({}, optional={"input_len": st.integers(1, 10**6), "output_len": st.integers(1, 10**6)})),
        min_size=1, max_size=12,
    ),
    with_rate=st.booleans(),
)
def test_a_replay_with_durations_rates_and_step_workloads(steps, with_rate):
    ramp: dict = {"concurrency": [c for c, _, _, _ in steps], "durations_s": [d for _, d, _, _ in steps],
                  "workloads": [w for _, _, _, w in steps]}
    if with_rate:
        ramp["rate"] = [r for _, _, r, _ in steps]
    round_trip({"ramp": ramp})


# ------------------------------------------------------------------------------ search ramps


@SETTINGS
@given(
    start=st.integers(1, 10_000),
    span=st.integers(0, 100_000),
    resolution=FRACTION,
    factor=st.floats(min_value=1.0, max_value=1e6, exclude_min=True),
    hold=SECONDS,
)
def test_a_concurrency_search(start, span, resolution, factor, hold):
    round_trip({"ramp": {"mode": "search", "start": start, "max": min(start + span, 100_000),
                         "resolution": resolution, "factor": factor, "hold_s": hold}})


@SETTINGS
@given(start=RATE, top=RATE, arrival=st.sampled_from(["poisson", "constant"]), cap=st.integers(1, 4096))
def test_a_rate_search(start, top, arrival, cap):
    start, top = min(start, top), max(start, top)
    round_trip({"ramp": {"mode": "search", "over": "rate", "start": start, "max": top,
                         "arrival": arrival, "max_concurrency": cap}})


@pytest.mark.parametrize("start,top", [(0.7, 3.3), (1, 50), (0.1, 0.3), (2.5, 1_000_000), (1e-6, 1e-6), (0.123456789, 7.77)])
def test_a_rate_search_writes_rates_as_a_person_would(start, top):
    p = parse_preset({"ramp": {"mode": "search", "over": "rate", "start": start, "max": top}}, SOURCE)
    ramp = tomllib.loads(preset_to_toml(p))["ramp"]
    assert ramp["max"] == top  # not 0.30000000000000004
    assert parse_toml(preset_to_toml(p), SOURCE) == p


# ------------------------------------------------------------------------------ [slo], [guard], [gate]


@SETTINGS
@given(
    slo=st.fixed_dictionaries({}, optional={
        "ttft_ms": MS, "tpot_ms": MS, "itl_ms": MS, "e2e_ms": MS,
        "attainment": st.floats(min_value=0.0, max_value=1.0, exclude_min=True),
    }),
    guard=st.fixed_dictionaries({}, optional={
        "error_rate": st.floats(0.0, 0.999999), "ttft_p99_ms": MS,
        "gpu_temp_c": st.floats(min_value=0.0, max_value=200.0, exclude_min=True, exclude_max=True),
    }),
)
def test_slo_and_guard(slo, guard):
    data: dict = {"ramp": {"concurrency": [8, 16]}}
    if slo:
        data["slo"] = slo
    if guard:
        data["guard"] = guard
    round_trip(data)


@pytest.mark.parametrize("gate", [
    "knee>=64",
    "knee >= 64, errors <= 1%",
    ["errors<=1%", "knee>=64"],
    {"conditions": "knee>=64,errors<=1%"},
])
def test_gate(gate):
    p = parse_preset({"ramp": {"concurrency": [1]}, "gate": gate}, SOURCE)
    assert p.gate
    assert parse_toml(preset_to_toml(p), SOURCE) == p


def test_every_table_at_once():
    p = parse_preset({
        "name": 'all "of" it \\ é',
        "description": "every table # one",
        "target": {"url": "http://127.0.0.1:30000", "api": "completions"},
        "workload": {"input_len": 7, "output_len": 9, "turns": 3, "think_s": 0.25},
        "ramp": {"mode": "search", "start": 4, "max": 300, "resolution": 0.1, "factor": 1.5},
        "stop": {"plateau_gain": 0.05, "p99_ttft_ms": 1e4},
        "after": {"probe_s": 12.5},
        "slo": {"ttft_ms": 250, "itl_ms": 40.5, "attainment": 0.95},
        "guard": {"error_rate": 0.1, "gpu_temp_c": 85},
        "gate": "knee>=64",
    }, SOURCE)
    text = preset_to_toml(p)
    assert parse_toml(text, SOURCE) == p
    doc = tomllib.loads(text)
    assert set(doc) == {"name", "description", "target", "workload", "ramp", "stop", "after", "slo", "guard", "gate"}
    assert math.isclose(doc["slo"]["itl_ms"], 40.5)


# ------------------------------------------------------------------------------ [ramp] extras


@pytest.mark.parametrize("ramp", [
    {"concurrency": [4, 1, 8], "durations_s": [2.5, 1, 3], "probes": [False, True, False]},
    {"concurrency": [8, 16, 32], "profile": [16], "flush_cache": True},
    {"rate": [1.5, 3], "profile": [3, 1.5]},
    {"mode": "search", "start": 4, "max": 64, "profile": [48], "flush_cache": False},
])
def test_probes_profile_and_flush_cache(ramp):
    p = parse_preset({"ramp": ramp}, SOURCE)
    text = preset_to_toml(p)
    assert parse_toml(text, SOURCE) == p
    assert preset_to_toml(parse_toml(text, SOURCE)) == text


# ------------------------------------------------------------------------------ request shaping

HEADER_NAME = st.text(alphabet="!#$%&'*+-.^_`|~abcXYZ019", min_size=1, max_size=12).filter(
    lambda n: n.lower() not in ("host", "te", "expect", "upgrade", "trailer", "connection", "keep-alive"))
HEADER_VALUE = st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), max_size=20)
JSON_LEAF = st.one_of(st.booleans(), st.integers(-2**63, 2**63 - 1), st.floats(allow_nan=False, allow_infinity=False), ONE_LINE)
JSON_VALUE = st.recursive(JSON_LEAF, lambda kids: st.one_of(st.lists(kids, max_size=3), st.dictionaries(ONE_LINE, kids, max_size=3)),
                          max_leaves=8)


@SETTINGS
@given(headers=st.dictionaries(HEADER_NAME, HEADER_VALUE, max_size=4), extra=st.dictionaries(ONE_LINE, JSON_VALUE, max_size=4),
       ignore_eos=st.booleans(), ratio=st.floats(min_value=0.0, max_value=1.0, exclude_max=True), seed=st.integers(0, 2**63 - 1))
def test_request_shaping_keys(headers, extra, ignore_eos, ratio, seed):
    """[workload] headers, extra_body (any JSON a TOML table can hold), ignore_eos,
    random_range_ratio and seed are written back to what reads as the same preset."""
    assume(len({n.lower() for n in headers}) == len(headers))
    round_trip({"workload": {"headers": headers, "extra_body": extra, "ignore_eos": ignore_eos,
                             "random_range_ratio": ratio, "seed": seed},
                "ramp": {"concurrency": [1]}})
