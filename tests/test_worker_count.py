"""`--workers auto`, the default (issue 26): one process up to 256 in flight; above, one
worker per 256 of the most the run is set to reach at start, up to the cores; and a warning,
on screen and in the log, while one process holds more streams than that."""

from __future__ import annotations

import json

import pytest

from redline.engine.worker_count import auto_workers, crowded, crowded_warning


def test_auto_is_one_process_up_to_256_then_one_worker_per_256_up_to_the_cores():
    assert auto_workers(8, cores=16) == 1
    assert auto_workers(256, cores=16) == 1
    assert auto_workers(257, cores=16) == 2
    assert auto_workers(1024, cores=16) == 4
    assert auto_workers(4096, cores=4) == 4  # a worker on every core: the coordinator takes ~10 % of one
    assert auto_workers(1024, cores=2) == 2
    assert auto_workers(1024, cores=1) == 1


def test_crowded_names_the_streams_the_processes_and_what_would_help():
    assert not crowded(256, 1) and crowded(257, 1)
    assert not crowded(512, 2) and crowded(513, 2)
    one = crowded_warning(512, 1, cores=16)
    assert one.startswith("512 streams in one process, over 256 per process")
    assert "ITL's tail may read a few ms above the server's" in one and one.endswith("--workers 2 at start splits it")
    two = crowded_warning(1024, 2, cores=2)
    assert two.startswith("1024 streams in 2 worker processes (512 each)")
    assert two.endswith("more workers need more cores than this machine's 2")


def _config(argv: list[str], monkeypatch, cores: int = 16):
    """checked_config for `redline ARGV` (nothing starts: the contract of checked_config),
    on a machine of `cores` cores."""
    from redline.engine.preset import as_search, load_preset, resolve_preset
    from redline.tui import cli
    from redline.tui.launch import checked_config

    monkeypatch.setattr("os.cpu_count", lambda: cores)
    args = cli.build_parser().parse_args(argv)
    args.argv = ["redline", *argv]
    preset = None
    if args.command == "run":
        preset = load_preset(resolve_preset(args.preset))
        if args.search:
            preset = as_search(preset, args.max_concurrency)
    return checked_config(args, preset)


@pytest.mark.parametrize("argv, workers, reach", [
    ([], 1, None),  # plain `redline`: C=8 in this process
    (["-c", "256"], 1, None),
    (["-c", "512"], 2, 512),
    (["-c", "2048", "--max-concurrency", "4096"], 8, 2048),
    (["-c", "512", "--workers", "1"], 1, None),  # given: kept
    (["--workers", "3"], 3, None),
    (["run", "quick"], 1, None),  # steps up to 256
    (["run", "doubling"], 4, 1024),  # up to 1024
    (["run", "quick", "--search"], 4, 1024),  # a search grows up to --max-concurrency
    (["run", "quick", "--search", "--max-concurrency", "300"], 2, 300),
    (["--rate", "5"], 1, None),  # in-flight unknown before the run: warned if it crowds
    (["--rate", "5", "--max-concurrency", "600"], 3, 600),  # a cap given: sized for it
    (["run", "rate-ramp"], 1, None),  # its [ramp].max_concurrency is 256
])
def test_auto_sizes_for_the_most_the_run_is_set_to_reach(argv, workers, reach, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    cfg = _config(argv, monkeypatch)
    assert cfg.workers == workers
    if reach is None:
        assert cfg.workers_why == ""
    else:
        assert cfg.workers_why == f"--workers auto: the run is set to reach {reach} in flight, at most 256 per process"


def test_auto_stays_within_the_cores(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert _config(["run", "doubling"], monkeypatch, cores=2).workers == 2


@pytest.mark.server
@pytest.mark.parametrize("workers", [["--workers", "1"], []], ids=["one-process", "auto"])
def test_a_run_over_256_in_flight_is_split_by_default_and_warned_of_in_one_process(workers, tmp_path, monkeypatch, capsys):
    """A preset step at C=300 on the built-in sim: `--workers 1` holds it in one process and
    prints the warning once (it stays in the event log); the default splits it over two
    worker processes (on a 2-core machine), says why at start, and warns of nothing."""
    from redline.tui import cli

    monkeypatch.setattr("os.cpu_count", lambda: 2)
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
        assert "over 256 per process" in warned[0] and warned[0].endswith("--workers 2 at start splits it")
        assert logged and not notices
    else:
        assert not warned and not logged, cap.err
        assert notices == ["2 worker processes hold the load, each its share of C and its own connections "
                           "(--workers auto: the run is set to reach 300 in flight, at most 256 per process)"]
