"""`--workers auto`, the default (issue 47): sized by this machine's measured capacity. One
process holds as many streams as keep its burst of reads within a share of the token interval
(a third where the kernel stamps reads, plain http://; a tenth where the loop stamps them,
https://), by a token's CPU measured at start (engine/load/token_cost.py) and the interval
assumed until the run measures it; at most one process per core free. While the run goes the
plan is made again from what it measured: auto's worker processes grow, anything else is
warned of, on screen and in the log, while it lasts (engine/core/replan.py)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from redline.engine.load import token_cost, worker_count
from redline.engine.load.worker_count import (
    Plan,
    auto_plan,
    crowded,
    crowded_warning,
    kernel_stamped,
    live_plan,
    per_process,
    plan,
)

US = 1e-6


def test_one_process_holds_what_keeps_its_burst_within_a_share_of_the_token_interval():
    # a token each 40 ms, 15 us a token: a third of 40 ms is 888 tokens' worth (kernel stamps), a tenth 266
    assert per_process(15 * US, 0.040) == 888 and per_process(15 * US, 0.040, kernel=False) == 266
    assert plan(888, 15 * US, 0.040, free=16).processes == 1
    two = plan(889, 15 * US, 0.040, free=16)
    assert (two.processes, two.needed, two.per_process) == (2, 2, 888)
    assert two.why == ("--workers auto: 2 worker processes for 889 streams: a token each 40 ms x 15.0 us per token here = "
                       "33% of a core; one process holds 888 (its reads within 33% of the token interval)")
    assert plan(1024, 15 * US, 0.040, free=16, kernel=False).processes == 4  # https://: the loop stamps reads
    assert plan(1024, 15 * US, 0.010, free=16).processes == 5  # a faster server: a shorter interval, more processes
    assert plan(1024, 5 * US, 0.040, free=16).processes == 1  # a faster machine (or the C road): fewer


def test_no_more_processes_than_cores_free():
    p = plan(4096, 15 * US, 0.040, free=2.0)
    assert (p.processes, p.needed) == (2, 5)
    assert p.why.endswith(f"; 5 would, 2.0 of {worker_count.usable_cores()} cores free")
    assert plan(4096, 15 * US, 0.040, free=0.0).processes == 1  # a machine kept busy by others: one process
    assert plan(4096, 15 * US, 0.040, free=1.6).processes == 2  # rounded: the coordinator takes ~10 % of one


def test_cores_free_are_the_usable_ones_the_machine_left_idle(monkeypatch):
    import collections

    import psutil

    T = collections.namedtuple("T", "user system idle iowait")
    samples = iter([T(10.0, 0.0, 10.0, 0.0), T(13.0, 0.0, 11.0, 0.0)])  # 3 of 4 core-seconds busy
    monkeypatch.setattr(psutil, "cpu_times", lambda: next(samples))
    assert worker_count.cores_free(4, sample_s=0.0) == 1.0
    samples = iter([T(10.0, 0.0, 10.0, 0.0), T(10.0, 0.0, 12.0, 2.0)])  # idle, some of it waiting on a disk
    assert worker_count.cores_free(2, sample_s=0.0) == 2.0


def test_a_run_one_process_surely_holds_measures_nothing(monkeypatch):
    def no(*a):
        raise AssertionError("measured")

    monkeypatch.setattr(worker_count, "measure_token_s", no)
    assert auto_plan(8) == Plan(1, 1, per_process(50 * US, 0.03), "")
    assert auto_plan(200).processes == 1
    monkeypatch.setattr(worker_count, "measure_token_s", lambda: 15 * US)
    monkeypatch.setattr(worker_count, "cores_free", lambda cores=None: 8.0)
    p = auto_plan(2048)
    assert p.processes == 4 and "a token each 30 ms (assumed until the run measures it) x 15.0 us" in p.why


def test_the_token_cost_is_measured_on_the_engines_own_read_path():
    """Every chunk written in the measure is read through the engine's path, and what one costs
    is a CPU time of this machine: between 0.2 us and 2 ms a chunk, whatever its load."""
    c = token_cost.measure(streams=16, rounds=4)
    assert c.chunks == 64 and c.read == 64
    assert 0.2 * US < c.read_s < 2e-3 and c.token_s == pytest.approx(c.read_s / token_cost.READ_PATH_SHARE)


def test_the_token_cost_is_measured_from_inside_a_running_loop_too():
    """A sweep starts each configuration's engine, and so `--workers auto`'s measure, from its
    own running loop: the measure runs in a thread of its own there (it died with 'Cannot run
    the event loop while another loop is running' at a sweep's peak of 256)."""
    import asyncio

    async def inside() -> token_cost.TokenCost:
        return token_cost.measure(streams=16, rounds=4)

    c = asyncio.run(inside())
    assert c.chunks == 64 and c.read == 64


def test_the_live_plan_reads_the_processes_cpu_per_token_received(monkeypatch):
    # 2 workers at 60 % of a core for 50k tok/s: 12 us a token; a token each 40 ms: 1111 each
    monkeypatch.setattr(worker_count, "usable_cores", lambda: 8)
    p = live_plan(2048, 2, cpu_pct=60.0, tok_s=50_000.0, interval_s=0.040, others_pct=400.0)
    assert p is not None and (p.processes, p.per_process) == (2, 1111) and not crowded(2048, 2, p.per_process)
    q = live_plan(4096, 2, cpu_pct=60.0, tok_s=50_000.0, interval_s=0.040, others_pct=400.0)
    assert q is not None and q.processes == 4 and crowded(4096, 2, q.per_process)
    assert live_plan(4096, 2, 60.0, 50_000.0, 0.040, others_pct=650.0).processes == 2  # 1.5 cores free: two
    assert live_plan(2048, 2, None, 50_000.0, 0.04) is None and live_plan(2048, 2, 60.0, 0.0, 0.04) is None
    assert live_plan(2048, 2, 60.0, 50_000.0, None) is None


def test_which_loads_are_kernel_stamped(monkeypatch):
    from redline.engine.client import kstamp

    monkeypatch.setattr(kstamp, "ENABLED", True)
    assert kernel_stamped(["http://a:8000", "http://b:8000"], "lean")
    assert not kernel_stamped(["http://a:8000", "https://b"], "lean")
    assert not kernel_stamped(["http://a:8000"], "httpx")
    monkeypatch.setattr(kstamp, "ENABLED", False)  # REDLINE_KSTAMP=0, or not Linux
    assert not kernel_stamped(["http://a:8000"], "lean")


def test_crowded_names_the_streams_the_processes_and_what_would_help(monkeypatch):
    monkeypatch.setattr(worker_count, "usable_cores", lambda: 16)
    p = plan(2048, 15 * US, 0.040, free=16)
    one = crowded_warning(2048, 1, p, kernel=True, why="the load started in this process and stays in it")
    assert one == ("2048 streams in one process, over 888 per process: its reads may fall a token behind (marked "
                   "coalesced, out of ITL); --workers 3 at start splits it (the load started in this process and stays in it)")
    loop = crowded_warning(512, 1, plan(512, 15 * US, 0.040, free=16, kernel=False), kernel=False)
    assert loop.startswith("512 streams in one process, over 266 per process: ITL's tail may read a few ms high (reads stamped by the loop)")
    short = crowded_warning(4096, 2, plan(4096, 15 * US, 0.040, free=2.0), kernel=True)
    assert short.startswith("4096 streams in 2 worker processes (2048 each)")
    assert short.endswith("more workers need more cores than the 16 here (5 would, 2.0 of 16 cores free)")


def _config(argv: list[str], monkeypatch, cores: int = 16, token_s: float = 15 * US):
    """checked_config for `redline ARGV` (nothing starts: the contract of checked_config), on a
    machine of `cores` cores, all free, whose measured token cost is `token_s`."""
    from redline.engine.preset import as_search, load_preset, resolve_preset
    from redline.tui import cli
    from redline.tui.cli.launch import checked_config

    monkeypatch.setattr(worker_count, "usable_cores", lambda: cores)
    monkeypatch.setattr(worker_count, "cores_free", lambda c=None: float(cores))
    monkeypatch.setattr(worker_count, "measure_token_s", lambda: token_s)
    args = cli.build_parser().parse_args(argv)
    args.argv = ["redline", *argv]
    preset = None
    if args.command == "run":
        preset = load_preset(resolve_preset(args.preset))
        if args.search:
            preset = as_search(preset, args.max_concurrency)
    return checked_config(args, preset)


# 15 us a token and a token each 30 ms (assumed): 666 a process (kernel stamps), 200 (loop stamps)
@pytest.mark.parametrize("argv, workers, reach", [
    ([], 1, None),  # plain `redline`: C=8 in this process, nothing measured
    (["-c", "512"], 1, 512),  # the built-in sim is plain http://: kernel stamps
    (["-c", "1024"], 2, 1024),
    (["-c", "2048", "--max-concurrency", "4096"], 4, 2048),
    (["--url", "https://example.invalid", "-c", "40"], 1, None),  # nothing measured
    (["--url", "https://example.invalid", "-c", "128"], 1, 128),
    (["--url", "https://example.invalid", "-c", "512"], 3, 512),  # the loop stamps TLS reads
    (["--url", "https://example.invalid", "-c", "512", "--workers", "1"], 1, None),  # given: kept
    (["--workers", "3"], 3, None),
    (["run", "quick"], 1, 256),  # steps up to 256
    (["run", "doubling"], 2, 1024),  # up to 1024
    (["run", "quick", "--search", "--max-concurrency", "4096"], 7, 4096),  # a search grows to its max
    (["--rate", "5"], 1, None),  # in-flight unknown before the run: one process, warned of if it outgrows it
    (["--rate", "5", "--max-concurrency", "3000"], 5, 3000),  # a cap given: sized for it
])
def test_auto_sizes_for_the_most_the_run_is_set_to_reach(argv, workers, reach, monkeypatch, tmp_path):
    from redline.engine.client import kstamp

    monkeypatch.setattr(kstamp, "ENABLED", True)  # Linux (this suite's machines)
    monkeypatch.chdir(tmp_path)
    cfg = _config(argv, monkeypatch)
    assert cfg.workers == workers
    assert cfg.workers_auto == ("--workers" not in argv)
    if reach is None:
        assert cfg.workers_why == ""
    else:
        where = "one process" if workers == 1 else f"{workers} worker processes"
        assert cfg.workers_why.startswith(f"--workers auto: {where} for {reach} streams: a token each 30 ms (assumed until "
                                          f"the run measures it) x 15.0 us per token here = ")


def test_auto_counts_the_cores_this_process_may_run_on():
    """taskset or a container's cpuset leaves fewer cores than the machine has: auto counts
    those (a worker per core of the machine would share one core)."""
    code = ("import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
            "from redline.engine.load.worker_count import auto_workers, usable_cores; print(usable_cores(), auto_workers(8192, token_s=15e-6))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["1", "1"], out.stderr


def test_auto_stays_within_the_cores(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert _config(["run", "doubling", "--url", "https://example.invalid"], monkeypatch, cores=2).workers == 2


@pytest.mark.server
@pytest.mark.parametrize("workers", [["--workers", "1"], []], ids=["one-process", "auto"])
def test_a_load_one_process_cannot_hold_is_split_by_default_and_warned_of_in_one_process(workers, tmp_path, monkeypatch, capsys):
    """A preset step at C=300 on the built-in sim, its reads stamped by the loop (as on an
    https:// target), on a 2-core machine whose token costs 60 us (the measures fixed, so the
    test does not ride on this machine's speed): `--workers 1` holds it in one process and
    prints the warning once (it stays in the event log); the default splits it over two worker
    processes, says why at start, and warns of nothing."""
    from redline.engine.client import kstamp
    from redline.engine.core import replan
    from redline.tui import cli

    monkeypatch.setattr(worker_count, "usable_cores", lambda: 2)
    monkeypatch.setattr(worker_count, "cores_free", lambda c=None: 2.0)
    monkeypatch.setattr(worker_count, "measure_token_s", lambda: 60 * US)
    monkeypatch.setattr(replan, "live_plan", lambda streams, n, cpu, tok_s, interval, kernel=True, others=None:
                        plan(streams, 60 * US, interval, 2.0, kernel) if interval else None)
    monkeypatch.setattr(replan, "MIN_TOK_S", 1.0)
    monkeypatch.setattr(kstamp, "ENABLED", False)  # as REDLINE_KSTAMP=0: this process's reads
    preset = tmp_path / "p.toml"
    preset.write_text('name = "p"\n[workload]\ninput_len = 16\noutput_len = 32\n'
                      '[ramp]\nconcurrency = [300]\nwarmup_s = 0\nhold_s = 3\nmin_requests = 1\nmax_hold_s = 4\n'
                      '[after]\nprobe_s = 0\n')
    out = tmp_path / "s"
    rc = cli.main(["run", str(preset), "--headless", "--out", str(out), *workers])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    events = [json.loads(ln) for ln in (out / "events.ndjson").read_text().splitlines()]
    warned = [ln for ln in cap.err.splitlines() if "streams in one process" in ln]
    logged = [e["text"] for e in events if e["kind"] == "warning" and "streams in" in e["text"]]
    notices = [e["text"] for e in events if e["kind"] == "notice" and "worker processes hold the load" in e["text"]]
    if workers:
        assert len(warned) == 1 and warned[0].startswith("redline: warning: 300 streams in one process, over "), cap.err
        assert "per process: ITL's tail may read a few ms high (reads stamped by the loop)" in warned[0]
        # what would help: more workers at start, or (where the measured token interval asks
        # for more processes than the 2 cores) more cores, with the plan's count and the cores free
        assert re.search(r"more workers need more cores than the 2 here \(\d+ would, [\d.]+ of 2 cores free\)$", warned[0]) \
            or re.search(r"; --workers \d+ at start splits it", warned[0]), warned[0]
        assert logged and not notices
    else:
        assert not warned and not logged, cap.err
        assert len(notices) == 1 and notices[0].startswith(
            "2 worker processes hold the load, each its share of C and its own connections (--workers auto: 2 worker "
            "processes for 300 streams: a token each 30 ms (assumed until the run measures it) x 60.0 us per token here")


@pytest.mark.server
def test_raised_past_what_its_workers_hold_auto_adds_one_and_every_request_is_one_row(sim_factory, tmp_path, monkeypatch):
    """Two auto workers at C=8, then C=24 where (by a fixed live measure) each holds 10: the
    engine adds a third worker process, says why in the log, the new one takes its share, and
    every request the sim received is one row with its own id (the new worker counts in a block
    of its own)."""
    import asyncio

    import httpx
    import polars as pl

    from redline.engine.core import replan
    from redline.engine.core.config import EngineConfig
    from redline.engine.core.engine import Engine
    from redline.engine.workload.prompts import WorkloadConfig

    from helpers import until

    holds = 10
    monkeypatch.setattr(replan, "live_plan", lambda streams, n, cpu, tok_s, interval, kernel=True, others=None:
                        Plan(min(-(-streams // holds), 3), -(-streams // holds), holds, f"--workers auto: {streams} streams, {holds} each"))
    monkeypatch.setattr(replan, "MIN_TOK_S", 1.0)
    monkeypatch.setattr(replan, "PESSIMISTIC_TOKEN_S", 1.0)  # judge any load, however small
    sim = sim_factory("healthy")
    out = tmp_path / "s"

    async def go() -> None:
        e = Engine(EngineConfig(url=sim.url, workers=2, workers_auto=True, concurrency=8, use_nvml=False, out_dir=out,
                                workload=WorkloadConfig(input_len=16, output_len=12)))
        await e.start()
        try:
            assert await until(lambda: e.in_flight == 8, 10) is not None
            await asyncio.sleep(1.5)
            assert e.pool.n == 2  # 8 in flight: two hold it
            e.set_concurrency(24)
            assert await until(lambda: e.pool.n == 3 and e.pool.states[2].alive, 30) is not None
            assert await until(lambda: e.pool.states[2].requests > 3 and e.in_flight == 24, 15) is not None
            assert [s.share for s in e.pool.states] == [8, 8, 8]
            assert any("--workers auto: 3 worker processes now (were 2)" in ln.text for ln in e.events.recent(50))
        finally:
            await e.stop()
        assert not any(p.is_alive() for p in e.pool._procs)

    asyncio.run(go())
    rows = pl.read_ndjson(out / "requests.ndjson")
    truth = httpx.get(sim.url + "/sim/requests", timeout=30).json()
    assert rows.height == len(truth) and rows["rid"].n_unique() == rows.height
    assert set(rows.filter(pl.col("phase") != "calibration")["worker"].to_list()) == {0, 1, 2}
