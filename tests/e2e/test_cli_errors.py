"""Operator faults through the real CLI: exit 2 for bad input (3 for an unreachable target),
exactly one line on stderr naming the value and what is accepted, no traceback, and nothing
connected to or started before the arguments are checked.

A case of each kind runs the installed `redline` in a subprocess (CI=true, no tty, stdin closed); the
cases run concurrently once per module, each test then checks its own result. Where a case
needs a syntactically good --url, it points at a listener the test owns that counts the
connections it gets: it must get none.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers import ROOT

QUICK = str(ROOT / "presets" / "quick.toml")

BAD, UNREACHABLE = 2, 3


class CountingListener:
    """A TCP listener on 127.0.0.1 that accepts and counts connections (and says nothing)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.connections = 0
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self._stop = True
        self._thread.join(2)
        self.sock.close()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Case:
    argv: list[str]  # "{URL}" = a counting listener's URL, "{CLOSED}" = a closed port's URL, "{D}" = the data dir
    exit: int
    needles: tuple[str, ...]  # each must be in the one stderr line


CASES: dict[str, Case] = {
    # concurrency
    "concurrency-0": Case(["--url", "{URL}", "--concurrency", "0"], BAD, ("--concurrency", "'0'", "whole number >= 1")),
    "concurrency-negative": Case(["--url", "{URL}", "--concurrency", "-1"], BAD, ("--concurrency", "'-1'", ">= 1")),
    "concurrency-abc": Case(["--url", "{URL}", "-c", "abc"], BAD, ("--concurrency", "'abc'", "whole number")),
    "concurrency-float": Case(["--url", "{URL}", "--concurrency", "2.5"], BAD, ("'2.5'", "whole number")),
    "concurrency-above-default-max": Case(["--url", "{URL}", "--concurrency", "2000"], BAD, ("2000", "--max-concurrency 1024")),
    "concurrency-above-max": Case(["--url", "{URL}", "--concurrency", "20", "--max-concurrency", "10"], BAD, ("20", "--max-concurrency 10")),
    "max-concurrency-0": Case(["--url", "{URL}", "--max-concurrency", "0"], BAD, ("--max-concurrency", "'0'")),
    "request-timeout-0": Case(["--url", "{URL}", "--request-timeout", "0"], BAD, ("--request-timeout", "'0'", "> 0")),
    "request-timeout-nan": Case(["--url", "{URL}", "--request-timeout", "nan"], BAD, ("'nan'",)),
    # URLs
    "url-ftp": Case(["--url", "ftp://127.0.0.1:21"], BAD, ("'ftp://127.0.0.1:21'", "scheme 'ftp'", "http://HOST[:PORT]")),
    "url-wrong-path": Case(["--url", "http://127.0.0.1:1/foo"], BAD, ("'http://127.0.0.1:1/foo'", "path '/foo'", "http://HOST[:PORT]")),
    "url-api-path": Case(["--url", "http://127.0.0.1:1/v1/chat/completions"], BAD, ("path '/v1/chat/completions'", "/v1")),
    "url-garbage": Case(["--url", "garbage"], BAD, ("'garbage'", "http://HOST[:PORT]")),
    "url-empty": Case(["--url", ""], BAD, ("''", "http://HOST[:PORT]")),
    "url-bad-port": Case(["--url", "http://127.0.0.1:99999"], BAD, ("99999", "bad port")),
    "url-port-0": Case(["--url", "http://127.0.0.1:0"], BAD, ("bad port",)),
    "url-ipv6-unclosed": Case(["--url", "http://[::1"], BAD, ("'http://[::1'", "not a valid URL")),
    "url-space": Case(["--url", "http://gpu host:30000"], BAD, ("spaces",)),
    "url-credentials": Case(["--url", "http://user:pw@127.0.0.1:1"], BAD, ("credentials", "OPENAI_API_KEY")),
    "url-query": Case(["--url", "http://127.0.0.1:1/?x=1"], BAD, ("query",)),
    "url-with-profile": Case(["--url", "{URL}", "--sim-profile", "fragile"], BAD, ("--sim-profile", "--url")),
    # many targets (issue 17): --url repeated, --weights
    "url-twice": Case(["--url", "{URL}", "--url", "{URL}/v1"], BAD, ("/v1'", "given twice", "same target as")),
    "url-one-bad-of-three": Case(["--url", "{URL}", "--url", "http://127.0.0.1:8", "--url", "http://127.0.0.1:7/foo"], BAD,
                                 ("'http://127.0.0.1:7/foo'", "path '/foo'")),
    "urls-with-profile": Case(["--url", "{URL}", "--url", "http://127.0.0.1:8", "--sim-profile", "fragile"], BAD, ("--sim-profile", "--url")),
    "weights-count": Case(["--url", "{URL}", "--url", "http://127.0.0.1:8", "--weights", "3,1,1"], BAD,
                          ("--weights '3,1,1'", "2 positive numbers", "one per --url")),
    "weights-bad": Case(["--url", "{URL}", "--url", "http://127.0.0.1:8", "--weights", "3,nan"], BAD, ("--weights '3,nan'", "positive")),
    "weights-one-url": Case(["--url", "{URL}", "--weights", "1"], BAD, ("--weights '1'", "--url two or more times")),
    # worker processes (issue 17): --workers N|auto
    "workers-0": Case(["--url", "{URL}", "--workers", "0"], BAD, ("--workers '0'", "whole number from 1 to 256, or auto")),
    "workers-abc": Case(["--url", "{URL}", "--workers", "many"], BAD, ("--workers 'many'", "or auto")),
    "weights-on-run": Case(["run", QUICK, "--headless", "--url", "{URL}", "--url", "http://127.0.0.1:8", "--weights", "1,0"], BAD,
                           ("--weights '1,0'", "positive")),
    "profile-unknown": Case(["--sim-profile", "nope"], BAD, ("--sim-profile", "'nope'", "healthy")),
    "metrics-url": Case(["--url", "{URL}", "--server-metrics", "localhost:9400"], BAD, ("--server-metrics", "http(s)://")),
    "api-unknown": Case(["--url", "{URL}", "--api", "grpc"], BAD, ("'grpc'", "chat")),
    "api-key-env-not-a-name": Case(["--url", "{URL}", "--api-key-env", "A B"], BAD, ("--api-key-env", "environment variable")),
    # datasets
    "dataset-kind": Case(["--url", "{URL}", "--dataset", "csv:x"], BAD, ("'csv:x'", "random, sharegpt:PATH or jsonl:PATH")),
    "dataset-no-path": Case(["--url", "{URL}", "--dataset", "jsonl:"], BAD, ("'jsonl:'", "jsonl:PATH")),
    "dataset-missing": Case(["--url", "{URL}", "--dataset", "jsonl:{D}/missing.jsonl"], BAD, ("missing.jsonl", "not found", "JSONL")),
    "dataset-empty": Case(["--url", "{URL}", "--dataset", "jsonl:{D}/empty.jsonl"], BAD, ("empty.jsonl", "empty")),
    "dataset-not-json": Case(["--url", "{URL}", "--dataset", "jsonl:{D}/words.jsonl"], BAD, ("words.jsonl", "line 2", "not JSON", '{"prompt"')),
    "dataset-wrong-shape": Case(["--url", "{URL}", "--dataset", "jsonl:{D}/shape.jsonl"], BAD, ("shape.jsonl", "line 1", '{"prompt"')),
    "dataset-bad-max-tokens": Case(["--url", "{URL}", "--dataset", "jsonl:{D}/mt.jsonl"], BAD, ("mt.jsonl", "max_tokens", "positive integer")),
    "dataset-not-utf8": Case(["--url", "{URL}", "--dataset", "jsonl:{D}/latin1.jsonl"], BAD, ("latin1.jsonl", "UTF-8")),
    "dataset-directory": Case(["--url", "{URL}", "--dataset", "jsonl:{D}"], BAD, ("directory",)),
    "dataset-name-too-long": Case(["--url", "{URL}", "--dataset", "jsonl:" + "a" * 5000], BAD, ("cannot be opened", "File name too long")),
    "sharegpt-not-json": Case(["--url", "{URL}", "--dataset", "sharegpt:{D}/words.jsonl"], BAD, ("words.jsonl", "not JSON", "ShareGPT")),
    "sharegpt-no-prompts": Case(["--url", "{URL}", "--dataset", "sharegpt:{D}/list.json"], BAD, ("list.json", "no usable prompts")),
    "dataset-missing-no-url": Case(["--dataset", "jsonl:{D}/missing.jsonl"], BAD, ("missing.jsonl", "not found")),
    # load shapes (issue #16): rate, arrival, multi-turn, trace
    "rate-0": Case(["--url", "{URL}", "--rate", "0"], BAD, ("--rate", "'0'", "requests per second", "> 0")),
    "rate-negative": Case(["--url", "{URL}", "--rate", "-2"], BAD, ("--rate", "'-2'", "> 0")),
    "rate-abc": Case(["--url", "{URL}", "--rate", "abc"], BAD, ("--rate", "'abc'", "requests per second")),
    "rate-inf": Case(["--url", "{URL}", "--rate", "inf"], BAD, ("'inf'",)),
    "rate-step-0": Case(["--url", "{URL}", "--rate-step", "0"], BAD, ("--rate-step", "'0'")),
    "arrival-unknown": Case(["--url", "{URL}", "--arrival", "foo"], BAD, ("--arrival", "'foo'", "poisson, constant or gamma:K")),
    "arrival-gamma-0": Case(["--url", "{URL}", "--arrival", "gamma:0"], BAD, ("'gamma:0'", "K must be a number > 0")),
    "turns-0": Case(["--url", "{URL}", "--turns", "0"], BAD, ("--turns", "'0'", "whole number >= 1")),
    "think-negative": Case(["--url", "{URL}", "--turns", "2", "--think-s", "-1"], BAD, ("--think-s", "'-1'", "from 0")),
    "think-without-turns": Case(["--url", "{URL}", "--think-s", "2"], BAD, ("--think-s 2", "--turns")),
    "turns-with-rate": Case(["--url", "{URL}", "--turns", "3", "--rate", "5"], BAD, ("--turns 3", "--rate")),
    "turns-with-trace": Case(["--url", "{URL}", "--turns", "3", "--trace", "{D}/trace.jsonl"], BAD, ("--turns 3", "--trace")),
    "rate-with-trace": Case(["--url", "{URL}", "--rate", "5", "--trace", "{D}/trace.jsonl"], BAD, ("--rate 5", "--speed")),
    "speed-without-trace": Case(["--url", "{URL}", "--speed", "2"], BAD, ("--speed 2", "--trace")),
    "speed-0": Case(["--url", "{URL}", "--trace", "{D}/trace.jsonl", "--speed", "0"], BAD, ("--speed", "'0'", "> 0")),
    "trace-missing": Case(["--url", "{URL}", "--trace", "{D}/nope.jsonl"], BAD, ("nope.jsonl", "not found", "Mooncake JSONL")),
    "trace-directory": Case(["--url", "{URL}", "--trace", "{D}"], BAD, ("directory",)),
    "trace-empty": Case(["--url", "{URL}", "--trace", "{D}/empty.jsonl"], BAD, ("empty.jsonl", "empty")),
    "trace-malformed": Case(["--url", "{URL}", "--trace", "{D}/badtrace.jsonl"], BAD, ("badtrace.jsonl", "line 2")),
    "trace-not-json": Case(["--url", "{URL}", "--trace", "{D}/words.jsonl"], BAD, ("words.jsonl", "line 1")),
    "preset-rate-cap-above-max": Case(["run", "rate-ramp", "--headless", "--url", "{URL}", "--max-concurrency", "100"], BAD,
                                      ("--max-concurrency 100", "256", "[ramp].max_concurrency")),
    "rate-on-run": Case(["run", QUICK, "--headless", "--url", "{URL}", "--rate", "5"], BAD, ("--rate",)),
    # presets (engine/preset errors, through `run`)
    "preset-missing": Case(["run", "{D}/nope.toml", "--headless", "--url", "{URL}"], BAD, ("nope.toml", "file not found")),
    "preset-directory": Case(["run", "{D}", "--headless", "--url", "{URL}"], BAD, ("is a directory", ".toml")),
    "preset-not-toml": Case(["run", "{D}/garbage.toml", "--headless", "--url", "{URL}"], BAD, ("garbage.toml", "not valid TOML")),
    "preset-binary": Case(["run", "{D}/binary.toml", "--headless", "--url", "{URL}"], BAD, ("binary.toml", "UTF-8")),
    "preset-bad-value": Case(["run", "{D}/c0.toml", "--headless", "--url", "{URL}"], BAD, ("c0.toml", "[ramp].concurrency", "positive integers")),
    "preset-unknown-key": Case(["run", "{D}/typo.toml", "--headless", "--url", "{URL}"], BAD, ("typo.toml", "hold_seconds")),
    "preset-bad-dataset": Case(["run", "{D}/ds.toml", "--headless", "--url", "{URL}"], BAD, ("ds.toml", "dataset file not found")),
    "preset-no-url": Case(["run", "{D}/c0.toml", "--headless"], BAD, ("c0.toml",)),
    "preset-url-ftp": Case(["run", QUICK, "--headless", "--url", "ftp://127.0.0.1:1"], BAD, ("scheme 'ftp'",)),
    "preset-url-in-file": Case(["run", "{D}/ftp.toml", "--headless"], BAD, ("ftp.toml", "[target].url", "'ftp://127.0.0.1:1'", "http://HOST[:PORT]")),
    "preset-unknown-name": Case(["run", "nosuch", "--headless", "--url", "{URL}"], BAD, ("nosuch", "built-in", "quick")),
    "preset-above-max-concurrency": Case(["run", QUICK, "--headless", "--url", "{URL}", "--max-concurrency", "100"], BAD, ("--max-concurrency 100", "C=256")),
    "preset-concurrency-option": Case(["run", QUICK, "--headless", "--url", "{URL}", "--concurrency", "3"], BAD, ("--concurrency",)),
    # unreachable target: exit 3
    "unreachable": Case(["--url", "{CLOSED}"], UNREACHABLE, ("cannot reach", "{CLOSED}", "connection refused")),
    "unreachable-v1": Case(["--url", "{CLOSED}/v1"], UNREACHABLE, ("cannot reach", "connection refused")),
    "unreachable-headless": Case(["run", QUICK, "--headless", "--url", "{CLOSED}"], UNREACHABLE, ("cannot reach", "{CLOSED}", "connection refused")),
}


