"""Saturation curves: the PNG (matplotlib), the terminal curves at 80x24 (plotext) and the
TUI's live curve view. Data: two sessions recorded against the sim's healthy and pp-capped
profiles (tests/fixtures/sessions, made by tests/integration/test_compare.py's preset)."""

from __future__ import annotations

import pytest

from redline.engine.core.snapshot import Snapshot
from redline.engine.measure.step_result import BreakResult, StepResult
from redline.engine.report.compare import knee, load_sessions, session_from_steps
from redline.tui.plots import nice_ticks, render_curves, terminal_curves, visible_width, write_png

from helpers import FIXTURES, ROOT

SESSIONS = FIXTURES / "sessions"

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def sessions():
    return load_sessions([SESSIONS / "healthy", SESSIONS / "pp-capped"])


def test_fixture_sessions_are_the_two_profiles(sessions):
    healthy, capped = sessions
    assert knee(capped) == capped.break_result.last_good_concurrency == 8
    # four steps, but the top one still gains +155 % over the best below: no knee yet
    assert healthy.break_result is None and knee(healthy) is None


def test_png_is_a_real_image(sessions, tmp_path):
    p = write_png(sessions, tmp_path / "curves.png")
    data = p.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert data[12:16] == b"IHDR"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width >= 1000 and height >= 500
    assert len(data) > 10_000


def test_png_with_one_session_and_an_empty_one(sessions, tmp_path):
    empty = session_from_steps("empty", [])
    p = write_png([sessions[1], empty], tmp_path / "one.png")
    assert p.read_bytes()[:8] == PNG_MAGIC


@pytest.mark.parametrize("color", [False, True])
def test_terminal_curves_fit_80x24(sessions, color):
    text = terminal_curves(sessions, 80, 24, color=color)
    lines = text.split("\n")
    assert len(lines) <= 24
    assert max(visible_width(ln) for ln in lines) <= 80
    plain = "\n".join(lines) if not color else "".join(__import__("re").sub(r"\x1b\[[0-9;]*m", "", text))
    for s in sessions:
        assert s.label in plain
    assert "knee C=8" in plain and "knee C=48" not in plain
    assert "output tok/s vs C" in plain and "p99 TTFT" in plain
    for c in ("4", "8", "16", "48"):
        assert f" {c} " in plain.split("\n")[-1] + " "  # x ticks at the measured concurrencies
    if not color:
        assert "\x1b" not in text


@pytest.mark.parametrize("size", [(60, 30), (120, 40), (40, 12), (20, 6)])
def test_terminal_curves_other_sizes(sessions, size):
    w, h = size
    lines = render_curves(sessions, w, h, color=False).split("\n")
    assert len(lines) <= h and max(visible_width(ln) for ln in lines) <= w


def test_terminal_curves_degenerate_inputs():
    one = session_from_steps("one", [StepResult(concurrency=32, duration_s=1, completed=1, failed=0,
                                                output_throughput=50.0, input_throughput=0,
                                                request_throughput=1, p99_ttft_ms=None)])
    text = terminal_curves([one, session_from_steps("none", [])])
    assert "knee C=32" not in text and "(no steps)" in text  # one step names no knee
    assert "(no steps)" in terminal_curves([session_from_steps("none", [])])


def test_nice_ticks():
    assert nice_ticks(0, 905) == [0, 250, 500, 750, 1000]
    assert nice_ticks(0, 2.3)[-1] >= 2.3
    assert nice_ticks(0, 0) == [0, 0.25, 0.5, 0.75, 1.0]


# -- the TUI curve view --------------------------------------------------------------------

def _step(c: int, tok: float, ttft: float, i: int) -> StepResult:
    return StepResult(concurrency=c, duration_s=5.0, completed=20, failed=0, output_throughput=tok,
                      input_throughput=0.0, request_throughput=2.0, median_ttft_ms=ttft / 2,
                      p99_ttft_ms=ttft, index=i, phase="live", steady=True, output_throughput_se=1.0)


def _snap(steps, brk=None) -> Snapshot:
    return Snapshot(t=0, elapsed_s=0, state="running", target_c=8, previous_c=None, in_flight=8,
                    steps=tuple(steps), break_result=brk)


async def test_curve_view_renders_in_an_80x24_app(sessions):
    from textual.app import App, ComposeResult

    from redline.tui.widgets.curve_view import CurveView

    class CurveApp(App):
        def compose(self) -> ComposeResult:
            yield CurveView(sessions[1])

    app = CurveApp()
    async with app.run_test(size=(80, 24)) as pilot:
        view = app.query_one(CurveView)
        await pilot.pause()
        # no step yet: the earlier session's curve already shows
        assert sessions[1].label in view.content.plain and "this session  (no steps)" in view.content.plain
        steps = [_step(4, 90, 80, 0), _step(8, 180, 85, 1), _step(16, 350, 95, 2), _step(32, 340, 140, 3)]
        view.show(_snap(steps))
        await pilot.pause()
        n = view.renders
        text = view.content.plain
        assert "this session" in text and sessions[1].label in text
        assert "knee C=16" in text and "knee C=8" in text  # live (best so far) and the earlier session
        lines = text.split("\n")
        assert len(lines) <= 24 and max(len(ln) for ln in lines) <= 80
        view.show(_snap(steps))  # same steps: no redraw
        view.show(_snap(steps))
        assert view.renders == n
        view.show(_snap(steps + [_step(32, 360, 900, 3)], BreakResult("plateau", 32, 16)))
        await pilot.pause()
        assert view.renders == n + 1
        assert "32" in view.content.plain
        await pilot.resize_terminal(100, 30)
        await pilot.pause()
        assert view.renders == n + 2  # a new size redraws


