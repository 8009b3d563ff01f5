"""Tests for pytest_oloproof.stats.intervals: intervals, their guards, and their coverage."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from pytest_oloproof.stats.intervals import (
    Interval,
    clopper_pearson,
    kappa_interval,
    mean_interval,
    mean_pairs_needed_without_change,
    paired_mean_diff_interval,
    paired_rate_interval,
    pairs_needed_without_change,
    rate_interval,
    round_outward,
    tango_interval,
    z_for,
)

Z95 = float(stats.norm.ppf(0.975))


def _pct(iv: Interval) -> tuple[float, float]:
    """Interval of a proportion printed in percent to 0.1 point, rounded outward."""
    low, high = round_outward(iv.low, iv.high, 3)
    return round(low * 100, 1), round(high * 100, 1)


# --------------------------------------------------------------------------- basics


def test_z_for() -> None:
    assert z_for(0.95) == pytest.approx(1.959963984540054, abs=1e-12)
    assert z_for(0.90) == pytest.approx(1.6448536269514722, abs=1e-12)
    with pytest.raises(ValueError):
        z_for(1.0)


# ------------------------------------------------------------------ Clopper–Pearson


@pytest.mark.parametrize("k,n", [(0, 1), (9, 13), (12, 13), (13, 13), (0, 13), (37, 100)])
@pytest.mark.parametrize("confidence", [0.9, 0.95, 0.99])
def test_rate_interval_matches_scipy_exact(k: int, n: int, confidence: float) -> None:
    iv = rate_interval([1] * k + [0] * (n - k), confidence)
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=confidence, method="exact")
    # scipy.stats finds the bounds by root-finding (brentq, xtol 2e-12); the beta quantiles are exact
    assert (iv.low, iv.high) == pytest.approx((ci.low, ci.high), abs=2e-12, rel=0)
    assert iv.method == "clopper-pearson" and iv.note is None
    assert clopper_pearson(k, n, confidence) == (iv.low, iv.high)


def test_clopper_pearson_equals_scipy_stats_over_a_grid() -> None:
    # scipy.special alone (0.3 s to import, not scipy.stats' 0.8 s): the same numbers as
    # binomtest(...).proportion_ci(method="exact") to its solver's tolerance, and bit for bit the
    # beta-quantile definition scipy.stats.beta.ppf gives
    ns = [*range(1, 41), 57, 100, 137, 500, 1000, 10_000, 100_000]
    checked = 0
    for n in ns:
        ks = sorted({0, 1, 2, 3, n // 7, n // 3, n // 2, n - 2, n - 1, n, *range(0, n + 1, max(1, n // 9))})
        for k in (k for k in ks if 0 <= k <= n):
            for confidence in (0.5, 0.8, 0.9, 0.95, 0.99, 0.999):
                low, high = clopper_pearson(k, n, confidence)
                ci = stats.binomtest(k, n).proportion_ci(confidence_level=confidence, method="exact")
                assert (low, high) == pytest.approx((ci.low, ci.high), abs=2e-12, rel=0), (k, n, confidence)
                alpha = 1 - confidence
                assert low == (0.0 if k == 0 else float(stats.beta.ppf(alpha / 2, k, n - k + 1)))
                assert high == (1.0 if k == n else float(stats.beta.ppf(1 - alpha / 2, k + 1, n - k)))
                checked += 1
    assert checked > 2000


def test_z_for_equals_the_normal_quantile_of_scipy_stats() -> None:
    for confidence in np.linspace(0.01, 0.999, 200):
        assert z_for(float(confidence)) == float(stats.norm.ppf(0.5 + float(confidence) / 2))


def test_rate_interval_printed_figures_from_spec() -> None:
    assert _pct(rate_interval([1] * 9 + [0] * 4)) == (38.5, 91.0)
    assert _pct(rate_interval([1] * 13)) == (75.2, 100.0)
    assert _pct(rate_interval([1] * 12 + [0]))[0] == 63.9


def test_rate_interval_no_observations_and_bad_input() -> None:
    assert rate_interval([]) == Interval(0.0, 1.0, "degenerate", "no observations")
    with pytest.raises(ValueError):
        rate_interval([0.5, 1])
    with pytest.raises(ValueError):
        rate_interval([1, 0], clusters=["a"])


@pytest.mark.parametrize("n", [13, 100])
@pytest.mark.parametrize("p", [0.1, 0.5, 0.7, 0.9])
def test_clopper_pearson_coverage_simulation(n: int, p: float) -> None:
    rng = np.random.default_rng(20240613 + n)
    table = [rate_interval([1] * k + [0] * (n - k)) for k in range(n + 1)]
    covers = np.array([iv.low <= p <= iv.high for iv in table])
    ks = rng.binomial(n, p, size=100_000)
    assert covers[ks].mean() >= 0.95
    # exact coverage (sum of binomial probabilities) as well, free of Monte Carlo noise
    assert stats.binom.pmf(np.arange(n + 1), n, p)[covers].sum() >= 0.95


# ---------------------------------------------------------------- clustered rates


def test_rate_interval_clustered_all_equal_is_wide_with_three_clusters() -> None:
    clusters = ["a"] * 5 + ["b"] * 5 + ["c"] * 3
    iv = rate_interval([1] * 13, clusters=clusters)
    assert iv.method == "cluster-mixture" and "3 clusters" in (iv.note or "")
    assert iv.width > 0 and "all values equal" in (iv.note or "")
    # 3 clusters are weaker evidence than 13 cases, and not much stronger than 3 cases
    assert iv.low < rate_interval([1] * 13).low
    assert iv.low < 0.4


def test_rate_interval_clusters_none_entries_are_singletons() -> None:
    iv = rate_interval([1, 0, 1, 1], clusters=[None, None, None, None])
    assert (iv.low, iv.high) == (rate_interval([1, 0, 1, 1]).low, rate_interval([1, 0, 1, 1]).high)
    one = rate_interval([1, 0, 1], clusters=["x", "x", "x"])
    assert (one.low, one.high, one.note) == (0.0, 1.0, "fewer than 2 clusters")


def test_rate_interval_cluster_mixture_widens_on_clustered_data() -> None:
    # 8 clusters of 6 identical verdicts: effectively 8 observations, not 48
    values = [v for v in (1, 1, 1, 0, 1, 0, 1, 1) for _ in range(6)]
    clusters = [g for g in range(8) for _ in range(6)]
    plain = rate_interval(values)
    clustered = rate_interval(values, clusters=clusters, seed=3)
    assert clustered.method == "cluster-mixture"
    assert clustered.width > 1.2 * plain.width
    assert clustered.low <= plain.low and clustered.high >= plain.high
    assert rate_interval(values, clusters=clusters, seed=3) == clustered


def test_rate_interval_clustered_never_narrower_than_exact() -> None:
    values, clusters = [1] * 12 + [0], [*range(11), 11, 11]
    clustered = rate_interval(values, clusters=clusters)
    exact = rate_interval(values)
    assert clustered.method == "cluster-mixture"
    assert clustered.low <= exact.low and clustered.high >= exact.high


# ------------------------------------------------------------------------- means


def _reference_capital(y: list[float], m: float, alpha: float) -> float:
    """The mean of the 20 capitals of the product page, written as a plain loop: for f = j/21, j = 1..20,
    the product over the values of (1 − f + f·y/m), averaged over j."""
    total = 0.0
    for j in range(1, 21):
        f, cap = j / 21, 1.0
        for v in y:
            cap *= 1 - f + f * v / m
        total += cap
    return total / 20


def _check_mixture_against_reference(x: list[float]) -> None:
    iv = mean_interval(x)
    assert iv.method == "mixture"
    flip = [1 - v for v in x]
    # each bound is where the mean capital crosses 2/alpha: rejected just outside, kept just inside
    if iv.low > 1e-6:
        assert _reference_capital(x, iv.low - 1e-7, 0.05) >= 40.0 > _reference_capital(x, iv.low + 1e-7, 0.05)
    if iv.high < 1 - 1e-6:
        m = 1 - iv.high
        assert _reference_capital(flip, m - 1e-7, 0.05) >= 40.0 > _reference_capital(flip, m + 1e-7, 0.05)


#: The example's ndcg_at_6 values (examples/support_rag): ten 1s, two 1/log2(3), one 0.
EXAMPLE_NDCG = [1.0] * 10 + [1 / math.log2(3)] * 2 + [0.0]


def test_mixture_reproduces_the_page_figures() -> None:
    iv = mean_interval(EXAMPLE_NDCG)
    assert round(float(np.mean(EXAMPLE_NDCG)), 3) == 0.866
    assert round_outward(iv.low, iv.high, 3) == (0.506, 0.990)
    diff = paired_mean_diff_interval([0.0] * 13)
    assert round_outward(100 * diff.low, 100 * diff.high, 1) == (-33.6, 33.6)


def test_mixture_bounds_match_a_loop_written_from_the_spec() -> None:
    _check_mixture_against_reference(EXAMPLE_NDCG)
    _check_mixture_against_reference([0.2, 0.9, 0.55, 0.7, 1.0, 0.35, 0.8, 0.6, 0.95, 0.4, 0.75, 0.85, 0.5])


@pytest.mark.parametrize("seed", range(4))
def test_mixture_bounds_match_the_loop_on_random_samples(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 60))
    draws = [rng.beta(8, 1, n), rng.beta(0.3, 0.3, n), rng.binomial(3, 0.7, n) / 3.0]
    _check_mixture_against_reference(draws[seed % 3].tolist())


def test_mixture_never_excludes_its_mean_and_ignores_order() -> None:
    """A seeded battery (skewed, bimodal, three-valued, sorted runs of zeros first): no interval
    excludes its own sample mean, and shuffling or reversing the values changes nothing."""
    rng = np.random.default_rng(20261201)
    # the case: 20 ones, 13 zeros and one 0.5 (mean 0.603), zeros first
    samples = [[0.0] * 13 + [0.5] + [1.0] * 20]
    for i in range(120):
        n = int(rng.integers(2, 100))
        kind = i % 4
        x = [rng.beta(8, 1, n), rng.beta(0.3, 0.3, n), rng.binomial(2, 0.6, n) / 2.0, np.sort(rng.random(n))][kind]
        samples.append(x.tolist())
    for x in samples:
        iv = mean_interval(x)
        assert iv.low <= float(np.mean(x)) <= iv.high, x
        for order in (x[::-1], rng.permutation(x).tolist()):
            assert mean_interval(order) == iv


def test_mean_interval_is_monotone_in_every_value() -> None:
    rng = np.random.default_rng(3)
    for n in (5, 13, 40, 150):  # the mixture below 100 values, Gaffke's bound from there
        x = rng.beta(2, 1, n)
        iv = mean_interval(x.tolist(), seed=1)
        for i in rng.choice(n, size=min(n, 6), replace=False):
            up = x.copy()
            up[i] = min(1.0, up[i] + 0.2)
            bigger = mean_interval(up.tolist(), seed=1)
            assert bigger.low >= iv.low and bigger.high >= iv.high


def test_mean_interval_zero_one_values_of_a_mean_stay_the_mixture() -> None:
    # an MRR whose values happen to be 0/1 is still a mean: no Clopper-Pearson shortcut
    iv = mean_interval([1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    assert iv.method == "mixture"


@pytest.mark.parametrize(
    "values,note",
    [
        ([], "no observations"),
        ([0.4], "n < 2"),
        ([0.0] * 5, "all values equal"),
        ([1.0] * 13, "all values equal"),
        ([0.5] * 40, "all values equal"),
    ],
)
def test_mean_interval_degenerate_never_zero_width(values: list[float], note: str) -> None:
    iv = mean_interval(values)
    assert iv.note == note
    assert iv.width > 0
    assert 0.0 <= iv.low <= iv.high <= 1.0
    if values:
        assert iv.low <= values[0] <= iv.high


def test_mean_interval_all_equal_shrinks_with_n_but_stays_open() -> None:
    widths = [mean_interval([0.8] * n).width for n in (5, 13, 50, 500)]
    assert all(a > b > 0 for a, b in itertools.pairwise(widths))
    assert mean_interval([1.0] * 13).low < clopper_pearson(13, 13)[0] + 0.05  # about as wide as 13/13 passes


def test_mean_interval_width_near_the_t_interval_at_large_n() -> None:
    rng = np.random.default_rng(0)
    x = rng.uniform(size=500)
    iv = mean_interval(x.tolist())
    half = stats.t.ppf(0.975, 499) * x.std(ddof=1) / math.sqrt(500)
    assert iv.method == "gaffke"  # from 100 cases
    assert iv.low < x.mean() < iv.high
    assert 2 * half < iv.width < 1.1 * 2 * half


def test_mean_interval_cluster_mixture_widens() -> None:
    rng = np.random.default_rng(11)
    centres = [0.2, 0.9, 0.5, 0.8, 0.3]
    x = [min(1.0, max(0.0, c + rng.normal(0, 0.01))) for c in centres for _ in range(8)]
    clusters = [f"doc{g}" for g in range(5) for _ in range(8)]
    plain = mean_interval(x)
    clustered = mean_interval(x, clusters=clusters, seed=0)
    assert plain.method == "mixture" and clustered.method == "cluster-mixture"
    assert clustered.note == "5 clusters"
    assert clustered.width > 2 * plain.width
    assert clustered == mean_interval(x, clusters=clusters, seed=0)


def test_mean_interval_few_clusters_are_wide() -> None:
    iv = mean_interval([0.7] * 6, clusters=["a", "a", "b", "b", "c", "c"])
    assert iv.method == "cluster-mixture" and iv.note == "all values equal; 3 clusters"
    assert iv.width > 0.5 and iv.low <= 0.7 <= iv.high
    one = mean_interval([0.1, 0.9], clusters=["a", "a"])
    assert (one.low, one.high, one.note) == (0.0, 1.0, "fewer than 2 clusters")


# -------------------------------------------- Tango (the benchmark's old paired-rate method)


def test_tango_no_discordant_pairs_closed_form() -> None:
    iv = tango_interval(0, 0, 13)
    half = Z95**2 / (13 + Z95**2)
    assert half == pytest.approx(0.2281, abs=5e-5)
    assert (iv.low, iv.high) == pytest.approx((-half, half), abs=1e-10)
    low, high = round_outward(iv.low, iv.high, 3)
    assert (round(low * 100, 1), round(high * 100, 1)) == (-22.9, 22.9)
    for n in (1, 5, 73, 500):
        assert tango_interval(0, 0, n, 0.9).high == pytest.approx(z_for(0.9) ** 2 / (n + z_for(0.9) ** 2), abs=1e-10)


def test_tango_published_example_cavo_2012() -> None:
    # Cavo et al. (2012) table used by Fagerland, Lydersen & Laake: n11=59, n12=6,
    # n21=16, n22=80; the reference implementation (R package contingencytables,
    # tests for chapter 8) prints "estimate = -0.0621 (95% CI -0.1240 to -0.0054)".
    iv = tango_interval(6, 16, 161)
    assert (round(iv.low, 4), round(iv.high, 4)) == (-0.1240, -0.0054)


def _tango_grid(b: int, c: int, n: int, z: float) -> tuple[float, float]:
    """Independent reference: evaluate Tango's statistic on a fine grid, keep |T| <= z."""
    d = np.linspace(-1, 1, 2_000_001)[1:-1]
    qa, qb, qc = 2.0 * n, -b - c + (2.0 * n - b + c) * d, -c * d * (1 - d)
    p21 = (np.sqrt(np.maximum(qb**2 - 4 * qa * qc, 0)) - qb) / (2 * qa)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (b - c - n * d) / np.sqrt(n * (2 * p21 + d * (1 - d)))
    inside = d[np.abs(np.nan_to_num(t, nan=0.0)) <= z]
    return float(inside.min()), float(inside.max())


