"""The HTTP client: httpx as the API, over a transport chosen for CPU cost.

httpx's default transport costs ~117 us of CPU per streamed token at C=256; the aiohttp
transport ~17 us (docs/benchmarks.md). The client's CPU is the ceiling on what redline can measure,
so the default is the cheapest: "lean" (engine/client/transport.py: asyncio.Protocol + httptools on
the running loop, uvloop under the engine host). "aiohttp" and "httpx" stay selectable
(`--transport`, hidden) for the benchmark (benchmarks/client_cost.py) and as a fallback.
"""

from __future__ import annotations

import ssl
from collections.abc import Generator

import httpx

from ..constants import CONNECT_TIMEOUT_S, DEFAULT_REQUEST_TIMEOUT_S, DEFAULT_TRANSPORT, PREOPEN_TIMEOUT_S, TRANSPORTS
from ..workload.request_shape import Headers, secret_values


class TargetBearer(httpx.Auth):
    """The API key as a bearer token and the --header headers, sent to the target's origin
    only (never to a --gpu-metrics or --server-metrics host elsewhere); an Authorization
    header given with --header wins over the key. `.token` and `.secrets` let errors be
    scrubbed."""

    def __init__(self, token: str | None, origin: str, headers: Headers = ()) -> None:
        self.token = token
        self.headers = tuple(headers)
        self.secrets = tuple(s for s in (token, *secret_values(self.headers)) if s)
        self._origin = _origin(httpx.URL(origin))

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        if _origin(request.url) == self._origin:
            if self.token:
                request.headers["Authorization"] = f"Bearer {self.token}"
            for name, value in self.headers:
                request.headers[name] = value
        yield request


def _origin(url: httpx.URL) -> tuple[str, str, int]:
    default = 443 if url.scheme == "https" else 80
    return (url.scheme, url.host, url.port or default)


def make_client(
    *,
    transport: str = DEFAULT_TRANSPORT,
    verify: bool = True,
    api_key: str | None = None,
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT_S,
    origin: str | None = None,
    headers: Headers = (),
) -> httpx.AsyncClient:
    """One client for the whole session: unlimited pool, read timeout = stall timeout.

    With `origin` (the target's base URL) the key and `headers` (--header, checked by
    engine/workload/request_shape.py) go to that origin only; without it, to every request
    (tests and benchmarks that talk to one server).
    """
    if transport not in TRANSPORTS:
        raise ValueError(f"transport {transport!r}: expected one of {', '.join(TRANSPORTS)}")
    auth: TargetBearer | None = None
    client_headers: dict[str, str] = {}
    if origin is not None:
        auth = TargetBearer(api_key, origin, headers) if api_key or headers else None
    else:
        if api_key and not any(n.lower() == "authorization" for n, _ in headers):
            client_headers["Authorization"] = f"Bearer {api_key}"
        client_headers.update(headers)
    timeout = httpx.Timeout(connect=CONNECT_TIMEOUT_S, read=request_timeout, write=CONNECT_TIMEOUT_S, pool=None)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    if transport == "httpx":
        return httpx.AsyncClient(headers=client_headers, auth=auth, timeout=timeout, limits=limits, verify=verify)
    if transport == "lean":
        from .transport import LeanTransport

        # run_request reads raw bytes (aiter_raw): ask for an uncompressed stream, so a server
        # or proxy that would gzip text/event-stream sends it as it is.
        client_headers["Accept-Encoding"] = "identity"
        lean = LeanTransport(verify=verify)
        return httpx.AsyncClient(headers=client_headers, auth=auth, timeout=timeout, transport=lean)

    import aiohttp
    from httpx_aiohttp import AiohttpTransport

    ssl_ctx: ssl.SSLContext | bool = ssl.create_default_context() if verify else False

    def session() -> aiohttp.ClientSession:
        # limit=0: no connection cap (aiohttp's default of 100 would silently cap C).
        connector = aiohttp.TCPConnector(limit=0, ssl=ssl_ctx, enable_cleanup_closed=True)
        return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None))

    return httpx.AsyncClient(
        headers=client_headers, auth=auth, timeout=timeout, transport=AiohttpTransport(client=session)
    )


async def preopen(client: httpx.AsyncClient, url: str, n: int) -> int:
    """Have `n` connections to `url`'s origin open and idle in `client`'s pool before `n` requests
    start (engine/client/transport.py LeanTransport.preopen): how many it opened. Another
    transport opens its own when a request needs one (0)."""
    opener = getattr(getattr(client, "_transport", None), "preopen", None)  # httpx keeps the transport it was given there
    return 0 if opener is None else await opener(url, n, PREOPEN_TIMEOUT_S)
