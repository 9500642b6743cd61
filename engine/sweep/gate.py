"""Gates over a sweep (`redline sweep ... --gate`, `redline report OUT --gate`): each condition
of a session gate (`knee>=64`, `errors<=1%`: engine/rules/gate_conditions.py) must hold for
every configuration that ran (with --repeats, in every repeat), and `best:LABEL` says which
configuration must give the most output tok/s (with repeats: its best load's mean)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..rules.gate_conditions import GateError, parse_gate


class SweepGateError(ValueError):
    """A bad sweep gate: one line."""


@dataclass(frozen=True)
class SweepGate:
    conditions: tuple  # rules/gate_conditions.py Conditions, each checked on every configuration
    best: str | None = None  # best:LABEL


def parse_sweep_gate(text: str) -> SweepGate:
    best = None
    rest = []
    for part in [p.strip() for p in text.split(",") if p.strip()]:
        if part.startswith("best:"):
            best = part[len("best:"):].strip()
            if not best:
                raise SweepGateError(f"--gate {text!r}: best: names a configuration's label, e.g. best:tp8-pp1-mb64")
        else:
            rest.append(part)
    try:
        conds = tuple(parse_gate(",".join(rest))) if rest else ()
    except GateError as exc:
        raise SweepGateError(str(exc)) from None
    if any(c.relative is not None for c in conds):
        raise SweepGateError(f"--gate {text!r}: a change needs a baseline; a sweep gate takes absolute conditions (knee>=64) and best:LABEL")
    return SweepGate(conds, best)


def check_sweep(gate: SweepGate, doc: dict[str, Any]) -> tuple[list[str], bool]:
    """PASS/FAIL lines and whether every one passed."""
    from ..report.gate import GateSession, evaluate

    entries = [e for e in doc.get("configurations") or [] if isinstance(e, dict)]
    ran = [e for e in entries if e.get("status") == "completed" and e.get("session_dir")]
    lines, ok = ["gate"], True
    for e in entries:
        if e.get("status") != "completed":
            lines.append(f"  FAIL  {e.get('label')}: {e.get('status')}" + (f" ({e['why']})" if e.get("why") else ""))
            ok = False
    for e in ran:
        if not gate.conditions:
            break
        runs = [r["session_dir"] for r in e.get("runs") or [] if isinstance(r, dict) and r.get("session_dir")]
        for k, d in enumerate(runs or [e["session_dir"]], 1):  # with --repeats: every repeat's session
            session = GateSession.load(d)
            name = e["label"] if len(runs) < 2 else f"{e['label']} r{k}"
            for o in evaluate(list(gate.conditions), session):
                lines.append(f"  {'PASS' if o.passed else 'FAIL'}  {name}: {o.condition.text}  {o.detail}")
                ok = ok and o.passed
    if gate.best is not None:
        warning = _workload_warning(ran)  # comparable, or said so (engine/report/comparable.py)
        if warning:
            lines.append(f"  {warning}")
        labels = [e.get("label") for e in entries]
        if gate.best not in labels:
            lines.append(f"  FAIL  best:{gate.best}: no such configuration (labels: {', '.join(map(str, labels))})")
            ok = False
        else:
            top = max(ran, key=lambda e: e.get("max_output_throughput") or 0.0, default=None)
            won = top is not None and top.get("label") == gate.best
            what = "none ran" if top is None else f"the most tok/s: {top['label']} ({top.get('max_output_throughput')})"
            lines.append(f"  {'PASS' if won else 'FAIL'}  best:{gate.best}  {what}"
                         + (" (not comparable: different workloads, above)" if warning else ""))
            ok = ok and won
    return lines, ok


def _workload_warning(ran: list[dict[str, Any]]) -> str | None:
    """One line when the configurations that ran sent different workloads (their tok/s do not
    rank servers then), else None; a session that cannot be read is left out."""
    from ..report.comparable import workload_warning
    from ..report.compare import load_session
    from ..session.paths import SessionError

    sessions, names = [], []
    for e in ran:
        try:
            sessions.append(load_session(e["session_dir"]))
        except SessionError:
            continue
        names.append(str(e.get("label")))
    return workload_warning(sessions, names) if len(sessions) > 1 else None
