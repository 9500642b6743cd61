"""`redline sweep` (issue 37): a preset against each server configuration of a grid, each
server launched, waited for and stopped as a whole process group by redline, and one
comparison. The server here is redline's own sim (`redline sim --port {port} ...`) at a quarter
time scale; the preset is a short staircase."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from redline.engine.sweep.spec import SweepError, SweepSpec, label_of, load_sweep_file, parse_grid, spec_from_args

from helpers import ROOT, finish, main_in_process, redline_command, wait_for

PRESET = ('name = "sweep-short"\n[workload]\ninput_len = 16\noutput_len = 32\n'
          "[ramp]\nconcurrency = [8, 64, 256]\nwarmup_s = 0.5\nhold_s = 4\nmin_requests = 4\nmax_hold_s = 10\n"
          "[stop]\nplateau_gain = 0.05\n[after]\nprobe_s = 0\n")
# pp 8 with a request pool of 512 (--set max_running_requests=512): mb=8 runs 64 in all (8
# micro-batches of 8), mb=64 up to 512 (SGLang's pp: engine/sim/pipeline.py)
SERVE = ("redline sim --port {port} --sim-profile pp-capped --set max_running_requests=512 --set pp_max_micro_batch_size={mb}"
         " --set time_scale=0.25")


# -- the configurations ---------------------------------------------------------------------

def test_grids_expand_to_configurations_with_labels_and_free_ports():
    spec = spec_from_args(["tp=8,pp=1", "tp=1,pp=8"], serve="srv --port {port} --tp {tp} --pp {pp}")
    ports = iter([4001, 4002])
    cs = spec.expand(lambda: next(ports))
    assert [c.label for c in cs] == ["tp8-pp1", "tp1-pp8"]
    assert cs[0].command == ("srv", "--port", "4001", "--tp", "8", "--pp", "1") and cs[0].url == "http://127.0.0.1:4001"
    product = spec_from_args(["mb=8|64,tp=1|2"], serve="srv --port {port} --mb {mb} --tp {tp}")
    assert [c.label for c in product.expand(lambda: 1)] == ["mb8-tp1", "mb8-tp2", "mb64-tp1", "mb64-tp2"]
    mixed = spec_from_args(["tp=1,mb=8|64"], serve="srv --port {port} --tp {tp} --mb {mb}")
    assert [c.values for c in mixed.expand(lambda: 1)] == [{"tp": "1", "mb": "8"}, {"tp": "1", "mb": "64"}]
    remote = spec_from_args(["n=2"], serve="ssh gpu-host serve --n {n}", url_template="http://gpu-host:30000", port=30000)
    (c,) = remote.expand(lambda: 1)
    assert c.url == "http://gpu-host:30000" and c.command[:2] == ("ssh", "gpu-host")
    urls = SweepSpec(urls=["http://127.0.0.1:30000", "http://127.0.0.1:30001/"]).expand(lambda: 1)
    assert [c.url for c in urls] == ["http://127.0.0.1:30000", "http://127.0.0.1:30001"] and urls[0].command == ()
    assert label_of({"url": "http://127.0.0.1:30000"}, 0) == "1-127.0.0.1-30000"


def test_each_grid_expands_on_its_own_and_the_sweep_is_their_union():
    """Issue 44 case 5: `--grid 'mb=0' --grid 'mb=8|64'` is three configurations (the first was
    crossed with the second's product, which overrode its mb: two, and nothing said)."""
    spec = spec_from_args(["mb=0", "mb=8|64"], serve="srv --port {port} --mb {mb}")
    assert [c.label for c in spec.expand(lambda: 1)] == ["mb0", "mb8", "mb64"]
    mixed = spec_from_args(["tp=8,mb=64", "tp=1,mb=8|64"], serve="srv --port {port} --tp {tp} --mb {mb}")
    assert [c.label for c in mixed.expand(lambda: 1)] == ["tp8-mb64", "tp1-mb8", "tp1-mb64"]
    with pytest.raises(SweepError) as ei:
        spec_from_args(["mb=8", "mb=8|64"], serve="srv --port {port} --mb {mb}").check()
    assert str(ei.value).startswith("--grid: the configuration 'mb=8' appears twice (configurations 1 and 2)")
    assert "\n" not in str(ei.value)
    twice = SweepSpec(urls=["http://127.0.0.1:30000", "http://127.0.0.1:30000"]).expand(lambda: 1)
    assert [c.label for c in twice] == ["1-127.0.0.1-30000", "2-127.0.0.1-30000"]  # one server twice: labelled apart


@pytest.mark.parametrize("kw,needle", [
    (dict(grids=["mb=8"], serve="srv --port {port} --tp {tp} --mb {mb}"), "{tp} is set by no --grid"),
    (dict(grids=["mb=8", "tp=1"], serve="srv --port {port} --mb {mb}"), "{mb} is not set in the configuration 'tp=1'"),
    (dict(grids=["mb=8,tp=2"], serve="srv --port {port} --mb {mb}"), "tp= is set but --serve has no {tp}"),
    (dict(grids=["mb=8"], serve="srv --mb {mb}"), "no {port} in the command"),
    (dict(grids=["mb"], serve="srv --port {port} --mb {mb}"), "'mb' is not NAME=VALUE"),
    (dict(grids=["mb=8||9"], serve="srv --port {port} --mb {mb}"), "an empty value between |"),
    (dict(grids=[], serve=None), "give --serve CMD"),
])
def test_bad_sweeps_are_one_line_before_anything_starts(kw, needle):
    with pytest.raises(SweepError) as ei:
        spec_from_args(kw.pop("grids"), **kw).check()
    assert needle in str(ei.value) and "\n" not in str(ei.value)


def test_a_sweep_file_says_the_same(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text('[sweep]\nserve = "srv --port {port} --mb {mb}"\ngrid = {mb = [8, 16, 64]}\npreset = "quick"\n'
                 "ready_timeout_s = 60\ncooldown_s = 1\n")
    spec = load_sweep_file(f)
    assert spec.grid == {"mb": ["8", "16", "64"]} and spec.preset == "quick" and spec.ready_timeout_s == 60
    assert [c.label for c in spec.expand(lambda: 1)] == ["mb8", "mb16", "mb64"]
    f.write_text('[sweep]\nserve = "srv"\nready_timout_s = 5\n')
    with pytest.raises(SweepError, match="unknown key \\[sweep\\].ready_timout_s; did you mean ready_timeout_s"):
        load_sweep_file(f)
    assert parse_grid("tp=8,pp=1") == ({"tp": "8", "pp": "1"}, {})


def test_dry_run_prints_the_commands_and_starts_nothing(capsys, tmp_path):
    rc = main_in_process(["sweep", "--serve", SERVE, "--grid", "mb=8|64", "--preset", "quick", "--dry-run"])
    out = capsys.readouterr().out
    assert rc == 0 and "2 configurations, preset quick" in out
    assert "mb8: redline sim --port" in out and "pp_max_micro_batch_size=64" in out
    assert main_in_process(["sweep", "--serve", SERVE, "--grid", "mb=8", "--preset", "nosuch", "--headless"]) == 2
    assert "not a built-in preset" in capsys.readouterr().err



def _client_end_on_a_port() -> tuple[list, int]:
    """A connected client socket: its own end holds a port nothing listens on (what a client's
    connection in another process does to a port a sweep picked before it began)."""
    import socket

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    client = socket.create_connection(srv.getsockname())
    peer, _ = srv.accept()
    return [srv, client, peer], client.getsockname()[1]


@pytest.mark.server
@pytest.mark.parametrize("when", ["before_launch", "as_it_starts"])
def test_a_picked_port_another_process_took_is_picked_again(tmp_path, monkeypatch, when):
    """A port redline picked for a configuration, taken by another process's connection since
    (before its launch: picked again; between the check and the server's bind: the server exits
    with "address already in use" and is launched once more on another port): the configuration
    starts, and its command, URL and entry name the port it serves on. A port the operator gave
    (--port) is never changed."""
    import asyncio

    from redline.engine.sweep import runner
    from redline.engine.sweep.runner import ConfigServer
    from redline.engine.sweep.sweep_file import COMPLETED

    socks, taken = _client_end_on_a_port()
    try:
        spec = spec_from_args(["n=1"], serve="redline sim --port {port} --sim-profile healthy --set time_scale={n}")
        (config,) = spec.expand(lambda: taken)
        assert config.port == taken and config.port_picked
        if when == "as_it_starts":  # the check at launch sees it free: the server's own bind fails
            real, calls = runner.port_free, []
            monkeypatch.setattr(runner, "port_free", lambda p: calls.append(p) is None and (len(calls) == 1 or real(p)))
        cs = ConfigServer(config, tmp_path / config.label, 60.0)
        try:
            assert asyncio.run(cs.start()), cs.started
            port = cs.config.port
            assert port is not None and port != taken
            assert cs.config.url == f"http://127.0.0.1:{port}" and cs.config.command[3] == str(port)
            e = cs.run_entry(0)
            assert e["status"] == COMPLETED and e["url"] == cs.config.url and str(port) in e["command"]
            log = (tmp_path / config.label / "server.log").read_text()
            assert ("address already in use" in log) == (when == "as_it_starts"), log
        finally:
            asyncio.run(cs.stop())
        given = spec_from_args(["n=1"], serve="redline sim --port {port} --set time_scale={n}", port=taken).expand(lambda: 1)[0]
        assert not given.port_picked and given.on_port(5).port == 5  # on_port is the caller's choice alone
    finally:
        for s in socks:
            s.close()

# -- whole sweeps against the sim -------------------------------------------------------------

def _tag(tmp_path: Path) -> str:
    """This test's own mark on its sims' command lines (tests beside it run sims too)."""
    return str(abs(hash(str(tmp_path))) % 10**9)


def _sweep(tmp_path: Path, *grids: str, extra: tuple[str, ...] = ()) -> subprocess.Popen:
    preset = tmp_path / "p.toml"
    preset.write_text(PRESET)
    argv = [*redline_command(), "sweep", "--serve", f"{SERVE} --seed {_tag(tmp_path)}", *[a for g in grids for a in ("--grid", g)], "--preset", str(preset),
            "--headless", "--no-nvml", "--workers", "1", "--out", str(tmp_path / "out"), *extra]
    return subprocess.Popen(argv, cwd=ROOT, env={**os.environ, "CI": "true"}, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _sims(tmp_path: Path) -> list[int]:
    """Every `redline sim` process this test's sweep started (their command lines carry its tag)."""
    out = subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True).stdout  # -ww: whole lines, not cut at 80
    mark = f"--seed {_tag(tmp_path)}"
    return [int(ln.split()[0]) for ln in out.splitlines() if mark in ln and "redline sim" in ln and " sweep " not in ln]


@pytest.mark.server
def test_a_capped_and_an_uncapped_server_and_a_bad_flag(tmp_path):
    """mb=8 runs 64 in all (8 micro-batches of 8): knee 64; mb=64 still climbs at C=256 (4
    micro-batches of 64 there); mb=oops is refused by the sim: failed_to_start with its log's
    tail, and the sweep goes on. No sim is left."""
    rc, out, err = finish(_sweep(tmp_path, "mb=oops|8|64"), timeout=120)
    assert rc == 0, (out, err)
    doc = json.loads((tmp_path / "out" / "sweep.json").read_text())
    bad, capped, free = doc["configurations"]
    assert bad["status"] == "failed_to_start" and bad["log_tail"] and "pp_max_micro_batch_size" in " ".join(bad["log_tail"])
    assert "exited with status" in bad["why"]
    assert capped["status"] == free["status"] == "completed", [(e["status"], e.get("why"), e.get("log_tail")) for e in (capped, free)]
    assert capped["knee_concurrency"] == 64 and free["knee_concurrency"] is None, (capped, free)
    assert free["max_output_throughput"] > 1.3 * capped["max_output_throughput"]
    assert 0 < capped["startup_s"] < 30 and 0 < free["startup_s"] < 30
    meta = json.loads((tmp_path / "out" / "mb64" / "meta.json").read_text())
    assert meta["label"] == "mb64" and meta["sweep"]["values"] == {"mb": "64"} and meta["sweep"]["startup_s"] > 0
    assert (tmp_path / "out" / "mb64" / "server.log").stat().st_size > 0
    assert doc["sweep"]["end_reason"] == "sweep finished" and doc["sweep"]["preset"] == "sweep-short"
    assert "mb8            done" in out and "failed to start" in out  # the table says sweep.json's completed as done (80 columns)
    assert _sims(tmp_path) == []
    report = subprocess.run([*redline_command(), "report", str(tmp_path / "out"), "--no-plot", "--gate", "knee>=8,best:mb64"],
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert report.returncode == 4, report.stdout  # the failed configuration fails the gate
    assert "PASS  best:mb64" in report.stdout and "FAIL  mbOops: failed_to_start" in report.stdout.replace("mboops", "mbOops")
    assert "knee C=64 (within 5 %" in report.stdout and "no knee: still rising at max C=256" in report.stdout
    # --png draws the configurations' curves; --junit has nothing to write for a sweep: one line, exit 2
    png = tmp_path / "curves.png"
    drawn = subprocess.run([*redline_command(), "report", str(tmp_path / "out"), "--no-plot", "--png", str(png)],
                           cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert drawn.returncode == 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"wrote {png}" in drawn.stdout
    junit = subprocess.run([*redline_command(), "report", str(tmp_path / "out"), "--gate", "knee>=8", "--junit", str(tmp_path / "j.xml")],
                           cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert junit.returncode == 2 and junit.stdout == "" and junit.stderr.count("\n") == 1 and "--junit" in junit.stderr


@pytest.mark.server
@pytest.mark.parametrize("how", ["sigint", "sigkill"])
def test_a_signal_during_the_second_configuration(tmp_path, how):
    """SIGINT: the first configuration is complete in sweep.json, the second's server group is
    gone, exit 130. SIGKILL (redline cannot clean up): its server group is gone all the same."""
    p = _sweep(tmp_path, "mb=8|64")
    sweep_json = tmp_path / "out" / "sweep.json"

    def second_running() -> bool:
        try:
            doc = json.loads(sweep_json.read_text())
        except (OSError, ValueError):
            return False
        return doc["configurations"][0]["status"] == "completed" and (tmp_path / "out" / "mb64" / "meta.json").exists()

    try:
        assert wait_for(second_running, 90), p.stderr and p.stdout
        sims = _sims(tmp_path)
        assert sims
        time.sleep(1.0)
        p.send_signal(signal.SIGINT if how == "sigint" else signal.SIGKILL)
        rc, out, err = finish(p, timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert wait_for(lambda: _sims(tmp_path) == [], 20), _sims(tmp_path)
    if how == "sigint":
        assert rc == 130, (out, err)
        doc = json.loads(sweep_json.read_text())
        first, second = doc["configurations"]
        assert first["status"] == "completed" and first["knee_concurrency"] == 64
        assert second["status"] == "stopped" and doc["sweep"]["end_reason"].startswith("stopped")
    else:
        assert rc == -signal.SIGKILL


@pytest.mark.server
def test_a_server_that_dies_mid_run_is_that_runs_break_and_the_sweep_goes_on(tmp_path):
    """mb=8's server is killed once its run has begun: its entry is completed with the break
    server_gone at the C it was holding; mb=64 then runs its preset as usual."""
    p = _sweep(tmp_path, "mb=8|64")
    meta = tmp_path / "out" / "mb8" / "meta.json"
    try:
        assert wait_for(meta.exists, 60), p.stderr and p.stdout
        time.sleep(1.0)  # the run is under way
        (pid,) = [pid for pid in _sims(tmp_path) if "pp_max_micro_batch_size=8 " in _args(pid)]
        os.kill(pid, signal.SIGKILL)
        rc, out, err = finish(p, timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert rc == 0, (out, err)
    first, second = json.loads((tmp_path / "out" / "sweep.json").read_text())["configurations"]
    assert first["status"] == "completed" and first["break_reason"] == "server_gone" and first["break_concurrency"] in (8, 64), first
    # the next one ran its preset through (its knee is the other tests' business: here it runs
    # beside the first one's ending, on a machine that may be busy)
    assert second["status"] == "completed" and second["break_reason"] != "server_gone" and second["max_output_throughput"] > 0, second
    assert json.loads((tmp_path / "out" / "mb64" / "summary.json").read_text())["steps"], second
    assert _sims(tmp_path) == []


def _args(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
