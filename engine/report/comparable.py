"""Comparable, or said so: the workload each session ran, and one line when sessions being
compared ran different ones (docs/comparing.md#comparable-or-said-so).

Two sessions' figures at the same load (C, R or a trace's speed) compare servers only when
the same requests were sent: the same input and output lengths, dataset, API and load shape.
A session's workload is read from its steps (each step records the workload it ran and its
mode: concurrency, rate or trace), else from meta.json's "workload" (a session written before
steps recorded it), and the API from its target ("api").

What the readers do with it: `redline report A B` names each session's workload and prints
the warning under the sessions (and no best-at-a-load marks: engine/report/compare.py
align_by_load), the HTML page shows the same line at the top, the gate against a baseline
prints it above its results, a sweep's gate beside best:LABEL.

Pure: sessions in, text out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Sequence

from ..measure.step_result import StepResult
from ..rules.workloads import workload_key as _items, workload_text as _text


class SessionSummary(Protocol):
    """What this reads of a session (engine/report/compare.py SessionSummary: it imports this
    module, so this one names only the shape; read-only, as that frozen dataclass's fields are)."""

    @property
    def label(self) -> str: ...
    @property
    def steps(self) -> tuple[StepResult, ...]: ...
    @property
    def target(self) -> dict[str, Any]: ...
    @property
    def workload(self) -> dict[str, Any]: ...

    def by_load(self) -> Mapping[Any, StepResult]: ...


_DEFAULT_MODE = "concurrency"


@dataclass(frozen=True)
class Workload:
    """What a session sent: each distinct step workload in order (a live change makes more
    than one), the API and the load shapes (modes) of its steps."""

    parts: tuple[tuple[tuple[str, Any], ...], ...] = ()
    api: str | None = None
    modes: tuple[str, ...] = ()

    def differs(self, other: Workload) -> bool:
        """Whether the two ran different workloads, by what both recorded (a session that did
        not record its API, say, is not held against one that did)."""
        return any(a and b and a != b for a, b in ((self.parts, other.parts), (self.api, other.api),
                                                   (self.modes, other.modes)))

    def text(self, show_dataset: bool = False, show_mode: bool = False) -> str:
        """`1024 in / 2048 out, chat`; the dataset when it is not random (or `show_dataset`),
        the mode when it is not concurrency (or `show_mode`), any other setting (turns) named."""
        pieces = [_text(p, show_dataset) for p in self.parts] or ["workload not recorded"]
        out = " then ".join(pieces)
        if self.api:
            out += f", {self.api}"
        if self.modes and (show_mode or self.modes != (_DEFAULT_MODE,)):
            out += ", " + "+".join(self.modes)
        return out


def session_workload(session: SessionSummary) -> Workload:
    """The workload a session ran (see the module docstring)."""
    parts: list[tuple] = []
    for st in session.steps:
        p = _items(st.workload)
        if p and p not in parts:
            parts.append(p)
    if not parts:
        p = _items(getattr(session, "workload", None))
        if p:
            parts.append(p)
    modes: list[str] = []
    for st in session.steps:
        if st.mode and st.mode not in modes:
            modes.append(st.mode)
    api = session.target.get("api") if isinstance(session.target, dict) else None
    return Workload(tuple(parts), str(api) if api else None, tuple(sorted(modes)))


def same_workload(sessions: Sequence[SessionSummary]) -> bool:
    """Whether every session ran the same workload (what one did not record is not held
    against the others: Workload.differs)."""
    ws = [session_workload(s) for s in sessions]
    return not any(a.differs(b) for i, a in enumerate(ws) for b in ws[i + 1:])


def workload_texts(sessions: Sequence[SessionSummary]) -> list[str]:
    """Each session's workload, in the same words for all: the dataset and the mode named
    for every one when they differ between them."""
    ws = [session_workload(s) for s in sessions]
    datasets = {dict(p).get("dataset") for w in ws for p in w.parts}
    show_dataset = len(datasets) > 1
    show_mode = len({w.modes for w in ws if w.modes}) > 1
    return [w.text(show_dataset, show_mode) for w in ws]


def workload_warning(sessions: Sequence[SessionSummary], names: Sequence[str] | None = None,
                     at: str | None = None) -> str | None:
    """One line when the sessions ran different workloads, else None:
    `warning: these sessions ran different workloads (a: 1024 in / 2048 out, chat; b: 32 in /
    128 out, chat): figures at the same C are not comparable`. `names`: how each session is
    called (its label by default); `at`: what the loads are (load_word by default)."""
    if len(sessions) < 2 or same_workload(sessions):
        return None
    at = load_word(sessions) if at is None else at
    return f"warning: these sessions ran different workloads ({_each(sessions, names)}): figures at the same {at} are not comparable"


def workload_warning_first(sessions: Sequence[SessionSummary]) -> str | None:
    """The same warning with its verdict first, for a place that may cut it (the TUI's curve
    over `--compare`): `not comparable at the same C: different workloads (this session: 1024
    in / 2048 out; b: 32 in / 128 out, chat)`."""
    if len(sessions) < 2 or same_workload(sessions):
        return None
    return f"not comparable at the same {load_word(sessions)}: different workloads ({_each(sessions, None)})"


def _each(sessions: Sequence[SessionSummary], names: Sequence[str] | None) -> str:
    names = [s.label for s in sessions] if names is None else list(names)
    return "; ".join(f"{n}: {t}" for n, t in zip(names, workload_texts(sessions), strict=False))


def workload_line(sessions: Sequence[SessionSummary], names: Sequence[str] | None = None) -> str:
    """The line a comparison gate prints above its results: the warning when the sessions ran
    different workloads, else the one workload they all ran (`workload: 1024 in / 2048 out,
    chat, the same for both`)."""
    warning = workload_warning(sessions, names)
    if warning is not None:
        return warning
    texts = workload_texts(sessions)
    return f"workload: {texts[0] if texts else 'none'}, the same for " + ("both" if len(texts) == 2 else "all")


def load_word(sessions: Sequence[SessionSummary]) -> str:
    """What the sessions' loads are called in the warning: `C`, `rate` or `load`."""
    kinds = {k.kind for s in sessions for k in s.by_load()}
    return "C" if kinds <= {"C"} else "rate" if kinds == {"R"} else "load"


__all__ = ["Workload", "load_word", "same_workload", "session_workload", "workload_line", "workload_texts", "workload_warning"]
