"""The control API (`--control`, issue 23) on an engine the tests start, against the sim: every
endpoint, every refusal, the log's source, server-sent events, /metrics read back with
prometheus_client's own parser, the TUI following an API change, and a fuzzer.
(The command line, `redline ctl` and a headless process driven over HTTP: tests/e2e/test_ctl.py.)"""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from prometheus_client.parser import text_string_to_metric_families

from redline.engine.control.address import ControlAddress, ControlError, check_control, parse_control
from redline.engine.core.config import EngineConfig
from redline.engine.host import EngineThread
from redline.engine.workload.prompts import WorkloadConfig

from helpers import ROOT, examples, sim_running, wait_for

LONG = WorkloadConfig(input_len=16, output_len=2000)  # requests that stay in flight
SHORT = WorkloadConfig(input_len=16, output_len=12)  # requests that end at once
TOKEN = "s3cr3t-control-token-XYZ"


def start(url: str, out: Path, *, workload=LONG, concurrency: int = 4, token: str | None = None, **kw) -> EngineThread:
    h = EngineThread(EngineConfig(url=url, concurrency=concurrency, workload=workload, out_dir=out, calibrate=False,
                                  control=ControlAddress("127.0.0.1", 0), control_token=token, **kw))
    h.start()
    return h


def api(h: EngineThread, token: str | None = None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=h.engine.control.url, timeout=10.0, headers=headers)


@pytest.fixture
def sim(shared_sim):
    return shared_sim("healthy")


@pytest.fixture
def held(sim, tmp_path):
    h = start(sim.url, tmp_path / "session", max_concurrency=64)
    c = api(h)
    yield h, c
    c.close()
    h.stop()


def events(out: Path) -> list[dict]:
    h_lines = (out / "events.ndjson").read_text().splitlines()
    return [json.loads(x) for x in h_lines if x.strip()]


# -- the address and token rules ----------------------------------------------------------------
def test_parse_control():
    assert parse_control("8090") == ControlAddress("127.0.0.1", 8090)
    assert parse_control("0.0.0.0:8090") == ControlAddress("0.0.0.0", 8090)
    assert parse_control("[::1]:8090") == ControlAddress("::1", 8090)
    assert parse_control("[::1]:8090").url == "http://[::1]:8090"
    for bad in ("", "x", "1:2:3", "host:", ":80", "70000", "-1", "[::1]8090", "a b:80"):
        with pytest.raises(ControlError):
            parse_control(bad)


def test_non_loopback_needs_a_token():
    with pytest.raises(ControlError, match="not loopback"):
        check_control("0.0.0.0:0", None, {})
    assert check_control("0.0.0.0:0", "RL_TOK", {"RL_TOK": TOKEN}) == (ControlAddress("0.0.0.0", 0), TOKEN)
    assert check_control("127.0.0.1:0", None, {}) == (ControlAddress("127.0.0.1", 0), None)
    with pytest.raises(ControlError, match="not set"):
        check_control("0.0.0.0:0", "RL_TOK", {})
    with pytest.raises(ControlError) as e:  # the token pasted in place of the name: never echoed
        check_control("127.0.0.1:0", TOKEN, {})
    assert TOKEN not in str(e.value)
    with pytest.raises(ControlError, match="give --control"):
        check_control(None, "RL_TOK", {"RL_TOK": TOKEN})


# -- every endpoint ------------------------------------------------------------------------------
def test_status_fields(held, tmp_path):
    h, c = held
    assert wait_for(lambda: c.get("/v1/status").json()["in_flight"] == 4, 5)
    s = c.get("/v1/status").json()
    for k in ("state", "mode", "concurrency", "rate", "in_flight", "output_tok_s", "ttft_p50_ms", "itl_p99_ms", "e2e_p90_ms",
              "server_running", "step", "preset", "session_dir", "targets", "workers", "timeline_row"):
        assert k in s, k
    assert s["state"] == "running" and s["mode"] == "concurrency" and s["concurrency"] == 4
    assert s["session_dir"] == str(tmp_path / "session")
    assert s["targets"][0]["url"] == h.engine.target.url
    assert s["step"]["concurrency"] == 4


