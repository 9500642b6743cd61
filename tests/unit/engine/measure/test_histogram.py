"""Percentiles (engine/measure/histogram.py) against the truth: numpy's linear interpolation.

Exact mode must equal numpy to 1e-12 relative; histogram mode must be within the documented
precision (each order statistic within sqrt(HIST_RATIO) - 1 of itself, so the interpolated
value within that of the exact one; HIST_MIN_S absolute at the bottom of the range).
"""

from __future__ import annotations

import builtins
import math
import random

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

import redline.engine.measure.histogram as H
from redline.engine.constants import EXACT_LIMIT, HIST_MAX_S, HIST_MIN_S, HIST_RATIO
from redline.engine.measure.histogram import (
    HIST_PRECISION,
    NBINS,
    Digest,
    LogHistogram,
    RollingDigest,
    RollingHistogram,
    bin_index,
    bin_value,
    quantile,
)

try:
    import numpy as np
except ImportError:  # pragma: no cover - numpy comes with matplotlib in the test extra
    np = None

QS = (0.0, 0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 1.0)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def truth(values, q: float) -> float:
    """numpy's default (linear) quantile; the reference `quantile` when numpy is missing."""
    if np is not None:
        return float(np.quantile(np.asarray(values, dtype=float), q))
    return quantile(sorted(values), q)


def assert_exact(got, values, q):
    want = truth(values, q)
    scale = max(abs(want), max(abs(v) for v in values) * 1e-3)
    assert got is not None
    assert abs(got - want) <= 1e-12 * scale + 1e-300, (q, got, want)  # (+ a floor: subnormal values such as 5e-324)


def binned_bound(want: float) -> float:
    """Documented precision of a histogram quantile for values >= 0 up to HIST_MAX_S."""
    return HIST_PRECISION * abs(want) * (1 + 1e-9) + HIST_MIN_S


def assert_binned(got, values, q):
    want = truth(values, q)
    assert got is not None
    assert abs(got - want) <= binned_bound(want), (q, got, want, (got - want) / want if want else None)


# -- adversarial samples (values in seconds) --------------------------------------------------
in_range = st.floats(min_value=HIST_MIN_S, max_value=HIST_MAX_S, allow_nan=False, allow_infinity=False)
tiny = st.floats(min_value=0.0, max_value=HIST_MIN_S)


@st.composite
def bimodal(draw):
    a = draw(st.floats(min_value=1e-4, max_value=0.1))
    b = a * draw(st.floats(min_value=2.0, max_value=1e4))
    b = min(b, HIST_MAX_S)
    na = draw(st.integers(1, 300))
    nb = draw(st.integers(1, 300))
    jitter = draw(st.floats(min_value=0.0, max_value=0.05))
    rnd = random.Random(draw(st.integers(0, 2**32)))
    vals = [a * (1 + jitter * rnd.random()) for _ in range(na)] + [b * (1 + jitter * rnd.random()) for _ in range(nb)]
    rnd.shuffle(vals)
    return vals


@st.composite
def heavy_tail(draw):
    alpha = draw(st.floats(min_value=0.3, max_value=3.0))
    scale = draw(st.floats(min_value=1e-4, max_value=1.0))
    n = draw(st.integers(1, 2000))
    rnd = random.Random(draw(st.integers(0, 2**32)))
    return [min(scale * rnd.paretovariate(alpha), HIST_MAX_S) for _ in range(n)]


@st.composite
def spike_and_outliers(draw):
    v = draw(in_range)
    n = draw(st.integers(1, 20000))
    outliers = draw(st.lists(in_range, min_size=0, max_size=5))
    vals = [v] * n + outliers
    random.Random(draw(st.integers(0, 2**32))).shuffle(vals)
    return vals


@st.composite
def edges(draw):
    """Values at the histogram range edges and at bin boundaries."""
    picks = st.sampled_from(
        [0.0, HIST_MIN_S * 0.5, HIST_MIN_S, HIST_MIN_S * 1.000001, HIST_MIN_S * HIST_RATIO,
         HIST_MAX_S, HIST_MAX_S * 0.999999, HIST_MAX_S / HIST_RATIO,
         math.exp(math.log(HIST_MIN_S) + 500 * math.log(HIST_RATIO)),  # a bin boundary
         math.nextafter(math.exp(math.log(HIST_MIN_S) + 500 * math.log(HIST_RATIO)), 0.0)]
    )
    return draw(st.lists(st.one_of(picks, in_range, tiny), min_size=1, max_size=200))


samples = st.one_of(
    st.lists(in_range, min_size=1, max_size=300),
    bimodal(),
    heavy_tail(),
    spike_and_outliers(),
    edges(),
    st.lists(in_range, min_size=1, max_size=1).map(lambda v: v * 7),  # all equal
    st.lists(in_range, min_size=1, max_size=1),  # single value
    st.lists(in_range, min_size=2, max_size=2),  # two values
)


