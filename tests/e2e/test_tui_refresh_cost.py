"""A refresh of the operator's screen (app.py watch_snapshot, every REFRESH_S and for every
snapshot a test feeds) finds the body's widgets once, not by querying the DOM each time: a
query walks every widget on the screen, and a refresh used to make ~30 of them (issue 26: the
TUI's own cost per refresh, and most of the suite's time is drawing screens). A metric row's
value is laid out again only when its text changed. No sim: the `healthy` story of
tests/e2e/test_screen.py on a FakeHost."""

from __future__ import annotations

from textual.dom import DOMNode
from textual.widgets import Label

from redline.tui.widgets.metric_row import MetricRow

from e2e.test_screen import make_app, play, screen_lines


async def test_a_refresh_queries_the_dom_only_for_the_header_and_the_rate_line(monkeypatch):
    app, host, snaps = make_app("healthy")
    async with app.run_test(size=(80, 24)) as pilot:
        await play(pilot, host, snaps[:60])
        before = screen_lines(app)
        queries: list[str] = []
        one, many = DOMNode.query_one, DOMNode.query

        def query_one(self, *a, **k):
            queries.append(f"query_one{a}")
            return one(self, *a, **k)

        def query(self, *a, **k):
            queries.append(f"query{a}")
            return many(self, *a, **k)

        monkeypatch.setattr(DOMNode, "query_one", query_one)
        monkeypatch.setattr(DOMNode, "query", query)
        for s in snaps[60:]:
            host.snap = s
            app.pull_snapshot()
        n = len(snaps) - 60
        monkeypatch.undo()
        assert len(queries) <= 2 * n, queries[:12]  # StatusHeader and RateLine, at the top of the screen
        await play(pilot, host, snaps[-1:])
        after = screen_lines(app)
    assert after != before, "the later seconds were drawn"
    # the same screen as a fresh app that played the whole story (tests/e2e/test_screen.py)
    app2, host2, snaps2 = make_app("healthy")
    async with app2.run_test(size=(80, 24)) as pilot2:
        await play(pilot2, host2, snaps2)
        assert screen_lines(app2) == after


async def test_a_metric_value_is_updated_only_when_its_text_changes(monkeypatch):
    updates: list[str] = []
    original = Label.update

    def update(self, content="", *a, **k):
        if "metric-value" in self.classes:
            updates.append(str(content))
        return original(self, content, *a, **k)

    monkeypatch.setattr(Label, "update", update)
    app, host, snaps = make_app("healthy")
    async with app.run_test(size=(80, 24)) as pilot:
        await play(pilot, host, snaps)
        rows = list(app.query(MetricRow))
        shown = {r.id: str(r.query_one(".metric-value", Label).render()) for r in rows}
        n = len(updates)
        for _ in range(5):  # the same snapshot again: nothing to lay out
            app.pull_snapshot()
        assert len(updates) == n
        await pilot.pause()
        assert {r.id: str(r.query_one(".metric-value", Label).render()) for r in rows} == shown
    assert 0 < n < 9 * len(snaps), n  # fewer than one update per row and second
