"""Order-free betting-mixture confidence bounds for the mean of values in [0, 1].

The betting idea is Waudby-Smith & Ramdas ("Estimating means of bounded random variables
by betting", JRSS-B 86(1), 2024): for a candidate mean m, a bet that pays
1 − f + f · y / m on each value y has expectation 1 when the mean is m, so the product of
the bets (the capital) is an e-value and, by Markov's inequality, reaches 2/α with
probability at most α/2. Here the bet fractions are a fixed grid f_k = k/21, k = 1…20,
and the capitals of the 20 fractions are averaged (an average of e-values is an e-value),
so nothing depends on the order of the values or on a seed:

    capital_k(m) = Π_i (1 − f_k + f_k · y_i / m),  m rejected (lower) when mean_k capital_k ≥ 2/α.

The lower bound is the largest rejected m (each capital falls as m rises), found by
bisection and returned at the rejected end, so the reported interval contains the exact
one; the upper bound is the same on 1 − y. At the sample mean every capital is ≤ 1
(Jensen: Σ log(1 + f(y/m − 1)) ≤ n log(1 + f(ȳ/m − 1)) = 0), so the interval never
excludes the sample mean; each capital rises with every y_i, so the bounds are monotone in
every value.

Clusters (independent groups of cases with sizes fixed by design; the estimand is the mean
over cases, Σ S_j / Σ N_j for cluster sums S_j of N_j cases). With x_j = S_j − m·N_j, a bet
λ per case must be common to every cluster: the clusters' own means may differ (bigger
clusters harder), only their case-weighted mean is m under the null, and Π_j E[1 + λ x_j]
≤ exp(λ Σ_j E[x_j]) = 1 holds for every such configuration only with one λ. Two designs,
chosen from the sizes alone (never from the values):

- sizes within a factor 3 (N_max ≤ 3·N_median; all equal, or no clusters): λ_k = f_k/(m·N_max),
  so every cluster bets 1 + λ_k x_j = 1 − f_k·N_j/N_max + f_k·S_j/(m·N_max) ≥ 1 − f_k > 0.
  With one case per cluster this is the formula above.
- one or a few clusters much larger than the rest: scaling every bet by the largest cluster
  would shrink every other cluster's bet (99 clusters of 4 and one of 50: widths 0.13 → 0.73).
  Instead λ_k = f_k/N_median, not divided by m, and each cluster's bet is sized by its own
  size: a cluster with f_k·N_j/N_median ≤ 20/21 bets 1 + λ_k x_j (never below 1/21, since
  x_j ≥ −N_j), a larger one contributes exp(λ_k x_j − λ_k² N_j² / 8) instead (Hoeffding's
  lemma: its expectation is at most exp(λ_k E[x_j]) whatever the cluster's own mean). Each
  product is still an e-value under the null, and since λ_k does not depend on m every
  factor falls as m rises, so the rejected set of m is an interval and bisection finds it.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["FRACTIONS", "mixture_bounds"]

#: The fixed grid of bet fractions f_k = k/21, k = 1…20.
FRACTIONS = np.arange(1, 21, dtype=float) / 21.0
#: Bisection steps: 2^-45 of [0, 1] is far below any printed digit.
_STEPS = 45


def _log_mean_capital(
    m: np.ndarray, sums: np.ndarray, sizes: np.ndarray, ref: np.ndarray, per_m: np.ndarray
) -> np.ndarray:
    """log of the average capital against "the mean is m" (betting up), one per row of (r, g) arrays."""
    f = FRACTIONS[None, :, None]
    mm = m[:, None, None]
    lam = np.where(per_m[:, None, None], f / (mm * ref[:, None, None]), f / ref[:, None, None])  # (r, K, 1)
    x = sums[:, None, :] - mm * sizes[:, None, :]  # (r, 1, g)
    bet = f * sizes[:, None, :] / ref[:, None, None] <= FRACTIONS[-1] + 1e-12
    arg = np.where(bet, lam * x, 0.0)
    logs = np.where(bet, np.log1p(np.maximum(arg, -1.0 + 1e-300)), lam * x - (lam * sizes[:, None, :]) ** 2 / 8.0)
    logs = np.where(sizes[:, None, :] > 0, logs, 0.0)  # padding (size 0) bets nothing
    cap = logs.sum(axis=2)  # (r, K)
    top = cap.max(axis=1)
    out: np.ndarray = top + np.log(np.exp(cap - top[:, None]).mean(axis=1))
    return out


def _design(sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row: the reference size and whether bets are f/(m·N_max) (sizes within a factor 3) or f/N_median."""
    ref, per_m = np.empty(sizes.shape[0]), np.empty(sizes.shape[0], dtype=bool)
    for i, row in enumerate(sizes):
        real = row[row > 0]
        top, mid = float(real.max()), float(np.median(real))
        per_m[i] = top <= 3.0 * mid
        ref[i] = top if per_m[i] else mid
    return ref, per_m


