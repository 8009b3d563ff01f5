"""Betting confidence intervals for bounded means (Waudby-Smith & Ramdas, JRSS-B 2024).

"Estimating means of bounded random variables by betting", Ian Waudby-Smith and
Aaditya Ramdas, Journal of the Royal Statistical Society Series B 86(1), 2024
(arXiv:2010.09686). For a candidate mean m, a gambler bets against "the mean is m"
on each observation in turn; under that null the wealth is a non-negative
martingale, so by Ville's inequality it reaches 2/α with probability at most α/2,
whatever the distribution on [0, 1] and whatever n. The interval is every m whose
wealth stayed below 2/α, betting both up and down (the "hedged capital" of §4.3,
θ = 1/2). Bets are the paper's predictable plug-in for a fixed sample size n,
λ_i = sqrt(2 log(2/α) / (n σ̂²_{i-1})), truncated at c/m (up) and c/(1-m) (down)
with c = 0.9 (see TRUNCATION), where σ̂² is the regularised running variance of eq. (23).

Clusters (the paper's independent observations are then whole clusters): the bet on
cluster j pays (S_j − m·N_j) / N_max for a cluster of N_j cases summing to S_j, which
has mean 0 when every case's expected value is m; the cluster sizes are treated as
fixed by the eval set's design. With N_j = 1 this is exactly the unclustered method.

Both payoffs are monotone in m (wealth betting up never grows as m rises), so each
bound is found by bisection on a monotone function, vectorised over many samples at
once (the coverage benchmark reuses it). Bisection returns the side that was *not*
rejected, so the reported interval always contains the exact one.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["TRUNCATION", "betting_bets", "betting_bounds"]

#: The truncation c (any c < 1 is valid; the paper suggests 1/2 or 3/4). 0.9 lets bets near
#: the edges of [0, 1] be bolder, which narrows intervals for scores massed near 0 or 1
#: (measured in benchmarks/bench_coverage.py) and still never risks more than 90% of the wealth.
TRUNCATION = 0.9
#: Bisection steps on [0, 1]: 2^-40 ≈ 1e-12, below any printed digit.
_STEPS = 40


def betting_bets(x: np.ndarray, alpha: float) -> np.ndarray:
    """Predictable plug-in bets λ_i for each row of ``x`` (values in [0, 1], shape (r, n)).

    λ_i uses only x_1..x_{i-1}: regularised mean μ̂_t = (1/2 + Σx)/(t+1) and
    variance σ̂²_t = (1/4 + Σ(x_i − μ̂_i)²)/(t+1) (WSR 2024, eqs. 23 and 26).
    """
    n = x.shape[1]
    t = np.arange(1, n + 1, dtype=float)
    mu = (0.5 + np.cumsum(x, axis=1)) / (t + 1.0)
    s2 = (0.25 + np.cumsum((x - mu) ** 2, axis=1)) / (t + 1.0)
    prev = np.empty_like(s2)
    prev[:, 0] = 0.25
    prev[:, 1:] = s2[:, :-1]
    lam: np.ndarray = np.sqrt(2.0 * math.log(2.0 / alpha) / (n * prev))
    return lam


def _log_wealth_exceeds(
    m: np.ndarray, lam: np.ndarray, pay: np.ndarray, size: np.ndarray, sign: float, threshold: float
) -> np.ndarray:
    """Whether the wealth betting ``sign`` (+1 up, −1 down) against mean ``m`` (one per row) ever
    reaches exp(``threshold``). ``pay`` = S_j / N_max and ``size`` = N_j / N_max per cluster."""
    mm = m[:, None]
    edge = mm if sign > 0 else 1.0 - mm
    with np.errstate(divide="ignore", invalid="ignore"):
        cap = np.where(edge > 0, TRUNCATION / edge, np.inf)
    bet = np.minimum(lam, cap)
    logs = np.log1p(sign * bet * (pay - mm * size))
    out: np.ndarray = np.max(np.cumsum(logs, axis=1), axis=1) >= threshold
    return out


def betting_bounds(
    pay: np.ndarray,
    size: np.ndarray,
    alpha: float,
    lam: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper (1 − α) bounds for the mean, one pair per row.

    ``pay`` (r, g): per cluster, the sum of its values divided by the largest cluster size;
    ``size`` (r, g): the cluster's size divided by the largest (all 1 without clusters).
    ``lam``: the bets (default: `betting_bets` of the cluster means).
    """
    pay = np.atleast_2d(np.asarray(pay, dtype=float))
    size = np.atleast_2d(np.asarray(size, dtype=float))
    if lam is None:
        lam = betting_bets(pay / size, alpha)
    threshold = math.log(2.0 / alpha)
    r = pay.shape[0]
    bounds = []
    for sign in (1.0, -1.0):
        # lower bound: wealth betting up rejects every m below it (monotone decreasing in m);
        # upper bound: wealth betting down rejects every m above it.
        reject = np.zeros(r) if sign > 0 else np.ones(r)  # an m known to be rejected... or the edge
        accept = np.ones(r) if sign > 0 else np.zeros(r)  # an m known not to be rejected
        edge_rejected = _log_wealth_exceeds(reject, lam, pay, size, sign, threshold)
        for _ in range(_STEPS):
            mid = 0.5 * (reject + accept)
            rej = _log_wealth_exceeds(mid, lam, pay, size, sign, threshold)
            reject = np.where(rej, mid, reject)
            accept = np.where(rej, accept, mid)
        # when even the edge (0 or 1) is not rejected, the bound is the edge itself
        bounds.append(np.where(edge_rejected, accept, 0.0 if sign > 0 else 1.0))
    return bounds[0], bounds[1]
