"""Exact coverage of the paired pass-rate interval (Tango's score interval) a comparison prints.

    python benchmarks/bench_tango.py [--sizes 5,8,13,20,30,50,100] [--step 0.05] [--confidence 0.95]

Tango's interval is asymptotic, so its coverage at small n is a property to measure, not
to assume. It needs no simulation: for n pairs with probabilities p_b (only the
candidate passes) and p_c (only the baseline passes), every outcome (b, c, n - b - c) is
enumerated with its multinomial probability, and the coverage of the true difference
p_b - p_c is summed exactly. Prints, per n, the lowest coverage over the grid of
(p_b, p_c) with p_b + p_c <= 1 and where it occurs, the lowest where at most 30% of the
pairs are discordant (p_b + p_c <= 0.3, where most comparisons of two versions of a system
live), and the mean coverage over the grid.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np
from scipy.stats import multinomial

sys.path.insert(0, str(Path(__file__).parent.parent))
from pytest_oloproof.stats import Interval, tango_interval


def coverage(n: int, pb: float, pc: float, bounds: dict[tuple[int, int], Interval]) -> float:
    """P(low <= pb - pc <= high) over every outcome of n pairs, exactly."""
    total = 0.0
    truth = pb - pc
    for b in range(n + 1):
        for c in range(n + 1 - b):
            iv = bounds[(b, c)]
            if iv.low - 1e-12 <= truth <= iv.high + 1e-12:
                total += float(multinomial.pmf([b, c, n - b - c], n, [pb, pc, max(0.0, 1 - pb - pc)]))
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="5,8,13,20,30,50,100")
    ap.add_argument("--step", type=float, default=0.05)
    ap.add_argument("--confidence", type=float, default=0.95)
    args = ap.parse_args()
    grid = [round(x, 10) for x in np.arange(0.0, 1.0 + 1e-9, args.step)]
    print(f"Tango's interval, confidence {args.confidence}, grid step {args.step} (p_b, p_c, p_b + p_c <= 1)")
    print("| n | lowest coverage | at (p_b, p_c) | lowest, p_b + p_c <= 0.3 | at | mean over the grid | cells below |")
    print("|---:|---:|---|---:|---|---:|---:|")
    for n in (int(x) for x in args.sizes.split(",")):
        # every outcome's interval, computed once for all the grid's cells
        bounds = {(b, c): tango_interval(b, c, n, args.confidence) for b in range(n + 1) for c in range(n + 1 - b)}
        cells = [(coverage(n, pb, pc, bounds), pb, pc) for pb in grid for pc in grid if pb + pc <= 1 + 1e-9]
        low = min(cells)
        few = min(cell for cell in cells if cell[1] + cell[2] <= 0.3 + 1e-9)
        below = sum(1 for cov, _, _ in cells if cov < args.confidence)
        mean = statistics.fmean(cov for cov, _, _ in cells)
        print(
            f"| {n} | {low[0]:.4f} | ({low[1]:.2f}, {low[2]:.2f}) | {few[0]:.4f} | ({few[1]:.2f}, {few[2]:.2f}) "
            f"| {mean:.4f} | {below} of {len(cells)} |"
        )


if __name__ == "__main__":
    main()
