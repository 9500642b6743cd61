"""Trace replay input (issue 16): Mooncake JSONL traces read and checked (engine/workload/trace.py),
their rows made into prompts whose shared hash blocks are shared text, the shipped example
trace, and the prompts' token counts and prefix-cache hits against the simulated server."""

from __future__ import annotations

import fnmatch
import importlib.util
import json
import math
import sys
from importlib.resources import files
from pathlib import Path

import httpx
import pytest

from redline.engine.workload import trace as trace_mod
from redline.engine.workload.prompts import Calibration, calibrate
from redline.engine.workload.trace import (
    MAX_TRACE_ROWS,
    MOONCAKE_BLOCK_TOKENS,
    TraceError,
    TracePrompts,
    TraceRow,
    builtin_trace_path,
    load_trace,
    trace_duration_s,
)

from helpers import ROOT, common_prefix_len

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

CAL = Calibration(overhead=10, per_word=1.3, measured=True)
QUICK = ("--set", "decode_base_s=0.002", "--set", "decode_per_seq_s=0", "--set", "prefill_per_token_s=0")


def _row(ts=0, inp=100, out=10, ids=None, **extra) -> str:
    d = {"timestamp": ts, "input_length": inp, "output_length": out, **extra}
    if ids is not None:
        d["hash_ids"] = ids
    return json.dumps(d)


def _write(tmp_path: Path, text: str | bytes, name: str = "t.jsonl") -> Path:
    p = tmp_path / name
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text, encoding="utf-8")
    return p


# -- reading ----------------------------------------------------------------------------------


def test_good_trace_parses_ms_to_seconds_from_the_first_row(tmp_path):
    p = _write(tmp_path, "\n".join([
        '{"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 48]}',
        "",
        "   ",
        _row(27482, 10, 1),  # same time: allowed; no hash_ids: a prompt of its own
        _row(28000.5, 20, 2, [], session="x"),  # float ms, empty ids, other keys ignored
        _row(30482, 30, 3, None) .replace("}", ', "hash_ids": null}'),
    ]) + "\n")
    rows = load_trace(p)
    assert rows == [
        TraceRow(0.0, 6955, 52, (46, 47, 48)),
        TraceRow(0.0, 10, 1, ()),
        TraceRow(pytest.approx(0.5185), 20, 2, ()),
        TraceRow(3.0, 30, 3, ()),
    ]
    assert trace_duration_s(rows) == 3.0 and trace_duration_s([]) == 0.0
    assert isinstance(rows[0].hash_ids, tuple)
    with pytest.raises(AttributeError):
        rows[0].t_s = 1.0  # frozen
    assert MAX_TRACE_ROWS == 1_000_000 and MOONCAKE_BLOCK_TOKENS == 512


def test_bom_crlf_and_a_str_path(tmp_path):
    p = _write(tmp_path, b"\xef\xbb\xbf" + (_row(5, ids=[1]) + "\r\n" + _row(1005) + "\r\n").encode())
    rows = load_trace(str(p))
    assert [r.t_s for r in rows] == [0.0, 1.0] and rows[0].hash_ids == (1,)


def _one_line_error(path: Path, **kw) -> str:
    with pytest.raises(TraceError) as e:
        load_trace(path, **kw)
    msg = str(e.value)
    assert "\n" not in msg and "\r" not in msg, msg
    assert isinstance(e.value, ValueError)
    assert msg.startswith(f"trace {str(path)!r}"), msg
    return msg


GOOD = _row(0, 100, 10, [1, 2])