def write_data(d: Path) -> None:
    (d / "empty.jsonl").write_text("")
    (d / "words.jsonl").write_text('"a fine prompt"\nhello there\n')
    (d / "shape.jsonl").write_text('{"text": "no prompt key"}\n')
    (d / "mt.jsonl").write_text('{"prompt": "x", "max_tokens": 0}\n')
    (d / "latin1.jsonl").write_bytes('"caf\xe9"\n'.encode("latin-1"))
    (d / "list.json").write_text('[{"conversations": []}, 3]')
    (d / "garbage.toml").write_text("this is = = not toml\n")
    (d / "binary.toml").write_bytes(b"\xff\xfe[ramp]\n")
    (d / "c0.toml").write_text("[ramp]\nconcurrency = [0, 8]\n")
    (d / "typo.toml").write_text("[ramp]\nconcurrency = [8]\nhold_seconds = 3\n")
    (d / "ds.toml").write_text('[workload]\ndataset = "jsonl:absent.jsonl"\n[ramp]\nconcurrency = [8]\n')
    (d / "ftp.toml").write_text('[target]\nurl = "ftp://127.0.0.1:1"\n[ramp]\nconcurrency = [8]\n')
    (d / "trace.jsonl").write_text('{"timestamp": 0, "input_length": 100, "output_length": 10}\n')
    (d / "badtrace.jsonl").write_text('{"timestamp": 0, "input_length": 100, "output_length": 10}\n{"timestamp": 5, "input_length": -3, "output_length": 10}\n')


