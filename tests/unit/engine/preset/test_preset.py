"""Preset files: shipped presets, ramp forms, one-line errors, round trips, fuzzing."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from redline.engine.client.target import validate_url
from redline.engine.preset import (
    MAX_SECONDS,
    AfterSpec,
    Preset,
    PresetError,
    RampSpec,
    StopSpec,
    TargetSpec,
    WorkloadSpec,
    load_preset,
    parse_preset,
    preset_to_toml,
)
from redline.engine.report.preset_from import timeline_preset

from helpers import ROOT, examples

PRESETS = ROOT / "presets"
SHIPPED = ["until-it-breaks", "quick", "c1-probe", "doubling", "rate-ramp", "trace-replay"]


def write(tmp_path: Path, text: str, name: str = "x.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def err(data: dict, source: str = "presets/x.toml") -> str:
    with pytest.raises(PresetError) as e:
        parse_preset(data, source)
    msg = str(e.value)
    assert "\n" not in msg and "\r" not in msg
    assert msg.startswith(source + ": ")
    return msg


RAMP = {"concurrency": [1, 2]}


# ------------------------------------------------------------------- shipped presets


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_presets_load(name):
    p = load_preset(PRESETS / f"{name}.toml")
    assert p.name == name
    assert p.description
    assert p.ramp.concurrency or p.ramp.rate or p.ramp.speed
    # each shipped file round-trips through the writer
    again = parse_preset(tomllib.loads(preset_to_toml(p)), str(PRESETS / f"{name}.toml"))
    assert again == p


def test_every_shipped_file_is_tested():
    assert sorted(f.stem for f in PRESETS.glob("*.toml")) == sorted(SHIPPED)


def test_until_it_breaks_is_the_staircase():
    p = load_preset(PRESETS / "until-it-breaks.toml")
    assert p.ramp.concurrency == (32, 64, 96, 128, 192, 256)
    assert (p.workload.input_len, p.workload.output_len) == (1024, 2048)
    assert (p.ramp.warmup_s, p.ramp.hold_s, p.ramp.min_requests) == (15, 60, 20)
    assert p.stop == StopSpec(0.05, 10000, 500, 0.05, 0.2)
    assert p.after.probe_s == 30
    assert p.target == TargetSpec()  # runs against --url or the built-in sim


def test_quick_is_under_a_minute():
    p = load_preset(PRESETS / "quick.toml")
    lo, hi = p.duration_bounds()
    assert hi < 60  # even if every step holds to max_hold_s and no rule fires
    assert p.after.probe_s > 0
    assert p.stop.plateau_gain == 0.05


def test_rate_ramp_and_trace_replay():
    r = load_preset(PRESETS / "rate-ramp.toml")
    assert r.ramp.rate == (2, 4, 8, 16, 32, 64) and r.ramp.arrival == "poisson" and r.ramp.max_concurrency == 256
    assert [p.rate for p in r.ramp.steps()] == [2, 4, 8, 16, 32, 64]
    assert r.stop.p99_ttft_ms == 2000
    t = load_preset(PRESETS / "trace-replay.toml")
    assert t.ramp.speed == (1, 2) and Path(t.workload.trace) == PRESETS / "traces" / "example.jsonl"
    lo, hi = t.duration_bounds()
    assert 85 < lo < 95 and hi > lo  # 60 s at x1 + 30 s at x2


def test_c1_probe_and_doubling():
    c1 = load_preset(PRESETS / "c1-probe.toml")
    assert c1.ramp.concurrency == (1,)
    assert c1.ramp.hold_s == 30 and c1.after.probe_s == 0
    d = load_preset(PRESETS / "doubling.toml")
    assert d.ramp.concurrency == tuple(2**k for k in range(11))
    assert d.stop != StopSpec()  # some stop rule is on


# --------------------------------------------------------------------------- ramps


def test_defaults():
    p = parse_preset({"ramp": {"concurrency": [4]}}, "d/y.toml")
    assert p.name == "y"
    assert p.path == Path("d/y.toml")
    assert p.workload == WorkloadSpec("chat", "random", 32, 128, None)
    assert p.ramp == RampSpec((4,), 10.0, 30.0, 20, 90.0, None)
    assert p.stop == StopSpec()  # every rule off
    assert p.after == AfterSpec(0.0)
    assert p.target == TargetSpec(None, None)


def test_max_hold_default_is_three_holds():
    p = parse_preset({"ramp": {"concurrency": [4], "hold_s": 7}}, "x.toml")
    assert p.ramp.max_hold_s == 21
    plan = p.ramp.steps()[0]
    assert (plan.concurrency, plan.warmup_s, plan.hold_s, plan.min_requests, plan.max_hold_s) == (
        4, 10, 7, 20, 21,
    )


@pytest.mark.parametrize(
    "ramp, expected",
    [
        ({"concurrency": [32, 64, 96]}, (32, 64, 96)),
        ({"concurrency": [64, 8, 16]}, (64, 8, 16)),  # any order
        ({"start": 1, "factor": 2, "max": 1024}, tuple(2**k for k in range(11))),
        ({"start": 1, "factor": 2, "max": 1000}, tuple(2**k for k in range(10))),
        ({"start": 8, "factor": 2, "max": 8}, (8,)),
        ({"start": 4, "factor": 1.5, "max": 30}, (4, 6, 9, 14, 20, 30)),
        # rounding never repeats a step: 1.5 -> 2, 2.25 -> 2 bumped to 3, ...
        ({"start": 1, "factor": 1.5, "max": 8}, (1, 2, 3, 4, 5, 8)),
        ({"start": 8, "step": 8, "max": 40}, (8, 16, 24, 32, 40)),
        ({"start": 8, "step": 10, "max": 40}, (8, 18, 28, 38)),
    ],
)
def test_ramp_forms(ramp, expected):
    p = parse_preset({"ramp": ramp}, "x.toml")
    assert p.ramp.concurrency == expected
    assert [s.concurrency for s in p.ramp.steps()] == list(expected)


def test_durations_replay_mode():
    p = parse_preset({"ramp": {"concurrency": [8, 16, 8], "durations_s": [5, 2.5, 10]}}, "x.toml")
    assert p.ramp.concurrency == (8, 16, 8)  # repeats allowed in replay mode
    assert p.ramp.durations_s == (5.0, 2.5, 10.0)
    plans = p.ramp.steps()
    assert [(s.warmup_s, s.hold_s, s.max_hold_s, s.min_requests) for s in plans] == [
        (0, 5, 5, 0), (0, 2.5, 2.5, 0), (0, 10, 10, 0),
    ]
    assert p.ramp.duration_bounds() == (17.5, 17.5)


# --------------------------------------------------------------------- bad presets


@pytest.mark.parametrize(
    "data, needles",
    [
        # empty / bad ramp
        ({"ramp": {"concurrency": []}},
         ["[ramp].concurrency: expected a non-empty list of positive integers", "got []"]),
        ({"ramp": {"concurrency": [8, 0]}}, ["[ramp].concurrency", "got 0 at position 2"]),
        ({"ramp": {"concurrency": [8, -4]}}, ["[ramp].concurrency", "got -4"]),
        ({"ramp": {"concurrency": [8, True]}}, ["[ramp].concurrency", "got True"]),
        ({"ramp": {"concurrency": [8, 2.5]}}, ["[ramp].concurrency", "got 2.5"]),
        ({"ramp": {"concurrency": "32"}}, ["[ramp].concurrency", "got '32'"]),
        ({"ramp": {"concurrency": [8, 16, 8]}}, ["[ramp].concurrency", "8 twice", "durations_s"]),
        ({"ramp": {"concurrency": [10**6]}}, ["[ramp].concurrency", "at most 100000"]),
        ({}, ["[ramp]: missing", "concurrency = [..] or start/factor/max"]),
        ({"ramp": {}}, ["[ramp]: expected concurrency = [..] or start/factor/max"]),
        ({"ramp": 5}, ["[ramp]: expected a table, got 5"]),
        ({"ramp": {"concurrency": [1], "start": 1}}, ["[ramp]: give either concurrency", "not both"]),
        ({"ramp": {"start": 1, "factor": 2}}, ["[ramp].max: missing"]),
        ({"ramp": {"factor": 2, "max": 4}}, ["[ramp].start: missing"]),
        ({"ramp": {"start": 1, "max": 4}}, ["[ramp].factor: missing", "factor = number > 1", "step"]),
        ({"ramp": {"start": 1, "factor": 2, "step": 2, "max": 8}}, ["[ramp]: give factor", "not both"]),
        ({"ramp": {"start": 1, "factor": 1, "max": 8}}, ["[ramp].factor: expected a number > 1", "got 1"]),
        ({"ramp": {"start": 1, "factor": 0.5, "max": 8}}, ["[ramp].factor", "got 0.5"]),
        ({"ramp": {"start": 0, "factor": 2, "max": 8}}, ["[ramp].start: expected an integer 1..100000", "got 0"]),
        ({"ramp": {"start": 16, "factor": 2, "max": 8}}, ["[ramp].max: expected an integer >= start (16)", "got 8"]),
        ({"ramp": {"start": 1, "step": 0, "max": 8}}, ["[ramp].step", "got 0"]),
        ({"ramp": {"start": 1, "step": 1, "max": 100000}}, ["[ramp]: start/step/max gives 100000 steps", "at most"]),
        ({"ramp": {"start": 1, "factor": 1.0000001, "max": 100000}}, ["[ramp]: start/factor/max gives more than"]),
        # times
        ({"ramp": {**RAMP, "hold_s": 0}}, ["[ramp].hold_s: expected a number of seconds > 0", "got 0"]),
        ({"ramp": {**RAMP, "hold_s": -5}}, ["[ramp].hold_s", "got -5"]),
        ({"ramp": {**RAMP, "hold_s": "60"}}, ["[ramp].hold_s", "got '60'"]),
        ({"ramp": {**RAMP, "hold_s": True}}, ["[ramp].hold_s", "got True"]),
        ({"ramp": {**RAMP, "hold_s": float("inf")}}, ["[ramp].hold_s", "got inf"]),
        ({"ramp": {**RAMP, "hold_s": float("nan")}}, ["[ramp].hold_s", "got nan"]),
        ({"ramp": {**RAMP, "hold_s": MAX_SECONDS + 1}}, ["[ramp].hold_s", "at most 604800"]),
        ({"ramp": {**RAMP, "warmup_s": -1}}, ["[ramp].warmup_s: expected a number of seconds 0..604800", "got -1"]),
        ({"ramp": {**RAMP, "min_requests": 0}}, ["[ramp].min_requests: expected an integer 1..", "got 0"]),
        ({"ramp": {**RAMP, "min_requests": 2.0}}, ["[ramp].min_requests", "got 2.0"]),
        ({"ramp": {**RAMP, "hold_s": 30, "max_hold_s": 10}}, ["[ramp].max_hold_s: expected a number of seconds >= hold_s (30)", "got 10"]),
        ({"ramp": RAMP, "after": {"probe_s": -1}}, ["[after].probe_s: expected a number of seconds 0..", "got -1"]),
        ({"ramp": RAMP, "after": {"probe_s": "30s"}}, ["[after].probe_s", "got '30s'"]),
        # replay durations
        ({"ramp": {"concurrency": [1, 2], "durations_s": [1]}}, ["[ramp].durations_s: expected one duration per step (2), got 1"]),
        ({"ramp": {"concurrency": [1], "durations_s": [0]}}, ["[ramp].durations_s: expected a non-empty list of seconds > 0", "got 0 at position 1"]),
        ({"ramp": {"concurrency": [1], "durations_s": []}}, ["[ramp].durations_s", "got []"]),
        ({"ramp": {"concurrency": [1], "durations_s": [3], "hold_s": 3}}, ["[ramp].hold_s: not used with durations_s"]),
        ({"ramp": {"concurrency": [1], "durations_s": [3], "min_requests": 3}}, ["[ramp].min_requests: not used with durations_s"]),
        ({"ramp": {"concurrency": [1], "durations_s": [3], "warmup_s": 2}}, ["[ramp].warmup_s: expected 0 (or absent) with durations_s", "got 2"]),
        # stop rules
        ({"ramp": RAMP, "stop": {"p99_tft_ms": 5}},
         ["unknown key [stop].p99_tft_ms; did you mean p99_ttft_ms?"]),  # a typo: the closest key (issue 38)
        ({"ramp": RAMP, "stop": {"ttft": 5}},
         ["unknown key [stop].ttft (accepted: plateau_gain, p99_ttft_ms, p99_itl_ms, error_rate, collapse, stall_s)"]),
        ({"ramp": RAMP, "stop": {"plateau_gain": 1.5}}, ["[stop].plateau_gain: expected a fraction 0..1", "got 1.5"]),
        ({"ramp": RAMP, "stop": {"plateau_gain": -0.1}}, ["[stop].plateau_gain", "got -0.1"]),
        ({"ramp": RAMP, "stop": {"error_rate": 1}}, ["[stop].error_rate: expected a fraction 0 <= x < 1", "got 1"]),
        ({"ramp": RAMP, "stop": {"collapse": 0}}, ["[stop].collapse: expected a fraction 0 < x < 1", "got 0"]),
        ({"ramp": RAMP, "stop": {"collapse": 2}}, ["[stop].collapse", "got 2"]),
        ({"ramp": RAMP, "stop": {"p99_ttft_ms": 0}}, ["[stop].p99_ttft_ms: expected a number of milliseconds > 0", "got 0"]),
        ({"ramp": RAMP, "stop": {"p99_itl_ms": False}}, ["[stop].p99_itl_ms", "got False"]),
        ({"ramp": RAMP, "stop": []}, ["[stop]: expected a table, got []"]),
        # workload
        ({"ramp": RAMP, "workload": {"api": "grpc"}},
         ["[workload].api: expected one of chat, completions, generate, got 'grpc'"]),
        ({"ramp": RAMP, "target": {"api": "rest"}}, ["[target].api: expected one of chat, completions, generate, got 'rest'"]),
        ({"ramp": RAMP, "target": {"api": "chat"}, "workload": {"api": "generate"}},
         ["[workload].api: 'generate' disagrees with [target].api 'chat'"]),
        ({"ramp": RAMP, "workload": {"input_len": 0}}, ["[workload].input_len: expected an integer 1..", "got 0"]),
        ({"ramp": RAMP, "workload": {"output_len": 12.5}}, ["[workload].output_len", "got 12.5"]),
        ({"ramp": RAMP, "workload": {"output_len": True}}, ["[workload].output_len", "got True"]),
        ({"ramp": RAMP, "workload": {"model": ""}}, ["[workload].model: expected a non-empty one-line string", "got ''"]),
        ({"ramp": RAMP, "workload": {"dataset": "csv:foo"}},
         ["[workload].dataset: expected random, sharegpt:PATH or jsonl:PATH, got 'csv:foo'"]),
        ({"ramp": RAMP, "workload": {"dataset": "sharegpt:"}}, ["[workload].dataset", "got 'sharegpt:'"]),
        ({"ramp": RAMP, "workload": {"dataset": 3}}, ["[workload].dataset", "got 3"]),
        ({"ramp": RAMP, "workload": {"input": 3}}, ["unknown key [workload].input; did you mean input_len?"]),
        ({"ramp": RAMP, "workload": {"colour": 3}},
         ["unknown key [workload].colour (accepted: api, dataset, input_len, output_len, model, turns, think_s, trace, "
          "headers, extra_body, ignore_eos, random_range_ratio, seed)"]),
        # tables and top level
        ({"ramp": RAMP, "stopp": {"x": 1}}, ["unknown table [stopp]; did you mean [stop]?"]),
        ({"ramp": RAMP, "limits": {"x": 1}}, ["unknown table [limits] (accepted: target, workload, ramp, stop, after, slo, guard, gate)"]),
        ({"ramp": RAMP, "hold_s": 3}, ["unknown key hold_s (accepted: name, description, and tables [target]"]),
        ({"ramp": RAMP, "name": 3}, ["name: expected a non-empty one-line string, got 3"]),
        ({"ramp": RAMP, "description": ["a"]}, ["description: expected a one-line string"]),
        ({"ramp": {**RAMP, "sub": {"a": 1}}}, ["unknown key [ramp].sub (accepted: concurrency, start"]),
    ],
)
def test_bad_values_give_one_line(data, needles):
    msg = err(data)
    for n in needles:
        assert n in msg, (n, msg)


@pytest.mark.parametrize(
    "url",
    [
        "localhost:30000",
        "ftp://host:21",
        "http://",
        "http://host:0",
        "http://host:99999",
        "http://host:abc",
        "http://host:",
        "http://host:30000/v1/chat/completions",
        "http://host?x=1",
        "http://host#frag",
        "http://ho st",
        "http://[::1",
        "",
    ],
)
def test_bad_url(url):
    """The preset's [target].url is checked by the validator --url uses (engine/client/target.py)."""
    msg = err({"ramp": RAMP, "target": {"url": url}})
    assert "[target].url: expected http://HOST[:PORT] or https://HOST[:PORT] (optionally ending in /v1), got " in msg
    assert repr(url) in msg