def test_commands_change_the_load_and_refusals_leave_it(held, sim):
    h, c = held
    url = sim.url
    assert wait_for(lambda: sim_running(url) == 4, 5)
    r = c.post("/v1/concurrency", json={"value": 16})
    assert r.status_code == 200 and r.json() == {"ok": True, "line": "C=16", "concurrency": 16}
    t0 = time.monotonic()
    assert wait_for(lambda: sim_running(url) == 16, 2.0), "16 at the server within 2 s"
    assert c.get("/v1/status").json()["concurrency"] == 16
    # refusals: a 4xx with one line, and the load holds
    for body, status in (({"value": 0}, 400), ({"value": -3}, 400), ({"value": "many"}, 400), ({"value": 1.5}, 400),
                         ({"value": True}, 400), ({}, 400), ({"value": 65}, 400), ({"value": 16, "raise_max": "yes"}, 400)):
        r = c.post("/v1/concurrency", json=body)
        assert r.status_code == status, (body, r.text)
        err = r.json()["error"]
        assert r.json()["ok"] is False and "\n" not in err and err
    assert c.post("/v1/concurrency", content=b'{"value": 16').status_code == 400
    assert "bad JSON" in c.post("/v1/concurrency", content=b'{"value": 16').json()["error"]
    assert c.post("/v1/concurrency", content=b"[16]").status_code == 400
    assert c.post("/v1/concurrency", content=b"\xff\xfe").status_code == 400
    assert c.post("/v1/rate", json={"value": 0}).status_code == 400
    assert c.post("/v1/rate", json={"value": "NaN"}).status_code == 400
    assert c.get("/v1/nope").status_code == 404 and c.post("/v1/nope").status_code == 404
    assert c.get("/v1/concurrency").status_code == 405
    assert c.post("/v1/concurrency", content=b"{" + b" " * 70_000 + b"}").status_code == 413
    assert c.post("/v1/restore").status_code == 409  # not in the probe
    assert c.post("/v1/slo", json={"spec": "ttft=soon"}).status_code == 400
    assert c.post("/v1/workload", json={"output_len": 0}).status_code == 400
    assert c.post("/v1/workload", json={"colour": "red"}).status_code == 400
    assert c.post("/v1/workload", json={"dataset": "jsonl:/nonexistent/file.jsonl"}).status_code == 400
    assert c.post("/v1/preset", json={"name": "no-such-preset"}).status_code == 400
    assert c.post("/v1/preset", json={"toml": "[ramp\n"}).status_code == 400
    assert c.post("/v1/preset", json={}).status_code == 400
    assert c.post("/v1/search", json={"start": 0}).status_code == 400
    assert c.post("/v1/lane", json={"on": "yes"}).status_code == 400
    assert c.post("/v1/export", json={"format": "xlsx"}).status_code == 400
    assert h.engine.controller.concurrency == 16 and sim_running(url) == 16 and not h.engine.closed
    assert time.monotonic() - t0 < 30
    # the C=1 probe: at most 1 at the server within 1.5 s, then back
    r = c.post("/v1/probe")
    t1 = time.monotonic()
    assert r.status_code == 200 and r.json()["cancelled"] >= 15
    assert wait_for(lambda: sim_running(url) <= 1, 1.5 - (time.monotonic() - t1))
    s = c.get("/v1/status").json()
    assert s["probing"] and s["state"] == "probe" and s["previous_concurrency"] == 16
    assert c.post("/v1/restore").json()["line"] == "back to C=16"
    assert wait_for(lambda: sim_running(url) == 16, 3)
    # pause / resume, each idempotent
    assert c.post("/v1/pause").json() == {"ok": True, "line": "paused", "changed": True}
    assert c.post("/v1/pause").json()["changed"] is False
    assert c.get("/v1/status").json()["state"] == "paused"
    assert c.post("/v1/resume").json()["line"] == "resumed at C=16"
    assert c.post("/v1/resume").json()["changed"] is False
    # above --max-concurrency only when asked, as the TUI's confirmation
    assert c.post("/v1/concurrency", json={"value": 70, "raise_max": True}).json()["concurrency"] == 70
    assert h.engine.controller.max_concurrency == 70
    assert c.post("/v1/concurrency", json={"value": 8}).status_code == 200
    # rate, SLO, workload, lane, export
    r = c.post("/v1/rate", json={"value": 2.5}).json()
    assert r["rate"] == 2.5 and c.get("/v1/status").json()["mode"] == "rate"
    assert c.post("/v1/slo", json={"spec": "ttft=2s,itl=100ms"}).json()["slo"].startswith("TTFT≤2 s")
    assert h.engine.config.slo is not None
    assert c.post("/v1/slo", json={"spec": "off"}).json()["slo"] is None
    assert c.post("/v1/workload", json={"output_len": 1500}).json()["workload"]["output_len"] == 1500
    assert c.post("/v1/workload", json={"spec": "input_len=24"}).json()["workload"]["input_len"] == 24
    assert c.post("/v1/lane", json={"on": True}).json()["on"] is True
    assert c.post("/v1/lane", json={"on": True}).json()["line"] == "probe lane already on"
    assert c.post("/v1/lane").json()["on"] is False
    paths = c.post("/v1/export", json={"format": "csv"}).json()["paths"]
    names = {Path(p).name for p in paths}  # steps.csv once a step was recorded (summary.json)
    assert names == {"requests.csv", "timeline.csv", "events.csv", "steps.csv"} or names == {"requests.csv", "timeline.csv", "events.csv"}
    assert ("steps.csv" in names) == (Path(h.engine.config.out_dir) / "summary.json").exists()


