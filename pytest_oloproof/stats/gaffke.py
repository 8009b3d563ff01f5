"""Gaffke's confidence bounds for the mean of bounded i.i.d. values, by seeded Monte Carlo.

N. Gaffke, "Three test statistics for a nonparametric one-sided hypothesis on the mean
of a nonnegative variable", Mathematical Methods of Statistics 14(4), 2005; found again
by E. Learned-Miller and P. S. Thomas, "A new confidence interval for the mean of a
bounded random variable" (arXiv:1905.06208, 2019/2020), who stated its validity for every
distribution as a conjecture and searched for counterexamples without finding one. It is
proven where it reduces to classical tests (n = 1: Markov; two-point values: the binomial
test); the general case is, as far as we know, a conjecture. Oloproof uses it from 100
independent units only (`stats.GAFFKE_FROM`), the provably valid betting mixture (`mixture`) below.

For values x_1..x_n in [0, 1], the upper bound is the 1 − α quantile of D_0·1 + Σ D_i·x_i
with Dirichlet(1, ..., 1) weights D (the sample with one extra point at the upper end of
the range, reweighted at random; Learned-Miller & Thomas write it with the spacings of
sorted uniforms, the same distribution); the lower bound mirrors it with the extra point
at 0. On 0/1 values it is exactly Clopper–Pearson; on values that spread over the range
it is about as wide as the t-interval.

The quantile is estimated from B seeded draws of exponentials E (D = E / ΣE) and read
off conservatively: a bound is the k-th most extreme draw with k the least integer above
(α/2)(B + 1) − 1, the Monte Carlo p-value rule (1 + #draws beyond) / (B + 1) > α/2, which
keeps each side's miss rate at most α/2 for every B, averaged over seeds, when the exact
test is valid at every level. For one seed the bound is off the exact one by the Monte
Carlo error (about ±0.0025 in each tail's probability at 4,000 draws). Rows with a closed
form (`exact_rows`: all values equal, or all 0/1) skip the draws, so their bound is exact, the
same for every seed, and rises with n (the sample-size line's search relies on it).

Clusters (equal sizes only; the caller checks): the values are the cluster sums and sizes
divided by the largest size, and each draw is the ratio Σ E_j·S_j / Σ E_j·N_j with the extra
point a unit of the largest size summing to 0 (lower) or to its size (upper). With equal
sizes this is Gaffke's bound on the cluster means.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator

import numpy as np

__all__ = ["DRAWS", "MIN_RANK", "draws_for", "exact_rows", "gaffke_bounds", "gaffke_weights", "resolves"]

#: Monte Carlo draws per interval: the bound is then the 100th most extreme of 4,000 at 95%.
DRAWS = 4000
#: Fewer draws from 500 units on, so one interval stays below about 2·10^6 exponentials ...
_BUDGET = 2_000_000
#: ... but never fewer than 400 (the 10th most extreme at 95%).
_MIN_DRAWS = 400
#: Exponentials generated per block (bounded memory at 100,000 cases).
_BLOCK = 2_000_000
#: The Monte Carlo bound is used only when it is at least the 10th most extreme draw (as 400
#: draws give at 95%): at 99.9% and 1,000 units the budget's 1,999 draws would give k = 0, [0, 1].
MIN_RANK = 10


def draws_for(units: int) -> int:
    """Monte Carlo draws used for ``units`` independent values (4,000 below 500 units)."""
    return max(_MIN_DRAWS, min(DRAWS, _BUDGET // (units + 1)))


def _rank(alpha: float, draws: int) -> int:
    """k: a bound is the k-th most extreme of ``draws`` (0: too few draws, the bound is the edge).

    Keep m while 1 + #(draws beyond m) > (α/2)(draws + 1), i.e. #beyond >= k with k the least
    integer above (α/2)(draws + 1) − 1 (the 1e-9 absorbs float error at an exact integer).
    """
    return math.floor((alpha / 2.0) * (draws + 1) - 1.0 + 1e-9) + 1


def resolves(units: int, alpha: float) -> bool:
    """Whether the draws for ``units`` read each tail at rank `MIN_RANK` or beyond at level α."""
    return _rank(alpha, draws_for(units)) >= MIN_RANK


def exact_rows(sums: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Rows whose bound has a closed form, so it needs no draws: sizes all 1 and the values
    all equal or all 0/1 (the weighted sums are then beta variables)."""
    sums = np.atleast_2d(np.asarray(sums, dtype=float))
    sizes = np.atleast_2d(np.asarray(sizes, dtype=float))
    ones = np.all(sizes == 1.0, axis=1)
    equal = np.all(sums == sums[:, :1], axis=1)
    binary = np.all((sums == 0.0) | (sums == 1.0), axis=1)
    out: np.ndarray = ones & (equal | binary)
    return out


