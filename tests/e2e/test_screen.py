"""The operator's screen as a person sees it: snapshot pictures (pytest-textual-snapshot) and
assertions on the text drawn, at 80x24 and 120x40.

No sim runs here: a FakeHost serves hand-built Snapshots (the app reads only `host.snapshot`),
played second by second from a scripted session (`story`), with fixed times and strings, so a
picture never depends on a clock, a port or the machine's speed. Times of day are drawn in
UTC (the `utc` fixture). Update the pictures with `pytest tests/e2e/test_screen.py
--snapshot-update` and look at each changed SVG (the failure report shows both) before
committing it.
"""

from __future__ import annotations

import concurrent.futures
import io
import math
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from rich.console import Console
from textual.widgets import DataTable

from redline.engine.core import commands as C
from redline.engine.core.config import EngineConfig
from redline.engine.core.snapshot import LogLine, Snapshot
from redline.engine.measure.step_result import StepResult
from redline.engine.telemetry.types import GpuSample, ServerSample
from redline.engine.workload.prompts import WorkloadConfig
from redline.tui.app import RedlineApp
from redline.tui.live_screen import LiveScreen
from redline.tui.widgets.dialogs import ConfirmScreen
from redline.tui.widgets.header import StatusHeader, wrap_words
from redline.tui.widgets.help import FIGURES, KEYS, HelpScreen
from redline.tui.widgets.metric_row import spark_text
from redline.tui.widgets.step_table import StepTable

T0 = 1714564800.0  # 2024-05-01 12:00:00 UTC: the scripted session starts here
URL = "http://10.0.0.5:30000"
SESSION = "/data/redline-sessions/2024-05-01T12-00-00Z"
SIZES = {"80x24": (80, 24), "120x40": (120, 40)}


# -- a host that serves what the test says -------------------------------------------------
class FakeHost:
    """The host surface the app uses (engine/host.py): start, stop, snapshot, send, config."""

    def __init__(self, snap: Snapshot, config: EngineConfig | None = None) -> None:
        self.snap = snap
        self.config = config or EngineConfig(
            url=URL, workload=WorkloadConfig(input_len=512, output_len=128), out_dir=Path(SESSION), max_concurrency=1024
        )
        self.sent: list[C.Command] = []
        self.stopped: str | None = None

    def start(self) -> None:
        pass

    def stop(self, reason: str = "quit") -> None:
        self.stopped = reason

    @property
    def snapshot(self) -> Snapshot:
        return self.snap

    def send(self, cmd: C.Command) -> concurrent.futures.Future:
        self.sent.append(cmd)
        fut: concurrent.futures.Future = concurrent.futures.Future()
        fut.set_result(None)
        return fut


# -- scripted sessions -----------------------------------------------------------------------
@dataclass
class Server:
    """How the scripted server answers at concurrency C (smooth, no randomness)."""

    kind: str = "sglang"
    model: str = "llama-3.1-70b-instruct"
    caps: str = "max_running=256 tp=8 pp=1"
    cap: int = 10**6  # the most it runs at once
    knee: float = 80.0  # tok/s = peak * C / (C + knee)
    peak: float = 2100.0
    output_len: int = 128
    gpus: int = 8

    def running(self, c: int) -> int:
        return min(c, self.cap)

    def tok_s(self, c: int) -> float:
        r = self.running(c)
        return self.peak * r / (r + self.knee)

    def itl_ms(self, c: int) -> float:
        r = self.running(c)
        return 1000.0 * r / self.tok_s(c)

    def ttft_ms(self, c: int) -> float:
        queue_wait = max(c - self.cap, 0) / self.cap * self.output_len * self.itl_ms(c)
        return 55.0 + 0.9 * self.running(c) + queue_wait


HEALTHY = Server()
PP_CAPPED = Server(model="redline-sim-70b", caps="max_running=64 tp=1 pp=8 micro-batch cap=8", cap=8, knee=4.0, peak=200.0)


def wobble(sec: int, amp: float = 0.03) -> float:
    return 1.0 + amp * math.sin(sec * 1.7) + amp * 0.5 * math.cos(sec * 0.6)


@dataclass
class Seg:
    kind: str  # run | pause | probe | gone | overload
    seconds: int
    c: int = 0


@dataclass
class _Step:
    index: int
    c: int
    phase: str
    start: int  # second the step opened
    warmup: int
    rows: list = field(default_factory=list)


