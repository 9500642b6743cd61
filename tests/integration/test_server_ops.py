"""Looking inside the server at the load redline holds (issue 25): profiler capture, cache flush
between steps, cached tokens per request, speculative decoding, and the server's own view
(generation throughput, KV use, preemptions) beside the client's.

Two kinds of server, both on 127.0.0.1 and started here:

- an independent SGLang-like server (`SglangLike`, below: not redline's sim) that keeps its own
  record of every /flush_cache and profiler call and of how many requests it was running at
  that moment, and exposes fixed `sglang:` metrics;
- the built-in sim (engine/sim/), whose ground truth (`/sim/state`, `/sim/requests`) knows what
  it cached, flushed and preempted, and when.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import time
from pathlib import Path

import httpx
import pytest
from aiohttp import web

from redline.engine.core.config import EngineConfig
from redline.engine.core.engine import Engine
from redline.engine.measure.step_result import StepResult
from redline.engine.preset import parse_preset
from redline.engine.run.preset_runner import run_preset
from redline.engine.workload.prompts import WorkloadConfig

from helpers import ThreadedServer, until

pytestmark = pytest.mark.server

FAST = ("--set", "time_scale=0.2")


# -- an independent SGLang-like server ----------------------------------------------------
class SglangLike(ThreadedServer):
    """/generate streams `chunks` chunks `delay_s` apart (meta_info with prompt, completion and
    cached tokens), /get_server_info says SGLang, /metrics shows its running count and
    `sglang:spec_accept_length 2.75`; /flush_cache and the profiler record each call with the
    requests running then, and a flush is refused (400) while any runs, as SGLang does."""

    def __init__(self, *, chunks: int = 8, delay_s: float = 0.02, profiler: bool = True) -> None:
        self.chunks = chunks
        self.delay_s = delay_s
        self.profiler = profiler
        self.running = 0
        self.max_running = 0
        self.flushes: list[dict] = []
        self.profile_calls: list[dict] = []
        self.generations = 0
        super().__init__()

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.generations += 1
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        try:
            n = int(body["sampling_params"]["max_new_tokens"])
            prompt = len(str(body.get("text", "")).split())
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            for i in range(1, min(n, self.chunks) + 1):
                await asyncio.sleep(self.delay_s)
                meta = {"prompt_tokens": prompt, "completion_tokens": i, "cached_tokens": prompt // 2,
                        "finish_reason": {"type": "length"} if i == min(n, self.chunks) else None}
                await resp.write(b"data: " + json.dumps({"text": "x" * i, "meta_info": meta}).encode() + b"\n\n")
            await resp.write(b"data: [DONE]\n\n")
            return resp
        finally:
            self.running -= 1

    async def _metrics(self, request: web.Request) -> web.Response:
        text = (f'sglang:num_running_reqs{{model_name="m"}} {self.running}\n'
                f'sglang:num_queue_reqs{{model_name="m"}} 0\n'
                f'sglang:token_usage{{model_name="m"}} 0.25\n'
                f'sglang:gen_throughput{{model_name="m"}} 123.5\n'
                f'sglang:spec_accept_length{{model_name="m"}} 2.75\n')
        return web.Response(text=text)

    async def _flush(self, request: web.Request) -> web.Response:
        ok = self.running == 0
        self.flushes.append({"t": time.time(), "running": self.running, "ok": ok})
        return web.Response(status=200 if ok else 400, text="Cache flushed.\n")

    async def _profile(self, request: web.Request) -> web.Response:
        if not self.profiler:
            raise web.HTTPNotFound()
        body = await request.json() if request.can_read_body else None
        self.profile_calls.append({"path": request.path, "t": time.time(), "running": self.running, "body": body})
        return web.Response(text="Start profiling.\n" if request.path == "/start_profile" else "Stop profiling. This will take some time.\n")

    def app(self) -> web.Application:
        app = web.Application()

        async def info(r: web.Request) -> web.Response:
            return web.json_response({"max_running_requests": 64, "tp_size": 1, "pp_size": 1, "version": "fake"})

        async def health(r: web.Request) -> web.Response:
            return web.Response(text="ok")

        app.router.add_get("/get_server_info", info)
        app.router.add_get("/health", health)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_post("/generate", self._generate)
        app.router.add_post("/flush_cache", self._flush)
        app.router.add_post("/start_profile", self._profile)
        app.router.add_post("/stop_profile", self._profile)
        return app


def _preset(concurrency: list[int], *, hold_s: float = 2.0, dataset: str | None = None, api: str = "generate",
            input_len: int = 16, output_len: int = 32, probe_s: float = 0, max_hold_s: float | None = None, **ramp):
    """`max_hold_s` (default 3 x hold_s, the ramp's own): max_hold_s = hold_s closes each step
    at hold_s, steady or not (a steady throughput needs STEADY_MIN_S = 4 s of a step), for the
    tests that read what the server was asked and when, not its scraped view of a window."""
    w = {"api": api, "input_len": input_len, "output_len": output_len}
    if dataset:
        w["dataset"] = dataset
    d = {"workload": w, "ramp": {"concurrency": concurrency, "warmup_s": 0, "hold_s": hold_s, "min_requests": 1,
                                 "max_hold_s": hold_s * 3 if max_hold_s is None else max_hold_s},
         "after": {"probe_s": probe_s}}
    p = parse_preset(d, "t.toml")
    return dataclasses.replace(p, ramp=dataclasses.replace(p.ramp, **ramp)) if ramp else p


def _config(url: str, out: Path, **kw) -> EngineConfig:
    kw.setdefault("concurrency", 2)
    return EngineConfig(url=url, out_dir=out, live_steps=False, start_paused=True, use_nvml=False, **kw)


async def _run(cfg: EngineConfig, preset, *, drain: bool = False):
    """Run `preset` as `redline run --headless` does. `drain`: afterwards, stop sending and let
    every request end by itself before the engine stops (none cancelled). The preset's
    [workload] is the session's, as `redline run` makes it."""
    w = preset.workload
    cfg.api = w.api
    cfg.workload = WorkloadConfig(dataset=w.dataset or "random", input_len=w.input_len or 16, output_len=w.output_len or 32)
    e = Engine(cfg)
    await e.start()
    try:
        out = await run_preset(e, preset)
        if drain:
            e.controller.pause()
            assert await until(lambda: e.controller.in_flight == 0, 60)
        return out, e
    finally:
        await e.stop("preset finished")


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def _events(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "events.ndjson").read_text().splitlines() if line.strip()]


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "requests.ndjson").read_text().splitlines() if line.strip()]


