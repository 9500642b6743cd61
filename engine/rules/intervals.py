"""Repeats and the comparisons they allow (docs/comparing.md#repeats-and-intervals): a figure
measured N times has a mean, a 95 % confidence interval from the t distribution and a
coefficient of variation; two configurations' difference is `better` or `worse` only when its
interval excludes 0, else `no clear difference`, with the intervals widened for how many
comparisons a report makes (Holm-Bonferroni).

Pure functions, no I/O. The t distribution is computed here, exactly (its CDF through the
regularised incomplete beta function, a continued fraction; its quantile by bisection on that
CDF): scipy is not a dependency for a dozen lines, and the small, fractional degrees of
freedom of Welch's test (3 repeats a side: 2 to 4) need more than a table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

CONFIDENCE = 0.95  # every interval redline prints (DESIGN.md "Repeats and comparisons")
BETTER, WORSE, NO_CLEAR = "better", "worse", "no clear difference"
VERDICTS = (BETTER, WORSE, NO_CLEAR)


# -- the t distribution -----------------------------------------------------------------------

def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b), 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    front = math.exp(ln)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with `df` > 0 degrees of freedom (math.inf: the normal)."""
    if math.isinf(df):
        return 0.5 * math.erfc(-t / math.sqrt(2.0))
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The t such that P(T <= t) = p, 0 < p < 1 (bisection on t_cdf: 1e-12 of the answer)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"t_quantile: p={p!r}: expected 0 < p < 1")
    if df <= 0:
        raise ValueError(f"t_quantile: df={df!r}: expected > 0")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2.0
        if hi > 1e12:
            return hi
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


# -- one figure over repeats --------------------------------------------------------------------

@dataclass(frozen=True)
class Spread:
    """A figure over N repeats: mean, its 95 % t interval (None with fewer than 2), the sample
    standard deviation and the coefficient of variation (sd / mean)."""

    n: int
    mean: float
    sd: float | None
    ci: tuple[float, float] | None
    cv: float | None

    @property
    def var(self) -> float:
        return 0.0 if self.sd is None else self.sd * self.sd


def spread(values: Sequence[float], confidence: float = CONFIDENCE) -> Spread | None:
    """The mean, interval and CV of `values` (None and non-finite ones left out); None when none is left."""
    xs = [float(v) for v in values if v is not None and math.isfinite(v)]
    n = len(xs)
    if n == 0:
        return None
    mean = sum(xs) / n
    if n < 2:
        return Spread(1, mean, None, None, None)
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    half = t_quantile(0.5 + confidence / 2.0, n - 1) * sd / math.sqrt(n)
    cv = sd / abs(mean) if mean else None
    return Spread(n, mean, sd, (mean - half, mean + half), cv)


# -- two configurations ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Difference:
    """a - b of one figure: Welch's t test of the two means (unequal variances)."""

    diff: float  # mean a - mean b
    se: float  # its standard error
    df: float  # Welch-Satterthwaite degrees of freedom
    p: float  # two-sided p value of "no difference"
    base: float  # mean b (the percentages' denominator)

    def interval(self, alpha: float) -> tuple[float, float]:
        """The difference's (1 - alpha) interval."""
        if self.se == 0.0:
            return (self.diff, self.diff)
        half = t_quantile(1.0 - alpha / 2.0, self.df) * self.se
        return (self.diff - half, self.diff + half)

    @property
    def change_pct(self) -> float | None:
        return 100.0 * self.diff / self.base if self.base else None

    def interval_pct(self, alpha: float) -> tuple[float, float] | None:
        """The interval as a change of b in % (the uncertainty of b itself left out)."""
        if not self.base:
            return None
        lo, hi = self.interval(alpha)
        return (100.0 * lo / self.base, 100.0 * hi / self.base)


def ratio_pct(log_diff: float) -> float:
    """A difference of logarithms as a change in %: exp(d) - 1 (never below -100 %)."""
    return 100.0 * math.expm1(log_diff)


def welch(a: Spread, b: Spread) -> Difference | None:
    """Welch's test of a's mean against b's; None unless each has two values or more."""
    if a.n < 2 or b.n < 2:
        return None
    va, vb = a.var / a.n, b.var / b.n
    se = math.sqrt(va + vb)
    d = a.mean - b.mean
    if se == 0.0:  # every repeat of both read the same: a difference is exact, no noise
        return Difference(d, 0.0, math.inf, 0.0 if d else 1.0, b.mean)
    den = (va * va / (a.n - 1) if va else 0.0) + (vb * vb / (b.n - 1) if vb else 0.0)
    df = (va + vb) ** 2 / den if den else math.inf
    p = 2.0 * (1.0 - t_cdf(abs(d) / se, df))
    return Difference(d, se, df, max(0.0, min(1.0, p)), b.mean)


def holm_levels(p_values: Sequence[float], alpha: float = 1.0 - CONFIDENCE) -> list[tuple[float, bool]]:
    """Holm-Bonferroni over a family of tests: for each (in the given order) the level its
    interval is drawn at and whether it is a real difference. Sorted by p, the i-th (from 1) of
    m is tested at alpha / (m - i + 1) while every one before it passed; from the first that
    fails on, none passes and each is drawn at that failing level, so that an interval excludes
    0 exactly when its test passed. The chance that any of m true nulls passes is <= alpha."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    out: list[tuple[float, bool]] = [(alpha, False)] * m
    failed_at: float | None = None
    for rank, i in enumerate(order):
        level = alpha / (m - rank) if failed_at is None else failed_at
        passed = failed_at is None and p_values[i] < level
        if failed_at is None and not passed:
            failed_at = level
        out[i] = (level, passed)
    return out


def verdict(diff: float, real: bool, higher_is_better: bool) -> str:
    """`better` / `worse` for a real difference (of a against b), else `no clear difference`."""
    if not real or diff == 0:
        return NO_CLEAR
    return BETTER if (diff > 0) == higher_is_better else WORSE


__all__ = ["BETTER", "CONFIDENCE", "Difference", "NO_CLEAR", "Spread", "VERDICTS", "WORSE", "betainc", "holm_levels",
           "ratio_pct", "spread", "t_cdf", "t_quantile", "verdict", "welch"]
