"""`OUT/sweep.json`: one entry per configuration, written after each repeat (atomically), so a
sweep stopped at any moment keeps every configuration it finished.

    {"sweep": {"serve", "urls", "preset", "preset_digest", "grid", "repeats", "restart_each",
               "configs": N, "started_at", "resumed_at", "ended_at", "end_reason"},
     "configurations": [{"label", "values", "status", "command", "url", "startup_s",
                         "knee_concurrency", "knee_reason", "max_throughput_concurrency",
                         "max_output_throughput", "last_good_concurrency", "break_reason",
                         "break_concurrency", "max_slo_concurrency", "probe_ttft_ms",
                         "probe_itl_ms", "session_dir", "log_tail", "why",
                         "repeats", "runs", "knee_spread", "last_good_spread",
                         "gpus", "gpus_from", "fingerprint", "slo", "points", "lost_rows", "write_error"}, ...],
     "comparisons": [...], "pareto": [...], "slo_answer": {...} | null}

`status`: `completed` (the preset ran, every repeat; a server that died mid-run is its break,
`server_gone`), `failed_to_start` (it exited, or was not ready in time: `why` and the last
lines of its log), `stopped` (a signal ended the sweep during it: what it measured is in its
sessions), `not_run` (the sweep ended before it), `running` (some of its repeats done, more to come: a
sweep killed outright leaves it so).

With one repeat an entry's figures are its session's, as they always were. With N: `runs`
holds each repeat's (its session under OUT/<label>/r<k>), the knee and last good are the
lower median of the repeats' (`knee_spread`, `last_good_spread`: their [lowest, highest]),
the most tok/s is the best load's mean. `points` (engine/sweep/points.py) and the top-level
`comparisons`, `pareto` and `slo_answer` (engine/sweep/answers.py) are computed again at each
write from the repeats' values.

`lost_rows` and `write_error`: its session log could not keep every row (a write or fsync
error; its meta.json says so, and its run exited 5), `why` then says "session saved, N rows
lost: REASON".
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Sequence

from ..rules.verdicts import knee_from_summary, one_per_load, recorded_max_slo, session_knees
from ..session import SUMMARY
from ..session.writer import loss_line, recorded_loss, write_text_atomic
from .answers import comparisons, pareto, slo_answer
from .points import gpus_of, median_low, points, session_docs
from .spec import Config

SWEEP_FILE = "sweep.json"
COMPLETED, FAILED_TO_START, STOPPED, NOT_RUN = "completed", "failed_to_start", "stopped", "not_run"
RUNNING = "running"  # repeats done, more to come (what a sweep killed outright leaves)


Run = tuple[Path, str]  # a repeat's session directory and its status


def entry(config: Config, status: str, *, startup_s: float | None = None, session_dir: Path | None = None,
          why: str = "", tail: tuple[str, ...] = (), runs: Sequence[Run] | None = None, repeats: int = 1,
          gpus: int | None = None) -> dict[str, Any]:
    """One configuration's entry: its figures from its sessions' summary.json, when it ran.
    `runs`: each repeat's session and status so far (one repeat: `session_dir` is enough)."""
    if runs is None:
        runs = [(session_dir, status)] if session_dir is not None else []
    first = runs[0][0] if runs else session_dir
    e: dict[str, Any] = {
        "label": config.label, "values": dict(config.values), "status": status,
        "command": list(config.command), "url": config.url,
        "startup_s": None if startup_s is None else round(startup_s, 3),
        "session_dir": str(first) if first is not None else None,
    }
    if why:
        e["why"] = why
    if tail:
        e["log_tail"] = list(tail)
    summ = _summary(first)
    if summ is not None:
        e.update(figures(summ))
    loss = next((x for x in (recorded_loss(d) for d, _st in runs if d is not None) if x is not None), None)
    if loss is not None:
        e["lost_rows"], e["write_error"] = loss
    e["repeats"] = repeats
    e.update(repeat_figures(runs, repeats, gpus if gpus is not None else grid_gpus(config)))
    return e


def loss_why(session_dir: Path | None) -> str:
    """"session saved, N rows lost: REASON" of a session whose log lost rows, else ""."""
    loss = recorded_loss(session_dir) if session_dir is not None else None
    return f"session saved, {loss_line(*loss)}" if loss is not None else ""


def grid_gpus(config: Config) -> int | None:
    """A grid value `gpus` (`--grid 'tp=2,gpus=2'`), when it is a whole number."""
    v = config.values.get("gpus")
    return int(v) if isinstance(v, str) and v.isdigit() and int(v) > 0 else None


