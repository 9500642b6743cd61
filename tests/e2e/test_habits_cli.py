"""Issue 38, the habits users bring, on the command line: a typo gets the closest real name
(preset keys and tables, commands, `redline ctl` actions), a refusal names the option once
and in this command line's words, the sim's profile is `--sim-profile` (the old `--profile`
refused with one line), a port that answers something other than HTTP says so in one line,
and `redline --help` shows the command as optional."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from redline.engine.client.http import make_client
from redline.engine.client.request import NOT_HTTP
from redline.engine.client.target import TargetUnreachable, detect
from redline.engine.preset import PresetError, parse_toml
from redline.engine.text import closest, did_you_mean

from helpers import ROOT, main_in_process, raw_server

RAMP = "[ramp]\nconcurrency = [1]\n"


def one_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# -- 1. did you mean --------------------------------------------------------------------------
def test_closest_is_near_or_nothing():
    assert closest("p99_tft_ms", ("plateau_gain", "p99_ttft_ms", "p99_itl_ms")) == "p99_ttft_ms"
    assert closest("reprot", ("run", "report", "export")) == "report"
    assert closest("xyzzy", ("run", "report")) is None
    assert closest(3, ("run",)) is None and closest("", ("run",)) is None
    assert did_you_mean("stp", ("stop", "ramp"), "[{}]") == "; did you mean [stop]?"
    assert did_you_mean("zzz", ("stop",)) == ""


@pytest.mark.parametrize("toml, line", [
    (RAMP + "[stop]\np99_tft_ms = 3000\n", "presets/x.toml: unknown key [stop].p99_tft_ms; did you mean p99_ttft_ms?"),
    (RAMP + "[stp]\nplateau_gain = 0.05\n", "presets/x.toml: unknown table [stp]; did you mean [stop]?"),
    ("nmae = 'x'\n" + RAMP, "presets/x.toml: unknown key nmae; did you mean name?"),
    ("ramps = 1\n" + RAMP, "presets/x.toml: unknown key ramps; did you mean [ramp]?"),
    (RAMP + "hold = 30\n", "presets/x.toml: unknown key [ramp].hold; did you mean hold_s?"),
    (RAMP.replace("[1]", "[1, 2]") + "durations_s = [5, 5]\nworkloads = [{inptu_len = 8}, {}]\n",
     "presets/x.toml: [ramp].workloads (position 1): unknown key inptu_len; did you mean input_len?"),
])
def test_preset_typo_names_the_closest_key(toml, line):
    with pytest.raises(PresetError) as exc:
        parse_toml(toml, "presets/x.toml")
    assert str(exc.value) == line


def test_preset_key_far_from_any_lists_them_all():
    with pytest.raises(PresetError) as exc:
        parse_toml(RAMP + "[stop]\nqqqq = 1\n", "presets/x.toml")
    assert str(exc.value) == ("presets/x.toml: unknown key [stop].qqqq "
                              "(accepted: plateau_gain, p99_ttft_ms, p99_itl_ms, error_rate, collapse, stall_s)")
    with pytest.raises(PresetError) as exc:
        parse_toml(RAMP + "[zzz]\nx = 1\n", "presets/x.toml")
    assert "unknown table [zzz] (accepted: target, workload, ramp, stop" in str(exc.value)


@pytest.mark.parametrize("argv, line", [
    (["reprot"], "redline: error: unknown command 'reprot'; did you mean report? (see redline --help)"),
    (["presest"], "redline: error: unknown command 'presest'; did you mean presets? (see redline --help)"),
    (["quick"], "redline: error: unknown command 'quick'; quick is a preset: redline run quick (see redline --help)"),
    (["ctl", "concurency", "8"],
     "redline ctl: error: unknown action 'concurency'; did you mean concurrency? (see redline ctl --help)"),
    (["--api", "chta"], "redline: error: --api 'chta': expected chat, completions or generate; did you mean chat? (see redline --help)"),
    (["--slo", "ttf=2s"], "redline: error: --slo: unknown SLO 'ttf'; did you mean ttft?"),
    (["--guard", "erors=5%"], "redline: error: --guard: unknown guard 'erors'; did you mean errors?"),
    (["--sim-profile", "pp-caped"], "redline: error: --sim-profile: unknown profile 'pp-caped'; did you mean pp-capped?"),
])
def test_a_typo_gets_the_closest_name(nothing_starts, capsys, argv, line):
    rc = main_in_process(argv)
    out = capsys.readouterr()
    assert rc == 2 and out.out == "" and nothing_starts == []
    assert one_line(out.err) == line


def test_an_unknown_command_far_from_any_lists_them(nothing_starts, capsys):
    assert main_in_process(["bogus"]) == 2
    line = one_line(capsys.readouterr().err)
    assert line.startswith("redline: error: unknown command 'bogus' (commands: run, ctl, sweep, presets, export, report")


# -- 2. one line naming the value once, in this command line's words --------------------------
@pytest.mark.parametrize("argv, line", [
    (["--concurrency", "0"], "redline: error: --concurrency '0': expected a whole number >= 1 (see redline --help)"),
    (["-c", "x"], "redline: error: --concurrency 'x': expected a whole number >= 1 (see redline --help)"),
    (["--slo", "ttft=fast"], "redline: error: --slo ttft='fast': expected a duration such as 2s or 100ms"),
    (["--guard", "ttft_p99=soon"], "redline: error: --guard ttft_p99='soon': expected a duration such as 2s or 100ms"),
    (["ctl", "search", "--start", "x"],
     "redline ctl search: error: --start 'x': expected a whole number (see redline ctl search --help)"),
    (["sim", "--port", "x"], "redline sim: error: --port 'x': expected a port number from 0 to 65535 (see redline sim --help)"),
])
def test_a_bad_value_names_its_option_once(nothing_starts, capsys, argv, line):
    rc = main_in_process(argv)
    out = capsys.readouterr()
    assert rc == 2 and nothing_starts == []
    got = one_line(out.err)
    assert got == line
    assert "argument " not in got


def _control_refusing(error: str):
    """A stand-in control API that refuses every command with `error` (HTTP 400)."""

    async def handler(reader, writer) -> None:
        await reader.readuntil(b"\r\n\r\n")
        body = json.dumps({"ok": False, "error": error}).encode()
        writer.write(b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
                     b"connection: close\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        writer.close()

    return raw_server(handler)


def test_ctl_refusal_is_in_the_command_lines_words(capsys):
    """The API names its JSON field (`add "raise_max": true`); `redline ctl` its option."""
    api_words = 'concurrency 100: expected a whole number from 1 to 64 (above --max-concurrency: add "raise_max": true)'
    with _control_refusing(api_words) as port:
        rc = main_in_process(["ctl", "--control", str(port), "concurrency", "100"])
    line = one_line(capsys.readouterr().err)
    assert rc == 1
    assert line == ("redline ctl: concurrency refused (HTTP 400): concurrency 100: expected a whole number from 1 to 64 "
                    "(above --max-concurrency: add --raise-max)")
    with _control_refusing("concurrency 0: expected a whole number from 1 to 64") as port:
        rc = main_in_process(["ctl", "--control", str(port), "concurrency", "0"])
    line = one_line(capsys.readouterr().err)
    assert rc == 1 and line.endswith("concurrency 0: expected a whole number from 1 to 64") and "raise" not in line


async def _banner(reader, writer) -> None:
    """An SSH server's first bytes: no HTTP status line."""
    writer.write(b"SSH-2.0-x\r\n")
    await writer.drain()
    try:
        await asyncio.wait_for(reader.read(1024), 2.0)
    except (asyncio.TimeoutError, ConnectionError):
        pass
    writer.close()