# -- cache flush between steps -----------------------------------------------------------
def test_flush_cache_before_each_step_on_an_independent_sglang_never_while_busy(tmp_path):
    """Done when: a preset with flush_cache = true and two steps makes at least two successful
    /flush_cache calls, none done while a request was running (one asked then is refused and
    asked again); the drain is in no step."""
    with SglangLike(chunks=10, delay_s=0.03) as srv:
        preset = _preset([4, 8], hold_s=1.5, max_hold_s=1.5, flush_cache=True)
        out, _ = asyncio.run(_run(_config(srv.url, tmp_path / "s"), preset))
        ok = [f for f in srv.flushes if f["ok"]]
        assert len(ok) >= 2, srv.flushes
        assert all(f["running"] == 0 for f in ok) and all(f["running"] for f in srv.flushes if not f["ok"]), srv.flushes
        assert srv.max_running >= 8  # the load itself ran between the flushes
    steps = _summary(tmp_path / "s")["steps"]
    assert [s["concurrency"] for s in steps] == [4, 8]
    for s, f in zip(steps, ok, strict=False):
        assert s["cache_flush"]["ok"] and s["cache_flush"]["path"] == "/flush_cache"
        assert s["t_start"] >= f["t"]  # the step measures after its flush: the drain is not its time
    lines = [e["text"] for e in _events(tmp_path / "s") if "cache flushed" in e["text"]]
    assert len(lines) == 2 and "C=4" in lines[0] and "C=8" in lines[1]


