"""Engine parts on their own, no server: the pool's bound, per-slot back-off, server-gone by
/health, live TTFT at first token, and a module graph without cycles."""

from __future__ import annotations

import ast
import asyncio
import math
import random
from pathlib import Path

import httpx
import pytest
from hypothesis import given, settings, strategies as st

from redline.engine.client.server_watch import ServerWatch
from redline.engine.load.controller import Controller
from redline.engine.load.sender import FAST_FAIL_S, Sender
from redline.engine.measure import records
from redline.engine.measure.hooks import RequestHooks
from redline.engine.measure.live_metrics import LiveMetrics
from redline.engine.measure.records import RequestRecord
from redline.engine.rules.verdicts import STEP_JUDGE

from helpers import ROOT

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("set"), st.integers(1, 12)),
        st.tuples(st.just("sleep"), st.integers(0, 3)),
        st.tuples(st.just("pause"), st.just(0)),
        st.tuples(st.just("resume"), st.just(0)),
        st.tuples(st.just("abort"), st.just(0)),
        st.tuples(st.just("probe"), st.just(0)),
        st.tuples(st.just("restore"), st.just(0)),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=40, deadline=None)
@given(OPS, st.integers(0, 2**32 - 1))
def test_controller_never_starts_a_request_at_or_above_c(ops, seed):
    """Whatever the operator does, a request is only started while fewer than C are in
    flight; once settled, in-flight equals C (lowering lets running requests finish)."""
    rng = random.Random(seed)
    violations: list[tuple[int, int]] = []

    async def go() -> None:
        ctl: Controller

        def launch(t_intended, item):
            if ctl.in_flight >= ctl.concurrency:
                violations.append((ctl.in_flight, ctl.concurrency))
            return asyncio.sleep(rng.choice((0, 0.001, 0.003, 0.01)))

        ctl = Controller(launch, 4, 64)
        ctl.start()
        for op, n in ops:
            if op == "set":
                ctl.set_concurrency(n)
            elif op == "sleep":
                await asyncio.sleep(n * 0.002)
            elif op == "pause":
                ctl.pause()
            elif op == "resume":
                ctl.resume()
            elif op == "abort":
                await ctl.abort()
            elif op == "probe":
                await ctl.probe()
            else:
                ctl.restore()
            assert ctl.in_flight <= max(ctl.concurrency, ctl.in_flight)  # reads never raise
        ctl.resume()
        for _ in range(200):  # settle: bounded
            await asyncio.sleep(0.002)
            if ctl.in_flight == ctl.concurrency:
                break
        assert ctl.in_flight == ctl.concurrency and ctl.settled_at is not None
        await ctl.stop()

    asyncio.run(go())
    assert not violations, violations


def _sender() -> Sender:
    """A Sender whose requests end as their prompt says: "ok" or an error kind (no network)."""
    s = Sender.__new__(Sender)
    s._free, s.backing_off, s.in_flight, s.cursor = [], 0, {}, {}
    s.hooks = RequestHooks()  # no one listens: `overloaded` fires to nobody

    async def send(prompt, max_tokens, expected, phase=None, **_):
        kind = prompt
        rec = RequestRecord(rid=0, phase="live", step=1, concurrency=2, t_send=0.0)
        rec.t_end = 0.001
        if kind != "ok":
            rec.status, rec.error_kind = records.FAILED, kind
        await asyncio.sleep(0)
        return rec

    s.send = send
    return s


def test_back_off_belongs_to_the_slot_not_the_pool():
    """One slot answered 503 three times backs off 100, 200, 400 ms; a healthy slot beside
    it never waits, and backing_off counts only the waiting slot."""
    s = _sender()
    seen: list[int] = []

    async def go():
        loop = asyncio.get_running_loop()

        async def failing_slot():
            t = loop.time()
            for _ in range(3):
                await s.slot_request("http_503", 1, 1)
            return loop.time() - t

        async def healthy_slot():
            t = loop.time()
            for _ in range(20):
                await s.slot_request("ok", 1, 1)
                seen.append(s.backing_off)
                await asyncio.sleep(0.01)
            return loop.time() - t

        return await asyncio.gather(failing_slot(), healthy_slot())

    slow, fast = asyncio.run(go())
    assert slow >= 2 * FAST_FAIL_S + 4 * FAST_FAIL_S + 8 * FAST_FAIL_S - 0.02  # 0.1 + 0.2 + 0.4 s
    assert fast < 0.6  # 20 x 10 ms plus scheduling: never held by the other slot's streak
    assert max(seen) == 1 and s.backing_off == 0


async def _watch(health_ok: list[bool]) -> tuple[ServerWatch, list[str]]:
    def handler(request: httpx.Request) -> httpx.Response:
        if health_ok[0]:
            return httpx.Response(200, text="ok")
        raise httpx.ConnectError("connection refused", request=request)

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    events: list[str] = []
    w = ServerWatch(client, "http://127.0.0.1:1/health", lambda: events.append("gone"), lambda: events.append("back"), lambda k, t: events.append(k))
    return w, events