@pytest.mark.parametrize("line, needles", [
    ('{"timestamp": 1,', ["line 2:", "not JSON", "'{\"timestamp\": 1,'"]),
    ("[1, 2]", ["line 2:", "[1, 2] is not an object"]),
    ('"a string"', ["line 2:", '"a string" is not an object']),
    ('{"timestamp": 1, "output_length": 5}', ["line 2:", "no input_length", "whole number >= 1"]),
    ('{"timestamp": 1, "input_length": 5}', ["line 2:", "no output_length"]),
    (_row(1, -5), ["line 2: input_length -5: expected a whole number >= 1"]),
    (_row(1, 0), ["line 2: input_length 0: expected a whole number >= 1"]),
    (_row(1, 1.5), ["input_length 1.5: expected a whole number >= 1"]),
    (_row(1, 100.0), ["input_length 100.0: expected a whole number >= 1"]),
    (_row(1, "12"), ['input_length "12": expected a whole number >= 1']),
    (_row(1, True), ["input_length true: expected a whole number >= 1"]),
    (_row(1, None), ["input_length null: expected a whole number >= 1"]),
    (_row(1, 10**12), ["input_length 1000000000000: expected a whole number from 1 to 10000000"]),
    (_row(1, 5, 0), ["line 2: output_length 0: expected a whole number >= 1"]),
    (_row(1, 5, False), ["output_length false"]),
    ('{"input_length": 5, "output_length": 5}', ["line 2: no timestamp"]),
    (_row("abc"), ['line 2: timestamp "abc": expected milliseconds', "number >= 0"]),
    (_row(-1), ["line 2: timestamp -1: expected"]),
    (_row(True), ["line 2: timestamp true: expected"]),
    ('{"timestamp": NaN, "input_length": 5, "output_length": 5}', ["timestamp NaN: expected"]),
    ('{"timestamp": Infinity, "input_length": 5, "output_length": 5}', ["timestamp Infinity: expected"]),
    ('{"timestamp": 1' + "0" * 400 + ', "input_length": 5, "output_length": 5}', ["line 2: timestamp 1000", "..."]),
    (_row(1, ids="abc"), ['line 2: hash_ids "abc": expected a list of whole numbers']),
    (_row(1, ids=[1, "x"]), ['hash_ids [1, "x"]: expected a list']),
    (_row(1, ids=[1, True]), ["hash_ids [1, true]: expected a list"]),
    (_row(1, ids=[1.0]), ["hash_ids [1.0]: expected a list"]),
    (_row(1, ids={"a": 1}), ['hash_ids {"a": 1}: expected a list']),
])
def test_bad_row_gives_one_line_naming_file_line_and_value(tmp_path, line, needles):
    p = _write(tmp_path, GOOD + "\n" + line + "\n" + GOOD + "\n")
    msg = _one_line_error(p)
    for n in needles:
        assert n in msg, (n, msg)


def test_long_values_are_cut(tmp_path):
    p = _write(tmp_path, GOOD + "\n" + _row(1, "x" * 5000) + "\n")
    msg = _one_line_error(p)
    assert "line 2: input_length \"xxxx" in msg and "..." in msg and len(msg) < 300, msg
    p = _write(tmp_path, GOOD + "\n" + "{" + "y" * 5000 + "\n")
    msg = _one_line_error(p)
    assert "line 2: not JSON" in msg and len(msg) < 400, msg
    p = _write(tmp_path, GOOD + "\n" + _row(1, ids=[*range(1000), "x"]) + "\n")
    assert len(_one_line_error(p)) < 300
    p = _write(tmp_path, GOOD + "\n" + '"a\\u2028b\\nc"' + "\n")  # line separators inside a value
    assert "line 2:" in _one_line_error(p)


def test_timestamps_going_backwards(tmp_path):
    p = _write(tmp_path, "\n".join([_row(100), _row(200), _row(200), _row(100)]) + "\n")
    msg = _one_line_error(p)
    assert "line 4: timestamp 100 after 200: rows must be in time order" in msg, msg


def test_more_rows_than_allowed(tmp_path):
    p = _write(tmp_path, "\n".join([_row(i) for i in range(3)] + ["", ""]))
    assert len(load_trace(p, max_rows=3)) == 3
    msg = _one_line_error(p, max_rows=2)
    assert "line 3: more than 2 rows" in msg, msg


@pytest.mark.parametrize("content, needle", [
    (b"", ": empty;"),
    (b"\n \n\t\n", ": no rows"),
    (b"\xef\xbb\xbf", ": no rows"),
    ((GOOD + "\n").encode() + b'{"timestamp": 1, "x": "\xff\xfe"}\n', "line 2: not UTF-8"),
])
def test_bad_files(tmp_path, content, needle):
    p = _write(tmp_path, content)
    msg = _one_line_error(p)
    assert needle in msg and "Mooncake JSONL" in msg, msg


def test_missing_file_and_directory(tmp_path):
    msg = _one_line_error(tmp_path / "nope.jsonl")
    assert "not found" in msg and "Mooncake" in msg
    msg = _one_line_error(tmp_path)
    assert "is a directory" in msg