# -- the example ------------------------------------------------------------------------
EXAMPLE = [0.030] * 49 + [0.500]
EXAMPLE_P99 = 0.030 + 0.51 * 0.470  # 269.7 ms


def test_reference_quantile_on_the_example():
    assert quantile(sorted(EXAMPLE), 0.99) == pytest.approx(EXAMPLE_P99, rel=1e-12)
    if np is not None:
        assert float(np.percentile(EXAMPLE, 99)) == pytest.approx(EXAMPLE_P99, rel=1e-12)


@pytest.mark.parametrize("limit", [EXACT_LIMIT, 0], ids=["exact", "histogram"])
def test_example_p99_is_about_270ms(limit):
    d = Digest(limit=limit)
    for v in EXAMPLE:
        d.add(v)
    assert d.values_exact is (limit == EXACT_LIMIT)
    assert d.quantile(0.99) == pytest.approx(EXAMPLE_P99, rel=0.01)
    assert d.quantile(0.5) == pytest.approx(0.030, rel=0.01)
    r = RollingDigest(10.0, limit=limit)
    r.add_many(100.0, EXAMPLE)
    (p50, p99), vmax = r.quantiles((0.5, 0.99))
    assert vmax == 0.5
    assert p99 == pytest.approx(EXAMPLE_P99, rel=0.01)
    assert p50 == pytest.approx(0.030, rel=0.01)


def test_example_from_log_histogram_without_clamp_help():
    # spread the 30 ms gaps over several bins so the bin values, not the min, answer
    vals = [0.030 * (1 + 0.0004 * i) for i in range(49)] + [0.500]
    h = LogHistogram()
    h.add_many(vals)
    want = truth(vals, 0.99)
    assert want == pytest.approx(0.2702, abs=1e-3)
    assert h.quantile(0.99) == pytest.approx(want, rel=0.01)
    assert abs(h.quantile(0.99) - want) <= binned_bound(want)
    # the old nearest-rank answer (the bin holding rank 48) was about 30 ms: far outside
    assert h.quantile(0.99) > 0.25


def test_log_histogram_add_and_add_many_agree_and_keep_min():
    a, b = LogHistogram(), LogHistogram()
    vals = [0.5, 0.002, 3.0, 0.002, 0.07]
    for v in vals:
        a.add(v)
    b.add_many(vals)
    assert a.bins == b.bins and a.count == b.count == 5
    assert a.vmin == b.vmin == 0.002 and a.vmax == b.vmax == 3.0
    assert a.quantiles(QS) == b.quantiles(QS)
    assert a.quantile(0.0) == 0.002 and a.quantile(1.0) == 3.0
    assert LogHistogram().quantile(0.5) is None and LogHistogram().mean() is None
    m = LogHistogram()
    m.merge(a)
    assert m.vmin == 0.002 and m.vmax == 3.0 and m.quantiles(QS) == a.quantiles(QS)


def test_log_histogram_filled_by_hand_still_answers():
    # benchmarks/lag.py builds one from bin differences and never sets vmin
    src = LogHistogram()
    src.add_many([0.001] * 90 + [0.010] * 10)
    h = LogHistogram()
    h.bins = list(src.bins)
    h.count = src.count
    h.vmax = src.vmax
    assert h.quantile(0.5) == pytest.approx(0.001, rel=HIST_PRECISION * 1.01)
    assert h.quantile(0.99) == pytest.approx(0.010, rel=HIST_PRECISION * 1.01)


def test_api_importable():
    assert RollingHistogram is RollingDigest
    assert bin_value(bin_index(0.03)) == pytest.approx(0.03, rel=HIST_PRECISION * 1.001)
    assert bin_index(0.0) == 0 and bin_index(HIST_MAX_S * 100) == NBINS - 1
    assert 0 < bin_index(HIST_MAX_S) < NBINS - 1


# -- property tests ------------------------------------------------------------------------------
@SETTINGS
@given(samples, st.floats(min_value=0.0, max_value=1.0))
def test_exact_mode_equals_numpy(values, q):
    assume(len(values) <= EXACT_LIMIT)
    d = Digest()
    d.add_many(values)
    assert d.values_exact
    for qq in QS + (q,):
        assert_exact(d.quantile(qq), values, qq)
    assert d.max == max(values) and d.min == min(values) and d.count == len(values)
    assert d.mean() == pytest.approx(sum(values) / len(values), rel=1e-9, abs=1e-300)


