"""The TUI's keys for finding the limit (Pilot, against a sim the test starts): `l` the probe
lane, `o` SLOs typed live, `k` a knee search that any concurrency key cancels."""

from __future__ import annotations

import pytest

from redline.engine.core.config import EngineConfig
from redline.engine.host import EngineThread
from redline.engine.workload.prompts import WorkloadConfig
from redline.tui.app import RedlineApp
from redline.tui.widgets.header import StatusHeader
from redline.tui.widgets.live_panels import LivePanels

from helpers import FAST_SIM, settle

FAST = FAST_SIM


@pytest.fixture
def host(sim_factory, tmp_path):
    sim = sim_factory("healthy", extra_args=FAST)
    h = EngineThread(EngineConfig(url=sim.url, concurrency=4, workload=WorkloadConfig(input_len=16, output_len=24),
                                  out_dir=tmp_path / "session", calibrate=False, use_nvml=False))
    h.start()
    yield h
    h.stop()


def panel_text(app: RedlineApp) -> str:
    return "\n".join(str(w.render()) for w in app.query_one(LivePanels).query("*") if w.display)


async def test_lane_slo_and_search_keys(host):
    app = RedlineApp(host, step=4)
    async with app.run_test(size=(80, 24)) as pilot:
        assert await settle(pilot, lambda: host.snapshot.target_c == 4)
        # l: the probe lane beside the load, on screen with its ratio to the load
        await pilot.press("l")
        assert await settle(pilot, lambda: host.snapshot.lane_on and host.snapshot.lane_ttft_ms is not None)
        assert await settle(pilot, lambda: "lane C=1" in panel_text(app) and "load ×" in panel_text(app))
        await pilot.press("l")
        assert await settle(pilot, lambda: not host.snapshot.lane_on)
        # o: SLOs typed live; a bad one changes nothing and says why
        await pilot.press("o")
        await pilot.pause()
        for ch in "ttft=fast":
            await pilot.press(ch)
        await pilot.press("enter")
        await pilot.pause()
        assert host.snapshot.slo == ""
        await pilot.press("o")
        await pilot.pause()
        for ch in "ttft=2s":
            await pilot.press(ch)
        await pilot.press("enter")
        assert await settle(pilot, lambda: "TTFT≤2 s" in host.snapshot.slo)
        assert await settle(pilot, lambda: host.snapshot.goodput_tok_s is not None and host.snapshot.goodput_tok_s > 0)
        assert await settle(pilot, lambda: app.query_one("#m-good").display)  # the goodput row beside throughput (drawn at the next pull)
        # k: a knee search from the current C; a concurrency key takes the wheel back
        await pilot.press("k")
        assert await settle(pilot, lambda: host.snapshot.preset_running and host.snapshot.state == "preset")
        assert await settle(pilot, lambda: "[PRESET]" in app.query_one(StatusHeader).render().plain)
        await pilot.press("right_square_bracket")
        assert await settle(pilot, lambda: not host.snapshot.preset_running)
        assert await settle(pilot, lambda: any("cancelled by the operator" in line.text for line in host.snapshot.log))