@pytest.mark.parametrize("b,c,n", [(1, 7, 21), (6, 16, 161), (3, 0, 13), (0, 2, 13), (5, 5, 30), (40, 20, 160)])
def test_tango_matches_brute_force_grid(b: int, c: int, n: int) -> None:
    iv = tango_interval(b, c, n)
    low, high = _tango_grid(b, c, n, Z95)
    assert iv.method == "tango"
    assert iv.low == pytest.approx(low, abs=2e-6) and iv.high == pytest.approx(high, abs=2e-6)
    assert iv.low < (b - c) / n < iv.high


def test_tango_edges() -> None:
    assert tango_interval(0, 0, 0) == Interval(-1.0, 1.0, "degenerate", "no observations")
    assert tango_interval(13, 0, 13).high == 1.0 and tango_interval(13, 0, 13).low > 0.5
    assert tango_interval(0, 13, 13).low == -1.0
    with pytest.raises(ValueError):
        tango_interval(8, 8, 13)


# ------------------------------------------------------------------ paired means


def test_paired_mean_diff_all_zero_is_wide() -> None:
    iv = paired_mean_diff_interval([0.0] * 13)
    exact = paired_rate_interval(0, 0, 13)
    assert iv.method == "paired-mixture" and "all differences equal" in (iv.note or "")
    assert iv.low == pytest.approx(-iv.high, abs=1e-9)  # symmetric: nothing changed
    assert iv.high > exact.high  # a graded difference is weaker evidence than a verdict
    shifted = paired_mean_diff_interval([0.9] * 13)
    assert shifted.low < 0.9 < shifted.high <= 1.0
    big = paired_mean_diff_interval([0.0] * 40)
    assert 0 < big.width < iv.width


