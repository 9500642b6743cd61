"""The TUI driven by keys (Textual's Pilot) against a sim the test starts."""

from __future__ import annotations

import inspect
import json
import time

import pytest

from redline.engine.constants import MIN_LIVE_STEP_S
from redline.engine.core.config import EngineConfig
from redline.engine.host import EngineProcess, EngineThread
from redline.engine.workload.prompts import WorkloadConfig
from redline.tui.app import RedlineApp
from redline.tui.widgets.header import StatusHeader
from redline.tui.widgets.log_view import EventLog
from redline.tui.widgets.step_table import StepTable

from helpers import sim_running_async as running, sim_state_async

LONG = WorkloadConfig(input_len=16, output_len=120)  # requests outlive a key press
SHORT = WorkloadConfig(input_len=16, output_len=8)  # requests that complete at once


async def settle(pilot, pred, timeout: float = 3.0) -> bool:
    """Let the app run until pred() (plain or awaitable) holds; bounded."""

    async def holds() -> bool:
        ok = pred()
        return bool(await ok if inspect.isawaitable(ok) else ok)

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if await holds():
            return True
        await pilot.pause(0.1)
    return await holds()


def header(app: RedlineApp) -> str:
    return app.query_one(StatusHeader).render().plain


@pytest.fixture
def sim(shared_sim):
    """One healthy sim for the module: every test's engine stops (cancelling its requests)
    before the next starts, and each waits for the counts it asserts."""
    return shared_sim("healthy")


@pytest.fixture
def host(sim, tmp_path):
    h = EngineThread(EngineConfig(url=sim.url, concurrency=4, workload=LONG, out_dir=tmp_path / "session", calibrate=False))
    h.start()
    yield h
    h.stop()


async def test_keys_change_concurrency_and_server_follows(host, sim):
    url = sim.url
    app = RedlineApp(host, step=8)
    async with app.run_test(size=(80, 24)) as pilot:
        assert await settle(pilot, lambda: host.snapshot.target_c == 4 and "C=4" in header(app))
        assert await settle(pilot, lambda: _q(url, 4))
        await pilot.press("right_square_bracket")
        assert await settle(pilot, lambda: _q(url, 8), 1.5)
        assert "C=8" in header(app) and host.snapshot.target_c == 8
        await pilot.press("plus")
        assert await settle(pilot, lambda: _q(url, 16), 1.5)
        assert host.engine.controller.concurrency == 16
        aborted = (await sim_state_async(url))["aborted"]
        await pilot.press("minus")
        assert await settle(pilot, lambda: host_target(host) == 8 and host.snapshot.target_c == 8)
        # lowering cancels nothing: the requests running finish normally (no new one starts)
        assert (await sim_state_async(url))["aborted"] == aborted
        await pilot.press("left_square_bracket")
        assert await settle(pilot, lambda: host.snapshot.target_c == 4)
        await pilot.press("up")
        assert await settle(pilot, lambda: host.snapshot.target_c == 12)
        await pilot.press("down", "down")
        assert await settle(pilot, lambda: host.snapshot.target_c == 1), "never below 1"


def host_target(host) -> int:
    return host.engine.controller.concurrency


async def _q(url: str, n: int) -> bool:
    return await running(url) == n


async def _le(url: str, n: int) -> bool:
    return await running(url) <= n


@pytest.mark.timing  # the abort key's effect within 2.5 s of the press (2.56 s in CI beside the server part)
async def test_abort_probe_restore_pause(host, sim):
    url = sim.url
    app = RedlineApp(host, step=8)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("right_square_bracket", "right_square_bracket")  # 16
        assert await settle(pilot, lambda: _q(url, 16), 2.0)
        t0 = time.monotonic()
        await pilot.press("a")
        assert await settle(pilot, lambda: _le(url, 1), 1.0)  # the sim holds <= 1 within 1 s of the key's handling
        # and of the key itself, with Pilot's own wait after the press (CI's loaded cores: 1.53 s once)
        assert time.monotonic() - t0 < 2.5
        assert await settle(pilot, lambda: "PROBE" in header(app) and "C=1" in header(app))
        assert "was C=16" in header(app)
        await pilot.press("r")
        assert await settle(pilot, lambda: host.snapshot.target_c == 16 and "RUNNING" in header(app))
        assert await settle(pilot, lambda: _q(url, 16), 1.5)
        await pilot.press("space")
        assert await settle(pilot, lambda: "PAUSED" in header(app))
        assert host.engine.controller.paused
        await pilot.press("space")
        assert await settle(pilot, lambda: not host.engine.controller.paused)


