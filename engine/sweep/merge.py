"""`redline report A B ...` across runs that are not one sweep: each directory a session (one
repeat), or a sweep's (`redline sweep`, or `redline run --repeats N`: a sweep of one
configuration), its configurations taken as they are. Their comparisons, Pareto front and
fingerprints' differences are computed as one sweep's are (engine/sweep/answers.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from .points import session_docs
from .spec import Config
from .sweep_file import COMPLETED, answers, entry, load_sweep


def _unique(label: str, taken: set[str]) -> str:
    out, n = label, 1
    while out in taken:
        n += 1
        out = f"{label}-{n}"
    taken.add(out)
    return out


def entries_of(dirs: Sequence[Path]) -> list[dict[str, Any]]:
    """One entry per session, or per configuration of a sweep, labels made unique in order."""
    out: list[dict[str, Any]] = []
    taken: set[str] = set()
    for d in dirs:
        doc = load_sweep(d)
        if doc is not None:
            for e in doc["configurations"]:
                if isinstance(e, dict):
                    out.append({**e, "label": _unique(str(e.get("label") or d.name), taken)})
            continue
        meta, summ = session_docs(Path(d))
        label = _unique(str(summ.get("label") or meta.get("label") or Path(d).name), taken)
        url = str((meta.get("target") or {}).get("url") or "") if isinstance(meta.get("target"), dict) else ""
        out.append(entry(Config({"session": str(d)}, label, (), url), COMPLETED, session_dir=Path(d)))
    return out


def merged_doc(dirs: Sequence[Path]) -> dict[str, Any]:
    """A sweep document of these directories (no sweep block of its own)."""
    entries = entries_of(dirs)
    return {"sweep": {"preset": None, "end_reason": f"{len(dirs)} directories compared"}, "configurations": entries,
            **answers(entries)}


__all__ = ["entries_of", "merged_doc"]
