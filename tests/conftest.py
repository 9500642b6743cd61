"""Shared fixtures: simulated servers the tests start themselves, on 127.0.0.1 only.

The tests mirror the code (docs/architecture.md, "tests/"; tests/unit/test_layout.py holds it):
tests/unit/<package>/ for each package of engine/ and tui/, tests/integration/ for what needs a
server, tests/e2e/ for the TUI and the CLI as a user drives them. Every folder of test modules is
a package (an __init__.py: one basename may sit in two folders); this folder is on sys.path, so
`from helpers import ...` and `from e2e.test_screen import ...` work from any of them.

Tests that start a server are marked `server`: automatically when they use one of the
fixtures in SERVER_FIXTURES (below), explicitly (`pytest.mark.server`) when a test starts one
itself. `python -m pytest -m 'not server'` runs the pure logic (parsers, histograms, rules,
formatting) alone, in seconds. Helpers shared by the test modules are in tests/helpers/ (a package: its __init__ says
which module holds what).

Parallel runs (pytest-xdist, `-n auto --dist loadgroup`): every server a test starts listens on
a port the OS picks (port 0), so workers never collide; a module whose module-scoped fixture
is a long run (or the local Ray cluster) stays on one worker. .ci/run has three parts: the tests
that start no server (`-m 'not server and not timing'`, one worker a core), those that do
(`-m 'server and not timing'`, SERVER_WORKERS_PER_CORE a core: they mostly wait on the sims'
real time), then the `timing` tests, which measure the machine's own timing, by themselves
(one worker a core; one that fails beside another runs again alone, and that verdict counts). `slow`
marks the few long end-to-end tests (kept in CI; `-m 'not slow'` for a quick pass).

Hypothesis: the `ci` profile (the default) runs each fuzzer's examples as sized by
`helpers.examples` (tests/helpers/fuzzing.py) (a quarter of the written count, at least hypothesis' own 100);
`--hypothesis-profile=thorough` runs the counts as written. Neither has a deadline: a slow
example on a loaded machine is not a failure (pytest-timeout bounds every test).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest
from hypothesis import settings
from textual import _wait as textual_wait

from redline.engine.load.worker_count import usable_cores
from redline.engine.sim.serve import SimProcess, WarmSim, spawn_sim_process

# Fixtures that start a simulated server, an HTTP server or a redline process that starts one:
# every test that uses one (directly or through another fixture) is marked `server`.
SERVER_FIXTURES = frozenset({
    "sim_factory",  # here
    "healthy_sim",  # here
    "shared_sim",  # here: one sim per module
    "compare_runs",  # tests/integration/test_compare.py: two `redline run --headless` against built-in sims
    "capped_run",  # tests/integration/test_step_truth.py: a preset run against its own sim
    "results",  # tests/e2e/test_cli_errors.py: redline processes against a listening socket
})


# Textual's Pilot waits for the app to be idle after each key and pause (textual/_wait.py
# wait_for_idle: until the *process* used < 1 ms of CPU in 20 ms, at most 1 s). A test that
# runs the engine in a thread of this process (EngineThread) is never idle by that measure: every
# key press waited ~2 s and every pause ~1 s (a 20-key test took 35-40 s). What Pilot means to wait
# for is the app's own thread, as it is in `redline`, where the engine is a process of its own: its
# CPU time is what the wait reads here. The waits still end at once when the app is idle, and every
# condition a test reads is still waited on by the test itself (helpers.settle, until).
textual_wait.process_time = time.thread_time


settings.register_profile("ci", deadline=None, print_blob=True)
settings.register_profile("thorough", deadline=None, print_blob=True)
settings.load_profile("ci")  # `--hypothesis-profile=NAME` (hypothesis' own option) loads another


# Module-scoped fixtures that are worth one setup per module (minutes of runs, or a Ray
# cluster): under xdist (--dist loadgroup) their module's tests stay on one worker.
MODULE_FIXTURES = frozenset({"compare_runs", "results", "capped_run", "ray_head"})

# The few long end-to-end runs (knee searches, whole presets, a Ray cluster): `@pytest.mark.slow`
# in their test files, so that `-m 'not slow'` gives a quick pass; CI runs them all.
# SLOW_FIXTURES mark the tests that use them.
SLOW_FIXTURES = frozenset({"compare_runs"})  # tests/integration/test_compare.py: two headless runs


# Tests that measure the machine's own timing (event-loop lag, wall-clock accuracy of sends and
# timeline rows, latencies checked against the sim's clock, a knee read off a measured curve):
# beside other tests on the same cores they read the other tests' load, as redline should.
# Marked in their test files (`@pytest.mark.timing`, with why beside the mark, or a module's
# `pytestmark`), so a renamed test keeps its mark; .ci/run runs them after the others, by
# themselves (one worker a core: they mostly wait on their sims), and one that fails beside
# another again, alone. TIMING_FIXTURES mark the tests that use them.
TIMING_FIXTURES = frozenset({"capped_run"})  # tests/integration/test_step_truth.py: one run read by its tests


def pytest_ignore_collect(collection_path, config: pytest.Config) -> bool | None:
    """`-m timing` (.ci/run's last part, by itself on the machine) collects only the modules that
    can hold a timing test: one that writes `mark.timing` itself or uses a TIMING_FIXTURES
    fixture. Collecting the other ~50 (assertion rewriting and
    imports, ~8 s on 2 cores) only to deselect them is time the serial part waits for. Any
    other -m expression, or a file named on the command line, collects as usual."""
    if (config.getoption("markexpr", "") or "").strip() != "timing":
        return None
    name = collection_path.name
    if not (name.startswith("test_") and name.endswith(".py")):
        return None
    if any(Path(a.split("::")[0]).is_file() for a in config.args):
        return None
    text = collection_path.read_text(encoding="utf-8", errors="replace")
    if "mark.timing" in text or any(f in text for f in TIMING_FIXTURES):
        return None
    return True


# `-n auto`: one xdist worker a core, except for a run of only the tests that start servers
# outside the timing lane (.ci/run's second part, `-m 'server and not timing'`): those wait on
# simulated servers in real time (their steps, warm-ups and holds), and one worker a core left
# 56-60 % of two cores idle (280 s). Two a core: 162 s, 29 % idle, every test passing. Three:
# 137 s, 13 % idle, but in CI's clean clone the drain test's sim at a quarter time scale fell
# behind its own story (4 of the overload step's requests answered before its close). That test
# is a timing test now (it runs in the last part, by itself), and the part has grown (sweeps):
# on a quiet clean clone two a core took 299 s, three 223 s, every test passing, each test's
# duration unchanged (they wait on their sims' real time). The tests
# that start no server (Textual drawing, parsers) are CPU-bound and keep one a core (three
# workers on two cores: 78 -> 70 s, with 19 % more CPU spent).
SERVER_WORKERS_PER_CORE = 3


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    cores = usable_cores()  # the cores this process may run on, as the app reads them
    expr = " ".join((config.getoption("markexpr", "") or "").split())
    only_servers = "server" in expr and "not server" not in expr and "not timing" in expr
    return cores * SERVER_WORKERS_PER_CORE if only_servers else cores


@pytest.hookimpl(tryfirst=True)  # before xdist reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    server = pytest.mark.server
    for item in items:
        names = getattr(item, "fixturenames", ())
        if SERVER_FIXTURES.intersection(names):
            item.add_marker(server)
        if MODULE_FIXTURES.intersection(names):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))  # the module's path
        if SLOW_FIXTURES.intersection(names):
            item.add_marker(pytest.mark.slow)
        if TIMING_FIXTURES.intersection(names):
            item.add_marker(pytest.mark.timing)


# -- the sims the fixtures start ---------------------------------------------------------------
# Most of a sim's start (~0.7 s) is Python's start-up and imports, and most of its stop (~0.2 s)
# waiting for it to exit. Outside the timing lane, each worker keeps one sim process started
# ahead of need (WarmSim: imported, waiting for its options; the server it then runs is the one
# spawn_sim_process starts), and a test's sims are stopped by a thread of their own after it
# (SIGTERM, SIGKILL after 3 s, as SimProcess.stop). A `timing` test gets both the plain way:
# nothing of another sim runs beside it.
_warm: WarmSim | None = None
_stopping: list[threading.Thread] = []


def _start_sim(profile: str, seed: int, extra_args: tuple[str, ...], ahead: bool) -> SimProcess:
    global _warm
    if not ahead:
        return spawn_sim_process(profile=profile, seed=seed, extra_args=extra_args)
    warm, _warm = _warm, WarmSim()  # the next one imports while this test runs
    if warm is None:
        warm = WarmSim()
    return warm.start(profile, seed, extra_args)


def _stop_sims(sims: list[SimProcess], ahead: bool) -> None:
    for sim in sims:
        if sim.proc.poll() is None:
            sim.proc.terminate()
    if not ahead:
        for sim in sims:
            sim.stop()
        return
    for sim in sims:
        t = threading.Thread(target=sim.stop, name="sim-stop", daemon=True)
        t.start()
        _stopping.append(t)
    _stopping[:] = [t for t in _stopping if t.is_alive()]


def pytest_sessionfinish(session: pytest.Session) -> None:
    global _warm
    if _warm is not None:
        _warm.close()
        _warm = None
    for t in _stopping:
        t.join(10.0)


def _ahead(request: pytest.FixtureRequest) -> bool:
    """Sims started ahead and stopped behind, unless this is a timing test."""
    return request.node.get_closest_marker("timing") is None


@pytest.fixture
def sim_factory(request) -> Iterator[Callable[..., SimProcess]]:
    """make(profile, seed, extra_args) -> a sim process of this test's own (stopped after it)."""
    started: list[SimProcess] = []
    ahead = _ahead(request)

    def make(profile: str = "healthy", seed: int = 0, extra_args: tuple[str, ...] = ()) -> SimProcess:
        sim = _start_sim(profile, seed, tuple(extra_args), ahead)
        started.append(sim)
        assert sim.url.startswith("http://127.0.0.1:")
        return sim

    yield make
    _stop_sims(started, ahead)


@pytest.fixture
def healthy_sim(sim_factory) -> SimProcess:
    """A healthy sim of this test's own (for tests whose counts must start from zero)."""
    return sim_factory("healthy")


@pytest.fixture(scope="module")
def shared_sim(request) -> Iterator[Callable[..., SimProcess]]:
    """get(profile="healthy", *extra_args) -> one sim per module and settings, shared by the
    module's tests that leave it as they found it (their requests ended, no fault injected
    mid-test); stopped after the module."""
    sims: dict[tuple, SimProcess] = {}
    ahead = not any(item.get_closest_marker("timing") for item in request.session.items
                    if item.module is request.module)

    def get(profile: str = "healthy", *extra_args: str) -> SimProcess:
        key = (profile, extra_args)
        if key not in sims:
            sims[key] = _start_sim(profile, 0, extra_args, ahead)
            assert sims[key].url.startswith("http://127.0.0.1:")
        return sims[key]

    yield get
    _stop_sims(list(sims.values()), ahead)


@pytest.fixture
def utc(monkeypatch):
    """Times of day in UTC, whatever the machine's zone (screen pictures and texts)."""
    import time

    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


# -- the command line refuses before anything starts ---------------------------------------------
@pytest.fixture
def nothing_starts(monkeypatch) -> list[str]:
    """Starting the built-in sim, any HTTP request or the TUI is recorded and fails."""
    import httpx

    import redline.engine.sim.serve
    import redline.tui.run_app

    touched: list[str] = []

    def no(what):
        def f(*a, **k):
            touched.append(what)
            raise AssertionError(f"{what} started before the arguments were checked")

        return f

    async def no_send(self, *a, **k):
        touched.append("http")
        raise AssertionError("a connection was made before the arguments were checked")

    monkeypatch.setattr(redline.engine.sim.serve, "spawn_sim_process", no("sim"))
    monkeypatch.setattr(redline.engine.sim.serve, "start_sim_thread", no("sim"))
    monkeypatch.setattr(httpx.AsyncClient, "send", no_send)
    monkeypatch.setattr(redline.tui.run_app, "run_tui", no("tui"))
    return touched