def test_the_sim_refuses_a_flush_while_busy_and_redline_flushes_once_idle(sim_factory, tmp_path):
    """The sim's own log: each flush that was done found nothing queued or running, one before
    each step and the probe (a flush asked while the sim still held a request, its handler
    outliving the stream, was refused and asked again: SGLang's way, issue 43); a flush forgets
    the cache (the next prompt of a group hits nothing); and a flush while a request runs is
    refused (400) and changes nothing."""
    sim = sim_factory("healthy", extra_args=FAST)
    preset = _preset([2, 4], hold_s=1.5, max_hold_s=1.5, api="chat", dataset="prefix:groups=1,prefix_len=128,suffix_len=8",
                     flush_cache=True, probe_s=0.5)
    out, _ = asyncio.run(_run(_config(sim.url, tmp_path / "s"), preset))
    calls = httpx.get(sim.url + "/sim/state").json()["flush_calls"]
    done = [c for c in calls if c["ok"]]
    assert len(done) == 3  # before each step and before the probe
    assert all(c["running"] == 0 and c["queued"] == 0 for c in done), calls
    assert all(c["running"] or c["queued"] for c in calls if not c["ok"]), calls  # refused only while it held one
    s = _summary(tmp_path / "s")
    assert s["probe"]["cache_flush"]["ok"]
    # a flush while a request runs: refused, the cache kept
    with httpx.Client(base_url=sim.url, timeout=30) as c:
        with c.stream("POST", "/generate", json={"text": "y" * 400, "sampling_params": {"max_new_tokens": 400}, "stream": True}) as r:
            lines = r.iter_lines()  # kept: a dropped iterator closes the stream
            next(lines)
            busy = c.post("/flush_cache")
        assert busy.status_code == 400
        state = c.get("/sim/state").json()
        assert state["flush_calls"][-1] == {**state["flush_calls"][-1], "ok": False, "running": 1}
        assert state["prefix_cache"]["held_tokens"] > 0  # the refused flush kept it
        assert c.post("/flush_cache").status_code == 200
        assert c.get("/sim/state").json()["prefix_cache"]["held_tokens"] == 0


# -- profiler ------------------------------------------------------------------------------
def test_profile_at_c8_starts_during_the_c8_step_and_stops_after_it(tmp_path):
    """Done when: `[ramp] profile = [8]` calls /start_profile during the C=8 step and
    /stop_profile after it; summary.json and the log name the load, the window and the trace."""
    with SglangLike(chunks=10, delay_s=0.03) as srv:
        preset = _preset([4, 8], hold_s=1.5, max_hold_s=1.5, profile=(8,))
        out, _ = asyncio.run(_run(_config(srv.url, tmp_path / "s", profile_s=30.0), preset))
        calls = srv.profile_calls
    assert [c["path"] for c in calls] == ["/start_profile", "/stop_profile"], calls
    assert calls[0]["body"]["activities"] == ["CPU", "GPU"]
    c4, c8 = _summary(tmp_path / "s")["steps"]
    assert c4["profiles"] is None
    (p,) = c8["profiles"]
    assert p["load"] == "C=8" and p["stopped_by"] == "step end"  # profile_s 30 s: the step ended first
    start, stop = calls[0]["t"], calls[1]["t"]
    assert c8["t_start"] - 0.05 <= start <= c8["t_start"] + c8["duration_s"]  # during the C=8 step
    assert stop >= c8["t_start"] + c8["duration_s"] - 0.05  # ... stopped at its end
    assert calls[0]["running"] >= 6  # the server held the C=8 load when the capture began
    assert abs(p["t_start"] - start) < 1 and abs(p["t_end"] - stop) < 1
    log = [e["text"] for e in _events(tmp_path / "s") if e["text"].startswith("profiler")]
    assert any("profiler stopped: C=8" in t and "trace on the server: " in t for t in log), log


def test_profile_s_ends_the_capture_before_the_step_and_the_sim_names_the_trace(sim_factory, tmp_path):
    sim = sim_factory("healthy", extra_args=FAST)
    preset = _preset([2, 4], hold_s=2.5, max_hold_s=2.5, profile=(4,))
    asyncio.run(_run(_config(sim.url, tmp_path / "s", profile_s=0.5), preset))
    (truth,) = httpx.get(sim.url + "/sim/state").json()["profiles"]
    c2, c4 = _summary(tmp_path / "s")["steps"]
    (p,) = c4["profiles"]
    assert p["stopped_by"] == "profile_s" and 0.4 <= p["duration_s"] < 2.0
    # SGLang's answer names no path: redline found the files the sim wrote as SGLang does, one per rank
    assert p["trace"] == f"{truth['trace']} (and 7 more: one per rank)" and len(truth["traces"]) == 8
    assert truth["running_at_start"] >= 3 and truth["t_stop"] < c4["t_start"] + c4["duration_s"]