def test_server_is_gone_only_when_health_fails_too():
    async def go():
        up = [True]
        w, events = await _watch(up)
        for _ in range(3):
            w.connect_failed()
        await asyncio.sleep(0.05)
        assert not w.gone and events == ["notice"]  # refused connections, but /health answers
        up[0] = False
        for _ in range(3):
            w.connect_failed()
        await asyncio.sleep(0.05)
        assert not w.gone  # one ask without an answer is not enough (HEALTH_FAILS_GONE = 2) ...
        for _ in range(40):
            await asyncio.sleep(0.05)
            if w.gone:
                break
        assert w.gone and events[-1] == "gone"  # ... the second, RECONNECT_BACKOFF_S[0] later, is
        up[0] = True
        for _ in range(100):
            await asyncio.sleep(0.05)
            if not w.gone:
                break
        assert not w.gone and events[-1] == "back"
        await w.stop()

    asyncio.run(go())


def test_live_ttft_enters_the_window_at_the_first_token():
    m = LiveMetrics()
    rec = RequestRecord(rid=1, phase="live", step=1, concurrency=1, t_send=100.0)
    rec.t_first = 100.25
    m.on_first(rec)
    st_ = m.recompute_percentiles(100.3)
    assert st_.ttft.p50 == 0.25 and st_.e2e.p50 is None  # still streaming: no E2E yet
    rec.t_end = 160.0
    m.on_request_end(rec)
    st_ = m.recompute_percentiles(160.1)
    assert st_.ttft.p50 is None  # its first token left the 10 s window long ago
    assert st_.e2e.p50 == 60.0


def _imports(path: Path, package: str) -> set[str]:
    """Modules of the package that `path` imports at run time (TYPE_CHECKING blocks aside)."""
    tree = ast.parse(path.read_text())
    mod_parts = package.split(".")
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.dump(child.test):
                continue
            if isinstance(child, ast.ImportFrom):
                if child.level:
                    base = mod_parts[: len(mod_parts) - child.level + (1 if path.name == "__init__.py" else 0)]
                    mod = ".".join(base + ([child.module] if child.module else []))
                else:
                    mod = child.module or ""
                for a in child.names:
                    out.add(f"{mod}.{a.name}")
                    out.add(mod)
            elif isinstance(child, ast.Import):
                out.update(a.name for a in child.names)
            visit(child)

    visit(tree)
    return out