async def test_typed_concurrency_and_bad_value(host, sim):
    app = RedlineApp(host, step=8)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await pilot.press("c")
        await pilot.press(*"12", "enter")
        assert await settle(pilot, lambda: host.snapshot.target_c == 12)
        await pilot.press("c")
        await pilot.press(*"abc", "enter")
        await pilot.pause(0.3)
        assert host.snapshot.target_c == 12, "a bad value changes nothing"
        assert any("expected a whole number" in str(n.message) for n in app._notifications)
        await pilot.press("c")
        await pilot.press(*"0", "enter")
        await pilot.pause(0.3)
        assert host.snapshot.target_c == 12
        # above --max-concurrency asks first; "n" keeps the current value
        await pilot.press("c")
        await pilot.press(*"5000", "enter")
        await pilot.pause(0.2)
        await pilot.press("n")
        await pilot.pause(0.3)
        assert host.snapshot.target_c == 12


async def test_step_table_and_log_fill(host, sim):
    app = RedlineApp(host, step=8)
    async with app.run_test(size=(80, 24)) as pilot:
        # hold C=4 long enough to be a step
        cur = lambda: host.snapshot.current_step  # noqa: E731
        assert await settle(pilot, lambda: cur() is not None and cur().duration_s >= MIN_LIVE_STEP_S + 0.2, 6.0)
        await pilot.press("right_square_bracket")
        assert await settle(pilot, lambda: len(host.snapshot.steps) >= 1, 3.0)
        table = app.query_one(StepTable)
        assert await settle(pilot, lambda: table.row_count >= 2, 3.0)  # C=4 done, C=8 live
        assert str(table.get_row_at(0)[0]).startswith("4")
        log = app.query_one(EventLog)
        assert any("C=8" in line for line in log.lines_text)


async def test_quit_stops_load_and_completes_session(sim, tmp_path):
    """q with the engine in its own process (as `redline` runs it)."""
    out = tmp_path / "s"
    host = EngineProcess(EngineConfig(url=sim.url, concurrency=6, workload=LONG, out_dir=out))
    host.start()
    try:
        app = RedlineApp(host, step=8)
        async with app.run_test(size=(80, 24)) as pilot:
            assert await settle(pilot, lambda: _q(sim.url, 6), 5.0)
            assert await settle(pilot, lambda: "C=6" in header(app))
            t0 = time.monotonic()
            await pilot.press("q")
            await settle(pilot, lambda: not app.is_running, 5.0)
        assert time.monotonic() - t0 < 3.0
    finally:
        host.stop()
    assert await running(sim.url) == 0
    meta = json.loads((out / "meta.json").read_text())
    assert meta["ended_at"] and meta["end_reason"] == "quit"
    assert (out / "requests.ndjson").stat().st_size > 0


async def test_preset_key_runs_a_preset_and_a_key_cancels_it(host, sim, tmp_path):
    d = tmp_path / "presets"
    d.mkdir()
    (d / "mini.toml").write_text(
        "[workload]\ninput_len = 16\noutput_len = 32\n"
        "[ramp]\nconcurrency = [6, 7]\nwarmup_s = 0\nhold_s = 30\nmin_requests = 1\n"
    )
    app = RedlineApp(host, step=8, presets_dir=d)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("p")
        await pilot.pause(0.3)
        await pilot.press("enter")
        assert await settle(pilot, lambda: host.snapshot.preset_running and host.snapshot.target_c == 6, 3.0)
        assert await settle(pilot, lambda: "PRESET" in header(app) and "mini step 1/2" in header(app), 3.0)
        assert await settle(pilot, lambda: _q(sim.url, 6), 2.0)
        await pilot.press("right_square_bracket")  # the operator takes over
        assert await settle(pilot, lambda: not host.snapshot.preset_running and host.snapshot.target_c == 12, 3.0)
        assert await settle(pilot, lambda: any("cancelled by the operator" in l.text for l in host.snapshot.log), 2.0)


async def test_export_key_writes_parquet(sim, tmp_path, request):
    host = EngineThread(EngineConfig(url=sim.url, concurrency=4, workload=SHORT, out_dir=tmp_path / "session", calibrate=False))
    host.start()
    request.addfinalizer(host.stop)
    app = RedlineApp(host, step=8)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        assert await settle(pilot, lambda: host.snapshot.completed >= 1, 8.0)
        await pilot.press("e")
        export = tmp_path / "session" / "export"
        assert await settle(pilot, lambda: (export / "requests.parquet").exists(), 5.0)
        assert await settle(pilot, lambda: any("exported 3 tables" in str(n.message) for n in app._notifications), 3.0)
    import polars as pl

    assert pl.read_parquet(export / "requests.parquet").height >= 1


async def test_graph_key_switches_to_the_curve(host, sim):
    app = RedlineApp(host, step=8)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("g")
        await pilot.pause(0.2)
        assert app.has_class("-graph")
        assert app.query_one("#curve").display and not app.query_one("#body").display
        await pilot.press("g")
        await pilot.pause(0.2)
        assert not app.has_class("-graph") and app.query_one("#body").display
