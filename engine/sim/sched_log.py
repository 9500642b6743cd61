"""What SGLang's scheduler last wrote into its /metrics gauges, and when it writes them.

SGLang's gauges are not read live: the scheduler sets them when it logs a batch, and
/metrics serves the last values set (prometheus_client, ``multiprocess_mode="mostrecent"``).
Read from the wheels:

- **at each prefill batch** (0.5.9 ``managers/scheduler_metrics_mixin.py`` ``log_prefill_stats``,
  0.5.23 ``managers/scheduler_components/metrics_reporter.py`` ``report_prefill_stats``): the
  running count is the running batch *before* the new requests join it
  (``len(self.running_batch.reqs)``, one micro-batch under pp), the queue after admission,
  ``cache_hit_rate`` that batch's hit tokens over its prompt tokens; ``gen_throughput`` is
  left as it was (0.5.23: set to 0 once no decode log came for 30 s,
  ``GEN_THROUGHPUT_STALENESS_SECONDS``);
- **every ``decode_log_interval`` (40) decode iterations** (``log_decode_stats`` /
  ``report_decode_stats``, called from ``process_batch_result_decode`` when
  ``forward_ct_decode % decode_log_interval == 0``): the running count is that batch's size (one
  micro-batch under pp), ``gen_throughput`` the tokens generated since the last decode log over
  the time since it; the spec gauges the accepted tokens per verify step since then, **0.0
  without speculative decoding**; 0.5.9 also sets ``cache_hit_rate`` to 0.0 there (0.5.23
  leaves it: "cache_hit_rate is prefill-owned");
- ``num_retracted_reqs`` is the retractions since the last log (reset at each);
- **when idle**: 0.5.9 writes again only 30 s after the last write
  (``scheduler_runtime_checker_mixin.py`` ``check_memory``: ``last_log_time + 30``), so after a
  load the gauges keep the last decode log's batch for up to 30 s; 0.5.23 writes at once when
  the running gauge disagrees with the idle scheduler (``_maybe_log_idle_metrics``:
  ``gauge_stale``), else every 30 s. Either way ``gen_throughput`` becomes 0.

The idle rule is applied when the gauges are read (:meth:`SchedulerLog.read`): SGLang's idle
check runs continually while it is idle, so a scrape of an idle sim sees what SGLang's would.
At start the gauges hold zeros: SGLang's own warm-up request (``http_server.py``
``_execute_server_warmup``) has been through a prefill log by the time it is ready.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable

__all__ = ["IDLE_REFRESH_S", "LoggedStats", "SchedulerLog"]

#: Seconds after the last write when an idle scheduler writes its gauges again (both
#: versions), and after which 0.5.23 zeroes a gen_throughput no decode log refreshed.
IDLE_REFRESH_S = 30.0


@dataclass(frozen=True)
class LoggedStats:
    """The gauges' values as the scheduler last wrote them."""

    t: float  # when (the clock of the model)
    running: int = 0
    queued: int = 0
    used_tokens: int = 0
    token_usage: float = 0.0
    gen_throughput: float = 0.0
    cache_hit_rate: float = 0.0
    spec_accept_length: float = 0.0
    spec_accept_rate: float = 0.0
    retracted: int = 0  # sglang:num_retracted_reqs: retractions since the write before
    # --enable-priority-scheduling: the counts per request priority (None: off)
    running_by_priority: dict[int | None, int] | None = field(default=None, compare=False)
    queued_by_priority: dict[int | None, int] | None = field(default=None, compare=False)


def _by_priority(priorities: Iterable[int | None], known: set[int | None]) -> dict[int | None, int]:
    """0.5.23 ``QueueCount.from_reqs`` + ``_log_gauge_queue_count``: a count per priority, every
    priority seen before still written (0 when none is there now)."""
    got = collections.Counter(priorities)
    known.update(got)
    return {p: got.get(p, 0) for p in known}