def test_no_import_cycle_between_modules():
    mods: dict[str, Path] = {}
    for folder, pkg in (("engine", "redline.engine"), ("tui", "redline.tui")):
        for p in (ROOT / folder).rglob("*.py"):
            rel = p.relative_to(ROOT / folder).with_suffix("")
            parts = [x for x in rel.parts if x != "__init__"]
            mods[".".join([pkg, *parts])] = p
    graph = {}
    for name, p in mods.items():
        here = name if p.name == "__init__.py" else name
        graph[name] = {m for m in _imports(p, here) if m in mods and m != name}
    assert "redline.engine.core.engine" in graph["redline.engine.run.preset_runner"]  # the runner drives the engine ...
    assert not any(m.startswith("redline.engine.run.preset_runner") for m in graph["redline.engine.core.engine"])  # ... never the reverse
    assert not any(m.startswith("redline.tui") for n, ms in graph.items() if n.startswith("redline.engine") for m in ms)
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in graph[n]:
            if state.get(m) == 1 and not (n.startswith(m + ".") or m.startswith(n + ".")):
                return stack[stack.index(m):] + [m]
            if m not in state:
                cyc = dfs(m)
                if cyc:
                    return cyc
        stack.pop()
        state[n] = 2
        return None

    for n in graph:
        if n not in state:
            cyc = dfs(n)
            assert cyc is None, " -> ".join(cyc)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0.0, 0.5), st.integers(0, 5)), min_size=1, max_size=40),
    st.lists(st.integers(1, 40), max_size=5),
    st.booleans(),
)
def test_harvesting_gaps_in_pieces_equals_the_whole_request(chunks, cuts, spread):
    """The engine harvests ITLs once a second from where it stopped while chunks still
    arrive: any split gives the request's own ITLs (bench_serving's definition, /generate
    spreading included)."""
    from redline.engine.measure.accumulator import new_gaps

    rec = RequestRecord(rid=1, phase="live", step=1, concurrency=1, t_send=0.0)
    rec.spread_itl = spread
    got: list[float] = []
    cursor, t, added = 0, 0.0, 0
    for cut in sorted(cuts) + [len(chunks)]:
        while added < min(cut, len(chunks)):  # chunks arrive ...
            dt, k = chunks[added]
            t += dt
            rec.chunk_times.append(t)
            rec.chunk_tokens.append(k)
            added += 1
        cursor, gaps = new_gaps(rec, cursor)  # ... and a harvest takes what is new
        got.extend(gaps.itl)
    assert got == rec.itls()
    assert len(rec.itls()) == (sum(k for _, k in chunks[1:] if k > 0) if spread else len(chunks) - 1)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.floats(0.001, 0.6), min_size=1, max_size=12), min_size=1, max_size=6),
    st.lists(st.floats(0.05, 3.0), min_size=1, max_size=6),
)
def test_one_harvest_of_every_request_equals_harvesting_them_one_by_one(streams, cuts):
    """harvest_all feeds all in-flight requests' new gaps in one call per histogram: the step's
    ITLs are exactly those of harvesting each request alone, at any harvest times, and the
    live window holds each ITL in the second it arrived."""
    from types import SimpleNamespace

    from redline.engine.core.event_log import EventLog
    from redline.engine.core.measurements import Measurements
    from redline.engine.measure.live_metrics import LiveMetrics
    from redline.engine.measure.records import Clock
    from redline.engine.measure.step_book import StepBook

    def setup():
        clock = Clock.now()
        book = StepBook(clock, judge=STEP_JUDGE)
        rec = Measurements(LiveMetrics(), book, EventLog(), clock)
        step = book.open_step(len(streams), "ramp", 100.0)
        recs = {i: RequestRecord(rid=i, phase="ramp", step=step.index, concurrency=len(streams), t_send=100.0) for i in range(len(streams))}
        sender = SimpleNamespace(in_flight=dict(recs), cursor={})
        rec.load_sender = sender
        return rec, step, recs, sender

    batched, one_by_one = setup(), setup()
    arrivals = sorted((100.0 + sum(gaps[: j + 1]), i) for i, gaps in enumerate(streams) for j in range(len(gaps)))
    harvest_at = sorted(100.0 + c for c in cuts) + [1e9]
    k = 0
    for t_h in harvest_at:
        while k < len(arrivals) and arrivals[k][0] <= t_h:  # chunks arrive ...
            t, i = arrivals[k]
            for _, _, recs, _ in (batched, one_by_one):
                recs[i].chunk_times.append(t)
                recs[i].chunk_tokens.append(1)
            k += 1
        batched[0].harvest_all()  # ... and a harvest takes what is new: all at once, or each alone
        r1, _, recs1, sender1 = one_by_one
        for rq in recs1.values():
            r1.harvest(rq, sender1)
    (ra, sa, _, _), (rb, sb, recs_b, _) = batched, one_by_one
    assert sa.itl.count == sb.itl.count == sum(len(g) - 1 for g in streams)
    assert sa.itl.sorted_values() == sb.itl.sorted_values() and sa.itl.total == pytest.approx(sb.itl.total)
    assert sa.chunk_gap.sorted_values() == sb.chunk_gap.sorted_values()
    # the live window: every ITL in the second its closing chunk arrived (one request at a
    # time, a request's older gaps joined a newer second another request had opened)
    truth: dict[int, list[float]] = {}
    for r in recs_b.values():
        for t, vs, _ in r.gaps_from(1):
            truth.setdefault(math.floor(t), []).extend(vs)
    da, db = ra.metrics._itl, rb.metrics._itl
    assert {s.sec: sorted(s.vals) for s in da._secs} == {k: sorted(v) for k, v in truth.items()}
    assert sorted(v for s in db._secs for v in s.vals) == sorted(v for s in da._secs for v in s.vals)


def test_a_closing_result_holds_what_ended_by_the_close_by_its_stamps():
    """A step closes at t=10 with three own requests in flight. Before its result is taken the
    engine reads two ends (a worker's report, a loop catching up): one stamped 9.5 (before the
    close: the closing result counts it) and one stamped 10.4 (after: it stays outstanding,
    censored at its age at the close, and counts only once the result is taken, as late).
    The third ends at 12. The record then holds all three, two of them late; the two that
    ended after the close keep their E2E as a bound (their age at the close: what they did
    after it ran under the next load)."""
    from redline.engine.measure.records import Clock
    from redline.engine.measure.step_book import StepBook

    book = StepBook(Clock.now(), judge=STEP_JUDGE)
    acc = book.open_step(3, "measure", 5.0)
    recs = [RequestRecord(rid=i, phase="measure", step=acc.index, concurrency=3, t_send=6.0) for i in (1, 2, 3)]
    for r in recs:
        r.t_first = 6.2
        book.on_send(r)

    def end(r: RequestRecord, t: float) -> None:
        r.t_end = t
        r.chunk_times, r.chunk_tokens = [6.2, t], [1, 1]
        r.output_tokens = 2
        book.on_end(r)

    acc.close(10.0)
    end(recs[0], 9.5)
    end(recs[1], 10.4)  # read before the result, stamped after the close
    closing = book.close_step(acc, 10.0)
    assert (closing.requests_sent, closing.completed, closing.censored_e2e, closing.ended_after_close) == (3, 1, 2, 0)
    assert closing.median_e2e_latency_ms_bound and not closing.final
    assert closing.p99_e2e_latency_ms == pytest.approx(4000.0)  # the censored: their age at the close, 4 s
    assert acc.completed == 2 and acc.ended_after_close == 1  # counted now, late
    end(recs[2], 12.0)
    book.record(closing)
    final = book.steps[-1]
    assert (final.completed, final.ended_after_close, final.censored_e2e, final.final) == (3, 2, 2, True)
    assert final.p99_e2e_latency_ms == pytest.approx(4000.0) and final.p99_e2e_latency_ms_bound  # 3.5 s, then ≥ 4 s twice
