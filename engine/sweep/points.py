"""One configuration's repeats, load by load (sweep.json `configurations[i].points`): for each
load its repeats measured, the mean, 95 % t interval (`_ci`) and CV (`_cv`) of output tok/s,
TTFT p50 and p99, ITL p99, TPOT, tok/s per GPU and per user (1000 / TPOT), and the values
themselves (`values`, one per repeat, from which every comparison is computed again).

    {"load": "C=16", "concurrency": 16, "n": 3,
     "output_tok_s": 981.2, "output_tok_s_ci": [960.1, 1002.3], "output_tok_s_cv": 0.0087, ...,
     "tok_s_per_gpu": 122.7, "tok_s_per_gpu_ci": [...], "tok_s_per_user": 63.1, "tok_s_per_user_ci": [...],
     "ttft_p99_ms_bound": false, "meets_slo": true | false | null,
     "values": {"output_tok_s": [v1, v2, v3], ...}}

A load is read from each repeat that measured it to its end (a step cut by a signal, partial,
is left out); a figure a repeat has not (no TPOT of a step with one-token outputs) is left
out of that figure only. The GPUs that divide tok/s: the server's tp x pp x dp
(/server_info; vLLM's from its configuration or launch command), else `--gpus N` (or a grid
value `gpus`), else the GPUs telemetry saw.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from ..measure.slo import Slo
from ..measure.step_result import StepResult
from ..rules.intervals import spread
from ..rules.verdicts import load_label, meets_slo, one_per_load
from ..session import META, SUMMARY

# (key, higher is better); the first five are the step's own figures
FIGURES: tuple[tuple[str, bool], ...] = (
    ("output_tok_s", True), ("ttft_p50_ms", False), ("ttft_p99_ms", False), ("itl_p99_ms", False), ("tpot_ms", False),
    ("tok_s_per_gpu", True), ("tok_s_per_user", True),
)
HIGHER_IS_BETTER = dict(FIGURES)
STEP_FIELDS = {"output_tok_s": "output_throughput", "ttft_p50_ms": "median_ttft_ms", "ttft_p99_ms": "p99_ttft_ms",
               "itl_p99_ms": "p99_itl_ms", "tpot_ms": "mean_tpot_ms"}
BOUNDED = {"ttft_p50_ms": "median_ttft_ms", "ttft_p99_ms": "p99_ttft_ms"}  # lower bounds where censored


def read_json(path: Path) -> dict[str, Any]:
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return d if isinstance(d, dict) else {}


def session_docs(session_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(meta.json, summary.json) of a session; {} for one that is missing or unreadable."""
    return read_json(session_dir / META), read_json(session_dir / SUMMARY)


def server_gpus(meta: dict[str, Any]) -> int | None:
    """GPUs serving the model from what the server said: the sim's own count, else tp x pp
    (x dp without DP attention); None when it says no parallel sizes."""
    info = got if isinstance(got := meta.get("server_info"), dict) else {}
    sim = got if isinstance(got := info.get("redline_sim"), dict) else {}
    if isinstance(sim.get("gpus"), int) and sim["gpus"] > 0:
        return sim["gpus"]

    def size(k: str) -> int:
        v = info.get(k)
        return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 1

    if not any(isinstance(info.get(k), int) and not isinstance(info.get(k), bool) for k in ("tp_size", "pp_size")):
        return None
    n = size("tp_size") * size("pp_size")
    return n if info.get("enable_dp_attention") else n * size("dp_size")


# vLLM's parallel sizes: its dev-mode configuration's, or its launch command's options
VLLM_SIZES = (("parallel_config.tensor_parallel_size", "tensor_parallel_size"),
              ("parallel_config.pipeline_parallel_size", "pipeline_parallel_size"),
              ("parallel_config.data_parallel_size", "data_parallel_size"))


