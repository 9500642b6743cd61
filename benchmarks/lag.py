"""Measurement lag: the sim's send time (sim_t) to the engine's receive time, per chunk.

    python benchmarks/lag.py [--concurrency 1,64,256] [--seconds 15] [--warmup 3]
                             [--modes tui,headless] [--sim-profile healthy] [--transport NAME]

Every chunk the sim sends carries sim_t = time.time() just before its write; the engine stamps
the socket read that brought it (perf_counter, put on the wall clock once per run) and adds
receive - sim_t to LiveMetrics.lag, a log histogram (bins 1 % wide). That histogram is not
exported by the engine, so this benchmark runs the engine child with one addition: when it
stops, the child writes the histogram's counts since the end of the warm-up to a file. The
engine itself, its process, its loop (uvloop) and its configuration are redline's own:

  tui       `redline --url SIM --concurrency C --out TMP` as run by tui/cli/handlers.py, in a real
            terminal (tmux, 80x24) drawing at its normal rate; the screen is captured at the end
            to show it drew ("C=" on screen) and the TUI process's CPU is reported
  headless  the same engine process with no TUI (nothing drawing)

The sim is started here on 127.0.0.1 with the named profile (default healthy: 40 ms decode
steps growing with the batch, a 2000 tok/s ceiling), as plain `redline` does.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

WORKERS_ENV = "REDLINE_BENCH_WORKERS"

# A private tmux server (its own socket): never touches anyone else's sessions; killed at the end.
TMUX = ["tmux", "-L", f"redline-bench-{os.getpid()}"]


# -- the engine child: redline's own child main, plus the lag histogram written at stop ----------
def bench_child_main(config, conn, result_path: str, warmup_s: float) -> None:
    from redline.engine.core.engine import Engine
    from redline.engine.core.ticker import Ticker
    from redline.engine.host import _child_main
    from redline.engine.measure.histogram import LogHistogram

    base_bins: list[int] = []
    state = {"t0": None, "n0": 0, "vmax0": 0.0}
    orig_each_second, orig_stop = Ticker.each_second, Engine.stop

    def each_second(self, now):  # once a second on the engine's loop: cheap bookkeeping only
        e = self.e  # the Engine
        if state["t0"] is None and now - e.t0 >= warmup_s:
            base_bins[:] = e.metrics.lag.bins
            state["t0"], state["n0"] = now, e.metrics.lag.count
        return orig_each_second(self, now)

    async def stop(self, reason="quit"):
        lag = self.metrics.lag
        h = LogHistogram()
        if state["t0"] is not None:
            h.bins = [a - b for a, b in zip(lag.bins, base_bins, strict=False)]
            h.count = lag.count - state["n0"]
            h.vmax = lag.vmax  # an upper bound; the quantiles come from the bins
        res = {"chunks": h.count, "measured_s": (time.perf_counter() - state["t0"]) if state["t0"] else 0.0,
               "p50_ms": _ms(h.quantile(0.50)), "p90_ms": _ms(h.quantile(0.90)), "p99_ms": _ms(h.quantile(0.99)),
               "p999_ms": _ms(h.quantile(0.999)), "max_ms_whole_run": _ms(lag.vmax if lag.count else None),
               "output_tokens": self.metrics.output_tokens_total, "client_cpu_pct": None, "loop_lag_ms": None}
        snap = self.snapshot
        res["client_cpu_pct"], res["loop_lag_ms"] = snap.client_cpu_pct, snap.loop_lag_ms
        Path(result_path).write_text(json.dumps(res))
        return await orig_stop(self, reason)

    Ticker.each_second, Engine.stop = each_second, stop
    _child_main(config, conn)


def _ms(v: float | None) -> float | None:
    return None if v is None else round(v * 1000.0, 3)


def make_host(config, result_path: str, warmup_s: float):
    """redline's EngineProcess, whose child runs bench_child_main instead of _child_main."""
    from redline.engine.host import EngineProcess

    class LagEngineProcess(EngineProcess):
        def __init__(self) -> None:
            super().__init__(config)
            import multiprocessing as mp

            ctx = mp.get_context("spawn")
            self._proc = ctx.Process(target=bench_child_main, args=(config, self._child_conn, result_path, warmup_s),
                                     name="redline-engine", daemon=False)

    return LagEngineProcess()


