"""Which configuration to deploy, from the configurations' points (engine/sweep/points.py):
sweep.json's top-level `comparisons` and `pareto`, and the answer under an SLO.

Comparisons: every pair of configurations that ran (a later one `a` against an earlier one
`b`), at each load both measured, for output tok/s, TTFT p99 and TPOT: the change of a from b
in % (`change_pct`), its interval (`ci_pct` [low, high]) and the verdict `better`, `worse` or
`no clear difference`. The test is Welch's on the repeats' values, on their logarithms when
every value is positive (`scale: log`: a change is a ratio, its interval never below -100 %,
the skew of a p99 tamed; the change is then that of the geometric means), else on the values
(`linear`, in % of b's mean); the family is
every comparison of the report (all pairs, loads and figures), Holm-Bonferroni over it at
95 %, and each interval is drawn at the level its test was held to, so it spans 0 exactly
when the verdict is `no clear difference` (engine/rules/intervals.py). A pair with fewer than
two repeats a side has no interval: `no clear difference`, however large the change (one
run's noise is not known). A TTFT p99 that is a lower bound (censored requests) decides
nothing when the bound could hide the other way.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from ..fmt import rate
from ..measure.slo import Slo
from ..rules.intervals import NO_CLEAR, holm_levels, ratio_pct, spread, verdict, welch
from ..rules.pareto import Point, best_meeting, front
from .points import HIGHER_IS_BETTER

COMPARED = ("output_tok_s", "ttft_p99_ms", "tpot_ms")
METRIC_TEXT = {"output_tok_s": "tok/s", "ttft_p99_ms": "TTFT p99", "tpot_ms": "TPOT"}
ALPHA = 0.05


def _ran(entries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in entries if isinstance(e, dict) and e.get("points")]


def _by_load(e: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["load"]: p for p in e.get("points") or [] if isinstance(p, dict) and "load" in p}


def comparisons(entries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """sweep.json `comparisons`, in order: pairs (later against earlier), loads, figures."""
    ran = _ran(entries)
    rows: list[dict[str, Any]] = []
    tests: list[tuple[int, Any]] = []  # (row index, Difference) of the rows with an interval
    for j, a in enumerate(ran):
        for b in ran[:j]:
            pa, pb = _by_load(a), _by_load(b)
            for load in [k for k in pa if k in pb]:
                for metric in COMPARED:
                    row, d = _row(a, b, pa[load], pb[load], metric)
                    if row is None:
                        continue
                    rows.append(row)
                    if d is not None:
                        tests.append((len(rows) - 1, d))
    levels = holm_levels([d.p for _, d in tests], ALPHA)
    for (i, d), (level, passed) in zip(tests, levels, strict=False):
        row = rows[i]
        if row.get("scale") == "log":
            lo, hi = d.interval(level)
            ci: tuple[float, float] | None = (ratio_pct(lo), ratio_pct(hi))
        else:
            ci = d.interval_pct(level)
        row["ci_pct"] = None if ci is None else [round(ci[0], 2), round(ci[1], 2)]
        row["confidence"] = round(1.0 - level, 6)
        row["verdict"] = verdict(d.diff, passed and _bound_allows(row, d.diff), HIGHER_IS_BETTER[row["metric"]])
        if passed and not _bound_allows(row, d.diff):
            row["why"] = "a lower bound (requests censored at the step's close) could hide the other way"
    return rows


def _row(a: dict, b: dict, pa: dict, pb: dict, metric: str) -> tuple[dict[str, Any] | None, Any]:
    """One comparison's row and its test (None: no interval), or (None, None) when a side lacks the figure."""
    va, vb = (pa.get("values") or {}).get(metric) or [], (pb.get("values") or {}).get(metric) or []
    sa, sb = spread(va), spread(vb)
    if sa is None or sb is None:
        return None, None
    change: float | None
    log = all(v > 0 for v in [*va, *vb])  # a ratio of positive figures: compared on their logarithms
    if log:
        sa, sb = spread([math.log(v) for v in va]), spread([math.log(v) for v in vb])
        assert sa is not None and sb is not None
        change = ratio_pct(sa.mean - sb.mean)
    else:
        change = 100.0 * (sa.mean - sb.mean) / sb.mean if sb.mean else None
    row: dict[str, Any] = {
        "a": a["label"], "b": b["label"], "concurrency": pa.get("concurrency"), "load": pa["load"], "metric": metric,
        "change_pct": None if change is None else round(change, 2), "ci_pct": None, "verdict": NO_CLEAR, "n": [sa.n, sb.n],
        "scale": "log" if log else "linear",
    }
    if metric + "_bound" in pa or metric + "_bound" in pb:
        row["bound"] = [bool(pa.get(metric + "_bound")), bool(pb.get(metric + "_bound"))]
    d = welch(sa, sb)
    if d is None:
        row["why"] = "fewer than 2 repeats a side: no interval (--repeats 3)"
    return row, d