def _result(st: _Step, srv: Server, end: int, failed: int = 0) -> StepResult:
    measured = [r for r in st.rows if r["sec"] >= st.start + st.warmup and r["sec"] < end]
    d = float(len(measured))
    tok = sum(r["output_tok_s"] for r in measured) / d if d else 0.0
    done = int(d * st.c / max(srv.output_len * srv.itl_ms(st.c) / 1000, 1e-9))
    ttft = srv.ttft_ms(st.c) if d else None
    itl = srv.itl_ms(st.c) if d else None
    return StepResult(
        concurrency=st.c, duration_s=d, completed=done, failed=failed, output_throughput=round(tok, 1),
        input_throughput=round(tok * 4, 1), request_throughput=round(done / d, 2) if d else 0.0,
        mean_ttft_ms=ttft, median_ttft_ms=ttft, p99_ttft_ms=ttft and ttft * 1.12,
        median_itl_ms=itl, p99_itl_ms=itl and itl * 1.08, server_max_running=float(srv.running(st.c)) if d else None,
        index=st.index, phase=st.phase, t_start=T0 + st.start + st.warmup, warmup_s=float(st.warmup), steady=True,
        output_throughput_se=0.0,  # steady: its noise was measured (the scripted seconds are flat)
    )


def story(segs: list[Seg], srv: Server = HEALTHY, *, start_c: int = 8) -> list[Snapshot]:
    """One Snapshot per second of a scripted session (the last one is what the screen shows)."""
    snaps: list[Snapshot] = []
    log: list[LogLine] = []
    steps: list[StepResult] = []
    probe: StepResult | None = None
    seq = [0]

    def say(sec: int, kind: str, text: str) -> None:
        seq[0] += 1
        log.append(LogLine(seq[0], T0 + sec, kind, text))

    say(0, "notice", f"target {URL} ({srv.kind}, api chat, model {srv.model}) C={start_c}")
    sec = 0
    c = start_c
    prev_c: int | None = None
    completed = failed = 0
    live: _Step | None = None
    index = 0
    for n, seg in enumerate(segs):
        if live is not None:  # the previous segment's step ends here
            res = _result(live, srv, sec)
            if live.phase == "probe":
                probe = res
                say(sec, "step", f"probe C=1 {res.duration_s:.1f}s {res.output_throughput} tok/s TTFT p50 {res.median_ttft_ms:.1f} ms")
            else:
                steps.append(res)
                say(sec, "step", f"C={res.concurrency} {res.duration_s:.1f}s {res.output_throughput} tok/s "
                    f"TTFT p50 {res.median_ttft_ms:.1f} ms p99 {res.p99_ttft_ms:.1f} ms ITL p99 {res.p99_itl_ms:.1f} ms")
            live = None
        state = "running"
        if seg.kind == "run":
            if n and seg.c != c:
                say(sec, "key", f"C={seg.c}")
            elif n and segs[n - 1].kind == "pause":
                say(sec, "key", f"resumed at C={seg.c}")
            c, prev_c = seg.c, None
        elif seg.kind == "pause":
            say(sec, "key", "paused")
            state = "paused"
        elif seg.kind == "probe":
            say(sec, "probe", f"abort + C=1 probe ({c} in-flight requests cancelled; previous C={c})")
            prev_c, c = c, 1
            state = "probe"
        elif seg.kind == "gone":
            say(sec, "error", f"3 × connect: cannot connect to {URL}: connection refused")
            say(sec + 1, "error", "server gone: connections refused and /health fails; holding load until it answers again")
            state = "server gone"
        elif seg.kind == "overload":
            if seg.c != c:
                say(sec, "key", f"C={seg.c}")
            c = seg.c
            say(sec + 1, "warning", "server overloaded (http_503): each failing slot backs off up to 2 s")
        if seg.kind in ("run", "probe", "overload"):
            index += 1
            live = _Step(index, c, "probe" if seg.kind == "probe" else "live", sec, 5 if seg.kind == "probe" else 2)
        for i in range(seg.seconds):
            sec += 1
            wb = wobble(sec)
            errors = 0.0
            in_flight, backing_off, server = c, 0, ServerSample(0.0, srv.kind, float(srv.running(c)), float(max(c - srv.cap, 0)), 0.42)
            gpus = tuple(GpuSample(g, "H100", power_w=round(700 * (0.18 + 0.5 * srv.tok_s(c) / srv.peak) * wobble(sec + g, 0.01), 1), power_limit_w=700.0,
                                   util_pct=min(99.0, 30 + 60 * srv.tok_s(c) / srv.peak)) for g in range(srv.gpus))
            row = {"t": T0 + sec, "output_tok_s": srv.tok_s(c) * wb, "ttft_p50_ms": srv.ttft_ms(c) * wb, "ttft_p99_ms": srv.ttft_ms(c) * 1.12 * wb,
                   "itl_p50_ms": srv.itl_ms(c) * wb, "itl_p99_ms": srv.itl_ms(c) * 1.08 * wb,
                   "e2e_p50_ms": (srv.ttft_ms(c) + srv.output_len * srv.itl_ms(c)) * wb,
                   "e2e_p99_ms": (srv.ttft_ms(c) + srv.output_len * srv.itl_ms(c)) * 1.1 * wb, "errors": 0.0}
            if seg.kind == "pause":
                in_flight = 0
                server = replace(server, running=0.0, queued=0.0)
                gpus = tuple(replace(g, power_w=126.0, util_pct=0.0) for g in gpus)
                row.update({k: None for k in row if k.endswith("_ms")}, output_tok_s=0.0)
            elif seg.kind == "probe" and i < 5:  # the aborted batch unwinds; the probe's first request
                row.update(ttft_p50_ms=None, ttft_p99_ms=None, e2e_p50_ms=None, e2e_p99_ms=None)
            elif seg.kind == "gone":
                in_flight, server, gpus = 0, None, ()
                errors = 3.0 if i < 2 else 0.0
                failed += int(errors)
                row.update({k: None for k in row if k.endswith("_ms")}, output_tok_s=0.0, errors=errors)
            elif seg.kind == "overload":
                backing_off = 12
                in_flight = c - backing_off
                errors = 14.0 * wb
                failed += 14
                server = replace(server, running=float(in_flight), queued=0.0)
                row.update(errors=errors)
                if sec % 3 == 0:
                    say(sec, "error", "14 × http_503: HTTP 503: server overloaded, retry later")
            completed += int(srv.tok_s(c) / srv.output_len) if seg.kind in ("run", "probe", "overload") else 0
            if live is not None:
                live.rows.append({"sec": sec, "output_tok_s": row["output_tok_s"]})
            cur = _result(live, srv, sec + 1, failed=14 * (sec - live.start) if seg.kind == "overload" else 0) if live is not None else None
            warnings: tuple[str, ...] = ()
            session_error = None
            if srv.cap < c and in_flight >= 2 and sec - (sec - i) >= 3:
                warnings += (f"server cap: client holds {in_flight} in flight, server runs {srv.running(c)}, queue {c - srv.cap} — "
                             f"pp micro-batch cap {srv.cap} (max_running_requests 64 // pp 8)",)
            if seg.kind == "overload":
                warnings += ("server overloaded (http_503): each failing slot backs off up to 2 s",)
                if i >= 4:
                    session_error = "[Errno 28] No space left on device"
                    warnings += (f"session log: {session_error}; {120 * (i - 3)} rows lost",)
                    if i == 4:
                        say(sec, "warning", f"session log: {session_error}; 120 rows lost")
            tok_j = row["output_tok_s"] / sum(g.power_w for g in gpus) if gpus and row["output_tok_s"] else None
            snaps.append(Snapshot(
                t=float(sec), elapsed_s=float(sec), state=state, target_c=c, previous_c=prev_c, in_flight=in_flight,
                backing_off=backing_off, max_concurrency=1024, probing=state == "probe", url=URL, model=srv.model, api="chat",
                server_kind=srv.kind, caps=srv.caps, output_tok_s=row["output_tok_s"], errors_s=errors,
                ttft_ms={"p50": row["ttft_p50_ms"], "p99": row["ttft_p99_ms"]}, itl_ms={"p50": row["itl_p50_ms"], "p99": row["itl_p99_ms"]},
                e2e_ms={"p50": row["e2e_p50_ms"], "p99": row["e2e_p99_ms"]}, completed=completed, failed=failed,
                steps=tuple(steps), current_step=cur, probe_result=probe, server=server, gpus=gpus,
                client_cpu_pct=6.0 + c / 16, loop_lag_ms=1.2, warnings=warnings, tok_per_joule=tok_j, second=sec, row=dict(row),
                log=tuple(log[-50:]), session_dir=SESSION, session_error=session_error,
            ))
    return snaps