# The real process for a case of each kind (a subprocess costs ~0.5 s of CPU: the rest of the
# matrix runs in-process below, with the same checks).
THROUGH_THE_CLI = [
    "concurrency-abc", "url-wrong-path", "dataset-empty", "preset-bad-value", "unreachable", "unreachable-headless",
    "trace-malformed", "weights-count",
]


def redline_command() -> list[str]:
    """The installed console script (what an operator runs), else its exact equivalent."""
    script = Path(sys.executable).with_name("redline")
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-m", "redline.tui"]


def run_cli(argv: list[str], env_extra: dict | None = None, timeout: float = 60, command: list[str] | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "CI": "true", **(env_extra or {})}
    return subprocess.run(
        [*(command or redline_command()), *argv], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=timeout,
    )


@dataclass
class Result:
    argv: list[str]
    rc: int
    stdout: str
    stderr: str
    connections: int
    closed_url: str


def check_one_line(case: Case, r: Result, name: str) -> None:
    where = f"argv={r.argv}\nstdout={r.stdout!r}\nstderr={r.stderr!r}"
    assert r.rc == case.exit, where
    assert "Traceback" not in r.stdout + r.stderr, where
    lines = r.stderr.splitlines()
    assert len(lines) == 1, where
    line = lines[0]
    assert line.startswith("redline: error: ") or line.startswith("redline run: error: "), where
    for needle in case.needles:
        assert needle.replace("{CLOSED}", r.closed_url) in line, (needle, where)
    assert len(line) < 400, where
    assert r.stdout == "", where  # nothing started: no preset banner, no session line
    assert r.connections == 0, f"{name}: {r.connections} connection(s) before the arguments were checked"


