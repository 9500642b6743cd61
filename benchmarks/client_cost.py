"""Client cost: CPU seconds per streamed token, redline vs a minimal aiohttp client.

    python benchmarks/client_cost.py [--concurrency 64,256,1024] [--seconds 8] [--output-len 256]
                                     [--clients reference,lean,aiohttp,httpx] [--repeat 1]
                                     [--step-ms MS] [--step-per-seq-ms MS]
                                     [--pace STEP_MS[+PER_SEQ_MS] ...]

Against one simulated server that streams as fast as its CPU allows (no decode time, no
ceiling, no running cap; or, with --step-ms, one decode step every MS ms as a real server
paces it, so every client gets the same tokens at the same moments; --step-per-seq-ms adds MS ms
per running request to each step, as a real batch grows its step), each client runs as a
fresh subprocess for --seconds of load and
its CPU is taken from the kernel when it exits (os.wait4 rusage: user + sys of the process and
any children it reaped, start-up and shutdown included). Clients:

  reference  a minimal aiohttp client written below: one shared session, one json.loads per SSE
             line and a perf_counter per content chunk, as SGLang's bench_serving does; on the
             default asyncio loop, as bench_serving runs
  lean       one redline Engine (telemetry off, no calibration, no session), transport "lean",
             on uvloop as the TUI runs it, its heap frozen once started and again before the
             process ends, as the engine's own process does (engine/host.py)
  aiohttp    the same Engine on the httpx-aiohttp transport
  httpx      the same Engine on httpx's own transport
  reference-uvloop  (optional) the reference on uvloop

Before the runs redline's modules are compiled to bytecode (an installed package has it;
an edited checkout under PYTHONDONTWRITEBYTECODE=1 would compile them at every start).
Tokens are the content tokens each client received, counted by the client. The sim's own CPU,
what it sent, and the CPU every other process on the machine used during the load window are
printed too: on a small machine the sim itself (or a neighbour) can be the limit, and the
"capacity" lines say whether one engine process kept up at the highest C. With --repeat N the
clients run interleaved N times and the table shows the median run (and the range).

--pace (repeatable) runs several pacings in one invocation, one sim each, one table each:
`--pace 20+0.1 --pace 2+0.005` is a 20 ms step plus 0.1 ms per running request, then a 2 ms
step plus 0.005 ms per request; it replaces --step-ms / --step-per-seq-ms.

--server compiled runs the clients against benchmarks/lockstep_server.c (C, built when
missing: benchmarks/compiled_server.py) instead of the sim: the same pacing and chunks as a
vLLM stream with continuous usage, at a fraction of the sim's CPU, so an unpaced run measures
the clients, not the server (the sim, Python, is the limit there). Paced by --pace as above
(an unpaced --pace 0 is not possible there: one step at least every STEP ms). The last
lines say each ratio against issue 47's goal (reference / redline >= 1.5, paced and unpaced).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

CLIENTS = ("reference", "lean", "aiohttp", "httpx", "reference-uvloop")
MODEL = "redline-sim-70b"
PROMPT = " ".join(["benchmark"] * 30)


# -- the reference client (what the goal is measured against) ------------------------------
async def reference(url: str, c: int, seconds: float, output_len: int) -> dict:
    import aiohttp

    body = {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": output_len,
            "ignore_eos": True, "temperature": 0.0, "stream": True, "stream_options": {"include_usage": True}}
    counts = {"tokens": 0, "requests": 0}
    perf = time.perf_counter

    async def one(session: aiohttp.ClientSession) -> None:
        st = last = perf()
        ttft, itl = None, []
        async with session.post(url + "/v1/chat/completions", json=body) as resp:
            async for line in resp.content:  # one SSE line per iteration
                line = line.strip()
                if not line:
                    continue
                chunk = line.decode("utf-8").removeprefix("data: ")
                if chunk == "[DONE]":
                    continue
                data = json.loads(chunk)
                if data["choices"] and data["choices"][0]["delta"].get("content"):
                    t = perf()
                    if ttft is None:
                        ttft = t - st
                    else:
                        itl.append(t - last)
                    last = t
                    counts["tokens"] += 1
        counts["requests"] += 1

    async def worker(session: aiohttp.ClientSession) -> None:
        while True:
            await one(session)

    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=None)) as session:
        tasks = [asyncio.create_task(worker(session)) for _ in range(c)]
        window = _Window()
        await asyncio.sleep(seconds)
        window.end()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return {**counts, **window.figures()}


# -- redline's engine ------------------------------------------------------------------------
async def redline(url: str, c: int, seconds: float, output_len: int, transport: str) -> dict:
    from redline.engine.core.config import EngineConfig
    from redline.engine.core.engine import Engine
    from redline.engine.heap import freeze_heap
    from redline.engine.workload.prompts import WorkloadConfig

    cfg = EngineConfig(url=url, concurrency=c, max_concurrency=max(c, 1024), transport=transport,
                       workload=WorkloadConfig(input_len=32, output_len=output_len),
                       telemetry=False, calibrate=False)
    e = Engine(cfg)
    await e.start()
    freeze_heap()  # as the engine's own process does once started (engine/host.py _child)
    window = _Window()
    await asyncio.sleep(seconds)
    window.end()
    await e.stop()
    m = e.metrics
    return {"tokens": m.output_tokens_total, "requests": m.completed, "failed": m.failed, **window.figures()}


class _Window:
    """Wall and own-CPU seconds of the load window (start-up excluded) and the sim's CPU."""

    def __init__(self) -> None:
        from _bench import box_busy

        self.w0, self.c0 = time.perf_counter(), time.process_time()
        self.s0, self.b0 = _sim_cpu(), box_busy()

    def end(self) -> None:
        from _bench import box_busy

        self.w1, self.c1 = time.perf_counter(), time.process_time()
        self.s1, self.b1 = _sim_cpu(), box_busy()

    def figures(self) -> dict:
        wall = self.w1 - self.w0
        client = 100 * (self.c1 - self.c0) / wall
        sim = None if self.s0 is None else 100 * (self.s1 - self.s0) / wall
        box = 100 * (self.b1 - self.b0) / wall
        return {"window_s": wall, "window_cpu_pct": client, "sim_cpu_pct": sim,
                "others_cpu_pct": box - client - (sim or 0.0)}


