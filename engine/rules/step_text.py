"""The text of steps and verdicts: one line per step, the final step table with its break,
knee and probe lines. The engine's log, the headless runner and `redline report` print
through here, so they print the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from ..fmt import ms, num, rate, step_ms
from ..measure.step_result import BreakResult, StepResult
from .verdicts import Knee, session_knees


def as_step(s: StepResult | dict[str, Any]) -> StepResult:
    return s if isinstance(s, StepResult) else StepResult.from_dict(s)


def as_break(b: BreakResult | dict[str, Any] | None) -> BreakResult | None:
    if b is None or isinstance(b, BreakResult):
        return b
    names = {f.name for f in fields(BreakResult)}
    return BreakResult(**{k: v for k, v in b.items() if k in names})


# -- cells ---------------------------------------------------------------------------------

def fmt_ms(v: float | None) -> str:
    """A latency cell in ms, no unit (engine/fmt.py's ms); kept for tui/cli/report.py."""
    return ms(v, unit=False)


def _errors(step: StepResult) -> str:
    s = f"err {step.failed}"
    if step.failed and step.errors_by_kind:
        kinds = sorted(step.errors_by_kind.items(), key=lambda kv: (-kv[1], kv[0]))
        s += " (" + ", ".join(f"{k} {n}" for k, n in kinds if n) + ")"
    failed_tok = step.failed_output_tok_s
    if failed_tok:  # the failed requests' tokens: beside throughput, never in it (docs/numbers.md)
        s += f", {failed_tok:.1f} tok/s of failed requests"
    return s


def format_step_line(step: StepResult | dict[str, Any]) -> str:
    """One line per finished step, e.g.
    C=64    60.0s   1210.4 tok/s  TTFT p50 52.0 ms p99  180 ms  ITL p99 61.3 ms  err 0  steady
    """
    s = as_step(step)
    line = (
        f"{s.load:<6}{s.duration_s:6.1f}s {s.output_throughput:8.1f} tok/s"
        f"  TTFT p50 {step_ms(s, 'median_ttft_ms'):>7} p99 {step_ms(s, 'p99_ttft_ms'):>7}"
        f"  ITL p99 {ms(s.p99_itl_ms):>7}  {_errors(s)}  {_judged(s)}"
    )
    if s.mode != "concurrency":  # open loop: how late sends went, how many waited at the cap
        line += f"  {rate(s.request_throughput)} req/s  lag p99 {ms(s.schedule_lag_p99_ms)}  held {s.dropped_or_delayed or 0}"
    if s.slo_attainment is not None or s.output_goodput is not None:
        att = "-" if s.slo_attainment is None else f"{s.slo_attainment * 100:.0f} %"
        good = "-" if s.output_goodput is None else f"{s.output_goodput:.1f}"
        line += f"  goodput {good} tok/s (SLO met {att})"
    if s.client_limited:
        line += f"  {CLIENT_LIMITED}"
    return line


def _judged(s: StepResult) -> str:
    """"steady", or why the throughput rules could not judge the step; "short" for a period
    shorter than a step; "stand-in TTFT" when its warm-up sends stood in for its own."""
    out = "short" if s.short else "steady" if s.steady else (s.unjudged or "unsteady")
    return out + ("  (warm-up sends stood in: none of its own went out)" if s.warmup_stand_in else "")


CLIENT_LIMITED = "client-limited"
CLIENT_LIMITED_NOTE = (f"{CLIENT_LIMITED} = measured while redline's own timings were suspect (its CPU, its event loop "
                       "or the machine busy: the warnings in events.ndjson), by enough to move a figure past its limit "
                       "or by 10 %: its latencies may be too high")


_COLUMNS = (  # header, right-aligned
    ("C", True), ("dur s", True), ("done", True), ("fail", True), ("out tok/s", True),
    ("req/s", True), ("TTFT p50", True), ("TTFT p99", True), ("ITL p50", True),
    ("ITL p99", True), ("TPOT", True), ("E2E p50", True), ("E2E p99", True),
    ("srv run", True), ("steady", False), ("", False),
)


def _row(s: StepResult, note: str) -> list[str]:
    return [
        str(s.concurrency), f"{s.duration_s:.1f}", str(s.completed), str(s.failed),
        f"{s.output_throughput:.1f}", rate(s.request_throughput),
        *(step_ms(s, name, unit=False) for name in (
            "median_ttft_ms", "p99_ttft_ms", "median_itl_ms", "p99_itl_ms", "mean_tpot_ms",
            "median_e2e_latency_ms", "p99_e2e_latency_ms")),
        num(s.server_max_running),
        "yes" if s.steady else "no", note,
    ]


def format_break_line(break_: BreakResult | dict[str, Any] | None) -> str:
    b = as_break(break_)
    if b is None:
        return "break: none (no stop rule fired)"
    line = f"break: {b.reason} at {b.where}, {b.good_text}"
    return f"{line} ({b.detail})" if b.detail else line


def format_step_table(
    steps: Sequence[StepResult | dict[str, Any]],
    break_: BreakResult | dict[str, Any] | None = None,
    probe: StepResult | dict[str, Any] | None = None,
    knee: Knee | Sequence[Knee] | None = None,
    cause: str | None = None,
) -> str:
    """The final summary: an aligned step table (latencies in ms), the break line, the knee
    (as summary.json recorded it, one line per workload; else engine/rules/verdicts.py's over
    these steps), the cause beside them (summary.json's `cause`: "plateau at C=16: server runs 8
    a micro-batch: micro-batches of 8 from ..."), the probe."""
    ss = [as_step(s) for s in steps]
    b = as_break(break_)
    notes = ["partial" if s.partial else "short" if s.short else "" for s in ss]
    if b is not None:
        def at(s: StepResult, c: int | None, r: float | None, x: float | None) -> bool:
            if x is not None:
                return s.trace_speed == x
            return s.request_rate == r if r is not None else s.concurrency == c and s.mode == "concurrency"

        if b.last_good != "none":
            good = [i for i, s in enumerate(ss) if at(s, b.last_good_concurrency, b.last_good_rate, b.last_good_speed)]
            if good:
                best = max(good, key=lambda i: ss[i].output_throughput)
                notes[best] = "<- last good"
        broke = [i for i, s in enumerate(ss) if at(s, b.concurrency, b.rate, b.speed)]
        if broke:
            notes[broke[-1]] = f"<- break: {b.reason}"
    notes = [f"{n} (not judged)".lstrip() if not s.steady and not s.short and s.phase != "probe" else n for n, s in zip(notes, ss, strict=False)]
    notes = [f"{n} ({CLIENT_LIMITED})".lstrip() if s.client_limited else n for n, s in zip(notes, ss, strict=False)]
    rows = [_row(s, n) for s, n in zip(ss, notes, strict=False)]
    columns: tuple[tuple[str, bool], ...] = _COLUMNS
    if any(s.output_goodput is not None for s in ss):  # with SLOs: goodput beside throughput
        columns = _COLUMNS[:5] + (("good tok/s", True), ("SLO met", True)) + _COLUMNS[5:]
        rows = [r[:5] + ["-" if s.output_goodput is None else f"{s.output_goodput:.1f}", "-" if s.slo_attainment is None else f"{s.slo_attainment * 100:.0f} %"] + r[5:]
                for r, s in zip(rows, ss, strict=False)]
    if any(s.mode != "concurrency" for s in ss):  # open loop: the load, achieved, schedule lag, held
        columns = (("load", True),) + columns[:6] + (("lag p99", True), ("held", True)) + columns[6:]
        rows = [[s.load] + r[:6] + [ms(s.schedule_lag_p99_ms, unit=False), "-" if s.dropped_or_delayed is None else str(s.dropped_or_delayed)] + r[6:]
                for r, s in zip(rows, ss, strict=False)]
    header = [h for h, _ in columns]
    widths = [max([len(header[j])] + [len(r[j]) for r in rows]) for j in range(len(header))]

    def line(cells: list[str]) -> str:
        parts = [
            c.rjust(w) if right else c.ljust(w)
            for c, w, (_, right) in zip(cells, widths, columns, strict=False)
        ]
        return "  ".join(parts).rstrip()

    out = [line(header), line(["-" * w if h else "" for w, h in zip(widths, header, strict=False)])]
    if rows:
        out += [line(r) for r in rows]
    else:
        out.append("(no steps)")
    out.append("latencies in ms; srv run = most requests the server reported running")
    out.append(STEP_COUNTS_NOTE)
    if any(s.client_limited for s in ss) or (probe is not None and as_step(probe).client_limited):
        out.append(CLIENT_LIMITED_NOTE)
    out.append(format_break_line(b))
    knees = [knee] if isinstance(knee, Knee) else list(knee or ()) or session_knees([s for s in ss if s.phase != "probe"])
    out += [k.describe() for k in knees]
    if cause:
        out.append(f"cause: {cause}")
    if any(not s.steady and not s.short for s in ss):
        out.append("not judged = not steady: the plateau and collapse rules could not judge it (its line in events.ndjson says why)")
    if probe is not None:
        out.append("probe: " + format_step_line(probe))
    return "\n".join(out)


def format_run_summary(s: dict[str, Any], percentiles: Sequence[float] = (50.0, 90.0, 95.0, 99.0), title: str = "Serving Benchmark Result") -> str:
    """The whole run in the layout of SGLang's bench_serving and `vllm bench serve`
    (engine/measure/run_totals.py RunTotals.summary gives the figures)."""
    width = 50

    def rule(text: str = "", ch: str = "-") -> str:
        return f"{text:{ch}^{width}}" if text else ch * width

    def row(label: str, v: Any, fmt: str = "{:.2f}") -> str:
        cell = "-" if v is None else (str(v) if isinstance(v, int) else fmt.format(v))
        return f"{label:<40}{cell:>10}"

    out = [rule(f" {title} ", "=")]
    out.append(row("Successful requests:", s.get("completed")))
    out.append(row("Failed requests:", s.get("failed")))
    if s.get("cancelled"):
        out.append(row("Cancelled at the end (not counted):", s.get("cancelled")))
    out.append(row("Benchmark duration (s):", s.get("duration")))
    out.append(row("Total input tokens:", s.get("total_input_tokens")))
    out.append(row("Total generated tokens:", s.get("total_output_tokens")))
    out.append(row("Request throughput (req/s):", s.get("request_throughput")))
    out.append(row("Output token throughput (tok/s):", s.get("output_throughput")))
    if s.get("cancelled") and s.get("all_output_throughput") is not None:  # what the step table's out tok/s counts
        out.append(row("Output tok/s incl. cancelled (tok/s):", s.get("all_output_throughput")))
    out.append(row("Total token throughput (tok/s):", s.get("total_token_throughput")))
    for name, key in (("Time to First Token", "ttft"), ("Time per Output Token (excl. 1st token)", "tpot"),
                      ("Inter-token Latency", "itl"), ("End-to-end Latency", "e2e_latency")):
        short = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2e_latency": "E2E Latency"}[key]
        out.append(rule(name))
        out.append(row(f"Mean {short} (ms):", s.get(f"mean_{key}_ms")))
        out.append(row(f"Median {short} (ms):", s.get(f"median_{key}_ms")))
        for q in percentiles:
            if q != 50.0:
                out.append(row(f"P{q:g} {short} (ms):", s.get(f"p{q:g}_{key}_ms")))
    out.append(rule(ch="="))
    if s.get("cancelled"):
        out.append(RUN_THROUGHPUT_NOTE)
    return "\n".join(out)


RUN_THROUGHPUT_NOTE = ("throughputs: of the successful requests, as bench_serving counts them;\n"
                       "incl. cancelled: every output token that arrived, as the step table's out tok/s")
STEP_COUNTS_NOTE = ("done = the step's own requests (sent at its load) that completed, whenever they ended\n"
                    "req/s = requests completed per second inside its window, whichever step sent them\n"
                    "out tok/s = every output token that arrived in its window, of requests still running too")


def session_percentiles(meta: dict[str, Any]) -> tuple[float, ...]:
    """The percentiles a session was run with (meta.json `percentiles`; before there was a
    choice, p50 and p99)."""
    qs = meta.get("percentiles")
    return tuple(float(q) for q in qs) if isinstance(qs, list) and qs else (50.0, 99.0)


def format_percentile_table(steps: list[StepResult | dict[str, Any]], percentiles: Sequence[float]) -> str:
    """Each step's TTFT, ITL, TPOT and E2E at every percentile asked for (`--percentiles`), in
    ms, a row per figure (narrow enough for 80 columns); a lower bound (censored requests) is
    marked >=. Empty when only p50/p99 were asked for (the step table has those)."""
    qs = list(percentiles)
    if not [q for q in qs if q not in (50.0, 99.0)]:
        return ""
    fixed = {"p50_ttft_ms": "median_ttft_ms", "p50_itl_ms": "median_itl_ms", "p50_e2e_latency_ms": "median_e2e_latency_ms"}
    heads = ["load", "", *(f"p{q:g}" for q in qs)]
    rows = []
    for s in (as_step(x) for x in steps):
        for i, (name, what) in enumerate((("TTFT", "ttft"), ("ITL", "itl"), ("TPOT", "tpot"), ("E2E", "e2e_latency"))):
            row = [s.load if i == 0 else "", name]
            for q in qs:
                key = f"p{q:g}_{what}_ms"
                v = s.percentile(q, what)
                bound = s.bound(fixed.get(key, key)) or bool((s.percentiles or {}).get(key + "_bound"))
                row.append("-" if v is None else ("≥" if bound else "") + ms(v, unit=False))
            rows.append(row)
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(heads)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if i > 1 else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=False))).rstrip()

    return "\n".join(["percentiles (ms)", line(heads), line(["-" * w for w in widths]), *(line(r) for r in rows)])