@pytest.mark.parametrize("url", ["http://user:secret@host:30000", "http://user:secret@host:abc", "ftp://user:secret@host"])
def test_url_with_a_password_is_refused_without_echoing_it(url):
    msg = err({"ramp": RAMP, "target": {"url": url}})
    assert "[target].url: expected http://HOST[:PORT]" in msg and "***@host" in msg
    assert "secret" not in msg
    with pytest.raises(ValueError) as e:  # --url: the same
        validate_url(url)
    assert "secret" not in str(e.value)


@pytest.mark.parametrize(
    "url, norm",
    [
        ("http://127.0.0.1:30000", "http://127.0.0.1:30000"),
        ("http://127.0.0.1:30000/", "http://127.0.0.1:30000"),
        ("HTTPS://gpu-host", "https://gpu-host"),
        ("http://[::1]:8000/", "http://[::1]:8000"),
        ("http://gpu-host:30000/v1", "http://gpu-host:30000"),  # as --url takes it
    ],
)
def test_good_url(url, norm):
    assert parse_preset({"ramp": RAMP, "target": {"url": url}}, "x.toml").target.url == norm
    assert validate_url(url) == norm  # the same validator as --url


def test_target_api_alias():
    p = parse_preset({"ramp": RAMP, "target": {"api": "generate"}}, "x.toml")
    assert p.workload.api == "generate" and p.target.api == "generate"
    p = parse_preset({"ramp": RAMP, "target": {"api": "completions"}, "workload": {"api": "completions"}}, "x.toml")
    assert p.workload.api == "completions"


