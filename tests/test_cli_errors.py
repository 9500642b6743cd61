"""Operator faults through the real CLI: exit 2 for bad input (3 for an unreachable target),
exactly one line on stderr naming the value and what is accepted, no traceback, and nothing
connected to or started before the arguments are checked.

Every case runs `python -m redline.tui.cli ...` in a subprocess (CI=true, no tty, stdin closed); the
cases run concurrently once per module, each test then checks its own result. Where a case
needs a syntactically good --url, it points at a listener the test owns that counts the
connections it gets: it must get none.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
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
    "url-with-profile": Case(["--url", "{URL}", "--profile", "fragile"], BAD, ("--profile", "--url")),
    "profile-unknown": Case(["--profile", "nope"], BAD, ("'nope'", "healthy")),
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


# The real process for a case of each kind (a subprocess costs ~0.5 s of CPU: the rest of the
# matrix runs in-process below, with the same checks).
THROUGH_THE_CLI = [
    "concurrency-abc", "url-wrong-path", "dataset-empty", "preset-bad-value", "unreachable", "unreachable-headless",
]


def redline_command() -> list[str]:
    """The installed console script (what an operator runs), else its exact equivalent."""
    script = Path(sys.executable).with_name("redline")
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from tui.cli import main; sys.exit(main())"]


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
        return dict(zip(THROUGH_THE_CLI, pool.map(one, THROUGH_THE_CLI)))


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

    monkeypatch.setattr(engine.sim.serve, "spawn_sim_process", no_sim)
    monkeypatch.setattr(engine.sim.serve, "start_sim_thread", no_sim)
    monkeypatch.setattr(httpx.AsyncClient, "send", no_send)
    monkeypatch.setattr(tui.run_app, "run_tui", no_tui)  # it runs the engine in another process
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
NO_URL_CASES = {
    "dataset-missing": ["--dataset", "jsonl:{D}/missing.jsonl"],
    "concurrency-above-max": ["--concurrency", "2000"],
    "profile-unknown": ["--profile", "nope"],
    "preset-bad": ["run", "{D}/c0.toml", "--headless"],
    "preset-bad-dataset": ["run", "{D}/ds.toml", "--headless"],
    "preset-good-but-bad-out": ["run", QUICK, "--headless", "--out", "{D}/c0.toml"],
}


@pytest.mark.parametrize("name", list(NO_URL_CASES))
def test_bad_input_without_url_starts_no_sim(tmp_path, booby_traps, capsys, name):
    """With no --url redline would start its built-in sim: not before the arguments pass."""
    write_data(tmp_path)
    rc = main_in_process([a.replace("{D}", str(tmp_path)) for a in NO_URL_CASES[name]])
    err = capsys.readouterr().err
    assert rc == BAD, err
    assert booby_traps == []
    assert len(err.splitlines()) == 1 and "Traceback" not in err


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
    """`python -m redline.tui.cli` runs cli.py as __main__: its UsageError must still be the one caught."""
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