def test_preset_and_search_run_in_the_engine(held):
    h, c = held
    toml = ('name = "api-ramp"\n[workload]\ninput_len = 16\noutput_len = 2000\n'
            '[ramp]\nconcurrency = [2, 3]\nwarmup_s = 0\nhold_s = 60\nmin_requests = 1\n')
    r = c.post("/v1/preset", json={"toml": toml})
    assert r.status_code == 200 and r.json()["line"] == "preset api-ramp started (2 steps)", r.text
    assert wait_for(lambda: c.get("/v1/status").json()["preset"]["running"], 3)
    s = c.get("/v1/status").json()
    assert s["state"] == "preset" and "api-ramp step 1/2" in s["preset"]["progress"]
    assert c.post("/v1/preset", json={"toml": toml.replace("[2, 3]", "[2, 300]")}).status_code == 400  # above max
    # a concurrency command takes the wheel, as a key does
    assert c.post("/v1/concurrency", json={"value": 5}).status_code == 200
    assert wait_for(lambda: not h.snapshot.preset_running, 3)
    r = c.post("/v1/search", json={"start": 2, "max": 8})
    assert r.status_code == 200 and r.json()["line"] == "knee search from C=2 up to 8"
    assert wait_for(lambda: "knee search" in c.get("/v1/status").json()["preset"]["progress"], 3)
    assert c.post("/v1/probe").status_code == 200
    assert wait_for(lambda: not h.snapshot.preset_running, 3)