def expand(argv: list[str], url: str, closed: str, d: Path) -> list[str]:
    return [a.replace("{URL}", url).replace("{CLOSED}", closed).replace("{D}", str(d)) for a in argv]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("cli-data")
    write_data(d)
    return d


@pytest.fixture(scope="module")
def results(data_dir) -> dict[str, Result]:
    d = data_dir

    def one(name: str) -> Result:
        case = CASES[name]
        listener = CountingListener()
        closed = f"http://127.0.0.1:{closed_port()}"
        try:
            argv = expand(case.argv, listener.url, closed, d) + ["--out", str(d / "sessions" / name)]
            r = run_cli(argv)
        finally:
            listener.close()
        return Result(argv, r.returncode, r.stdout, r.stderr, listener.connections, closed)

    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip(THROUGH_THE_CLI, pool.map(one, THROUGH_THE_CLI), strict=False))


@pytest.mark.parametrize("name", THROUGH_THE_CLI)
def test_operator_fault_through_the_cli(results, name):
    """The real process: exit status, one stderr line naming the value, no traceback, and the
    target URL it was given never saw a connection."""
    check_one_line(CASES[name], results[name], name)


@pytest.fixture
def booby_traps(monkeypatch) -> list[str]:
    """In-process: starting the built-in sim or sending any HTTP request is recorded and fails."""
    import httpx

    import redline.engine.sim.serve

    touched: list[str] = []

    def no_sim(*a, **k):
        touched.append("sim")
        raise AssertionError("the built-in sim was started before the arguments were checked")

    async def no_send(self, *a, **k):
        touched.append("http")
        raise AssertionError("a connection was made before the arguments were checked")

    def no_tui(*a, **k):
        touched.append("engine process")
        raise AssertionError("the TUI's engine process was started before the arguments were checked")

    import redline.tui.run_app

    monkeypatch.setattr(redline.engine.sim.serve, "spawn_sim_process", no_sim)
    monkeypatch.setattr(redline.engine.sim.serve, "start_sim_thread", no_sim)
    monkeypatch.setattr(httpx.AsyncClient, "send", no_send)
    monkeypatch.setattr(redline.tui.run_app, "run_tui", no_tui)  # it runs the engine in another process
    return touched


