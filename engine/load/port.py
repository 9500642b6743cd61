"""What the load needs of whoever coordinates it: the one door from load/ up to the engine.

load/ never imports core/ (docs/architecture.md). A worker pool (worker processes or Ray
actors) replays what its workers measured into the coordinator's steps and figures, and
orders them what to stamp on their requests; it does so through this port, which the engine
implements (engine/core/engine_port.py EnginePort), and nothing else of the engine:

- stamps: what a request sent now carries (its step, concurrency label and phase), and the
  step that was open at a given (intended) send time;
- the targets: each one's replay (its Sender's hooks, engine/measure/hooks.py), URL and
  whether it is gone;
- the workload now (a live change reaches every worker);
- held sends (at the in-flight cap) and the held sends given up;
- gap and lag sinks: the workers' inter-token gaps into the live windows and the steps, a
  failed request's gaps back out, the chunks' lags as a histogram delta;
- the window figures workers took at a step's close of the requests out at it;
- warnings (one line, kept on screen while they hold).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, Sequence

if TYPE_CHECKING:
    from ..measure.gap_batch import GapBatch
    from ..measure.histogram import LogHistogram
    from ..measure.records import RequestRecord
    from ..workload.prompts import WorkloadConfig


class TargetReplay(Protocol):
    """One target as a worker's report is replayed into it: its events, fired in the order the
    worker saw them; a remote end first asks the target's own health watch."""

    def on_send(self, rec: RequestRecord) -> None: ...
    def on_first(self, rec: RequestRecord) -> None: ...
    def on_tokens(self, t: float, n: int) -> None: ...
    def on_remote_end(self, rec: RequestRecord) -> None: ...


class LoadPort(Protocol):
    def stamp(self) -> tuple[int, int, str]:
        """(step, concurrency label, phase) for a request sent now."""

    def stamp_at(self, concurrency: int, t: float) -> tuple[int, int, str]:
        """... for one sent (intended, in open loop) at perf_counter time `t`."""

    def listeners(self) -> Sequence[TargetReplay]:
        """Each target's replay, in the targets' order."""

    def urls(self) -> Sequence[str]:
        """Each target's base URL, in the same order."""

    def gone(self) -> tuple[bool, ...]:
        """Which targets are gone (their share goes to the others)."""

    def workload(self) -> WorkloadConfig: ...

    def note_held(self, dropped: bool, t_intended: float | None = None) -> None:
        """A send was held back at the in-flight cap (open loop), due at `t_intended`."""

    def abandon_held(self, times: list[float]) -> None:
        """Held sends that will never go: their steps censor them."""

    def on_gaps(self, gaps: GapBatch) -> None:
        """Gaps measured in a worker (engine/measure/gap_batch.py)."""

    def unmeasure_gaps(self, gaps: GapBatch) -> None:
        """A failed request's gaps leave every figure that counted them."""

    def on_cuts(self, t: float, cuts: list) -> None:
        """The window figures workers took at a step's close `t` of the requests out at it
        (engine/load/worker_messages.py Cut): the closing step's cut reads them."""

    def forget(self, rids: list[int]) -> None:
        """Requests lost with a dead worker: they will never report (the live view stops
        counting them as waiting)."""

    def merge_lags(self, lags: LogHistogram) -> None:
        """The chunks' lags behind the server's send stamps, a histogram delta."""

    def warn(self, text: str, key: str | None = None) -> None: ...