def test_ctl_preset_refuses_what_the_p_key_refuses(held):
    """`redline ctl preset X` and the TUI's `p` ask one function (engine/preset/workload_fit.py):
    a preset whose request shaping differs from the running session's, or that replays a trace,
    or that has other turns, is refused with the `p` key's own line, and nothing starts."""
    from redline.engine.preset import PresetError, parse_toml
    from redline.engine.preset.workload_fit import preset_workload_change

    h, c = held
    trace = ROOT / "presets" / "traces" / "example.jsonl"
    ramp = "[ramp]\nconcurrency = [2]\nhold_s = 60\n"
    for body in ("[workload]\nignore_eos = false\n", "[workload]\nrandom_range_ratio = 0.5\n",
                 '[workload]\nextra_body = {temperature = 0.5}\n', '[workload]\nheaders = {"X-Tenant" = "a"}\n',
                 "[workload]\nturns = 2\n"):
        toml = f'name = "shaped"\n{body}{ramp}'
        with pytest.raises(PresetError) as p_key:  # what `p` says, against the session's workload
            preset_workload_change(parse_toml(toml, "preset"), h.engine.config.workload.describe())
        r = c.post("/v1/preset", json={"toml": toml})
        assert r.status_code == 409 and r.json()["error"] == str(p_key.value), (body, r.text)
        assert "nothing started" in r.json()["error"]
    toml = f'name = "replay"\n[workload]\ntrace = "{trace}"\n[ramp]\nspeed = [1.0]\n'
    r = c.post("/v1/preset", json={"toml": toml})
    assert r.status_code == 409 and "replays the trace" in r.json()["error"], r.text
    assert not h.snapshot.preset_running and c.get("/v1/status").json()["state"] == "running"
    # the session's own shaping is no difference: it starts
    r = c.post("/v1/preset", json={"toml": f'name = "plain"\n[workload]\nignore_eos = true\ninput_len = 16\n{ramp}'})
    assert r.status_code == 200, r.text
    assert wait_for(lambda: c.get("/v1/status").json()["preset"]["running"], 3)


def test_each_command_is_logged_with_its_source(held, tmp_path):
    h, c = held
    c.post("/v1/concurrency", json={"value": 6})
    c.post("/v1/concurrency", json={"value": 0})
    c.post("/v1/probe")
    assert wait_for(lambda: any(line.kind == "probe" for line in h.snapshot.log), 3)
    h.send(__import__("redline.engine.core.commands", fromlist=["Flush"]).Flush()).result(5)
    rows = events(tmp_path / "session")
    api = [r for r in rows if r["kind"] == "api"]
    assert [r["text"].split(": ", 1)[1] for r in api][:3] == ["concurrency value=6", "concurrency value=0", "concurrency refused: concurrency 0: expected a whole number from 1 to 64"]
    # the way past --max-concurrency is named only for a value above it (issue 38)
    assert c.post("/v1/concurrency", json={"value": 65}).json()["error"].endswith('(above --max-concurrency: add "raise_max": true)')
    assert "raise_max" not in c.post("/v1/concurrency", json={"value": -3}).json()["error"]
    assert all(r["source"] == "api" and r["client"].startswith("127.0.0.1:") for r in api)
    key = next(r for r in rows if r["kind"] == "key" and r["text"] == "C=6")
    assert key["source"] == "api" and key["client"] == api[0]["client"]
    probe = next(r for r in rows if r["kind"] == "probe")
    assert probe["source"] == "api"
    screen = [line.text for line in h.snapshot.log]
    assert any(t.startswith("api 127.0.0.1:") and t.endswith(": probe") for t in screen)


def test_server_sent_events(held):
    h, c = held
    got: list[tuple[str, dict]] = []
    with httpx.Client(base_url=h.engine.control.url, timeout=10.0) as s, s.stream("GET", "/v1/events") as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        c.post("/v1/concurrency", json={"value": 7})
        event = None
        deadline = time.monotonic() + 5
        for line in r.iter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                got.append((event, json.loads(line[6:])))
                if any(e == "log" and d["text"] == "C=7" for e, d in got) or time.monotonic() > deadline:
                    break
    kinds = [(e, d["kind"]) for e, d in got if e == "log"]
    assert ("log", "api") in kinds and ("log", "key") in kinds