def _sim_cpu() -> float | None:
    pid = os.environ.get("BENCH_SIM_PID")
    if not pid:
        return None
    from _bench import cpu_seconds

    return cpu_seconds(int(pid))


def worker_main(args: argparse.Namespace) -> None:
    if args.worker == "reference":
        res = asyncio.run(reference(args.url, args.c, args.seconds, args.output_len))
    elif args.worker == "reference-uvloop":
        import uvloop

        res = uvloop.run(reference(args.url, args.c, args.seconds, args.output_len))
    else:
        from redline.engine.heap import freeze_heap
        from redline.engine.host import new_event_loop

        transport = args.worker
        loop = new_event_loop()  # uvloop, as the engine runs under the TUI
        try:
            res = loop.run_until_complete(redline(args.url, args.c, args.seconds, args.output_len, transport))
        finally:
            loop.close()
            freeze_heap()  # as the engine's own process does before it ends (engine/host.py _child_main)
    print(json.dumps(res), flush=True)


# -- the driver ------------------------------------------------------------------------------
def run_client(kind: str, url: str, c: int, seconds: float, output_len: int, sim_pid: int) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", kind, "--url", url, "-c", str(c),
           "--seconds", str(seconds), "--output-len", str(output_len)]
    env = dict(os.environ, BENCH_SIM_PID=str(sim_pid))
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    out, err = _communicate_without_reaping(proc)
    _, status, ru = os.wait4(proc.pid, 0)  # this child's rusage (and its reaped children's)
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stdout.close()
    proc.stderr.close()
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{kind} C={c} failed ({proc.returncode}): {err.decode()[-2000:]}")
    res = json.loads(out.decode().strip().splitlines()[-1])
    res.update(cpu_s=ru.ru_utime + ru.ru_stime, user_s=ru.ru_utime, sys_s=ru.ru_stime, wall_s=wall, maxrss_mib=ru.ru_maxrss / 1024)
    return res