def main_in_process(argv: list[str]) -> int:
    from redline.tui import cli

    try:
        return cli.main(argv)
    except SystemExit as exc:  # argparse's errors
        return int(exc.code or 0)


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c.exit == BAD])
def test_operator_fault_in_process(data_dir, booby_traps, capsys, name):
    """Every bad-input case: exit 2, one line naming the value, and neither the built-in sim
    nor any HTTP request started before the check."""
    case = CASES[name]
    argv = expand(case.argv, "http://127.0.0.1:9", "http://127.0.0.1:9", data_dir) + ["--out", str(data_dir / "inproc" / name)]
    rc = main_in_process(argv)
    out = capsys.readouterr()
    check_one_line(case, Result(argv, rc, out.out, out.err, 0, ""), name)
    assert booby_traps == []


# -- nothing started before the arguments are checked (the built-in sim included) ------------
# With no --url redline starts its built-in sim: every kind of bad input must be refused first.
BAD_KEY = {"OPENAI_API_KEY": "sk-with a space"}
NO_URL_CASES: dict[str, tuple[list[str], dict[str, str]]] = {
    "api-key-bad": (["--concurrency", "4"], BAD_KEY),
    "api-key-bad-run": (["run", "quick", "--headless"], BAD_KEY),
    "api-key-env-not-a-name": (["run", "quick", "--headless", "--api-key-env", "sk-123"], {}),
    "out-bad": (["--out", "{D}/c0.toml"], {}),
    "out-bad-run": (["run", "quick", "--headless", "--out", "{D}/c0.toml"], {}),
    "dataset-missing": (["--dataset", "jsonl:{D}/missing.jsonl"], {}),
    "preset-bad": (["run", "{D}/c0.toml", "--headless"], {}),
    "preset-bad-tui": (["run", "{D}/c0.toml"], {}),
    "preset-bad-dataset": (["run", "{D}/ds.toml", "--headless"], {}),
    "preset-unknown-name": (["run", "nosuch"], {}),
    "profile-unknown": (["--sim-profile", "nope"], {}),
    "profile-unknown-run": (["run", "quick", "--headless", "--sim-profile", "nope"], {}),
    "url-bad": (["--url", "ftp://127.0.0.1:1"], {}),
    "url-bad-in-preset": (["run", "{D}/ftp.toml", "--headless"], {}),
    "compare-bad": (["--compare", "{D}/no-session"], {}),
    "concurrency-above-max": (["--concurrency", "2000"], {}),
    "rate-0": (["--rate", "0"], {}),
    "arrival-unknown": (["--rate", "5", "--arrival", "foo"], {}),
    "turns-with-rate": (["--turns", "2", "--rate", "5"], {}),
    "trace-missing": (["--trace", "{D}/nope.jsonl"], {}),
    "trace-malformed": (["--trace", "{D}/badtrace.jsonl", "--speed", "2"], {}),
    "weights-without-url": (["--weights", "3,1"], {}),
    "weights-without-url-run": (["run", "quick", "--headless", "--weights", "3,1"], {}),
}


