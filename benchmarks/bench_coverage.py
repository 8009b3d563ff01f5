"""Benchmark 4: coverage and width of the graded-metric intervals: before issue 13, betting, Gaffke's bound.

    python benchmarks/bench_coverage.py [--reps 2000] [--seed 20261201] [--sizes 5,8,13,...]

A seeded simulation: for every distribution of the battery and every n, draw ``reps``
samples whose true mean is known, compute each method's 95% interval, and print the
share of intervals that contain the truth (coverage) and the median width. Every
method is vectorised over the replications, so the whole table takes minutes.

Methods:
  before  — what Oloproof used before: BCa bootstrap below 30 values, t-interval from 30
            (paired: the same on the differences; clustered: a BCa bootstrap over whole
            clusters at every n), with its special cases for samples whose values are all
            equal. The bootstrap here uses 2,000 resamples (Oloproof used 9,999; the Monte
            Carlo error this adds is far below the coverage differences measured).
  t       — the plain t-interval (clustered: on the cluster means), the width reference.
  betting — the betting interval of `pytest_oloproof.betting` (Waudby-Smith & Ramdas 2024),
            exactly the function Oloproof calls below 100 independent units. Oloproof first
            puts the values in a seeded random order; the samples here are i.i.d., so their
            drawn order is already random.
  gaffke  — Gaffke's bound, `pytest_oloproof.gaffke`, at every n (Oloproof uses it from 100
            units), with one seeded set of Monte Carlo weights per cell shared by all the
            replications, as one run's seed fixes them; clustered data only when all clusters
            have one size (otherwise "-", and Oloproof keeps the betting interval).
  now     — what Oloproof prints: betting below 100 units, Gaffke from 100 where it applies.

Targets (issue 13): coverage >= 0.94 at 2,000 replications in every cell; median width
within 1.25x the t-interval's at n >= 100.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import special, stats

from pytest_oloproof import betting, gaffke
from pytest_oloproof.stats import GAFFKE_FROM

ALPHA = 0.05
SIZES = (5, 8, 13, 20, 30, 50, 100, 200, 500)
CLUSTER_SIZE = 4
BOOT = 2000


# ------------------------------------------------------------------ the battery

Draw = Callable[[np.random.Generator, tuple[int, int]], np.ndarray]


@dataclass(frozen=True)
class Case:
    """One distribution of the battery: a sampler of (reps, n) values and the true mean."""

    name: str
    family: str  # "mean", "paired" (values are differences in [-1, 1]) or "clustered"
    draw: Draw
    truth: float


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


def _clustered(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    """Cases in clusters of 4 (the last may be smaller) sharing a cluster level ~ beta(5, 1):
    value = 0.6 · level + 0.4 · own uniform, so every case's expected value is 0.7."""
    reps, n = shape
    g = math.ceil(n / CLUSTER_SIZE)
    level = np.repeat(rng.beta(5, 1, (reps, g)), CLUSTER_SIZE, axis=1)[:, :n]
    out: np.ndarray = 0.6 * level + 0.4 * rng.random(shape)
    return out


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
    Case("clustered: clusters of 4, shared level", "clustered", _clustered, 0.7),
)


# ------------------------------------------------------------------ methods