def test_missing_file(tmp_path):
    with pytest.raises(PresetError) as e:
        load_preset("missing.toml")
    assert str(e.value) == "missing.toml: file not found"
    with pytest.raises(PresetError) as e:
        load_preset(tmp_path)
    assert "is a directory" in str(e.value) and "\n" not in str(e.value)


def test_not_toml(tmp_path):
    p = write(tmp_path, "[ramp]\nconcurrency = [1, 2\nhold_s = \n")
    with pytest.raises(PresetError) as e:
        load_preset(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}: not valid TOML: ") and "\n" not in msg
    p.write_bytes(b"\xff\xfe[ramp]")
    with pytest.raises(PresetError, match="not UTF-8"):
        load_preset(p)


def test_error_names_the_file_as_given(tmp_path):
    p = write(tmp_path, "[ramp]\nconcurrency = []\n")
    with pytest.raises(PresetError) as e:
        load_preset(p)
    assert str(e.value) == (
        f"{p}: [ramp].concurrency: expected a non-empty list of positive integers "
        "(at most 100000), got []"
    )


def test_preset_error_is_value_error():
    assert issubclass(PresetError, ValueError)
    assert "\n" not in str(PresetError("a\nb"))


# ---------------------------------------------------------------------- datasets


def test_dataset_relative_to_preset_folder(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "sg.json").write_text("[]")
    (tmp_path / "p.jsonl").write_text("")
    f = write(tmp_path, '[workload]\ndataset = "sharegpt:data/sg.json"\n[ramp]\nconcurrency = [1]\n')
    p = load_preset(f)
    assert p.workload.dataset == f"sharegpt:{(tmp_path / 'data' / 'sg.json').resolve()}"
    # absolute paths stay as they are
    g = write(tmp_path, f'[workload]\ndataset = "jsonl:{tmp_path / "p.jsonl"}"\n[ramp]\nconcurrency = [1]\n', "g.toml")
    assert load_preset(g).workload.dataset == f"jsonl:{(tmp_path / 'p.jsonl').resolve()}"
    assert parse_preset({"ramp": RAMP}, "x.toml").workload.dataset == "random"