# -- prompts ----------------------------------------------------------------------------------


def test_rows_sharing_leading_hash_ids_share_leading_text():
    tp = TracePrompts(CAL, seed=3)
    b1, b2 = tp.block(1), tp.block(2)
    assert len(b1.split()) == round(512 / 1.3) == tp.block_words
    assert b1[:9] != b2[:9] and b1.split()[0].isdigit() and len(b1.split()[0]) == 9
    a = tp.prompt(TraceRow(0.0, 1500, 8, (1, 2, 3)))
    b = tp.prompt(TraceRow(1.0, 1400, 9, (1, 2, 4)))
    c = tp.prompt(TraceRow(2.0, 1500, 9, (7, 2, 3)))
    shared = b1 + " " + b2 + " "
    assert a.text.startswith(shared) and b.text.startswith(shared)
    assert common_prefix_len(a.text, b.text) < len(shared) + 9  # block 3 and block 4 part at their heads
    assert common_prefix_len(a.text, c.text) < 9  # a different first block: different from the start
    assert (a.max_tokens, b.max_tokens) == (8, 9)
    # the same ids with another length: the shorter one's cut last block is the longer one's start
    short = tp.prompt(TraceRow(3.0, 1100, 1, (1, 2, 3)))
    words_short = short.text.split()
    n_blocks_words = CAL.words_for(1100) - 1
    assert words_short[:n_blocks_words] == a.text.split()[:n_blocks_words]
    assert short.text.startswith(shared)


def test_word_counts_follow_the_calibration():
    tp = TracePrompts(CAL, seed=1)
    cases = [
        (1, ()), (11, ()), (12, (5,)), (100, (5, 6, 7)), (513, (5,)), (513, (5, 6)), (1024, (5, 6)),
        (1500, (5, 6, 7)), (1500, (5, 6, 7, 8, 9, 10)), (3000, (5,)), (6955, tuple(range(46, 60))),
    ]
    for n, ids in cases:
        p = tp.prompt(TraceRow(0.0, n, 4, ids))
        assert len(p.text.split()) == CAL.words_for(n), (n, ids)
        assert p.text == p.text.strip() and "  " not in p.text
        assert p.expected_input_tokens == n and p.max_tokens == 4
    # no more blocks than the length covers: ceil(n / 512); the rest of the ids are unused
    p = tp.prompt(TraceRow(0.0, 600, 1, (5, 6, 7, 8)))
    assert tp.block(5) + " " in p.text and tp.block(6)[:10] in p.text and tp.block(7)[:10] not in p.text
    unmeasured = TracePrompts(Calibration(overhead=0.0, per_word=1.0, measured=False))
    p = unmeasured.prompt(TraceRow(0.0, 700, 3, (1, 2)))
    assert p.expected_input_tokens == 0 and len(p.text.split()) == 700


def test_rows_without_ids_differ_and_every_prompt_is_its_own():
    tp = TracePrompts(CAL)
    texts = [tp.prompt(TraceRow(0.0, 300, 1)).text for _ in range(20)]
    assert len(set(texts)) == 20 and len({t[:9] for t in texts}) == 20
    same = [tp.prompt(TraceRow(0.0, 1500, 1, (1, 2, 3))).text for _ in range(5)]
    assert len(set(same)) == 5  # the same ids: the same blocks, then a suffix id of its own


def test_deterministic_for_a_seed_and_bounded_memo(monkeypatch):
    rows = load_trace(builtin_trace_path())[:30]
    a = TracePrompts(CAL, seed=7).prompts(rows)
    b = TracePrompts(CAL, seed=7).prompts(rows)
    assert a == b
    other = TracePrompts(CAL, seed=8).prompts(rows)
    assert all(x.text[:9] != y.text[:9] for x, y in zip(a, other, strict=False))
    monkeypatch.setattr(trace_mod, "_BLOCK_MEMO_CHARS", 3000)  # room for one block at most
    small = TracePrompts(CAL, seed=7)
    assert small.prompts(rows) == a
    assert small._memo_chars <= 3000 and len(small._memo) <= 1


