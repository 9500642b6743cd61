"""The compiled lockstep server (benchmarks/lockstep_server.c): built when missing, run, asked.

    python benchmarks/compiled_server.py [--pace 40] [--seconds 0]   # build it and serve (Ctrl-C stops)

redline's sim is Python and lags itself at C=1024; this one is a single C file (std + POSIX,
no library), built here with the machine's C compiler (`cc`, else `gcc`) into
benchmarks/.build/ the first time a benchmark needs it, and again when the source is newer.
The tests never need it. What it serves and how it paces: the C file's header. It reports its
own write gaps (`gaps(t0, t1)`, its /bench/gaps) and its steps (`stats()`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "lockstep_server.c"
BUILD_DIR = HERE / ".build"
BINARY = BUILD_DIR / "lockstep_server"


def compiler() -> str:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return name
    raise SystemExit("compiled_server.py: no C compiler (cc, gcc or clang) to build benchmarks/lockstep_server.c; "
                     "install one (apt-get install gcc) or use the Python server (--server python)")


def build(force: bool = False) -> Path:
    """The server's binary, compiled when missing or older than its source."""
    if not force and BINARY.exists() and BINARY.stat().st_mtime >= SOURCE.stat().st_mtime:
        return BINARY
    BUILD_DIR.mkdir(exist_ok=True)
    tmp = BINARY.with_suffix(f".tmp{os.getpid()}")
    cmd = [compiler(), "-O2", "-Wall", "-o", str(tmp), str(SOURCE), "-lm"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"compiled_server.py: {' '.join(cmd)} failed:\n{r.stderr[-3000:]}")
    os.replace(tmp, BINARY)
    print(f"# built {BINARY.relative_to(HERE.parent)} ({' '.join(cmd[:3])})", file=sys.stderr)
    return BINARY


class CompiledServer:
    """The lockstep server as a subprocess on 127.0.0.1, stopped (SIGTERM, then SIGKILL) by stop().
    `pace`: "STEP_MS" or "STEP_MS+PER_SEQ_MS" (a decode step every STEP + PER_SEQ x running ms)."""

    def __init__(self, pace: str = "40") -> None:
        binary = build()
        self.pace = pace
        self.proc = subprocess.Popen([str(binary), "--pace", pace], stdout=subprocess.PIPE, text=True,
                                     start_new_session=True)
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line.startswith("port "):
            self.stop()
            raise RuntimeError(f"compiled_server.py: the server did not start (it said {line!r})")
        self.port = int(line.split()[1])
        self.url = f"http://127.0.0.1:{self.port}"

    def get(self, path: str) -> dict:
        assert self.url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(self.url + path, timeout=60) as r:  # noqa: S310 - loopback, our own server
            return json.loads(r.read())

    def gaps(self, t0: float, t1: float, raw: bool = False) -> dict:
        """Its write gaps closed by a token chunk written in [t0, t1] (time.perf_counter() seconds):
        count, mean_ms, p50_ms, p90_ms, p99_ms, p999_ms, max_ms (and gaps_ms, sorted, with raw)."""
        return self.get(f"/bench/gaps?t0={t0!r}&t1={t1!r}" + ("&raw=1" if raw else ""))

    def stats(self) -> dict:
        """steps, late_steps, queued_writes, streams_started / done, running, tokens_written,
        cpu_s, burst_p50_ms / p99 / max (a step's due time to its last write)."""
        return self.get("/bench/stats")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self.proc.stdout:
            self.proc.stdout.close()

    def __enter__(self) -> "CompiledServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> None:
    import argparse

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pace", default="40", metavar="STEP_MS[+PER_SEQ_MS]", help="decode step (default 40 ms)")
    p.add_argument("--seconds", type=float, default=0.0, help="serve this long, then print its figures (0: until Ctrl-C)")
    p.add_argument("--build", action="store_true", help="build (again) and exit")
    args = p.parse_args()
    if args.build:
        print(build(force=True))
        return
    with CompiledServer(args.pace) as srv:
        print(f"serving {srv.url} (pace {args.pace} ms)", flush=True)
        t0 = time.perf_counter()
        try:
            while not args.seconds or time.perf_counter() - t0 < args.seconds:
                time.sleep(0.2)
        finally:
            print(json.dumps(srv.stats()))
            g = srv.gaps(t0, time.perf_counter())
            print(json.dumps(g))


if __name__ == "__main__":
    from _bench import run_main

    run_main(main)