def engine_config(url: str, c: int, out: str, more: tuple[str, ...] = ()):
    """Exactly what `redline --url URL --concurrency C --out OUT [MORE...]` builds (tui/cli/handlers.py)."""
    from redline.tui.cli.arguments import build_parser
    from redline.tui.cli.launch import engine_config as cfg_from_args, worker_count, workload_from_args

    # --workers: the runs' children inherit it; "auto" is redline's default (its own choice)
    workers = os.environ.get(WORKERS_ENV, "1").strip() or "1"
    argv = ["--url", url, "--concurrency", str(c), "--out", out, *more] + (["--workers", workers] if workers != "auto" else [])
    args = build_parser().parse_args(argv)
    args.argv = ["redline", *argv]
    cfg = cfg_from_args(args, url, workload_from_args(args), concurrency=c, api=None, model=None, live_steps=True)
    cfg.workers, cfg.workers_why = worker_count(args, cfg)  # as checked_config chooses them (--workers auto)
    cfg.workers_auto = args.workers == "auto"
    return cfg, args


def tui_child(url: str, c: int, seconds: float, warmup: float, out: str, result: str, transport: str | None, nice: int = 0) -> int:
    """What tui/run_app.py does, with the lag-writing engine child; quits by SIGTERM after S s."""
    cfg, args = engine_config(url, c, out)
    if transport:
        cfg.transport = transport
    host = make_host(cfg, result, warmup)
    host.start()
    if nice:  # after the engine child is spawned: only the drawing process yields the CPU
        os.nice(nice)
    from redline.tui.app import RedlineApp

    app = RedlineApp(host, step=args.step)
    threading.Timer(warmup + seconds, lambda: os.kill(os.getpid(), signal.SIGTERM)).start()
    try:
        app.run()
    finally:
        host.stop(app.exit_reason)
    return 0


def headless(url: str, c: int, seconds: float, warmup: float, out: str, result: str, transport: str | None) -> float:
    """Returns the machine's busy CPU % (all processes) over the measured window."""
    from _bench import box_busy

    cfg, _ = engine_config(url, c, out)
    if transport:
        cfg.transport = transport
    host = make_host(cfg, result, warmup)
    host.start()
    try:
        time.sleep(warmup)
        b0, t0 = box_busy(), time.perf_counter()
        time.sleep(seconds)
        return 100 * (box_busy() - b0) / (time.perf_counter() - t0)
    finally:
        host.stop("benchmark done")


# -- the driver --------------------------------------------------------------------------------
def run_tui(url: str, c: int, seconds: float, warmup: float, tmp: Path, transport: str | None, nice: int = 0) -> tuple[dict, str, float | None, float]:
    if shutil.which("tmux") is None:
        raise SystemExit("lag.py: the tui mode needs tmux (apt-get install tmux)")
    result = tmp / f"tui-{c}.json"
    name = f"redline-lag-{os.getpid()}-{c}"
    cmd = [sys.executable, os.path.abspath(__file__), "--tui-child", "--url", url, "-c", str(c),
           "--seconds", str(seconds), "--warmup", str(warmup), "--out", str(tmp / f"tui-{c}"), "--result", str(result)]
    if transport:
        cmd += ["--transport", transport]
    if nice:
        cmd += ["--tui-nice", str(nice)]
    shell = "exec " + " ".join(_q(x) for x in cmd)
    subprocess.run(TMUX + ["new-session", "-d", "-s", name, "-x", "80", "-y", "24", shell], check=True)
    screen, cpu = "", None
    try:
        pid = int(subprocess.run(TMUX + ["display", "-p", "-t", name, "#{pane_pid}"], capture_output=True, text=True, check=True).stdout)
        import psutil

        proc = psutil.Process(pid)
        from _bench import box_busy

        time.sleep(warmup)
        c0, t0, b0 = _cpu(proc), time.perf_counter(), box_busy()
        deadline = time.monotonic() + seconds - 1.0
        while time.monotonic() < deadline:
            time.sleep(0.2)
        c1, t1, b1 = _cpu(proc), time.perf_counter(), box_busy()
        cpu = 100 * (c1 - c0) / (t1 - t0) if c0 is not None and c1 is not None else None
        busy = 100 * (b1 - b0) / (t1 - t0)
        screen = subprocess.run(TMUX + ["capture-pane", "-p", "-t", name], capture_output=True, text=True).stdout
        end = time.monotonic() + 60
        while not result.exists() and time.monotonic() < end:
            time.sleep(0.2)
        while _alive(name) and time.monotonic() < end:
            time.sleep(0.2)
    finally:
        subprocess.run(TMUX + ["kill-session", "-t", name], capture_output=True)
    if not result.exists():
        raise RuntimeError(f"tui C={c}: no result (screen was:\n{screen})")
    return json.loads(result.read_text()), screen, cpu, busy


def _cpu(proc) -> float | None:
    try:
        t = proc.cpu_times()
        return t.user + t.system
    except Exception:  # noqa: BLE001 - the process may have gone
        return None


def _alive(name: str) -> bool:
    return subprocess.run(TMUX + ["has-session", "-t", name], capture_output=True).returncode == 0