def test_a_server_without_the_profiler_gets_one_warning_line(sim_factory, tmp_path):
    """404 on /start_profile: one warning, no error, no capture; the run goes on."""
    sim = sim_factory("healthy", extra_args=(*FAST, "--set", "profiler=false"))
    preset = _preset([2, 3, 4], hold_s=1.0, max_hold_s=1.0, profile=(2, 3, 4))
    out, _ = asyncio.run(_run(_config(sim.url, tmp_path / "s"), preset))
    assert len(out.steps) == 3 and all(s.profiles is None for s in out.steps)
    ev = _events(tmp_path / "s")
    warned = [e for e in ev if "profiler" in e["text"]]
    assert len(warned) == 1 and warned[0]["kind"] == "warning" and "404" in warned[0]["text"], warned
    assert not [e for e in ev if e["kind"] == "error"]


# -- cached tokens -------------------------------------------------------------------------
@pytest.mark.parametrize("api,workers", [("chat", 1), ("generate", 1), ("chat", 2)])
def test_cached_tokens_per_request_sum_to_the_servers_count(sim_factory, tmp_path, api, workers):
    """Done when: with a shared-prefix dataset on a server reporting cached tokens, the rows'
    cached_tokens sum to the server's own count, and each step's cached_prompt_ratio matches
    the server's truth for the requests that step sent within 0.05 (in one process, and with the
    load in two worker processes)."""
    sim = sim_factory("healthy", extra_args=FAST)
    preset = _preset([2, 6], hold_s=2.0, api=api, dataset="prefix:groups=3,prefix_len=160,suffix_len=24", output_len=24)
    out, _ = asyncio.run(_run(_config(sim.url, tmp_path / "s", workers=workers), preset, drain=True))
    rows = _rows(tmp_path / "s")
    assert all(r["status"] == "ok" for r in rows)  # drained: none cancelled
    assert workers == 1 or {r["worker"] for r in rows if r["phase"] != "calibration"} == {0, 1}
    state = httpx.get(sim.url + "/sim/state").json()
    assert sum(r["cached_tokens"] for r in rows) == state["prefix_cache"]["hit_tokens"] > 0
    truth = httpx.get(sim.url + "/sim/requests").json()
    steps = [StepResult.from_dict(s) for s in _summary(tmp_path / "s")["steps"]]
    for s in steps:
        own = [t for t in truth if s.t_start <= t["t_arrive"] <= s.t_start + s.duration_s]
        want = sum(t["cached_tokens"] for t in own) / sum(t["prompt_tokens"] for t in own)
        assert s.cached_prompt_ratio is not None and abs(s.cached_prompt_ratio - want) <= 0.05, (s.concurrency, s.cached_prompt_ratio, want)
        assert s.cached_prompt_ratio > 0.5  # most of each prompt is its group's prefix
        assert s.prefix_hit_rate is not None and abs(s.prefix_hit_rate - s.cached_prompt_ratio) < 0.15  # beside the server's own


def test_without_a_cache_report_rows_say_nothing(sim_factory, tmp_path):
    """A server that does not report cached tokens: null, never 0 (chat without the report)."""
    sim = sim_factory("healthy", extra_args=(*FAST, "--set", "cache_report=false"))
    preset = _preset([2], hold_s=1.0, api="chat", dataset="prefix:groups=1,prefix_len=64,suffix_len=8")
    asyncio.run(_run(_config(sim.url, tmp_path / "s"), preset))
    assert all(r["cached_tokens"] is None for r in _rows(tmp_path / "s"))
    (s,) = _summary(tmp_path / "s")["steps"]
    assert s["cached_prompt_ratio"] is None and s["prefix_hit_rate"] is not None
    # ... and redline says why, once: the workload asks for cached tokens (issue 43 case 9)
    hints = [e["text"] for e in _events(tmp_path / "s") if "--enable-cache-report" in e["text"]]
    # the sim's /server_info says --enable-cache-report is off, as SGLang's does: said at once
    assert len(hints) == 1 and hints[0].startswith("cached tokens: this SGLang server was started without"), hints