def rate_story() -> list[Snapshot]:
    """C=8, then `m` into open-loop rate mode at R=12.5/s (poisson) under an in-flight cap of 64
    that the server cannot keep up with: the cap fills, sends are held back and counted."""
    snaps = story([Seg("run", 30, 8), Seg("run", 40, 64)])
    rate_from = snaps[29].second + 1
    out: list[Snapshot] = []
    for s in snaps:
        if s.second < rate_from:
            out.append(s)
            continue
        i = s.second - rate_from
        as_rate = lambda st: replace(st, mode="rate", request_rate=12.5, arrival="poisson", schedule_lag_p50_ms=0.6,  # noqa: E731
                                     schedule_lag_p99_ms=4.2, dropped_or_delayed=17) if st is not None and st.concurrency == 64 else st
        log = tuple(replace(line, text="rate 12.5 req/s (poisson, in-flight cap 64)") if line.text == "C=64" else
                    replace(line, text=line.text.replace("C=64", "R=12.5/s")) for line in s.log)
        held = 3 if i >= 30 else 0
        warnings = ("open loop: sends held back at the in-flight cap 64 (17 delayed); latencies count from the intended send times",) if held else ()
        out.append(replace(
            s, mode="rate", target_rate=12.5, arrival="poisson", max_concurrency=64, in_flight=64 if held else 52,
            schedule_lag_ms={"p50": 0.6, "p99": 4.2 + 0.1 * held}, held_at_cap=held, dropped_or_delayed=17 if held else 0,
            req_s=11.8, steps=tuple(as_rate(st) for st in s.steps), current_step=as_rate(s.current_step), log=log,
            warnings=s.warnings + warnings,
        ))
    return out


