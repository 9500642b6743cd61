"""TLS for the lean transport (engine/transport.py): httpx's rules for `verify`."""

from __future__ import annotations

import ssl

import httpx


def ssl_context(verify: bool | str | ssl.SSLContext = True) -> ssl.SSLContext:
    """httpx's rules for `verify` (certifi CA bundle by default), HTTP/1.1 over ALPN."""
    if isinstance(verify, ssl.SSLContext):
        return verify
    ctx = httpx.create_ssl_context(verify=verify)
    try:
        ctx.set_alpn_protocols(["http/1.1"])
    except (NotImplementedError, ssl.SSLError):  # pragma: no cover - old OpenSSL
        pass
    return ctx
