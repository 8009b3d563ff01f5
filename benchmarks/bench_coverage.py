"""Benchmark 4: coverage and width of the graded-metric intervals, unclustered, paired and clustered.

    python benchmarks/bench_coverage.py [--reps 500] [--seed 20261201] [--sizes 5,13,30,100,200]

A seeded simulation: for every distribution of the battery and every n, draw ``reps``
samples whose true mean (over cases) is known, compute each method's 95% interval, and
print the share of intervals that contain the truth (coverage) and the median width.
Every method is vectorised over the replications.

Methods:
  t       — the plain t-interval (clustered: the cluster-robust t of the ratio estimator
            Σ S_j / Σ N_j), the width reference; it promises nothing at small n.
  betting — the seeded random-order betting interval Oloproof used before (Waudby-Smith &
            Ramdas 2024, `pytest_oloproof.betting`; clusters: every payoff scaled by the
            largest cluster).
  mixture — the order-free betting mixture of `pytest_oloproof.stats.mixture`, what Oloproof uses
            below 100 independent units (clusters: each cluster's bet sized by its own size).
  gaffke  — Gaffke's bound, `pytest_oloproof.stats.gaffke`, at every n, on sorted units with one
            seeded set of Monte Carlo weights per cell (one run's seed fixes them);
            clustered data only when all clusters have one size (otherwise "-").
  now     — what Oloproof prints: the mixture below 100 units, Gaffke's from 100 where it applies.

With ``--missing``, a second table: intervals over *all* selected cases when some are missing,
each missing case put at its worst value (0 for the lower bound, 1 for the upper; a missing
pair at −1 / +1), as Oloproof prints them under "with missing at worst", against the interval
over the observed cases alone. The truth is the mean over all selected cases' population; the
missing cases are either a random share (missing completely at random) or the hard ones
(informative: a case below the median of its distribution, or a regressed pair, goes missing
far more often), where the observed-only interval is biased and the one at worst must still hold.

Clustered families (sizes fixed by design, cases within a cluster correlated through a
shared level): equal clusters of 4; unequal sizes cycling 1, 2, 4, 8, 12; clusters of 4 and
one large cluster holding a quarter of the cases; and informative sizes, where bigger
clusters are harder, so the mean over cases is below the mean of the cluster means.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import _betting as betting  # the interval Oloproof used before, kept here to measure against
import numpy as np
from scipy import special, stats

from pytest_oloproof.stats import gaffke, mixture, paired_exact
from pytest_oloproof.stats.intervals import GAFFKE_FROM

ALPHA = 0.05
SIZES = (5, 13, 30, 100, 200)
CLUSTER_SIZE = 4


# ------------------------------------------------------------------ the battery

Draw = Callable[[np.random.Generator, tuple[int, int]], np.ndarray]


@dataclass(frozen=True)
class Case:
    """One distribution of the battery: a sampler of (reps, n) values and the true mean over cases
    (clustered families: a function of n, and the cluster of each case)."""

    name: str
    family: str  # "mean", "paired" (values are differences in [-1, 1]) or "clustered"
    draw: Draw
    truth: float | Callable[[int], float]
    layout: Callable[[int], np.ndarray] | None = None  # cluster index of each case

    def truth_at(self, n: int) -> float:
        return self.truth(n) if callable(self.truth) else self.truth


def _mrr(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    ranks = rng.choice(6, size=shape, p=[0.15, 0.45, 0.2, 0.1, 0.05, 0.05])  # 0: not found
    return np.where(ranks == 0, 0.0, 1.0 / np.maximum(ranks, 1))


def _mix(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    u = rng.random(shape)
    return np.where(u < 0.3, 0.0, np.where(u < 0.8, 1.0, rng.random(shape)))


def _nearly_perfect(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    return np.where(rng.random(shape) < 0.85, 1.0, rng.beta(2, 2, shape))


def _paired(base: Callable[[np.ndarray], np.ndarray], cand: Callable[[np.ndarray], np.ndarray], keep: float) -> Draw:
    """Differences cand − base of two scores driven by one uniform per case (kept with
    probability ``keep``, else redrawn for the candidate): correlated pairs."""

    def draw(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
        u = rng.random(shape)
        v = np.where(rng.random(shape) < keep, u, rng.random(shape))
        out: np.ndarray = cand(v) - base(u)
        return out

    return draw


def _beta_q(a: float, b: float) -> Callable[[np.ndarray], np.ndarray]:
    return lambda u: special.betaincinv(a, b, u)


def _thirds_q(p: float) -> Callable[[np.ndarray], np.ndarray]:
    return lambda u: stats.binom.ppf(u, 3, p) / 3.0


def _equal(n: int) -> np.ndarray:
    return np.arange(n) // CLUSTER_SIZE


def _cycling(n: int) -> np.ndarray:
    """Cluster sizes 1, 2, 4, 8, 12, 1, 2, ... (the last cluster may be cut short)."""
    sizes, out, j = (1, 2, 4, 8, 12), [], 0
    while len(out) < n:
        out += [j] * sizes[j % len(sizes)]
        j += 1
    return np.array(out[:n])


def _one_large(n: int) -> np.ndarray:
    """A quarter of the cases (at least 2) in one cluster, the rest in clusters of 4."""
    big = max(2, n // 4)
    return np.concatenate([np.zeros(big, dtype=int), 1 + np.arange(n - big) // CLUSTER_SIZE])


def _sizes_of(ids: np.ndarray) -> np.ndarray:
    return np.bincount(ids).astype(float)[ids]


def _levelled(layout: Callable[[int], np.ndarray], mean_of_size: Callable[[np.ndarray], np.ndarray]) -> Draw:
    """Cases sharing a cluster level ~ beta with mean mean_of_size(cluster size), then pass/fail
    with that level for half of the cases and a graded value for the rest: correlated within a cluster."""

    def draw(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
        reps, n = shape
        ids = layout(n)
        g = int(ids.max()) + 1
        mean = mean_of_size(np.bincount(ids).astype(float))  # per cluster
        level = rng.beta(5 * mean, 5 * (1 - mean), (reps, g))[:, ids]
        graded = 0.6 * level + 0.4 * rng.random(shape) * 2 * level.clip(0, 0.5)
        passed = (rng.random(shape) < level).astype(float)
        out: np.ndarray = np.where(np.arange(n) % 2 == 0, passed, graded)
        return out

    return draw


def _levelled_truth(
    layout: Callable[[int], np.ndarray], mean_of_size: Callable[[np.ndarray], np.ndarray]
) -> Callable[[int], float]:
    def truth(n: int) -> float:
        ids = layout(n)
        mean = mean_of_size(np.bincount(ids).astype(float))[ids]
        graded = 0.6 * mean + 0.4 * _half_clip_mean(mean)
        return float(np.mean(np.where(np.arange(n) % 2 == 0, mean, graded)))

    return truth


def _half_clip_mean(mean: np.ndarray) -> np.ndarray:
    """E[U · 2 · min(level, 0.5)] = E[min(level, 0.5)] for level ~ beta(5m, 5(1 − m)), U uniform; by quadrature."""
    out = np.empty_like(mean)
    grid = np.linspace(0.0005, 0.9995, 1000)
    for i, m in enumerate(mean):
        w = stats.beta.pdf(grid, 5 * m, 5 * (1 - m))
        out[i] = float(np.sum(w * np.minimum(grid, 0.5)) / np.sum(w))
    return out


def _flat(sizes: np.ndarray) -> np.ndarray:
    return np.full_like(sizes, 0.75)


def _harder_when_bigger(sizes: np.ndarray) -> np.ndarray:
    return np.where(sizes >= 8, 0.45, 0.8)


MRR_TRUTH = 0.45 + 0.2 / 2 + 0.1 / 3 + 0.05 / 4 + 0.05 / 5
BATTERY = (
    Case("mass near 1: beta(8,1)", "mean", lambda r, s: r.beta(8, 1, s), 8 / 9),
    Case("mass near 0: beta(1,8)", "mean", lambda r, s: r.beta(1, 8, s), 1 / 9),
    Case("U-shaped: beta(0.3,0.3)", "mean", lambda r, s: r.beta(0.3, 0.3, s), 0.5),
    Case("steps of 1/3: recall, 3 relevant, p=0.7", "mean", lambda r, s: r.binomial(3, 0.7, s) / 3.0, 0.7),
    Case("0/1 with a graded tail: 30% 0, 50% 1, 20% U(0,1)", "mean", _mix, 0.6),
    Case("nearly perfect: 85% 1, 15% beta(2,2)", "mean", _nearly_perfect, 0.85 + 0.15 * 0.5),
    Case("MRR-like: 1, 1/2, ..., 1/5 or 0", "mean", _mrr, MRR_TRUTH),
    Case(
        "paired shift: beta(8,1) - beta(6,1), correlated",
        "paired",
        _paired(_beta_q(6, 1), _beta_q(8, 1), 0.7),
        8 / 9 - 6 / 7,
    ),
    Case("paired no shift: beta(8,1) twice, correlated", "paired", _paired(_beta_q(8, 1), _beta_q(8, 1), 0.7), 0.0),
    Case("paired no shift: steps of 1/3, correlated", "paired", _paired(_thirds_q(0.7), _thirds_q(0.7), 0.8), 0.0),
    Case("clustered: clusters of 4", "clustered", _levelled(_equal, _flat), _levelled_truth(_equal, _flat), _equal),
    Case(
        "clustered: sizes 1, 2, 4, 8, 12",
        "clustered",
        _levelled(_cycling, _flat),
        _levelled_truth(_cycling, _flat),
        _cycling,
    ),
    Case(
        "clustered: 4s and one cluster of n/4",
        "clustered",
        _levelled(_one_large, _flat),
        _levelled_truth(_one_large, _flat),
        _one_large,
    ),
    Case(
        "clustered, informative: sizes 1-12, 8+ harder",
        "clustered",
        _levelled(_cycling, _harder_when_bigger),
        _levelled_truth(_cycling, _harder_when_bigger),
        _cycling,
    ),
    Case(
        "clustered, informative: one large harder",
        "clustered",
        _levelled(_one_large, _harder_when_bigger),
        _levelled_truth(_one_large, _harder_when_bigger),
        _one_large,
    ),
)


# ------------------------------------------------------------------ methods


def t_interval(x: np.ndarray, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    n = x.shape[1]
    m = x.mean(axis=1)
    half = stats.t.ppf(1 - ALPHA / 2, n - 1) * x.std(axis=1, ddof=1) / math.sqrt(n)
    return np.clip(m - half, lo, hi), np.clip(m + half, lo, hi)


def _cluster_sums(case: Case, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    assert case.layout is not None
    reps, n = x.shape
    ids = case.layout(n)
    g = int(ids.max()) + 1
    sums = np.zeros((reps, g))
    np.add.at(sums, (slice(None), ids), x)
    sizes = np.broadcast_to(np.bincount(ids, minlength=g).astype(float), (reps, g)).copy()
    return sums, sizes


def _units(case: Case, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sums, sizes) of the independent units, on [0, 1] (paired differences shifted)."""
    if case.family == "clustered":
        return _cluster_sums(case, x)
    units = (x + 1) / 2 if case.family == "paired" else x
    return units, np.ones_like(units)


