"""The seeded random-order betting interval Oloproof used before the betting mixture, kept to benchmark against.

Betting confidence intervals for bounded means (Waudby-Smith & Ramdas, JRSS-B 2024).

"Estimating means of bounded random variables by betting", Ian Waudby-Smith and
Aaditya Ramdas, Journal of the Royal Statistical Society Series B 86(1), 2024
(arXiv:2010.09686). For a candidate mean m, a gambler bets against "the mean is m"
on each observation in turn; under that null the wealth is a non-negative
martingale, so by Ville's inequality it reaches 2/α with probability at most α/2,
whatever the distribution on [0, 1] and whatever n. The interval is every m whose
wealth stayed below 2/α, betting both up and down (the paper's "hedged capital" with
θ = 1/2). Bets are the paper's predictable plug-in for a fixed sample size n,
λ_i = sqrt(2 log(2/α) / (n σ̂²_{i-1})), truncated at c/m (up) and c/(1-m) (down)
with c = 0.9 (see TRUNCATION), where σ̂² is the paper's regularised running variance.
The largest wealth reached along the sequence counts (Ville's inequality bounds it).

Clusters (the paper's independent observations are then whole clusters): the bet on
cluster j pays (S_j − m·N_j) / N_max for a cluster of N_j cases summing to S_j, which
has mean 0 when every case's expected value is m; the cluster sizes are treated as
fixed by the eval set's design. With N_j = 1 this is exactly the unclustered method.

Both payoffs are monotone in m (wealth betting up never grows as m rises), so each
bound is the root of a monotone function, found by a bracketing search vectorised over
many samples at once (the coverage benchmark reuses it). The search returns the end of
its bracket just outside the confidence set, so the reported interval contains the exact one.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["TRUNCATION", "betting_bets", "betting_bounds"]

#: The truncation c (any c < 1 is valid; the paper suggests 1/2 or 3/4). 0.9 lets bets near
#: the edges of [0, 1] be bolder, which narrows intervals for scores massed near 0 or 1
#: (measured in benchmarks/bench_coverage.py) and still never risks more than 90% of the wealth.
TRUNCATION = 0.9
#: Bounds are found to within 1e-10, far below any printed digit ...
_TOL = 1e-10
#: ... or until the log-wealth at the rejected end is within 1e-9 of the threshold.
_F_TOL = 1e-9
#: At most 34 halvings of [0, 1] (2^-34 < 1e-10), one bisection step in three.
_MAX_STEPS = 3 * 34


def betting_bets(x: np.ndarray, alpha: float) -> np.ndarray:
    """Predictable plug-in bets λ_i for each row of ``x`` (values in [0, 1], shape (r, n)).

    λ_i uses only x_1..x_{i-1}: regularised mean μ̂_t = (1/2 + Σx)/(t+1) and
    variance σ̂²_t = (1/4 + Σ(x_i − μ̂_i)²)/(t+1), as in WSR 2024 and its reference code.
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


def _excess(
    m: np.ndarray, sign: np.ndarray, lam: np.ndarray, pay: np.ndarray, size: np.ndarray, threshold: float
) -> np.ndarray:
    """Log of the largest running wealth minus log(2/α), per row: the null "mean = m" is rejected where ≥ 0.

    A row with ``sign`` +1 bets up (a candidate lower bound, bets capped at c/m), −1 bets
    down (a candidate upper bound, capped at c/(1 − m)).
    """
    mm, sg = m[:, None], sign[:, None]
    edge = np.where(sg > 0, mm, 1.0 - mm)
    with np.errstate(divide="ignore"):
        cap = np.where(edge > 0, TRUNCATION / np.where(edge > 0, edge, 1.0), np.inf)
    logs = np.log1p(sg * np.minimum(lam, cap) * (pay - mm * size))
    out: np.ndarray = np.max(np.cumsum(logs, axis=1), axis=1) - threshold
    return out