# -- /metrics --------------------------------------------------------------------------------------
def families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_metrics_parse_back_and_match_the_request_rows(shared_sim, tmp_path):
    """/metrics parses back and its counts equal the request rows. Counts, not times: the sim at
    a quarter time scale (its own, shared by the module's tests that ask for it) reaches the
    60 and 90 completions four times sooner."""
    sim = shared_sim("healthy", "--set", "time_scale=0.25")
    out = tmp_path / "session"
    h = start(sim.url, out, workload=SHORT, concurrency=6)
    try:
        with api(h) as c:
            assert wait_for(lambda: h.snapshot.completed >= 60, 30)
            c.post("/v1/probe")  # some cancelled too
            c.post("/v1/restore")
            assert wait_for(lambda: h.snapshot.completed >= 90, 30)
            c.post("/v1/pause")
            assert wait_for(lambda: h.engine.in_flight == 0, 10)
            h.send(__import__("redline.engine.core.commands", fromlist=["Flush"]).Flush()).result(5)
            r = c.get("/metrics")
            assert r.headers["content-type"].startswith("text/plain")
            fam = families(r.text)
    finally:
        h.stop()
    rows = [json.loads(x) for x in (out / "requests.ndjson").read_text().splitlines() if x.strip()]
    load = [x for x in rows if x["phase"] not in ("calibration", "lane")]
    ok = [x for x in load if x["status"] == "ok"]

    def sample(name: str, suffix: str, **labels) -> float:
        for s in fam[name].samples:
            if s.name == name + suffix and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
        raise KeyError((name, suffix, labels))

    assert sample("redline_ttft_seconds", "_count") == len(ok) > 0
    assert sample("redline_e2e_seconds", "_count") == len(ok)
    assert sample("redline_ttft_seconds", "_bucket", le="+Inf") == len(ok)
    assert sample("redline_ttft_seconds", "_sum") == pytest.approx(sum(x["ttft_ms"] for x in ok) / 1000, rel=1e-3)
    # cumulative buckets from 1 ms to 10 min
    les = [float(s.labels["le"]) for s in fam["redline_ttft_seconds"].samples if s.name.endswith("_bucket")]
    assert les[0] == 0.001 and les[-2] == 600.0 and les == sorted(les)
    within_1s = sum(1 for x in ok if x["ttft_ms"] <= 1000.0)
    assert sample("redline_ttft_seconds", "_bucket", le="1.0") == within_1s
    for outcome in ("ok", "failed", "cancelled"):
        assert sample("redline_requests", "_total", outcome=outcome) == sum(1 for x in load if x["status"] == outcome)
    assert sample("redline_requests", "_total", outcome="cancelled") > 0
    assert sample("redline_output_tokens", "_total") == sum(x["output_tokens"] for x in load if x["status"] != "failed")
    assert sample("redline_failed_output_tokens", "_total") == sum(x["output_tokens"] for x in load if x["status"] == "failed")
    assert sample("redline_itl_seconds", "_count") > 0
    assert sample("redline_concurrency", "") == 6 and sample("redline_in_flight", "") == 0
    assert sample("redline_paused", "") == 1
    assert fam["redline_info"].samples[0].labels["url"] == sim.url


def test_a_failed_requests_tokens_are_counted_apart_from_output_tokens():
    """/metrics' output-token counter holds no failed request's tokens (they are no throughput,
    docs/numbers.md): they have a counter of their own."""
    from types import SimpleNamespace

    from redline.engine.control.prometheus import PromMetrics
    from redline.engine.measure.records import FAILED, OK, RequestRecord

    cfg = SimpleNamespace(more_urls=(), workers=1, ray=None)
    m = PromMetrics(SimpleNamespace(config=cfg, snapshot=None))
    for rid, status, tokens in ((1, OK, 100), (2, FAILED, 40), (3, OK, 7)):
        rec = RequestRecord(rid=rid, phase="live", step=0, concurrency=1, t_send=0.0)
        rec.status, rec.output_tokens = status, tokens
        if status == FAILED:
            rec.error_kind = "disconnect"
        m.on_end(rec)
    f = m.freeze()
    assert f.out_tokens[()] == 107 and f.failed_out_tokens[()] == 40


