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

from pytest_oloproof.stats.intervals import Interval, mean_interval, paired_mean_diff_interval

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


def test_mixture_keeps_95_percent_where_bca_did_not() -> None:
    # nDCG of a good retriever: mass near 1, 13 cases (the example's size)
    x = _draws(lambda r, s: r.beta(8, 1, s), 13, seed=1)
    truth = 8 / 9
    new = _coverage([mean_interval(row.tolist(), seed=i) for i, row in enumerate(x)], truth)
    low, high = _bca(x, np.random.default_rng(2))
    old = float(np.mean((low <= truth) & (truth <= high)))
    assert new >= 0.94
    assert old < 0.94  # the BCa bootstrap breaks the promise here


@pytest.mark.parametrize(
    "name,draw,truth",
    [
        ("recall with 3 relevant units", lambda r, s: r.binomial(3, 0.7, s) / 3.0, 0.7),
        ("U-shaped", lambda r, s: r.beta(0.3, 0.3, s), 0.5),
        ("0/1 with a graded tail", lambda r, s: np.where(r.random(s) < 0.5, r.random(s), 1.0), 0.75),
    ],
)
@pytest.mark.parametrize("n", [5, 13])
def test_mixture_coverage_cells(
    name: str, draw: Callable[[np.random.Generator, tuple[int, int]], np.ndarray], truth: float, n: int
) -> None:
    x = _draws(draw, n, seed=n)
    assert _coverage([mean_interval(row.tolist(), seed=i) for i, row in enumerate(x)], truth) >= 0.94, name


def test_paired_mixture_coverage_with_correlated_pairs() -> None:
    rng = np.random.default_rng(3)
    u = rng.random((REPS, 13))
    v = np.where(rng.random((REPS, 13)) < 0.7, u, rng.random((REPS, 13)))
    diffs = special.betaincinv(8, 1, v) - special.betaincinv(6, 1, u)
    truth = 8 / 9 - 6 / 7
    ivs = [paired_mean_diff_interval(row.tolist(), seed=i) for i, row in enumerate(diffs)]
    assert _coverage(ivs, truth) >= 0.94


def test_cluster_mixture_coverage_with_few_clusters() -> None:
    # 3 clusters of 4 cases sharing a level: the cases are not 12 independent values
    rng = np.random.default_rng(4)
    level = np.repeat(rng.beta(5, 1, (REPS, 3)), 4, axis=1)
    x = 0.6 * level + 0.4 * rng.random((REPS, 12))
    clusters = [i // 4 for i in range(12)]
    ivs = [mean_interval(row.tolist(), seed=i, clusters=clusters) for i, row in enumerate(x)]
    assert _coverage(ivs, 0.7) >= 0.94
    assert np.median([iv.width for iv in ivs]) > 0.5  # honest about having only 3 clusters


def _unequal_clusters(rng: np.random.Generator, informative: bool) -> tuple[list[float], list[int], float]:
    """40 clusters of 2 and one of 30, correlated within a cluster; with ``informative`` the large
    cluster is harder (level 0.4 against 0.8), so the mean over cases differs from the mean of the
    cluster means. Returns values, cluster keys and the true mean over cases."""
    sizes = [2] * 40 + [30]
    values: list[float] = []
    keys: list[int] = []
    total = 0.0
    for j, k in enumerate(sizes):
        level = 0.4 if informative and k == 30 else 0.8
        shared = rng.random() < level  # half of each cluster's cases share one draw
        own = rng.random(k) < level
        values += [float(shared if i % 2 else o) for i, o in enumerate(own)]
        keys += [j] * k
        total += k * level
    return values, keys, total / sum(sizes)


@pytest.mark.parametrize("informative", [False, True])
def test_cluster_mixture_coverage_with_one_large_cluster(informative: bool) -> None:
    rng = np.random.default_rng(5 + informative)
    hits, widths = 0, []
    for _ in range(200):
        x, keys, truth = _unequal_clusters(rng, informative)
        iv = mean_interval(x, clusters=keys)
        hits += iv.low <= truth <= iv.high
        widths.append(iv.width)
    assert hits / 200 >= 0.95


def test_one_large_cluster_does_not_inflate_the_interval() -> None:
    """99 clusters of 4 and one of 50: every cluster's bet was scaled by the largest cluster, which
    widened the interval from about 0.13 to 0.73; the bets no longer scale with the largest cluster (about 0.28)."""
    rng = np.random.default_rng(9)
    level = rng.beta(4, 2, 100)
    sizes = [4] * 99 + [50]
    x = [float(rng.random() < level[j]) for j, k in enumerate(sizes) for _ in range(k)]
    keys = [j for j, k in enumerate(sizes) for _ in range(k)]
    small = mean_interval(x[: 99 * 4], clusters=keys[: 99 * 4])
    big = mean_interval(x, clusters=keys)
    assert big.method == small.method == "cluster-mixture"
    assert big.width < 0.35 and big.width < 2 * small.width


def test_missing_at_worst_keeps_95_percent_when_the_hard_cases_go_missing() -> None:
    """Informative missingness (a failed case goes missing 40% of the time, a passed one 4%): the interval over the
    observed cases alone misses the truth most of the time; the one with each missing case at its worst (the
    accounting's "with missing at worst", `aggregate.missing_at_worst`) still holds it (bench_coverage.py --missing)."""
    from pytest_oloproof.stats.aggregate import missing_at_worst
    from pytest_oloproof.stats.intervals import rate_interval

    rng = np.random.default_rng(20261201)
    observed_only = at_worst = 0
    reps, n, truth = 300, 100, 0.7
    for _ in range(reps):
        x = (rng.random(n) < truth).astype(float)
        gone = rng.random(n) < np.where(x == 0, 0.40, 0.04)
        kept = x[~gone].tolist()
        iv = rate_interval(kept)
        observed_only += iv.low <= truth <= iv.high
        worst = missing_at_worst(kept, int(gone.sum()), "rate", confidence=0.95, seed=0)
        at_worst += worst["low"] <= truth <= worst["high"]
    assert observed_only / reps < 0.8  # the observed cases alone are biased upwards
    assert at_worst / reps >= 0.95