@pytest.mark.parametrize("name", list(NO_URL_CASES))
def test_bad_input_without_url_starts_no_sim(tmp_path, booby_traps, capsys, monkeypatch, name):
    """Refused with one line and exit 2 before the built-in sim (or anything else) starts."""
    write_data(tmp_path)
    argv, env = NO_URL_CASES[name]
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    rc = main_in_process([a.replace("{D}", str(tmp_path)) for a in argv])
    err = capsys.readouterr().err
    assert rc == BAD, err
    assert booby_traps == []
    assert len(err.splitlines()) == 1 and err.startswith("redline: error: ") and "Traceback" not in err
    assert "sk-with" not in err  # the key itself is never echoed


# -- the command line itself ------------------------------------------------------------------
def test_unknown_command_is_one_line_exit_2_through_the_cli(tmp_path):
    """`redline bogus` (run where an operator would, outside the checkout) opens no TUI."""
    r = subprocess.run([*redline_command(), "bogus"], cwd=tmp_path, env={**os.environ, "CI": "true"},
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert r.returncode == BAD and r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and "'bogus'" in lines[0] and "run" in lines[0], r.stderr


@pytest.mark.parametrize("argv, needles", [
    (["--no-nvml", "sim"], ("'--no-nvml'", "'sim'", "after")),
    (["--url", "http://127.0.0.1:9", "run", "quick"], ("'--url'", "'run'", "after")),
    (["-c", "4", "presets"], ("'-c'", "'presets'")),
    (["quick"], ("unknown command 'quick'", "redline run quick")),
    (["sim", "--port", "99999"], ("99999", "port")),
    (["sim", "--no-nvml"], ("--no-nvml",)),
    (["presets", "extra"], ("extra",)),
])
def test_command_line_errors_are_one_line(booby_traps, capsys, argv, needles):
    """Options before a command, unknown commands and a command's own bad options: one line,
    exit 2, and nothing (no sim, no TUI) started."""
    rc = main_in_process(argv)
    out = capsys.readouterr()
    assert rc == BAD and out.out == "" and booby_traps == []
    lines = out.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("redline"), out.err
    assert all(n in lines[0] for n in needles), out.err


def test_every_command_dispatches_to_one_handler():
    from redline.tui import cli
    from redline.tui.cli import handlers as commands

    parser = cli.build_parser()
    assert parser.get_default("handler") is commands.cmd_tui  # plain `redline`
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) == {"run", "presets", "export", "report", "preset-from", "sim", "ctl", "sweep"}
    handlers = {name: p.get_default("handler") for name, p in sub.choices.items()}
    assert handlers["sim"] is commands.cmd_sim and handlers["report"] is commands.cmd_report
    assert all(callable(h) for h in handlers.values()) and len(set(handlers.values())) == len(handlers)


