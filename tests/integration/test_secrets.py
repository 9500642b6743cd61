"""Secrets and TLS: the API key comes only from the environment, is sent as a bearer token, and
is never shown, logged or exported, even when the server echoes it back; TLS certificates are
verified unless --insecure, which is warned about.

Against MiniServer (tests/helpers/servers.py): a small OpenAI-compatible server on 127.0.0.1
that records the Authorization header of every request it gets and can echo the key in its
errors, as some servers do. The tests/e2e/test_session_signals.py check (the key against the sim,
in files) is not repeated here.

Exit status for a certificate that fails verification: 3, as for an unreachable target. The
URL is well formed (so not 2); the target cannot be reached securely, which is only found out
by connecting. The message is one line naming the URL, the reason and `--insecure`.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import ssl
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import polars as pl
import pytest

from redline.engine.client.http import TRANSPORTS, make_client
from redline.engine.client.target import TargetUnreachable, detect, validate_url
from redline.engine.core.config import EngineConfig
from redline.engine.core.engine import Engine
from redline.engine.report.export import export_session
from redline.engine.workload.prompts import WorkloadConfig

from helpers import ROOT, MiniServer, main_in_process, redline_command, until, write_preset

KEY = "sk-redline-secret-K1-6f0c2a9e"
OTHER_KEY = "sk-redline-secret-K2-b51d7e03"


def short_preset(tmp_path: Path) -> Path:
    return write_preset(tmp_path, "short", concurrency=[3], input_len=8, output_len=4, hold_s=1.5, exact=True)


def clean_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "MY_KEY")}
    return {**env, "CI": "true", **extra}


def headless(preset: Path, url: str, out: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*redline_command(), "run", str(preset), "--headless", "--url", url, "--out", str(out), "--no-nvml", *args],
        cwd=ROOT, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
    )


def every_string(df: pl.DataFrame) -> list[str]:
    out: list[str] = []
    for name in df.columns:
        out.append(name)
        if df[name].dtype == pl.String:
            out.extend(v for v in df[name].to_list() if v is not None)
    return out


# -- the key: where it comes from, where it goes -------------------------------------------
@pytest.mark.server
def test_key_only_from_the_environment_sent_as_bearer_never_shown_or_logged(tmp_path):
    """Three real runs: OPENAI_API_KEY; --api-key-env naming another variable; no key at all.
    The server echoes the key in 401 bodies and in-stream errors: it still appears nowhere."""
    preset = short_preset(tmp_path)
    with MiniServer(echo_key_every=3) as a, MiniServer(echo_key_every=3) as b, MiniServer() as c:
        runs = {
            "openai": (a, clean_env(OPENAI_API_KEY=KEY, MY_KEY=OTHER_KEY), ()),
            "named": (b, clean_env(OPENAI_API_KEY=OTHER_KEY, MY_KEY=KEY), ("--api-key-env", "MY_KEY")),
            "none": (c, clean_env(), ()),
        }
        with ThreadPoolExecutor(3) as pool:
            res = dict(zip(runs, pool.map(lambda k: headless(preset, runs[k][0].url, tmp_path / k, runs[k][1], *runs[k][2]), runs), strict=False))
        seen = {k: runs[k][0].auth_seen() for k in runs}
        echoed = a.generations // 3
    for name, r in res.items():
        assert r.returncode == 0, (name, r.stderr)
        assert "Traceback" not in r.stderr
    # sent: as a bearer token, on detection and on every generation request; the key of the
    # variable --api-key-env names, and only that one
    assert seen["openai"] and set(seen["openai"]) == {f"Bearer {KEY}"}
    assert seen["named"] and set(seen["named"]) == {f"Bearer {KEY}"}
    assert seen["none"] and set(seen["none"]) == {None}
    assert echoed >= 1  # the server did put the key in some error texts
    # never shown, never logged, never exported (parquet read back value by value too)
    for name in ("openai", "named"):
        r = res[name]
        assert KEY not in r.stdout + r.stderr and OTHER_KEY not in r.stdout + r.stderr
        out = tmp_path / name
        for fmt in ("parquet", "csv", "ndjson"):
            export_session(out, fmt, out / "export" / fmt)
        files = [p for p in out.rglob("*") if p.is_file()]
        assert len(files) >= 14
        for p in files:
            data = p.read_bytes()
            assert KEY.encode() not in data and OTHER_KEY.encode() not in data, p
        for p in (out / "export" / "parquet").glob("*.parquet"):
            assert not any(KEY in s for s in every_string(pl.read_parquet(p))), p
        reqs = pl.read_parquet(out / "export" / "parquet" / "requests.parquet")
        masked = [t for t in reqs["error_text"].to_list() if t and "***" in t]
        assert masked, "the echoed key should be there, masked"


@pytest.mark.server
async def test_echoed_key_is_not_on_screen(tmp_path):
    """What the TUI draws (the engine's snapshot and its log) never holds the key, even when
    the server puts it in an error message."""
    with MiniServer(echo_key_every=2) as srv:
        e = Engine(EngineConfig(url=srv.url, concurrency=4, workload=WorkloadConfig(input_len=8, output_len=4),
                                api_key=KEY, telemetry=False, calibrate=False, out_dir=tmp_path / "s"))
        await e.start()
        try:
            assert await until(lambda: e.metrics.failed >= 6, 10)
            await asyncio.sleep(1.2)  # a tick: the error lines reach the log
            snap = e.snapshot
        finally:
            await e.stop()
    assert KEY not in repr(e.config) and KEY not in repr(snap)
    errors = [line.text for line in snap.log if line.kind == "error"]
    assert errors and any("***" in t for t in errors), errors
    assert set(srv.auth_seen("/v1/")) == {f"Bearer {KEY}"}


@pytest.mark.server
async def test_key_is_not_sent_to_other_origins():
    with MiniServer() as target, MiniServer() as dcgm:
        e = Engine(EngineConfig(url=target.url, concurrency=1, workload=WorkloadConfig(input_len=8, output_len=4),
                                api_key=KEY, calibrate=False, use_nvml=False, gpu_metrics_url=dcgm.url + "/metrics"))
        await e.start()
        try:
            assert await until(lambda: len(dcgm.seen) >= 2, 6)
        finally:
            await e.stop()
    assert set(target.auth_seen("/v1/")) == {f"Bearer {KEY}"}
    assert set(dcgm.auth_seen()) == {None}, "the API key went to the GPU-metrics host"


def test_key_pasted_into_api_key_env_is_not_echoed(capsys):
    rc = main_in_process(["--url", "http://127.0.0.1:9", "--api-key-env", KEY])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.splitlines()) == 1
    assert KEY not in err, err


@pytest.mark.server
@pytest.mark.parametrize(
    "bad_key",
    [
        pytest.param(KEY + "\r\nX-Injected: 1", id="crlf-injection"),
        pytest.param(KEY + "\u00e9", id="non-ascii"),
    ],
)
def test_unsendable_key_is_one_line_not_a_traceback(capsys, monkeypatch, tmp_path, bad_key):
    with MiniServer() as srv:
        monkeypatch.setenv("OPENAI_API_KEY", bad_key)
        monkeypatch.setenv("CI", "true")
        try:
            rc = main_in_process(["run", str(short_preset(tmp_path)), "--headless", "--url", srv.url,
                                  "--out", str(tmp_path / "s")])
        except Exception as exc:  # noqa: BLE001 - what an operator would see as a traceback
            pytest.fail(f"traceback: {exc.__class__.__name__}")
        err = capsys.readouterr().err
        injected, sent = srv.injected, srv.seen
    assert injected == 0, "the key's CR LF injected a header"
    assert sent == [], "a request went out with that key"
    assert rc == 2, err
    assert len(err.splitlines()) == 1 and KEY not in err and "OPENAI_API_KEY" in err


@pytest.mark.server
async def test_lean_transport_refuses_header_injection():
    with MiniServer() as srv:
        client = make_client(transport="lean", api_key="sk-x\r\nX-Injected: 1")
        try:
            with pytest.raises(httpx.LocalProtocolError):
                await client.get(srv.url + "/v1/models")
        finally:
            await client.aclose()
        assert srv.injected == 0


# -- TLS ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cert(tmp_path_factory) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    d = tmp_path_factory.mktemp("tls")
    for name in ("server", "other"):  # the server's, and an unrelated one to trust instead
        r = subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
             "-addext", "subjectAltName=IP:127.0.0.1", "-days", "2",
             "-keyout", str(d / f"{name}-key.pem"), "-out", str(d / f"{name}.pem")],
            capture_output=True, timeout=60,
        )
        if r.returncode != 0:
            pytest.skip(f"openssl could not make a certificate: {r.stderr[-200:]!r}")
    return d / "server.pem", d / "server-key.pem", d / "other.pem"


def trust_only(path: Path) -> dict:
    """Environment in which the client trusts exactly this certificate file."""
    env = clean_env(SSL_CERT_FILE=str(path))
    env.pop("SSL_CERT_DIR", None)
    return env


def server_ssl(cert) -> ssl.SSLContext:
    """The server side: the self-signed certificate and its key."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    return ctx


@pytest.mark.server
def test_self_signed_certificate_fails_by_default_and_insecure_works_with_a_warning(tmp_path, cert):
    preset = short_preset(tmp_path)
    env = trust_only(cert[2])  # not the server's certificate
    with MiniServer(ssl_context=server_ssl(cert)) as srv:
        with ThreadPoolExecutor(2) as pool:
            verified, insecure = pool.map(
                lambda a: headless(preset, srv.url, tmp_path / ("ins" if a else "ver"), env, *a), [(), ("--insecure",)]
            )
        served = srv.generations
    # verified by default: one line, exit 3, nothing sent
    assert verified.returncode == 3, verified.stderr
    assert "Traceback" not in verified.stderr
    lines = verified.stderr.splitlines()
    assert len(lines) == 1, verified.stderr
    assert lines[0].startswith(f"redline: error: cannot reach {srv.url}: TLS certificate verification failed")
    assert "--insecure" in lines[0]
    assert not (tmp_path / "ver" / "meta.json").exists()
    # --insecure: it runs, and the session log says verification was off
    assert insecure.returncode == 0, insecure.stderr
    assert served > 0
    events = [json.loads(l) for l in (tmp_path / "ins" / "events.ndjson").read_text().splitlines()]
    assert any(ev["kind"] == "warning" and "TLS certificate verification is OFF" in ev["text"] for ev in events)


@pytest.mark.server
def test_insecure_headless_warns_on_screen(tmp_path, cert):
    with MiniServer(ssl_context=server_ssl(cert)) as srv:
        r = headless(short_preset(tmp_path), srv.url, tmp_path / "s", trust_only(cert[2]), "--insecure")
    assert r.returncode == 0, r.stderr
    assert "TLS certificate verification is OFF" in r.stderr + r.stdout


@pytest.mark.server
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_verification_is_real_on_every_transport(cert, monkeypatch, transport):
    """Not just 'https fails': a certificate the client trusts (SSL_CERT_FILE) verifies; the
    same one untrusted fails with the certificate reason; verify=False accepts it."""
    with MiniServer(ssl_context=server_ssl(cert)) as srv:
        base = validate_url(srv.url)
        monkeypatch.delenv("SSL_CERT_DIR", raising=False)
        monkeypatch.setenv("SSL_CERT_FILE", str(cert[0]))
        client = make_client(transport=transport, verify=True)
        try:
            tgt = await detect(client, base)
        finally:
            await client.aclose()
        assert tgt.model == "mini-model"
        monkeypatch.setenv("SSL_CERT_FILE", str(cert[2]))
        client = make_client(transport=transport, verify=True)
        try:
            with pytest.raises(TargetUnreachable) as exc:
                await detect(client, base)
        finally:
            await client.aclose()
        msg = str(exc.value)
        assert "TLS certificate verification failed" in msg and "--insecure" in msg and "\n" not in msg, msg
        client = make_client(transport=transport, verify=False)
        try:
            assert (await detect(client, base)).model == "mini-model"
        finally:
            await client.aclose()


def test_server_options_about_tokens_keep_their_values_and_credentials_do_not():
    """A launch command's --max-total-tokens 4096 and --tokenizer-path are no secrets (a pattern
    on the letters "token" masked them, so a sweep's fingerprint lost the KV size); every option
    whose words name a credential is masked, spelt with - or _, with = or a space."""
    from redline.engine.session.scrub import MASK, redact_argv

    kept = ["--max-total-tokens", "4096", "--tokenizer-path", "/m", "--max-tokens=5", "--max-num-batched-tokens", "8192"]
    assert redact_argv(kept) == kept
    secret = ["--api-key", "s", "--token", "t", "--hf-token", "h", "--admin-key", "a", "--auth-token", "x",
              "--password", "p", "--admin-api-key", "q"]
    assert redact_argv(secret) == [v if i % 2 == 0 else MASK for i, v in enumerate(secret)]
    assert redact_argv(["--api_key=z", "--openai-api-key=k"]) == [f"--api_key={MASK}", f"--openai-api-key={MASK}"]
