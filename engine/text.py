"""Text helpers shared by the engine, the session log and the command line."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = ["closest", "did_you_mean", "one_line"]


def one_line(text: object, limit: int | None = None, *, ellipsis: bool = False, multiline_only: bool = False) -> str:
    """``str(text)`` on one line: every run of whitespace (newlines included) becomes one space.

    ``limit``: cut to at most that many characters; with ``ellipsis`` the last one kept is
    "…", so a reader sees that the text was cut (for messages on screen; stored fields are
    cut plainly to their documented width). ``multiline_only``: a text with no line break is
    left as it is (a refusal that quotes a value keeps its spaces: engine/preset/fields.py).
    """
    s = str(text)
    if not multiline_only or "\n" in s or "\r" in s:
        s = " ".join(s.split())
    if limit is None or len(s) <= limit:
        return s
    return s[: limit - 1] + "…" if ellipsis and limit > 0 else s[: max(limit, 0)]


def closest(word: object, choices: Iterable[str], cutoff: float = 0.7, aliases: Mapping[str, str] | None = None) -> str | None:
    """The choice nearest ``word``: the one another tool's name in ``aliases`` stands for
    (`openai-chat` is chat), ranked above any near spelling, else the nearest as difflib
    measures it (a typo, a letter missing or doubled); None when none is near enough."""
    if not isinstance(word, str) or not word:
        return None
    options = list(choices)
    if aliases:
        ours = aliases.get(word, aliases.get(word.lower().replace("_", "-")))
        if ours is not None and ours in options:
            return ours
    import difflib  # only on a refusal

    near = difflib.get_close_matches(word, options, n=1, cutoff=cutoff)
    return near[0] if near else None


def did_you_mean(word: object, choices: Iterable[str], shown: str = "{}") -> str:
    """`; did you mean X?` for the choice nearest ``word`` (``shown`` formats it, e.g. "[{}]"
    for a TOML table), else "": the tail of a one-line refusal."""
    near = closest(word, choices)
    return f"; did you mean {shown.format(near)}?" if near is not None else ""