def test_presets_lists_the_builtin_presets(capsys):
    assert main_in_process(["presets"]) == 0
    out = capsys.readouterr().out
    names = {line.split()[0] for line in out.splitlines()}
    assert {"quick", "until-it-breaks", "c1-probe", "doubling"} <= names
    quick = next(line for line in out.splitlines() if line.startswith("quick "))
    assert "C=8, 32, 128, 256" in quick  # its description


def test_sim_command_takes_the_sims_own_arguments(monkeypatch):
    """`redline sim ...` is parsed by the sim's own options and handed to the sim."""
    import redline.engine.sim.serve

    seen = []
    monkeypatch.setattr(redline.engine.sim.serve, "run_from_args", lambda a: seen.append(a) or 0)
    assert main_in_process(["sim", "--port", "30123", "--sim-profile", "fragile", "--seed", "7", "--set", "error_429_rate=0.1"]) == 0
    (a,) = seen
    assert (a.host, a.port, a.profile, a.seed, a.overrides) == ("127.0.0.1", 30123, "fragile", 7, [("error_429_rate", "0.1")])


def test_deeply_nested_preset_is_one_line_not_a_traceback(tmp_path, booby_traps, capsys):
    f = tmp_path / "deep.toml"
    f.write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
    try:
        rc = main_in_process(["run", str(f), "--headless", "--url", "http://127.0.0.1:9"])
    except Exception as exc:  # noqa: BLE001 - a traceback for the operator
        pytest.fail(f"traceback: {exc.__class__.__name__}")
    err = capsys.readouterr().err
    assert rc == BAD and len(err.splitlines()) == 1 and "deep.toml" in err


def test_python_dash_m_tui_cli_gives_one_line_too():
    """`python -m redline.tui.cli` runs tui/cli/__main__.py: its UsageError must still be the one caught."""
    r = run_cli(["--url", "ftp://127.0.0.1:1"], command=[sys.executable, "-m", "redline.tui.cli"])
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == BAD and len(r.stderr.splitlines()) == 1


# -- found while hardening: fixes outside the files this suite's author owns ----------------
LEAD_CASES = {
    "out-uncreatable": (["run", QUICK, "--headless", "--url", "http://127.0.0.1:9", "--out", "/proc/redline-no-such/s"], ("/proc/redline-no-such",)),
    "out-under-a-file": (["--url", "http://127.0.0.1:9", "--out", "{D}/c0.toml/s"], ("c0.toml",)),
    "out-name-too-long": (["--url", "http://127.0.0.1:9", "--out", "o" * 5000], ("--out",)),
    "compare-name-too-long": (["--url", "http://127.0.0.1:9", "--compare", "c" * 5000], ("--compare",)),
    "report-name-too-long": (["report", "r" * 5000], ()),
    "export-name-too-long": (["export", "e" * 5000, "--format", "csv"], ()),
}


@pytest.mark.parametrize("name", list(LEAD_CASES))
def test_bad_paths_are_one_line_before_any_connection(data_dir, booby_traps, capsys, name):
    argv, needles = LEAD_CASES[name]
    try:
        rc = main_in_process([a.replace("{D}", str(data_dir)) for a in argv])
    except Exception as exc:  # noqa: BLE001 - a traceback for the operator
        pytest.fail(f"traceback: {exc.__class__.__name__}: {str(exc)[:100]}")
    err = capsys.readouterr().err
    assert booby_traps == [], "connected before checking the path"
    assert rc == BAD and len(err.splitlines()) == 1, err
    assert all(n in err for n in needles), err


def test_commands_other_than_sim_do_not_load_the_sim():
    """The sim's options come from engine/sim/serve.py (aiohttp: ~0.2 s to import), added only
    when `sim` is parsed: `redline --help` and the other commands start without it."""
    code = ("import sys; from redline.tui.cli import build_parser; p = build_parser(); "
            "p.parse_args(['presets']); p.format_help(); print('redline.engine.sim.serve' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "False", r.stderr