def test_dataset_missing_file_named(tmp_path):
    f = write(tmp_path, '[workload]\ndataset = "jsonl:nope.jsonl"\n[ramp]\nconcurrency = [1]\n')
    with pytest.raises(PresetError) as e:
        load_preset(f)
    msg = str(e.value)
    assert "[workload].dataset: dataset file not found" in msg
    assert str(tmp_path / "nope.jsonl") in msg
    assert "\n" not in msg
    # a directory is not a dataset file
    (tmp_path / "d").mkdir()
    with pytest.raises(PresetError, match="dataset file not found"):
        parse_preset({"ramp": RAMP, "workload": {"dataset": f"jsonl:{tmp_path / 'd'}"}}, str(f))


# ------------------------------------------------------------------- round trips


def _full_preset(tmp_path: Path) -> Preset:
    ds = tmp_path / "set.jsonl"
    ds.write_text("")
    return Preset(
        name='odd "name" \\ ü',
        path=None,
        target=TargetSpec("http://gpu:30000", "completions"),
        workload=WorkloadSpec("completions", f"jsonl:{ds.resolve()}", 1000, 2048, "org/Model-7B"),
        ramp=RampSpec((5, 3, 700), 0.0, 12.5, 7, 99.25),
        stop=StopSpec(0.0, 1234.5, 80, 0, 0.3),
        after=AfterSpec(2.5),
        description="quote \" and #hash, back\\slash",
    )