def t_interval(x: np.ndarray, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    n = x.shape[1]
    m = x.mean(axis=1)
    half = stats.t.ppf(1 - ALPHA / 2, n - 1) * x.std(axis=1, ddof=1) / math.sqrt(n)
    return np.clip(m - half, lo, hi), np.clip(m + half, lo, hi)


def bca(
    sums: np.ndarray, sizes: np.ndarray, rng: np.random.Generator, lo: float, hi: float
) -> tuple[np.ndarray, np.ndarray]:
    """BCa bootstrap of the pooled mean sum(sums)/sum(sizes), resampling columns (cases or
    clusters), vectorised over rows; the percentile interval where BCa is undefined."""
    reps, g = sums.shape
    low, high = np.empty(reps), np.empty(reps)
    for start in range(0, reps, 100):
        s, w = sums[start : start + 100], sizes[start : start + 100]
        r = s.shape[0]
        idx = rng.integers(0, g, size=(r, BOOT, g))
        rows = np.arange(r)[:, None, None]
        boot = s[rows, idx].sum(axis=2) / w[rows, idx].sum(axis=2)
        theta = s.sum(axis=1) / w.sum(axis=1)
        jack = (s.sum(axis=1, keepdims=True) - s) / (w.sum(axis=1, keepdims=True) - w)
        d = jack.mean(axis=1, keepdims=True) - jack
        with np.errstate(all="ignore"):
            accel = (d**3).sum(axis=1) / (6.0 * ((d**2).sum(axis=1)) ** 1.5)
            z0 = stats.norm.ppf(np.mean(boot < theta[:, None], axis=1))
            zq = stats.norm.ppf([ALPHA / 2, 1 - ALPHA / 2])
            q = [stats.norm.cdf(z0 + (z0 + z) / (1 - accel * (z0 + z))) for z in zq]
        ok = np.isfinite(q[0]) & np.isfinite(q[1])
        srt = np.sort(boot, axis=1)
        for j, (qq, default) in enumerate(zip(q, (ALPHA / 2, 1 - ALPHA / 2), strict=True)):
            pos = np.where(ok, qq, default) * (BOOT - 1)
            k = np.clip(np.floor(pos).astype(int), 0, BOOT - 2)
            frac = pos - k
            val = srt[np.arange(r), k] * (1 - frac) + srt[np.arange(r), k + 1] * frac
            (low if j == 0 else high)[start : start + r] = val
    return np.clip(low, lo, hi), np.clip(high, lo, hi)


def _cp_at(k: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Clopper–Pearson at a possibly fractional k (today's stand-in for all-equal samples)."""
    with np.errstate(all="ignore"):
        low = np.where(k <= 0, 0.0, stats.beta.ppf(ALPHA / 2, k, n - k + 1))
        high = np.where(k >= n, 1.0, stats.beta.ppf(1 - ALPHA / 2, k + 1, n - k))
    return low, high


def before(case: Case, x: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The intervals Oloproof printed before issue 13, special cases included."""
    n = x.shape[1]
    equal = np.all(x == x[:, :1], axis=1)
    if case.family == "clustered":
        sums, sizes = _cluster_sums(x)
        low, high = bca(sums, sizes, rng, 0.0, 1.0)
        g = sums.shape[1]
        cl, ch = _cp_at(x[:, 0] * g, g)
        return np.where(equal, cl, low), np.where(equal, ch, high)
    lo, hi = (-1.0, 1.0) if case.family == "paired" else (0.0, 1.0)
    if n >= 30:
        low, high = t_interval(x, lo, hi)
    else:
        low, high = bca(x, np.ones_like(x), rng, lo, hi)
    if case.family == "paired":
        z2 = stats.norm.ppf(1 - ALPHA / 2) ** 2
        half = z2 / (n + z2)
        return (
            np.where(equal, np.maximum(-1, x[:, 0] - half), low),
            np.where(equal, np.minimum(1, x[:, 0] + half), high),
        )
    cl, ch = _cp_at(x[:, 0] * n, n)
    return np.where(equal, cl, low), np.where(equal, ch, high)


def _cluster_sums(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    reps, n = x.shape
    g = math.ceil(n / CLUSTER_SIZE)
    ids = np.arange(n) // CLUSTER_SIZE
    sums = np.zeros((reps, g))
    np.add.at(sums, (slice(None), ids), x)
    sizes = np.broadcast_to(np.bincount(ids, minlength=g).astype(float), (reps, g)).copy()
    return sums, sizes


def new(case: Case, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The betting interval, as `stats.mean_interval` / `paired_mean_diff_interval` compute it."""
    if case.family == "clustered":
        sums, sizes = _cluster_sums(x)
        top = sizes.max()
        return betting.betting_bounds(sums / top, sizes / top, ALPHA)
    if case.family == "paired":
        low, high = betting.betting_bounds((x + 1) / 2, np.ones_like(x), ALPHA)
        return 2 * low - 1, 2 * high - 1
    return betting.betting_bounds(x, np.ones_like(x), ALPHA)


def gaffke_interval(case: Case, x: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Gaffke's bound as `stats` computes it, None for clusters of unequal sizes (not applicable)."""
    if case.family == "clustered":
        sums, sizes = _cluster_sums(x)
        if not np.all(sizes == sizes[:, :1]):
            return None
        units = sums / sizes
    else:
        units = (x + 1) / 2 if case.family == "paired" else x
    w = gaffke.gaffke_weights(units.shape[1], seed)
    low, high = gaffke.gaffke_bounds(units, np.ones_like(units), ALPHA, weights=w)
    return (2 * low - 1, 2 * high - 1) if case.family == "paired" else (low, high)


def reference_t(case: Case, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if case.family == "clustered":
        sums, sizes = _cluster_sums(x)
        return t_interval(sums / sizes, 0.0, 1.0)
    return t_interval(x, -1.0 if case.family == "paired" else 0.0, 1.0)


# ------------------------------------------------------------------ the table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=20261201)
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"seed {args.seed} · {args.reps} replications per cell · 95% intervals · bootstrap {BOOT} resamples")
    names = ("before", "t", "betting", "gaffke")
    print(
        "| distribution | n | "
        + " | ".join(f"{m}: coverage | {m}: width" for m in names)
        + " | betting / t | gaffke / t | now / t |"
    )
    print("|---|---:|" + "---:|" * (2 * len(names) + 3))
    t0 = time.perf_counter()
    worst = dict.fromkeys((*names, "now"), 1.0)
    ratios: dict[str, list[tuple[float, str, int]]] = {"betting": [], "now": []}
    for ci, case in enumerate(BATTERY):
        for n in sizes:
            rng = np.random.default_rng([args.seed, ci, n])
            x = case.draw(rng, (args.reps, n))
            res = {
                "before": before(case, x, rng),
                "t": reference_t(case, x),
                "betting": new(case, x),
                "gaffke": gaffke_interval(case, x, args.seed + 1000 * ci + n),
            }
            cov: dict[str, float] = {}
            width: dict[str, float] = {}
            for name, iv in res.items():
                if iv is None:
                    continue
                low, high = iv
                cov[name] = float(np.mean((low <= case.truth) & (case.truth <= high)))
                width[name] = float(np.median(high - low))
            units = math.ceil(n / CLUSTER_SIZE) if case.family == "clustered" else n
            now = "gaffke" if units >= GAFFKE_FROM and "gaffke" in cov else "betting"
            cov["now"], width["now"] = cov[now], width[now]
            for name, c in cov.items():
                worst[name] = min(worst[name], c)

            def ratio(name: str, width: dict[str, float] = width) -> float:
                return width[name] / width["t"] if width["t"] > 0 else math.inf

            if n >= 100:
                for name in ratios:
                    ratios[name].append((ratio(name), case.name, n))
            mark = lambda c: f"**{c:.3f}**" if c < 0.94 else f"{c:.3f}"  # noqa: E731
            cells = " | ".join(f"{mark(cov[m])} | {width[m]:.3f}" if m in cov else "- | -" for m in names)
            gr = f"{ratio('gaffke'):.2f}" if "gaffke" in cov else "-"
            print(f"| {case.name} | {n} | {cells} | {ratio('betting'):.2f} | {gr} | {ratio('now'):.2f} |", flush=True)
    print("\nlowest coverage: " + " · ".join(f"{k} {v:.3f}" for k, v in worst.items()))
    for name, rs in ratios.items():
        if rs:
            print(f"{name} / t median width at n >= 100: {min(rs)[0]:.2f} to {max(rs)[0]:.2f}")
    over = [f"{c} at {n}: {r:.2f}" for r, c, n in ratios["now"] if r > 1.25]
    print(f"now / t above 1.25 at n >= 100 ({len(over)} of {len(ratios['now'])} cells): " + "; ".join(over))
    print(f"{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