# -- speculative decoding and the server's own view ------------------------------------------
def test_spec_accept_length_from_an_independent_sglang(tmp_path):
    """Done when: a server exposing sglang:spec_accept_length 2.75 gives steps 2.75; its
    generation throughput and KV use sit beside the client's. The step closes at 2.5 s
    (max_hold_s): the figures are the server's gauges, no steady throughput needed."""
    with SglangLike(chunks=10, delay_s=0.02) as srv:
        out, _ = asyncio.run(_run(_config(srv.url, tmp_path / "s"), _preset([2], hold_s=2.5, max_hold_s=2.5)))
    (s,) = _summary(tmp_path / "s")["steps"]
    assert s["spec_accept_length"] == 2.75
    assert s["server_gen_throughput"] == 123.5 and s["server_kv_usage"] == 0.25 and s["server_kv_usage_max"] == 0.25
    assert s["server_preemptions"] is None  # it does not report them


def test_sim_speculative_decoding_chunks_carry_several_tokens(sim_factory, tmp_path):
    """The sim with an accept length of 2.75: the step reads about 2.75 from its gauge, and each
    chunk carries several tokens (rows: fewer chunks than tokens). The step closes at 3 s
    (max_hold_s): the gauge and the rows, no steady throughput needed."""
    sim = sim_factory("healthy", extra_args=(*FAST, "--set", "spec_accept_length=2.75"))
    asyncio.run(_run(_config(sim.url, tmp_path / "s"), _preset([4], hold_s=3.0, max_hold_s=3.0, output_len=120)))
    (s,) = _summary(tmp_path / "s")["steps"]
    assert s["spec_accept_length"] == pytest.approx(2.75, abs=0.1)
    assert s["spec_acceptance_rate"] == pytest.approx(1.75 / 3, abs=0.05)
    ok = [r for r in _rows(tmp_path / "s") if r["status"] == "ok" and r["output_tokens"] == 120]
    assert ok and all(r["chunks"] <= 120 / 2.4 for r in ok)


def test_preemptions_rise_with_c_and_the_cap_detector_names_the_kv_cache(sim_factory, tmp_path):
    """The sim without output reservations and a small KV budget: no preemption at C=2, many at
    C=32 (the step's count is the sim's own counter over the window, within what its scrapes
    can see), and the cap warning says "KV cache full: the server preempts".
    The detector wants the cap sustained 3 s over 3 server samples, and the KV cache fills ~2 s
    into C=32: here it fired 4-6 s into the step, so the step holds 9 s (CI once closed a 6 s
    step before it fired)."""
    sim = sim_factory("healthy", extra_args=(*FAST, "--set", "kv_reserve_output=false", "--set", "kv_budget_tokens=1500"))
    preset = _preset([2, 32], hold_s=9.0, output_len=200)
    out, _ = asyncio.run(_run(_config(sim.url, tmp_path / "s"), preset))
    c2, c32 = out.steps
    assert c2.server_preemptions is None  # SGLang's counter has no series before its first retraction
    total = httpx.get(sim.url + "/sim/state").json()["preemptions_total"]
    assert 0 < c32.server_preemptions <= total
    assert c32.server_kv_usage_max is not None and c32.server_kv_usage_max > 0.8
    warn = [e["text"] for e in _events(tmp_path / "s") if e["kind"] == "warning" and "server cap" in e["text"]]
    assert warn and "KV cache full: the server preempts" in warn[0], warn


# -- the P key ------------------------------------------------------------------------------
async def test_pressing_P_in_the_tui_starts_the_profiler_within_a_second(sim_factory, tmp_path):
    """Done when: pressing P in the TUI calls /start_profile within a second (the sim's own
    log), at the load held then; it stops after --profile-s."""
    from redline.engine.host import EngineThread
    from redline.tui.app import RedlineApp

    sim = sim_factory("healthy", extra_args=FAST)
    cfg = EngineConfig(url=sim.url, concurrency=4, workload=WorkloadConfig(input_len=16, output_len=400),
                       out_dir=tmp_path / "s", calibrate=False, use_nvml=False, profile_s=1.0)
    host = EngineThread(cfg)
    host.start()
    try:
        app = RedlineApp(host, step=4)
        async with app.run_test(size=(80, 24)) as pilot:
            async def four() -> bool:
                return (await _state_async(sim.url))["running"] == 4
            assert await until(four, 10)
            await pilot.press("P")
            t_key = time.time()

            async def started():
                return (await _state_async(sim.url))["profiles"]
            assert await until(started, 3)
            (p,) = (await _state_async(sim.url))["profiles"]
            assert p["t_start"] - t_key < 1.0 and p["running_at_start"] == 4

            async def stopped() -> bool:
                return (await _state_async(sim.url))["profiles"][0]["t_stop"] is not None
            assert await until(stopped, 5)
            assert type(app.screen).__name__ != "PresetPicker"  # `P` is not `p`
    finally:
        host.stop()
    (p,) = httpx.get(sim.url + "/sim/state").json()["profiles"]
    assert 0.8 <= p["t_stop"] - p["t_start"] < 3.0  # --profile-s 1
    lines = [e["text"] for e in _events(tmp_path / "s") if e["text"].startswith("profiler")]
    assert any("profiler stopped: C=4" in t and f"trace on the server: {p['trace']}" in t for t in lines), lines


