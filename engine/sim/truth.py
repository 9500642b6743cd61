"""The simulator's own record of every streamed request: the ground truth tests measure
redline against (served at ``/sim/requests``).

Times are the sim's wall clock (``time.time()``) on the same host as the client: when the
request's handler started (arrival), when each token chunk was written (the same stamp it
carries as ``sim_t``), and when the stream ended.

Texts (``/sim/requests?text=1``): ``prompt_tail``, the last characters of the prompt text the
request carried (chat: its messages' contents joined by newlines; completions: the prompt;
/generate: the text; "" for token ids), and ``answer``, the answer text the sim sent (cut at
``ANSWER_CHARS``). Only the most recent ``TEXT_KEEP`` requests keep them (older ones: None),
so a long run's log stays small; without ``text=1`` they are not served at all.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

TRUTH_KEEP = 50_000  # most recent requests kept
TEXT_KEEP = 4_000  # most recent requests that keep their prompt tail and answer text
ANSWER_CHARS = 4_000  # answer text kept per request (its start)


class TruthRecord:
    __slots__ = ("index", "t_arrive", "chunk_times", "chunk_tokens", "t_end", "outcome", "prompt_tokens",
                 "prompt_tail", "_answer", "_answer_room", "cached_tokens", "preempted")

    def __init__(self, index: int) -> None:
        self.index = index
        self.t_arrive = time.time()
        self.chunk_times: list[float] = []
        self.chunk_tokens: list[int] = []
        self.t_end: float | None = None
        self.outcome: str | None = None
        self.prompt_tokens: int | None = None
        self.prompt_tail: str | None = None  # set once the request is parsed
        self.cached_tokens: int | None = None  # prompt tokens found in the prefix cache (once admitted)
        self.preempted = 0  # times the model retracted it (KV budget full)
        self._answer: list[str] | None = []  # None once its texts are dropped
        self._answer_room = ANSWER_CHARS

    def chunk(self, t: float, tokens: int, text: str = "") -> None:
        """A chunk of ``tokens`` tokens written at ``t``; ``text``: the new text it carried."""
        self.chunk_times.append(t)
        self.chunk_tokens.append(tokens)
        if self._answer_room > 0 and text:
            self.add_answer(text)

    def add_answer(self, text: str) -> None:
        """More answer text sent (kept up to ANSWER_CHARS)."""
        room = self._answer_room
        if room > 0 and self._answer is not None:
            self._answer.append(text if len(text) <= room else text[:room])
            self._answer_room = room - len(text)

    @property
    def answer(self) -> str | None:
        """The answer text sent so far (its first ANSWER_CHARS), None once dropped."""
        return None if self._answer is None else "".join(self._answer)

    def set_prompt_tail(self, tail: str) -> None:
        """The end of the prompt text the request carried (ignored once texts are dropped)."""
        if self._answer is not None:
            self.prompt_tail = tail

    def drop_text(self) -> None:
        self.prompt_tail = None
        self._answer = None
        self._answer_room = 0

    def end(self, outcome: str) -> None:
        if self.t_end is None:
            self.t_end = time.time()
            self.outcome = outcome

    def to_dict(self, chunks: bool, text: bool = False) -> dict[str, Any]:
        ct = self.chunk_times
        d: dict[str, Any] = {
            "index": self.index,
            "t_arrive": self.t_arrive,
            "t_first": ct[0] if ct else None,
            "t_last": ct[-1] if ct else None,
            "t_end": self.t_end,
            "tokens": sum(self.chunk_tokens),
            "chunks": len(ct),
            "prompt_tokens": self.prompt_tokens,
            "outcome": self.outcome,
            "cached_tokens": self.cached_tokens,
            "preempted": self.preempted,
        }
        if chunks:
            d["chunk_times"] = list(ct)
            d["chunk_tokens"] = list(self.chunk_tokens)
        if text:
            d["prompt_tail"] = self.prompt_tail
            d["answer"] = self.answer
        return d


class TruthLog:
    def __init__(self) -> None:
        self.records: deque[TruthRecord] = deque(maxlen=TRUTH_KEEP)
        self._texts: deque[TruthRecord] = deque()  # the most recent TEXT_KEEP: they keep texts

    def start(self, index: int) -> TruthRecord:
        rec = TruthRecord(index)
        self.records.append(rec)
        texts = self._texts
        if len(texts) >= TEXT_KEEP:
            texts.popleft().drop_text()
        texts.append(rec)
        return rec

    def dump(self, chunks: bool = False, text: bool = False) -> list[dict[str, Any]]:
        return [r.to_dict(chunks, text) for r in self.records]


def _p(values: list[float], q: float) -> float | None:
    """Linear-interpolated quantile (numpy's default)."""
    if not values:
        return None
    s = sorted(values)
    n = len(s)
    pos = q * (n - 1)
    lo = int(pos)
    return s[lo] + (s[min(lo + 1, n - 1)] - s[lo]) * (pos - lo)


def _median(values: list[float]) -> float | None:
    return _p(values, 0.5)


def window_truth(records: list[dict[str, Any]], t_start: float, t_end: float) -> dict[str, Any]:
    """What the sim's clock says about a step window [t_start, t_end] (epoch seconds), in
    redline's step terms: TTFT of the requests that arrived in it and got their first token
    before it ended, E2E of those that also ended, the gaps between chunks written in it.
    Records come from ``/sim/requests?chunks=1``."""
    sent = [r for r in records if t_start <= r["t_arrive"] < t_end]
    ttft = [(r["t_first"] - r["t_arrive"]) * 1000 for r in sent if r["t_first"] is not None and r["t_first"] <= t_end]
    e2e = [(r["t_end"] - r["t_arrive"]) * 1000 for r in sent if r["outcome"] == "completed" and r["t_end"] is not None and r["t_end"] <= t_end]
    ttft_all = [(r["t_first"] - r["t_arrive"]) * 1000 for r in sent if r["t_first"] is not None]
    e2e_all = [(r["t_end"] - r["t_arrive"]) * 1000 for r in sent if r["outcome"] == "completed" and r["t_end"] is not None]
    # E2E as the step counts it: its own inside the window, else its age at the close (a bound)
    e2e_step = [(min(r["t_end"] if r["t_end"] is not None else t_end, t_end) - r["t_arrive"]) * 1000 for r in sent]
    gaps: list[float] = []
    for r in records:
        ct = r.get("chunk_times") or []
        gaps.extend((ct[i] - ct[i - 1]) * 1000 for i in range(1, len(ct)) if t_start <= ct[i] <= t_end)
    gaps.sort()
    return {
        "sent": len(sent),
        "first_token": len(ttft),
        "completed": len(e2e),
        "median_ttft_ms": _median(ttft),
        "median_ttft_all_ms": _median(ttft_all),  # every request sent in it, first token whenever
        "median_e2e_ms": _median(e2e),
        "median_e2e_all_ms": _median(e2e_all),  # every request sent in it, ended whenever
        "median_e2e_step_ms": _median(e2e_step),  # ... ended after the close: its age then
        "p99_ttft_all_ms": _p(ttft_all, 0.99),
        "p99_e2e_all_ms": _p(e2e_all, 0.99),
        "completed_all": len(e2e_all),
        "median_gap_ms": _median(gaps),
        "p90_gap_ms": gaps[int(0.9 * (len(gaps) - 1))] if gaps else None,
        "gaps": len(gaps),
    }