def _bound_allows(row: dict[str, Any], diff: float) -> bool:
    """A lower bound on a's side is only surer when a reads higher (and b is exact); on b's, when b reads higher."""
    ba, bb = row.get("bound") or (False, False)
    if not ba and not bb:
        return True
    if ba and bb:
        return False
    return diff > 0 if ba else diff < 0


# -- the Pareto front ----------------------------------------------------------------------------

def _points(entries: Sequence[dict[str, Any]]) -> list[tuple[Point, dict[str, Any]]]:
    out = []
    for e in _ran(entries):
        if e.get("status") != "completed":
            continue
        for p in e["points"]:
            if p.get("tok_s_per_gpu") is None or p.get("tok_s_per_user") is None:
                continue
            out.append((Point(e["label"], p["load"], p.get("concurrency"), p["tok_s_per_gpu"], p["tok_s_per_user"]), p))
    return out


def pareto(entries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """sweep.json `pareto`: the front across the configurations that completed, fastest per
    user first, each with its intervals."""
    pts = _points(entries)
    by = {(pt.label, pt.load): p for pt, p in pts}
    out = []
    for pt in front([pt for pt, _ in pts]):
        p = by[(pt.label, pt.load)]
        out.append({"label": pt.label, "load": pt.load, "concurrency": pt.concurrency, "tok_s_per_gpu": pt.tok_s_per_gpu,
                    "tok_s_per_user": pt.tok_s_per_user, "tok_s_per_gpu_ci": p.get("tok_s_per_gpu_ci"),
                    "tok_s_per_user_ci": p.get("tok_s_per_user_ci")})
    return out


def slo_of(entries: Sequence[dict[str, Any]]) -> Slo | None:
    for e in _ran(entries):
        if isinstance(e.get("slo"), dict) and e["slo"]:
            try:
                return Slo(**e["slo"])
            except TypeError:
                return None
    return None


def slo_answer(entries: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The best point under the SLO the runs were judged by (every repeat of the load met
    it): the most tok/s per GPU; None without an SLO. {"slo", "label", "load", "concurrency",
    "tok_s_per_gpu", "tok_s_per_user"}, or label None when no point meets it."""
    slo = slo_of(entries)
    if slo is None:
        return None
    pts = _points(entries)
    by = {(pt.label, pt.load): p for pt, p in pts}
    best = best_meeting([pt for pt, _ in pts], lambda pt: by[(pt.label, pt.load)].get("meets_slo") is True)
    if best is None:
        return {"slo": slo.describe(), "label": None}
    return {"slo": slo.describe(), "label": best.label, "load": best.load, "concurrency": best.concurrency,
            "tok_s_per_gpu": best.tok_s_per_gpu, "tok_s_per_user": best.tok_s_per_user}


# -- as text ---------------------------------------------------------------------------------------

def _pct(v: float) -> str:
    return f"{v:+.0f}" if abs(v) >= 10 else f"{v:+.1f}"


SPAN_TOP_PCT = 1000.0  # an interval's end past +1000 % reads ">+1000": with 2 repeats (1 degree of freedom)
# and Holm's level, a log-scale interval's top can be 10^50 %, a number that says only "unbounded"


def _span(ci: Sequence[float]) -> str:
    """`+246..+274`; one decimal where whole numbers would read the same at both ends; an end
    past SPAN_TOP_PCT as `>+1000`."""
    if ci[1] > SPAN_TOP_PCT:
        return f"{_pct(ci[0])}..>+{SPAN_TOP_PCT:.0f}"
    lo, hi = _pct(ci[0]), _pct(ci[1])
    return f"{ci[0]:+.1f}..{ci[1]:+.1f}" if lo == hi else f"{lo}..{hi}"


def pair_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    """One summary line per pair: its clearest tok/s difference (else its largest), e.g.
    `mb64 vs mb8: +560 % tok/s at C=64 (+540..+580 %), clear`; then how many of its
    comparisons were called either way."""
    out = []
    pairs = list(dict.fromkeys((r["a"], r["b"]) for r in rows))
    for a, b in pairs:
        mine = [r for r in rows if (r["a"], r["b"]) == (a, b)]
        tok = [r for r in mine if r["metric"] == "output_tok_s" and r.get("change_pct") is not None]
        if not tok:
            continue
        clear = [r for r in tok if r["verdict"] != NO_CLEAR]
        top = max(clear or tok, key=lambda r: abs(r["change_pct"]))
        ci = f" ({_span(top['ci_pct'])} %)" if top.get("ci_pct") else ""
        word = "clear" if top["verdict"] != NO_CLEAR else ("no clear difference" if top.get("ci_pct") else
                                                           "no clear difference (one run a side: --repeats 3 gives intervals)")
        n_b = sum(r["verdict"] == "better" for r in mine)
        n_w = sum(r["verdict"] == "worse" for r in mine)
        tail = f"; {n_b} better, {n_w} worse, {len(mine) - n_b - n_w} no clear difference of {len(mine)}" if len(mine) > 1 else ""
        out.append(f"{a} vs {b}: {_pct(top['change_pct'])} % tok/s at {top['load']}{ci}, {word}{tail}")
    return out


def comparison_table(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Every comparison, a line each: `mb64 vs mb8  C=16  tok/s  +95.2 % (+90.1..+100.3)  better`."""
    if not rows:
        return []
    cells = [[f"{r['a']} vs {r['b']}", r["load"], METRIC_TEXT[r["metric"]],
              "-" if r.get("change_pct") is None else f"{_pct(r['change_pct'])} %",
              "-" if not r.get("ci_pct") else f"{_span(r['ci_pct'])} %",
              r["verdict"] + (" (bound)" if r.get("why", "").startswith("a lower bound") else "")] for r in rows]
    head = ["pair", "load", "figure", "change", "95 % interval (Holm)", "verdict"]
    widths = [max(len(h), *(len(c[j]) for c in cells)) for j, h in enumerate(head)]
    fmt = lambda cs: "  ".join(c.ljust(w) if j in (0, 1, 2, 5) else c.rjust(w) for j, (c, w) in enumerate(zip(cs, widths, strict=False))).rstrip()
    return [fmt(head), fmt(["-" * w for w in widths]), *(fmt(c) for c in cells)]


def pareto_lines(front_rows: Sequence[dict[str, Any]], answer: dict[str, Any] | None) -> list[str]:
    """The front as a table (for each per-user speed, the configuration and load with the most
    tok/s per GPU), then the answer under the SLO."""
    out = []
    if front_rows:
        out.append("Pareto front (output tok/s per user against per GPU; nothing beats these on both):")
        cells = [[rate(r["tok_s_per_user"]), r["label"], r["load"], rate(r["tok_s_per_gpu"])] for r in front_rows]
        head = ["tok/s per user", "configuration", "load", "tok/s per GPU"]
        widths = [max(len(h), *(len(c[j]) for c in cells)) for j, h in enumerate(head)]
        for cs in [head, ["-" * w for w in widths], *cells]:
            out.append("  " + "  ".join(c.rjust(w) if j in (0, 3) else c.ljust(w) for j, (c, w) in enumerate(zip(cs, widths, strict=False))).rstrip())
    if answer is not None:
        if answer.get("label") is None:
            out.append(f"best under {answer['slo']}: no configuration meets it at any load (in every repeat)")
        else:
            out.append(f"best under {answer['slo']}: {answer['label']} at {answer['load']}, {rate(answer['tok_s_per_gpu'])} tok/s/GPU"
                       f" ({rate(answer['tok_s_per_user'])} tok/s per user)")
    return out


__all__ = ["COMPARED", "comparison_table", "comparisons", "pair_lines", "pareto", "pareto_lines", "slo_answer"]
