"""A small, seeded version of benchmarks/bench_coverage.py: do the graded intervals keep their 95% promise?

Each cell draws samples with a known mean and counts how often the interval holds it.
The same check applied to the BCa bootstrap Oloproof used before fails at n = 13
(asserted below, so the test is known to be able to fail).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from scipy import special, stats

from pytest_oloproof.stats import Interval, mean_interval, paired_mean_diff_interval

REPS = 400


def _bca(x: np.ndarray, rng: np.random.Generator, resamples: int = 1000) -> tuple[np.ndarray, np.ndarray]:
    """The BCa bootstrap of the mean, vectorised over the rows of ``x`` (scipy's formulas)."""
    r, n = x.shape
    boot = x[np.arange(r)[:, None, None], rng.integers(0, n, size=(r, resamples, n))].mean(axis=2)
    theta = x.mean(axis=1)
    jack = (x.sum(axis=1, keepdims=True) - x) / (n - 1)
    d = jack.mean(axis=1, keepdims=True) - jack
    accel = (d**3).sum(axis=1) / (6.0 * ((d**2).sum(axis=1)) ** 1.5)
    z0 = stats.norm.ppf(np.mean(boot < theta[:, None], axis=1))
    bounds = []
    for z in stats.norm.ppf([0.025, 0.975]):
        q = stats.norm.cdf(z0 + (z0 + z) / (1 - accel * (z0 + z)))
        bounds.append(np.array([np.quantile(b, qq) for b, qq in zip(boot, q, strict=True)]))
    return bounds[0], bounds[1]


def _coverage(intervals: list[Interval], truth: float) -> float:
    return float(np.mean([iv.low <= truth <= iv.high for iv in intervals]))


def _draws(draw: Callable[[np.random.Generator, tuple[int, int]], np.ndarray], n: int, seed: int) -> np.ndarray:
    return draw(np.random.default_rng(seed), (REPS, n))


def test_betting_keeps_95_percent_where_bca_did_not() -> None:
    # nDCG of a good retriever: mass near 1, 13 cases (the example's size)
    x = _draws(lambda r, s: r.beta(8, 1, s), 13, seed=1)
    truth = 8 / 9
    new = _coverage([mean_interval(row.tolist(), seed=i) for i, row in enumerate(x)], truth)
    low, high = _bca(x, np.random.default_rng(2))
    old = float(np.mean((low <= truth) & (truth <= high)))
    assert new >= 0.94
    assert old < 0.94  # the method used before issue 13 breaks the promise here


@pytest.mark.parametrize(
    "name,draw,truth",
    [
        ("recall with 3 relevant units", lambda r, s: r.binomial(3, 0.7, s) / 3.0, 0.7),
        ("U-shaped", lambda r, s: r.beta(0.3, 0.3, s), 0.5),
        ("0/1 with a graded tail", lambda r, s: np.where(r.random(s) < 0.5, r.random(s), 1.0), 0.75),
    ],
)
@pytest.mark.parametrize("n", [5, 13])
def test_betting_coverage_cells(
    name: str, draw: Callable[[np.random.Generator, tuple[int, int]], np.ndarray], truth: float, n: int
) -> None:
    x = _draws(draw, n, seed=n)
    assert _coverage([mean_interval(row.tolist(), seed=i) for i, row in enumerate(x)], truth) >= 0.94, name


def test_paired_betting_coverage_with_correlated_pairs() -> None:
    rng = np.random.default_rng(3)
    u = rng.random((REPS, 13))
    v = np.where(rng.random((REPS, 13)) < 0.7, u, rng.random((REPS, 13)))
    diffs = special.betaincinv(8, 1, v) - special.betaincinv(6, 1, u)
    truth = 8 / 9 - 6 / 7
    ivs = [paired_mean_diff_interval(row.tolist(), seed=i) for i, row in enumerate(diffs)]
    assert _coverage(ivs, truth) >= 0.94


def test_cluster_betting_coverage_with_few_clusters() -> None:
    # 3 clusters of 4 cases sharing a level: the cases are not 12 independent values
    rng = np.random.default_rng(4)
    level = np.repeat(rng.beta(5, 1, (REPS, 3)), 4, axis=1)
    x = 0.6 * level + 0.4 * rng.random((REPS, 12))
    clusters = [i // 4 for i in range(12)]
    ivs = [mean_interval(row.tolist(), seed=i, clusters=clusters) for i, row in enumerate(x)]
    assert _coverage(ivs, 0.7) >= 0.94
    assert np.median([iv.width for iv in ivs]) > 0.5  # honest about having only 3 clusters