def fingerprint_gpus(fp: dict[str, Any]) -> int | None:
    """tp x pp x dp from the fingerprint's arguments (vLLM), None when it names none."""
    server = got if isinstance(got := fp.get("server"), dict) else {}
    args = got if isinstance(got := server.get("args"), dict) else {}
    n, found = 1, False
    for keys in VLLM_SIZES:
        v = next((args[k] for k in keys if k in args), None)
        try:
            size = int(v) if v is not None and not isinstance(v, bool) else None
        except (TypeError, ValueError):
            size = None
        if size and size > 0:
            n, found = n * size, True
    return n if found else None


def gpus_of(meta: dict[str, Any], given: int | None) -> tuple[int | None, str | None]:
    """(GPU count, where it came from: "server", "--gpus", "telemetry") of one configuration."""
    fp = got if isinstance(got := meta.get("fingerprint"), dict) else {}
    n = server_gpus(meta) or fingerprint_gpus(fp)
    if n:
        return n, "server"
    if given:
        return given, "--gpus"
    g = got if isinstance(got := fp.get("gpus"), dict) else {}
    if isinstance(g.get("count"), int) and g["count"] > 0:
        return g["count"], "telemetry"
    return None, None


def step_figures(s: StepResult, gpus: int | None) -> dict[str, float | None]:
    """One step's figures of FIGURES (None where it has none)."""
    out: dict[str, float | None] = {k: getattr(s, f) for k, f in STEP_FIELDS.items()}
    out["tok_s_per_gpu"] = s.output_throughput / gpus if gpus else None
    out["tok_s_per_user"] = 1000.0 / s.mean_tpot_ms if s.mean_tpot_ms else None
    return out


def _r(v: float | None, nd: int = 4) -> float | None:
    return None if v is None else round(v, nd)


def _steps(summary: dict[str, Any]) -> list[StepResult]:
    return [StepResult.from_dict(d) for d in summary.get("steps") or [] if isinstance(d, dict)]


def _slo(summary: dict[str, Any]) -> Slo | None:
    try:
        return Slo(**summary["slo"]) if isinstance(summary.get("slo"), dict) and summary["slo"] else None
    except TypeError:
        return None


def points(summaries: Sequence[dict[str, Any]], gpus: int | None) -> list[dict[str, Any]]:
    """The configuration's points from its repeats' summary.json (in repeat order)."""
    per_load: dict[tuple[str, float], list[StepResult]] = {}
    slo = None
    for summ in summaries:
        slo = slo or _slo(summ)
        steps = [s for s in _steps(summ) if not s.partial]
        for key, s in one_per_load(steps).items():
            per_load.setdefault(key, []).append(s)
    out = []
    for key in sorted(per_load, key=lambda k: (("C", "R", "x").index(k[0]), k[1])):
        steps = per_load[key]
        p: dict[str, Any] = {"load": load_label(key), "concurrency": int(key[1]) if key[0] == "C" else None, "n": len(steps)}
        values: dict[str, list[float]] = {}
        rows = [step_figures(s, gpus) for s in steps]
        for name, _ in FIGURES:
            vs = [v for r in rows if (v := r[name]) is not None]
            sp = spread(vs)
            values[name] = [round(v, 4) for v in vs]
            p[name] = None if sp is None else _r(sp.mean)
            # every figure here is a rate or a time: never below 0, though a t interval over 2
            # repeats can reach there (a TTFT p99 of 350 ms read -3016..+3716 against real vLLM)
            p[name + "_ci"] = None if sp is None or sp.ci is None else [_r(max(0.0, sp.ci[0])), _r(sp.ci[1])]
            p[name + "_cv"] = None if sp is None or sp.cv is None else _r(sp.cv, 5)
        for name, field in BOUNDED.items():
            p[name + "_bound"] = any(s.bound(field) for s in steps)
        p["meets_slo"] = None if slo is None else all(meets_slo(slo, s) for s in steps)
        p["values"] = values
        out.append(p)
    return out


def median_low(xs: Sequence[int]) -> int | None:
    """The lower median (a value that occurred: a C of the ramp)."""
    s = sorted(xs)
    return s[(len(s) - 1) // 2] if s else None


__all__ = ["FIGURES", "HIGHER_IS_BETTER", "gpus_of", "median_low", "points", "server_gpus", "session_docs", "step_figures"]
