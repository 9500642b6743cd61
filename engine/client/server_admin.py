"""The profiler and prefix-cache endpoints of one server, as HTTP (engine/run/server_ops.py
drives them at the load redline holds, and says what SGLang answers when):

- `POST /start_profile` with SGLang's body `{"output_dir", "activities", "profile_prefix"}`
  (vLLM ignores it), `POST /stop_profile` (answered once the trace is written: minutes on a
  busy server, so it waits up to PROFILE_STOP_TIMEOUT_S);
- the cache flush by what the server said it is: SGLang `/flush_cache` (with `?timeout=`,
  asked again while it answers 400: it still holds requests), vLLM `/reset_prefix_cache`;
- `--admin-key` as the bearer of these requests to SGLang (`utils/auth.py` ADMIN_OPTIONAL),
  over the target's own auth, never written anywhere;
- a 404/405/501 (no such endpoint) or 401/403 (refused): one warning per operation, then it
  is skipped quietly.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Generator

import httpx

__all__ = ["DEFAULT_PROFILE_S", "FLUSH_PATHS", "FlushResult", "OPS_TIMEOUT_S", "PROFILE_STOP_TIMEOUT_S", "ProfileCapture", "ServerOps", "answer_line"]

DEFAULT_PROFILE_S = 5.0
OPS_TIMEOUT_S = 30.0  # an answer to /start_profile, /flush_cache
PROFILE_STOP_TIMEOUT_S = 600.0  # /stop_profile answers once the trace is written: minutes on a busy server
FLUSH_MAX_S = 30.0  # a flush refused (400: the server still holds requests) is asked again this long
FLUSH_SERVER_WAIT_S = 10.0  # ?timeout= for SGLang 0.5.23: it waits this long for idle itself
FLUSH_RETRY_S = (0.2, 0.5, 1.0, 2.0)  # pauses between refused flushes (the last repeats)
UNSUPPORTED = (404, 405, 501)
DENIED = (401, 403)
FLUSH_PATHS = {"sglang": "/flush_cache", "vllm": "/reset_prefix_cache"}
PROFILE_ACTIVITIES = ["CPU", "GPU"]
ADMIN_HINT = "SGLang's --admin-api-key guards it: pass --admin-key or set REDLINE_ADMIN_KEY"


def answer_line(text: str) -> str:
    """The server's answer in one short line."""
    return " ".join(text.split())[:200]


class _AdminBearer(httpx.Auth):
    """The admin key as the bearer of one request, over the target's own auth (its --header
    headers stay; its API key's Authorization is replaced)."""

    def __init__(self, key: str, inner: httpx.Auth | None) -> None:
        self.key = key
        self.inner = inner

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        if self.inner is not None:
            request = next(self.inner.auth_flow(request))
        request.headers["Authorization"] = f"Bearer {self.key}"
        yield request


@dataclass
class FlushResult:
    ok: bool
    path: str = ""
    status: int = 0
    said: str = ""
    skipped: bool = False  # not supported or denied (warned once), or no path for this server kind
    tries: int = 0  # flushes asked (refusals + 1)
    waited_s: float = 0.0  # from the first ask to the answer taken


@dataclass
class ProfileCapture:
    """One profiler capture, as the log and summary.json name it."""

    load: str  # "C=8", "R=12/s", ...
    step: int  # the step it started in
    t_start: float  # epoch seconds, when /start_profile answered
    t_end: float | None = None  # when /stop_profile was sent
    trace: str | None = None  # where the trace is: a file found, the server's word, else the pattern in its directory
    server_said: str = ""  # /stop_profile's answer, one line
    stopped_by: str = ""  # "profile_s" | "step end" | "stop"
    ok: bool = True
    stop_s: float | None = None  # how long /stop_profile took: the server wrote the trace meanwhile
    prefix: str = ""  # the profile_prefix asked for (the trace's file names start with it)
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "load": self.load, "step": self.step, "t_start": round(self.t_start, 3),
            "t_end": None if self.t_end is None else round(self.t_end, 3),
            "duration_s": None if self.t_end is None else round(self.t_end - self.t_start, 3),
            "trace": self.trace, "server_said": self.server_said, "stopped_by": self.stopped_by,
            "ok": self.ok, "stop_s": None if self.stop_s is None else round(self.stop_s, 3),
        }