def _exact_bounds(sums: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Gaffke's bound without Monte Carlo for `exact_rows` (r, g): the extra point's weight is
    Beta(1, g), so all values v give v·(α/2)^(1/g) and v + (1 − v)(1 − (α/2)^(1/g)); k ones give
    Beta(k, g + 1 − k) and Beta(k + 1, g − k) quantiles, which is Clopper–Pearson."""
    from scipy import special  # lazily: importing scipy costs start-up time

    g = sums.shape[1]
    v, k = sums[:, 0], sums.sum(axis=1)
    q = (alpha / 2.0) ** (1.0 / g)
    binary = np.all((sums == 0.0) | (sums == 1.0), axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        b_low = np.where(k > 0, special.betaincinv(np.maximum(k, 1e-300), g + 1 - k, alpha / 2.0), 0.0)
        b_high = np.where(k < g, special.betaincinv(k + 1, np.maximum(g - k, 1e-300), 1.0 - alpha / 2.0), 1.0)
    low = np.where(binary, b_low, v * q)
    high = np.where(binary, b_high, v + (1.0 - v) * (1.0 - q))
    return low, high


def gaffke_weights(units: int, seed: int, draws: int | None = None) -> np.ndarray:
    """The (draws, units + 1) standard exponentials of one interval; the last column weighs the extra point."""
    return np.concatenate(list(_weight_blocks(units, seed, draws)))


def _weight_blocks(units: int, seed: int, draws: int | None = None) -> Iterator[np.ndarray]:
    """`gaffke_weights` in blocks of rows (bounded memory at 100,000 cases), from one seeded stream."""
    b = draws_for(units) if draws is None else draws
    rng = np.random.default_rng(seed)
    step = max(1, _BLOCK // (units + 1))
    for start in range(0, b, step):
        yield rng.standard_exponential((min(step, b - start), units + 1))


def gaffke_bounds(
    sums: np.ndarray,
    sizes: np.ndarray,
    alpha: float,
    *,
    seed: int = 0,
    weights: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper (1 − α) bounds for the mean, one pair per row of ``sums`` (r, g).

    ``sums``/``sizes``: per unit, its sum and size divided by the largest size (without
    clusters: the values and ones). ``weights``: the exponentials (default: `gaffke_weights`
    of ``seed``), shared by every row, so the coverage benchmark can pass many samples at once.
    Each side holds with probability at least 1 − α/2. `exact_rows` get the closed form
    instead (no Monte Carlo error, the same for every seed).
    """
    sums = np.atleast_2d(np.asarray(sums, dtype=float))
    sizes = np.atleast_2d(np.asarray(sizes, dtype=float))
    exact = exact_rows(sums, sizes)
    if np.all(exact):  # no draws at all
        lo, hi = _exact_bounds(sums, alpha)
    else:
        lo, hi = _monte_carlo_bounds(sums, sizes, alpha, seed, weights)
        if np.any(exact):
            lo[exact], hi[exact] = _exact_bounds(sums[exact], alpha)
    return np.clip(lo, 0.0, 1.0), np.clip(hi, 0.0, 1.0)


def _monte_carlo_bounds(
    sums: np.ndarray, sizes: np.ndarray, alpha: float, seed: int, weights: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """`gaffke_bounds` from the draws, for every row."""
    r, g = sums.shape
    if weights is None:
        blocks: Iterable[np.ndarray] = _weight_blocks(g, seed)
        b = draws_for(g)
    else:
        step = max(1, _BLOCK // (g + 1))
        blocks, b = (weights[i : i + step] for i in range(0, weights.shape[0], step)), weights.shape[0]
    k = _rank(alpha, b)
    if k < 1 or k > b:
        return np.zeros(r), np.ones(r)
    low, high, start = np.empty((b, r)), np.empty((b, r)), 0
    for e in blocks:
        a, c, e0 = e[:, :g] @ sums.T, e[:, :g] @ sizes.T, e[:, g : g + 1]
        low[start : start + len(e)] = a / (c + e0)
        high[start : start + len(e)] = (a + e0) / (c + e0)
        start += len(e)
    lo: np.ndarray = np.partition(low, k - 1, axis=0)[k - 1]
    hi: np.ndarray = np.partition(high, b - k, axis=0)[b - k]
    return lo, hi  # (clipped to [0, 1] by gaffke_bounds)