def _communicate_without_reaping(proc: subprocess.Popen) -> tuple[bytes, bytes]:
    """Read stdout/stderr to EOF without letting Popen wait() (os.wait4 gets the rusage)."""
    import selectors

    chunks: dict[int, list[bytes]] = {proc.stdout.fileno(): [], proc.stderr.fileno(): []}
    with selectors.DefaultSelector() as sel:
        for f in (proc.stdout, proc.stderr):
            sel.register(f.fileno(), selectors.EVENT_READ)
        while chunks and sel.get_map():
            for key, _ in sel.select():
                data = os.read(key.fd, 65536)
                if data:
                    chunks[key.fd].append(data)
                else:
                    sel.unregister(key.fd)
    return b"".join(chunks[proc.stdout.fileno()]), b"".join(chunks[proc.stderr.fileno()])


def compile_bytecode() -> None:
    """Every client starts from bytecode, as an installed package does (pip compiles it): in a
    checkout edited under PYTHONDONTWRITEBYTECODE=1 each changed module was compiled again
    at every start (~60 ms of redline's, none of aiohttp's)."""
    import compileall

    import redline.engine

    compileall.compile_dir(os.path.dirname(redline.engine.__file__), quiet=2)
    compileall.compile_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bench.py"), quiet=2)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--concurrency", default="64,256,1024", help="comma-separated C values (default 64,256,1024)")
    p.add_argument("--seconds", type=float, default=8.0, help="load seconds per client run (default 8)")
    p.add_argument("--output-len", type=int, default=256, help="max_tokens per request (default 256)")
    p.add_argument("--clients", default="reference,lean,aiohttp,httpx", help=f"comma-separated, from {', '.join(CLIENTS)}")
    p.add_argument("--repeat", type=int, default=1, help="runs per client and C; the table shows the median (default 1)")
    p.add_argument("--step-ms", type=float, default=0.0, metavar="MS",
                   help="pace the sim: one decode step (a token for every stream) every MS ms, as a real server "
                        "does, instead of as fast as it can (default 0: as fast as it can)")
    p.add_argument("--step-per-seq-ms", type=float, default=0.0, metavar="MS",
                   help="with --step-ms: each decode step also lasts MS ms per running request (the sim's "
                        "decode_per_seq_s; default 0)")
    p.add_argument("--pace", action="append", default=[], metavar="STEP_MS[+PER_SEQ_MS]",
                   help="a pacing to run (repeatable; replaces --step-ms/--step-per-seq-ms): e.g. 20+0.1")
    p.add_argument("--sim-set", action="append", default=[], metavar="FIELD=VALUE", help="extra sim profile override")
    p.add_argument("--server", default="sim", choices=("sim", "compiled"),
                   help="sim: redline's simulated server (default); compiled: benchmarks/lockstep_server.c, built when missing")
    p.add_argument("--worker", choices=CLIENTS, help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    p.add_argument("-c", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker_main(args)
        return

    cs = [int(x) for x in args.concurrency.split(",") if x.strip()]
    clients = [x.strip() for x in args.clients.split(",") if x.strip()]
    bad = [x for x in clients if x not in CLIENTS]
    if bad:
        p.error(f"unknown client(s) {bad}: expected {', '.join(CLIENTS)}")
    paces: list[tuple[float, float]] = []
    for text in args.pace:
        try:
            step, _, per = text.partition("+")
            paces.append((float(step), float(per or 0)))
        except ValueError:
            p.error(f"--pace {text!r}: expected STEP_MS or STEP_MS+PER_SEQ_MS, e.g. 20+0.1")
    if not paces:
        paces = [(args.step_ms, args.step_per_seq_ms)]
    compile_bytecode()
    for step_ms, per_seq_ms in paces:
        run_pace(args, cs, clients, step_ms, per_seq_ms)
        print()


class _Compiled:
    """The compiled lockstep server, as run_pace asks the sim: its url, pid and tokens sent."""

    def __init__(self, step_ms: float, per_seq_ms: float) -> None:
        from compiled_server import CompiledServer

        if step_ms <= 0 and per_seq_ms <= 0:
            raise SystemExit("client_cost.py --server compiled: give a --pace (e.g. 2+0.005 for as fast as a client reads)")
        self.srv = CompiledServer(f"{step_ms:g}+{per_seq_ms:g}")
        self.url, self.proc = self.srv.url, self.srv.proc

    def sent(self) -> int:
        return self.srv.stats()["tokens_written"]

    def __enter__(self) -> "_Compiled":
        return self

    def __exit__(self, *exc: object) -> None:
        self.srv.stop()


def share_line(capacity: list) -> None:
    """What --workers auto's start-up measure reads here (engine/load/token_cost.py: the read path
    alone) against the lean client's whole token in the load window: the share
    engine/constants.py READ_PATH_SHARE stands for."""
    lean = [r for _, kind, r in capacity if kind == "lean"]
    if not lean:
        return
    from redline.engine.constants import READ_PATH_SHARE
    from redline.engine.load.token_cost import measure

    reads = sorted(measure().read_s for _ in range(3))
    whole = lean[0]["us_tok_load"]
    print(f"read path (engine/load/token_cost.py, median of 3): {reads[1] * 1e6:.2f} us a chunk; the lean client's whole token "
          f"here {whole:.2f} us: share {reads[1] * 1e6 / whole:.2f} (READ_PATH_SHARE = {READ_PATH_SHARE:g})")


GOAL = 1.5  # issue 47: redline's CPU per token at most 1/1.5 of the reference's, paced and unpaced


def run_pace(args: argparse.Namespace, cs: list[int], clients: list[str], step_ms: float, per_seq_ms: float) -> None:
    from _bench import FAST_SIM, machine, sim, sim_state, table

    settings = FAST_SIM + tuple(args.sim_set)
    if step_ms > 0 or per_seq_ms > 0:
        settings = tuple(x for x in settings if not x.startswith(("decode_base_s=", "decode_per_seq_s=")))
        settings += (f"decode_base_s={step_ms / 1000}", f"decode_per_seq_s={per_seq_ms / 1000}")
    paced = step_ms > 0 or per_seq_ms > 0
    pace_text = (f" (paced: a decode step every {step_ms:g} ms" + (f" + {per_seq_ms:g} ms per running request)" if per_seq_ms else ")")
                 if paced else " (as fast as it can)")
    print(f"# client cost: CPU per streamed token, start-up included ({machine()}; load average {os.getloadavg()[0]:.2f})")
    where = ("the compiled lockstep server (benchmarks/lockstep_server.c)" if args.server == "compiled"
             else f"sim: {' '.join(settings)}")
    print(f"# {args.seconds:g} s of load per run, output_len {args.output_len}, chat API, {where}" + pace_text)
    rows, capacity, others, ratios = [], [], [], []
    server = _Compiled(step_ms, per_seq_ms) if args.server == "compiled" else sim(settings=settings)

    def sent_now() -> int:
        return server.sent() if args.server == "compiled" else sim_state(srv.url)["generation_tokens_total"]

    with server as srv:
        for c in cs:
            runs: dict[str, list[dict]] = {k: [] for k in clients}
            for _ in range(args.repeat):  # interleaved, so drifts in the machine hit every client alike
                for kind in clients:
                    s0 = sent_now()
                    r = run_client(kind, srv.url, c, args.seconds, args.output_len, srv.proc.pid)
                    r["sim_sent"] = sent_now() - s0
                    r["us_tok"] = 1e6 * r["cpu_s"] / max(r["tokens"], 1)
                    r["us_tok_load"] = 1e4 * r["window_cpu_pct"] * r["window_s"] / max(r["tokens"], 1)
                    runs[kind].append(r)
                    print(f"  C={c:<5} {kind:<16} tokens {r['tokens']:>8}  cpu {r['cpu_s']:6.2f} s (user {r['user_s']:.2f} sys {r['sys_s']:.2f})  "
                          f"{r['us_tok']:6.2f} us/token ({r['us_tok_load']:.2f} in the load window)  "
                          f"load window: client {r['window_cpu_pct']:5.1f}% CPU, sim {r['sim_cpu_pct'] or 0:5.1f}% CPU, "
                          f"other processes {r['others_cpu_pct']:5.1f}%, {r['tokens'] / r['window_s']:8.0f} tok/s", file=sys.stderr, flush=True)
            ref_us = ref_load = None
            for kind in clients:
                rs = sorted(runs[kind], key=lambda r: r["us_tok"])
                r = rs[len(rs) // 2]  # the median run
                if kind == "reference":
                    ref_us, ref_load = r["us_tok"], r["us_tok_load"]
                ratio = f"{r['us_tok'] / ref_us:.2f}" if ref_us else "-"
                spread = f" ({rs[0]['us_tok']:.1f}-{rs[-1]['us_tok']:.1f})" if len(rs) > 1 else ""
                if ref_us and kind not in ("reference", "reference-uvloop"):
                    gain = ref_us / r["us_tok"]
                    ratios.append(f"C={c} {pace_text.strip(' ()')}: reference / {kind}: {gain:.2f} "
                                  f"({ref_load / r['us_tok_load']:.2f} in the load window); goal {GOAL:g}: "
                                  + ("met" if gain >= GOAL else f"not met ({gain / GOAL:.0%} of it)"))
                rows.append((c, kind, r["tokens"], f"{r['cpu_s']:.2f}", f"{r['us_tok']:.2f}{spread}", f"{r['us_tok_load']:.2f}", ratio,
                             f"{r['tokens'] / r['window_s']:.0f}", f"{r['window_cpu_pct']:.0f}%", f"{r['sim_cpu_pct'] or 0:.0f}%",
                             f"{r['others_cpu_pct']:.0f}%"))
                others.extend(x["others_cpu_pct"] for x in rs)
                if c == max(cs) and kind not in ("reference", "reference-uvloop"):
                    capacity.append((c, kind, r))
    print()
    print(table(("C", "client", "tokens", "CPU s", "µs/token", "µs/token load only", "ratio to reference", "tok/s received",
                 "client CPU (load)", "sim CPU (load)", "other processes"), rows))
    print()
    for line in ratios:  # the figure: how many times the reference's CPU per token redline's is
        print(line)
    ncpu = os.cpu_count() or 1
    if others and max(others) > 20:
        print(f"WARNING: other processes on this machine used up to {max(others):.0f}% of a core during the load "
              f"windows ({ncpu} cores in all): client and sim were competing for CPU; figures are contended.\n")
    share_line(capacity)
    for c, kind, r in capacity:
        tps = r["tokens"] / r["window_s"]
        kept = r["tokens"] / max(r["sim_sent"], 1)
        ncpu = os.cpu_count() or 1
        free = 100 * ncpu - r["window_cpu_pct"] - (r["sim_cpu_pct"] or 0) - max(r["others_cpu_pct"], 0)
        verdict = ("the client is saturated: more load needs more client processes" if r["window_cpu_pct"] > 90
                   else "one process keeps up; the sim is the limit" if (r["sim_cpu_pct"] or 0) > 90
                   else "one process keeps up; the machine is the limit (no idle core left)" if free < 20
                   else "one process keeps up")
        print(f"capacity C={c} {kind}: received {tps:.0f} tok/s = {100 * kept:.1f}% of what the sim sent, "
              f"client {r['window_cpu_pct']:.0f}% of a core, sim {r['sim_cpu_pct'] or 0:.0f}%, "
              f"other processes {r['others_cpu_pct']:.0f}%, idle {max(free, 0):.0f}% (of {100 * ncpu}%): {verdict}")


if __name__ == "__main__":
    from _bench import run_main

    run_main(main)