def _back(case: Case, iv: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    return (2 * iv[0] - 1, 2 * iv[1] - 1) if case.family == "paired" else iv


def old_betting(case: Case, x: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The previous interval: betting in a seeded random order, clusters scaled by the largest."""
    sums, sizes = _units(case, x)
    order = np.argsort(rng.random(sums.shape), axis=1)
    sums, sizes = np.take_along_axis(sums, order, 1), np.take_along_axis(sizes, order, 1)
    top = sizes.max(axis=1, keepdims=True)
    return _back(case, betting.betting_bounds(sums / top, sizes / top, ALPHA))


def mixture_interval(case: Case, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The order-free mixture, as `stats.mean_interval` / `paired_mean_diff_interval` compute it."""
    sums, sizes = _units(case, x)
    return _back(case, mixture.mixture_bounds(sums, sizes, ALPHA))


def gaffke_interval(case: Case, x: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Gaffke's bound as `stats` computes it (sorted units), None for clusters of unequal sizes."""
    sums, sizes = _units(case, x)
    if not np.all(sizes == sizes[:, :1]):
        return None
    units = np.sort(sums / sizes, axis=1)
    w = gaffke.gaffke_weights(units.shape[1], seed)
    return _back(case, gaffke.gaffke_bounds(units, np.ones_like(units), ALPHA, weights=w))


def reference_t(case: Case, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if case.family == "clustered":  # the ratio estimator's cluster-robust standard error
        sums, sizes = _cluster_sums(case, x)
        g = sums.shape[1]
        est = sums.sum(axis=1) / sizes.sum(axis=1)
        resid = sums - est[:, None] * sizes
        se = np.sqrt((resid**2).sum(axis=1) * g / (g - 1)) / sizes.sum(axis=1)
        half = stats.t.ppf(1 - ALPHA / 2, g - 1) * se
        return np.clip(est - half, 0.0, 1.0), np.clip(est + half, 0.0, 1.0)
    return t_interval(x, -1.0 if case.family == "paired" else 0.0, 1.0)


# ------------------------------------------------------------------ missing cases at worst


@dataclass(frozen=True)
class MissingCase:
    """A kind of criterion, its values, its truth, and which cases go missing."""

    name: str
    kind: str  # "rate", "mean" or "paired rate"
    draw: Draw  # (reps, n) values: 0/1, [0, 1], or paired differences in {-1, 0, 1}
    truth: float
    hard: Callable[[np.ndarray], np.ndarray]  # which values are the hard ones


MISSING_KINDS = (
    MissingCase("rate p=0.7", "rate", lambda r, s: (r.random(s) < 0.7).astype(float), 0.7, lambda x: x == 0),
    MissingCase("graded: nearly perfect", "mean", _nearly_perfect, 0.85 + 0.15 * 0.5, lambda x: x < 1.0),
    MissingCase("graded: 0/1 with a graded tail", "mean", _mix, 0.6, lambda x: x < 0.5),
    MissingCase(
        "paired rate: p_b=0.05, p_c=0.15",
        "paired rate",
        lambda r, s: np.select([(u := r.random(s)) < 0.05, u < 0.20], [1.0, -1.0], 0.0),
        0.05 - 0.15,
        lambda x: x < 0,
    ),
)
# (name, share missing if hard, share missing otherwise): 10% at random, or the hard cases 10x as likely
MECHANISMS = (("at random, 10%", 0.10, 0.10), ("informative: hard ones", 0.40, 0.04))


def _cp(k: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Clopper–Pearson bounds, vectorised (as `stats.clopper_pearson`)."""
    a = ALPHA / 2
    low = np.where(k > 0, stats.beta.ppf(a, np.maximum(k, 1), n - k + 1), 0.0)
    high = np.where(k < n, stats.beta.ppf(1 - a, k + 1, np.maximum(n - k, 1)), 1.0)
    return low, high


def _graded(x: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """What `stats.mean_interval` prints: the mixture below GAFFKE_FROM cases, Gaffke's bound from there."""
    if x.shape[1] < GAFFKE_FROM:
        return mixture.mixture_bounds(x, np.ones_like(x), ALPHA)
    units = np.sort(x, axis=1)
    return gaffke.gaffke_bounds(units, np.ones_like(units), ALPHA, weights=gaffke.gaffke_weights(units.shape[1], seed))


def _paired(b: np.ndarray, c: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The exact paired interval (`stats.paired_rate_interval`), once per distinct (b, c)."""
    memo: dict[tuple[int, int], tuple[float, float]] = {}
    low, high = np.empty(b.shape), np.empty(b.shape)
    for i, key in enumerate(zip(b.astype(int).tolist(), c.astype(int).tolist(), strict=True)):
        if key not in memo:
            memo[key] = paired_exact.bounds(key[0], key[1], n, ALPHA / 2) if n else (-1.0, 1.0)
        low[i], high[i] = memo[key]
    return low, high


def observed_and_worst(
    case: MissingCase, x: np.ndarray, gone: np.ndarray, seed: int
) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """(the interval over the observed cases alone, the interval over all with each missing one at its worst)."""
    reps, n = x.shape
    m = gone.sum(axis=1)
    if case.kind == "rate":
        k = np.where(gone, 0.0, x).sum(axis=1)
        obs = np.array(
            [_cp(np.array([ki]), n - mi) if n - mi else (np.zeros(1), np.ones(1)) for ki, mi in zip(k, m, strict=True)]
        )
        worst_low, _ = _cp(k, n)
        _, worst_high = _cp(k + m, n)
        return (obs[:, 0, 0], obs[:, 1, 0]), (worst_low, worst_high)
    if case.kind == "paired rate":
        b = ((x == 1) & ~gone).sum(axis=1)
        c = ((x == -1) & ~gone).sum(axis=1)
        lo, hi = np.empty(reps), np.empty(reps)
        for mi in np.unique(m):  # the observed pairs alone: the interval at n − m pairs
            rows = m == mi
            lo[rows], hi[rows] = _paired(b[rows], c[rows], n - int(mi))
        worst_low, _ = _paired(b, c + m, n)  # every missing pair regressed
        _, worst_high = _paired(b + m, c, n)  # every missing pair improved
        return (lo, hi), (worst_low, worst_high)
    lo, hi = np.empty(reps), np.empty(reps)
    for i in range(reps):  # the observed cases alone: rows of different lengths
        kept = x[i, ~gone[i]][None, :]
        if kept.shape[1] < 2:
            lo[i], hi[i] = 0.0, 1.0
        else:
            lo[i], hi[i] = (float(v[0]) for v in _graded(kept, seed))
    worst_low, _ = _graded(np.where(gone, 0.0, x), seed)
    _, worst_high = _graded(np.where(gone, 1.0, x), seed)
    return (lo, hi), (worst_low, worst_high)


def missing_table(reps: int, seed: int, sizes: list[int]) -> None:
    print(
        "\n| criterion | missing | n | missing, mean | observed only: coverage | at worst: coverage | at worst: width |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    worst = dict.fromkeys(("observed only", "at worst"), 1.0)
    for ci, case in enumerate(MISSING_KINDS):
        for mi, (mech, p_hard, p_other) in enumerate(MECHANISMS):
            for n in sizes:
                rng = np.random.default_rng([seed, 7919, ci, mi, n])
                x = case.draw(rng, (reps, n))
                gone = rng.random(x.shape) < np.where(case.hard(x), p_hard, p_other)
                (lo, hi), (wlo, whi) = observed_and_worst(case, x, gone, seed + n)
                cov_obs = float(np.mean((lo <= case.truth) & (case.truth <= hi)))
                cov_worst = float(np.mean((wlo <= case.truth) & (case.truth <= whi)))
                worst["observed only"] = min(worst["observed only"], cov_obs)
                worst["at worst"] = min(worst["at worst"], cov_worst)
                mark = lambda c: f"**{c:.3f}**" if c < 0.94 else f"{c:.3f}"  # noqa: E731
                print(
                    f"| {case.name} | {mech} | {n} | {gone.sum(axis=1).mean():.1f} | {mark(cov_obs)} | "
                    f"{mark(cov_worst)} | {np.median(whi - wlo):.3f} |",
                    flush=True,
                )
    print("\nlowest coverage: " + " · ".join(f"{k} {v:.3f}" for k, v in worst.items()))


# ------------------------------------------------------------------ the table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=500)
    ap.add_argument("--seed", type=int, default=20261201)
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    ap.add_argument("--missing", action="store_true", help="only the table of intervals with missing cases at worst")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.missing:
        t0 = time.perf_counter()
        print(f"seed {args.seed} · {args.reps} replications per cell · 95% intervals · missing cases at worst")
        missing_table(args.reps, args.seed, sizes)
        print(f"{time.perf_counter() - t0:.0f} s")
        return
    print(f"seed {args.seed} · {args.reps} replications per cell · 95% intervals")
    names = ("t", "betting", "mixture", "gaffke")
    print("| distribution | n | units | " + " | ".join(f"{m}: coverage | {m}: width" for m in names) + " | now / t |")
    print("|---|---:|---:|" + "---:|" * (2 * len(names) + 1))
    t0 = time.perf_counter()
    worst = dict.fromkeys((*names, "now"), 1.0)
    for ci, case in enumerate(BATTERY):
        for n in sizes:
            rng = np.random.default_rng([args.seed, ci, n])
            x = case.draw(rng, (args.reps, n))
            truth = case.truth_at(n)
            res = {
                "t": reference_t(case, x),
                "betting": old_betting(case, x, rng),
                "mixture": mixture_interval(case, x),
                "gaffke": gaffke_interval(case, x, args.seed + 1000 * ci + n),
            }
            cov: dict[str, float] = {}
            width: dict[str, float] = {}
            for name, iv in res.items():
                if iv is None:
                    continue
                low, high = iv
                cov[name] = float(np.mean((low <= truth) & (truth <= high)))
                width[name] = float(np.median(high - low))
            units = int(case.layout(n).max()) + 1 if case.layout is not None else n
            now = "gaffke" if units >= GAFFKE_FROM and "gaffke" in cov else "mixture"
            cov["now"], width["now"] = cov[now], width[now]
            for name, c in cov.items():
                worst[name] = min(worst[name], c)
            mark = lambda c: f"**{c:.3f}**" if c < 0.94 else f"{c:.3f}"  # noqa: E731
            cells = " | ".join(f"{mark(cov[m])} | {width[m]:.3f}" if m in cov else "- | -" for m in names)
            ratio = width["now"] / width["t"] if width["t"] > 0 else math.inf
            print(f"| {case.name} | {n} | {units} | {cells} | {ratio:.2f} |", flush=True)
    print("\nlowest coverage: " + " · ".join(f"{k} {v:.3f}" for k, v in worst.items()))
    print(f"{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