async def test_curve_view_without_steps_or_comparison_says_so():
    from textual.app import App, ComposeResult

    from redline.tui.widgets.curve_view import CurveView

    class CurveApp(App):
        def compose(self) -> ComposeResult:
            yield CurveView()

    app = CurveApp()
    async with app.run_test(size=(80, 24)) as pilot:
        view = app.query_one(CurveView)
        view.show(_snap([]))
        await pilot.pause()
        assert "no finished step yet" in str(view.content)


async def test_g_toggle_recipe_with_the_real_stylesheet(sessions):
    """How tui/app.py wires it: CurveView(id="curve") beside #body, `g` toggles the app's
    -graph class (tui/redline.tcss shows #curve and hides #body). Hidden, the view draws
    nothing; shown, it draws the snapshot it was last given."""
    from textual.app import App, ComposeResult
    from textual.binding import Binding
    from textual.containers import Vertical
    from textual.widgets import Static

    from redline.tui.widgets.curve_view import CurveView

    class GraphApp(App):
        CSS_PATH = str(ROOT / "tui" / "redline.tcss")
        BINDINGS = [Binding("g", "graph", "curve")]

        def compose(self) -> ComposeResult:
            with Vertical(id="body"):
                yield Static("live panels")
            yield CurveView(sessions[1], id="curve")

        def action_graph(self) -> None:
            self.toggle_class("-graph")

    app = GraphApp()
    async with app.run_test(size=(80, 24)) as pilot:
        view = app.query_one(CurveView)
        view.show(_snap([_step(4, 90, 80, 0), _step(8, 180, 85, 1)]))
        await pilot.pause()
        assert view.renders == 0 and not view.display
        await pilot.press("g")
        await pilot.pause()
        assert view.display and not app.query_one("#body").display
        assert view.renders == 1 and "knee C=8" in view.content.plain
        await pilot.press("g")
        await pilot.pause()
        assert not view.display and app.query_one("#body").display


def test_the_knee_needs_a_flattening_curve():
    def s(c, tok):
        return StepResult(concurrency=c, duration_s=5, completed=5, failed=0, output_throughput=tok, input_throughput=0, request_throughput=1,
                          steady=True, output_throughput_se=0.0)

    assert knee(session_from_steps("two", [s(32, 500.0), s(64, 505.0)])) == 32  # flat from 32: it is there already
    assert knee(session_from_steps("one", [s(32, 500.0)])) is None  # one load: no curve
    assert knee(session_from_steps("rising", [s(8, 100.0), s(16, 190.0), s(32, 300.0)])) is None  # +58 %: still rising
    assert knee(session_from_steps("flat", [s(8, 100.0), s(16, 190.0), s(32, 195.0)])) == 16  # within 5 % of 195
    assert knee(session_from_steps("fell", [s(8, 100.0), s(16, 190.0), s(32, 150.0)])) == 16


async def test_the_overlay_says_when_the_earlier_session_ran_another_workload(sessions):
    """`--compare DIR` of a session that ran 16 in / 24 out under a live one running
    1024 / 2048: the curve says in words that the two are not comparable at the same C (as
    `redline report A B` does), above the plot; the same workload says nothing."""
    from dataclasses import replace

    from textual.app import App, ComposeResult

    from redline.tui.widgets.curve_view import CurveView

    class CurveApp(App):
        def compose(self) -> ComposeResult:
            yield CurveView(sessions[1])

    def live(workload: dict) -> list[StepResult]:
        return [replace(_step(c, 90.0 * c, 80.0, i), workload=workload) for i, c in enumerate((4, 8, 16))]

    app = CurveApp()
    async with app.run_test(size=(80, 24)) as pilot:
        view = app.query_one(CurveView)
        view.show(_snap(live({"dataset": "random", "input_len": 1024, "output_len": 2048})))
        await pilot.pause()
        lines = view.content.plain.split("\n")
        assert lines[0].startswith("⚠ not comparable at the same C: different workloads (this session: 1024 in"), lines[:3]
        assert "16 in / 24 out" in lines[1] and len(lines) <= 24 and max(map(len, lines)) <= 80
        view.show(_snap(live({"dataset": "random", "input_len": 16, "output_len": 24})))
        await pilot.pause()
        assert "not comparable" not in view.content.plain