def _q(s: str) -> str:
    import shlex

    return shlex.quote(s)


def run_headless(url: str, c: int, seconds: float, warmup: float, tmp: Path, transport: str | None) -> tuple[dict, float]:
    result = tmp / f"headless-{c}.json"
    busy = headless(url, c, seconds, warmup, str(tmp / f"headless-{c}"), str(result), transport)
    return json.loads(result.read_text()), busy


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--concurrency", default="1,64,256", help="comma-separated C values (default 1,64,256)")
    p.add_argument("--seconds", type=float, default=15.0, help="measured seconds per run, after the warm-up (default 15)")
    p.add_argument("--warmup", type=float, default=3.0, help="seconds before measuring (default 3)")
    p.add_argument("--workers", default="1", help="comma-separated --workers values (default 1: the engine's own process)")
    p.add_argument("--modes", default="tui,headless", help="tui, headless or both (default tui,headless)")
    p.add_argument("--sim-profile", dest="profile", default="healthy", help="sim profile (default healthy)")
    p.add_argument("--sim-set", action="append", default=[], metavar="FIELD=VALUE", help="sim profile override")
    p.add_argument("--transport", default=None, help="engine transport (default: redline's default)")
    p.add_argument("--tui-nice", type=int, default=0, metavar="N",
                   help="experiment: run the TUI's drawing process at nice N (the engine process stays at 0)")
    p.add_argument("--tui-child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    p.add_argument("-c", type=int, help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.tui_child:  # quits by its own SIGTERM (tui_child): the app's default handling
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        sys.exit(tui_child(args.url, args.c, args.seconds, args.warmup, args.out, args.result, args.transport, args.tui_nice))

    from _bench import machine, sim, table

    from redline.engine.client.http import DEFAULT_TRANSPORT

    cs = [int(x) for x in args.concurrency.split(",") if x.strip()]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    for m in modes:
        if m not in ("tui", "headless"):
            p.error(f"--modes {m!r}: expected tui or headless")
    transport = args.transport or DEFAULT_TRANSPORT
    print(f"# measurement lag: receive time - sim_t per chunk ({machine()})")
    print(f"# sim profile {args.profile} {' '.join(args.sim_set)}; transport {transport}; "
          + (f"TUI at nice {args.tui_nice}; " if args.tui_nice else "")
          + f"{args.warmup:g} s warm-up + {args.seconds:g} s measured per run")
    rows = []
    tmp = Path(tempfile.mkdtemp(prefix="redline-lag-"))
    try:
        with sim(args.profile, args.sim_set) as srv:
            for w, c in [(w, c) for w in [int(x) for x in args.workers.split(",") if x.strip()] for c in cs]:
                os.environ[WORKERS_ENV] = str(w)
                tmp_w = tmp / f"w{w}-c{c}"
                tmp_w.mkdir()
                for mode in modes:
                    screen, tui_cpu = "", None
                    if mode == "tui":
                        r, screen, tui_cpu, busy = run_tui(srv.url, c, args.seconds, args.warmup, tmp_w, args.transport, args.tui_nice)
                    else:
                        r, busy = run_headless(srv.url, c, args.seconds, args.warmup, tmp_w, args.transport)
                    drew = ("C=" in screen) if mode == "tui" else None
                    print(f"  C={c:<4} workers {w} {mode:<8} chunks {r['chunks']:>7}  p50 {r['p50_ms']} ms  p99 {r['p99_ms']} ms  "
                          f"p99.9 {r['p999_ms']} ms  engine CPU {_pct(r['client_cpu_pct'])}  loop lag p99 {r['loop_lag_ms']} ms  machine busy {busy:.0f}%"
                          + (f"  TUI process CPU {_pct(tui_cpu)}, screen drawn: {drew}" if mode == "tui" else ""),
                          file=sys.stderr, flush=True)
                    if mode == "tui" and screen:
                        head = [ln for ln in screen.splitlines() if "C=" in ln][:1]
                        print(f"           screen: {head[0].strip() if head else screen.splitlines()[:2]}", file=sys.stderr)
                    rows.append((c, w, mode, r["chunks"], r["p50_ms"], r["p99_ms"], r["p999_ms"],
                                 _pct(tui_cpu) if mode == "tui" else "-", "yes" if drew else ("NO" if drew is False else "-"),
                                 f"{busy:.0f}% of {100 * (os.cpu_count() or 1)}%"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print()
    print(table(("C", "workers", "mode", "chunks", "lag p50 ms", "lag p99 ms", "lag p99.9 ms", "TUI CPU", "drawn", "machine CPU busy (all processes)"), rows))


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}%"


if __name__ == "__main__":
    from _bench import run_main

    run_main(main)