def _log_evidence(m: np.ndarray, sums: np.ndarray, sizes: np.ndarray, ref: np.ndarray, per_m: np.ndarray) -> np.ndarray:
    """log of the e-value against "the mean over cases is m" (betting up), one per row.

    Rows with sizes within a factor 3: the mixture's mean capital. Other rows: the average of
    two e-values (an average of e-values is one), the mean capital above with every cluster
    betting, and the mean capital of the clusters up to 3·N_median alone against
    m·N / N_small — the most their case-weighted mean can be when the mean over all cases is m
    and the large clusters score 0 — with bets f/(m'·N_max') among those clusters. The second
    leaves the large clusters out rather than paying Hoeffding's allowance on them, which is
    narrower when they hold a small share of the cases; both fall as m rises.
    """
    one = _log_mean_capital(m, sums, sizes, ref, per_m)
    if np.all(per_m):
        return one
    out = one.copy()
    rows = np.flatnonzero(~per_m)
    sz, sm = sizes[rows], sums[rows]
    small = (sz > 0) & (sz <= 3.0 * ref[rows, None])
    sz_small = np.where(small, sz, 0.0)
    m_small = np.minimum(1.0, m[rows] * sz.sum(axis=1) / sz_small.sum(axis=1))
    top = sz_small.max(axis=1)
    two = _log_mean_capital(m_small, np.where(small, sm, 0.0), sz_small, top, np.ones(rows.size, dtype=bool))
    out[rows] = np.logaddexp(one[rows], two) - math.log(2.0)
    return out


def _lower(sums: np.ndarray, sizes: np.ndarray, alpha: float) -> np.ndarray:
    """Lower (1 − α/2) bounds, one per row: bisection between 0 (rejected by convention) and the mean (kept)."""
    threshold = math.log(2.0 / alpha)
    total = sizes.sum(axis=1)
    mean = sums.sum(axis=1) / total
    ref, per_m = _design(sizes)
    lo, hi = np.zeros_like(mean), mean.copy()
    live = mean > 0
    for _ in range(_STEPS):
        if not np.any(live):
            break
        mid = 0.5 * (lo + hi)
        rejected = np.zeros_like(live)
        idx = np.flatnonzero(live & (mid > 0))
        if idx.size:
            rejected[idx] = _log_evidence(mid[idx], sums[idx], sizes[idx], ref[idx], per_m[idx]) >= threshold
        lo = np.where(live & rejected, mid, lo)
        hi = np.where(live & ~rejected, mid, hi)
        live = live & (hi - lo > 1e-13)
    out: np.ndarray = lo
    return out


def mixture_bounds(sums: np.ndarray, sizes: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper (1 − α) bounds for the mean over cases, one pair per row.

    ``sums`` (r, g): per unit (a case, or a cluster), the sum of its values in [0, 1];
    ``sizes`` (r, g): its number of cases (1 without clusters; 0 pads a row with fewer units).
    Each side misses with probability at most α/2; the bets follow the row's sizes (see above).
    """
    sums = np.atleast_2d(np.asarray(sums, dtype=float))
    sizes = np.atleast_2d(np.asarray(sizes, dtype=float))
    # a canonical order, so float sums are the same bits whatever order the units came in
    order = np.lexsort((sizes, sums), axis=-1)
    sums, sizes = np.take_along_axis(sums, order, axis=-1), np.take_along_axis(sizes, order, axis=-1)
    low = _lower(sums, sizes, alpha)
    high = 1.0 - _lower(sizes - sums, sizes, alpha)
    return np.clip(low, 0.0, 1.0), np.clip(high, 0.0, 1.0)
