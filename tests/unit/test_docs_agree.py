"""Issue 46, case 11: the docs agree with the program. docs/presets.md's run times are what
`redline presets` prints (one estimate, engine/run/estimate.py); the README's test command
runs every part and fails if any part failed (no `&&` chain that skips the rest), and
docs/install.md gives the same one; README, docs/install.md and .ci/run state one suite time;
the README's sweep example is docs/sweep.md's, with the same result."""

from __future__ import annotations

import os
import re
import stat
import subprocess

import pytest

from helpers import ROOT

README = (ROOT / "README.md").read_text()
INSTALL = (ROOT / "docs" / "install.md").read_text()


def test_the_shipped_presets_run_times_are_what_redline_presets_prints():
    from redline.engine.api import builtin_presets, duration_text, load_preset

    doc = (ROOT / "docs" / "presets.md").read_text()
    for b in builtin_presets():
        want = duration_text(load_preset(b.path), "healthy")
        row = next((line for line in doc.splitlines() if line.startswith(f"| `{b.name}` |")), None)
        assert row is not None, f"docs/presets.md has no row for {b.name}"
        got = row.rstrip(" |").rsplit(" | ", 1)[1]
        assert got == want, f"docs/presets.md's {b.name}: {got!r}; `redline presets` prints {want!r}: write that"


def _test_command(text: str) -> str:
    """The shell lines after 'Install and run the tests' up to the first blank line, the venv
    line left out."""
    block = text.split("Install and run the tests", 1)[1].split("\n\n", 1)[1].split("\n\n", 1)[0]
    lines = [line[4:] for line in block.splitlines()]
    assert lines[0].startswith("python3 -m venv"), lines
    return "\n".join(lines[1:])


def test_install_md_gives_the_readmes_test_command():
    assert _test_command(INSTALL) == _test_command(README)


@pytest.mark.parametrize("failing, status", [((), 0), (("docs",), 1), (("mypy",), 1),
                                             (("not server and not timing",), 1), (("server and not timing",), 1),
                                             (("timing",), 0), (("timing", "last-failed"), 1)])
def test_the_readmes_test_command_runs_every_part_and_fails_if_one_failed(tmp_path, failing, status):
    """`python` stands in for ruff, mypy and pytest: it logs each part it was asked for (its
    last argument: ruff's is "docs") and fails the ones named. Every part runs whatever failed
    before it; a timing test that failed beside another
    and passes alone is a pass, as in .ci/run."""
    fake = tmp_path / "bin" / "python"
    fake.parent.mkdir()
    log = tmp_path / "parts.log"
    fake.write_text('#!/bin/sh\n'
                    'for a in "$@"; do last="$a"; done\n'
                    'case "$*" in *--last-failed*) part=last-failed;; *) part="$last";; esac\n'
                    f'echo "$part" >> {log}\n'
                    'p=$(echo "$part" | tr " " _)\n'
                    'for f in $FAILING; do [ "$f" = "$p" ] && exit 1; done\n'
                    'exit 0\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}",
           "FAILING": " ".join(f.replace(" ", "_") for f in failing)}
    r = subprocess.run(["bash", "-c", _test_command(README)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=30)
    ran = log.read_text().splitlines()
    assert ran[:5] == ["docs", "mypy", "not server and not timing", "server and not timing", "timing"], (ran, r.stderr)
    assert ("last-failed" in ran) == ("timing" in failing)
    assert r.returncode == status, (ran, r.stderr)


def test_readme_install_and_ci_state_one_suite_time():
    ci = (ROOT / ".ci" / "run").read_text()
    said = re.findall(r"about (\d+) minutes on 2 cores", README + INSTALL + ci.replace("\n# ", " "))
    assert len(said) >= 3 and len(set(said)) == 1, said
    assert "four minutes" not in ci


def test_the_readmes_sweep_example_is_docs_sweeps_with_the_same_result():
    sweep = (ROOT / "docs" / "sweep.md").read_text()
    cmd = next(line.strip() for line in README.splitlines() if line.strip().startswith("redline sweep --serve 'redline sim"))
    assert cmd in sweep
    result = "mb8 knee C=128 (plateau at C=256) and mb64 no knee (still rising at C=256, +56 %)"
    assert " ".join(result.split()) in " ".join(README.split()) and " ".join(result.split()) in " ".join(sweep.split())