@pytest.mark.parametrize("transport", ["lean", "aiohttp"])
def test_a_port_that_does_not_speak_http_says_so(transport):
    async def go(port: int) -> str:
        client = make_client(transport=transport, request_timeout=5.0)
        try:
            await detect(client, f"http://127.0.0.1:{port}")
        except TargetUnreachable as exc:
            return str(exc)
        finally:
            await client.aclose()
        return "detected"

    with raw_server(_banner) as port:
        said = asyncio.run(go(port))
    assert said == f"http://127.0.0.1:{port}: {NOT_HTTP}"
    assert NOT_HTTP == "does not speak HTTP (its answer is not an HTTP response)"


def test_a_port_that_does_not_speak_http_through_the_cli(tmp_path):
    with raw_server(_banner) as port:
        r = subprocess.run([sys.executable, "-m", "redline.tui", "--url", f"http://127.0.0.1:{port}", "--headless",
                            "--no-nvml", "--out", str(tmp_path / "s")], cwd=ROOT, stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=60)
    assert r.returncode == 3, r.stderr
    assert one_line(r.stderr) == f"redline: error: http://127.0.0.1:{port}: does not speak HTTP (its answer is not an HTTP response)"


# -- 3. --sim-profile; the old --profile refused ----------------------------------------------
RENAMED = "--profile is now --sim-profile (the sim's profile; --profile-s is the server's profiler)"