class ServerOps:
    """The profiler and cache endpoints of one target (its base URL and kind)."""

    def __init__(self, client: httpx.AsyncClient, base: str, kind: str, log: Callable[..., None], warn: Callable[[str], None],
                 *, output_dir: str | None = None, admin_key: str | None = None, info_raw: dict | None = None) -> None:
        self.client = client
        self.base = base.rstrip("/")
        self.kind = kind
        self.log = log
        self.warn = warn
        self.output_dir = output_dir  # None: the server's default (SGLANG_TORCH_PROFILER_DIR, /tmp)
        self.admin_key = admin_key  # never logged
        self.info_raw = info_raw or {}  # the server's info (credentials masked): its profiler directory when it says
        self.unsupported: set[str] = set()  # operations a 404 (or 401) told us the server lacks
        self.capture: ProfileCapture | None = None  # the capture running now
        self.captures: list[ProfileCapture] = []
        self.task: asyncio.Task | None = None  # the running capture (engine/run/server_ops.py start_capture)
        self.started: asyncio.Future | None = None  # the running capture's start: True / False
        self._count = 0

    # -- the endpoints -----------------------------------------------------------------
    async def _post(self, path: str, body: dict | None = None, *, timeout: float = OPS_TIMEOUT_S,
                    params: dict | None = None) -> tuple[int, str]:
        auth: Any = httpx.USE_CLIENT_DEFAULT  # Any: httpx's sentinel type (UseClientDefault) is private
        if self.admin_key and self.kind == "sglang":  # SGLang's --admin-api-key; another server keeps the API key
            auth = _AdminBearer(self.admin_key, self.client.auth)
        try:
            r = await self.client.post(self.base + path, json=body, timeout=timeout, params=params, auth=auth)
        except httpx.TimeoutException:
            return 0, f"no answer within {timeout:g} s"
        except httpx.HTTPError as exc:
            return 0, f"{type(exc).__name__}: {exc}"
        return r.status_code, r.text

    def _lacks(self, op: str, status: int, text: str, what: str) -> bool:
        """A 404-like answer, or a 401/403: warn once, remember."""
        if status in UNSUPPORTED or status in DENIED:
            if op not in self.unsupported:
                self.unsupported.add(op)
                if status in DENIED:
                    if self.kind != "sglang":
                        why = "the server refused the API key's bearer"
                    else:
                        why = "the admin key given (--admin-key) was refused" if self.admin_key else ADMIN_HINT
                    self.warn(f"{what}: HTTP {status} {answer_line(text)} ({why}); skipped from now on")
                else:
                    self.warn(f"{what}: the server has no such endpoint (HTTP {status}); skipped from now on")
            return True
        return False

    def new_prefix(self) -> str:
        """The profile_prefix of the next capture: its trace files start with it. The process
        id keeps two redline sessions on one host apart when they capture in the same second
        (the default /tmp is shared: each finds only its own files by the prefix)."""
        self._count += 1
        return f"redline-{time.strftime('%H%M%S')}-{os.getpid()}-{self._count}"

    async def start_profile(self, prefix: str = "") -> tuple[bool, str]:
        """(started, the server's answer)."""
        if "profile" in self.unsupported:
            return False, ""
        body: dict[str, Any] = {"activities": PROFILE_ACTIVITIES}
        if prefix:
            body["profile_prefix"] = prefix
        if self.output_dir:
            body["output_dir"] = self.output_dir
        status, text = await self._post("/start_profile", body)
        vllm = "; vLLM serves it with VLLM_TORCH_PROFILER_DIR set" if self.kind != "sglang" else ""
        if self._lacks("profile", status, text, f"profiler (POST /start_profile{vllm})"):
            return False, text
        if status != 200:
            why = ("SGLang answers 500 when its scheduler refuses (a capture already running, a bad "
                   "output_dir): its log says why") if status == 500 else "see the server's log"
            self.warn(f"profiler: /start_profile answered {f'HTTP {status}' if status else 'nothing'}: {answer_line(text)} ({why})")
            return False, text
        return True, text

    async def stop_profile(self, timeout: float = PROFILE_STOP_TIMEOUT_S) -> tuple[int, str]:
        """(status, the server's answer); 0: no answer within ``timeout``."""
        status, text = await self._post("/stop_profile", timeout=timeout)
        if self._lacks("profile", status, text, "profiler (POST /stop_profile)"):
            return status, text
        return status, text

    async def flush_cache(self, max_s: float = FLUSH_MAX_S) -> FlushResult:
        """Flush the prefix cache (call with nothing of redline's in flight): asked again while
        the server refuses (400), up to ``max_s``."""
        path = FLUSH_PATHS.get(self.kind)
        if path is None:
            if "flush" not in self.unsupported:
                self.unsupported.add("flush")
                self.warn(f"cache flush: the server is {self.kind!r}, not SGLang or vLLM: no flush endpoint known; skipped")
            return FlushResult(False, skipped=True)
        if "flush" in self.unsupported:
            return FlushResult(False, path, skipped=True)
        sglang = self.kind == "sglang"
        params = {"timeout": f"{min(FLUSH_SERVER_WAIT_S, max_s):g}"} if sglang else None
        what = f"cache flush (POST {path}{'; vLLM serves it with VLLM_SERVER_DEV_MODE=1' if not sglang else ''})"
        t0 = time.monotonic()
        tries = 0
        while True:
            tries += 1
            wait = FLUSH_SERVER_WAIT_S if sglang else 0.0
            status, text = await self._post(path, params=params, timeout=OPS_TIMEOUT_S + wait)
            if self._lacks("flush", status, text, what):
                return FlushResult(False, path, status, answer_line(text), skipped=True, tries=tries)
            left = max_s - (time.monotonic() - t0)
            if status != 400 or left <= 0:
                break
            await asyncio.sleep(min(left, FLUSH_RETRY_S[min(tries - 1, len(FLUSH_RETRY_S) - 1)]))
        return FlushResult(status == 200, path, status, answer_line(text), tries=tries, waited_s=time.monotonic() - t0)
