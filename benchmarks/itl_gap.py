"""ITL vs the server's write gap: redline's p99 ITL minus an independent server's p99 write gap.

    python benchmarks/itl_gap.py [--concurrency 256,512,1024] [--seconds 15] [--warmup 3]
                                 [--modes tui,headless] [--workers 1,2] [--pace 20+0.1]
                                 [--output-len 128] [--repeat N] [--quiet-below PCT] [--keep DIR]

Issue 26's "TUI at C=256 against an independent paced server: p99 ITL within 2 ms of the
server's p99 write gap". The server is not redline's sim: it is written below (a bare
asyncio.Protocol with httptools, on uvloop as uvicorn runs vLLM and SGLang; --server-loop
asyncio for the default loop) and runs as its own process on 127.0.0.1. It speaks enough of the
OpenAI API for redline: GET /v1/models, GET /health, POST /v1/chat/completions and
/v1/completions (streamed, `stream_options.include_usage` / `continuous_usage_stats` as vLLM;
not streamed), 404 for the rest (/get_server_info, /metrics). It paces like a continuously
batching server (--pace STEP+PER_SEQ, default 20+0.1): one decode step every
STEP + PER_SEQ * b ms on an absolute schedule (b = the requests in the batch; arrivals join
at the next step, no prefill cost), and at the end of each step one SSE chunk (one token) to
every stream of the batch, in one burst. Just before each token chunk's write it stamps
time.perf_counter() for that stream (CLOCK_MONOTONIC: the same clock in every process here).

  server write gap  per stream, the differences between consecutive token chunks' write
                    stamps (the first token closes no gap: as ITL), each counted at the
                    write of the chunk that closes it
  redline ITL       per request, the gaps between consecutive content chunks' receive stamps
                    (engine/measure/records.py gaps_from: one ITL per content chunk on OpenAI APIs),
                    each counted at the arrival of the chunk that closes it; exactly what the
                    engine feeds its step figures (StepBook.on_gaps: the coordinator's feed, so
                    worker processes' gaps too, at their 10 ms bucket's time). requests.ndjson
                    carries per-request summaries only (itl_mean_ms, itl_max_ms), so the engine
                    child of this benchmark records that feed, as lag.py records its lag
                    histogram (the recording adds well under 1 µs per ITL to the engine's
                    harvest); the engine, its process, loop and configuration are redline's own

Both are taken over the same window, from the engine's start + --warmup for --seconds, so the
same requests' gaps on both sides (a gap closed by a chunk written at the window's edge and
read just after it may fall on either side: a few of ~100k). Percentiles: linear
interpolation (numpy's default), exact. The table's p99 diff is redline's p99 ITL minus the
server's p99 write gap (the goal: <= 2 ms).

A second line per run ("step") reads the session itself (--out TMP; requests.ndjson and
summary.json are written there): the live step's p99_itl_ms in summary.json, as the engine
computed it over the whole step (from the engine's start: the warm-up included), against the
server's write gaps over the step's own span (t_start .. t_start + duration_s).

  tui       `redline --url SERVER --concurrency C --out TMP [--workers W]` as run by
            tui/cli/handlers.py (the engine_config of lag.py), in a real terminal (tmux 80x24, a
            private socket) drawing at its normal rate; stopped by SIGTERM as lag.py stops it;
            the TUI process's CPU (the drawing process, not the engine's) over the window
  headless  the same engine process with no TUI

CPU columns, over the window (psutil): the TUI process (drawing), the engine process with its
worker processes (the TUI's or the driver's descendants), the server process, and the whole
machine (every process), and "others": the machine less this benchmark's processes (on a
small machine a neighbour's load shows in the figures; --quiet-below waits for a quieter
second before each run). "engine tick ms": the median time the engine's once-a-second work
(engine/core/ticker.py Ticker.each_second, which harvests every in-flight request's gaps) holds the
engine's loop in the window: chunks that arrive meanwhile are stamped late, so it shows in
the ITL's tail. The engine's loop lag p99 (its client-health figure, the last before the stop)
is printed per run.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from array import array
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from redline.engine.measure.log_bins import quantile  # the engine's own: linear, numpy's default  # noqa: E402

MODEL = "itl-gap-server"
WORDS = [" the", " a", " of", " model", " token", " and", " to", " in", " server", " is", " load", " it"]


# == the independent paced server ==================================================================
class Stream:
    __slots__ = ("conn", "n_max", "n", "usage", "continuous", "prompt_tokens", "pre", "times", "closed", "chat")

    def __init__(self, conn, rid: int, api_chat: bool, n_max: int, usage: bool, continuous: bool, prompt_tokens: int) -> None:
        self.conn, self.n_max, self.n = conn, max(1, n_max), 0
        self.usage, self.continuous, self.prompt_tokens, self.chat = usage, continuous, prompt_tokens, api_chat
        head = (f'{{"id":"chatcmpl-{rid}","object":"chat.completion.chunk"' if api_chat else f'{{"id":"cmpl-{rid}","object":"text_completion"')
        head += f',"created":{int(time.time())},"model":"{MODEL}","choices":'
        self.pre = head
        self.times = array("d")  # perf_counter just before each token chunk's write
        self.closed = False

    def _usage(self, k: int) -> str:
        p = self.prompt_tokens
        return f'"usage":{{"prompt_tokens":{p},"total_tokens":{p + k},"completion_tokens":{k}}}'

    def opening(self) -> bytes:
        if not self.chat:
            return b""
        s = self.pre + '[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]'
        if self.continuous:
            s += "," + self._usage(0)
        return _event(s + "}")

    def token(self) -> tuple[bytes, bool]:
        self.n += 1
        last = self.n >= self.n_max
        word = WORDS[self.n % len(WORDS)]
        fin = '"length"' if last else "null"
        if self.chat:
            s = self.pre + f'[{{"index":0,"delta":{{"content":"{word}"}},"logprobs":null,"finish_reason":{fin}}}]'
        else:
            s = self.pre + f'[{{"index":0,"text":"{word}","logprobs":null,"finish_reason":{fin}}}]'
        if self.continuous:
            s += "," + self._usage(self.n)
        out = _event(s + "}")
        if last:
            if self.usage:
                out += _event(self.pre + "[]," + self._usage(self.n) + "}")
            out += _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
        return out, last


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _event(s: str) -> bytes:
    return _chunk(b"data: " + s.encode() + b"\n\n")


class PacedServer:
    def __init__(self, step_ms: float, per_seq_ms: float) -> None:
        self.step_s, self.per_seq_s = step_ms / 1000.0, per_seq_ms / 1000.0
        self.pending: list[Stream] = []
        self.running: list[Stream] = []
        self.done: list[Stream] = []
        self.arrived = asyncio.Event()
        self.rid = 0
        self.steps = 0
        self.overruns = 0  # steps whose writes started late by more than a millisecond
        self.queued_writes = 0  # token writes made while that socket's user-space buffer was not empty
        self.wall0, self.perf0 = time.time(), time.perf_counter()

    def add(self, s: Stream) -> None:
        self.pending.append(s)
        self.arrived.set()

    async def decode_loop(self) -> None:
        perf = time.perf_counter
        nxt = perf()
        while True:
            if self.pending:
                self.running.extend(self.pending)
                self.pending.clear()
            if not self.running:
                self.arrived.clear()
                await self.arrived.wait()
                nxt = perf()
                continue
            nxt += self.step_s + self.per_seq_s * len(self.running)
            delay = nxt - perf()
            if delay > 0:
                await asyncio.sleep(delay)
            if perf() - nxt > 0.001:
                self.overruns += 1
                nxt = perf()  # no catch-up burst: the next step starts from here
            self.steps += 1
            keep = []
            for s in self.running:
                if s.closed:
                    self.done.append(s)
                    continue
                data, last = s.token()
                tr = s.conn.transport
                if tr.get_write_buffer_size():
                    self.queued_writes += 1
                s.times.append(perf())
                tr.write(data)
                if last:
                    s.conn.stream = None
                    self.done.append(s)
                    if not s.conn.keep_alive:
                        tr.close()
                else:
                    keep.append(s)
            self.running = keep

    def gaps(self, t0: float, t1: float) -> dict:
        """Write gaps (ms) closed by a token chunk written in [t0, t1] (perf_counter)."""
        out: list[float] = []
        streams = 0
        for s in (*self.done, *self.running):
            ts = s.times
            hit = False
            for i in range(1, len(ts)):
                if t0 <= ts[i] <= t1:
                    out.append((ts[i] - ts[i - 1]) * 1000.0)
                    hit = True
            streams += hit
        ru = resource.getrusage(resource.RUSAGE_SELF)
        return {"gaps_ms": out, "streams": streams, "steps": self.steps, "overruns": self.overruns,
                "queued_writes": self.queued_writes, "cpu_s": ru.ru_utime + ru.ru_stime,
                "wall0": self.wall0, "perf0": self.perf0}


class Conn(asyncio.Protocol):
    def __init__(self, server: PacedServer) -> None:
        import httptools

        self.server = server
        self.parser = httptools.HttpRequestParser(self)
        self.transport = None
        self.stream: Stream | None = None
        self.keep_alive = True
        self._url = b""
        self._body: list[bytes] = []

    # asyncio.Protocol
    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        import httptools

        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.transport.close()

    def connection_lost(self, exc) -> None:
        if self.stream is not None:
            self.stream.closed = True

    # httptools callbacks
    def on_message_begin(self) -> None:
        self._url, self._body = b"", []

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        self.keep_alive = self.parser.should_keep_alive()
        method = self.parser.get_method()
        path, _, query = self._url.decode("latin-1").partition("?")
        try:
            self.route(method, path, query, b"".join(self._body))
        except Exception as exc:  # noqa: BLE001 - a benchmark server answers 500 and goes on
            self.reply(500, {"error": {"message": repr(exc)}})

    def reply(self, status: int, obj: dict) -> None:
        body = json.dumps(obj).encode()
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 500: "Internal Server Error"}[status]
        self.transport.write(b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s"
                             % (status, reason.encode(), len(body), b"" if self.keep_alive else b"Connection: close\r\n", body))
        if not self.keep_alive:
            self.transport.close()

    def route(self, method: bytes, path: str, query: str, body: bytes) -> None:
        srv = self.server
        if method == b"GET" and path == "/v1/models":
            return self.reply(200, {"object": "list", "data": [{"id": MODEL, "object": "model", "created": 0, "owned_by": "itl-gap"}]})
        if method == b"GET" and path == "/health":
            return self.reply(200, {})
        if method == b"GET" and path == "/bench/gaps":
            q = dict(kv.split("=", 1) for kv in query.split("&") if "=" in kv)
            return self.reply(200, srv.gaps(float(q.get("t0", "-inf")), float(q.get("t1", "inf"))))
        if method == b"POST" and path in ("/v1/chat/completions", "/v1/completions"):
            req = json.loads(body or b"{}")
            chat = path.endswith("chat/completions")
            n_max = int(req.get("max_tokens") or req.get("max_completion_tokens") or 16)
            if chat:
                text = " ".join(str(m.get("content", "")) for m in req.get("messages", []) if isinstance(m, dict))
            else:
                text = str(req.get("prompt", ""))
            prompt_tokens = max(1, len(text.split()))
            if not req.get("stream"):
                words = "".join(WORDS[(i + 1) % len(WORDS)] for i in range(n_max))
                usage = {"prompt_tokens": prompt_tokens, "completion_tokens": n_max, "total_tokens": prompt_tokens + n_max}
                choice = ({"index": 0, "message": {"role": "assistant", "content": words}, "finish_reason": "length"} if chat
                          else {"index": 0, "text": words, "finish_reason": "length"})
                return self.reply(200, {"id": "x", "object": "chat.completion" if chat else "text_completion",
                                        "model": MODEL, "choices": [choice], "usage": usage})
            opts = req.get("stream_options") or {}
            usage = bool(isinstance(opts, dict) and opts.get("include_usage"))
            continuous = usage and bool(opts.get("continuous_usage_stats"))
            srv.rid += 1
            s = Stream(self, srv.rid, chat, n_max, usage, continuous, prompt_tokens)
            self.stream = s
            self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                                 b"Transfer-Encoding: chunked\r\n\r\n" + s.opening())
            srv.add(s)
            return None
        return self.reply(404, {"error": {"message": f"{path}: not served here"}})


def serve(port_file: str, step_ms: float, per_seq_ms: float, loop_kind: str) -> None:
    """The server process: binds 127.0.0.1:0, writes its port to port_file, runs until SIGTERM."""
    if loop_kind == "uvloop":
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())

    async def main() -> None:
        srv = PacedServer(step_ms, per_seq_ms)
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: Conn(srv), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        tmp = port_file + ".tmp"
        Path(tmp).write_text(str(port))
        os.replace(tmp, port_file)
        stop = asyncio.Event()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        loop.add_signal_handler(signal.SIGINT, stop.set)
        task = asyncio.create_task(srv.decode_loop())
        await stop.wait()
        task.cancel()
        server.close()

    asyncio.run(main())


class ServerProcess:
    """The paced server as a subprocess on 127.0.0.1, stopped (SIGTERM, then SIGKILL) by stop()."""

    def __init__(self, step_ms: float, per_seq_ms: float, loop_kind: str, tmp: Path) -> None:
        port_file = tmp / f"server-port-{step_ms:g}-{per_seq_ms:g}"
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve", str(port_file), "--pace",
                                      f"{step_ms:g}+{per_seq_ms:g}", "--server-loop", loop_kind], start_new_session=True)
        end = time.monotonic() + 30
        while not port_file.exists():
            if self.proc.poll() is not None or time.monotonic() > end:
                self.stop()
                raise RuntimeError("itl_gap.py: the paced server did not start")
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{int(port_file.read_text())}"

    def get(self, path: str) -> dict:
        assert self.url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(self.url + path, timeout=60) as r:  # noqa: S310 - loopback, our own server
            return json.loads(r.read())

    def window(self, t0: float, t1: float) -> dict:
        """The write gaps closed in [t0, t1] (gaps_ms), streams, late steps (overruns), queued writes."""
        return self.get(f"/bench/gaps?t0={t0!r}&t1={t1!r}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


class CompiledProcess:
    """The compiled lockstep server (benchmarks/lockstep_server.c, built when missing), as
    ServerProcess is asked: its own write gaps and late steps."""

    def __init__(self, step_ms: float, per_seq_ms: float) -> None:
        from compiled_server import CompiledServer

        self.srv = CompiledServer(f"{step_ms:g}+{per_seq_ms:g}")
        self.proc, self.url = self.srv.proc, self.srv.url
        self.wall0, self.perf0 = time.time(), time.perf_counter()

    def window(self, t0: float, t1: float) -> dict:
        g = self.srv.gaps(t0, t1, raw=True)
        st = self.srv.stats()
        return {"gaps_ms": g["gaps_ms"], "streams": st["streams_started"], "overruns": st["late_steps"],
                "queued_writes": st["queued_writes"], "burst_p99_ms": st["burst_p99_ms"],
                "wall0": self.wall0, "perf0": self.perf0}

    def stop(self) -> None:
        self.srv.stop()


# == redline's engine child: its own child main, plus its ITL feed written at stop ====================
def count_reads(reads: dict) -> None:
    """--count-reads (one process only: worker processes import their own copy): per socket
    read, how many content chunks of its stream it brought, and each chunk's gap (arrival of
    its read - the stream's previous chunk), flagged when its read brought more than one
    ("coalesced": the chunks share one stamp, the newest packet's). Wraps the per-read path
    (engine/client/request.py _Stream.feed) at ~1 us a read."""
    from redline.engine.client import request

    orig = request._Stream.feed
    hist, times, gaps, flags = reads["hist"], reads["times"], reads["gaps"], reads["flags"]

    def feed(self, batch):
        ts = self.rec.chunk_times
        for item in batch:
            n0 = len(ts)
            ok = orig(self, [item])
            k = len(ts) - n0
            hist[k] = hist.get(k, 0) + 1
            for i in range(max(n0, 1), n0 + k):
                times.append(ts[i])
                gaps.append(ts[i] - ts[i - 1])
                flags.append(k > 1)
            if not ok:
                return False
        return True

    request._Stream.feed = feed


def bench_child_main(config, conn, result_path: str, with_reads: bool = False) -> None:
    from redline.engine.core.engine import Engine
    from redline.engine.core.ticker import Ticker
    from redline.engine.host import _child_main
    from redline.engine.measure.step_book import StepBook

    times, itls, ticks = array("d"), array("d"), array("d")
    reads = {"hist": {}, "times": array("d"), "gaps": array("d"), "flags": array("b")}
    if with_reads:
        count_reads(reads)
    orig_on_gaps, orig_stop, orig_each_second = StepBook.on_gaps, Engine.stop, Ticker.each_second

    def each_second(self, now):  # a diagnostic: how long the once-a-second work holds the loop
        t = time.perf_counter()
        try:
            return orig_each_second(self, now)
        finally:
            ticks.append(t)
            ticks.append(time.perf_counter() - t)

    def on_gaps(self, gaps):  # a GapBatch (engine/measure/gap_batch.py): each ITL and its chunk's arrival
        times.extend(gaps.itl_t)  # kept cheap: it runs inside the engine's harvest
        itls.extend(gaps.itl)
        return orig_on_gaps(self, gaps)

    async def stop(self, reason="quit"):
        t_stop = time.perf_counter()
        snap = self.snapshot
        cpu, lag = snap.client_cpu_pct, snap.loop_lag_ms
        await orig_stop(self, reason)
        res = {"t0": self.t0, "t_stop": t_stop, "times": times.tolist(), "itls_s": itls.tolist(),
               "client_cpu_pct": cpu, "loop_lag_ms": lag, "ticks": ticks.tolist(), "output_tokens": self.metrics.output_tokens_total}
        if with_reads:
            res["reads"] = {"hist": reads["hist"], "times": reads["times"].tolist(), "gaps": reads["gaps"].tolist(),
                            "flags": reads["flags"].tolist()}
        tmp = result_path + ".tmp"
        Path(tmp).write_text(json.dumps(res))
        os.replace(tmp, result_path)

    StepBook.on_gaps, Engine.stop, Ticker.each_second = on_gaps, stop, each_second
    _child_main(config, conn)


def make_host(config, result_path: str, with_reads: bool = False):
    """redline's EngineProcess, whose child runs bench_child_main instead of _child_main."""
    from redline.engine.host import EngineProcess

    class GapEngineProcess(EngineProcess):
        def __init__(self) -> None:
            super().__init__(config)
            import multiprocessing as mp

            ctx = mp.get_context("spawn")
            self._proc = ctx.Process(target=bench_child_main, args=(config, self._child_conn, result_path, with_reads),
                                     name="redline-engine", daemon=False)

    return GapEngineProcess()


def _config(url: str, c: int, out: str, workers: str, output_len: int | None):
    import lag

    os.environ[lag.WORKERS_ENV] = str(workers)
    more = () if output_len is None else ("--output-len", str(output_len))
    if c > 1024:  # redline's default --max-concurrency: a user types it for more
        more += ("--max-concurrency", str(c))
    return lag.engine_config(url, c, out, more)


def tui_child(url: str, c: int, seconds: float, out: str, result: str, workers: str, output_len: int | None) -> int:
    """What tui/run_app.py does (as lag.py runs it), with the ITL-recording engine child; quits by
    its own SIGTERM after `seconds`."""
    cfg, args = _config(url, c, out, workers, output_len)
    host = make_host(cfg, result)
    host.start()
    from redline.tui.app import RedlineApp

    app = RedlineApp(host, step=args.step)
    threading.Timer(seconds, lambda: os.kill(os.getpid(), signal.SIGTERM)).start()
    try:
        app.run()
    finally:
        host.stop(app.exit_reason)
    return 0


# == the driver =======================================================================================
def tree_cpu(root) -> dict[int, float]:
    """user + sys CPU seconds of each live descendant of `root` (a psutil.Process)."""
    import psutil

    out: dict[int, float] = {}
    try:
        kids = root.children(recursive=True)
    except psutil.Error:
        return out
    for k in kids:
        try:
            t = k.cpu_times()
            out[k.pid] = t.user + t.system
        except psutil.Error:
            pass
    return out


def tree_pct(a: dict[int, float], b: dict[int, float], dt: float) -> float | None:
    both = [pid for pid in b if pid in a]
    return 100 * sum(b[p] - a[p] for p in both) / dt if both else None


def run_tui(url: str, c: int, run_s: float, warmup: float, tmp: Path, workers: str, output_len: int | None):
    import lag
    import psutil
    from _bench import box_busy

    if shutil.which("tmux") is None:
        raise SystemExit("itl_gap.py: the tui mode needs tmux (apt-get install tmux)")
    result = tmp / "engine.json"
    name = f"redline-itl-{os.getpid()}-{c}-{workers}"
    cmd = [sys.executable, os.path.abspath(__file__), "--tui-child", "--url", url, "-c", str(c), "--run-s", str(run_s),
           "--out", str(tmp / "session"), "--result", str(result), "--workers", str(workers)]
    if output_len is not None:
        cmd += ["--output-len", str(output_len)]
    shell = "exec " + " ".join(lag._q(x) for x in cmd)
    subprocess.run(lag.TMUX + ["new-session", "-d", "-s", name, "-x", "80", "-y", "24", shell], check=True)
    screen, cpu, busy, engine_cpu = "", None, None, None
    try:
        pid = int(subprocess.run(lag.TMUX + ["display", "-p", "-t", name, "#{pane_pid}"], capture_output=True, text=True, check=True).stdout)
        proc = psutil.Process(pid)
        time.sleep(1.0 + warmup)  # the engine starts ~1 s after the app
        c0, t0, b0, e0 = lag._cpu(proc), time.perf_counter(), box_busy(), tree_cpu(proc)
        time.sleep(max(0.5, run_s - warmup - 2.5))
        c1, t1, b1, e1 = lag._cpu(proc), time.perf_counter(), box_busy(), tree_cpu(proc)
        cpu = 100 * (c1 - c0) / (t1 - t0) if c0 is not None and c1 is not None else None
        busy = 100 * (b1 - b0) / (t1 - t0)
        engine_cpu = tree_pct(e0, e1, t1 - t0)
        screen = subprocess.run(lag.TMUX + ["capture-pane", "-p", "-t", name], capture_output=True, text=True).stdout
        end = time.monotonic() + 90
        while not result.exists() and time.monotonic() < end:
            time.sleep(0.2)
        while lag._alive(name) and time.monotonic() < end:
            time.sleep(0.2)
    finally:
        subprocess.run(lag.TMUX + ["kill-session", "-t", name], capture_output=True)
    if not result.exists():
        raise RuntimeError(f"tui C={c}: no result (screen was:\n{screen})")
    return json.loads(result.read_text()), screen, cpu, busy, engine_cpu


def run_headless(url: str, c: int, seconds: float, warmup: float, tmp: Path, workers: str, output_len: int | None,
                 with_reads: bool = False):
    import lag
    from _bench import box_busy

    result = tmp / "engine.json"
    cfg, _ = _config(url, c, str(tmp / "session"), workers, output_len)
    host = make_host(cfg, str(result), with_reads)
    host.start()
    try:
        import psutil

        eng = psutil.Process(host._proc.pid)
        time.sleep(warmup)
        b0, t0, e0 = box_busy(), time.perf_counter(), {eng.pid: lag._cpu(eng), **tree_cpu(eng)}
        time.sleep(seconds)
        t1 = time.perf_counter()
        busy = 100 * (box_busy() - b0) / (t1 - t0)
        engine_cpu = tree_pct(e0, {eng.pid: lag._cpu(eng), **tree_cpu(eng)}, t1 - t0)
        time.sleep(0.3)
    finally:
        host.stop("benchmark done")
    return json.loads(result.read_text()), busy, engine_cpu


def session_facts(session: Path) -> dict:
    """What summary.json says beyond the ITL: the load processes (its `workers`, else 1), the
    steps marked client_limited, the live step's coalesced_chunks share."""
    try:
        summary = json.loads((session / "summary.json").read_text())
    except (OSError, ValueError):
        return {"processes": None, "client_limited": None, "steps": 0, "coalesced": None, "auto": []}
    steps = [s for s in summary.get("steps") or [] if s.get("phase") == "live"]
    live = max(steps, key=lambda s: s.get("duration_s") or 0) if steps else {}
    auto = []
    try:
        with open(session / "events.ndjson") as f:
            auto = [json.loads(ln).get("text", "") for ln in f if "--workers auto" in ln]
    except (OSError, ValueError):
        pass
    return {"processes": len(summary.get("workers") or []) or 1, "steps": len(steps), "auto": auto,
            "client_limited": sum(1 for s in steps if s.get("client_limited")), "coalesced": live.get("coalesced_chunks")}


def step_figure(session: Path) -> tuple[float | None, float | None, float | None, int]:
    """The live step's p99_itl_ms, its span (t_start wall, duration_s), and the live requests in requests.ndjson."""
    try:
        summary = json.loads((session / "summary.json").read_text())
    except (OSError, ValueError):
        return None, None, None, 0
    steps = [s for s in summary.get("steps") or [] if s.get("phase") == "live"]
    n = 0
    try:
        with open(session / "requests.ndjson") as f:
            n = sum(1 for line in f if '"phase":"live"' in line)
    except OSError:
        pass
    if not steps:
        return None, None, None, n
    s = max(steps, key=lambda s: s.get("duration_s") or 0)
    return s.get("p99_itl_ms"), s.get("t_start"), s.get("duration_s"), n


def one_run(srv, mode: str, c: int, workers: str, args, tmp: Path) -> dict:
    import psutil

    run_s = args.warmup + args.seconds
    srv_proc = psutil.Process(srv.proc.pid)
    s_cpu0, s_t0 = sum(srv_proc.cpu_times()[:2]), time.perf_counter()
    if mode == "tui":
        r, screen, tui_cpu, busy, engine_cpu = run_tui(srv.url, c, run_s + 2.5, args.warmup, tmp, workers, args.output_len)
    else:
        r, busy, engine_cpu = run_headless(srv.url, c, args.seconds, args.warmup, tmp, workers, args.output_len,
                                           getattr(args, "count_reads", False))
        screen, tui_cpu = "", None
    s_cpu = 100 * (sum(srv_proc.cpu_times()[:2]) - s_cpu0) / (time.perf_counter() - s_t0)
    w0 = r["t0"] + args.warmup
    w1 = min(w0 + args.seconds, r["t_stop"] - 0.1)
    tk = r.get("ticks") or []
    tick_ms = sorted(d * 1000.0 for t, d in zip(tk[::2], tk[1::2], strict=False) if w0 <= t <= w1)
    mine = sorted(v * 1000.0 for t, v in zip(r["times"], r["itls_s"], strict=False) if w0 <= t <= w1)
    g = srv.window(w0, w1)
    theirs = sorted(g["gaps_ms"])
    row = {"mode": mode, "c": c, "workers": workers, "window_s": w1 - w0, "n_itl": len(mine), "n_gap": len(theirs),
           "itl_p50": quantile(mine, 0.5), "itl_p99": quantile(mine, 0.99), "gap_p50": quantile(theirs, 0.5),
           "gap_p99": quantile(theirs, 0.99), "streams": g["streams"], "overruns": g["overruns"],
           "queued_writes": g["queued_writes"], "tui_cpu": tui_cpu, "engine_cpu": engine_cpu,
           "engine_cpu_own": r.get("client_cpu_pct"),
           "loop_lag_ms": r.get("loop_lag_ms"), "tick_p50": quantile(tick_ms, 0.5), "tick_max": tick_ms[-1] if tick_ms else None, "server_cpu": s_cpu, "busy": busy,
           "drawn": ("C=" in screen) if mode == "tui" else None, "screen": screen}
    # the engine's own step figure (summary.json), against the server over the step's span
    p99_step, t_start, dur, n_req = step_figure(tmp / "session")
    row["reads"] = read_figures(r.get("reads"), w0, w1)
    row["n_requests"] = n_req
    row.update(session_facts(tmp / "session"))
    row["burst_p99_ms"] = g.get("burst_p99_ms")
    row["step_itl_p99"] = p99_step
    if t_start is not None and dur:
        p0 = g["perf0"] + (t_start - g["wall0"])
        gs = sorted(srv.window(p0, p0 + dur)["gaps_ms"])
        row["step_gap_p99"], row["step_s"] = quantile(gs, 0.99), dur
    else:
        row["step_gap_p99"], row["step_s"] = None, None
    return row


def read_figures(reads: dict | None, w0: float, w1: float) -> dict | None:
    """--count-reads: over the window, the reads by the content chunks each brought, the share
    of chunk gaps closed in a coalesced read (one that brought several: their stamps are the
    newest packet's), and the p99 gap with them and without them (ms)."""
    if not reads:
        return None
    inside = [(g * 1000.0, f) for t, g, f in zip(reads["times"], reads["gaps"], reads["flags"], strict=False) if w0 <= t <= w1]
    every = sorted(g for g, _ in inside)
    clean = sorted(g for g, f in inside if not f)
    merged = [g for g, f in inside if f]
    return {"hist": {int(k): v for k, v in reads["hist"].items()}, "gaps": len(inside),
            "coalesced_share": len(merged) / len(inside) if inside else None,
            "p99_all": quantile(every, 0.99), "p99_clean": quantile(clean, 0.99),
            "coalesced_p50": quantile(sorted(merged), 0.5), "coalesced_zero": sum(1 for g in merged if g < 1.0)}


def wait_quiet(below_pct: float, max_wait_s: float) -> None:
    """Wait (at most max_wait_s) for a second in which the machine is busy below below_pct (the
    server idles between runs: what is left is the neighbours')."""
    from _bench import box_busy

    end = time.monotonic() + max_wait_s
    while True:
        b0, t0 = box_busy(), time.perf_counter()
        time.sleep(1.0)
        busy = 100 * (box_busy() - b0) / (time.perf_counter() - t0)
        if busy < below_pct or time.monotonic() > end:
            print(f"  (machine busy {busy:.0f}% before the run)", file=sys.stderr, flush=True)
            return


def others(r: dict) -> float | None:
    """The machine's busy CPU less this benchmark's processes: what neighbours used."""
    if r["busy"] is None or r["engine_cpu"] is None:
        return None
    return max(0.0, r["busy"] - r["engine_cpu"] - r["server_cpu"] - (r["tui_cpu"] or 0.0))


def _f(v, nd: int = 2) -> str:
    return "-" if v is None else f"{v:.{nd}f}"


def _pct(v) -> str:
    return "-" if v is None else f"{v:.0f}%"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of a run set (scale_gap.py sets its own defaults on these)."""
    p.add_argument("--concurrency", default="256", help="comma-separated C values (default 256)")
    p.add_argument("--seconds", type=float, default=15.0, help="measured seconds per run, after the warm-up (default 15)")
    p.add_argument("--warmup", type=float, default=3.0, help="seconds from the engine's start before measuring (default 3)")
    p.add_argument("--modes", default="tui", help="tui, headless or both (default tui)")
    p.add_argument("--workers", default="1", help="comma-separated --workers values, auto among them (redline's default: "
                   "its own choice); default 1: the engine's own process")
    p.add_argument("--repeat", type=int, default=1, help="run the whole set N times, interleaved (default 1)")
    p.add_argument("--server", default="python", choices=("python", "compiled"),
                   help="python: the asyncio server written here; compiled: benchmarks/lockstep_server.c (C, built when "
                        "missing; it keeps up at C=2048 where a Python server lags itself). Default python")
    p.add_argument("--pace", default="20+0.1", metavar="STEP_MS[+PER_SEQ_MS]",
                   help="the server's decode step: STEP_MS + PER_SEQ_MS per running request (default 20+0.1)")
    p.add_argument("--output-len", type=int, default=None, help="redline's --output-len (default: redline's own, 128)")
    p.add_argument("--server-loop", default="uvloop", choices=("uvloop", "asyncio"), help="the Python server's event loop (default uvloop)")
    p.add_argument("--count-reads", action="store_true",
                   help="headless, one process: count the content chunks each socket read brought, and the share of "
                        "ITLs closed in a read that brought several (coalesced; ~1 us a read of overhead)")
    p.add_argument("--quiet-below", type=float, default=None, metavar="PCT",
                   help="before each run, wait for a second with the machine busy below PCT %% (all cores; default: do not wait)")
    p.add_argument("--quiet-wait", type=float, default=60.0, metavar="S", help="wait at most S s for that (default 60)")
    p.add_argument("--keep", metavar="DIR", help="copy each run's session directory and raw ITL feed here")


def pace_of(args) -> tuple[float, float]:
    step_ms, _, per = args.pace.partition("+")
    return float(step_ms), float(per or 0)


def run_set(args) -> list[dict]:
    """Every (repeat, workers, C, mode) run of `args` against one server; a line each on stderr;
    the rows (one_run's, with diff and sdiff, the p99 differences)."""
    step_ms, per_ms = pace_of(args)
    cs = [int(x) for x in args.concurrency.split(",") if x.strip()]
    ws = [x.strip() for x in args.workers.split(",") if x.strip()]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    for m in modes:
        if m not in ("tui", "headless"):
            raise SystemExit(f"--modes {m!r}: expected tui or headless")
    rows = []
    tmp = Path(tempfile.mkdtemp(prefix="redline-itl-gap-"))
    srv = None
    try:
        srv = (CompiledProcess(step_ms, per_ms) if args.server == "compiled"
               else ServerProcess(step_ms, per_ms, args.server_loop, tmp))
        for rep, w, c, mode in itertools.product(range(args.repeat), ws, cs, modes):
            if args.quiet_below is not None:
                wait_quiet(args.quiet_below, args.quiet_wait)
            d = tmp / f"{mode}-w{w}-c{c}-{rep + 1}"
            d.mkdir(parents=True)
            load = os.getloadavg()[0]
            r = one_run(srv, mode, c, w, args, d)
            r["load_avg"] = load
            r["diff"] = diff = None if r["itl_p99"] is None or r["gap_p99"] is None else r["itl_p99"] - r["gap_p99"]
            r["sdiff"] = sdiff = None if r["step_itl_p99"] is None or r["step_gap_p99"] is None else r["step_itl_p99"] - r["step_gap_p99"]
            print(f"  C={c:<4} workers {w} ({r['processes']} load processes) {mode:<8} window {r['window_s']:.1f} s: "
                  f"ITL p50 {_f(r['itl_p50'])} p99 {_f(r['itl_p99'])} ms "
                  f"({r['n_itl']} gaps) | server write gap p50 {_f(r['gap_p50'])} p99 {_f(r['gap_p99'])} ms ({r['n_gap']} gaps, "
                  f"{r['streams']} streams) | p99 diff {_f(diff)} ms | step (summary.json, {_f(r['step_s'], 1)} s): "
                  f"ITL p99 {_f(r['step_itl_p99'])} vs {_f(r['step_gap_p99'])} ms, diff {_f(sdiff)}, coalesced_chunks "
                  f"{_f(r['coalesced'], 4)}, client-limited steps {r['client_limited']} of {r['steps']} | "
                  f"TUI CPU {_pct(r['tui_cpu'])} engine {_pct(r['engine_cpu'])} (loop lag p99 {_f(r['loop_lag_ms'], 1)} ms, once-a-second tick {_f(r['tick_p50'], 1)} ms median, "
                  f"{_f(r['tick_max'], 1)} max) "
                  f"server {_pct(r['server_cpu'])} machine {_pct(r['busy'])} (others {_pct(others(r))}, load average {load:.2f}) | "
                  f"server late steps {r['overruns']}, queued writes {r['queued_writes']}"
                  + (f", burst p99 {_f(r['burst_p99_ms'])} ms" if r.get("burst_p99_ms") is not None else "")
                  + f" | {r['n_requests']} live requests in requests.ndjson"
                  + (f" | screen drawn: {r['drawn']}" if mode == "tui" else ""), file=sys.stderr, flush=True)
            for line in r.get("auto") or []:
                print(f"           redline said: {line}", file=sys.stderr, flush=True)
            if r["reads"]:
                x = r["reads"]
                print(f"           reads by content chunks brought: {dict(sorted(x['hist'].items()))}; {x['gaps']} gaps, "
                      f"{_f(100 * x['coalesced_share'] if x['coalesced_share'] is not None else None)} % closed in a coalesced read "
                      f"(median {_f(x['coalesced_p50'])} ms, {x['coalesced_zero']} under 1 ms); p99 gap {_f(x['p99_all'])} ms, "
                      f"without them {_f(x['p99_clean'])} ms", file=sys.stderr, flush=True)
            if mode == "tui" and r["screen"]:
                head = [ln for ln in r["screen"].splitlines() if "C=" in ln][:1]
                print(f"           screen: {head[0].strip() if head else r['screen'].splitlines()[:2]}", file=sys.stderr)
            rows.append(r)
    finally:
        if srv is not None:
            srv.stop()
        if args.keep:
            shutil.copytree(tmp, args.keep, dirs_exist_ok=True)
            print(f"# kept: {args.keep} (per run: session/ as redline wrote it, engine.json: the engine's ITL feed)", file=sys.stderr)
        shutil.rmtree(tmp, ignore_errors=True)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(p)
    p.add_argument("--serve", metavar="PORT_FILE", help=argparse.SUPPRESS)
    p.add_argument("--tui-child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    p.add_argument("-c", type=int, help=argparse.SUPPRESS)
    p.add_argument("--run-s", type=float, help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    args = p.parse_args()
    step_ms, per_ms = pace_of(args)
    if args.serve:
        serve(args.serve, step_ms, per_ms, args.server_loop)
        return
    if args.tui_child:  # quits by its own SIGTERM (tui_child): the app's default handling
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        sys.exit(tui_child(args.url, args.c, args.run_s, args.out, args.result, args.workers, args.output_len))

    from _bench import machine, table

    print(f"# redline ITL vs an independent paced server's write gap ({machine()})")
    print(f"# server: {args.server}, decode step {step_ms:g} ms + {per_ms:g} ms per running request"
          + (f", {args.server_loop}" if args.server == "python" else "")
          + f"; {args.warmup:g} s warm-up + {args.seconds:g} s measured per run; load average {os.getloadavg()[0]:.2f} at the start")
    rows = run_set(args)
    print()
    print(table(("C", "workers", "processes", "mode", "ITLs", "ITL p50 ms", "ITL p99 ms", "server gap p50 ms", "server gap p99 ms",
                 "p99 diff ms", "step p99 diff ms", "coalesced", "client-limited steps", "engine tick ms", "TUI CPU", "engine CPU",
                 "server CPU", "machine busy", "others", "load avg"),
                [(r["c"], r["workers"], r["processes"], r["mode"], r["n_itl"], _f(r["itl_p50"]), _f(r["itl_p99"]), _f(r["gap_p50"]),
                  _f(r["gap_p99"]), _f(r["diff"]), _f(r["sdiff"]), _f(r["coalesced"], 4), r["client_limited"], _f(r["tick_p50"], 1),
                  _pct(r["tui_cpu"]) if r["mode"] == "tui" else "-", _pct(r["engine_cpu"]), _pct(r["server_cpu"]),
                  f"{_pct(r['busy'])} of {100 * (os.cpu_count() or 1)}%", _pct(others(r)), f"{r['load_avg']:.1f}") for r in rows]))


if __name__ == "__main__":
    from _bench import run_main

    run_main(main)
