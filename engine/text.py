"""Text helpers shared by the engine, the session log and the command line."""

from __future__ import annotations

__all__ = ["one_line"]


def one_line(text: object, limit: int | None = None, *, ellipsis: bool = False) -> str:
    """``str(text)`` on one line: every run of whitespace (newlines included) becomes one space.

    ``limit``: cut to at most that many characters; with ``ellipsis`` the last one kept is
    "…", so a reader sees that the text was cut (for messages on screen; stored fields are
    cut plainly to their documented width).
    """
    s = " ".join(str(text).split())
    if limit is None or len(s) <= limit:
        return s
    return s[: limit - 1] + "…" if ellipsis and limit > 0 else s[: max(limit, 0)]
