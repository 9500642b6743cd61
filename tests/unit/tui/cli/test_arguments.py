"""docs/cli.md's flag tables and the flags' declarations (tui/cli/arguments.py) agree (issue 45,
h11): every option a table names is one `redline`, `redline run` or `redline sweep` takes, and a
default the table gives is the parser's where the parser holds one."""

from __future__ import annotations

import argparse
import re

from redline.engine.preset.fields import num
from redline.tui.cli.arguments import build_parser

from helpers import ROOT

DOCS = ROOT / "docs" / "cli.md"


def _parsers() -> list[argparse.ArgumentParser]:
    top = build_parser()
    subs = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction)).choices
    for name in ("run", "sweep"):
        subs[name].format_help()  # a command's options are added when it is first used
    return [top, subs["run"], subs["sweep"]]


def _action(flag: str) -> argparse.Action | None:
    for p in _parsers():
        if flag in p._option_string_actions:
            return p._option_string_actions[flag]
    return None


def _table(heading: str) -> list[list[str]]:
    """The rows of the first table after `heading` in docs/cli.md, as cells."""
    text = DOCS.read_text(encoding="utf-8")
    rest = text[text.index(heading):]
    rows = []
    started = False
    for line in rest.splitlines():
        if line.startswith("|"):
            started = True
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            if not set("".join(cells)) <= set("-: "):
                rows.append(cells)
        elif started:
            break
    return rows[1:]  # past the header


def _flags(cell: str) -> list[str]:
    """The options a cell names, in order: `--input-len N` / `--output-len N` -> both."""
    return re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", " ".join(re.findall(r"`([^`]*)`", cell)))


def docs_differences(rows: list[list[str]]) -> list[str]:
    out = []
    for cells in rows:
        names = [f for f in _flags(cells[0]) if f.startswith("--") or f in ("-H", "-n")]
        if not names:
            out.append(f"no option in {cells[0]!r}")
        defaults = [d.strip() for d in cells[1].split(" / ")]
        # one default for each option before each " / " (`-H/--header` and `--num-requests N` / `-n N` are one each)
        options = [_flags(part)[-1] if _flags(part) else "" for part in cells[0].split(" / ")]
        for flag in names:
            if _action(flag) is None:
                out.append(f"{flag}: no such option (docs/cli.md: {cells[0]})")
        if len(defaults) != len(options):
            continue
        for flag, said in zip(options, defaults, strict=False):
            action = _action(flag)
            if action is None or action.default is None:
                continue
            d = action.default
            want = "off" if d is False else num(d) if isinstance(d, (int, float)) and not isinstance(d, bool) else str(d)
            if said.strip("`") != want:
                out.append(f"{flag}: docs/cli.md says the default is {said}, the parser {want}")
    return out


def test_the_main_options_table_names_real_options_with_their_defaults():
    rows = _table("Main options")
    assert len(rows) > 25
    diff = docs_differences(rows)
    assert not diff, "\n".join(diff)


def test_the_check_sees_a_renamed_option_and_a_changed_default():
    rows = [["`--concurency N`", "8", "x"], ["`--step N`", "16", "x"], ["`--input-len N` / `--output-len N`", "32 / 128", "x"]]
    diff = docs_differences(rows)
    assert any("--concurency: no such option" in d for d in diff)
    assert any("--step: docs/cli.md says the default is 16, the parser 8" in d for d in diff)
    assert len(diff) == 2, diff


def test_the_bench_serving_names_it_says_are_accepted_are():
    rows = _table("Coming from bench_serving")
    assert len(rows) >= 10
    for theirs, ours in rows:
        # our column's options exist; theirs too where it says redline takes them as written
        same = re.search(r"both accepted|all accepted|^the same", ours)
        for flag in [f for f in _flags(ours) if f.startswith("--")] + (_flags(theirs) if same else []):
            assert _action(flag) is not None, (flag, theirs, ours)
