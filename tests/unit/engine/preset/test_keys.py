"""Each preset key declared once (issue 45, h11): the declarations (engine/preset/spec.py
`setting`, tables.py, ramp_forms.py) are what the parser accepts, what the writer writes, what
docs/presets.md's key tables say, and name CLI flags that exist and take the key's bounds."""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from redline.engine.constants import MAX_SECONDS
from redline.engine.measure.slo import Slo
from redline.engine.preset import PresetError, parse_preset, parse_toml, preset_to_toml
from redline.engine.preset.fields import Ctx
from redline.engine.preset.keys import Int, Key, Number, Seconds, markdown_rows
from redline.engine.preset.tables import GUARD, SLO, STOP, TABLES, TOP, every_key
from redline.engine.rules.guard import GuardSpec
from redline.engine.rules.verdicts import StopSpec
from redline.tui.cli.arguments import build_parser

from helpers import ROOT

DOCS = ROOT / "docs" / "presets.md"
COLUMNS = {"key": "key", "type": "type", "default": "default", "meaning": "meaning", "fires when": "meaning"}


def _section_keys(heading: str) -> list[Key] | None:
    """The declared keys a docs section's key table lists (None: not a section of keys)."""
    if heading.startswith("Top level"):
        return list(TOP)
    m = re.match(r'`\[(\w+)\]( mode = "search")?`', heading)
    if m is None or m.group(1) not in TABLES:
        return None
    row = "search" if m.group(2) else None
    return [k for k in TABLES[m.group(1)].keys if k.row == row]


def docs_differences(text: str) -> list[str]:
    """Where docs/presets.md's key tables and the declarations differ, one line each."""
    out: list[str] = []
    seen: set[str] = set()
    for section in re.split(r"^### ", text, flags=re.M)[1:]:
        heading = section.splitlines()[0]
        keys = _section_keys(heading)
        if keys is None:
            continue
        lines = section.splitlines()
        header = next((ln for ln in lines if ln.startswith("| key |")), None)
        if header is None:
            out.append(f"{heading}: no table of keys")
            continue
        cols = [COLUMNS[c.strip()] for c in header.strip("|").split("|")]
        start = lines.index(header) + 2
        rows = []
        for ln in lines[start:]:
            if not ln.startswith("|"):
                break
            rows.append(ln)
        want = markdown_rows(keys, cols)
        for r in sorted(set(rows) - set(want)):
            out.append(f"{heading}: the docs say {r}")
        for r in sorted(set(want) - set(rows)):
            out.append(f"{heading}: the declarations say {r}")
        seen |= {f"{k.table}.{k.name}" for k in keys}
    for k in every_key():
        if k.row == "":  # a [ramp] form key, described beside its form
            if f"`{k.name}" not in text:
                out.append(f"[{k.table}].{k.name}: not described in the docs")
        elif f"{k.table}.{k.name}" not in seen:
            out.append(f"[{k.table}].{k.name}: in no docs table")
    return out


def test_the_docs_key_tables_are_the_declarations():
    diff = docs_differences(DOCS.read_text(encoding="utf-8"))
    assert not diff, "docs/presets.md and the declarations differ:\n" + "\n".join(diff)


def test_the_docs_check_sees_a_changed_row_and_a_missing_one():
    text = DOCS.read_text(encoding="utf-8")
    row = markdown_rows([k for k in TABLES["workload"].keys if k.name == "seed"], ["key", "type", "default", "meaning"])[0]
    assert row in text
    changed = docs_differences(text.replace(row, row.replace("integer >= 0", "integer >= 1")))
    assert any("the docs say" in d and "`seed`" in d for d in changed)
    assert any("the declarations say" in d and "`seed`" in d for d in changed)
    assert any("`probe_s`" in d for d in docs_differences(re.sub(r"^\| `probe_s` .*\n", "", text, flags=re.M)))


def test_each_key_is_declared_once_and_is_what_the_parser_accepts():
    names = [(k.table, k.name) for k in every_key()]
    assert len(names) == len(set(names)), [n for n in names if names.count(n) > 1]
    for table, t in TABLES.items():
        for k in t.keys:
            assert k.table == table and k.name, k
    # an unknown key's refusal lists exactly the declared ones, in their order
    for table, t in TABLES.items():
        doc = {"ramp": {"concurrency": [1]}, table: {"zzzzqqq": 1}} if table != "ramp" else {"ramp": {"zzzzqqq": 1}}
        with pytest.raises(PresetError) as e:
            parse_preset(doc, "x.toml")
        assert str(e.value) == f"x.toml: unknown key [{table}].zzzzqqq (accepted: {', '.join(k.name for k in t.keys)})"


def test_the_judging_tables_declare_the_fields_of_their_specs():
    assert [k.name for k in STOP] == [f.name for f in dataclasses.fields(StopSpec)]
    assert [k.name for k in GUARD] == [f.name for f in dataclasses.fields(GuardSpec)]
    assert {k.name for k in SLO} <= {f.name for f in dataclasses.fields(Slo)}
    assert [k.default for k in SLO if k.name == "attainment"] == [Slo().attainment]


