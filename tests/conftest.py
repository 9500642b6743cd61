"""Shared fixtures: simulated servers the tests start themselves, on 127.0.0.1 only.

Tests that start a server are marked `server`: automatically when they use one of the
fixtures in SERVER_FIXTURES (below), explicitly (`pytest.mark.server`) when a test starts one
itself. `python -m pytest -m 'not server'` runs the pure logic (parsers, histograms, rules,
formatting) alone, in seconds. Helpers shared by the test modules are in tests/helpers.py.

Parallel runs (pytest-xdist, `-n auto`, as .ci/run does): every server a test starts listens on
a port the OS picks (port 0), so workers never collide; the one local Ray cluster runs in its
own xdist group. `slow` marks the few long end-to-end tests (kept in CI; `-m 'not slow'` for a
quick pass).

Hypothesis: the `ci` profile (the default) runs each fuzzer's examples as sized by
`helpers.examples` (a quarter of the written count, at least hypothesis' own 100);
`--hypothesis-profile=thorough` runs the counts as written. Neither has a deadline: a slow
example on a loaded machine is not a failure (pytest-timeout bounds every test).
"""

from __future__ import annotations

from typing import Callable, Iterator

import pytest
from hypothesis import settings

from redline.engine.sim.serve import SimProcess, spawn_sim_process

# Re-exported for the modules that import them from here.
from helpers import sim_state, sim_state_async, until, wait_for  # noqa: F401

# Fixtures that start a simulated server, an HTTP server or a redline process that starts one:
# every test that uses one (directly or through another fixture) is marked `server`.
SERVER_FIXTURES = frozenset({
    "sim_factory",  # here
    "healthy_sim",  # here
    "shared_sim",  # here: one sim per module
    "compare_runs",  # tests/test_compare.py: two `redline run --headless` against built-in sims
    "capped_run",  # tests/test_step_truth.py: a preset run against its own sim
    "results",  # tests/test_cli_errors.py: redline processes against a listening socket
})


settings.register_profile("ci", deadline=None, print_blob=True)
settings.register_profile("thorough", deadline=None, print_blob=True)
settings.load_profile("ci")  # `--hypothesis-profile=NAME` (hypothesis' own option) loads another


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    server = pytest.mark.server
    for item in items:
        if SERVER_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(server)


@pytest.fixture
def sim_factory() -> Iterator[Callable[..., SimProcess]]:
    """make(profile, seed, extra_args) -> a sim process of this test's own (stopped after it)."""
    started: list[SimProcess] = []

    def make(profile: str = "healthy", seed: int = 0, extra_args: tuple[str, ...] = ()) -> SimProcess:
        sim = spawn_sim_process(profile=profile, seed=seed, extra_args=extra_args)
        started.append(sim)
        assert sim.url.startswith("http://127.0.0.1:")
        return sim

    yield make
    for sim in started:
        sim.stop()


@pytest.fixture
def healthy_sim(sim_factory) -> SimProcess:
    """A healthy sim of this test's own (for tests whose counts must start from zero)."""
    return sim_factory("healthy")


@pytest.fixture(scope="module")
def shared_sim() -> Iterator[Callable[..., SimProcess]]:
    """get(profile="healthy", *extra_args) -> one sim per module and settings, shared by the
    module's tests that leave it as they found it (their requests ended, no fault injected
    mid-test); stopped after the module."""
    sims: dict[tuple, SimProcess] = {}

    def get(profile: str = "healthy", *extra_args: str) -> SimProcess:
        key = (profile, extra_args)
        if key not in sims:
            sims[key] = spawn_sim_process(profile=profile, seed=0, extra_args=extra_args)
            assert sims[key].url.startswith("http://127.0.0.1:")
        return sims[key]

    yield get
    for sim in sims.values():
        sim.stop()


@pytest.fixture
def utc(monkeypatch):
    """Times of day in UTC, whatever the machine's zone (screen pictures and texts)."""
    import time

    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()