def _brackets(
    lam: np.ndarray, pay: np.ndarray, size: np.ndarray, threshold: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A rejected and a kept m around each bound, from one evaluation of a few probes.

    Rows are [lower bounds..., upper bounds...]. Probes: the edge (0 or 1), the estimate,
    and points between, a few multiples of a rough half-width h = max(3·sd/√n, 1/n) (the
    1/n for samples without spread) from the estimate; the far edge is never rejected. The
    rejected probes of a side are those beyond its bound (the wealth is monotone in m), so
    the bracket is the outermost kept probe and the innermost rejected one.
    """
    r2, g = pay.shape
    sign = np.ones(r2)
    sign[r2 // 2 :] = -1.0
    est = pay.sum(axis=1) / size.sum(axis=1)
    half = np.maximum(3.0 * np.std(pay / size, axis=1) / math.sqrt(g), 1.0 / g)
    edge = np.where(sign > 0, 0.0, 1.0)
    # probes from the edge inwards (clipped into [0, 1])
    steps = (9.0, 3.0, 2.0, 1.4, 1.0, 0.7, 0.0)
    probes = np.stack([edge, *(np.clip(est - sign * k * half, 0, 1) for k in steps)])
    k = probes.shape[0]
    f = _excess(
        probes.ravel(), np.tile(sign, k), np.tile(lam, (k, 1)), np.tile(pay, (k, 1)), np.tile(size, (k, 1)), threshold
    )
    f = f.reshape(k, r2)
    far = 1.0 - edge
    rej, f_rej = edge.copy(), f[0].copy()
    kept, f_kept = far.copy(), np.full(r2, -np.inf)
    for i in range(1, k):  # probes move inwards: a rejected probe is a tighter rejected end
        better = (f[i] >= 0) & (sign * (probes[i] - rej) > 0)
        rej, f_rej = np.where(better, probes[i], rej), np.where(better, f[i], f_rej)
    for i in range(k - 1, -1, -1):  # from the inside out: the outermost kept probe is the tighter kept end
        better = (f[i] < 0) & (sign * (probes[i] - rej) > 0) & (sign * (kept - probes[i]) > 0)
        kept, f_kept = np.where(better, probes[i], kept), np.where(better, f[i], f_kept)
    return sign, rej, f_rej, kept, f_kept


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

    The lower bound is where the wealth betting up stops reaching 2/α (it falls as m rises),
    the upper bound mirrors it. Each is bracketed between a rejected and a kept m (a few
    probes, `_brackets`), and the bracket is shrunk by the Illinois variant of false
    position with a bisection step every third step, so it at least halves every three
    steps; the bound reported is the rejected end, within 1e-10 outside the exact bound, so
    the interval always contains the exact one.
    """
    pay = np.atleast_2d(np.asarray(pay, dtype=float))
    size = np.atleast_2d(np.asarray(size, dtype=float))
    if lam is None:
        lam = betting_bets(pay / size, alpha)
    threshold = math.log(2.0 / alpha)
    r = pay.shape[0]
    lam2, pay2, size2 = (np.concatenate([a, a]) for a in (lam, pay, size))
    sign, rej, f_rej, kept, f_kept = _brackets(lam2, pay2, size2, threshold)
    open_edge = f_rej < 0  # even the edge is not rejected: the bound is the edge itself
    kept = np.where(open_edge, rej, kept)
    need = ~open_edge & ~np.isfinite(f_kept)  # the kept end is the far edge: evaluate it once
    if np.any(need):
        f_kept = np.where(need, _excess(kept, sign, lam2, pay2, size2, threshold), f_kept)
    last = np.zeros(2 * r)  # +1: the rejected end moved last time, -1: the kept end
    for step in range(_MAX_STEPS):
        # done: the bracket is closed, or the rejected end is all but on the threshold
        if np.all(open_edge | (np.abs(kept - rej) <= _TOL) | (f_rej <= _F_TOL)):
            break
        with np.errstate(divide="ignore", invalid="ignore"):
            guess = kept - f_kept * (kept - rej) / (f_kept - f_rej)
        inside = np.isfinite(guess) & (np.minimum(rej, kept) < guess) & (guess < np.maximum(rej, kept))
        mid = np.where(inside & (step % 3 != 2), guess, 0.5 * (rej + kept))
        # a guess next to the kept end (false position converging from that side) is pushed half
        # a tolerance towards the rejected end, so the bracket can close on the next step
        toward = np.sign(rej - kept)
        mid = np.where(np.abs(mid - kept) < 0.5 * _TOL, kept + toward * 0.5 * _TOL, mid)
        f_mid = _excess(mid, sign, lam2, pay2, size2, threshold)
        hit = f_mid >= 0
        # Illinois: when one end stays put twice running, halve its value so false position moves it
        f_kept = np.where(hit & (last > 0), 0.5 * f_kept, f_kept)
        f_rej = np.where(~hit & (last < 0), 0.5 * f_rej, f_rej)
        rej, f_rej = np.where(hit, mid, rej), np.where(hit, f_mid, f_rej)
        kept, f_kept = np.where(hit, kept, mid), np.where(hit, f_kept, f_mid)
        last = np.where(hit, 1.0, -1.0)
    # the rejected end lies just outside the exact interval, so the interval reported contains it
    # (an edge that is not rejected is the bound itself)
    return rej[:r], rej[r:]
