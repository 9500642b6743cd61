"""The engine's event log: lines on screen and in events.ndjson, warnings that stay a while,
and failed requests folded into one line per distinct error per second.

An error's variable parts (counts, ids, numbers: fragile's 503 says `(48 requests in
flight)`, then `(49 ...)`) do not make it another error: errors are told apart by their text
with each number and id taken out, and the line shows the range each number took
(`40 × http_503: HTTP 503: server overloaded (48-87 requests in flight)`).
"""

from __future__ import annotations

import re
import time
from collections import deque
from typing import TYPE_CHECKING, Callable

from .snapshot import LogLine

if TYPE_CHECKING:
    from ..session import SessionWriter

WARNING_HOLD_S = 10.0  # a warning stays on screen this long after its condition was last seen
LOG_LINES = 200  # lines kept in memory for the screen
SUPERSEDED_BY_GONE = ("overloaded",)  # warning keys (engine/core/engine.py) moot once the server is gone
SOURCED = ("key", "probe", "workload")  # the kinds an operator command logs (see `source`)
ERROR_TEXT = 120  # characters of an error's text a folded line keeps

# the variable parts of an error's text: a UUID, a long hex id, a number (3, 48, 0.25)
_VARIABLE = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
                       r"|\b(?=[0-9a-fA-F]*[0-9])(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{12,}\b|\d+(?:\.\d+)?")


class _Fold:
    """The failures of one second that read as one error: how many, and each variable part's
    values (numbers as their range)."""

    __slots__ = ("n", "parts", "values")

    def __init__(self, parts: list[str]) -> None:
        self.n = 0
        self.parts = parts  # the text between the variable parts
        self.values: list[list[str]] = []

    def add(self, values: list[str]) -> None:
        self.n += 1
        if not self.values:
            self.values = [[v] for v in values]
        else:
            for seen, v in zip(self.values, values, strict=False):
                if v not in seen and len(seen) < 64:
                    seen.append(v)

    def text(self) -> str:
        out = [self.parts[0]]
        for seen, tail in zip(self.values, self.parts[1:], strict=False):
            out.append(_span(seen))
            out.append(tail)
        return "".join(out)


def _span(seen: list[str]) -> str:
    """One variable part as shown: its value, the range its numbers took, or … for ids."""
    if len(seen) == 1:
        return seen[0]
    try:
        nums = sorted(float(v) for v in seen)
    except ValueError:
        return "…"
    lo, hi = (seen[[float(v) for v in seen].index(x)] for x in (nums[0], nums[-1]))
    return f"{lo}-{hi}"


def error_key(text: str) -> tuple[str, list[str], list[str]]:
    """(key, the text between the variable parts, the variable parts) of an error's text."""
    values = _VARIABLE.findall(text)
    parts = _VARIABLE.split(text)
    return "#".join(parts), parts, values


class EventLog:
    def __init__(self) -> None:
        self.session: SessionWriter | None = None
        self.lines: deque[LogLine] = deque(maxlen=LOG_LINES)
        self._seq = 0
        self._warnings: dict[str, tuple[float, str]] = {}  # key -> (last raised, text)
        self._errors: dict[str, _Fold] = {}
        # called as on_warning(key, text) at each new episode of a warning (the headless
        # runner prints each key once)
        self.on_warning: Callable[[str, str], None] | None = None
        # while a control-API command runs (engine/control/http_api.py): {"source": "api",
        # "client": ADDR}, added to the events.ndjson rows of the lines that command logs
        self.source: dict | None = None
        self.scrub: Callable[[str], str] | None = None  # hides a secret (the control token) on screen too

    def log(self, kind: str, text: str, **fields: object) -> None:
        """One event: on screen now, and a row of events.ndjson."""
        self._seq += 1
        if self.scrub is not None:
            text = self.scrub(text)
        self.lines.append(LogLine(self._seq, time.time(), kind, text))
        if self.source is not None and kind in SOURCED:
            fields = {**self.source, **fields}
        if self.session is not None:
            self.session.add_event(kind, text, **fields)

    def warn(self, text: str, key: str | None = None) -> None:
        """A warning that stays on screen a while; logged once per episode.

        `key` names the condition (its text may carry changing numbers): one log line per
        episode, the newest text on screen.
        """
        key = key or text
        new = key not in self._warnings
        if new:
            self.log("warning", text)
        self._warnings[key] = (time.perf_counter(), text)
        if new and self.on_warning is not None:
            self.on_warning(key, text)

    def hold(self, key: str, text: str, now: float) -> None:
        """Keep a warning on screen (no new log line) while its condition holds."""
        self._warnings[key] = (now, text)

    def clear(self, key: str) -> None:
        self._warnings.pop(key, None)

    def active(self, key: str) -> bool:
        return key in self._warnings

    def failed(self, kind: str, text: str) -> None:
        """A failed request: folded into one line per distinct error each second (its numbers
        and ids apart: error_key)."""
        key, parts, values = error_key(text)
        fold = self._errors.get(f"{kind}: {key}")  # the kind itself is never folded: http_500 is not http_503
        if fold is None:
            fold = self._errors[f"{kind}: {key}"] = _Fold([f"{kind}: {parts[0]}", *parts[1:]])
        fold.add(values)

    def each_second(self, now: float) -> None:
        for fold in self._errors.values():
            text = fold.text()[:ERROR_TEXT]
            self.log("error", f"{fold.n} × {text}" if fold.n > 1 else text)
        self._errors.clear()
        self._warnings = {k: v for k, v in self._warnings.items() if now - v[0] < WARNING_HOLD_S}

    def warnings(self, server_gone: bool = False) -> tuple[str, ...]:
        """The warnings on screen now. A gone server supersedes what it said while it still
        answered (its 429/503 overload): that episode ends (cleared; answers after the server
        is back log a new one) instead of reading "overloaded" under [SERVER GONE]."""
        if server_gone:
            for key in SUPERSEDED_BY_GONE:
                self._warnings.pop(key, None)
        return tuple(text for _, text in self._warnings.values())

    def recent(self, n: int = 50) -> tuple[LogLine, ...]:
        return tuple(self.lines)[-n:]
