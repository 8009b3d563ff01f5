"""Gaffke's bound (pytest_oloproof.stats.gaffke) and where `stats` uses it instead of the betting mixture."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from pytest_oloproof.stats import gaffke
from pytest_oloproof.stats.intervals import (
    GAFFKE_FROM,
    mean_interval,
    mean_pairs_needed_without_change,
    paired_mean_diff_interval,
    rate_interval,
)


def _bounds(x: list[float] | np.ndarray, seed: int = 0, draws: int | None = None) -> tuple[float, float]:
    arr = np.asarray(x, dtype=float)[None, :]
    w = gaffke.gaffke_weights(arr.shape[1], seed, draws)
    low, high = gaffke.gaffke_bounds(arr, np.ones_like(arr), 0.05, weights=w)
    return float(low[0]), float(high[0])


def _spacings_upper(x: list[float], alpha: float, draws: int, rng: np.random.Generator) -> float:
    """The upper bound as Learned-Miller & Thomas write it, a plain loop: sort the sample, append
    the range's top 1, and take the 1 − α quantile of 1 − Σ u_(i) (z_(i+1) − z_(i)) over sorted uniforms u."""
    z = [*sorted(x), 1.0]
    gaps = [z[i + 1] - z[i] for i in range(len(x))]
    ms = []
    for _ in range(draws):
        u = sorted(rng.random(len(x)))
        ms.append(1.0 - sum(ui * gi for ui, gi in zip(u, gaps, strict=True)))
    return float(np.quantile(ms, 1 - alpha))


def test_rank_is_the_monte_carlo_p_value_rule() -> None:
    # keep m while (1 + #draws beyond m) / (B + 1) > alpha / 2
    for draws in (39, 40, 399, 400, 1999, 3999, 4000, 4001):
        k = gaffke._rank(0.05, draws)
        assert (1 + k) / (draws + 1) > 0.025 >= k / (draws + 1)
    assert gaffke._rank(0.05, 20) == 0  # too few draws to reject anything: the bound is the edge
    low, high = _bounds([0.5, 0.6, 0.7], draws=20)
    assert (low, high) == (0.0, 1.0)


@pytest.mark.parametrize("k,n", [(9, 13), (13, 13), (0, 13), (1, 5), (30, 100)])
def test_on_zero_one_values_it_is_clopper_pearson(k: int, n: int) -> None:
    # D_0·1 + Σ D_i x_i with k ones is Beta(k + 1, n − k): exactly the Clopper–Pearson bound,
    # up to the Monte Carlo error of 40,000 draws
    low, high = _bounds([1.0] * k + [0.0] * (n - k), draws=40_000)
    cp = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    assert low == pytest.approx(cp.low, abs=0.006)
    assert high == pytest.approx(cp.high, abs=0.006)


def test_matches_the_spacings_form_of_the_paper() -> None:
    x = [0.2, 0.9, 0.55, 0.7, 1.0, 0.35, 0.8, 0.6, 0.95, 0.4, 0.75, 0.85, 0.5]
    ref = _spacings_upper(x, 0.025, 20_000, np.random.default_rng(1))
    low, high = _bounds(x, draws=40_000)
    assert high == pytest.approx(ref, abs=0.005)
    # the lower bound is the upper bound of 1 − x, mirrored
    ref_low = 1.0 - _spacings_upper([1 - v for v in x], 0.025, 20_000, np.random.default_rng(2))
    assert low == pytest.approx(ref_low, abs=0.005)
    assert 0.0 < low < np.mean(x) < high < 1.0


def test_seeded_and_blocked_weights_agree() -> None:
    x = np.random.default_rng(3).random(30_000)  # several blocks of draws
    seeded = gaffke.gaffke_bounds(x[None, :], np.ones((1, x.size)), 0.05, seed=4)
    given = gaffke.gaffke_bounds(x[None, :], np.ones((1, x.size)), 0.05, weights=gaffke.gaffke_weights(x.size, 4))
    assert seeded == given
    assert gaffke.draws_for(x.size) == 400 and gaffke.draws_for(120) == gaffke.DRAWS
    other = gaffke.gaffke_bounds(x[None, :], np.ones((1, x.size)), 0.05, seed=5)
    assert other != seeded