TARGET_URLS = ("http://10.0.0.5:30000", "http://10.0.0.6:30000", "http://10.0.0.7:30000")


def targets_story() -> list[Snapshot]:
    """Three replicas (--url three times, weights 2,1,1) at C=32; the third stops answering
    12 s before the end: its row reads GONE, its share goes to the other two."""
    snaps = story([Seg("run", 30, 16), Seg("run", 30, 32)])
    gone_from = snaps[-1].second - 12
    out: list[Snapshot] = []
    for s in snaps:
        gone = s.second >= gone_from
        shares = (0.5, 0.25, 0.25) if not gone else (2 / 3, 1 / 3, 0.0)
        c = s.target_c
        rows = []
        for i, (url, share) in enumerate(zip(TARGET_URLS, shares, strict=False)):
            dead = gone and i == 2
            rows.append({
                "url": url, "output_tok_s": round(s.output_tok_s * share, 1), "errors_s": 3.0 if dead and s.second < gone_from + 2 else 0.0,
                "ttft_p50_ms": None if dead else s.ttft_ms.get("p50"), "ttft_p99_ms": None if dead else s.ttft_ms.get("p99"),
                "e2e_p50_ms": None if dead else s.e2e_ms.get("p50"), "e2e_p99_ms": None if dead else s.e2e_ms.get("p99"),
                "gone": dead, "running": None if dead else float(round(c * share)), "queued": None if dead else 0.0,
            })
        warnings = s.warnings + ((f"target {TARGET_URLS[2]} gone (connections refused, /health fails): its share goes to "
                                  f"{TARGET_URLS[0]}, {TARGET_URLS[1]}"),) if gone else s.warnings
        log = s.log
        if gone:
            log = log + (LogLine(log[-1].seq + 1, T0 + gone_from, "warning", warnings[-1]),)
        out.append(replace(s, targets=tuple(rows), warnings=warnings, log=log))
    return out


WORKER_NODES = ("gpu-node-a", "gpu-node-a", "gpu-node-b", "gpu-node-b")