@SETTINGS
@given(samples, st.floats(min_value=0.0, max_value=1.0))
def test_histogram_mode_within_documented_precision(values, q):
    d = Digest(limit=0)  # binned from the first value
    d.add_many(values)
    assert not d.values_exact
    got = d.quantiles(QS + (q,))
    for qq, g in zip(QS + (q,), got, strict=False):
        assert_binned(g, values, qq)
    assert got[0] == min(values) and got[QS.index(1.0)] == max(values)  # the clamp: exact ends
    assert got[: len(QS)] == sorted(got[: len(QS)])  # monotone in q
    h = LogHistogram()
    for v in values:
        h.add(v)
    assert h.quantiles(QS) == got[: len(QS)]


@SETTINGS
@given(st.lists(st.floats(min_value=HIST_MAX_S, max_value=1e9), min_size=1, max_size=50), st.lists(in_range, max_size=50))
def test_histogram_beyond_range_stays_within_min_and_max(big, normal):
    vals = big + normal
    d = Digest(limit=0)
    d.add_many(vals)
    for g in d.quantiles(QS):
        assert min(vals) <= g <= max(vals)


@SETTINGS
@given(st.lists(st.floats(min_value=-1e6, max_value=1e6), min_size=1, max_size=500))
def test_exact_mode_any_sign(values):
    d = Digest()
    d.add_many(values)
    want_scale = max(abs(v) for v in values) or 1.0
    for q in QS:
        assert abs(d.quantile(q) - truth(values, q)) <= 1e-12 * want_scale


@SETTINGS
@given(samples, st.integers(0, 2**32), st.integers(0, 400))
def test_digest_crosses_the_limit(values, seed, limit):
    """Fed one by one and in batches: exact while count <= limit, then binned, and right."""
    rnd = random.Random(seed)
    d = Digest(limit=limit)
    i = 0
    while i < len(values):
        k = rnd.randint(1, 50)
        chunk = values[i : i + k]
        if k == 1:
            d.add(chunk[0])
        else:
            d.add_many(chunk)
        i += k
        assert d.values_exact is (d.count <= limit)
        seen = values[:i]
        qs = d.quantiles((0.5, 0.99))
        for q, g in zip((0.5, 0.99), qs, strict=False):
            (assert_exact if d.values_exact else assert_binned)(g, seen, q)


@SETTINGS
@given(samples, st.integers(0, 2**32), st.integers(0, 300))
def test_merge_equals_single_feed(values, seed, limit):
    rnd = random.Random(seed)
    cut = rnd.randint(0, len(values))
    a_vals, b_vals = values[:cut], values[cut:]
    one = Digest(limit=limit)
    one.add_many(values)
    a, b = Digest(limit=limit), Digest(limit=limit)
    for v in a_vals:  # one by one: a may spill on its own
        a.add(v)
    b.add_many(b_vals)
    a.merge(b)
    assert a.count == one.count == len(values)
    assert a.values_exact is one.values_exact is (len(values) <= limit)
    assert a.quantiles(QS) == one.quantiles(QS)
    assert a.max == one.max and a.min == one.min
    assert a.mean() == pytest.approx(one.mean(), rel=1e-9)
    # and the other way round
    b2 = Digest(limit=limit)
    b2.add_many(b_vals)
    a2 = Digest(limit=limit)
    a2.add_many(a_vals)
    b2.merge(a2)
    assert b2.quantiles(QS) == one.quantiles(QS)


def test_merge_into_itself():
    d = Digest(limit=10)
    d.add_many([1.0, 2.0, 3.0])
    d.merge(d)
    assert d.count == 6 and d.values_exact and d.quantile(0.5) == 2.0
    d.merge(d)
    d.merge(d)  # 24 values: binned
    assert d.count == 24 and not d.values_exact
    assert d.quantile(0.5) == pytest.approx(2.0, rel=HIST_PRECISION * 1.001)


def test_empty():
    d = Digest()
    assert d.quantile(0.5) is None and d.quantiles((0.5, 0.9)) == [None, None]
    assert d.max is None and d.mean() is None and d.count == 0 and d.values_exact
    d.merge(Digest())
    assert d.count == 0
    r = RollingDigest(10.0)
    assert r.quantiles((0.5, 0.99)) == ([None, None], None)
    r.add_many(1.0, [])
    r.expire(100.0)
    assert r.count == 0


def test_digest_memory_is_bounded():
    d = Digest(limit=1000)
    for _ in range(50):
        d.add_many([0.01, 0.02, 0.5] * 1000)
    assert d.count == 150_000 and not d.values_exact
    assert d._exact is None and len(d._hist.bins) == NBINS
    assert d.quantile(0.5) == pytest.approx(0.02, rel=HIST_PRECISION * 1.001)


