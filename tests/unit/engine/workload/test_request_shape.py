"""Request shaping (issue 38, the habits of `vllm bench serve` and SGLang's bench_serving):
-H/--header, --extra-body, --no-ignore-eos, --random-range-ratio and --seed, on the command
line and as preset [workload] keys, in meta.json, through worker processes and preset-from.

The end-to-end runs go against ShapeServer: a small chat and /generate server on 127.0.0.1
that logs every request's headers and body, counts a prompt's tokens as its words (plus a
template's 7), stops at "EOS" after 3 tokens unless the request asks it to ignore EOS, and
can echo a credential header's value in an error (as some servers echo keys).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from aiohttp import web

from redline.engine.client.api_formats import build_body
from redline.engine.preset import PresetError, parse_preset, parse_toml, preset_to_toml
from redline.engine.session.scrub import redact_argv
from redline.engine.workload.prompts import PromptSource, WorkloadConfig, WorkloadError
from redline.engine.workload.request_shape import (
    RequestShapeError,
    check_headers,
    length_range,
    parse_extra_body,
    parse_header,
    secret_header,
    secret_values,
)

from helpers import ROOT, ThreadedServer, main_in_process, redline_command, write_preset

OVERHEAD = 7  # the chat template's tokens ShapeServer adds to a prompt's words
EOS_AT = 3  # tokens a request that does not ignore EOS gets
SECRET = "sk-shape-SECRET-9f3c1e7a"
BEARER = "tok-shape-SECRET-4d2b8a60"


class ShapeServer(ThreadedServer):
    """Logs (method, path, headers, body) of every request; chat and /generate streams."""

    def __init__(self, *, echo_every: int = 0) -> None:
        self.log: list[tuple[str, str, dict[str, str], dict | None]] = []
        self.echo_every = echo_every
        self.generations = 0
        super().__init__()

    @web.middleware
    async def _record(self, request: web.Request, handler):
        body = None
        if request.method == "POST":
            body = json.loads(await request.read())
        self.log.append((request.method, request.path, dict(request.headers), body))
        return await handler(request)

    def posts(self) -> list[tuple[dict[str, str], dict]]:
        return [(h, b) for m, _, h, b in list(self.log) if m == "POST" and b is not None]

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "shape-model", "object": "model"}]})

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    def _echo(self, request: web.Request) -> web.Response | None:
        self.generations += 1
        if self.echo_every and self.generations % self.echo_every == 0:
            said = f"bad X-Api-Key {request.headers.get('X-Api-Key')} and {request.headers.get('Authorization')}"
            return web.json_response({"error": {"message": said, "code": 401}}, status=401)
        return None

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        echoed = self._echo(request)
        if echoed is not None:
            return echoed
        words = sum(len(str(m.get("content", "")).split()) for m in body["messages"])
        n = body["max_tokens"] if body.get("ignore_eos") else min(body["max_tokens"], EOS_AT)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(n):
            chunk = {"choices": [{"index": 0, "delta": {"content": f" w{i}"}}]}
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        usage = {"prompt_tokens": words + OVERHEAD, "completion_tokens": n}
        await resp.write(b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        sp = body["sampling_params"]
        words = len(body["text"].split())
        n = sp["max_new_tokens"] if sp.get("ignore_eos") else min(sp["max_new_tokens"], EOS_AT)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        text = ""
        for i in range(n):
            text += f" w{i}"
            chunk = {"text": text, "meta_info": {"prompt_tokens": words, "completion_tokens": i + 1}}
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return resp

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._record])
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/generate", self._generate)
        return app


def headless(preset: Path, url: str, out: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    return subprocess.run(
        [*redline_command(), "run", str(preset), "--headless", "--url", url, "--out", str(out), "--no-nvml", *args],
        cwd=ROOT, env={**env, "CI": "true"}, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=90,
    )


def rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "requests.ndjson").read_text().splitlines() if line.strip()]


# -- headers ------------------------------------------------------------------------------
def test_a_header_is_name_colon_value_its_blanks_stripped():
    assert parse_header("X-Tenant: a") == ("X-Tenant", "a")
    assert parse_header("X-Tenant:a") == ("X-Tenant", "a")
    assert parse_header("X-Empty:") == ("X-Empty", "")
    assert parse_header("Authorization: Bearer  x y ") == ("Authorization", "Bearer  x y")


@pytest.mark.parametrize("text, needle", [
    ("X-Tenant a", "no ':'"),
    (": a", "empty header name"),
    ("X Tenant: a", "has spaces"),
    ("X(Tenant): a", "characters a header name cannot have"),
    ("X-Tenant: a\nb", "line break"),
    ("X-Tenant: a\rb", "line break"),
    ("X-Tenant: \x01", "control or non-ASCII"),
    ("X-Tenant: é", "control or non-ASCII"),
    ("Content-Length: 3", "written by redline's transport"),
    ("host: x", "written by redline's transport"),
])
def test_a_malformed_header_is_one_line_naming_it(text, needle):
    with pytest.raises(RequestShapeError) as e:
        parse_header(text)
    msg = str(e.value)
    assert needle in msg and "\n" not in msg and msg.startswith("--header")


def test_a_secret_value_is_never_in_the_error():
    for text in (f"X-Api-Key: {SECRET}\nX: 1", f"Authorization: Bearer {SECRET}é", f"my-token-{SECRET}"):
        with pytest.raises(RequestShapeError) as e:
            parse_header(text)
        assert SECRET not in str(e.value), e.value


def test_credential_like_names():
    for name in ("Authorization", "proxy-authorization", "X-Api-Key", "api-key", "Cookie", "X-Auth-Token",
                 "X-Client-Secret", "X-Password", "OpenAI-Key", "x-amz-security-token"):
        assert secret_header(name), name
    for name in ("X-Tenant", "X-Request-Id", "User-Agent", "Accept", "X-Priority"):
        assert not secret_header(name), name
    pairs = (("X-Tenant", "a"), ("Authorization", f"Bearer {BEARER}"), ("X-Api-Key", SECRET))
    assert secret_values(pairs) == (f"Bearer {BEARER}", BEARER, SECRET)


def test_a_header_given_twice_is_refused():
    with pytest.raises(RequestShapeError, match="X-Tenant given twice"):
        check_headers((("x-tenant", "a"), ("X-Tenant", "b")), "--header")


def test_the_command_line_in_meta_json_masks_credential_headers():
    argv = ["redline", "-H", "X-Tenant: a", "-H", f"X-Api-Key: {SECRET}", f"--header=Authorization: Bearer {BEARER}",
            f"-HCookie: s={SECRET}", "--header", f"X-Auth-Token:{SECRET}"]
    got = redact_argv(argv)
    assert got == ["redline", "-H", "X-Tenant: a", "-H", "X-Api-Key: ***", "--header=Authorization: ***",
                   "-HCookie: ***", "--header", "X-Auth-Token: ***"]


# -- the extra body -----------------------------------------------------------------------
@pytest.mark.parametrize("text, needle", [
    ("nope", "not valid JSON"),
    ("[1, 2]", "expected a JSON object"),
    ("null", "got a null"),
    ('{"temperature": NaN}', "not valid JSON"),
    ('{"messages": []}', "'messages' is written by redline"),
    ('{"max_tokens": 9}', "'max_tokens' is written by redline"),
    ('{"max_completion_tokens": 9}', "'max_completion_tokens'"),
    ('{"stream": false}', "'stream'"),
    ('{"stream_options": {}}', "'stream_options'"),
    ('{"model": "x"}', "'model'"),
    ('{"prompt": "x"}', "'prompt'"),
    ('{"text": "x"}', "'text'"),
    ('{"input_ids": [1]}', "'input_ids'"),
    ('{"ignore_eos": false}', "--no-ignore-eos"),
    ('{"sampling_params": {"max_new_tokens": 3}}', "sampling_params.max_new_tokens"),
    ('{"sampling_params": 3}', "sampling_params must be an object"),
])
def test_a_bad_extra_body_is_one_line(text, needle):
    with pytest.raises(RequestShapeError) as e:
        parse_extra_body(text)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_bodies_carry_the_extra_body_and_ignore_eos_as_asked():
    extra = {"temperature": 0.5, "top_p": 0.9, "seed": 1}
    for api in ("chat", "completions"):
        b = build_body(api, "m", "hi", 8, extra=extra)
        assert b["ignore_eos"] is True and b["temperature"] == 0.5 and b["top_p"] == 0.9 and b["max_tokens"] == 8
        b = build_body(api, "m", "hi", 8, ignore_eos=False)
        assert "ignore_eos" not in b and b["temperature"] == 0.0
    extra = {"sampling_params": {"temperature": 0.7, "top_k": 5}, "rid": "r"}
    b = build_body("generate", "m", "hi", 8, extra=extra, ignore_eos=False)
    assert b["sampling_params"] == {"max_new_tokens": 8, "ignore_eos": False, "temperature": 0.7, "top_k": 5}
    assert b["rid"] == "r" and b["text"] == "hi" and b["stream"] is True
    sp = build_body("generate", "m", "hi", 8)["sampling_params"]
    assert sp == {"max_new_tokens": 8, "ignore_eos": True, "temperature": 0.0}


# -- random lengths -----------------------------------------------------------------------
def test_length_range_is_vllms_symmetric_range():
    assert length_range(100, 0.0) == (100, 100)
    assert length_range(100, 0.25) == (75, 125)
    assert length_range(10, 0.33) == (6, 14)  # floor(6.7), ceil(13.3)
    assert length_range(1, 0.9) == (1, 2)  # never below 1


def test_random_lengths_spread_over_the_range_from_the_seed():
    wl = WorkloadConfig(input_len=200, output_len=40, random_range_ratio=0.5, seed=3)
    first = PromptSource(wl).next()
    src = PromptSource(wl)
    ps = [src.next() for _ in range(400)]
    words = [len(p.text.split()) for p in ps]  # the uncalibrated default: a token a word
    outs = [p.max_tokens for p in ps]
    assert min(words) >= 100 and max(words) <= 300 and min(outs) >= 20 and max(outs) <= 60
    assert min(words) < 115 and max(words) > 285 and min(outs) < 23 and max(outs) > 57
    again = PromptSource(wl)
    assert [again.next() for _ in range(400)] == ps and first == ps[0]  # the seed gives the same prompts
    other = PromptSource(WorkloadConfig(input_len=200, output_len=40, random_range_ratio=0.5, seed=4))
    assert [other.next().max_tokens for _ in range(400)] != outs
    fixed = PromptSource(WorkloadConfig(input_len=200, output_len=40))
    assert {(len(p.text.split()), p.max_tokens) for p in (fixed.next() for _ in range(50))} == {(200, 40)}


def test_the_workload_checks_its_own_shaping():
    for kw in ({"random_range_ratio": 1.0}, {"random_range_ratio": -0.1}, {"extra_body": '{"model": "x"}'},
               {"extra_body": "[1]"}, {"headers": (("X A", "b"),)}, {"headers": (("X-A", "b\nc"),)}):
        with pytest.raises(WorkloadError):
            WorkloadConfig(**kw)
    wl = WorkloadConfig(headers=(("X-Tenant", "a"), ("X-Api-Key", SECRET)), extra_body='{"temperature":0.5}', seed=7)
    assert SECRET not in repr(wl)
    d = wl.describe(full=True)
    assert d["headers"] == {"X-Tenant": "a", "X-Api-Key": "***"} and d["extra_body"] == {"temperature": 0.5}
    assert d["ignore_eos"] is True and d["random_range_ratio"] == 0.0 and d["seed"] == 7
    assert "ignore_eos" not in WorkloadConfig().describe()  # steps carry only what is not the default


# -- presets ------------------------------------------------------------------------------
SHAPED = {"headers": {"X-Tenant": "a", "X-Api-Key": SECRET},
          "extra_body": {"temperature": 0.5, "sampling_params": {"top_k": 4}},
          "ignore_eos": False, "random_range_ratio": 0.25, "seed": 7}


def test_preset_workload_keys_parse_and_round_trip():
    p = parse_preset({"workload": SHAPED, "ramp": {"concurrency": [1]}}, "x.toml")
    w = p.workload
    assert w.headers == (("X-Tenant", "a"), ("X-Api-Key", SECRET))
    assert json.loads(w.extra_body) == {"temperature": 0.5, "sampling_params": {"top_k": 4}}
    assert (w.ignore_eos, w.random_range_ratio, w.seed) == (False, 0.25, 7)
    text = preset_to_toml(p)
    assert parse_toml(text, "x.toml") == p and preset_to_toml(parse_toml(text, "x.toml")) == text


@pytest.mark.parametrize("workload, needle", [
    ({"headers": ["X-Tenant: a"]}, "[workload].headers: expected a table"),
    ({"headers": {"X Tenant": "a"}}, "has spaces"),
    ({"headers": {"X-Tenant": 3}}, "expected a string value"),
    ({"headers": {"X-Tenant": "a\nb"}}, "line break"),
    ({"extra_body": "temperature=0.5"}, "[workload].extra_body: expected a table"),
    ({"extra_body": {"max_tokens": 3}}, "'max_tokens' is written by redline"),
    ({"ignore_eos": "no"}, "[workload].ignore_eos: expected true or false"),
    ({"random_range_ratio": 1.0}, "random_range_ratio 1.0: expected a number from 0 to below 1"),
    ({"random_range_ratio": True}, "expected a number from 0 to below 1"),
    ({"random_range_ratio": 0.5, "dataset": "prefix:groups=2,prefix_len=8,suffix_len=8"}, "spreads the random dataset"),
    ({"seed": -1}, "[workload].seed: expected an integer 0.."),
    ({"seed": 1.5}, "[workload].seed"),
])
def test_bad_preset_shaping_is_one_line(workload, needle):
    with pytest.raises(PresetError) as e:
        parse_preset({"workload": workload, "ramp": {"concurrency": [1]}}, "x.toml")
    msg = str(e.value)
    assert needle in msg and msg.startswith("x.toml: ") and "\n" not in msg, msg


def test_a_running_session_refuses_another_presets_shaping():
    from redline.engine.preset.workload_fit import preset_workload_change

    shaped = parse_preset({"workload": {"extra_body": {"temperature": 0.5}, "input_len": 32, "output_len": 128},
                           "ramp": {"concurrency": [1]}}, "x.toml")
    plain = WorkloadConfig().describe()
    with pytest.raises(PresetError, match=r"sets \[workload\].extra_body unlike this session"):
        preset_workload_change(shaped, plain)
    same = WorkloadConfig(extra_body='{"temperature":0.5}').describe()
    assert preset_workload_change(shaped, same) is None
    secret = parse_preset({"workload": {"headers": {"X-Api-Key": SECRET}}, "ramp": {"concurrency": [1]}}, "x.toml")
    with pytest.raises(PresetError) as e:
        preset_workload_change(secret, plain)
    assert "headers" in str(e.value) and SECRET not in str(e.value)


def test_flags_win_over_the_preset(tmp_path):
    from redline.tui.cli.arguments import build_parser
    from redline.tui.cli.launch import checked_config

    f = tmp_path / "p.toml"
    f.write_text(preset_to_toml(parse_preset({"workload": SHAPED, "ramp": {"concurrency": [1]}}, "p.toml")))
    preset = parse_toml(f.read_text(), str(f))
    argv = ["run", str(f), "--url", "http://127.0.0.1:9", "-H", "x-tenant: b", "-H", "X-Other: c", "--extra-body",
            '{"temperature": 0.9, "top_p": 0.5}', "--random-range-ratio", "0.1", "--seed", "11"]
    args = build_parser().parse_args(argv)
    args.argv = ["redline", *argv]
    wl = checked_config(args, preset).workload
    assert wl.headers == (("x-tenant", "b"), ("X-Api-Key", SECRET), ("X-Other", "c"))
    assert json.loads(wl.extra_body) == {"temperature": 0.9, "top_p": 0.5, "sampling_params": {"top_k": 4}}
    assert (wl.ignore_eos, wl.random_range_ratio, wl.seed) == (False, 0.1, 11)
    args = build_parser().parse_args(["run", str(f), "--url", "http://127.0.0.1:9"])
    args.argv = ["redline", "run", str(f)]
    cfg = checked_config(args, preset)
    assert (cfg.workload.seed, cfg.seed, cfg.workload.random_range_ratio) == (7, 7, 0.25)  # the preset's


# -- the command line: bad values ---------------------------------------------------------
@pytest.mark.parametrize("argv, needle", [
    (["-H", "X-Tenant"], "no ':'"),
    (["-H", "X Tenant: a"], "has spaces"),
    (["--header", ": a"], "empty header name"),
    (["-H", "X-Tenant: a\nb"], "line break"),
    (["-H", "X-A: 1", "-H", "x-a: 2"], "given twice"),
    (["--extra-body", "{temperature: 0.5}"], "not valid JSON"),
    (["--extra-body", "[1]"], "expected a JSON object"),
    (["--extra-body", '{"stream": false}'], "'stream' is written by redline"),
    (["--extra-body", '{"sampling_params": {"max_new_tokens": 2}}'], "sampling_params.max_new_tokens"),
    (["--random-range-ratio", "1"], "expected a number from 0 to below 1"),
    (["--random-range-ratio", "-0.5"], "expected a number from 0 to below 1"),
    (["--random-range-ratio", "x"], "expected a number from 0 to below 1"),
    (["--random-range-ratio", "0.5", "--dataset", "prefix:groups=2,prefix_len=8,suffix_len=8"], "spreads the random"),
    (["--seed", "-1"], "--seed '-1': expected a whole number"),
    (["--seed", "x"], "--seed 'x': expected a whole number"),
])
@pytest.mark.parametrize("command", [[], ["run", "quick"]], ids=["tui", "run"])
def test_bad_shaping_flags_are_one_line_exit_2(capsys, argv, needle, command):
    if command and "--dataset" in argv:
        pytest.skip("--dataset is plain redline's")
    rc = main_in_process([*command, "--url", "http://127.0.0.1:9", *argv])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and needle in err, err


def test_a_bad_credential_header_is_refused_without_its_value(capsys):
    rc = main_in_process(["--url", "http://127.0.0.1:9", "-H", f"X-Api-Key: {SECRET}\x07"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and SECRET not in err and "X-Api-Key" in err, err


# -- end to end ---------------------------------------------------------------------------
@pytest.mark.server
def test_headers_extra_body_and_no_ignore_eos_on_every_request_secrets_nowhere(tmp_path):
    """`redline run PRESET --headless` with -H, --extra-body and --no-ignore-eos: every request
    the server sees (the start-up's, the load's) carries them; outputs are the server's
    count (EOS after 3), not max_tokens; the credential header's value is in no file of the
    session and not on stdout or stderr, even when the server echoes it in errors."""
    preset = write_preset(tmp_path, "short", concurrency=[3], input_len=24, output_len=30, hold_s=2.0, exact=True)
    out = tmp_path / "s"
    with ShapeServer(echo_every=7) as srv:
        res = headless(preset, srv.url, out, "-H", "X-Tenant: a", "--header", f"X-Api-Key: {SECRET}",
                       "-H", f"Authorization: Bearer {BEARER}", "--extra-body", '{"temperature": 0.5, "top_p": 0.9}',
                       "--no-ignore-eos", "--seed", "5")
        log = list(srv.log)
    assert res.returncode == 0, res.stderr
    posts = [(h, b) for m, _, h, b in log if m == "POST"]
    assert len(posts) >= 20
    for _, path, h, _ in log:  # every request to the target: detection, health, the load
        assert h.get("X-Tenant") == "a" and h.get("X-Api-Key") == SECRET, (path, h)
        assert h.get("Authorization") == f"Bearer {BEARER}", path
    for _h, b in posts:
        assert b["temperature"] == 0.5 and b["top_p"] == 0.9 and "ignore_eos" not in b, b
    ok = [r for r in rows(out) if r["status"] == "ok" and r["phase"] != "calibration"]
    assert ok and all(r["output_tokens"] == EOS_AT for r in ok), {r["output_tokens"] for r in ok}
    failed = [r for r in rows(out) if r["status"] != "ok"]
    assert failed and any("***" in (r.get("error_text") or "") for r in failed), "the echoed secrets, masked"
    meta = json.loads((out / "meta.json").read_text())
    wl = meta["workload"]
    assert wl["headers"] == {"X-Tenant": "a", "X-Api-Key": "***", "Authorization": "***"}
    assert wl["extra_body"] == {"temperature": 0.5, "top_p": 0.9}
    assert (wl["ignore_eos"], wl["random_range_ratio"], wl["seed"]) == (False, 0.0, 5)
    assert "X-Api-Key: ***" in meta["command_line"] and "--no-ignore-eos" in meta["command_line"]
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) >= 5
    for p in files:
        data = p.read_bytes()
        assert SECRET.encode() not in data and BEARER.encode() not in data, p
    assert SECRET not in res.stdout + res.stderr and BEARER not in res.stdout + res.stderr

    # preset-from replays the shaping, the credentials left out (never recorded)
    replay = tmp_path / "replay.toml"
    assert main_in_process(["preset-from", str(out), "-o", str(replay)]) == 0
    text = replay.read_text()
    p = parse_toml(text, str(replay))
    assert p.workload.headers == (("X-Tenant", "a"),) and "X-Api-Key" in text and "Left out" in text
    assert json.loads(p.workload.extra_body) == {"temperature": 0.5, "top_p": 0.9}
    assert (p.workload.ignore_eos, p.workload.seed) == (False, 5)


@pytest.mark.server
def test_random_range_ratio_spreads_what_the_server_receives(tmp_path):
    """--random-range-ratio 0.5 on /generate: the prompt tokens the server counts and the
    max_new_tokens it is asked for spread over [L/2, 3L/2]; --extra-body's sampling_params
    merge into redline's; ignore_eos stays true by default."""
    preset = write_preset(tmp_path, "short", concurrency=[4], input_len=200, output_len=40, hold_s=2.5, exact=True)
    out = tmp_path / "s"
    with ShapeServer() as srv:
        res = headless(preset, srv.url, out, "--api", "generate", "--random-range-ratio", "0.5", "--seed", "9",
                       "--extra-body", '{"sampling_params": {"top_k": 5}, "return_logprob": false}')
        posts = srv.posts()
    assert res.returncode == 0, res.stderr
    load = [b for _, b in posts if b["sampling_params"]["max_new_tokens"] > 1]  # not the calibration's
    assert len(load) >= 30, len(load)
    for b in load:
        sp = b["sampling_params"]
        assert sp["ignore_eos"] is True and sp["top_k"] == 5 and sp["temperature"] == 0.0
        assert b["return_logprob"] is False
    outs = [b["sampling_params"]["max_new_tokens"] for b in load]
    ins = [len(b["text"].split()) for b in load]  # what the server counts (calibrated: a token a word)
    assert 20 <= min(outs) and max(outs) <= 60 and min(outs) <= 28 and max(outs) >= 52, sorted(outs)
    assert 100 <= min(ins) and max(ins) <= 300 and min(ins) <= 140 and max(ins) >= 260, sorted(ins)
    assert len(set(outs)) >= 10 and len(set(ins)) >= 20
    ok = [r for r in rows(out) if r["status"] == "ok" and r["phase"] != "calibration"]
    got_in, got_out = {r["input_tokens"] for r in ok}, {r["output_tokens"] for r in ok}  # the server's counts, recorded
    assert got_in <= set(range(100, 301)) and len(got_in) >= 20 and got_out <= set(range(20, 61)) and len(got_out) >= 10
    assert json.loads((out / "meta.json").read_text())["workload"]["random_range_ratio"] == 0.5


