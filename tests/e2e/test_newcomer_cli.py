"""Issue 27, a newcomer's first afternoon on the command line: every bad input is one line
naming the value and what is accepted, exit 2, before anything starts; no traceback."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys

import pytest

from helpers import FAST_SIM, ROOT


def main_in_process(argv: list[str]) -> int:
    from redline.tui import cli

    try:
        return cli.main(argv)
    except SystemExit as exc:  # argparse's errors
        return int(exc.code or 0)


def one_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# -- 1. --ray without Ray installed --------------------------------------------------------
@pytest.mark.parametrize("argv", [
    ["run", "quick", "--headless", "--ray", "auto", "--workers", "2"],
    ["run", "quick", "--ray", "auto", "--workers", "2"],  # the TUI
    ["--ray", "10.0.0.1:6379", "--workers", "2"],
])
def test_ray_not_installed_is_one_line_before_the_sim(monkeypatch, nothing_starts, capsys, tmp_path, argv):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails as where it is not installed
    rc = main_in_process([*argv, "--out", str(tmp_path / "s")])
    err = capsys.readouterr().err
    assert rc == 2, err
    line = one_line(err)
    assert "--ray" in line and "pip install 'redline[ray]'" in line
    assert nothing_starts == [] and not (tmp_path / "s").exists()


def test_ray_not_installed_through_the_cli(tmp_path):
    """The real process: one line, exit 2, no session directory."""
    code = ("import sys; sys.modules['ray'] = None\n"
            "from redline.tui.cli import main\n"
            f"sys.exit(main(['run', 'quick', '--headless', '--ray', 'auto', '--workers', '2', '--out', {str(tmp_path / 's')!r}]))")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={**os.environ, "CI": "true"},
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stdout == ""
    assert "pip install 'redline[ray]'" in one_line(r.stderr)
    assert not (tmp_path / "s").exists()


def test_ray_pool_stops_cleanly_when_launch_never_made_actors(monkeypatch):
    """A RayPool whose launch failed (Ray missing, cluster refused) stops without an
    IndexError: it has states for its workers but no actors."""
    monkeypatch.setitem(sys.modules, "ray", None)
    from redline.engine.load.ray_pool import RayPool, RayUnavailable

    class FakeEngine:
        def warn(self, *a, **k):
            pass

    async def go() -> int:
        pool = RayPool(FakeEngine(), 2, 8, 1024, "auto")  # type: ignore[arg-type]
        with pytest.raises(RayUnavailable, match=r"pip install 'redline\[ray\]'"):
            await pool.launch(None)  # type: ignore[arg-type]
        return await pool.stop()  # what Engine.stop("start failed") calls

    assert asyncio.run(go()) == 0


@pytest.mark.server
def test_a_failed_start_still_closes_the_session(tmp_path):
    """When start-up fails past the command line (Ray gone at join time), the run ends with
    one line and meta.json says when and why it ended."""
    out = tmp_path / "s"
    code = ("import sys; sys.modules['ray'] = None\n"
            "import redline.tui.cli.launch as L; L.ray_installed = lambda: True\n"
            "from redline.tui.cli import main\n"
            f"sys.exit(main(['run', 'quick', '--headless', '--ray', 'auto', '--workers', '2', '--out', {str(out)!r}]))")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={**os.environ, "CI": "true"},
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=90)
    assert r.returncode == 3, r.stderr
    assert "pip install 'redline[ray]'" in one_line(r.stderr)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["ended_at"] is not None and meta["end_reason"] == "start failed"


# -- 2. an unknown option is named, with the closest real one; no abbreviations -------------
@pytest.mark.parametrize("argv, needles", [
    (["--concurency", "32"], ("'--concurency'", "--concurrency")),
    (["--concurency=32"], ("'--concurency'", "--concurrency")),
    (["run", "quick", "--headles"], ("'--headles'", "--headless", "redline run")),
    (["--search"], ("'--search'", "redline run")),  # a command's option without the command
    (["run", "quick", "--concurrency", "4"], ("'--concurrency'", "not of redline run")),
    (["--conc", "4"], ("'--conc'", "--concurrency")),  # abbreviations are refused, not guessed
    (["--xyzzy"], ("'--xyzzy'",)),
])
def test_unknown_option_is_named_with_the_closest_one(nothing_starts, capsys, argv, needles):
    rc = main_in_process(argv)
    out = capsys.readouterr()
    assert rc == 2 and out.out == "" and nothing_starts == []
    line = one_line(out.err)
    assert "unknown option" in line and "invalid choice" not in line, line
    assert all(n in line for n in needles), line


def test_options_are_not_abbreviated():
    from redline.tui.cli.arguments import build_parser

    p = build_parser()
    assert p.allow_abbrev is False
    sub = next(a for a in p._actions if a.__class__.__name__ == "_SubParsersAction")
    assert all(sp.allow_abbrev is False for sp in sub.choices.values())


def test_readme_states_the_abbreviation_choice():
    readme = (ROOT / "README.md").read_text()
    assert "never abbreviated" in readme


# -- 13. the commands of README and docs/ work as written --------------------------------------
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def readme_commands() -> list[str]:
    """Every `redline ...` example line of the code blocks of README.md and docs/*.md (an
    indented block or a ``` fence), its comment dropped."""
    out = []
    for doc in DOCS:
        fenced = False
        for line in doc.read_text().splitlines():
            if line.strip().startswith("```"):
                fenced = not fenced
                continue
            s = re.split(r"\s+#(?:\s|$)", line.strip())[0]
            if not (line.startswith("    redline") or fenced):
                continue
            for part in re.split(r"\s*(?:&&|;|\|\|)\s*", s):  # `redline ctl probe && sleep 20 && redline ctl restore`
                if part == "redline" or part.startswith("redline "):
                    if part not in out:
                        out.append(part)
    return out


def test_readme_has_the_commands_this_test_checks():
    cmds = readme_commands()
    assert "redline --trace example --speed 2" in cmds
    assert any(c.startswith("redline --workers 4 --concurrency 2048") for c in cmds)
    assert "redline run until-it-breaks --headless --out runs/uib" in cmds
    assert any(c.startswith("redline ctl ") for c in cmds) and any(c.startswith("redline report ") for c in cmds)


@pytest.mark.parametrize("cmd", readme_commands())
def test_every_documented_command_parses_as_written(cmd):
    """README's and docs/' every `redline` command line is one the parser takes (its options
    exist, its values are of the accepted kind): none is out of date."""
    import shlex

    from redline.tui import cli

    argv = [a for a in shlex.split(cmd)[1:] if a != "..."]
    if any("|" in a and not a.startswith(("-", "'", '"')) and "=" not in a for a in argv) or any(a.isupper() for a in argv):
        pytest.skip("a usage line with placeholders")
    try:
        cli.build_parser().parse_args(argv)
    except SystemExit as exc:
        pytest.fail(f"{cmd}: the parser refused it (exit {exc.code})")


@pytest.mark.parametrize("cmd", [c for c in readme_commands()
                                 if c.split()[1:2] in ([], ["run"]) or c.split()[1].startswith("-")])
def test_readme_command_is_accepted_as_written(cmd, tmp_path, monkeypatch, nothing_starts):
    """Each README command that loads a target passes every check made before anything
    starts (run from a folder outside the checkout: bundled traces and presets by name)."""
    import shlex

    from redline.engine.preset import as_search, load_preset, resolve_preset
    from redline.tui import cli
    from redline.tui.cli.errors import UsageError
    from redline.tui.cli.launch import checked_config, ray_installed

    argv = shlex.split(cmd)[1:]
    if any(a.startswith(("./", "runs/")) and before != "--out" for before, a in zip(["", *argv], argv, strict=False)):
        pytest.skip("names a file or session of the reader's own")
    if "--ray" in argv and not ray_installed():  # the test extra holds no Ray on Python 3.14+
        pytest.skip("the ray extra is not installed (pip install 'redline[ray]')")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    args = cli.build_parser().parse_args(argv)
    args.argv = ["redline", *argv]
    if args.out is not None:
        args.out = tmp_path / args.out
    preset = None
    if args.command == "run":
        preset = load_preset(resolve_preset(args.preset))
        if args.search:
            preset = as_search(preset, args.max_concurrency)
    try:
        checked_config(args, preset)
    except UsageError as exc:
        pytest.fail(f"{cmd}: {exc}")
    assert nothing_starts == []


def test_bundled_trace_by_name(tmp_path, monkeypatch):
    from redline.engine.workload.trace import builtin_trace_path, resolve_trace

    monkeypatch.chdir(tmp_path)  # no presets/ folder here
    assert resolve_trace("example") == str(builtin_trace_path())
    assert resolve_trace("example.jsonl") == str(builtin_trace_path())
    (tmp_path / "example").write_text("")
    assert resolve_trace("example") == "example"  # an existing file wins


def test_unknown_trace_names_the_bundled_ones(tmp_path, monkeypatch, nothing_starts, capsys):
    monkeypatch.chdir(tmp_path)
    assert main_in_process(["--trace", "nosuch"]) == 2
    line = one_line(capsys.readouterr().err)
    assert "'nosuch'" in line and "bundled trace by name: example" in line


def test_readme_preset_list_and_end_reason_match_the_code():
    from redline.engine.preset import builtin_presets

    readme = "\n".join(d.read_text() for d in DOCS)
    names = ", ".join(b.name for b in builtin_presets())
    assert f"not a built-in preset (built-in: {names})" in readme
    assert "`preset finished`" in readme and "preset done" not in readme
    assert "preset finished" in (ROOT / "tui" / "cli" / "headless.py").read_text()


@pytest.mark.parametrize("argv", [["--rate", "0.05"], ["--rate", "0.099"]])
def test_rate_below_0_1_is_refused_with_one_line(argv, nothing_starts, capsys):
    rc = main_in_process(argv)
    line = one_line(capsys.readouterr().err)
    assert rc == 2 and argv[-1] in line and "0.1" in line


def test_typed_rate_floor_and_computed_rates():
    """What a person types (the TUI's `c`, --rate) is at least 0.1 req/s; a rate redline
    computes (the mode key's start at the live send rate) may be lower."""
    from redline.engine.workload.arrivals import ArrivalError, check_rate

    with pytest.raises(ArrivalError, match=r"'0\.05'.*0\.1"):
        check_rate("0.05")
    assert check_rate("0.1") == 0.1 and check_rate(0.02) == 0.02
    assert check_rate("0.05", "--rate-step", lo=0.0) == 0.05


# -- issue 46: the cheap documented commands run as written, against the sim -------------------------
# A command of README.md or docs/ that needs nothing of the reader's (no host of theirs, no file
# of theirs, no fixed port, no terminal) runs here: headless loads against the built-in sim (or,
# where the doc names http://127.0.0.1:30000, a sim of this test's own in that URL's place),
# stopped by SIGINT a moment after they began (exit 130, the session saved), or ending by
# themselves; then the commands that read what they wrote (report, export, preset-from), whole.
# docs/cli.md's exit statuses: 0 done, 130 stopped by SIGINT.
OTHER_HOST = re.compile(r"https?://(?!127\.0\.0\.1[:/])")
BEGAN = ("redline: holding ", "redline: preset ", "redline: sweep configuration 1 of")  # the banner a run prints once its load began
READERS = ("report", "export", "preset-from")


def _argv(cmd: str) -> list[str] | None:
    """The arguments of a documented command this test can run as written, else None."""
    import shlex

    argv = shlex.split(cmd)[1:]
    placeholder = re.compile(r"[A-Z][A-Z_]+(\.\w+)?|\.\.\.")  # SESSION_DIR, FILE.toml, ...
    if not argv or any(placeholder.fullmatch(a) for a in argv) or any("|" in a and not a.startswith(("-", "'", '"')) and "=" not in a
                                                                      for a in argv):
        return None  # a usage line with placeholders
    if any(OTHER_HOST.search(a) for a in argv) or any(a in ("--control", "--ray", "--compare") for a in argv):
        return None  # a host of the reader's, a fixed port, an earlier session of theirs
    if any(a.startswith("./") or a.endswith(".toml") and not a.startswith("-") and argv[argv.index(a) - 1] != "-o" for a in argv):
        return None  # a file of the reader's
    command = argv[0] if not argv[0].startswith("-") else None
    if command in (None, "run", "sweep") and "--headless" not in argv:
        return None  # the TUI
    if command == "sweep" and "redline sim" not in " ".join(argv):
        return None  # launches a server of the reader's
    if command not in (None, "run", "sweep", "presets", *READERS):
        return None  # ctl needs a running redline, sim holds a fixed port
    return argv


def _runnable() -> tuple[list[list[str]], dict[str, list[list[str]]]]:
    """(loads, readers by the session they read): each documented load this test can run, and
    the documented readers of the sessions those loads write (`--out DIR`)."""
    loads, readers = [], {}
    cmds = [a for a in (_argv(c) for c in readme_commands()) if a is not None]
    outs = {a[a.index("--out") + 1] for a in cmds if "--out" in a}
    for a in cmds:
        if a[0] in READERS:
            dirs = [x for x in a[1:] if x.startswith("runs/")]
            if dirs and all(d in outs for d in dirs) and len(dirs) == 1:
                readers.setdefault(dirs[0], []).append(a)
        elif a[0] != "presets":
            loads.append(a)
    return loads, readers


def _run_bounded(argv: list[str], cwd, url: str | None, began_s: float = 60.0, then_s: float = 1.5) -> tuple[int | None, str, str]:
    """`redline ARGV` in `cwd` (its --url 127.0.0.1:30000 pointed at `url`), SIGINT a moment
    after its banner says the load began; (exit status, stdout, stderr)."""
    from helpers import finish, redline_command

    args = [url if (a.startswith("http://127.0.0.1:30000") and url) else a for a in argv]
    proc = subprocess.Popen([*redline_command(), *args], cwd=cwd, env={**os.environ, "CI": "true"}, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    import selectors
    import signal
    import time

    seen = ""
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    end = time.monotonic() + began_s
    while time.monotonic() < end and proc.poll() is None and not any(b in seen for b in BEGAN):
        if sel.select(0.2):
            line = proc.stdout.readline()
            seen += line
    sel.close()
    if proc.poll() is None:
        time.sleep(then_s)
        proc.send_signal(signal.SIGINT)
    rc, out, err = finish(proc, 60)
    return rc, seen + out, err


def _ok(argv: list[str], rc: int | None, out: str, err: str) -> None:
    cmd = "redline " + " ".join(argv)
    assert "Traceback" not in err and "Traceback" not in out, (cmd, err[-2000:])
    assert rc in (0, 130), (cmd, rc, err[-2000:])
    assert "error:" not in err, (cmd, err[-2000:])


def _load_id(argv: list[str]) -> str:
    return " ".join(argv)[:80]


LOADS, READS = _runnable()


def test_the_cheap_commands_are_found():
    ids = [" ".join(a) for a in LOADS]
    assert "run until-it-breaks --headless --out runs/uib" in ids and "run quick --headless --out runs/quick1" in ids
    assert any(a.startswith("--headless -c 8 --num-requests 200") for a in ids)
    assert any(a.startswith("sweep --serve 'redline sim") or a.startswith("sweep --serve redline sim") for a in ids)
    assert ["report", "runs/quick1"] in READS["runs/quick1"] and ["export", "runs/quick1", "--format", "json"] in READS["runs/quick1"]


def test_redline_presets_runs_as_written():
    from helpers import redline_command

    r = subprocess.run([*redline_command(), "presets"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "quick" in r.stdout and "until-it-breaks" in r.stdout and r.stderr == ""


@pytest.mark.server
@pytest.mark.parametrize("argv", LOADS, ids=_load_id)
def test_a_documented_load_runs_as_written(argv, tmp_path, sim_factory):
    """The load starts (its banner), a SIGINT a moment later stops it with the session saved
    (or it ended by itself); then every documented reader of its session runs on it."""
    url = sim_factory("healthy", 0, FAST_SIM).url if any(a.startswith("http://127.0.0.1:30000") for a in argv) else None
    rc, out, err = _run_bounded(argv, tmp_path, url)
    _ok(argv, rc, out, err)
    assert any(b in out for b in BEGAN), ("redline " + " ".join(argv), out[-2000:], err[-2000:])
    if "--out" in argv:
        d = argv[argv.index("--out") + 1]
        assert (tmp_path / d / ("sweep.json" if argv[0] == "sweep" else "meta.json")).is_file()
        for reader in READS.get(d, []):
            from helpers import redline_command

            r = subprocess.run([*redline_command(), *reader], cwd=tmp_path, capture_output=True, text=True, timeout=120)
            _ok(reader, r.returncode, r.stdout, r.stderr)