@pytest.mark.parametrize("argv, prog", [
    (["--profile", "pp-capped"], "redline"),
    (["--profile"], "redline"),
    (["run", "quick", "--headless", "--profile", "fragile"], "redline run"),
    (["sim", "--profile", "fragile"], "redline sim"),
])
def test_the_old_profile_option_is_refused_naming_the_new_one(nothing_starts, capsys, argv, prog):
    rc = main_in_process(argv)
    out = capsys.readouterr()
    assert rc == 2 and out.out == "" and nothing_starts == []
    assert one_line(out.err) == f"{prog}: error: {RENAMED} (see {prog} --help)"


def test_sim_profile_is_the_option_everywhere():
    from redline.tui.cli.arguments import build_parser

    p = build_parser()
    assert p.parse_args(["--sim-profile", "pp-capped"]).profile == "pp-capped"
    assert p.parse_args(["--sim-profile", "fragile", "--profile-s", "3"]).profile_s == 3.0  # the profiler's stays
    assert "--sim-profile NAME" in p.format_help() and "--profile PROFILE" not in p.format_help()
    sim = p.parse_args(["sim", "--sim-profile", "flaky", "--port", "0"])
    assert sim.profile == "flaky"
    from redline.engine.sim.serve import _sim_argv

    assert "--sim-profile" in _sim_argv("healthy", 0, ()) and "--profile" not in _sim_argv("healthy", 0, ())


def test_the_sim_module_refuses_the_old_profile_option():
    r = subprocess.run([sys.executable, "-m", "redline.engine.sim", "--profile", "fragile"], cwd=ROOT,
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and RENAMED in r.stderr, r.stderr


def test_no_doc_or_test_types_the_old_profile_option():
    """Every place a person copies a command from says --sim-profile (`--profile-s` stays)."""
    import re

    old = re.compile(r"--profile(?![-\w])")
    paths = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "benchmarks").glob("*.py")),
             *sorted((ROOT / "presets").glob("*.toml")), *sorted((ROOT / "tests").rglob("test_*.py"))]
    hits = []
    for path in paths:
        if path.name == Path(__file__).name:
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if old.search(line) and "--sim-profile" not in line:  # a line naming both tells of the rename
                hits.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert hits == []


# -- 5. the command is optional ---------------------------------------------------------------
def test_help_shows_the_command_as_optional(capsys):
    assert main_in_process(["--help"]) == 0
    usage = capsys.readouterr().out.split("\n\n")[0]
    assert "[COMMAND ...]" in " ".join(usage.split()), usage
    assert main_in_process(["ctl", "--help"]) == 0  # ctl's ACTION is required: no brackets
    usage = " ".join(capsys.readouterr().out.split("\n\n")[0].split())
    assert "ACTION ..." in usage and "[ACTION ...]" not in usage, usage


# -- 6 (f). one request, not `1 requests` ----------------------------------------------------
@pytest.mark.parametrize("n, words", [(1, "(1 request ended after the step)"), (8, "(8 requests ended after the step)")])
def test_late_requests_agree_in_number(n, words):
    from types import SimpleNamespace

    from redline.engine.core.engine import Engine
    from redline.engine.measure.step_result import StepResult

    logged: list[str] = []
    fake = SimpleNamespace(log=lambda kind, text, **k: logged.append(text), write_summary=lambda: None)
    res = StepResult(concurrency=8, duration_s=10.0, completed=20, failed=0, output_throughput=100.0,
                     input_throughput=400.0, request_throughput=2.0, ended_after_close=n)
    Engine._step_final(fake, res)
    assert logged and logged[0].startswith(f"C=8 final {words}: "), logged