def test_metrics_with_several_targets_are_labelled(sim_factory, tmp_path):
    fast = ("--set", "time_scale=0.25")  # labels and counts, not times: 20 completions sooner
    a, b = sim_factory(extra_args=fast), sim_factory(extra_args=fast)
    h = start(a.url, tmp_path / "s", workload=SHORT, concurrency=4, more_urls=(b.url,))
    try:
        assert wait_for(lambda: h.snapshot.completed >= 20, 30)
        with api(h) as c:
            fam = families(c.get("/metrics").text)
    finally:
        h.stop()
    targets = {s.labels["target"] for s in fam["redline_requests"].samples}
    assert targets == {a.url, b.url}
    assert {s.labels["target"] for s in fam["redline_ttft_seconds"].samples} == {a.url, b.url}
    assert {s.labels["target"] for s in fam["redline_target_output_tokens_per_second"].samples} == {a.url, b.url}


# -- the token ----------------------------------------------------------------------------------------
def test_token_required_and_never_written(sim, tmp_path):
    out = tmp_path / "session"
    h = start(sim.url, out, token=TOKEN)
    try:
        with api(h) as bare, api(h, TOKEN) as good, api(h, TOKEN + "x") as bad:
            for path in ("/v1/status", "/metrics", "/v1/events"):
                assert bare.get(path).status_code == 401
                assert bad.get(path).status_code == 401
            r = bare.post("/v1/concurrency", json={"value": 9})
            assert r.status_code == 401 and r.headers["WWW-Authenticate"].startswith("Bearer")
            assert h.engine.controller.concurrency == 4
            assert good.get("/v1/status").status_code == 200
            assert good.get("/metrics").status_code == 200
            assert good.post("/v1/concurrency", json={"value": 9}).json()["concurrency"] == 9
            good.post("/v1/workload", json={"dataset": f"jsonl:/nonexistent/{TOKEN}.jsonl"})  # a body that carries it
            good.post("/v1/slo", json={"spec": TOKEN})
            good.post("/v1/stop")
        assert wait_for(lambda: h.engine.closed and h.snapshot.done, 10)
    finally:
        h.stop()
    files = [p for p in out.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"meta.json", "events.ndjson", "requests.ndjson", "summary.json"}
    for p in files:
        assert TOKEN.encode() not in p.read_bytes(), p
    assert not any(TOKEN in line.text for line in h.snapshot.log)
    assert TOKEN not in repr(h.engine.config)


def test_stop_ends_the_session(held, tmp_path):
    import threading

    h, c = held
    seen: list[str] = []
    opened = threading.Event()

    def follow() -> None:  # an event stream open at the stop ends with `end`
        with httpx.Client(base_url=h.engine.control.url, timeout=10.0) as s, s.stream("GET", "/v1/events") as r:
            opened.set()
            seen.extend(line[7:] for line in r.iter_lines() if line.startswith("event: "))

    t = threading.Thread(target=follow, daemon=True)
    t.start()
    # the stream is open before the stop (a fixed 0.3 s was not enough on a loaded CI machine:
    # the follower connected after the server had gone, and saw nothing)
    assert opened.wait(10)
    r = c.post("/v1/stop")
    assert r.status_code == 200 and r.json()["session_dir"] == str(tmp_path / "session")
    assert wait_for(lambda: h.snapshot.done, 10)
    meta = json.loads((tmp_path / "session" / "meta.json").read_text())
    assert meta["end_reason"].startswith("api stop from 127.0.0.1:")
    assert (tmp_path / "session" / "summary.json").is_file()
    with pytest.raises(httpx.HTTPError):
        c.get("/v1/status")
    t.join(5)
    assert not t.is_alive() and seen and seen[-1] == "end", seen