def test_paired_mean_diff_is_the_mixture_on_the_shifted_scale() -> None:
    rng = np.random.default_rng(5)
    small = rng.uniform(-0.3, 0.4, size=12)
    iv = paired_mean_diff_interval(small.tolist(), seed=2)
    ref = mean_interval(((small + 1) / 2).tolist(), seed=2)
    assert iv.method == "paired-mixture"
    assert (iv.low, iv.high) == pytest.approx((2 * ref.low - 1, 2 * ref.high - 1), abs=1e-12)
    assert iv.low < small.mean() < iv.high
    clustered = paired_mean_diff_interval(small.tolist(), clusters=[i // 4 for i in range(12)])
    assert clustered.method == "paired-cluster-mixture" and clustered.width > iv.width
    assert paired_mean_diff_interval([]).note == "no observations"
    # the shifted scale's "all values equal" is the differences' note, said once
    same = paired_mean_diff_interval([0.0] * 12, clusters=[i // 4 for i in range(12)])
    assert same.note == "all differences equal; 3 clusters"
    assert paired_mean_diff_interval([0.2]) == Interval(-1.0, 1.0, "degenerate", "n < 2")
    with pytest.raises(ValueError):
        paired_mean_diff_interval([1.5, 0.0])


def test_mean_pairs_needed_without_change() -> None:
    for margin in (0.05, 0.1, 0.3):
        n = mean_pairs_needed_without_change(margin)
        assert paired_mean_diff_interval([0.0] * n).low > -margin >= paired_mean_diff_interval([0.0] * (n - 1)).low
        assert n > pairs_needed_without_change(margin)  # more than the exact interval needs for verdicts
    assert mean_pairs_needed_without_change(0.05) > 13


# ------------------------------------------------------------------ kappa


def test_kappa_interval_never_zero_width_and_contains_the_estimate() -> None:
    perfect = kappa_interval(5, 3, 3, 5)
    assert perfect.width > 0 and perfect.high == 1.0 and -0.5 < perfect.low < 0.0
    iv = kappa_interval(90, 50, 50, 100)  # kappa 0.8
    assert iv.low < 0.8 < iv.high < 1.0
    assert kappa_interval(900, 500, 500, 1000).width < iv.width
    assert kappa_interval(0, 0, 0, 0).method == "degenerate"


def test_kappa_interval_contains_kappa_of_every_table_in_the_confidence_box() -> None:
    # brute force: tables whose agreement and pass rates lie in the three Clopper-Pearson
    # intervals must have their kappa inside the interval (the cell bounds never cut inside)
    agree, a_pass, b_pass, n = 9, 5, 4, 10
    iv = kappa_interval(agree, a_pass, b_pass, n)
    each = 1 - 0.05 / 3
    (o_lo, o_hi), (a_lo, a_hi), (b_lo, b_hi) = (clopper_pearson(k, n, each) for k in (agree, a_pass, b_pass))
    rng = np.random.default_rng(0)
    cells = rng.dirichlet([0.5] * 4, size=200_000)
    p_o, a, b = cells[:, 0] + cells[:, 3], cells[:, 0] + cells[:, 1], cells[:, 0] + cells[:, 2]
    inside = (o_lo <= p_o) & (p_o <= o_hi) & (a_lo <= a) & (a <= a_hi) & (b_lo <= b) & (b <= b_hi)
    p_o, a, b = p_o[inside], a[inside], b[inside]
    p_e = a * b + (1 - a) * (1 - b)
    kappas = (p_o - p_e) / (1 - p_e)
    assert kappas.size > 1000
    assert iv.low <= kappas.min() and kappas.max() <= iv.high
    assert kappas.min() - iv.low < 0.05 and iv.high - kappas.max() < 0.05  # and not much wider


def test_kappa_interval_coverage_simulation() -> None:
    # two raters with true kappa 0.6 (pass rates 0.5, agreement 0.8), 30 items
    rng = np.random.default_rng(4)
    cells = rng.multinomial(30, [0.4, 0.1, 0.1, 0.4], size=500)  # pp, pf, fp, ff
    hits = 0
    for pp, pf, fp, ff in cells:
        iv = kappa_interval(int(pp + ff), int(pp + pf), int(pp + fp), 30)
        hits += iv.low <= 0.6 <= iv.high
    assert hits / 500 >= 0.95


# ------------------------------------------------------------------ input validation


@pytest.mark.parametrize(
    "call,fragment",
    [
        (lambda: mean_interval([0.5, "0.7"]), r"scores\[1\] is '0.7' \(str\), not a number"),
        (lambda: mean_interval("0.5"), "got the string '0.5'; pass a list of floats"),
        (lambda: mean_interval([0.5, True]), r"scores\[1\] is True \(bool\).*use 1.0/0.0"),
        (lambda: mean_interval([0.5, math.nan]), r"scores\[1\] is nan; scores must be finite numbers in \[0.0, 1.0\]"),
        (lambda: rate_interval([1, np.bool_(False)]), r"pass/fail values\[1\] is .*bool"),
        (lambda: paired_mean_diff_interval([0.1, None]), r"differences\[1\] is None \(NoneType\)"),
        (lambda: mean_interval([0.5, 0.7], clusters=["a", math.nan]), r"clusters\[1\] is NaN.*use None"),
        (lambda: rate_interval([1, 0], clusters=[float("nan"), "a"]), r"clusters\[0\] is NaN"),
        (lambda: kappa_interval(8, 5, 4, 10), "no 2x2 table has 8 agreements of 10 items"),
        (lambda: kappa_interval(1, 9, 9, 10), "no 2x2 table has 1 agreements"),
        (lambda: kappa_interval(math.nan, 5, 4, 10), "agree must be a non-negative whole number"),
        (lambda: kappa_interval(9, 4.5, 4, 10), "first_pass must be a non-negative whole number"),
        (lambda: kappa_interval(9, 5, 4, "10"), "n must be a whole number of cases"),
        (lambda: kappa_interval(True, 5, 4, 10), "agree must be a whole number of cases"),
        (lambda: tango_interval(math.nan, 0, 13), "b must be a non-negative whole number"),
        (lambda: tango_interval(0, 1.5, 13), "c must be a non-negative whole number"),
        (lambda: clopper_pearson("3", 13), r"k must be a number of successes, got '3' \(str\)"),
        (lambda: clopper_pearson(math.nan, 13), "k must be a number of successes in"),
    ],
)
def test_inputs_are_refused_with_the_argument_and_the_fix(call: object, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        call()  # type: ignore[operator]


def test_whole_floats_and_numpy_numbers_are_accepted() -> None:
    assert kappa_interval(9.0, 5, 4, np.int64(10)) == kappa_interval(9, 5, 4, 10)  # type: ignore[arg-type]
    assert mean_interval([np.float32(0.5), 1, 0.25]) == mean_interval([0.5, 1.0, 0.25])


# ---------------------------------------------------------------- round_outward


def test_round_outward_edge_cases() -> None:
    assert round_outward(0.75, 0.75, 3) == (0.75, 0.75)
    assert round_outward(0.1 + 0.2, 0.1 + 0.2, 3) == (0.3, 0.3)  # 0.30000000000000004
    assert round_outward(0.7 - 1e-16, 0.7 + 1e-16, 1) == (0.7, 0.7)
    assert round_outward(0.3857383, 0.9090796, 3) == (0.385, 0.91)
    assert round_outward(0.75201, 0.99901, 3) == (0.752, 1.0)
    assert round_outward(-0.2280954, 0.2280954, 3) == (-0.229, 0.229)
    assert round_outward(0.0, 1.0, 3) == (0.0, 1.0)
    assert round_outward(-0.0001, 0.0001, 3) == (-0.001, 0.001)
    assert round_outward(0.123456, 0.123457, 0) == (0.0, 1.0)
    low, high = round_outward(-1e-12, 1e-12, 3)
    assert (low, high) == (0.0, 0.0) and math.copysign(1, low) == 1.0  # no "-0.0"
