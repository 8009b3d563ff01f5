"""The exact paired pass-rate interval (Fay & Lumbard 2021; `stats.paired_rate_interval`).

Checked against what the R package exact2x2 (``mcnemarExactDP``) documents in closed form,
against the exact McNemar test it is compatible with, against scipy's adaptive quadrature,
and by exact sums over every outcome of n pairs (coverage ≥ 95% in every cell of a grid,
where Tango's interval, which comparisons used before, falls below).
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from scipy import integrate, special, stats

from pytest_oloproof.stats import paired_exact
from pytest_oloproof.stats.intervals import (
    Interval,
    paired_rate_interval,
    pairs_needed_without_change,
    round_outward,
    tango_interval,
)


def test_no_discordant_pair_is_the_beta_quantile() -> None:
    # exact2x2: with m = 0 the bounds are ∓qbeta(1 − α/2, 1, n) = ∓(1 − (α/2)^(1/n))
    iv = paired_rate_interval(0, 0, 13)
    assert iv.method == "exact-mcnemar"
    assert (iv.low, iv.high) == pytest.approx((-(1 - 0.025 ** (1 / 13)), 1 - 0.025 ** (1 / 13)), abs=1e-12)
    assert round(100 * iv.high, 3) == 24.705  # about ±24.7 points; printed outward as [-24.8, +24.8]
    assert round_outward(100 * iv.low, 100 * iv.high, 1) == (-24.8, 24.8)
    assert stats.beta.ppf(0.975, 1, 13) == pytest.approx(iv.high, abs=1e-12)


@pytest.mark.parametrize("b,n", [(7, 10), (3, 5), (0, 8), (12, 20)])
def test_every_pair_discordant_is_clopper_pearson_on_the_sign(b: int, n: int) -> None:
    # exact2x2: with m = n, T ~ Beta(m + 1, n − m) = 1 for a bound on the far side of 0 from the
    # interval's centre, which is then 2·(Clopper–Pearson of b of n) − 1
    iv = paired_rate_interval(b, n - b, n)
    ci = stats.binomtest(b, n).proportion_ci(0.95, method="exact")
    if 2 * ci.high - 1 > 0:
        assert iv.high == pytest.approx(2 * ci.high - 1, abs=1e-8)
    if 2 * ci.low - 1 < 0:
        assert iv.low == pytest.approx(2 * ci.low - 1, abs=1e-8)


@pytest.mark.parametrize("b,c,n", [(1, 7, 21), (6, 16, 161), (9, 2, 44), (3, 0, 13), (20, 9, 100)])
def test_compatible_with_the_exact_mcnemar_test(b: int, c: int, n: int) -> None:
    """At confidence 1 − p, with p the two-sided exact McNemar p-value, a bound touches 0; above it the
    interval holds 0 and below it excludes 0 (the Bentur et al. 2009 table of the package's example is
    the first case: n = 21, m = 8, x = 1, p = 0.0703)."""
    p = stats.binomtest(b, b + c, 0.5).pvalue
    iv = paired_rate_interval(b, c, n, 1 - p)
    bound = iv.high if b < c else iv.low
    assert bound == pytest.approx(0.0, abs=1e-8)
    wider, narrower = paired_rate_interval(b, c, n, 1 - p / 2), paired_rate_interval(b, c, n, 1 - 2 * p)
    assert wider.low < 0 < wider.high
    assert not narrower.low < 0 < narrower.high
    assert iv.low < (b - c) / n < iv.high


def _p_upper_adaptive(delta: float, b: int, m: int, n: int) -> float:
    """The p-value Pr[T(2B − 1) ≥ Δ] by scipy's adaptive quadrature, written from the paper."""
    ba, bb = b + 1, m - b
    ta, tb = (m + 1, n - m) if delta > 0 else (m, n - m + 1)

    def f(t: float) -> float:
        return float(special.betaincc(ba, bb, min(1.0, max(0.0, 0.5 + delta / (2 * t))))) * float(
            stats.beta.pdf(t, ta, tb)
        )

    head = 0.0 if delta > 0 else float(stats.beta.cdf(abs(delta), ta, tb))
    return head + integrate.quad(f, abs(delta), 1, limit=500, epsabs=1e-14, epsrel=1e-12)[0]