# -- no re-sort without new values ----------------------------------------------------------------
class _CountingSorted:
    def __init__(self):
        self.calls: list[int] = []

    def __call__(self, it, *a, **kw):
        out = builtins.sorted(it, *a, **kw)
        self.calls.append(len(out))
        return out


def test_digest_sorts_once_per_batch(monkeypatch):
    spy = _CountingSorted()
    monkeypatch.setattr(H, "sorted", spy, raising=False)
    d = Digest()
    d.add_many([0.3, 0.1, 0.2] * 100)
    for _ in range(5):
        d.quantiles((0.5, 0.9, 0.99))
        d.quantile(0.5)
    assert d.sorts == 1 and spy.calls == [300]
    d.add(0.05)
    d.quantile(0.5)
    d.quantile(0.99)
    assert d.sorts == 2 and spy.calls == [300, 301]
    assert d.quantile(0.0) == 0.05


def test_rolling_does_not_resort_without_changes(monkeypatch):
    spy = _CountingSorted()
    monkeypatch.setattr(H, "sorted", spy, raising=False)
    r = RollingDigest(10.0)
    r.add_many(100.2, [0.3, 0.1, 0.2])
    r.add_many(101.5, [0.4, 0.05])
    first = r.quantiles((0.5, 0.99))
    n_sorts, n_calls = r.sorts, len(spy.calls)
    assert n_sorts == 1
    for _ in range(4):  # four snapshots a second, nothing new
        assert r.quantiles((0.5, 0.99)) == first
        r.expire(102.0)  # nothing leaves
    assert r.sorts == n_sorts and len(spy.calls) == n_calls
    r.add(102.1, 0.6)
    r.quantiles((0.5,))
    assert r.sorts == n_sorts + 1
    # only the newest second is sorted again: the older ones keep their sorted runs
    assert 3 not in spy.calls[n_calls:]


def test_rolling_large_window_sorts_bins_not_values(monkeypatch):
    spy = _CountingSorted()
    monkeypatch.setattr(H, "sorted", spy, raising=False)
    r = RollingDigest(10.0, limit=1000)
    rnd = random.Random(1)
    for s in range(10):
        r.add_many(1000.0 + s, [rnd.choice((0.01, 0.02, 0.03, 0.5)) for _ in range(5000)])
    assert r.count == 50_000 and not r.values_exact
    spy.calls.clear()
    for _ in range(4):
        r.quantiles((0.5, 0.9, 0.99))
    assert spy.calls and max(spy.calls) <= 10  # four bins in use, never 50,000 values
    # a second with more than the limit keeps no values (memory stays bounded)
    assert all(s.vals is None for s in r._secs)


@SETTINGS
@given(
    st.lists(
        st.tuples(st.floats(min_value=0.0, max_value=4.0), st.lists(st.one_of(in_range, tiny), max_size=40), st.booleans()),
        min_size=1,
        max_size=40,
    ),
    st.sampled_from([EXACT_LIMIT, 0, 5, 30]),
    st.sampled_from([1.0, 2.5, 10.0]),
)
def test_rolling_expiry_matches_recomputing(events, limit, window):
    """Against the values still in the window: floor(t) >= floor(now - window)."""
    r = RollingDigest(window, limit=limit)
    now = 50.0
    added: list[tuple[float, float]] = []
    for dt, vals, do_expire in events:
        now += dt
        r.add_many(now, vals)
        added.extend((now, v) for v in vals)
        if do_expire:
            r.expire(now)
            live = [v for t, v in added if math.floor(t) >= math.floor(now - window)]
            assert r.count == len(live)
            got, vmax = r.quantiles((0.0, 0.5, 0.9, 0.99, 1.0))
            if not live:
                assert got == [None] * 5 and vmax is None
                continue
            assert vmax == max(live)
            assert r.values_exact is (len(live) <= limit)
            for q, g in zip((0.0, 0.5, 0.9, 0.99, 1.0), got, strict=False):
                (assert_exact if r.values_exact else assert_binned)(g, live, q)
    # everything leaves in the end, bins included
    r.expire(now + window + 2)
    assert r.count == 0 and not r._total and r.quantiles((0.5,)) == ([None], None)


def test_rolling_old_time_joins_newest_second():
    r = RollingDigest(2.0)
    r.add(10.5, 1.0)
    r.add(9.2, 2.0)  # late: joins second 10, not a second before it
    r.expire(12.9)  # keeps seconds >= 10
    assert r.count == 2
    r.expire(13.0)
    assert r.count == 0


def test_histogram_precision_constant_is_half_a_bin():
    assert HIST_PRECISION == pytest.approx(math.sqrt(HIST_RATIO) - 1)
    assert 0.0049 < HIST_PRECISION < 0.0050
