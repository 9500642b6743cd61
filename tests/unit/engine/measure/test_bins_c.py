"""The log bins' counting in C (engine/measure/_bins.c) against the Python loops it replaces
(engine/measure/log_bins.py, histogram.py): the same bins for the same values, at every edge
(at and below the bottom, on bin boundaries, past the top), from lists, tuples and arrays."""

from __future__ import annotations

import math
import random
from array import array

import pytest

from redline.engine.constants import HIST_MAX_S, HIST_MIN_S
from redline.engine.measure import histogram, log_bins
from redline.engine.measure.histogram import RollingDigest
from redline.engine.measure.log_bins import LAST_BIN, LOG_MIN, LOG_RATIO, NBINS, LogHistogram, bin_index

pytestmark = pytest.mark.skipif(log_bins.count_bins is None, reason="the C helper is not built here")


def _values() -> list[float]:
    rng = random.Random(47)
    edges = [0.0, -1.0, HIST_MIN_S, HIST_MIN_S * 1.0000001, HIST_MAX_S, HIST_MAX_S * 10, 1e9]
    edges += [math.exp(LOG_MIN + k * LOG_RATIO) for k in range(0, NBINS + 2, 7)]  # bin boundaries
    edges += [math.nextafter(v, 0.0) for v in edges[-10:]] + [math.nextafter(v, math.inf) for v in edges[-10:]]
    return edges + [math.exp(rng.uniform(math.log(1e-7), math.log(1e4))) for _ in range(20_000)]


@pytest.mark.parametrize("kind", [list, tuple, lambda v: array("d", v)])
def test_c_counts_every_value_into_the_bin_python_does(kind):
    vals = _values()
    want = [0] * NBINS
    for v in vals:
        want[bin_index(v)] += 1
    got = [0] * NBINS
    log_bins.count_bins(got, kind(vals), HIST_MIN_S, LOG_MIN, LOG_RATIO)
    assert got == want
    a: dict[int, int] = {}
    b: dict[int, int] = {7: 3}
    log_bins.count_bins_dicts(a, b, kind(vals), HIST_MIN_S, LOG_MIN, LOG_RATIO, NBINS)
    assert a == {i: n for i, n in enumerate(want) if n}
    assert b == {**a, 7: a.get(7, 0) + 3}
    assert want[LAST_BIN] > 0 and want[0] > 0  # the edges were reached


def test_histograms_answer_the_same_with_and_without_the_c_loops(monkeypatch):
    vals = _values()
    c_hist, c_roll = LogHistogram(), RollingDigest(60.0)
    c_hist.add_many(vals)
    c_roll.add_many(100.0, vals)
    monkeypatch.setattr(log_bins, "count_bins", None)
    monkeypatch.setattr(histogram, "count_bins_dicts", None)
    p_hist, p_roll = LogHistogram(), RollingDigest(60.0)
    p_hist.add_many(vals)
    p_roll.add_many(100.0, vals)
    assert c_hist.bins == p_hist.bins and (c_hist.count, c_hist.total, c_hist.vmin, c_hist.vmax) == (
        p_hist.count, p_hist.total, p_hist.vmin, p_hist.vmax)
    qs = (0.5, 0.9, 0.99)
    assert c_roll.quantiles(qs) == p_roll.quantiles(qs) and c_roll.digest().quantiles(qs) == p_roll.digest().quantiles(qs)
    assert c_roll._total == p_roll._total  # (the sparse bins themselves)
    assert [c_hist.quantile(q) for q in qs] == [p_hist.quantile(q) for q in qs]


def test_bad_values_are_refused_with_a_clear_error():
    with pytest.raises(TypeError, match="array of doubles"):
        log_bins.count_bins([0] * NBINS, array("i", [1, 2]), HIST_MIN_S, LOG_MIN, LOG_RATIO)
    with pytest.raises(TypeError):
        log_bins.count_bins([0] * NBINS, ["x"], HIST_MIN_S, LOG_MIN, LOG_RATIO)
    with pytest.raises(TypeError, match="non-empty list"):
        log_bins.count_bins([], [1.0], HIST_MIN_S, LOG_MIN, LOG_RATIO)
