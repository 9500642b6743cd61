"""`--workers auto`, the default (issue 26): one process while it measures truly (1024 streams
where reads carry the kernel's receive time, plain http://; 256 where the loop stamps them,
https://), above that one worker per as many of the most the run is set to reach at start, up
to the cores; and a warning, on screen and in the log, while one process holds more."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from redline.engine.load import worker_count
from redline.engine.load.worker_count import auto_workers, crowded, crowded_warning, kernel_stamped


def test_auto_is_one_process_while_it_measures_truly_then_one_worker_per_as_many_up_to_the_cores():
    # reads stamped by the loop (https://): 256 per process
    assert auto_workers(8, cores=16, kernel=False) == 1
    assert auto_workers(256, cores=16, kernel=False) == 1
    assert auto_workers(257, cores=16, kernel=False) == 2
    assert auto_workers(1024, cores=16, kernel=False) == 4
    assert auto_workers(4096, cores=4, kernel=False) == 4  # a worker on every core: the coordinator takes ~10 % of one
    assert auto_workers(1024, cores=2, kernel=False) == 2
    assert auto_workers(1024, cores=1, kernel=False) == 1
    # reads stamped by the kernel (http://): 1024 per process
    assert auto_workers(1024, cores=16) == 1
    assert auto_workers(1025, cores=16) == 2
    assert auto_workers(4096, cores=16) == 4


def test_which_loads_are_kernel_stamped(monkeypatch):
    from redline.engine.client import kstamp

    monkeypatch.setattr(kstamp, "ENABLED", True)
    assert kernel_stamped(["http://a:8000", "http://b:8000"], "lean")
    assert not kernel_stamped(["http://a:8000", "https://b"], "lean")
    assert not kernel_stamped(["http://a:8000"], "httpx")
    monkeypatch.setattr(kstamp, "ENABLED", False)  # REDLINE_KSTAMP=0, or not Linux
    assert not kernel_stamped(["http://a:8000"], "lean")


def test_crowded_names_the_streams_the_processes_and_what_would_help():
    assert not crowded(256, 1, kernel=False) and crowded(257, 1, kernel=False)
    assert not crowded(512, 2, kernel=False) and crowded(513, 2, kernel=False)
    assert not crowded(1024, 1) and crowded(1025, 1)
    one = crowded_warning(512, 1, cores=16, kernel=False)
    assert one.startswith("512 streams in one process, over 256 per process")
    assert "ITL's tail may read a few ms high (reads stamped by the loop)" in one
    assert one.endswith("--workers 2 at start splits it")
    two = crowded_warning(1024, 2, cores=2, kernel=False)
    assert two.startswith("1024 streams in 2 worker processes (512 each)")
    assert two.endswith("more workers need more cores than this machine's 2")
    k = crowded_warning(2048, 1, cores=16)
    assert k.startswith("2048 streams in one process, over 1024 per process: it may fall behind its reads")
    assert k.endswith("--workers 2 at start splits it")


def _config(argv: list[str], monkeypatch, cores: int = 16):
    """checked_config for `redline ARGV` (nothing starts: the contract of checked_config),
    on a machine of `cores` cores."""
    from redline.engine.preset import as_search, load_preset, resolve_preset
    from redline.tui import cli
    from redline.tui.cli.launch import checked_config

    monkeypatch.setattr(worker_count, "usable_cores", lambda: cores)
    args = cli.build_parser().parse_args(argv)
    args.argv = ["redline", *argv]
    preset = None
    if args.command == "run":
        preset = load_preset(resolve_preset(args.preset))
        if args.search:
            preset = as_search(preset, args.max_concurrency)
    return checked_config(args, preset)


@pytest.mark.parametrize("argv, workers, reach, per", [
    ([], 1, None, 0),  # plain `redline`: C=8 in this process
    (["-c", "1024"], 1, None, 0),  # the built-in sim is plain http://: kernel stamps
    (["-c", "2048", "--max-concurrency", "4096"], 2, 2048, 1024),
    (["--url", "https://example.invalid", "-c", "256"], 1, None, 0),
    (["--url", "https://example.invalid", "-c", "512"], 2, 512, 256),  # the loop stamps TLS reads
    (["--url", "https://example.invalid", "-c", "2048", "--max-concurrency", "4096"], 8, 2048, 256),
    (["--url", "https://example.invalid", "-c", "512", "--workers", "1"], 1, None, 0),  # given: kept
    (["--workers", "3"], 3, None, 0),
    (["run", "quick"], 1, None, 0),  # steps up to 256
    (["run", "doubling"], 1, None, 0),  # up to 1024
    (["run", "doubling", "--url", "https://example.invalid"], 4, 1024, 256),
    (["run", "quick", "--search", "--max-concurrency", "4096"], 4, 4096, 1024),  # a search grows to its max
    (["run", "quick", "--search", "--url", "https://example.invalid", "--max-concurrency", "300"], 2, 300, 256),
    (["--rate", "5"], 1, None, 0),  # in-flight unknown before the run: warned if it crowds
    (["--rate", "5", "--max-concurrency", "3000"], 3, 3000, 1024),  # a cap given: sized for it
    (["run", "rate-ramp", "--url", "https://example.invalid"], 1, None, 0),  # its [ramp].max_concurrency is 256
])
def test_auto_sizes_for_the_most_the_run_is_set_to_reach(argv, workers, reach, per, monkeypatch, tmp_path):
    from redline.engine.client import kstamp

    monkeypatch.setattr(kstamp, "ENABLED", True)  # Linux (this suite's machines)
    monkeypatch.chdir(tmp_path)
    cfg = _config(argv, monkeypatch)
    assert cfg.workers == workers
    if reach is None:
        assert cfg.workers_why == ""
    else:
        assert cfg.workers_why == f"--workers auto: the run is set to reach {reach} in flight, at most {per} per process"


def test_auto_counts_the_cores_this_process_may_run_on():
    """taskset or a container's cpuset leaves fewer cores than the machine has: auto counts
    those (a worker per core of the machine would share one core)."""
    code = ("import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
            "from redline.engine.load.worker_count import auto_workers, usable_cores; print(usable_cores(), auto_workers(8192))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["1", "1"], out.stderr


def test_auto_stays_within_the_cores(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert _config(["run", "doubling", "--url", "https://example.invalid"], monkeypatch, cores=2).workers == 2


@pytest.mark.server
@pytest.mark.parametrize("workers", [["--workers", "1"], []], ids=["one-process", "auto"])
def test_a_run_over_256_in_flight_is_split_by_default_and_warned_of_in_one_process(workers, tmp_path, monkeypatch, capsys):
    """A preset step at C=300 on the built-in sim, its reads stamped by the loop (as on an
    https:// target): `--workers 1` holds it in one process and prints the warning once (it
    stays in the event log); the default splits it over two worker processes (on a 2-core
    machine), says why at start, and warns of nothing."""
    from redline.engine.client import kstamp
    from redline.tui import cli

    monkeypatch.setattr(worker_count, "usable_cores", lambda: 2)
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
        assert len(warned) == 1 and warned[0].startswith("redline: warning: "), cap.err
        assert "over 256 per process: ITL's tail may read a few ms high" in warned[0]
        assert warned[0].endswith("--workers 2 at start splits it")
        assert logged and not notices
    else:
        assert not warned and not logged, cap.err
        assert notices == ["2 worker processes hold the load, each its share of C and its own connections "
                           "(--workers auto: the run is set to reach 300 in flight, at most 256 per process)"]