@pytest.mark.server
def test_worker_processes_carry_the_presets_shaping(tmp_path):
    """--workers 2: the load is sent from worker processes; the preset's [workload] headers,
    extra_body and ignore_eos reach every request they send."""
    preset = write_preset(tmp_path, "short", concurrency=[4], input_len=16, output_len=12, hold_s=2.5, exact=True,
                          extra='[workload.headers]\n"X-Tenant" = "w"\n[workload.extra_body]\ntemperature = 0.25\n')
    shaping = "ignore_eos = false\nrandom_range_ratio = 0.2\nseed = 4\n"
    text = preset.read_text().replace("[workload]\n", "[workload]\n" + shaping, 1)
    preset.write_text(text)
    out = tmp_path / "s"
    with ShapeServer() as srv:
        res = headless(preset, srv.url, out, "--workers", "2")
        posts = srv.posts()
    assert res.returncode == 0, res.stderr
    load = [(h, b) for h, b in posts if b["max_tokens"] > 1]
    assert len(load) >= 10
    for h, b in load:
        assert h.get("X-Tenant") == "w" and b["temperature"] == 0.25 and "ignore_eos" not in b, (h, b)
    assert {b["max_tokens"] for _, b in load} <= set(range(9, 16)) and len({b["max_tokens"] for _, b in load}) >= 3
    workers = {r.get("worker") for r in rows(out) if r["phase"] != "calibration"}
    assert len(workers - {None, 0}) >= 1 or len(workers) >= 2, workers
    wl = json.loads((out / "meta.json").read_text())["workload"]
    assert (wl["headers"], wl["extra_body"]) == ({"X-Tenant": "w"}, {"temperature": 0.25})
    assert (wl["ignore_eos"], wl["random_range_ratio"], wl["seed"]) == (False, 0.2, 4)
