"""The target server: its URL checked before any connection, then what it speaks."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx

from ..measure import records
from ..telemetry.server_info import SERVER_INFO_PATHS, ServerInfo, looks_like_sglang
from .api_formats import APIS, CHAT, GENERATE
from .request import NOT_HTTP, classify_error, scrub_key


class TargetError(ValueError):
    """A URL or API that is not acceptable (bad input: exit 2)."""


class BadURL(TargetError):
    """A target URL that is not one of URL_FORMS. str(): `URL '...': reason; expected ...`;
    `.url` and `.reason` let a caller (a preset file) word it its own way."""

    def __init__(self, url: object, reason: str, *, hint: str | None = None) -> None:
        self.url = url
        self.reason = reason
        super().__init__(f"URL {_shown(url)}: {reason}; {hint or 'expected ' + URL_FORMS}")


class TargetUnreachable(RuntimeError):
    """The target did not answer at start (exit 3)."""


@dataclass(frozen=True)
class Target:
    url: str  # base URL, no trailing slash
    api: str
    model: str
    info: ServerInfo = field(default_factory=ServerInfo)

    def describe(self) -> dict:
        return {"url": self.url, "api": self.api, "model": self.model, "kind": self.info.kind}


_HOST_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-._")

# What --url and a preset's [target].url accept (docs/cli.md and "Presets"): one validator.
URL_FORMS = "http://HOST[:PORT] or https://HOST[:PORT] (optionally ending in /v1)"


def _shown(url: object) -> str:
    """The URL as an error message shows it: repr (so one line), at most ~120 characters."""
    if not isinstance(url, str):
        return repr(url)[:120]
    return repr(url) if len(url) <= 120 else repr(url[:117]) + "..."


def _masked(url: str) -> str:
    """The URL with any `user:password@` replaced by `***@`: an error never echoes a password."""
    start = url.find("://") + 3 if "://" in url else 0
    at = url.rfind("@")
    return url[:start] + "***" + url[at:] if at >= start else url


def validate_url(url: object) -> str:
    """The target's base URL, normalised: `scheme://host[:port]` (lower-case scheme and host,
    no trailing `/` or `/v1`). Anything else raises BadURL (a TargetError), one line naming
    the URL, what is wrong and URL_FORMS. Used by --url, by presets and by the engine."""
    if not isinstance(url, str):
        raise BadURL(url, "not a string")
    text = url.strip()
    url = _masked(url)  # as errors show it
    if not text:
        raise BadURL(url, "empty")
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in text):
        raise BadURL(url, "contains spaces or control characters")
    try:
        parts = urlsplit(text)
    except ValueError:  # e.g. an unclosed IPv6 bracket
        raise BadURL(url, "not a valid URL") from None
    if parts.scheme not in ("http", "https"):
        raise BadURL(url, f"scheme {parts.scheme or '(none)'!r} not supported")
    try:
        port = parts.port  # raises ValueError for a bad port
    except ValueError:
        port = -1
    if port == -1 or port == 0 or parts.netloc.endswith(":"):
        raise BadURL(url, "bad port (expected 1..65535)")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise BadURL(url, "credentials in the URL are not accepted", hint="put the API key in OPENAI_API_KEY")
    if not parts.hostname:
        raise BadURL(url, "no host")
    if ":" not in parts.hostname and not set(parts.hostname) <= _HOST_CHARS:
        raise BadURL(url, f"bad host name {parts.hostname!r}")
    path = parts.path.rstrip("/")
    if path not in ("", "/v1"):
        raise BadURL(url, f"path {parts.path!r} not accepted: give the server's base URL")
    if parts.query or parts.fragment or text.endswith(("?", "#")):
        raise BadURL(url, "query or fragment not accepted")
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    return f"{parts.scheme}://{host}" + (f":{port}" if port else "")


DETECT_TIMEOUT_S = 10.0  # per detection GET


class _Probe:
    """Detection GETs; remembers the last transport failure (for the message if all fail)."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client
        self.failure: str | None = None

    async def get_json(self, url: str) -> dict | None:
        try:
            r = await self.client.get(url, timeout=DETECT_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - every failure becomes one line, never a traceback
            kind, text = classify_error(exc, responded=False)
            text = scrub_key(text, self.client)
            if kind in (records.ERR_CONNECT, records.ERR_TIMEOUT):
                # refused, DNS, TLS, closed before any response; or no response at all in
                # DETECT_TIMEOUT_S (the next probes would wait as long again: don't)
                raise TargetUnreachable(text if kind == records.ERR_CONNECT else f"no response within {DETECT_TIMEOUT_S:g} s") from None
            if kind == records.ERR_OTHER and (
                not isinstance(exc, httpx.TransportError) or isinstance(exc, (httpx.LocalProtocolError, httpx.UnsupportedProtocol))
            ):
                # not the network: the request could not even be built or sent (a header, the URL)
                raise TargetError(f"cannot send a request to {url}: {text}") from None
            self.failure = text
            return None
        if r.status_code != 200:
            return None
        try:
            data = json.loads(r.content)
        except (ValueError, RecursionError):
            return None
        return data if isinstance(data, dict) else None


def check_model(model: str | None, listed: list, base_url: str) -> None:
    """A model the server does not list in /v1/models is refused at the start (TargetUnreachable:
    exit 3), in one line naming it and what the server offers: a server that 404s it (vLLM)
    would fail every request."""
    ids = [str(m["id"]) for m in listed if isinstance(m, dict) and m.get("id")]
    if not model or not ids or model in ids:
        return
    shown = ", ".join(repr(i) for i in ids[:10]) + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")
    raise TargetUnreachable(f"model {model!r} is not served by {base_url}: its /v1/models lists {shown} (--model picks one)")


async def detect(client: httpx.AsyncClient, base_url: str, api: str | None = None, model: str | None = None) -> Target:
    """Ask the server what it is: SGLang's server info and caps, the model from /v1/models."""
    if api is not None and api not in APIS:
        raise TargetError(f"api {api!r}: expected one of {', '.join(APIS)}")
    probe = _Probe(client)
    try:
        sg, source = None, ""
        for path in SERVER_INFO_PATHS:  # /server_info, then the deprecated /get_server_info
            got = await probe.get_json(base_url + path)
            if got is not None and looks_like_sglang(got):
                sg, source = got, path
                break
        models = await probe.get_json(base_url + "/v1/models")
    except TargetUnreachable as exc:  # `http://HOST:PORT: does not speak HTTP (...)`: reached, but not a server of ours
        raise TargetUnreachable(f"{base_url}: {exc}" if str(exc) == NOT_HTTP else f"cannot reach {base_url}: {exc}") from None
    if sg is None and models is None and probe.failure is not None:
        raise TargetUnreachable(f"cannot reach {base_url}: {probe.failure}")
    name = model or ""
    owned_by = ""
    if models and isinstance(models.get("data"), list) and models["data"]:
        first = models["data"][0]
        if isinstance(first, dict):
            name = name or str(first.get("id") or "")
            owned_by = str(first.get("owned_by") or "")
        check_model(model, models["data"], base_url)
    if sg is not None:
        info = ServerInfo.from_sglang(sg, name, source=source)
    elif models is not None:
        info = ServerInfo(kind="vllm" if owned_by == "vllm" else "openai", model=name)
    else:
        raise TargetUnreachable(
            f"{base_url} answers HTTP but neither /v1/models nor /get_server_info: is it an LLM server?"
        )
    if api is None:
        api = CHAT if models is not None else GENERATE
    if api != GENERATE and models is None:
        raise TargetError(f"api {api!r}: {base_url} has no /v1/models (OpenAI API); try --api generate")
    return Target(url=base_url, api=api, model=info.model or name, info=info)
