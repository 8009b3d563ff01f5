"""Exact coverage and width of the paired pass-rate intervals: Tango's score interval and the exact one.

    python benchmarks/bench_tango.py [--sizes 5,8,13,20,30,50,100] [--step 0.01] [--confidence 0.95]

A comparison's pass/fail difference p_b − p_c (p_b: only the candidate passes, p_c: only the
baseline passes) needs no simulation: for n pairs every outcome (b, c, n − b − c) is
enumerated with its multinomial probability and the coverage of the true difference is
summed exactly, on a grid of (p_b, p_c) with p_b + p_c ≤ 1. Methods:

  tango — Tango's asymptotic score interval (`stats.tango_interval`), which comparisons used before;
  exact — the interval of Fay & Lumbard 2021 compatible with the exact McNemar test
          (`stats.paired_rate_interval`), which comparisons use now.

Prints, per n and method: the lowest coverage over the grid and where, the mean coverage,
how many cells fall below the confidence, the mean over the grid of the expected width, and
the half-width with no discordant pair. About a minute at the defaults (the exact interval
is computed once per outcome, 5,151 of them at n = 100).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from scipy import special

sys.path.insert(0, str(Path(__file__).parent.parent))
from pytest_oloproof.stats.intervals import Interval, paired_rate_interval, tango_interval

METHODS: dict[str, Callable[[int, int, int, float], Interval]] = {
    "tango": tango_interval,
    "exact": paired_rate_interval,
}


def grid_cells(step: float) -> np.ndarray:
    """(p_b, p_c) on the grid, p_b + p_c ≤ 1: 5,151 cells at step 0.01."""
    grid = np.round(np.arange(0.0, 1.0 + 1e-9, step), 10)
    return np.array([(pb, pc) for pb in grid for pc in grid if pb + pc <= 1 + 1e-9])


def coverage_and_width(n: int, bounds: dict[tuple[int, int], Interval], cells: np.ndarray) -> tuple[np.ndarray, ...]:
    """Exact coverage and expected width for every cell, from every outcome's interval."""
    tables = list(bounds)
    b = np.array([t[0] for t in tables], dtype=float)
    c = np.array([t[1] for t in tables], dtype=float)
    low = np.array([bounds[t].low for t in tables])
    high = np.array([bounds[t].high for t in tables])
    log_coef = special.gammaln(n + 1) - special.gammaln(b + 1) - special.gammaln(c + 1) - special.gammaln(n - b - c + 1)
    cover, width = np.empty(len(cells)), np.empty(len(cells))
    for start in range(0, len(cells), 256):
        pb, pc = cells[start : start + 256, :1], cells[start : start + 256, 1:]
        pa = np.clip(1.0 - pb - pc, 0.0, 1.0)
        prob = np.exp(log_coef + special.xlogy(b, pb) + special.xlogy(c, pc) + special.xlogy(n - b - c, pa))
        truth = pb - pc
        inside = (low - 1e-12 <= truth) & (truth <= high + 1e-12)
        cover[start : start + 256] = (prob * inside).sum(axis=1)
        width[start : start + 256] = (prob * (high - low)).sum(axis=1)
    return cover, width


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="5,8,13,20,30,50,100")
    ap.add_argument("--step", type=float, default=0.01)
    ap.add_argument("--confidence", type=float, default=0.95)
    args = ap.parse_args()
    cells = grid_cells(args.step)
    print(f"Paired pass-rate intervals, confidence {args.confidence}, exact sums on a {args.step} grid of (p_b, p_c)")
    print(
        "| n | method | lowest coverage | at (p_b, p_c) | mean coverage | cells below | mean width | ± with b = c = 0 |"
    )
    print("|---:|---|---:|---|---:|---:|---:|---:|")
    started = time.perf_counter()
    for n in (int(x) for x in args.sizes.split(",")):
        for name, method in METHODS.items():
            bounds = {(b, c): method(b, c, n, args.confidence) for b in range(n + 1) for c in range(n + 1 - b)}
            cover, width = coverage_and_width(n, bounds, cells)
            i = int(np.argmin(cover))
            below = int(np.sum(cover < args.confidence))
            print(
                f"| {n} | {name} | {cover[i]:.4f} | ({cells[i, 0]:.2f}, {cells[i, 1]:.2f}) | {cover.mean():.4f} "
                f"| {below} of {len(cells)} | {width.mean():.4f} | {100 * bounds[(0, 0)].high:.1f} |",
                flush=True,
            )
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
