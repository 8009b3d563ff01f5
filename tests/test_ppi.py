"""The judge-corrected rate (stats/ppi.py): hand-computed cases, an independent mixture, seeded coverage."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binomtest

from pytest_oloproof.stats.intervals import paired_rate_interval
from pytest_oloproof.stats.ppi import corrected_bounds_rows, corrected_rate


def test_hand_computed_from_the_specs_figures() -> None:
    """At confidence 0.90 each part is a 95% interval whose value SPEC §7/§10 prints: 13/13 judge passes
    → Clopper–Pearson [75.29%, 100%]; 13 labelled pairs with no disagreement → exact paired ±24.7 points."""
    r = corrected_rate([1.0] * 13, [1.0] * 13, [1.0] * 13, 0.90)
    assert (r.value, r.judge_rate, r.rectifier) == (1.0, 1.0, 0.0)
    assert r.low == pytest.approx(0.752947 - 0.2470, abs=5e-4)
    assert r.high == 1.0


def test_hand_computed_case() -> None:
    # 10 judged cases, the judge passes 8; 4 labelled: people fail one the judge passed
    judge_all = [1, 1, 1, 1, 1, 1, 1, 1, 0, 0]
    human, judge_labelled = [1, 0, 1, 1], [1, 1, 1, 1]
    r = corrected_rate(judge_all, human, judge_labelled, 0.95)
    assert r.judge_rate == 0.8 and r.rectifier == -0.25
    assert r.value == pytest.approx(0.55)
    assert (r.judged, r.labelled) == (10, 4)
    # judge: exact Clopper–Pearson at 97.5% (scipy's root-finding form, independent of ours)
    cp = binomtest(8, 10).proportion_ci(confidence_level=0.975, method="exact")
    # rectifier: 0 pairs human-only, 1 judge-only of 4: the exact paired interval at 97.5%
    pair = paired_rate_interval(0, 1, 4, 0.975)
    assert r.low == pytest.approx(max(0.0, cp.low + pair.low), abs=1e-9)
    assert r.high == pytest.approx(min(1.0, cp.high + pair.high), abs=1e-9)
    assert r.low < r.value < r.high


def test_point_estimate_is_judge_mean_plus_mean_rectifier() -> None:
    rng = np.random.default_rng(7)
    judge_all = rng.integers(0, 2, 500).astype(float)
    pick = rng.choice(500, 60, replace=False)
    human = rng.integers(0, 2, 60).astype(float)
    r = corrected_rate(list(judge_all), list(human), list(judge_all[pick]))
    # PPI's mean estimator (Angelopoulos et al. 2023, eq. for the mean): Ŷ_f(unlabelled) + mean(Y - f) on labelled
    expected = judge_all.mean() + (human - judge_all[pick]).mean()
    assert r.value == pytest.approx(min(1.0, max(0.0, expected)), abs=1e-12)


def test_perfect_judge_is_wider_than_judge_alone_but_contains_it() -> None:
    judge_all = [1.0] * 70 + [0.0] * 30
    r = corrected_rate(judge_all, [1.0] * 20 + [0.0] * 10, [1.0] * 20 + [0.0] * 10)
    cp = binomtest(70, 100).proportion_ci(confidence_level=0.95, method="exact")
    assert r.value == 0.7 and r.rectifier == 0.0
    assert r.low < cp.low and r.high > cp.high  # never narrower: the labels add their own uncertainty


def test_order_free_and_clipped() -> None:
    a = corrected_rate([1, 1, 1, 0], [0, 1], [1, 1])
    b = corrected_rate([0, 1, 1, 1], [1, 0], [1, 1])
    assert (a.low, a.high, a.value) == (b.low, b.high, b.value)
    assert 0.0 <= a.low <= a.value <= a.high <= 1.0
    one = corrected_rate([1, 0, 1], [1], [1])  # one label: the rectifier is anything in [-1, 1]
    assert (one.low, one.high) == (0.0, 1.0)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (([1, 0], [1], [1, 1]), "1 human labels for 2"),
        (([1, 0], [1, 0, 1], [1, 0, 1]), "must be a sample"),
        (([], [1], [1]), "at least one judged"),
        (([1, 0.5], [1], [1]), "0/1 verdicts"),
    ],
)
def test_refuses_bad_input(args: tuple[list[float], list[float], list[float]], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        corrected_rate(*args)


def test_rows_agree_with_single_calls() -> None:
    rng = np.random.default_rng(3)
    rect = rng.choice([-1.0, 0.0, 1.0], size=(5, 30), p=[0.1, 0.8, 0.1])
    passes = rng.integers(100, 160, 5)
    low, high = corrected_bounds_rows(passes, 200, rect)
    for i in range(5):
        h = np.clip(rect[i], 0, 1)
        g = h - rect[i]
        judge_all = [1.0] * int(passes[i]) + [0.0] * (200 - int(passes[i]))
        one = corrected_rate(judge_all, list(h), list(g))
        assert (low[i], high[i]) == pytest.approx((one.low, one.high), abs=1e-9)


def test_seeded_coverage_with_a_lenient_judge() -> None:
    """True rate 0.70; the judge passes 10.5% it should fail and fails 4.5% it should pass (judge rate 0.76)."""
    rng = np.random.default_rng(20261202)
    reps, judged, labels = 400, 200, 30
    # cells (human, judge): (1,1), (1,0), (0,1), (0,0)
    p = np.array([0.655, 0.045, 0.105, 0.195])
    cells = rng.choice(4, size=(reps, judged), p=p)
    human = np.isin(cells, [0, 1]).astype(float)
    judge = np.isin(cells, [0, 2]).astype(float)
    rect = human[:, :labels] - judge[:, :labels]  # the first n of n i.i.d. cases: a uniform sample
    low, high = corrected_bounds_rows(judge.sum(axis=1), judged, rect)
    covered = np.mean((low <= 0.70) & (0.70 <= high))
    judge_cp = [binomtest(int(k), judged).proportion_ci(method="exact") for k in judge.sum(axis=1)]
    judge_covered = np.mean([c.low <= 0.70 <= c.high for c in judge_cp])
    assert covered >= 0.95  # the union bound makes it conservative; 400 reps: SE about 0.011
    assert judge_covered < 0.75  # the judge alone misses the human rate (the reason for correcting)