async def _state_async(url: str) -> dict:
    async with httpx.AsyncClient(timeout=10) as c:
        return (await c.get(url + "/sim/state")).json()


# -- the control API -----------------------------------------------------------------------
@pytest.mark.parametrize("profiler", [True, False])
def test_post_v1_profile_starts_a_capture_or_says_why_not(sim_factory, tmp_path, profiler, capsys):
    """POST /v1/profile (and `redline ctl profile S`): the capture at the load held now, stopped
    after `seconds`; a server without the profiler: started false, one warning line (a second
    call: no second line)."""
    from redline.engine.control.address import ControlAddress
    from redline.engine.host import EngineThread

    sim = sim_factory("healthy", extra_args=(*FAST, "--set", f"profiler={str(profiler).lower()}"))
    h = EngineThread(EngineConfig(url=sim.url, concurrency=3, workload=WorkloadConfig(input_len=16, output_len=400),
                                  out_dir=tmp_path / "s", calibrate=False, use_nvml=False, control=ControlAddress("127.0.0.1", 0)))
    h.start()
    try:
        with httpx.Client(base_url=h.engine.control.url, timeout=10) as c:
            assert c.post("/v1/profile", json={"seconds": "5"}).status_code == 400
            r = c.post("/v1/profile", json={"seconds": 0.5}).json()
            assert r["ok"] and r["started"] is profiler, r
            if profiler:
                assert r["line"] == "profiler started at C=3"
                assert asyncio.run(until(lambda: httpx.get(sim.url + "/sim/state").json()["profiles"][0]["t_stop"] is not None, 5))
                # the same from the shell: redline ctl profile S
                from helpers import main_in_process

                assert main_in_process(["ctl", "--control", h.engine.control.url, "profile", "0.5"]) == 0
                assert "profiler started at C=3" in capsys.readouterr().out
                assert asyncio.run(until(lambda: httpx.get(sim.url + "/sim/state").json()["profiles"][-1]["t_stop"] is not None, 5))
            else:
                assert "no profiler endpoint" in r["line"]
                assert c.post("/v1/profile", json={}).json()["started"] is False
    finally:
        h.stop()
    profiles = httpx.get(sim.url + "/sim/state").json()["profiles"]
    warned = [e for e in _events(tmp_path / "s") if e["kind"] == "warning" and "profiler" in e["text"]]
    if profiler:
        assert len(profiles) == 2 and not warned
        assert all(p["running_at_start"] == 3 and 0.4 <= p["t_stop"] - p["t_start"] < 2.5 for p in profiles)
    else:
        assert profiles == [] and len(warned) == 1


async def test_the_screen_shows_the_servers_view_beside_the_clients(sim_factory, tmp_path):
    """Live on screen: speculative decoding's accept length, the server's prefix-cache hit rate
    beside the share of the live step's prompt tokens it reported cached, its gen tok/s and KV."""
    from textual.widgets import Label

    from redline.engine.host import EngineThread
    from redline.tui.app import RedlineApp

    sim = sim_factory("healthy", extra_args=(*FAST, "--set", "spec_accept_length=2.5"))
    cfg = EngineConfig(url=sim.url, concurrency=4, api="chat", calibrate=False, use_nvml=False, out_dir=tmp_path / "s",
                       workload=WorkloadConfig(dataset="prefix:groups=2,prefix_len=96,suffix_len=8", input_len=104, output_len=96))
    host = EngineThread(cfg)
    host.start()
    try:
        app = RedlineApp(host, step=4)
        async with app.run_test(size=(100, 30)) as pilot:
            line = app.query_one("#server-line", Label)

            def shown() -> bool:
                text = str(line.render())
                m = re.search(r"spec (\d\.\d\d) tok/step", text)
                return bool(line.display and m and abs(float(m.group(1)) - 2.5) <= 0.15 and "cache hit " in text
                            and re.search(r"cached \d+ %", text))

            end = time.monotonic() + 15
            while not shown() and time.monotonic() < end:
                await pilot.pause(0.2)
            text = str(line.render())
            assert shown(), text
            assert "gen " in text and "KV " in text
    finally:
        host.stop()


