"""The control API's wire (engine/control/http_api.py): JSON replies and one-line refusals,
request bodies and their values, the client's address, a command's words for the log, and
server-sent event framing. No engine here: aiohttp requests in, text and responses out.
"""

from __future__ import annotations

import json
import math
from typing import Any

from aiohttp import web


class Refused(Exception):
    """A request the API answers with a 4xx: `status` and a one-line `text`."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status
        self.text = text


def clean(v: Any) -> Any:
    """JSON-safe: non-finite floats become null, tuples lists, unknown objects their str."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {str(k): clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [clean(x) for x in v]
    if v is None or isinstance(v, (bool, int, str)):
        return v
    to_dict = getattr(v, "to_dict", None)
    if callable(to_dict):
        return clean(to_dict())
    return str(v)


def reply(body: dict, status: int = 200) -> web.Response:
    return web.Response(status=status, text=json.dumps(clean(body), separators=(",", ":")) + "\n", content_type="application/json")


def refusal(status: int, text: str) -> web.Response:
    return reply({"ok": False, "error": " ".join(str(text).split())}, status)


async def read_json(request: web.Request) -> dict:
    """The body as a JSON object ({} when empty); 400 for anything else, 413 when too big."""
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise Refused(400, f"bad JSON: {' '.join(str(exc).split())[:160]}") from None
    if not isinstance(body, dict):
        raise Refused(400, f"bad JSON: expected an object such as {{\"value\": 16}}, got {type(body).__name__}")
    return body


def value(body: dict, key: str) -> Any:
    if key not in body:
        raise Refused(400, f'missing "{key}": expected {{"{key}": ...}}')
    return body[key]


def flag(body: dict, key: str) -> bool:
    v = body.get(key, False)
    if not isinstance(v, bool):
        raise Refused(400, f"{key} {v!r}: expected true or false")
    return v


def client(request: web.Request) -> str:
    peer = request.transport.get_extra_info("peername") if request.transport is not None else None
    if isinstance(peer, tuple) and len(peer) >= 2:
        host = f"[{peer[0]}]" if ":" in str(peer[0]) else str(peer[0])
        return f"{host}:{peer[1]}"
    return str(request.remote or "?")


def describe(body: dict) -> str:
    """A command's arguments in a few words for the log (never a whole TOML text)."""
    if not body:
        return ""
    parts = []
    for k, v in list(body.items())[:6]:
        if k == "toml":
            parts.append("toml=<text>")
            continue
        s = json.dumps(clean(v)) if not isinstance(v, str) else v
        parts.append(f"{k}={' '.join(s.split())[:60]}")
    return " " + " ".join(parts)


def sse(event: str, data: Any, seq: int | None = None) -> str:
    head = f"id: {seq}\n" if seq is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(clean(data), separators=(',', ':'))}\n\n"
