"""One answer, one record (issue 35): the knee, max throughput, the break and each step's final
figures read the same in the headless end table, `redline report`, the HTML page, the gate
and summary.json; every period held at one load has its row; a cancelled search answers no
knee."""

from __future__ import annotations

import asyncio
import json
import subprocess

from redline.engine.core.commands import SetConcurrency
from redline.engine.core.config import EngineConfig
from redline.engine.core.engine import Engine
from redline.engine.preset.knee import knee_search_preset
from redline.engine.run.preset_runner import start_preset
from redline.engine.workload.prompts import WorkloadConfig

from helpers import ROOT, finish, redline_command, start_headless, until

FAST = ("--set", "decode_base_s=0.01", "--set", "decode_per_seq_s=0.0001", "--set", "ceiling_tok_s=100000")


def _table(text: str) -> list[str]:
    """The step table's lines, from its header to the knee line."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("C  dur s"))
    end = next(i for i, ln in enumerate(lines) if ln.startswith(("knee ", "no knee")))
    return [ln.replace("(client-limited)", "").rstrip() for ln in lines[start:end + 1]]


def test_a_server_capped_at_16_has_one_knee_everywhere(sim_factory, tmp_path):
    """[4, 8, 16, 32] on 16 slots: C=32 gives no more than C=16 (a queue), so the knee is 16
    and the most tok/s at one of them; the end table, the report, the HTML page and the gate
    all say so, from the same final figures."""
    sim = sim_factory("healthy", extra_args=(*FAST, "--set", "max_running_requests=16"))
    preset = tmp_path / "cap16.toml"
    preset.write_text('[workload]\ninput_len = 16\noutput_len = 48\n'
                      "[ramp]\nconcurrency = [4, 8, 16, 32]\nwarmup_s = 0.5\nhold_s = 4\nmin_requests = 4\nmax_hold_s = 8\n"
                      "[stop]\nplateau_gain = 0.05\n[after]\nprobe_s = 0\n")
    out = tmp_path / "s"
    rc, stdout, err = finish(start_headless(sim.url, preset, out), timeout=90)
    assert rc == 0, (stdout, err)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["knee_concurrency"] == 16, summary
    top = summary["max_throughput_concurrency"]
    assert top in (16, 32) and summary["knee_reason"].startswith("within 5 % of the most output tok/s")
    assert summary["break"]["reason"] == "plateau" and summary["break"]["concurrency"] == 32
    knee_line = f"knee C=16 ({summary['knee_reason']}); max throughput C={top}"
    assert knee_line in stdout
    report = subprocess.run([*redline_command(), "report", str(out), "--no-plot"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert report.returncode == 0 and knee_line in report.stdout, report.stdout
    assert _table(stdout) == _table(report.stdout)  # one record: the same final figures, line for line
    for spec, want in (("knee<=16", 0), ("knee>=32", 4)):
        g = subprocess.run([*redline_command(), "report", str(out), "--no-plot", "--gate", spec], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert g.returncode == want and "knee C=16" in g.stdout + g.stderr, (spec, g.stdout, g.stderr)
    page = tmp_path / "r.html"
    h = subprocess.run([*redline_command(), "report", str(out), "--no-plot", "--html", str(page)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert h.returncode == 0, h.stderr
    html = page.read_text()
    assert "knee C=16 (within 5 % of the most output tok/s" in html and f"max throughput C={top}" in html
    assert '"knee":{"x":16,' in html and f'"max_throughput":{top}' in html  # the chart's markers


async def test_every_period_has_a_row_and_a_cancelled_search_answers_no_knee(sim_factory, tmp_path):
    """Live: C=8 held, C=12 for ~1 s (shorter than a step: its row is marked short), C=8
    again; then a knee search cancelled in its second point: the point it was measuring keeps
    its row, summary.json's search says cancelled, with no knee."""
    sim = sim_factory("healthy", extra_args=FAST)
    e = Engine(EngineConfig(url=sim.url, concurrency=8, workload=WorkloadConfig(input_len=16, output_len=32), out_dir=tmp_path / "s",
                            use_nvml=False))
    await e.start()
    try:
        await asyncio.sleep(3.5)
        e.set_concurrency(12)
        await asyncio.sleep(1.0)
        e.set_concurrency(8)
        await asyncio.sleep(3.5)
        e.set_concurrency(9)  # closes the second C=8 period
        assert await until(lambda: len(e.steps) >= 3, 5.0)
        loads = [(s.concurrency, s.short) for s in e.steps[:3]]
        assert loads == [(8, False), (12, True), (8, False)], loads
        start_preset(e, knee_search_preset(8, 64, e.config.workload))
        assert await until(lambda: e.book.search is not None or (e.book.current is not None and e.book.current.concurrency == 16), 30.0)
        await asyncio.sleep(0.5)
        e.execute(SetConcurrency(8))  # an operator key cancels the search
        assert await until(lambda: e.book.search is not None and e.book.search.get("cancelled"), 10.0), e.book.search
        search = e.book.search
        assert search["knee_concurrency"] is None and "cancelled" in search["knee_reason"]
        assert any(s.concurrency == 16 and s.phase == "measure" for s in e.steps)  # the point cut short keeps its row
    finally:
        await e.stop("test")
    summary = json.loads((tmp_path / "s" / "summary.json").read_text())
    assert summary["search"]["cancelled"] is True and summary["search"]["knee_concurrency"] is None
    assert any(s["short"] for s in summary["steps"])