@pytest.mark.parametrize("b,c,n", [(3, 4, 13), (10, 2, 50), (40, 20, 160), (300, 250, 2000), (1, 0, 100)])
def test_quadrature_agrees_with_adaptive_quadrature(b: int, c: int, n: int) -> None:
    for delta in np.linspace(-0.9, 0.9, 13):
        got = paired_exact._p_upper(float(delta), b, b + c, n)
        assert got == pytest.approx(_p_upper_adaptive(float(delta), b, b + c, n), abs=1e-10)


def _coverage(n: int, bounds: dict[tuple[int, int], tuple[float, float]], step: float) -> np.ndarray:
    """Exact coverage of p_b − p_c over every outcome of n pairs, for each (p_b, p_c) of a grid."""
    tables = list(bounds)
    b = np.array([t[0] for t in tables], dtype=float)
    c = np.array([t[1] for t in tables], dtype=float)
    low = np.array([bounds[t][0] for t in tables])
    high = np.array([bounds[t][1] for t in tables])
    grid = np.round(np.arange(0, 1 + 1e-9, step), 10)
    cells = np.array([(pb, pc) for pb in grid for pc in grid if pb + pc <= 1 + 1e-9])
    pb, pc = cells[:, :1], cells[:, 1:]
    pa = np.clip(1 - pb - pc, 0, 1)
    logp = (
        special.gammaln(n + 1)
        - special.gammaln(b + 1)
        - special.gammaln(c + 1)
        - special.gammaln(n - b - c + 1)
        + special.xlogy(b, pb)
        + special.xlogy(c, pc)
        + special.xlogy(n - b - c, pa)
    )
    truth = pb - pc
    inside = (low - 1e-12 <= truth) & (truth <= high + 1e-12)
    out: np.ndarray = (np.exp(logp) * inside).sum(axis=1)
    return out


@pytest.mark.parametrize("n", [5, 13])
def test_exact_sum_coverage_on_a_grid_holds_where_tango_fails(n: int) -> None:
    """Every outcome of n pairs weighed by its multinomial probability: the exact interval covers
    ≥ 0.95 in every cell of a 0.05 grid of (p_b, p_c); Tango's falls below 0.95 in some."""
    pairs = [(b, c) for b in range(n + 1) for c in range(n + 1 - b)]
    exact = {(b, c): (iv.low, iv.high) for b, c in pairs for iv in [paired_rate_interval(b, c, n)]}
    tango = {(b, c): (iv.low, iv.high) for b, c in pairs for iv in [tango_interval(b, c, n)]}
    assert _coverage(n, exact, 0.05).min() >= 0.95
    assert _coverage(n, tango, 0.05).min() < 0.95


def test_pairs_needed_follows_the_exact_interval() -> None:
    # 1 − 0.025^(1/n) < 0.05 first at n = 72 (71 gives 0.0506)
    assert pairs_needed_without_change(0.05) == 72
    for margin in (0.05, 0.02, 0.1, 0.247):
        n = pairs_needed_without_change(margin)
        assert paired_rate_interval(0, 0, n).low > -margin >= paired_rate_interval(0, 0, n - 1).low
    assert pairs_needed_without_change(0.2471) == 13
    assert pairs_needed_without_change(0.05, 0.90) < 72


@pytest.mark.parametrize(
    "args,fragment",
    [
        ((math.nan, 0, 13), "b must be a non-negative whole number"),
        ((1.5, 0, 13), "b must be a non-negative whole number"),
        ((0, True, 13), "c must be a whole number"),
        ((0, 0, "13"), "n must be a whole number"),
        ((-1, 0, 13), "b must be a non-negative whole number"),
        ((8, 8, 13), re.escape("b + c must be at most n")),
    ],
)
def test_counts_are_validated(args: tuple[object, object, object], fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        paired_rate_interval(*args)  # type: ignore[arg-type]


def test_edges() -> None:
    assert paired_rate_interval(0, 0, 0) == Interval(-1.0, 1.0, "degenerate", "no observations")
    assert paired_rate_interval(13, 0, 13).high == 1.0 and paired_rate_interval(13, 0, 13).low > 0.4
    assert paired_rate_interval(0, 13, 13).low == -1.0
    assert paired_rate_interval(2.0, 1, 13) == paired_rate_interval(2, 1, 13)  # type: ignore[arg-type]
