"""Incremental Server-Sent Events splitter: bytes as they arrive -> `data:` payloads.

Servers split events across socket reads at arbitrary points; this keeps the partial tail
and hands back complete payloads only. Multi-line `data:` fields of one event are joined
with a newline (per the SSE spec); comments (`:`) and other fields are ignored. Lines end
with LF or CRLF (a lone CR is not a line end here: no LLM server sends one).

The only error it raises is `MalformedEvent`, when an unfinished event grows past
`MAX_EVENT_BYTES` (a body that is not SSE at all would otherwise be buffered without end).
"""

from __future__ import annotations

from .api_formats import MalformedEvent

DONE = b"[DONE]"
MAX_EVENT_BYTES = 8 << 20  # SGLang /generate repeats the whole text per event: keep it generous


def too_big() -> MalformedEvent:
    """The error of an unfinished event past MAX_EVENT_BYTES (here and in the C road, engine/client/fast_path.py)."""
    return MalformedEvent(f"an SSE event longer than {MAX_EVENT_BYTES >> 20} MiB: not an event stream?")


class SSEDecoder:
    __slots__ = ("_buf", "_data")

    def __init__(self) -> None:
        self._buf = b""
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[bytes]:
        """Return the payloads of every event completed by this chunk, in order."""
        if not self._buf and not self._data and chunk[:6] == b"data: " and chunk[-2:] == b"\n\n":
            # the common read: exactly one whole one-line event (what the loop below gives it)
            end = len(chunk) - 2
            if chunk.find(b"\n", 6) == end and chunk[end - 1 : end] != b"\r":
                return [chunk[6:end]]
        buf = self._buf + chunk if self._buf else chunk
        lines = buf.split(b"\n")
        self._buf = lines.pop()  # the unfinished tail (b"" when the chunk ended on \n)
        out: list[bytes] = []
        data = self._data
        for line in lines:
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:
                if data:
                    out.append(data[0] if len(data) == 1 else b"\n".join(data))
                    data.clear()
                continue
            if line.startswith(b"data:"):
                payload = line[5:]
                if payload.startswith(b" "):
                    payload = payload[1:]
                data.append(payload)
        if len(self._buf) > MAX_EVENT_BYTES or (data and sum(map(len, data)) > MAX_EVENT_BYTES):
            self._buf = b""
            data.clear()
            raise too_big()
        return out

    def close(self) -> list[bytes]:
        """End of stream: an event not followed by a blank line still counts."""
        out = self.feed(b"\n\n") if (self._buf or self._data) else []
        self._buf = b""
        return out
