"""Operator commands, as typed messages: what the TUI, a host or a test asks the engine to do.

Every host (engine/host.py: a thread or a child process) carries these objects unchanged
and answers each with a concurrent.futures.Future of the engine's reply, so a caller that
needs an acknowledgement (export waits for the session flush) can wait for one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Union

if TYPE_CHECKING:
    from ..measure.slo import Slo
    from ..preset import Preset
    from ..workload.change import WorkloadChange


@dataclass(frozen=True)
class SetConcurrency:
    n: int
    raise_max: bool = False  # the operator confirmed a value above --max-concurrency


@dataclass(frozen=True)
class SetRate:
    """Open-loop rate mode at `rate` requests/s (switches from concurrency mode)."""

    rate: float


@dataclass(frozen=True)
class ToggleMode:
    """Switch between concurrency (closed-loop) and rate (open-loop) mode; the engine
    picks the other mode's last value (a rate near the achieved one the first time)."""


@dataclass(frozen=True)
class SetWorkload:
    """Change the workload mid-session (a new step starts)."""

    change: WorkloadChange


@dataclass(frozen=True)
class TogglePause:
    pass


@dataclass(frozen=True)
class Probe:
    """Abort everything in flight, then hold C=1 (the previous C is remembered)."""


@dataclass(frozen=True)
class Restore:
    """Back to the concurrency held before the probe."""


@dataclass(frozen=True)
class Abort:
    pass


@dataclass(frozen=True)
class StartPreset:
    preset: Preset


@dataclass(frozen=True)
class CancelPreset:
    pass


@dataclass(frozen=True)
class Flush:
    """Hand every buffered session row to the OS; the reply comes once it is written."""


@dataclass(frozen=True)
class ToggleLane:
    """The probe lane: one request at a time beside the load, kept out of its figures."""


@dataclass(frozen=True)
class StartProfile:
    """Start the server's profiler at the load held now, for `seconds` (None: --profile-s)
    or until the step ends (engine/run/server_ops.py)."""

    seconds: float | None = None


@dataclass(frozen=True)
class SetSlo:
    slo: Slo | None  # None turns SLOs off


@dataclass(frozen=True)
class Log:
    kind: str
    text: str


@dataclass(frozen=True)
class Stop:
    reason: str = "quit"


Command = Union[SetConcurrency, SetRate, ToggleMode, SetWorkload, TogglePause, Probe, Restore, Abort, StartPreset, CancelPreset, Flush, ToggleLane, StartProfile, SetSlo, Log, Stop]

# commands that take the wheel from a running preset
OPERATOR_TAKES_OVER = (SetConcurrency, SetRate, ToggleMode, SetWorkload, Probe, Abort)
# the preset runner's commands: what they start shows at the next snapshot, not at once (a
# preset's task sets its progress line once it runs: a snapshot now would say a preset runs
# with no line yet)
SHOWN_LATER = (StartPreset, StartProfile)
