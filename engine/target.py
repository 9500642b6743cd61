"""The target server: its URL checked before any connection, then what it speaks."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx

from .apis import APIS, CHAT, GENERATE
from .serverinfo import ServerInfo


class TargetError(ValueError):
    """A URL or API that is not acceptable (bad input: exit 2)."""


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


def validate_url(url: str) -> str:
    """http(s)://host[:port][/ or /v1] -> base URL; anything else is a one-line TargetError."""
    accepted = "expected http://HOST[:PORT] or https://HOST[:PORT] (optionally ending in /v1)"
    try:
        parts = urlsplit(url.strip())
        port = parts.port  # raises ValueError for a bad port
    except ValueError:
        raise TargetError(f"URL {url!r}: bad port; {accepted}") from None
    if parts.scheme not in ("http", "https"):
        raise TargetError(f"URL {url!r}: scheme {parts.scheme or '(none)'!r} not supported; {accepted}")
    if not parts.hostname:
        raise TargetError(f"URL {url!r}: no host; {accepted}")
    if parts.username or parts.password:
        raise TargetError(f"URL {url!r}: credentials in the URL are not accepted; use OPENAI_API_KEY")
    path = parts.path.rstrip("/")
    if path not in ("", "/v1"):
        raise TargetError(f"URL {url!r}: path {parts.path!r} not accepted; {accepted}")
    if parts.query or parts.fragment:
        raise TargetError(f"URL {url!r}: query or fragment not accepted; {accepted}")
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    return f"{parts.scheme}://{host}" + (f":{port}" if port else "")


async def _get_json(client: httpx.AsyncClient, url: str) -> dict | None:
    try:
        r = await client.get(url, timeout=10.0)
    except httpx.ConnectError as exc:
        raise TargetUnreachable(str(exc) or exc.__class__.__name__) from exc
    except httpx.HTTPError:
        return None
    if r.status_code != 200:
        return None
    try:
        data = json.loads(r.content)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


async def detect(client: httpx.AsyncClient, base_url: str, api: str | None = None, model: str | None = None) -> Target:
    """Ask the server what it is: SGLang's server info and caps, the model from /v1/models."""
    if api is not None and api not in APIS:
        raise TargetError(f"api {api!r}: expected one of {', '.join(APIS)}")
    try:
        sg = await _get_json(client, base_url + "/get_server_info")
        if sg is None:
            sg = await _get_json(client, base_url + "/server_info")
        models = await _get_json(client, base_url + "/v1/models")
    except TargetUnreachable as exc:
        raise TargetUnreachable(f"cannot reach {base_url}: {exc}") from None
    name = model or ""
    owned_by = ""
    if models and isinstance(models.get("data"), list) and models["data"]:
        first = models["data"][0]
        if isinstance(first, dict):
            name = name or str(first.get("id") or "")
            owned_by = str(first.get("owned_by") or "")
    if sg is not None:
        info = ServerInfo.from_sglang(sg, name)
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
