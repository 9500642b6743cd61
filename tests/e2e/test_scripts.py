"""Issue 27: every script under benchmarks/ and docs/ answers --help (argparse) without doing
any work, and stops on Ctrl-C / SIGTERM through its `finally` blocks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest

from helpers import ROOT, wait_for

SCRIPTS = sorted([*ROOT.glob("benchmarks/*.py"), *ROOT.glob("docs/*.py")])


def _help(path: Path) -> tuple[Path, subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, str(path), "--help"], cwd=path.parent, capture_output=True, text=True,
                       timeout=60, stdin=subprocess.DEVNULL, env={**os.environ, "CI": "true"})
    return path, r, time.monotonic() - t0


def test_every_script_answers_help_without_doing_work():
    assert len(SCRIPTS) >= 10 and ROOT / "docs" / "screens.py" in SCRIPTS
    tracked = {p: p.stat().st_mtime_ns for p in (ROOT / "docs").iterdir() if p.is_file()}
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(_help, SCRIPTS))
    for path, r, took in results:
        name = path.relative_to(ROOT)
        assert r.returncode == 0, f"{name} --help: exit {r.returncode}: {r.stderr[-500:]}"
        assert r.stdout.startswith("usage: "), f"{name} --help printed no usage line: {r.stdout[:200]!r}"
        assert "Traceback" not in r.stderr, f"{name}: {r.stderr[-500:]}"
        assert took < 30, f"{name} --help took {took:.0f} s: it is doing work"
    assert {p: p.stat().st_mtime_ns for p in tracked} == tracked  # docs/screens.py wrote nothing


def test_a_benchmark_stops_on_sigterm_through_its_finally(tmp_path):
    """benchmarks/_bench.py run_main: SIGTERM becomes the same stop as Ctrl-C."""
    mark = tmp_path / "cleaned"
    script = tmp_path / "bench.py"
    script.write_text(
        "import sys, time\n"
        f"sys.path.insert(0, {str(ROOT / 'benchmarks')!r})\n"
        "from _bench import run_main\n"
        "def main():\n"
        "    try:\n"
        "        print('ready', flush=True)\n"
        "        time.sleep(60)\n"
        "    finally:\n"
        f"        open({str(mark)!r}, 'w').close()\n"
        "run_main(main)\n"
    )
    for sig, code in ((signal.SIGTERM, 143), (signal.SIGINT, 130)):
        mark.unlink(missing_ok=True)
        p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "ready"
        p.send_signal(sig)
        _, err = p.communicate(timeout=20)
        assert p.returncode == code, err
        assert err.strip() == f"bench.py: stopped by {sig.name}" and mark.exists()


@pytest.mark.server
def test_screens_stops_on_sigterm_and_leaves_the_pictures(tmp_path):
    """docs/screens.py (a sim, an engine process, the app) stops on SIGTERM within seconds,
    writes no picture, and leaves no process behind."""
    p = subprocess.Popen([sys.executable, str(ROOT / "docs" / "screens.py"), "--out", str(tmp_path), "--only", "80x24"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        # the sim and the engine process are up (two children), then a moment for the app
        def both_up() -> bool:
            kids = [c for c in psutil.Process(p.pid).children() if "resource_tracker" not in " ".join(c.cmdline())]
            return len(kids) >= 2

        assert wait_for(both_up, 30), "screens.py never started its sim and engine"
        time.sleep(2)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 143, err
    assert "stopped by SIGTERM" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []
