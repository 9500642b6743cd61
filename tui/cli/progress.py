"""A headless run's progress: on a terminal one live status line, rewritten each second (the
load, in flight, tok/s, TTFT p50/p99, done/failed, what the preset's step is doing and how
long it has left); without one (a log, CI) a plain line every `--progress-s` seconds (10).
Step lines and warnings print above it: `say` clears it first, and so does a warning the
engine raises (printed on stderr, the same terminal: it would land after the live line's
text, `... · done redline: warning: ...`)."""

from __future__ import annotations

import asyncio
import sys
from typing import TYPE_CHECKING, TextIO

from ...engine.api import BOUND, ms, rate

if TYPE_CHECKING:
    from ...engine.api import Engine

DEFAULT_EVERY_S = 10.0
CLEAR = "\r\x1b[2K"


class Progress:
    def __init__(self, engine: Engine, every_s: float | None = None, stream: TextIO | None = None) -> None:
        self.e = engine
        self.stream = stream or sys.stdout
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.every_s = 1.0 if self.tty else (every_s or DEFAULT_EVERY_S)
        self._shown = False
        events = getattr(engine, "events", None)
        printer = getattr(events, "on_warning", None)
        if events is not None and printer is not None:  # the headless warning printer (tui/cli/headless.py): the live line cleared first

            def warn(key: str, text: str) -> None:
                self.clear()
                printer(key, text)

            events.on_warning = warn

    def line(self) -> str:
        e = self.e
        s = e.snapshot
        ttft, bound = s.ttft_ms or {}, getattr(s, "ttft_bound", None) or {}

        def ttft_at(q: str) -> str:  # a lower bound (requests still waiting for a first token) reads "≥"
            v = ttft.get(q)
            return (BOUND if bound.get(q) and v is not None else "") + ms(v)

        parts = [f"{e.load_text}", f"in flight {s.in_flight}", f"{rate(s.output_tok_s)} tok/s",
                 f"TTFT p50 {ttft_at('p50')} p99 {ttft_at('p99')}"]
        t = e.totals  # the load's requests only (start-up's and the probe lane's apart), as the end summary counts
        parts += [f"done {t.completed}", f"failed {t.failed}"]
        n = e.config.num_requests
        if n is not None:
            parts.append(f"{t.completed + t.failed}/{n} requests")
        if e.preset_line:
            parts.append(e.preset_line)
        return "redline: " + " · ".join(parts)

    def say(self, text: str) -> None:
        """A line of the run (a step, the break), above the status line."""
        self.clear()
        print(text, file=self.stream, flush=True)

    def clear(self) -> None:
        if self.tty and self._shown:
            self.stream.write(CLEAR)
            self.stream.flush()
            self._shown = False

    def show(self) -> None:
        text = self.line()
        if self.tty:
            width = _columns()
            self.stream.write(CLEAR + text[: max(20, width - 1)])
            self._shown = True
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    async def run(self) -> None:
        """Until cancelled."""
        try:
            while True:
                await asyncio.sleep(self.every_s)
                self.show()
        finally:
            self.clear()


def _columns() -> int:
    import shutil

    return shutil.get_terminal_size((80, 24)).columns
