"""The server's own view of one step, from the /metrics samples taken while it measured.

A step (engine/measure/accumulator.py) feeds every server sample taken inside its window here (each sample
once: a stale one repeated by the hub is not counted twice) and reads back, beside the client's
own figures:

- ``server_gen_throughput``: the mean of the server's generation throughput (SGLang's
  ``sglang:gen_throughput``; vLLM's counter between scrapes);
- ``server_kv_usage`` / ``server_kv_usage_max``: the mean and the highest KV-cache use, 0..1;
- ``server_preemptions``: requests the server preempted during the window (its cumulative
  counter's increase from the first sample to the last: vLLM ``num_preemptions_total``, SGLang
  retractions; a series that appears during the window, as SGLang's does at its first
  retraction, counts from 0);
- ``spec_accept_length`` / ``spec_acceptance_rate``: speculative decoding. From vLLM's counters
  over the window (1 + accepted / drafts, accepted / draft tokens) where the server gives them,
  else the mean of SGLang's gauges (none while they read 0.0: speculative decoding off).

Every figure is None when no sample in the window carried it.
"""

from __future__ import annotations

from .server_metrics import spec_from_counters
from .types import ServerSample

__all__ = ["ServerStepView"]


class _Mean:
    __slots__ = ("total", "n", "top")

    def __init__(self) -> None:
        self.total = 0.0
        self.n = 0
        self.top: float | None = None

    def add(self, v: float | None) -> None:
        if v is None:
            return
        self.total += v
        self.n += 1
        self.top = v if self.top is None or v > self.top else self.top

    def mean(self, digits: int) -> float | None:
        return round(self.total / self.n, digits) if self.n else None


class _Delta:
    """A cumulative counter's increase over the samples seen (restarts: counted anew). A
    sample without the counter before its first one counts it 0: SGLang's counters have no
    series until their first increment, so a step whose first retractions make the series
    appear counts them (the series' first value is their number)."""

    __slots__ = ("first", "last", "before", "absent")

    def __init__(self) -> None:
        self.first: float | None = None
        self.last: float | None = None
        self.before = 0.0  # increase counted before a restart
        self.absent = False  # a sample of the window lacked the counter before it appeared

    def add(self, v: float | None) -> None:
        if v is None:
            if self.first is None:
                self.absent = True
            return
        if self.first is None:
            self.first = 0.0 if self.absent else v
            self.last = v
            return
        if self.last is not None and v < self.last:  # the server restarted
            self.before += self.last - (self.first or 0.0)
            self.first = 0.0
        self.last = v

    def value(self) -> float | None:
        if self.first is None or self.last is None:
            return None
        return self.before + self.last - self.first

    @property
    def samples(self) -> bool:
        return self.first is not None


class ServerStepView:
    """Accumulates the server samples of one step's window."""

    def __init__(self) -> None:
        self._seen: float | None = None  # the last sample's time (each sample counts once)
        self.gen = _Mean()
        self.kv = _Mean()
        self.spec_len = _Mean()
        self.spec_rate = _Mean()
        self.preempt = _Delta()
        self.accepted = _Delta()
        self.drafts = _Delta()
        self.draft_tokens = _Delta()

    def note(self, s: ServerSample) -> None:
        if self._seen is not None and s.t <= self._seen:
            return
        self._seen = s.t
        self.gen.add(s.gen_throughput)
        self.kv.add(s.kv_usage)
        self.preempt.add(s.preemptions_total)
        if s.spec_accepted_total is not None and s.spec_drafts_total is not None:
            self.accepted.add(s.spec_accepted_total)
            self.drafts.add(s.spec_drafts_total)
            self.draft_tokens.add(s.spec_draft_tokens_total)
        else:
            self.spec_len.add(s.spec_accept_length)
            self.spec_rate.add(s.spec_acceptance_rate)

    def result(self) -> dict:
        """The step's server figures (StepResult fields)."""
        length = self.spec_len.mean(4)
        rate = self.spec_rate.mean(4)
        acc, drafts, dtok = self.accepted.value(), self.drafts.value(), self.draft_tokens.value()
        if acc is not None and drafts:
            length, rate = spec_from_counters(acc, drafts, dtok or 0.0)
            length = round(length, 4) if length is not None else None
            rate = round(rate, 4) if rate is not None else None
        preempted = self.preempt.value()
        return {
            "server_gen_throughput": self.gen.mean(3),
            "server_kv_usage": self.kv.mean(4),
            "server_kv_usage_max": round(self.kv.top, 4) if self.kv.top is not None else None,
            "server_preemptions": int(round(preempted)) if preempted is not None else None,
            "spec_accept_length": length,
            "spec_acceptance_rate": rate,
        }