class SchedulerLog:
    """The scheduler's gauge writes for one server (one per scheduler process in SGLang; the
    sim's pp ranks all write the same values)."""

    def __init__(self, version: str, decode_log_interval: int, kv_budget: int, *, spec_draft_tokens: int = 3,
                 priority: bool = False, clock: Callable[[], float]) -> None:
        self.version = version
        self.interval = decode_log_interval
        self.kv_budget = kv_budget
        self.spec_draft_tokens = spec_draft_tokens
        self.priority = priority
        self._clock = clock
        now = clock()
        self.stats = LoggedStats(t=now, running_by_priority={} if priority else None,
                                 queued_by_priority={} if priority else None)
        self.writes = 0
        self._decodes = 0  # forward_ct_decode
        self._tokens = 0  # generated since the last decode log
        self._last_decode_t = now
        self._spec_tokens = 0
        self._spec_steps = 0
        self._retracted = 0
        self._known_running: set[int | None] = set()
        self._known_queued: set[int | None] = set()

    # -- what the scheduler tells it -------------------------------------------------------
    def retracted(self, n: int) -> None:
        self._retracted += n

    def _counts(self, running: list[int | None], queued: list[int | None]) -> dict:
        if not self.priority:
            return {}
        return {"running_by_priority": _by_priority(running, self._known_running),
                "queued_by_priority": _by_priority(queued, self._known_queued)}

    def _gen_throughput(self, now: float) -> float:
        g = self.stats.gen_throughput
        if self.version != "0.5.9" and now - self._last_decode_t > IDLE_REFRESH_S:
            return 0.0  # 0.5.23 _current_gen_throughput: decayed once decode logs stopped
        return g

    def prefill(self, running: list[int | None], queued: list[int | None], used_tokens: int,
                hit_tokens: int, prompt_tokens: int) -> None:
        """A prefill batch was scheduled: ``running`` the priorities of the batch it joins
        (before it), ``queued`` those still waiting, ``used_tokens`` the KV in use."""
        now = self._clock()
        self._write(now, running=len(running), queued=len(queued), used_tokens=used_tokens,
                    gen_throughput=self._gen_throughput(now),
                    cache_hit_rate=hit_tokens / prompt_tokens if prompt_tokens > 0 else 0.0,
                    **self._counts(running, queued))

    def decode(self, batch: list[int | None], queued: list[int | None], used_tokens: int, tokens: int,
               spec_steps: int = 0, spec_tokens: int = 0) -> None:
        """A decode iteration of ``batch`` (the priorities of its requests) made ``tokens``."""
        self._decodes += 1
        self._tokens += tokens
        self._spec_steps += spec_steps
        self._spec_tokens += spec_tokens
        if self._decodes % self.interval:
            return
        now = self._clock()
        gap = now - self._last_decode_t
        self._last_decode_t = now
        gen = self._tokens / gap if gap > 0 else self.stats.gen_throughput
        self._tokens = 0
        length = rate = 0.0
        if self._spec_steps:
            length = self._spec_tokens / self._spec_steps
            rate = (length - 1.0) / self.spec_draft_tokens
            self._spec_steps = self._spec_tokens = 0
        extra = {"cache_hit_rate": 0.0} if self.version == "0.5.9" else {}
        self._write(now, running=len(batch), queued=len(queued), used_tokens=used_tokens, gen_throughput=gen,
                    spec_accept_length=length, spec_accept_rate=rate, **extra, **self._counts(batch, queued))

    def _write(self, now: float, **values: Any) -> None:  # Any: SchedStats fields, each its own type
        used = values.get("used_tokens", self.stats.used_tokens)
        self.stats = replace(self.stats, t=now, token_usage=used / self.kv_budget if self.kv_budget else 0.0,
                             retracted=self._retracted, **values)
        self._retracted = 0
        self.writes += 1

    def flushed(self) -> None:
        """/flush_cache ran (``reset_metrics``): the decode count and the tokens since the last
        decode log start again."""
        self._decodes = 0
        self._tokens = 0
        self._spec_steps = self._spec_tokens = 0

    # -- what /metrics reads ---------------------------------------------------------------
    def read(self, idle: bool, queued: list[int | None], used_tokens: int) -> LoggedStats:
        """The gauges now; ``idle``: the scheduler has no running request (its idle check
        runs, and may write)."""
        if idle:
            now = self._clock()
            s = self.stats
            stale = s.running != 0 if self.version != "0.5.9" else False
            if stale or now > s.t + IDLE_REFRESH_S:
                self._write(now, running=0, queued=len(queued), used_tokens=used_tokens, gen_throughput=0.0,
                            **self._counts([], queued))
        return self.stats