def test_stats_switches_to_gaffke_at_100_units() -> None:
    rng = np.random.default_rng(6)
    x = rng.beta(2, 2, GAFFKE_FROM)
    assert mean_interval(x[:-1].tolist()).method == "mixture"
    iv = mean_interval(x.tolist(), seed=9)
    assert iv.method == "gaffke" and iv == mean_interval(x.tolist(), seed=9)
    assert iv != mean_interval(x.tolist(), seed=10)  # the run's seed draws the weights
    # the weights meet the values in sorted order: the case file's order changes nothing
    assert (iv.low, iv.high) == _bounds(np.sort(x), seed=9)
    assert mean_interval(x[::-1].tolist(), seed=9) == iv == mean_interval(rng.permutation(x).tolist(), seed=9)
    diffs = rng.uniform(-0.3, 0.3, 150)
    p = paired_mean_diff_interval(diffs.tolist())
    assert p.method == "paired-gaffke" and p.low < diffs.mean() < p.high


def test_clusters_use_gaffke_only_with_one_size() -> None:
    rng = np.random.default_rng(7)
    x = rng.beta(4, 2, 400).tolist()
    equal = [i // 4 for i in range(400)]  # 100 clusters of 4
    iv = mean_interval(x, clusters=equal)
    assert iv.method == "cluster-gaffke" and iv.note == "100 clusters"
    means = np.asarray(x).reshape(100, 4).mean(axis=1)
    assert (iv.low, iv.high) == _bounds(np.sort(means))  # Gaffke's bound on the cluster means
    unequal = [*equal[:-1], 100]  # one case moved to a cluster of its own
    assert mean_interval(x, clusters=unequal).method == "cluster-mixture"
    rates = rate_interval([float(v > 0.5) for v in x], clusters=equal)
    assert rates.method == "cluster-gaffke"


def test_all_equal_values_stay_open() -> None:
    iv = mean_interval([1.0] * 200)
    # the extra point at 0 carries a Beta(1, 200) weight: the lower bound is about 0.025 ** (1 / 200)
    assert iv.method == "gaffke" and iv.note == "all values equal"
    assert iv.low == pytest.approx(0.025 ** (1 / 200), abs=0.003) and iv.high == 1.0


def test_gaffke_coverage_and_width_at_100() -> None:
    """Seeded simulation: fresh samples and a fresh seed each time; the interval must hold the truth
    at least 94% of the time and, where scores spread over the range, stay within 1.15x of the
    t-interval's median width (Gaffke's bound measures about 1.05 here)."""
    reps, n = 300, 100
    rng = np.random.default_rng(8)
    for draw, truth in ((lambda s: rng.beta(0.3, 0.3, s), 0.5), (lambda s: rng.binomial(3, 0.7, s) / 3.0, 0.7)):
        x = draw((reps, n))
        ivs = [mean_interval(row.tolist(), seed=i) for i, row in enumerate(x)]
        assert all(iv.method == "gaffke" for iv in ivs)
        coverage = np.mean([iv.low <= truth <= iv.high for iv in ivs])
        t_width = 2 * stats.t.ppf(0.975, n - 1) * x.std(axis=1, ddof=1) / math.sqrt(n)
        assert coverage >= 0.94
        assert np.median([iv.width for iv in ivs]) < 1.15 * np.median(t_width)


def test_comparisons_use_gaffke_from_100_pairs() -> None:
    from pytest_oloproof.compare.comparison import paired_interval

    rng = np.random.default_rng(12)
    base = rng.beta(4, 2, 120)
    cand = np.clip(base + rng.normal(0.02, 0.05, 120), 0.0, 1.0)
    pairs = [(f"c{i}", float(b), float(c)) for i, (b, c) in enumerate(zip(base, cand, strict=True))]
    graded = paired_interval(pairs, binary=False, confidence=0.95, seed=0)
    assert graded.method == "paired-gaffke" and graded.low < float(np.mean(cand - base)) < graded.high
    assert paired_interval(pairs[:99], binary=False, confidence=0.95, seed=0).method == "paired-mixture"
    # pass/fail pairs in 120 clusters of 2: the paired cluster interval, never narrower than the exact one
    verdicts = [(f"c{i}", float(b > 0.6), float(c > 0.6)) for i, (_, b, c) in enumerate(pairs * 2)]
    clustered = paired_interval(verdicts, binary=True, confidence=0.95, seed=0, clusters=[i % 120 for i in range(240)])
    assert clustered.method == "paired-cluster-gaffke"
    b = sum(1 for _, x, y in verdicts if y > x)
    c = sum(1 for _, x, y in verdicts if x > y)
    exact = paired_interval(verdicts, binary=True, confidence=0.95, seed=0)
    assert exact.method == "exact-mcnemar" and (b, c) != (0, 0)
    assert clustered.low <= exact.low and clustered.high >= exact.high


@pytest.mark.parametrize("v", [0.0, 0.5, 0.9, 1.0])
@pytest.mark.parametrize("n", [100, 150, 1000])
def test_all_equal_values_get_the_exact_bound_for_every_seed(v: float, n: int) -> None:
    """All values v: the extra point's weight is Beta(1, n), so Gaffke's bound is exactly
    v·(α/2)^(1/n) and v + (1 − v)(1 − (α/2)^(1/n)); no Monte Carlo error, no seed dependence
    (all 0s / all 1s: exactly Clopper–Pearson)."""
    q = 0.025 ** (1 / n)
    for seed in range(5):
        iv = mean_interval([v] * n, seed=seed)
        assert iv.method == "gaffke" and iv.width > 0
        assert iv.low == pytest.approx(v * q, abs=1e-12) and iv.high == pytest.approx(v + (1 - v) * (1 - q), abs=1e-12)
    if v in (0.0, 1.0):
        cp = rate_interval([v] * n)
        assert (iv.low, iv.high) == pytest.approx((cp.low, cp.high), abs=1e-12)


@pytest.mark.parametrize(("k", "n"), [(1, 100), (10, 150), (75, 120), (119, 120)])
def test_zero_one_values_are_exactly_clopper_pearson(k: int, n: int) -> None:
    """On 0/1 values the weighted sums are beta variables: the bound is Clopper–Pearson, for every seed."""
    x = [1.0] * k + [0.0] * (n - k)
    cp = rate_interval(x)
    for seed in (0, 7):
        iv = mean_interval(x, seed=seed)
        assert iv.method == "gaffke"
        assert (iv.low, iv.high) == pytest.approx((cp.low, cp.high), abs=1e-12)


def test_pairs_needed_is_the_smallest_n_for_every_seed() -> None:
    """The sample-size line: brute force over n. The lower bound for n unchanged pairs must rise
    with n across the switch at 100 (the doubling and bisection search relies on it), and the
    number returned must pass whatever the run's seed, with one pair fewer failing."""
    lows = [paired_mean_diff_interval([0.0] * n).low for n in range(2, 420)]
    assert all(b >= a for a, b in itertools.pairwise(lows))
    for margin in (0.01, 0.02, 0.03, 0.04, 0.1):
        n = mean_pairs_needed_without_change(margin)
        if n < 420:
            assert n == 2 + next(i for i, low in enumerate(lows) if low > -margin)
        for seed in (0, 2, 6, 17):
            assert paired_mean_diff_interval([0.0] * n, seed=seed).low > -margin
            assert paired_mean_diff_interval([0.0] * (n - 1), seed=seed).low <= -margin


def test_high_confidence_at_many_units_is_never_silently_the_whole_range() -> None:
    """At 99.9% the Monte Carlo rank needs about 2,000 draws; from about 1,000 units the budget
    gives fewer, and Gaffke's bound would be [0, 1]: the betting mixture is used instead."""
    x = np.random.default_rng(3).random(5000).tolist()
    for confidence in (0.999, 0.99):
        iv = mean_interval(x, confidence)
        assert iv.width < 0.1 and iv.low < 0.5 < iv.high, (confidence, iv)
    assert mean_interval(x[:2000], 0.999).method == "mixture"
    assert mean_interval(x[:2000], 0.95).method == "gaffke"


def test_coverage_where_many_samples_are_all_equal() -> None:
    """99% 0.9 and 1% 0 at n = 100: about a third of the samples are all 0.9 and get the closed
    form, the rest the draws; both must hold the mean 0.891 on each side (seeded, fresh seed each)."""
    reps, n, truth = 400, 100, 0.99 * 0.9
    rng = np.random.default_rng(31)
    x = np.where(rng.random((reps, n)) < 0.99, 0.9, 0.0)
    ivs = [mean_interval(row.tolist(), seed=i) for i, row in enumerate(x)]
    constant = np.all(x == 0.9, axis=1)
    assert 0.25 < constant.mean() < 0.5
    assert all(iv.low <= truth for iv, c in zip(ivs, constant, strict=True) if c)  # 0.9 · 0.025^(1/100)
    assert np.mean([truth < iv.low for iv in ivs]) <= 0.03
    assert np.mean([truth > iv.high for iv in ivs]) <= 0.03
