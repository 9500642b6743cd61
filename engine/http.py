"""The HTTP client: httpx as the API, over a transport chosen for CPU cost.

httpx's default transport costs ~117 us of CPU per streamed token at C=256; the aiohttp
transport ~17 us (DESIGN.md). The client's CPU is the ceiling on what redline can measure,
so the default is the fast one; the others stay selectable for the benchmark.
"""

from __future__ import annotations

import ssl

import httpx

from .constants import CONNECT_TIMEOUT_S, DEFAULT_REQUEST_TIMEOUT_S

TRANSPORTS = ("aiohttp", "httpx")
DEFAULT_TRANSPORT = "aiohttp"


def make_client(
    *,
    transport: str = DEFAULT_TRANSPORT,
    verify: bool = True,
    api_key: str | None = None,
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT_S,
) -> httpx.AsyncClient:
    """One client for the whole session: unlimited pool, read timeout = stall timeout."""
    if transport not in TRANSPORTS:
        raise ValueError(f"transport {transport!r}: expected one of {', '.join(TRANSPORTS)}")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    timeout = httpx.Timeout(connect=CONNECT_TIMEOUT_S, read=request_timeout, write=CONNECT_TIMEOUT_S, pool=None)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    if transport == "httpx":
        return httpx.AsyncClient(headers=headers, timeout=timeout, limits=limits, verify=verify)

    import aiohttp
    from httpx_aiohttp import AiohttpTransport

    ssl_ctx: ssl.SSLContext | bool = ssl.create_default_context() if verify else False

    def session() -> aiohttp.ClientSession:
        # limit=0: no connection cap (aiohttp's default of 100 would silently cap C).
        connector = aiohttp.TCPConnector(limit=0, ssl=ssl_ctx, enable_cleanup_closed=True)
        return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None))

    return httpx.AsyncClient(
        headers=headers, timeout=timeout, transport=AiohttpTransport(client=session)
    )