# -- from the command line --------------------------------------------------------------------
def test_redline_run_with_preset_keys_and_flags_end_to_end(sim_factory, tmp_path):
    """`redline run PRESET --headless --profile-s 0.5` with `[ramp] profile = [4]` and
    `flush_cache = true`: the sim saw a flush before each step and the probe, none busy, and one
    capture at C=4 of about half a second; `--flush-cache` does what the key does; a bad key
    value is one line, exit 2."""
    from helpers import finish, start_headless, write_preset

    sim = sim_factory("healthy", extra_args=FAST)
    preset = write_preset(tmp_path, "ops", concurrency=[2, 4], hold_s=1.5, max_hold_s=1.5, output_len=32,
                          extra="profile = [4]\nflush_cache = true\n[after]\nprobe_s = 0.5\n")
    rc, out, err = finish(start_headless(sim.url, preset, tmp_path / "s", "--profile-s", "0.5"), 120)
    assert rc == 0, err
    state = httpx.get(sim.url + "/sim/state").json()
    done = [c for c in state["flush_calls"] if c["ok"]]
    assert len(done) == 3 and all(c["running"] == 0 for c in done), state["flush_calls"]
    (p,) = state["profiles"]
    assert p["running_at_start"] >= 3 and 0.4 <= p["t_stop"] - p["t_start"] < 3.0
    steps = _summary(tmp_path / "s")["steps"]
    assert steps[1]["profiles"][0]["load"] == "C=4" and steps[1]["profiles"][0]["trace"].startswith(p["trace"] + " (and 7 more")
    # --flush-cache on a preset that does not ask for it: a flush before its one step
    plain = write_preset(tmp_path, "plain", concurrency=[2], hold_s=1.0, max_hold_s=1.0, output_len=16)
    rc, out, err = finish(start_headless(sim.url, plain, tmp_path / "f", "--flush-cache"), 120)
    assert rc == 0, err
    calls = [c for c in httpx.get(sim.url + "/sim/state").json()["flush_calls"] if c["ok"]]
    assert len(calls) == 4 and calls[-1]["running"] == 0
    bad = write_preset(tmp_path, "bad", concurrency=[2, 4], extra="profile = [3]\n")
    rc, out, err = finish(start_headless(sim.url, bad, tmp_path / "b"), 60)
    assert rc == 2 and "[ramp].profile: 3 is not a step of this ramp (steps: 2, 4)" in err and len(err.strip().splitlines()) == 1, err


async def test_vllm_is_flushed_at_reset_prefix_cache_and_an_unknown_server_is_warned_once():
    """The flush path is chosen by what the server said it is: vLLM /reset_prefix_cache (404
    without VLLM_SERVER_DEV_MODE: one warning, then skipped quietly); an unknown kind: one
    warning, no call."""
    from redline.engine.run.server_ops import ServerOps

    calls: list[str] = []
    dev_mode = {"on": True}

    async def reset(request: web.Request) -> web.Response:
        calls.append(request.path)
        return web.Response(status=200 if dev_mode["on"] else 404)

    app = web.Application()
    app.router.add_post("/reset_prefix_cache", reset)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    warned: list[str] = []
    try:
        async with httpx.AsyncClient() as client:
            ops = ServerOps(client, url, "vllm", lambda *a, **k: None, warned.append)
            res = await ops.flush_cache()
            assert res.ok and res.path == "/reset_prefix_cache" and calls == ["/reset_prefix_cache"]
            dev_mode["on"] = False
            assert (await ops.flush_cache()).skipped and (await ops.flush_cache()).skipped
            assert calls == ["/reset_prefix_cache"] * 2 and len(warned) == 1 and "VLLM_SERVER_DEV_MODE" in warned[0]
            other = ServerOps(client, url, "openai", lambda *a, **k: None, warned.append)
            assert (await other.flush_cache()).skipped and (await other.flush_cache()).skipped
            assert len(calls) == 2 and len(warned) == 2 and "not SGLang or vLLM" in warned[1]
    finally:
        await runner.cleanup()