# -- fuzz: nothing the API receives stops the load ----------------------------------------------------
PATHS = ["/v1/status", "/v1/events?since=x", "/metrics", "/v1/concurrency", "/v1/rate", "/v1/restore", "/v1/resume",
         "/v1/preset", "/v1/search", "/v1/slo", "/v1/workload", "/v1/lane", "/v1/export", "/v1/", "/", "/v1/status/x"]
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.sampled_from(["value", "name", "toml", "spec", "on", "start", "max", "format", "output_len", "input_len", "dataset", "prefix_ratio", "raise_max", "x"]), kids, max_size=4),
    max_leaves=12,
)
BODY = JSON.map(lambda v: json.dumps(v, allow_nan=True).encode()) | st.binary(max_size=200)


@pytest.fixture(scope="module")
def fuzz_engine(tmp_path_factory, shared_sim):
    sim = shared_sim("healthy")
    h = start(sim.url, tmp_path_factory.mktemp("fuzz") / "session", concurrency=3, max_concurrency=6,
              workload=WorkloadConfig(input_len=16, output_len=400))
    c = api(h)
    yield h, c, sim
    c.close()
    h.stop()


@settings(max_examples=examples(400), deadline=None, suppress_health_check=list(HealthCheck))
@given(method=st.sampled_from(["GET", "POST", "PUT", "DELETE"]), path=st.sampled_from(PATHS) | st.text(max_size=30).map(lambda s: "/v1/" + s),
       body=BODY, ctype=st.sampled_from(["application/json", "text/plain", "", "multipart/form-data; boundary=x"]))
def test_fuzz_never_crashes_nor_stops_the_load(fuzz_engine, method, path, body, ctype):
    h, c, sim = fuzz_engine
    if path.split("?")[0].rstrip("/") == "/v1/events":
        return  # a stream: its own test
    try:
        r = c.request(method, path, content=body, headers={"Content-Type": ctype} if ctype else {})
    except httpx.InvalidURL:
        return
    assert r.status_code < 500, (method, path, body, r.text)
    if r.status_code >= 400:
        assert r.json()["ok"] is False
    e = h.engine
    assert not e.closed and not e.controller.stopped and e.controller.concurrency >= 1
    if e.controller.paused or e.controller.probing:  # a valid restore/resume cannot pause; keep the load on
        c.post("/v1/resume")


def test_after_the_fuzz_the_load_goes_on(fuzz_engine):
    h, c, sim = fuzz_engine
    assert c.get("/v1/status").json()["state"] in ("running", "preset")
    assert c.post("/v1/concurrency", json={"value": 3}).status_code == 200
    assert wait_for(lambda: h.engine.in_flight == 3, 5)


# -- the TUI follows an API change within one frame ----------------------------------------------------
@pytest.mark.timing  # one frame: 0.25 s
async def test_tui_shows_an_api_change_within_one_frame(sim, tmp_path):
    from redline.tui.app import REFRESH_S, RedlineApp
    from redline.tui.widgets.header import StatusHeader

    h = start(sim.url, tmp_path / "session", workload=LONG, concurrency=4)
    try:
        app = RedlineApp(h, step=8)
        async with app.run_test(size=(80, 24)) as pilot:
            def header() -> str:
                return app.query_one(StatusHeader).render().plain

            for _ in range(40):
                if "C=4" in header():
                    break
                await pilot.pause(0.05)
            async with httpx.AsyncClient(base_url=h.engine.control.url) as c:
                r = await c.post("/v1/concurrency", json={"value": 24})
                assert r.status_code == 200
                t0 = time.monotonic()
                while "C=24" not in header() and time.monotonic() - t0 < 4 * REFRESH_S:
                    await pilot.pause(0.02)
                assert "C=24" in header(), header()
                # the next frame; on a loaded 2-core machine the frame after it (CI's timing
                # lane saw 0.43 and 0.47 s against one REFRESH_S of 0.25 s)
                assert time.monotonic() - t0 <= 2 * REFRESH_S
                assert any("api 127.0.0.1" in line.text for line in h.snapshot.log)
                # POST /v1/stop ends the app as q does
                await c.post("/v1/stop")
            for _ in range(100):
                if app._quitting:
                    break
                await pilot.pause(0.05)
            assert app._quitting
    finally:
        h.stop()