def test_every_declared_key_round_trips_through_the_writer():
    """A preset setting every plain key off its default reads back equal after preset_to_toml."""
    data = {"name": "all", "description": "every key",
            "target": {"url": "http://127.0.0.1:1"},
            "workload": {"api": "completions", "input_len": 5, "output_len": 6, "model": "m", "turns": 2, "think_s": 0.5,
                         "headers": {"X-A": "b"}, "extra_body": {"temperature": 0.5}, "ignore_eos": False, "seed": 9},
            "ramp": {"concurrency": [1, 2], "warmup_s": 1, "hold_s": 2, "min_requests": 3, "max_hold_s": 4, "repeats": 2,
                     "profile": [2], "flush_cache": True},
            "stop": {k.name: 0.5 for k in STOP}, "after": {"probe_s": 1.5},
            "slo": {k.name: 0.5 for k in SLO}, "guard": {k.name: 0.5 for k in GUARD}, "gate": {"conditions": ["knee>=1"]}}
    p = parse_preset(data, "all.toml")
    text = preset_to_toml(p)
    assert dataclasses.replace(parse_toml(text, "all.toml"), path=p.path) == p
    written = tomllib.loads(text)
    for table, body in data.items():
        if isinstance(body, dict):
            assert set(body) <= set(written[table]), (table, set(body) - set(written[table]))
    for k in every_key():
        if k.comment and k.name in written.get(k.table, {}):
            assert f"# {k.comment}\n" in text, k.label


# -- the flags the declarations name ---------------------------------------------------------------
def _option(flag: str) -> tuple[argparse.ArgumentParser, argparse.Action]:
    """The parser (redline, else redline run) that has `flag`, and its action."""
    top = build_parser()
    run = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction)).choices["run"]
    run.format_help()  # its options are added when first used
    for p in (top, run):
        if flag in p._option_string_actions:
            return p, p._option_string_actions[flag]
    raise AssertionError(f"{flag}: no such option on redline or redline run")


# keys whose flag bounds the same setting differently (kept as they are: issue 45 changes no behaviour)
FLAG_BOUNDS_DIFFER = {
    "turns": "--turns takes any whole number >= 1, [workload].turns at most 1000",
    "think_s": "--think-s takes 0..3600 s, [workload].think_s up to a week",
    "input_len": "--input-len has no upper bound, [workload].input_len at most 10000000",
    "output_len": "--output-len has no upper bound, [workload].output_len at most 10000000",
    "repeats": "--repeats is bounded by the sweep (1-100, engine/sweep/spec.py) after parsing, [ramp].repeats by the parser",
}


def _edges(k: Key) -> list[tuple[object, bool]]:
    """Values at and just past the kind's bounds, with whether the kind accepts each."""
    kind = k.kind
    if isinstance(kind, Int):
        out = [(kind.lo, True), (kind.lo - 1, False)]
        if kind.hi is not None:
            out += [(kind.hi, True), (kind.hi + 1, False)]
        return out
    if isinstance(kind, Seconds):
        return [(0, kind.zero_ok), (MAX_SECONDS, True), (MAX_SECONDS + 1, False), (-1, False)]
    if isinstance(kind, Number):
        return [(kind.lo, not kind.lo_open), (kind.hi, not kind.hi_open), (kind.lo - 0.5, False)]
    if k.name == "random_range_ratio":
        return [(0, True), (0.99, True), (1, False), (-0.01, False)]
    return []


@pytest.mark.parametrize("key", [k for k in every_key() if k.flag], ids=lambda k: k.label)
def test_a_declared_flag_exists_and_takes_the_keys_bounds(key):
    _, action = _option(key.flag)
    if key.name in FLAG_BOUNDS_DIFFER or action.type is None:
        return
    for value, ok in _edges(key):
        try:
            key.read(Ctx("x.toml"), value)
            by_key = True
        except PresetError:
            by_key = False
        try:
            action.type(str(value))
            by_flag = True
        except (argparse.ArgumentTypeError, ValueError):
            by_flag = False
        assert by_key == by_flag == ok, (key.label, key.flag, value, by_key, by_flag)


def test_the_flags_that_differ_are_still_different():
    """When a flag comes to take its key's bounds, it leaves FLAG_BOUNDS_DIFFER."""
    for name, why in FLAG_BOUNDS_DIFFER.items():
        key = next(k for k in every_key() if k.name == name and k.flag)
        _, action = _option(key.flag)
        agree = True
        for value, ok in _edges(key):
            try:
                action.type(str(value))
                by_flag = True
            except (argparse.ArgumentTypeError, ValueError):
                by_flag = False
            agree &= by_flag == ok
        if name != "repeats":
            assert not agree, f"{key.flag} now takes [{key.table}].{name}'s bounds: drop it from FLAG_BOUNDS_DIFFER ({why})"
