"""TLS for the lean transport (engine/client/transport.py): httpx's rules for `verify`; and its
check of an idle pooled socket before reuse, and the close of one that opened too late."""

from __future__ import annotations

import asyncio
import select
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


def dropped(transport: asyncio.BaseTransport) -> bool:
    """An idle connection whose socket is readable: the server closed or reset it (or sent
    something nobody asked for) and the loop has not processed it yet. Not for reuse."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return False
    try:
        fd = sock.fileno()
        if fd < 0:
            return True
        p = select.poll()
        p.register(fd, select.POLLIN | select.POLLPRI)
        return bool(p.poll(0))
    except (OSError, ValueError):
        return True


def close_opened(opened: object) -> None:
    """Close a connection that opened too late: kstamp's transport, or asyncio's (transport, protocol)."""
    transport = opened[0] if isinstance(opened, tuple) else opened
    if isinstance(transport, asyncio.BaseTransport):
        transport.close()