def test_grafana_dashboard_draws_names_redline_exposes():
    import re

    root = ROOT
    dash = json.loads((root / "docs" / "grafana-redline.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    used = {re.sub(r"_(bucket|total)$", "", n) for e in exprs for n in re.findall(r"(?<![$\w])redline_[a-z0-9_]+", e)}
    exposed = set(re.findall(r'"(redline_[a-z0-9_]+)"', (root / "engine" / "control" / "prometheus.py").read_text()))
    assert used and used <= exposed, used - exposed
    assert any("sglang:" in e for e in exprs) and any("vllm:" in e for e in exprs)


def test_metrics_with_worker_processes_are_labelled(sim, tmp_path):
    h = start(sim.url, tmp_path / "s", workload=SHORT, concurrency=4, workers=2)
    try:
        assert wait_for(lambda: h.snapshot.completed >= 20, 30)
        with api(h) as c:
            fam = families(c.get("/metrics").text)
    finally:
        h.stop()
    assert {s.labels["worker"] for s in fam["redline_requests"].samples} == {"0", "1"}
    assert {s.labels["worker"] for s in fam["redline_worker_share"].samples} == {"0", "1"}
    itl = [s.value for s in fam["redline_itl_seconds"].samples if s.name == "redline_itl_seconds_count"]
    assert itl and itl[0] > 0  # the workers' ITLs, from their reports


def test_stop_through_the_engine_process_ends_it(sim, tmp_path):
    """Under the TUI the engine is a child process: POST /v1/stop ends it as q does."""
    from redline.engine.host import EngineProcess

    port = __import__("helpers").free_port()
    h = EngineProcess(EngineConfig(url=sim.url, concurrency=2, workload=LONG, out_dir=tmp_path / "s", calibrate=False,
                                   control=ControlAddress("127.0.0.1", port)))
    h.start()
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10.0) as c:
            assert c.post("/v1/concurrency", json={"value": 3}).status_code == 200
            assert wait_for(lambda: h.snapshot.target_c == 3, 3)
            assert c.post("/v1/stop").status_code == 200
        assert wait_for(lambda: h.snapshot.done, 10)
        h._proc.join(10)
        assert h._proc.exitcode == 0
    finally:
        h.stop()
    meta = json.loads((tmp_path / "s" / "meta.json").read_text())
    assert meta["end_reason"].startswith("api stop from")


def test_two_threads_stopping_the_host_at_once_both_return_and_the_log_is_complete(sim, tmp_path):
    """The TUI's quit stops its host on a thread of its own while the code that made the host
    stops it too (CI once saw the second stop wait 10 s on a coroutine the stopping loop never
    ran, then fail on the closed loop): both return at once, without an error, and the session
    ends once."""
    import threading

    h = start(sim.url, tmp_path / "session")
    errors: list[BaseException] = []

    def stop() -> None:
        try:
            h.stop("quit")
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            errors.append(exc)

    threads = [threading.Thread(target=stop) for _ in range(3)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors and not any(t.is_alive() for t in threads)
    assert time.monotonic() - t0 < 8.0  # an engine stop, not a 10 s time-out
    meta = json.loads((tmp_path / "session" / "meta.json").read_text())
    assert meta["end_reason"] == "quit" and meta["ended_at"]
    h.stop("again")  # and once more afterwards: nothing
    assert json.loads((tmp_path / "session" / "meta.json").read_text())["end_reason"] == "quit"
