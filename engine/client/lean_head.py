"""The lean transport's request head (engine/client/transport.py): an httpx.Request as HTTP/1.1
bytes, its headers checked first, so no header can inject another (or a second request)."""

from __future__ import annotations

import re

import httpx

# RFC 9110 field names are tokens; a value may not hold CR, LF or NUL (header injection), as h11 checks.
_NAME_OK = re.compile(rb"[-!#$%&'*+.^_`|~0-9A-Za-z]+\Z")
_VALUE_BAD = re.compile(rb"[\x00\r\n]")


def request_head(request: httpx.Request, method: bytes) -> tuple[bytes, bytes | None, bool]:
    """(the request line, headers and, when the body is known and not chunked, the body; the body
    left to write: b"" none, None streamed, else known bytes the headers frame as chunked;
    whether the headers say chunked). A header that could inject is refused, its value unsaid."""
    parts = [method, b" ", request.url.raw_path, b" HTTP/1.1\r\n"]
    chunked = False
    for name, value in request.headers.raw:
        if _VALUE_BAD.search(value) or not _NAME_OK.match(name):
            # never echo the value: it may be the API key
            raise httpx.LocalProtocolError(
                f"refused to send header {name[:40].decode('latin-1')!r}: its name or value holds a character "
                "not allowed in HTTP headers (CR, LF, NUL or, in a name, a separator)"
            )
        parts += (name, b": ", value, b"\r\n")
        if name.lower() == b"transfer-encoding" and b"chunked" in value.lower():
            chunked = True
    parts.append(b"\r\n")
    try:
        body: bytes | None = request.content
    except httpx.RequestNotRead:
        body = None  # a streamed request body
    if body is not None and not chunked:
        parts.append(body)
        body = b""
    return b"".join(parts), body, chunked