def repeat_figures(runs: Sequence[Run], repeats: int, gpus: int | None) -> dict[str, Any]:
    """`runs`, `gpus`, `fingerprint`, `slo` and `points` of the repeats; with more than one,
    the knee and last good as their lower median, their spread, and the best load's mean tok/s."""
    docs = [(d, st, *session_docs(d)) for d, st in runs if d is not None]
    out: dict[str, Any] = {"runs": []}
    for k, (d, st, _meta, summ) in enumerate(docs, 1):
        f = figures(summ) if summ else {}
        out["runs"].append({"repeat": k, "status": st, "session_dir": str(d),
                            **{key: f.get(key) for key in ("knee_concurrency", "last_good_concurrency", "break_reason",
                                                           "max_output_throughput", "max_throughput_concurrency")}})
    meta = next((m for _d, _st, m, _s in docs if m), {})
    n, src = gpus_of(meta, gpus)
    out["gpus"], out["gpus_from"] = n, src
    out["fingerprint"] = meta.get("fingerprint")
    done = [summ for _d, st, _m, summ in docs if st == COMPLETED and summ]
    out["slo"] = next((s["slo"] for s in done if isinstance(s.get("slo"), dict) and s["slo"]), None)
    out["points"] = points(done, n)
    if repeats > 1 and out["runs"]:
        finished = [r for r in out["runs"] if r["status"] == COMPLETED] or out["runs"]
        for key in ("knee_concurrency", "last_good_concurrency"):
            vals = [r[key] for r in finished if r[key] is not None]
            out[key] = median_low(vals)
            out[key.replace("_concurrency", "_spread")] = [min(vals), max(vals)] if vals else None
        knees = [r["knee_concurrency"] for r in finished]
        first = figures(docs[0][3]).get("knee_reason") if docs[0][3] else None
        if len(set(knees)) == 1 and first:
            out["knee_reason"] = f"{first}; the same in {len(knees)} of {len(knees)} repeats"
        else:
            said = ", ".join("none" if k is None else str(k) for k in knees)
            out["knee_reason"] = f"the lower median of {len(knees)} repeats' knees (C: {said})"
        best = max((p for p in out["points"] if p.get("output_tok_s") is not None), key=lambda p: p["output_tok_s"], default=None)
        if best is not None:
            out["max_output_throughput"], out["max_throughput_concurrency"] = round(best["output_tok_s"], 3), best["concurrency"]
    return out


def _summary(session_dir: Path | None) -> dict | None:
    if session_dir is None:
        return None
    p = session_dir / SUMMARY
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def figures(summ: dict) -> dict[str, Any]:
    """What the comparison reads of one session: the knee, the break and last good, the most
    tok/s, the largest C meeting the SLO, the probe's TTFT and ITL."""
    from ..measure.step_result import StepResult

    steps = [StepResult.from_dict(d) for d in summ.get("steps") or [] if isinstance(d, dict)]
    steps = [s for s in steps if s.phase != "probe"]
    k = knee_from_summary(summ) or session_knees(steps)[-1]
    pts = one_per_load(steps)
    best = max(pts.values(), key=lambda s: s.output_throughput, default=None)
    brk = summ.get("break") or {}
    v, _ = recorded_max_slo(summ, steps, "C")  # the one judge of the largest load meeting the SLO
    max_slo = None if v is None else int(v)
    probe = summ.get("probe") or {}
    return {
        "knee_concurrency": int(k.value) if k.value is not None and k.kind == "C" else None,
        "knee_reason": k.reason,
        "max_throughput_concurrency": int(k.max_throughput) if k.max_throughput is not None and k.kind == "C" else None,
        "max_output_throughput": None if best is None else round(best.output_throughput, 3),
        "last_good_concurrency": brk.get("last_good_concurrency"),
        "break_reason": brk.get("reason"),
        "break_concurrency": brk.get("concurrency"),
        "max_slo_concurrency": max_slo,
        "probe_ttft_ms": probe.get("median_ttft_ms"),
        "probe_itl_ms": probe.get("median_itl_ms"),
    }


class SweepFile:
    """sweep.json under OUT, rewritten after each repeat of each configuration."""

    def __init__(self, out: Path, head: dict[str, Any], configs: list[Config]) -> None:
        self.path = out / SWEEP_FILE
        self.head = {**head, "configs": len(configs), "started_at": _now(), "ended_at": None, "end_reason": None}
        self.entries: list[dict[str, Any]] = [entry(c, NOT_RUN, repeats=int(head.get("repeats") or 1)) for c in configs]

    def set(self, i: int, e: dict[str, Any]) -> None:
        self.entries[i] = e
        self.write()

    def end(self, reason: str) -> None:
        self.head.update(ended_at=_now(), end_reason=reason)
        self.write()

    def doc(self) -> dict[str, Any]:
        return {"sweep": self.head, "configurations": self.entries, **answers(self.entries)}

    def write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(self.path, json.dumps(self.doc(), indent=2) + "\n")


def answers(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The top level's `comparisons`, `pareto` and `slo_answer` of these entries."""
    return {"comparisons": comparisons(entries), "pareto": pareto(entries), "slo_answer": slo_answer(entries)}


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def load_sweep(out: str | Path) -> dict[str, Any] | None:
    """OUT/sweep.json, or None when OUT is not a sweep."""
    p = Path(out) / SWEEP_FILE
    try:
        if not p.is_file():
            return None
        d = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # a name too long, unreadable, not JSON: not a sweep
        return None
    return d if isinstance(d, dict) and isinstance(d.get("configurations"), list) else None