def test_round_trip(tmp_path):
    p = _full_preset(tmp_path)
    text = preset_to_toml(p, header="made by a test\nsecond line")
    assert text.startswith("# redline preset:")
    f = write(tmp_path, text, "rt.toml")
    q = load_preset(f)
    assert q == dataclasses.replace(p, path=f)
    # and again: the writer is stable
    assert preset_to_toml(q, header="made by a test\nsecond line") == text


def test_round_trip_minimal_and_generated(tmp_path):
    p = parse_preset({"ramp": {"start": 2, "factor": 3, "max": 500}}, str(tmp_path / "m.toml"))
    f = write(tmp_path, preset_to_toml(p), "m.toml")
    assert load_preset(f) == p


def test_timeline_preset_round_trip(tmp_path):
    timeline = [(100.0, 8), (105.5, 16), (109.0, 16), (112.0, 0), (120.0, 64), (130.25, 8), (131.0, 0)]
    text = timeline_preset("replay-1", "http://10.0.0.2:30000/", WorkloadSpec(input_len=1024, output_len=2048), timeline)
    f = write(tmp_path, text, "replay.toml")
    p = load_preset(f)
    assert p.name == "replay-1"
    assert p.target.url == "http://10.0.0.2:30000"
    assert p.workload.input_len == 1024 and p.workload.output_len == 2048
    # 16 twice merges; the paused stretch (C=0) is left out; the last point ends it
    assert p.ramp.concurrency == (8, 16, 64, 8)
    assert p.ramp.durations_s == (5.5, 6.5, 10.25, 0.75)
    assert p.ramp.warmup_s == 0
    assert [s.min_requests for s in p.ramp.steps()] == [0, 0, 0, 0]
    assert p.stop == StopSpec() and p.after.probe_s == 0
    assert preset_to_toml(p, header="Replays a recorded session's concurrency timeline (redline preset-from).") == text