def test_other_block_sizes():
    tp = TracePrompts(Calibration(0.0, 1.0, True), block_tokens=16)
    p = tp.prompt(TraceRow(0.0, 40, 1, (1, 2, 3, 4)))  # ceil(40/16) = 3 blocks, the last cut
    words = p.text.split()
    assert len(words) == 40 and words[:16] == tp.block(1).split() and words[16:32] == tp.block(2).split()
    assert words[32:39] == tp.block(3).split()[:7] and tp.block(4).split()[0] not in words
    with pytest.raises(ValueError):
        TracePrompts(CAL, block_tokens=0)


# -- the shipped example ----------------------------------------------------------------------


def test_builtin_trace_has_the_promised_shape():
    path = builtin_trace_path()
    # the package's own presets folder: the checkout's presets/ (editable install) or
    # site-packages/redline/presets (a plain install)
    presets = Path(str(files("redline.presets")))
    assert presets == ROOT / "presets" or (presets.name, presets.parent.name) == ("presets", "redline"), presets
    assert path.is_file() and path.name == "example.jsonl" and path.parent.parent == presets
    rows = load_trace(path)
    assert 100 <= len(rows) <= 140
    assert rows[0].t_s == 0.0 and 50 <= trace_duration_s(rows) <= 70
    assert all(a.t_s <= b.t_s for a, b in zip(rows, rows[1:], strict=False))
    assert all(100 <= r.input_length <= 1500 and 16 <= r.output_length <= 256 for r in rows)
    assert all(len(r.hash_ids) == math.ceil(r.input_length / 512) for r in rows)
    firsts: dict[int, int] = {}
    for r in rows:
        firsts[r.hash_ids[0]] = firsts.get(r.hash_ids[0], 0) + 1
    groups = [n for n in firsts.values() if n >= 3]
    assert 4 <= len(groups) <= 6 and sum(groups) >= len(rows) // 2, firsts
    # shipped as package data: pyproject's globs for redline.presets name it
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    rel = path.relative_to(presets).as_posix()
    assert any(fnmatch.fnmatch(rel, g) for g in data["redline.presets"]), data


def test_generator_writes_the_shipped_trace(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("make_trace", ROOT / "benchmarks" / "make_trace.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "x.jsonl"
    assert mod.main(["--out", str(out)]) == 0
    assert str(out) in capsys.readouterr().out
    assert out.read_bytes() == builtin_trace_path().read_bytes()


# -- against the sim --------------------------------------------------------------------------


async def _chat(client: httpx.AsyncClient, url: str, text: str) -> int:
    r = await client.post(url + "/v1/chat/completions", json={
        "model": "m", "messages": [{"role": "user", "content": text}], "max_tokens": 1})
    r.raise_for_status()
    return r.json()["usage"]["prompt_tokens"]


def _cached_tokens(url: str) -> float:
    from redline.engine.telemetry.prom_text import parse_prometheus

    samples = parse_prometheus(httpx.get(url + "/metrics", timeout=5).text)
    return sum(v for _, v in samples.get("sglang:cached_tokens_total", []))


async def test_trace_prompts_against_the_sim(sim_factory):
    """Calibrated against the sim, the prompts are their input_length in its tokens (5 %), and
    the second of two rows sharing two leading blocks finds them in the sim's prefix cache."""
    sim = sim_factory("healthy", extra_args=QUICK)
    async with httpx.AsyncClient(timeout=10) as client:
        cal = await calibrate(lambda text: _chat(client, sim.url, text), seed=0)
        assert cal.measured
        tp = TracePrompts(cal, seed=2)
        first = tp.prompt(TraceRow(0.0, 1400, 4, (10, 11, 12)))
        second = tp.prompt(TraceRow(0.5, 1300, 4, (10, 11, 13)))
        before = _cached_tokens(sim.url)
        n1 = await _chat(client, sim.url, first.text)
        n2 = await _chat(client, sim.url, second.text)
        hits = _cached_tokens(sim.url) - before
    assert abs(n1 - 1400) <= 0.05 * 1400 and abs(n2 - 1300) <= 0.05 * 1300, (n1, n2, cal)
    assert first.expected_input_tokens == 1400
    # the sim caches whole blocks of 16 tokens of 4 characters; the rows share 2 x 512 tokens
    shared = common_prefix_len(first.text, second.text)
    assert shared >= len(tp.block(10)) + len(tp.block(11)) + 2
    assert 16 * (shared // 64) <= hits <= 16 * (shared // 64) + 16, (hits, shared)
    assert abs(hits - 2 * 512) <= 0.05 * 1024, hits
