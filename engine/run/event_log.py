"""The engine's event log: lines on screen and in events.ndjson, warnings that stay a while,
and failed requests folded into one line per distinct error per second.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from typing import TYPE_CHECKING, Callable

from .snapshot import LogLine

if TYPE_CHECKING:
    from ..session import SessionWriter

WARNING_HOLD_S = 10.0  # a warning stays on screen this long after its condition was last seen
LOG_LINES = 200  # lines kept in memory for the screen
SUPERSEDED_BY_GONE = ("overloaded",)  # warning keys (engine/run/engine.py) moot once the server is gone
SOURCED = ("key", "probe", "workload")  # the kinds an operator command logs (see `source`)


class EventLog:
    def __init__(self) -> None:
        self.session: SessionWriter | None = None
        self.lines: deque[LogLine] = deque(maxlen=LOG_LINES)
        self._seq = 0
        self._warnings: dict[str, tuple[float, str]] = {}  # key -> (last raised, text)
        self._errors: Counter[str] = Counter()
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
        """A failed request: folded into one line per distinct error each second."""
        self._errors[f"{kind}: {text}"[:120]] += 1

    def each_second(self, now: float) -> None:
        for text, n in self._errors.items():
            self.log("error", f"{n} × {text}" if n > 1 else text)
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
