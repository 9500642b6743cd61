"""`redline sweep ... --resume` (same `--out`): a sweep that was stopped (a signal, a crash, a
lost SSH link) goes on where it stopped. Every `completed` configuration is kept as it is, its
sessions untouched; the others run again. What a configuration that did not complete had
written is moved aside, never deleted (`OUT/<label>.before-resume-1/`), and the new run writes
a fresh `OUT/<label>/`. A grid, preset, server command or repeat count that differs from the
one recorded in OUT/sweep.json is refused in one line: the comparison would mix two sweeps.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from .spec import Config, SweepError, SweepSpec
from .sweep_file import COMPLETED, SweepFile, load_sweep


def preset_digest(preset: Any) -> str:
    """What identifies a preset across runs: the hash of its canonical TOML
    (engine/preset/toml_out.py: its steps, workload and rules, not where its file lives)."""
    from ..preset.toml_out import preset_to_toml

    text = "\n".join(ln for ln in preset_to_toml(preset).splitlines() if not ln.startswith("#"))  # comments name redline's version
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def sweep_head(spec: SweepSpec, configs: list[Config], digest: str | None = None) -> dict[str, Any]:
    """sweep.json's `sweep` block as a new sweep writes it (and --resume checks it)."""
    return {"serve": spec.serve, "urls": list(spec.urls) or None, "preset": spec.preset, "preset_digest": digest,
            "grid": [dict(c.values) for c in configs], "repeats": spec.repeats, "restart_each": spec.restart_each,
            "gpus": spec.gpus}


def _labels(values: list[dict[str, str]]) -> str:
    from .spec import label_of

    return ", ".join(label_of(v, i) for i, v in enumerate(values)) or "none"


def check_resumable(old: dict[str, Any], head: dict[str, Any], where: Path) -> None:
    """SweepError (one line) when the sweep asked for now is not the one recorded in `where`."""
    rec = got if isinstance(got := old.get("sweep"), dict) else {}
    recorded_grid = rec.get("grid")
    if recorded_grid is None:  # a sweep.json written before the grid was recorded: its entries say it
        recorded_grid = [e.get("values") for e in old.get("configurations") or [] if isinstance(e, dict)]
    if rec.get("serve") != head["serve"] or (rec.get("urls") or None) != head["urls"]:
        what = "--serve" if head["serve"] is not None else "--url"
        raise SweepError(f"--resume: the server command differs from the one recorded in {where} ({what}); "
                         "resume with the same --serve/--url, or start a new --out")
    if recorded_grid != head["grid"]:
        raise SweepError(f"--resume: the grid differs from the one recorded in {where} (recorded: {_labels(recorded_grid)}; "
                         f"now: {_labels(head['grid'])}); resume with the same --grid, or start a new --out")
    if rec.get("preset_digest") != head["preset_digest"] or rec.get("preset") != head["preset"]:
        raise SweepError(f"--resume: preset {head['preset']!r} differs from the one recorded in {where} "
                         f"(recorded: {rec.get('preset')!r}; its steps, workload or rules changed); resume with the same preset, or start a new --out")
    if int(rec.get("repeats") or 1) != head["repeats"]:
        raise SweepError(f"--resume: --repeats {head['repeats']} differs from the {int(rec.get('repeats') or 1)} recorded in {where}; "
                         "resume with the same --repeats, or start a new --out")


def check_resume(out: Path, spec: SweepSpec, configs: list[Config], digest: str | None) -> None:
    """Before anything starts: SweepError when `out` holds no sweep to resume, or another one."""
    old = load_sweep(out)
    if old is None:
        raise SweepError(f"--resume: {out} holds no sweep.json (nothing to resume: drop --resume to start a sweep there)")
    check_resumable(old, sweep_head(spec, configs, digest), out / "sweep.json")


def _aside(d: Path) -> Path:
    n = 1
    while (d.parent / f"{d.name}.before-resume-{n}").exists():
        n += 1
    return d.parent / f"{d.name}.before-resume-{n}"


def resume_sweep_file(out: Path, head: dict[str, Any], configs: list[Config]) -> tuple[SweepFile, set[int]]:
    """The sweep file of a resumed sweep and the indexes of the configurations kept (completed).
    Raises SweepError when there is nothing to resume or the sweep differs."""
    old = load_sweep(out)
    if old is None:
        raise SweepError(f"--resume: {out} holds no sweep.json (nothing to resume: drop --resume to start a sweep there)")
    where = out / "sweep.json"
    check_resumable(old, head, where)
    sf = SweepFile(out, head, configs)
    rec = old.get("sweep") or {}
    sf.head["started_at"] = rec.get("started_at") or sf.head["started_at"]
    sf.head["resumed_at"] = [*(rec.get("resumed_at") or []), _now()]
    sf.head["moved_aside"] = dict(rec.get("moved_aside") or {})
    kept: set[int] = set()
    for i, (c, e) in enumerate(zip(configs, old.get("configurations") or [], strict=False)):
        if isinstance(e, dict) and e.get("status") == COMPLETED:
            sf.entries[i] = e
            kept.add(i)
            continue
        d = out / c.label
        if d.exists():
            moved = _aside(d)
            d.rename(moved)
            sf.head["moved_aside"][c.label] = [*sf.head["moved_aside"].get(c.label, []), str(moved)]
    sf.write()
    return sf, kept


def _now() -> str:
    import time

    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


__all__ = ["check_resumable", "check_resume", "preset_digest", "resume_sweep_file", "sweep_head"]
