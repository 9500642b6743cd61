"""Issue 46, case 8: the terminal curves draw a lower bound as a bound, as the HTML page does:
an open marker, joined by no line to the measured points (the sweep's mb64 read as falling
from 4804 ms at C=128 to a bound >=3324 at C=256)."""

from __future__ import annotations

from redline.engine.measure.step_result import StepResult
from redline.engine.report.compare import session_from_steps
from redline.tui.plots import BOUND_LEGEND, BOUND_MARK, render_curves, split_bounds

BLOCKS = set("▀▄█▌▐▖▗▘▙▚▛▜▝▞▟") | {chr(c) for c in range(0x2800, 0x2900)}  # the line's glyphs (hd, braille)


def _step(i: int, c: int, tok: float, ttft: float, bound: bool = False) -> StepResult:
    s = StepResult(concurrency=c, duration_s=10, completed=10, failed=0, output_throughput=tok, input_throughput=1,
                   request_throughput=1, index=i, p99_ttft_ms=ttft, steady=True)
    s.p99_ttft_ms_bound = bound
    return s


def _mb64():
    return session_from_steps("mb64", [_step(0, 32, 1000, 300), _step(1, 64, 1800, 900), _step(2, 128, 1900, 4804),
                                       _step(3, 256, 1910, 3324, bound=True)])


def test_a_bound_is_not_a_point_of_the_line():
    measured, bounds = split_bounds(_mb64(), "p99_ttft_ms")
    assert measured == [(32, 300.0), (64, 900.0), (128, 4804.0)] and bounds == [(256, 3324.0)]
    assert split_bounds(_mb64(), "output_throughput")[1] == []


def test_the_terminal_draws_the_bound_open_and_joined_to_nothing():
    text = render_curves([_mb64()], 80, 24, color=False)
    lines = text.splitlines()
    assert BOUND_LEGEND in text  # the legend says what the open marker is
    ttft = [ln[40:] for ln in lines if len(ln) > 40]  # the right panel: p99 TTFT
    at = [(r, ln.index(BOUND_MARK)) for r, ln in enumerate(ttft) if BOUND_MARK in ln]
    assert len(at) == 1, text
    row, col = at[0]
    axis = next(ln for ln in ttft if "128" in ln and "256" in ln)
    assert abs(col - (axis.index("256") + 1)) <= 1  # drawn at C=256
    c128 = axis.index("128") + 1
    between = "".join(ln[c128 + 1:col] for ln in ttft)
    assert not BLOCKS & set(between), text  # no line from C=128's 4804 down to the bound
    below = [ln[col] for ln in ttft[row + 1:] if len(ln) > col]
    assert not BLOCKS & set(below[:-3])  # nothing joins it from below either


def test_curves_without_bounds_say_nothing_of_them():
    s = session_from_steps("plain", [_step(0, 8, 100, 50), _step(1, 16, 190, 60)])
    assert BOUND_LEGEND not in render_curves([s], 80, 24, color=False)
