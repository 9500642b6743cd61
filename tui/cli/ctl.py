"""`redline ctl`: the control API's command-line client (docs/steering.md).

    redline ctl [--control URL] [--json] status|concurrency N|rate R|probe|restore|pause|resume|
                preset NAME|search|slo SPEC|workload K=V...|lane [on|off]|profile [S]|export|stop

One line out (the engine's reply, or with --json its whole JSON); exit 0 when the engine did
it, 1 when it refused (the one-line reason on stderr), 2 for bad arguments, 3 when the
control API cannot be reached. The URL: --control, else $REDLINE_CONTROL (a URL, HOST:PORT
or a PORT on 127.0.0.1); the token: the variable named by --control-token-env, else
$REDLINE_CONTROL_TOKEN when set.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..exits import EXIT_BAD_INPUT, EXIT_OK, EXIT_UNREACHABLE
from .errors import UsageError

EXIT_REFUSED = 1
ENV_URL = "REDLINE_CONTROL"
ENV_TOKEN = "REDLINE_CONTROL_TOKEN"
TIMEOUT_S = 30.0
API_RAISE_MAX = 'add "raise_max": true'  # engine/control/http_api.py: above --max-concurrency


def add_ctl_parser(sub: argparse._SubParsersAction, formatter_class: type[argparse.HelpFormatter] = argparse.HelpFormatter) -> None:
    common = argparse.ArgumentParser(add_help=False, argument_default=argparse.SUPPRESS, formatter_class=formatter_class)
    common.add_argument("--control", metavar="URL", help=f"the control API: http://HOST:PORT, HOST:PORT or PORT (default ${ENV_URL})")
    common.add_argument("--control-token-env", metavar="NAME", help=f"environment variable holding the bearer token (default ${ENV_TOKEN} when set)")
    common.add_argument("--json", action="store_true", help="print the engine's JSON reply instead of one line")
    common.add_argument("--timeout", type=float, metavar="S", help=f"seconds to wait for the reply (default {TIMEOUT_S:.0f})")
    c = sub.add_parser("ctl", parents=[common], help="steer a running redline through its control API (--control)",
                       description="Send one command to a running redline's control API and print its reply in one line.",
                       add_arguments=lambda c: _add_actions(c, common))  # built when `ctl` is parsed: --help needs none
    c.set_defaults(handler=cmd_ctl)


def _add_actions(c: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    acts = c.add_subparsers(dest="action", metavar="ACTION", required=True, parser_class=type(c))

    def act(name: str, help: str) -> argparse.ArgumentParser:
        return acts.add_parser(name, parents=[common], help=help)

    act("status", help="state, load, live figures, step, preset")
    a = act("concurrency", help="closed loop at C=N")
    a.add_argument("value", metavar="N")
    a.add_argument("--raise-max", action="store_true", help="allow N above --max-concurrency (the TUI asks first)")
    act("rate", help="open loop at R requests/s").add_argument("value", metavar="R")
    act("probe", help="abort everything in flight, then hold C=1")
    act("restore", help="back to the load before the probe")
    act("pause", help="pause the load")
    act("resume", help="resume the load")
    act("preset", help="run a preset: a shipped name, or a TOML file (sent as text)").add_argument("name", metavar="NAME|FILE")
    a = act("search", help="an adaptive knee search from the current C")
    a.add_argument("--start", type=int, default=None, metavar="C")
    a.add_argument("--max", type=int, default=None, metavar="C")
    act("slo", help="set SLOs (ttft=2s,itl=100ms) or off").add_argument("spec", metavar="SPEC")
    act("workload", help="change the workload: output_len=N input_len=N dataset=SPEC prefix_ratio=X").add_argument("spec", nargs="+", metavar="KEY=VALUE")
    act("lane", help="the probe lane on, off, or toggled").add_argument("state", nargs="?", choices=("on", "off"))
    act("profile", help="the server's profiler at the load held now (default --profile-s)").add_argument("seconds", nargs="?", type=float, metavar="S")
    act("export", help="export the session's tables").add_argument("--format", "-f", default="parquet", choices=("parquet", "csv", "ndjson"))
    act("stop", help="end the session as q does")


def base_url(text: str | None) -> str:
    s = (text if text is not None else os.environ.get(ENV_URL, "")).strip()
    if not s:
        raise UsageError(f"ctl: give --control URL (or set ${ENV_URL}), e.g. --control 127.0.0.1:8090")
    if s.isdigit():
        s = f"127.0.0.1:{s}"
    if "://" not in s:
        s = "http://" + s
    if not s.startswith(("http://", "https://")):
        raise UsageError(f"--control {text!r}: expected http://HOST:PORT, HOST:PORT or PORT")
    return s.rstrip("/")


def token(args: argparse.Namespace) -> str | None:
    name = getattr(args, "control_token_env", None)
    if name is None:
        return os.environ.get(ENV_TOKEN) or None
    if not name or not name.replace("_", "").isalnum() or name[0].isdigit():
        raise UsageError("--control-token-env: expected the NAME of an environment variable, not the token itself")
    tok = os.environ.get(name)
    if not tok:
        raise UsageError(f"--control-token-env {name}: ${name} is not set or empty")
    return tok


def request_of(args: argparse.Namespace) -> tuple[str, str, dict | None]:
    """(method, path, JSON body) of the action."""
    a = args.action
    if a == "status":
        return "GET", "/v1/status", None
    if a == "concurrency":
        try:
            n = int(args.value)
        except ValueError:
            raise UsageError(f"concurrency {args.value!r}: expected a whole number >= 1") from None
        return "POST", "/v1/concurrency", {"value": n, **({"raise_max": True} if args.raise_max else {})}
    if a == "rate":
        try:
            r = float(args.value)
        except ValueError:
            raise UsageError(f"rate {args.value!r}: expected requests per second, a number > 0") from None
        return "POST", "/v1/rate", {"value": r}
    if a == "preset":
        p = Path(args.name).expanduser()
        if p.is_file():  # a file here: its text (the engine may run on another host)
            try:
                return "POST", "/v1/preset", {"toml": p.read_text(encoding="utf-8")}
            except (OSError, UnicodeDecodeError) as exc:
                raise UsageError(f"preset {args.name!r}: cannot read: {exc}") from None
        return "POST", "/v1/preset", {"name": args.name}
    if a == "search":
        body = {k: v for k, v in (("start", args.start), ("max", args.max)) if v is not None}
        return "POST", "/v1/search", body
    if a == "slo":
        return "POST", "/v1/slo", {"spec": args.spec}
    if a == "workload":
        return "POST", "/v1/workload", {"spec": " ".join(args.spec)}
    if a == "lane":
        return "POST", "/v1/lane", {} if args.state is None else {"on": args.state == "on"}
    if a == "profile":
        return "POST", "/v1/profile", {} if args.seconds is None else {"seconds": args.seconds}
    if a == "export":
        return "POST", "/v1/export", {"format": args.format}
    return "POST", f"/v1/{a}", {}


def status_line(s: dict) -> str:
    """GET /v1/status in one line."""
    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v:.0f}"

    state = str(s.get("state", "?")).upper()
    load = s.get("load") or f"C={s.get('concurrency')}"
    parts = [f"[{state}] {load}", f"in flight {s.get('in_flight')}", f"{s.get('output_tok_s', 0):.0f} tok/s",
             f"TTFT p50/p99 {ms(s.get('ttft_p50_ms'))}/{ms(s.get('ttft_p99_ms'))} ms",
             f"ITL p50 {ms(s.get('itl_p50_ms'))} ms", f"done {s.get('completed', 0)} failed {s.get('failed', 0)}"]
    step = s.get("step")
    if step:
        parts.append(f"step {step.get('index')}")
    preset = s.get("preset")
    if preset and preset.get("progress"):
        parts.append(str(preset["progress"]))
    parts.append(f"session {s.get('session_dir') or '-'}")
    return ", ".join(parts)


def cmd_ctl(args: argparse.Namespace) -> int:
    import httpx

    url = base_url(getattr(args, "control", None))
    method, path, body = request_of(args)
    tok = token(args)
    headers = {"Authorization": f"Bearer {tok}"} if tok else {}
    timeout = getattr(args, "timeout", TIMEOUT_S)
    try:
        with httpx.Client(timeout=timeout, trust_env=False) as c:
            r = c.request(method, url + path, json=body, headers=headers)
    except httpx.HTTPError as exc:
        print(f"redline ctl: cannot reach the control API at {url}: {exc or type(exc).__name__}", file=sys.stderr)
        return EXIT_UNREACHABLE
    try:
        reply = r.json()
    except ValueError:
        reply = {"ok": False, "error": f"HTTP {r.status_code}: not the control API's JSON ({r.text[:80]!r})"}
    ok = r.is_success and isinstance(reply, dict) and reply.get("ok", True) is not False
    if getattr(args, "json", False):
        import json

        print(json.dumps(reply))
    elif ok:
        print(status_line(reply) if args.action == "status" else reply.get("line", "ok"))
    if not ok:
        err = reply.get("error") if isinstance(reply, dict) else None
        if isinstance(err, str):  # the API's words for its JSON body, in this command line's
            err = err.replace(API_RAISE_MAX, "add --raise-max")
        print(f"redline ctl: {args.action} refused (HTTP {r.status_code}): {err or r.reason_phrase}", file=sys.stderr)
        return EXIT_REFUSED
    return EXIT_OK


__all__ = ["add_ctl_parser", "cmd_ctl", "EXIT_BAD_INPUT"]
