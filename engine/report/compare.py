"""Several sessions side by side: load them, align their steps by load, pick the best
session per load, find each session's knee, and the efficiency figures.

Pure data: no drawing, no text tables (tui/cli/report.py formats, tui/plots.py draws).

Definitions, so the report, the curves and the tests agree:

- A step's load (`Load`, `step_load`) is what the operator or the preset set: its
  concurrency C in closed loop, its offered request rate R in open loop (rate mode: the
  step's C is only the in-flight cap, the same for every rate), its speed factor in a trace
  replay. Steps are aligned, tabled and drawn by it: rate steps by R, never at the cap.
- A session's curve has one point per load (engine/rules/verdicts.py one_per_load). When a
  session measured the same load more than once (the operator came back to it in the TUI,
  a replay preset, a knee search confirming a stall), its latest step that decides (steady,
  noise known, output tokens) stands for it, else its latest (verdicts.stand_for: the search
  keeps its points by the same rule); a short period (StepResult.short) is no point of the curve.
- Best session at a load: the highest output tok/s among the sessions with a step there; a
  tie (equal to 0.1 tok/s, the precision shown) goes to the lower p99 TTFT, then to the fewer
  failed requests, then to the session named first. No session is marked where fewer than
  two sessions have a step at that load (nothing to compare), nor anywhere when the sessions
  ran different workloads (engine/report/comparable.py: their figures are not comparable).
- Knee: engine/rules/verdicts.py's, the one definition: what summary.json recorded
  (knee_concurrency, knee_reason, max_throughput_concurrency; knee_rate over rates; `knees`,
  one per workload, when the session ran more than one), else (a session written before it
  did) the same verdict over its steps, by load, one per workload.
- Efficiency: tok/s per W is output tokens per joule (tok/s / W = tok/J); J per output
  token is its inverse. From the step's own fields, else from its mean GPU power; None
  without GPU telemetry.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, NamedTuple, Sequence

from ..measure.step_result import BreakResult, StepResult
from ..rules.step_text import as_break
from ..rules.verdicts import KINDS as VERDICT_KINDS, Knee, knees_from_summary, load_key, one_per_load, session_knees
from ..session.paths import META, SessionError, check_session_dir
from .comparable import same_workload
from .session_text import _load_json, load_summary

KINDS = VERDICT_KINDS  # concurrency, request rate (req/s), trace speed factor: the order of rows


class Load(NamedTuple):
    """Where a step is placed: kind "C" (concurrency), "R" (offered req/s) or "x" (trace speed)."""

    kind: str
    value: float

    @property
    def label(self) -> str:
        """`C=8`, `R=2.5/s`, `x2` (as StepResult.load writes them)."""
        if self.kind == "R":
            return f"R={self.value:g}/s"
        if self.kind == "x":
            return f"x{self.value:g}"
        return f"C={self.value:g}"

    @property
    def short(self) -> str:
        """The value alone under a column that names the kind: `8`, `2.5`, `x2`."""
        return self.label if self.kind == "x" else f"{self.value:g}"

    def sort_key(self) -> tuple[int, float]:
        return KINDS.index(self.kind), self.value


def step_load(s: StepResult) -> Load:
    """The load a step is aligned and drawn at (engine/rules/verdicts.py load_key)."""
    return Load(*load_key(s))


def axis_title(kind: str) -> str:
    """The x axis (and a table's first column) for loads of `kind`."""
    return {"R": "request rate (req/s)", "x": "trace speed"}.get(kind, "concurrency")


@dataclass(frozen=True)
class SessionSummary:
    """What a comparison needs of one session."""

    label: str
    steps: tuple[StepResult, ...] = ()  # measured steps, in session order; no probe
    break_result: BreakResult | None = None
    probe: StepResult | None = None
    path: Path | None = None  # None for the live session in the TUI
    target: dict[str, Any] = field(default_factory=dict)
    server_info: dict[str, Any] = field(default_factory=dict)
    knees_record: tuple[Knee, ...] = ()  # the knees summary.json recorded, one per workload, the session's last (none: it recorded none)
    workload: dict[str, Any] = field(default_factory=dict)  # meta.json's (the steps' own come first: comparable.py)

    @property
    def knees(self) -> tuple[Knee, ...]:
        """The session's knees (engine/rules/verdicts.py), one per workload it ran, the last the
        session's: as recorded, else over its steps."""
        return self.knees_record or tuple(session_knees(self.steps))

    @property
    def knee(self) -> Knee:
        """The session's knee (engine/rules/verdicts.py): its last workload's, as recorded, else over its steps."""
        return self.knees[-1]

    def by_load(self) -> dict[Load, StepResult]:
        """One step per load, concurrencies first, then rates, then trace speeds, each
        increasing (see the module docstring)."""
        return {Load(*key): s for key, s in one_per_load(self.steps).items()}

    def by_concurrency(self) -> dict[int, StepResult]:
        """One step per concurrency of the closed-loop steps, in increasing C (rate steps are
        not placed at their in-flight cap: see by_load)."""
        return {int(k.value): s for k, s in self.by_load().items() if k.kind == "C"}

    @property
    def kind(self) -> str:
        """The session's main kind of load: the one it measured most loads of (C on a tie)."""
        counts = {k: 0 for k in KINDS}
        for key in self.by_load():
            counts[key.kind] += 1
        return max(KINDS, key=lambda k: (counts[k], -KINDS.index(k)))

    @property
    def concurrencies(self) -> list[int]:
        return sorted({s.concurrency for s in self.steps if step_load(s).kind == "C"})

    @property
    def has_power(self) -> bool:
        return any(tokens_per_watt(s) is not None for s in self.steps)


@dataclass(frozen=True)
class Row:
    """One load across sessions: cells[i] is session i's step there, or None."""

    load: Load
    cells: tuple[StepResult | None, ...]
    best: int | None  # index of the best session at this load (see best_index)

    @property
    def concurrency(self) -> int | None:
        """The row's C (None for a rate or trace-speed row)."""
        return int(self.load.value) if self.load.kind == "C" else None


# -- loading -------------------------------------------------------------------------------

def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _step(d: Any, where: str) -> StepResult:
    if not isinstance(d, dict):
        raise SessionError(f"{where}: expected a step object, got {type(d).__name__}")
    try:
        s = StepResult.from_dict(d)
    except TypeError as exc:
        raise SessionError(f"{where}: not a step result ({exc})") from None
    if not (isinstance(s.concurrency, int) and not isinstance(s.concurrency, bool) and s.concurrency >= 1):
        raise SessionError(f"{where}: concurrency {s.concurrency!r} is not a whole number >= 1")
    if not _num(s.output_throughput):
        raise SessionError(f"{where}: output_throughput {s.output_throughput!r} is not a number")
    for name in ("median_ttft_ms", "p99_ttft_ms", "p99_itl_ms", "mean_power_w",
                 "tokens_per_joule", "joules_per_token"):
        v = getattr(s, name)
        if v is not None and not _num(v):
            raise SessionError(f"{where}: {name} {v!r} is not a number")
    return s


def load_session(session_dir: str | os.PathLike) -> SessionSummary:
    """One session directory; a SessionError (one line) if it is not a readable session."""
    d = check_session_dir(session_dir)
    meta = _load_json(d / META)
    summ = load_summary(d)
    where = f"{d / 'summary.json'}"
    raw_steps = summ.get("steps") or []
    if not isinstance(raw_steps, list):
        raise SessionError(f"{where}: \"steps\" is not a list")
    steps = [_step(s, f"{where} step {i + 1}") for i, s in enumerate(raw_steps)]
    steps = [s for s in steps if s.phase != "probe"]
    probe = summ.get("probe")
    probe = _step(probe, f"{where} probe") if probe is not None else None
    br = summ.get("break")
    if br is not None and not isinstance(br, dict):
        raise SessionError(f"{where}: \"break\" is not an object")
    try:
        brk = as_break(br)
    except TypeError as exc:
        raise SessionError(f"{where}: \"break\" is not a break result ({exc})") from None
    label = meta.get("label") or summ.get("label") or d.resolve().name
    target = summ.get("target") or meta.get("target") or {}
    info = meta.get("server_info") or {}
    workload = meta.get("workload")
    return SessionSummary(
        label=str(label),
        steps=tuple(steps),
        break_result=brk,
        probe=probe,
        path=d,
        target=target if isinstance(target, dict) else {},
        server_info=info if isinstance(info, dict) else {},
        knees_record=tuple(knees_from_summary(summ)),
        workload=workload if isinstance(workload, dict) else {},
    )


def load_sessions(dirs: Iterable[str | os.PathLike]) -> list[SessionSummary]:
    """Every directory, in order. Labels are made unique: a label two sessions share gets the
    directory name appended ("tp8 (run2)"), then a number if that is still not enough."""
    sessions = [load_session(d) for d in dirs]
    return unique_labels(sessions)


def unique_labels(sessions: Sequence[SessionSummary]) -> list[SessionSummary]:
    from dataclasses import replace

    counts: dict[str, int] = {}
    for s in sessions:
        counts[s.label] = counts.get(s.label, 0) + 1
    out: list[SessionSummary] = []
    seen: set[str] = set()
    for s in sessions:
        label = s.label
        if counts[label] > 1 and s.path is not None:
            label = f"{label} ({s.path.resolve().name})"
        base, n = label, 2
        while label in seen:
            label = f"{base} #{n}"
            n += 1
        seen.add(label)
        out.append(s if label == s.label else replace(s, label=label))
    return out


def session_from_steps(
    label: str,
    steps: Iterable[StepResult],
    break_result: BreakResult | None = None,
    probe: StepResult | None = None,
    knee: Knee | None = None,
) -> SessionSummary:
    """A SessionSummary of steps held in memory (the live session in the TUI); `knee`: the
    session's verdict as the engine gives it (Snapshot.knee: its search, its plateau_gain),
    else the knee over these steps."""
    return SessionSummary(
        label=label,
        steps=tuple(s for s in steps if s.phase != "probe"),
        break_result=break_result,
        probe=probe,
        knees_record=(knee,) if knee is not None else (),
    )


# -- aligning ------------------------------------------------------------------------------

def _rank(s: StepResult) -> tuple[float, float, int]:
    """Sort key, smaller is better: more tok/s (to 0.1), lower p99 TTFT, fewer failures."""
    ttft = s.p99_ttft_ms if s.p99_ttft_ms is not None else math.inf
    return (-round(s.output_throughput, 1), ttft, s.failed)


def best_index(cells: Sequence[StepResult | None]) -> int | None:
    """Index of the best step among cells (None entries skipped); None with fewer than two."""
    present = [(i, c) for i, c in enumerate(cells) if c is not None]
    if len(present) < 2:
        return None
    return min(present, key=lambda ic: (_rank(ic[1]), ic[0]))[0]


def align_by_load(sessions: Sequence[SessionSummary]) -> list[Row]:
    """One row per load any session measured: concurrencies in increasing C, then rates in
    increasing R, then trace speeds. No row has a best session when the sessions ran
    different workloads (comparable.py same_workload)."""
    per = [s.by_load() for s in sessions]
    loads = sorted({k for p in per for k in p}, key=Load.sort_key)
    comparable = same_workload(sessions)
    rows = []
    for k in loads:
        cells = tuple(p.get(k) for p in per)
        rows.append(Row(load=k, cells=cells, best=best_index(cells) if comparable else None))
    return rows


align_by_concurrency = align_by_load  # the name the closed-loop reports knew it by


def best_per_row(rows: Sequence[Row]) -> list[int | None]:
    """For each row, the index of the best session there (None where not compared)."""
    return [best_index(r.cells) for r in rows]


def knee_load(session: SessionSummary) -> Load | None:
    """The session's knee as a load (engine/rules/verdicts.py knee); None without one."""
    k = session.knee
    return None if k.value is None else Load(k.kind, float(k.value))


def max_throughput_load(session: SessionSummary) -> Load | None:
    """The load that gave the session's most output tok/s (beside its knee)."""
    k = session.knee
    return None if k.max_throughput is None else Load(k.kind, float(k.max_throughput))


def knee(session: SessionSummary) -> float | None:
    """The knee's value: a concurrency (int) for a closed-loop session, a rate in req/s for
    one over rates; None without a knee. knee_load() says which."""
    k = knee_load(session)
    if k is None:
        return None
    return int(k.value) if k.kind == "C" else k.value


def knee_step(session: SessionSummary) -> StepResult | None:
    """The step drawn at the knee (the by_load() step at knee_load(session)), if any."""
    k = knee_load(session)
    return None if k is None else session.by_load().get(k)


# -- efficiency ----------------------------------------------------------------------------

def tokens_per_watt(step: StepResult) -> float | None:
    """Output tok/s per W of summed GPU power (= output tokens per joule), or None."""
    if step.tokens_per_joule is not None:
        return step.tokens_per_joule
    if step.mean_power_w:
        return step.output_throughput / step.mean_power_w
    return None


def joules_per_token(step: StepResult) -> float | None:
    """J of GPU energy per output token, or None (also when no token came out)."""
    if step.joules_per_token is not None:
        return step.joules_per_token
    if step.mean_power_w and step.output_throughput > 0:
        return step.mean_power_w / step.output_throughput
    return None


def any_power(sessions: Sequence[SessionSummary]) -> bool:
    """Whether any session has GPU telemetry on any step (efficiency columns are shown)."""
    return any(s.has_power for s in sessions)