def workers_story() -> list[Snapshot]:
    """Four Ray workers on two nodes (--ray ADDRESS --workers 4) at C=16, then C=64; worker 2
    dies 10 s before the end: its row reads DEAD, its share goes to the other three."""
    snaps = story([Seg("run", 30, 16), Seg("run", 30, 64)])
    dead_from = snaps[-1].second - 10
    out: list[Snapshot] = []
    for s in snaps:
        dead = s.second >= dead_from
        alive = [i for i in range(4) if not (dead and i == 2)]
        shares = dict(zip(alive, (s.target_c // len(alive) + (1 if k < s.target_c % len(alive) else 0) for k in range(len(alive))), strict=False))
        rows = tuple({
            "worker": i, "node": WORKER_NODES[i], "alive": i in alive, "share": shares.get(i, s.target_c // 4),
            "requests": s.completed // 4 - (3 * (s.second - dead_from) if dead and i == 2 else 0) + i,
            "output_tok_s": round(s.output_tok_s / 4 * (1.0 + 0.02 * i), 3),
            "lag_p99_ms": round(0.8 + 0.3 * i + s.target_c / 64, 3), "cpu_pct": round(9.0 + s.target_c / 2.5 + 2 * i, 1),
        } for i in range(4))
        warnings, log = s.warnings, s.log
        if dead:
            text = "worker 2 died with 16 requests in flight (16 unreported); 3 workers carry the load"
            warnings += (text,)
            log = log + (LogLine(log[-1].seq + 1, T0 + dead_from, "warning", text),)
        out.append(replace(s, workers=rows, warnings=warnings, log=log))
    return out


STORIES = {
    # 8 → 16 → 32 → 64, healthy tp8 server
    "healthy": lambda: story([Seg("run", 30, 8), Seg("run", 30, 16), Seg("run", 30, 32), Seg("run", 24, 64)]),
    # the PP micro-batch cap: C=32 held, the server runs 8
    "capped": lambda: story([Seg("run", 30, 8), Seg("run", 40, 32)], PP_CAPPED),
    # 8, 64, a pause, 64 again, then abort → the C=1 probe
    "probe": lambda: story([Seg("run", 25, 8), Seg("run", 30, 64), Seg("pause", 12), Seg("run", 25, 64), Seg("probe", 14)]),
    # the server died at C=64
    "gone": lambda: story([Seg("run", 25, 8), Seg("run", 30, 64), Seg("gone", 14, 64)]),
    # 503s: slots back off; the disk filled up under the session log
    "overload": lambda: story([Seg("run", 30, 32), Seg("overload", 16, 64)]),
    # open-loop rate mode at 12.5 req/s, the in-flight cap 64 full: sends held back
    "rate": rate_story,
    # three targets (--url repeated, weights 2,1,1), the third gone
    "targets": targets_story,
    # four workers on two Ray nodes, one dead
    "workers": workers_story,
}


async def play(pilot, host: FakeHost, snaps: list[Snapshot]) -> None:
    """Feed the app one snapshot per second of the story, as the engine would."""
    app = pilot.app
    for s in snaps:
        host.snap = s
        app.pull_snapshot()
    await pilot.pause()
    await pilot.pause()
    # bounded: until two frames agree (a block sized from the last layout, e.g. the workers',
    # moves the log, which then scrolls to its end: a loaded machine needs more frames)
    # and until no table still owes its column widths (a DataTable lays them out on its next
    # Idle: CI once read a live row cut to its old width, '12' for '12.5/s*')
    # (bounded by time, not by a count of frames: under load a frame can come and go before
    # a table's Idle, and the parallel lane once read '12' after 20 frames; three frames in a
    # row must agree)
    prev, agreed = None, 0
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:
        await pilot.wait_for_scheduled_animations()
        await pilot.pause()
        cur = screen_lines(app)
        settled = cur == prev and not any(t._updated_cells or t._require_update_dimensions for t in app.query(DataTable))
        agreed = agreed + 1 if settled else 0
        if agreed >= 2:
            break
        prev = cur


def make_app(name: str) -> tuple[RedlineApp, FakeHost, list[Snapshot]]:
    snaps = STORIES[name]()
    host = FakeHost(snaps[0])
    return RedlineApp(host, step=8), host, snaps


def screen_lines(app: RedlineApp) -> list[str]:
    """The characters on the terminal now, one string per row (dialogs over the screen)."""
    w, h = app.size
    console = Console(width=w, height=h, file=io.StringIO(), force_terminal=True, color_system=None, record=True, legacy_windows=False)
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    return console.export_text().splitlines()


pytestmark = pytest.mark.usefixtures("utc")  # times of day in UTC (tests/conftest.py)


# -- pictures ---------------------------------------------------------------------------------
def _shot(name: str, *press: str):
    app, host, snaps = make_app(name)

    async def run_before(pilot) -> None:
        await play(pilot, host, snaps)
        if press:
            await pilot.press(*press)
            await pilot.pause()
            await pilot.pause()

    return app, run_before


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("name", ["healthy", "capped", "probe", "gone", "overload"])
def test_main_screen_picture(snap_compare, name, size):
    app, run_before = _shot(name)
    assert snap_compare(app, terminal_size=SIZES[size], run_before=run_before)


def test_rate_mode_picture(snap_compare):
    """Rate mode at 80x24: R and the arrival process where C was, the in-flight cap, the schedule
    lag and the sends held at the cap (warning style), the rate step row as `12.5/s`."""
    app, run_before = _shot("rate")
    assert snap_compare(app, terminal_size=SIZES["80x24"], run_before=run_before)


async def test_rate_mode_reads_at_80x24():
    lines = (await played("rate")).lines
    assert lines[1].strip() == "[RUNNING] R=12.5/s poisson  in-flight 64 (cap 64)  server run 64 queue 0", lines[:6]
    rate_line = next(line for line in lines[2:6] if line.strip().startswith("lag "))
    assert rate_line.strip() == "lag p50 0.6 ms p99 4.5 ms  held 3  dropped or delayed 17  done 11.8 req/s"
    rows = [line.split()[0] for line in lines if line.strip()[:1].isdigit() and "ms" in line and ":" in line.split()[-1]]
    assert rows[-2:] == ["8", "12.5/s*"], "\n".join(lines)
    assert lines[-1].lstrip().startswith("+- R±"), lines[-1]


def test_targets_picture(snap_compare):
    """Three targets at 80x24: `3 targets (1 gone)` on line 1, a row per target where the GPU
    panel was, GONE in the error style, the warning naming who carries its share."""
    app, run_before = _shot("targets")
    assert snap_compare(app, terminal_size=SIZES["80x24"], run_before=run_before)


def test_workers_picture(snap_compare):
    """Four workers on two nodes at 80x24, one dead: one summary line under the GPU panel (the
    worst CPU and lag p99 and whose, `1 DEAD: w2` in the error style), the step table and the
    log keep their room; the warning says who carries its share."""
    app, run_before = _shot("workers")
    assert snap_compare(app, terminal_size=SIZES["80x24"], run_before=run_before)


async def test_targets_read_at_80x24():
    lines = (await played("targets")).lines
    assert lines[0].lstrip().startswith("3 targets (1 gone)  llama-3.1-70b-instruct"), lines[0]
    assert lines[1].strip() == "[RUNNING] C=32  in-flight 32", "run/queue are each target's, on its row"
    top = next(i for i, line in enumerate(lines) if line.split()[:3] == ["target", "tok/s", "err/s"])
    rows = [line.split() for line in lines[top + 1 : top + 4]]
    assert [r[0] for r in rows] == ["10.0.0.5:30000", "10.0.0.6:30000", "10.0.0.7:30000"]
    assert rows[2][1:] == ["GONE", "0.00", "-", "-", "-", "-", "-"], rows[2]
    assert rows[0][-2:] == ["21", "0"] and rows[1][-2:] == ["11", "0"], rows
    assert not any(line.lstrip().startswith(("0 ██", "GPU W")) for line in lines), "the block is where the GPUs were"
    assert any(line.split()[:2] == ["C", "dur"] for line in lines), "the step table still shows"


@pytest.mark.parametrize("name", ["healthy", "probe"])
def test_wide_picture(snap_compare, name):
    """From 150 columns: panels, GPUs and the saturation curve left, steps and log right."""
    app, run_before = _shot(name)
    assert snap_compare(app, terminal_size=(160, 44), run_before=run_before)


@pytest.mark.parametrize("size", SIZES)
def test_help_picture(snap_compare, size):
    app, run_before = _shot("healthy", "question_mark")
    assert snap_compare(app, terminal_size=SIZES[size], run_before=run_before)


@pytest.mark.parametrize("size", SIZES)
def test_confirm_picture(snap_compare, size):
    app, run_before = _shot("healthy", "c", "2", "0", "0", "0", "enter")
    assert snap_compare(app, terminal_size=SIZES[size], run_before=run_before)


# -- what a person reads ----------------------------------------------------------------------
async def _open(name: str, size=(80, 24)):
    app, host, snaps = make_app(name)
    return app, host, snaps, app.run_test(size=size, notifications=True)


@dataclass(frozen=True)
class Played:
    """What is on the screen once a whole story has played: its lines and the header's height."""

    lines: list[str]
    header_height: int


_PLAYED: dict[tuple[str, tuple[int, int]], Played] = {}


async def played(name: str, size=(80, 24)) -> Played:
    """The screen after story `name` played at `size`, as `_open` + `play` draw it: played once
    per story and size in a test process and shared by the tests that only read it (each gets
    its own copy of the lines)."""
    key = (name, tuple(size))
    if key not in _PLAYED:
        app, host, snaps, ctx = await _open(name, size)
        async with ctx as pilot:
            await play(pilot, host, snaps)
            _PLAYED[key] = Played(screen_lines(app), app.query_one(StatusHeader).size.height)
    return Played(list(_PLAYED[key].lines), _PLAYED[key].header_height)


@pytest.mark.parametrize("name", list(STORIES))
async def test_80x24_every_line_fits_and_no_stray_glyphs(name):
    lines = (await played(name)).lines
    assert len(lines) == 24
    assert all(len(line) <= 80 for line in lines)
    titles = ("out tok/s", "TTFT p", "ITL p", "E2E p", "errors/s")  # sparkline rows draw bars
    glyphs = set("▁▂▃▄▅▆▇█▉▊▋▌▍▎▏")
    for line in lines:
        if not line.strip().startswith(titles):
            assert not set(line) & (glyphs - {"█"}), line  # no scrollbar remnants after text
        assert not (line.strip() and set(line.strip()) <= glyphs), line  # nor a thumb on its own line
    footer = lines[-1]
    a_or_r = ("r", "back") if name == "probe" else ("a", "probe")  # they take turns
    for key, what in (("e", "export"), ("g", "curve"), ("q", "quit"), ("?", "help"), ("␣", "pause"), a_or_r):
        assert f"{key} {what}" in footer, footer
    assert lines[1].lstrip().startswith("["), "the state opens line 2, readable without colour"


async def test_event_log_wraps_at_words():
    lines = (await played("healthy")).lines
    log = [line for line in lines[-4:-1]]
    body = " ".join(log)
    # the step line is wider than 80: its words arrive whole, on the next line if need be
    assert "ITL p99" in body and "ms" in body
    for line in log:
        assert not line.rstrip().endswith("redline-sim-"), log


async def test_header_two_lines_in_probe_state_with_the_state_first():
    screen = await played("probe")
    assert screen.header_height == 2
    lines = screen.lines
    assert lines[1].strip().startswith("[PROBE] C=1 (was C=64, r returns)  in-flight 1")
    assert "0:01:46  done" in lines[0]


async def test_backing_off_and_session_error_in_the_header():
    lines = (await played("overload")).lines
    assert "[RUNNING] C=64  in-flight 52, 12 backing off" in lines[1]
    assert lines[2].strip().startswith("✗ session log: [Errno 28] No space left on device"), lines[:5]
    assert sum("session log" in line for line in lines[:5]) == 1, "the error once, not again as a warning"


async def test_session_error_shown_even_without_its_warning():
    app, host, snaps, ctx = await _open("healthy")
    async with ctx as pilot:
        await play(pilot, host, snaps)
        host.snap = replace(snaps[-1], session_error="[Errno 13] Permission denied")
        app.pull_snapshot()
        await pilot.pause()
        assert "✗ session log: [Errno 13] Permission denied" in screen_lines(app)[2]


async def test_cap_warning_wraps_and_keeps_its_cause():
    lines = (await played("capped")).lines
    head = " ".join(line.strip() for line in lines[2:4])
    assert head.startswith("⚠ server cap: client holds 32 in flight, server runs 8, queue 24")
    assert "pp micro-batch cap 8" in head


async def test_empty_sparkline_rows_are_blank():
    """The first seconds: tokens arrive, no request has finished; nothing is a full block."""
    first = story([Seg("run", 3, 8)])
    empty = {"output_tok_s": 40.0, "ttft_p50_ms": 60.0, "ttft_p99_ms": 61.0, "errors": 0.0}
    snaps = [replace(s, output_tok_s=40.0, itl_ms={}, e2e_ms={}, row=dict(empty, t=s.row["t"])) for s in first]
    host = FakeHost(snaps[0])
    app = RedlineApp(host, step=8)
    async with app.run_test(size=(80, 24)) as pilot:
        await play(pilot, host, snaps)
        lines = screen_lines(app)
    for title in ("ITL p50", "ITL p99", "E2E p50", "E2E p99"):
        row = next(line for line in lines if line.strip().startswith(title))
        assert not set(row) & set("▁▂▃▄▅▆▇█") and row.rstrip().endswith(" -"), row
    tok = next(line for line in lines if line.strip().startswith("out tok/s"))
    assert "███" in tok and tok.rstrip().endswith("40.0 ↑40.0"), tok


def test_spark_text_draws_gaps_and_scales_from_zero():
    assert spark_text([], 5) == "     "
    assert spark_text([None, None], 4) == "    "
    assert spark_text([0.0, 4.0, None, 8.0], 6) == "  ▁▄ █"  # half the top: half a block
    assert spark_text([0.0, 0.0], 2) == "▁▁"


def test_wrap_words_never_cuts_a_word():
    text = "⚠ server cap: client holds 32 in flight, server runs 8, queue 24 — pp micro-batch cap 8 (max_running_requests 64 // pp 8)"
    lines = wrap_words(text, 40, 2)
    assert lines == ["⚠ server cap: client holds 32 in flight,", "  server runs 8, queue 24 — pp…"]
    assert wrap_words("short", 40, 2) == ["short"]


async def test_step_table_is_chronological_with_pause_probe_and_live_row():
    app, host, snaps, ctx = await _open("probe", size=(120, 40))
    async with ctx as pilot:
        await play(pilot, host, snaps)
        table = app.query_one(StepTable)
        rows = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
        live = table.live_row()
    assert [r[0] for r in rows] == ["8", "64", "paused", "64", "1* probe"]
    assert [r[-1] for r in rows] == ["12:00:00", "12:00:25", "12:00:55", "12:01:07", "12:01:32"]
    assert rows[2][1] == "12s"
    assert live == 4
    assert rows[4][7] == "1", "the probe's srv run is its own figure, not the sample before the abort"


async def test_step_table_remembers_every_probe_and_shows_a_live_pause():
    snaps = story([Seg("run", 20, 8), Seg("probe", 12), Seg("run", 20, 16), Seg("probe", 12), Seg("pause", 5)])
    host = FakeHost(snaps[0])
    app = RedlineApp(host, step=8)
    async with app.run_test(size=(120, 40)) as pilot:
        await play(pilot, host, snaps)
        table = app.query_one(StepTable)
        rows = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
        assert [r[0] for r in rows] == ["8", "1 probe", "16", "1 probe", "paused*"]
        assert rows[-1][1] == "5s"
        assert table.live_row() == 4


async def test_confirm_dialog_shows_its_whole_question():
    app, host, snaps, ctx = await _open("healthy")
    async with ctx as pilot:
        await play(pilot, host, snaps)
        await pilot.press("c", *"2000", "enter")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        text = " ".join(" ".join(screen_lines(app)).split())
        assert "C=2000 is above --max-concurrency 1024. Send that much load?" in text.replace("▊", "").replace("▎", "")
        await pilot.press("y")
        await pilot.pause()
    assert any(isinstance(c, C.SetConcurrency) and c.n == 2000 and c.raise_max for c in host.sent)


async def test_help_lists_keys_figures_settings_and_closes_three_ways():
    app, host, snaps, ctx = await _open("healthy")
    async with ctx as pilot:
        await play(pilot, host, snaps)
        for close in ("escape", "question_mark", "q"):
            await pilot.press("question_mark")
            await pilot.pause()
            assert isinstance(app.screen, HelpScreen)
            text = " ".join(" ".join(screen_lines(app)).split())
            assert "Keys" in text and "concurrency up by the step" in text
            await pilot.press(close)
            await pilot.pause()
            assert not isinstance(app.screen, HelpScreen), close
        assert app.is_running and host.stopped is None, "q closes the help, it does not quit"
        await pilot.press("question_mark")
        seen = []
        for _ in range(5):  # read it all, a page at a time
            await pilot.pause()
            seen.append(" ".join(" ".join(screen_lines(app)).split()))
            await pilot.press("pagedown")
        text = " ".join(seen)
    assert "Settings" in text and "What the figures mean" in text and "done / fail requests completed" in text
    for want in (URL, "sglang llama-3.1-70b-instruct max_running=256 tp=8 pp=1", "API chat",
                 "workload random, input 512 / output 128 tokens", "step +/- changes C by 8", "max C 1024",
                 "request timeout 600 s", "SLOs none set", f"session {SESSION}"):
        assert want in text, (want, text)


def test_help_covers_every_key_binding():
    actions = {b.action for b in (*LiveScreen.BINDINGS, *RedlineApp.BINDINGS)}  # the screen's keys, the app's Ctrl-C
    listed = {a for a, _, _ in KEYS} | {"steps_down", "rate_less", "rate_halve", "interrupt", "export_in_sweep"}  # PgUp/PgDn, + -, ] [, q Ctrl-C, e share a line
    assert actions <= listed, actions - listed


async def test_state_is_text_without_colour(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    for name, state in (("healthy", "[RUNNING]"), ("probe", "[PROBE]"), ("gone", "[SERVER GONE]")):
        app, host, snaps, ctx = await _open(name)
        async with ctx as pilot:
            await play(pilot, host, snaps)
            assert app.no_color
            assert screen_lines(app)[1].strip().startswith(state)


async def test_export_notice_is_one_line_at_the_bottom(tmp_path, monkeypatch):
    import redline.engine.report.export as export_mod

    out = tmp_path / "session"
    (out / "export").mkdir(parents=True)
    monkeypatch.setattr(export_mod, "export_session", lambda d, fmt, o: [out / "export" / f"{t}.parquet" for t in ("requests", "timeline", "steps")])
    app, host, snaps, ctx = await _open("healthy")
    host.config.out_dir = out
    async with ctx as pilot:
        await play(pilot, host, snaps)
        await pilot.press("e")
        await pilot.pause(0.3)
        lines = screen_lines(app)
    hit = [i for i, line in enumerate(lines) if "exported 3 tables" in line]
    assert hit == [len(lines) - 2], lines  # above the footer: not over the header nor the step table
    assert any(isinstance(c, C.Log) and "exported parquet to" in c.text for c in host.sent)


async def test_step_table_scrolls_back_and_stays_while_the_live_row_moves():
    segs = [Seg("run", 12, c) for c in (8, 16, 24, 32, 40, 48, 56, 64, 72)]
    snaps = story(segs)
    host = FakeHost(snaps[0])
    app = RedlineApp(host, step=8)
    async with app.run_test(size=(80, 24)) as pilot:
        await play(pilot, host, snaps[:-3])
        table = app.query_one(StepTable)

        def first() -> list[str]:
            """The C of each step row on screen, top to bottom."""
            lines = screen_lines(app)
            top = next(i for i, line in enumerate(lines) if line.split()[:2] == ["C", "dur"])
            return [line.split()[0] for line in lines[top + 1 :] if line[:5].strip().rstrip("*").isdigit()]

        assert first()[-1] == "72*", "it follows the live row"
        assert first()[0] != "8", "the first steps are scrolled out at 80x24"
        await pilot.press("pageup", "pageup", "pageup")
        await play(pilot, host, snaps[-3:])  # the live row keeps changing
        assert first()[0] == "8", "scrolled back, it stays there"
        await pilot.press("pagedown", "pagedown", "pagedown")
        await play(pilot, host, snaps[-1:])
        assert first()[-1] == "72*"
        assert table.live_row() == table.row_count - 1


async def test_help_gives_one_line_to_each_key_and_figure_at_80_columns():
    app, host, snaps, ctx = await _open("healthy")
    seen: list[str] = []
    async with ctx as pilot:
        await play(pilot, host, snaps)
        await pilot.press("question_mark")
        for _ in range(5):
            await pilot.pause()
            seen += screen_lines(app)
            await pilot.press("pagedown")
    for name, what in FIGURES + tuple((k, v) for _, k, v in KEYS):
        assert any(name.strip() in line and what in line for line in seen), (name, what)


async def test_header_keeps_five_lines_and_drops_whole_warnings():
    app, host, snaps, ctx = await _open("overload")
    cap = ("server cap: client holds 52 in flight, server runs 40, queue 12 — pp micro-batch cap 8 "
           "(max_running_requests 64 // pp 8)")
    async with ctx as pilot:
        await play(pilot, host, snaps)
        host.snap = replace(snaps[-1], preset="quick step 3/5 C=64 hold 12/30 s", warnings=snaps[-1].warnings + (cap,))
        app.pull_snapshot()
        await pilot.pause()
        assert app.query_one(StatusHeader).size.height == 5
        head = [line.strip() for line in screen_lines(app)[:5]]
    assert head[2] == "quick step 3/5 C=64 hold 12/30 s"
    assert head[3].startswith("✗ session log: [Errno 28] No space left on device")
    assert head[4] == "⚠ 2 more warnings: the log has them all", head
