"""Benchmark: coverage and width of the judge-corrected rate (stats/ppi.py), human labels alone, the judge alone.

    python benchmarks/bench_ppi.py [--reps 2000] [--seed 20261202] [--labels 30,60,100,200] [--judged 200,2000]

A seeded simulation. The true (human) pass rate is 0.70 and the judge agrees with people on 85% of
cases; its 15% of errors are split three ways (a fourth row, lenient-95%, has a better judge):

  symmetric — 7.5% false passes, 7.5% false fails: the judge's rate is 0.70 too;
  lenient   — 10.5% false passes, 4.5% false fails: the judge's rate is 0.76;
  strict    — 4.5% false passes, 10.5% false fails: the judge's rate is 0.64.

For each cell, ``reps`` runs of N judged cases are drawn i.i.d. from the (human, judge) cells; the
first n of each run are the labelled ones (the cases are i.i.d., so the first n are distributed as a
uniform random sample of n of the N, which is what `oloproof labels export` draws). Methods, each a
95% interval for the human rate 0.70:

  corrected — what Oloproof reports: Clopper–Pearson of the judge's rate over N at 97.5% plus the
              exact paired interval (Fay & Lumbard 2021) of the rectifier human − judge at 97.5%;
  ppi-clt   — the paper's normal-approximation PPI interval (Angelopoulos et al. 2023), for reference;
  human     — Clopper–Pearson on the n human labels alone;
  judge     — Clopper–Pearson on the judge's N verdicts alone (it estimates the judge's rate, not 0.70).

Coverage is the share of intervals holding 0.70 (Monte Carlo standard error about 0.005 at 2,000
reps); width is the mean width. A corrected cell below 0.95 − 2·SE is flagged with `!`.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
from scipy import special

from pytest_oloproof.stats.ppi import corrected_bounds_rows

TRUTH = 0.70
METHODS = ("corrected", "ppi-clt", "human CP", "judge CP")
#: P(human, judge) over the cells (1,1), (1,0), (0,1), (0,0)
BIASES = {
    "symmetric": (0.625, 0.075, 0.075, 0.225),
    "lenient": (0.655, 0.045, 0.105, 0.195),
    "strict": (0.595, 0.105, 0.045, 0.255),
    # not one of the three asked for: a judge agreeing 95% of the time (3.5% false passes, 1.5% false
    # fails, rate 0.72), to show where the correction starts to beat human labels alone
    "lenient-95%": (0.685, 0.015, 0.035, 0.265),
}


def cp(k: np.ndarray, n: int, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Clopper–Pearson bounds for many k at once (beta quantiles)."""
    k = np.asarray(k, dtype=float)
    low = np.where(k > 0, special.betaincinv(np.maximum(k, 1e-300), n - k + 1, alpha / 2), 0.0)
    high = np.where(k < n, special.betaincinv(k + 1, np.maximum(n - k, 1e-300), 1 - alpha / 2), 1.0)
    return low, high


def cell(
    rng: np.random.Generator, p: tuple[float, ...], judged: int, labels: int, reps: int
) -> dict[str, tuple[float, float]]:
    draws = rng.choice(4, size=(reps, judged), p=p)
    human = (draws <= 1).astype(float)
    judge = ((draws == 0) | (draws == 2)).astype(float)
    rect = human[:, :labels] - judge[:, :labels]
    out: dict[str, tuple[float, float]] = {}

    def score(name: str, low: np.ndarray, high: np.ndarray) -> None:
        out[name] = (float(np.mean((low <= TRUTH) & (TRUTH <= high))), float(np.mean(high - low)))

    score("corrected", *corrected_bounds_rows(judge.sum(axis=1), judged, rect, 0.95))
    z = 1.959963984540054
    theta = judge.mean(axis=1) + rect.mean(axis=1)
    half = z * np.sqrt(judge.var(axis=1, ddof=1) / judged + rect.var(axis=1, ddof=1) / labels)
    score("ppi-clt", np.clip(theta - half, 0, 1), np.clip(theta + half, 0, 1))
    score("human CP", *cp(human[:, :labels].sum(axis=1), labels, 0.05))
    score("judge CP", *cp(judge.sum(axis=1), judged, 0.05))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=20261202)
    ap.add_argument("--labels", default="30,60,100,200")
    ap.add_argument("--judged", default="200,2000")
    args = ap.parse_args()
    labels = [int(x) for x in args.labels.split(",")]
    judged = [int(x) for x in args.judged.split(",")]
    floor = 0.95 - 2 * math.sqrt(0.95 * 0.05 / args.reps)
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    print(f"seed {args.seed} · {args.reps} reps per cell · true rate {TRUTH} · flag `!` below {floor:.3f}\n")
    head = ["judge", "N judged", "n labels"] + [f"{m} {w}" for m in METHODS for w in ("cov", "width")]
    print("| " + " | ".join(head) + " |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, p in BIASES.items():
        for big_n in judged:
            for n in labels:
                if n > big_n:
                    continue
                r = cell(rng, p, big_n, n, args.reps)
                flag = "!" if r["corrected"][0] < floor else ""
                cells = " | ".join(f"{r[m][0]:.3f}{flag if m == 'corrected' else ''} | {r[m][1]:.3f}" for m in r)
                print(f"| {name} | {big_n:,} | {n} | {cells} |", flush=True)
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