def test_timeline_preset_end_and_errors():
    text = timeline_preset("r", None, WorkloadSpec(), [(0, 4), (3, 8)], end_s=10)
    p = parse_preset(tomllib.loads(text), "r.toml")
    assert p.ramp.concurrency == (4, 8) and p.ramp.durations_s == (3, 7)
    assert p.target.url is None
    with pytest.raises(PresetError, match="nothing to replay"):
        timeline_preset("r", None, WorkloadSpec(), [(0, 4)])
    with pytest.raises(PresetError, match="nothing to replay"):
        timeline_preset("r", None, WorkloadSpec(), [])
    with pytest.raises(PresetError, match=r"timeline: target url: expected http://HOST\[:PORT\].*, got 'ftp://h'"):
        timeline_preset("r", "ftp://h", WorkloadSpec(), [(0, 4), (1, 0)])


# ------------------------------------------------------------------- fuzzing

KNOWN_TABLE = st.sampled_from(["target", "workload", "ramp", "stop", "after"])
KNOWN_KEY = st.sampled_from(
    [k for ks in (
        ["url", "api"],
        ["api", "dataset", "input_len", "output_len", "model"],
        ["concurrency", "start", "factor", "step", "max", "warmup_s", "hold_s",
         "min_requests", "max_hold_s", "durations_s"],
        ["plateau_gain", "p99_ttft_ms", "p99_itl_ms", "error_rate", "collapse"],
        ["probe_s", "name", "description"],
    ) for k in ks]
)
SCALAR = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.integers(min_value=-3, max_value=300),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=-2, max_value=2),
    st.text(max_size=12),
    st.sampled_from(["chat", "generate", "random", "sharegpt:x.json", "jsonl:", "http://h:1",
                     "http://h:1/v1", "https://[::1]:9", "\x00", "jsonl:\x00", "sharegpt:" + "a" * 5000]),
    st.datetimes(),
    st.dates(),
    st.times(),
)
VALUE = st.recursive(
    SCALAR,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.dictionaries(st.one_of(KNOWN_KEY, st.text(max_size=6)), inner, max_size=4),
    ),
    max_leaves=12,
)
TABLE = st.dictionaries(st.one_of(KNOWN_KEY, st.text(max_size=8)), VALUE, max_size=6)
DOC = st.dictionaries(
    st.one_of(KNOWN_TABLE, KNOWN_KEY, st.text(max_size=8)),
    st.one_of(TABLE, VALUE),
    max_size=6,
)
# Mostly-valid documents reach the deep checks.
NEAR_VALID = st.fixed_dictionaries(
    {"ramp": st.dictionaries(KNOWN_KEY, VALUE, max_size=6)},
    optional={
        "workload": st.dictionaries(KNOWN_KEY, VALUE, max_size=4),
        "stop": st.dictionaries(KNOWN_KEY, VALUE, max_size=4),
        "target": st.dictionaries(KNOWN_KEY, VALUE, max_size=2),
        "after": st.dictionaries(KNOWN_KEY, VALUE, max_size=2),
    },
)
GOODISH_RAMP = st.fixed_dictionaries(
    {},
    optional={
        "concurrency": st.lists(st.integers(-2, 300), max_size=6),
        "start": st.integers(-2, 300),
        "factor": st.one_of(st.floats(0.5, 1e9), st.integers(-1, 10)),
        "step": st.integers(-1, 50),
        "max": st.integers(-1, 10**6),
        "warmup_s": st.one_of(st.floats(-1, 1e7), st.integers(-1, 10**7)),
        "hold_s": st.one_of(st.floats(-1, 1e308), st.integers(-1, 10**7)),
        "max_hold_s": st.one_of(st.floats(-1, 1e7), st.integers(-1, 100)),
        "min_requests": st.integers(-1, 100),
        "durations_s": st.lists(st.floats(-1, 100), max_size=6),
    },
)


def _check(data, tmp_path_factory=None):
    try:
        p = parse_preset(data, "fuzz/x.toml")
    except PresetError as e:
        msg = str(e)
        assert "\n" not in msg and msg.startswith("fuzz/x.toml: ")
        return
    # Whatever parses also writes back and reads back equal.
    assert parse_preset(tomllib.loads(preset_to_toml(p)), "fuzz/x.toml") == p


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(DOC)
def test_fuzz_random_documents_only_raise_preset_error(data):
    _check(data)


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(NEAR_VALID)
def test_fuzz_near_valid_documents_only_raise_preset_error(data):
    _check(data)


@settings(max_examples=examples(400), deadline=None)
@given(GOODISH_RAMP, st.dictionaries(KNOWN_KEY, st.one_of(st.floats(-1, 2), st.integers(-1, 10**5)), max_size=4))
def test_fuzz_ramps_and_stop_rules(ramp, stop):
    _check({"ramp": ramp, "stop": stop})
