"""Judge-corrected pass rates: prediction-powered inference with a finite-sample interval.

A. N. Angelopoulos, S. Bates, C. Fannjiang, M. I. Jordan and T. Zrnic, "Prediction-powered
inference", Science 382(6671):669–674, 2023. For a pass rate the estimate is

    θ̂ = mean of the judge's verdicts over all N judged cases
       + mean of (human − judge) over n cases labelled by people,

the judge's rate plus the *rectifier*, its average error measured on the labelled cases. It is
unbiased for the human pass rate whatever the judge's bias, provided the labelled cases are a
uniform random sample of the judged ones (so only samples Oloproof drew may correct).

The paper's interval uses the normal approximation. This one does not: it adds two intervals
at α/2 each, the exact Clopper–Pearson interval of the judge's rate over the N cases and the
bounded-mean interval (`intervals.mean_interval`: the betting mixture below 100 labels,
Gaffke's bound from there) of the rectifier shifted from {−1, 0, 1} to {0, ½, 1}. Each holds
with probability ≥ 1 − α/2 for its own expectation (a uniform sample of i.i.d. cases is i.i.d.),
so by the union bound their sum holds ≥ 1 − α for the human rate, without independence between
them; the result is clipped to [0, 1]. `benchmarks/bench_ppi.py` measures its coverage and width.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from . import gaffke, mixture
from .intervals import GAFFKE_FROM, clopper_pearson, mean_interval

METHOD = "ppi-clopper-pearson+bounded-mean"


@dataclass(frozen=True)
class CorrectedRate:
    """A judge-corrected pass rate, its interval, and what it was computed from."""

    value: float  # the corrected rate, clipped to [0, 1]
    low: float
    high: float
    judged: int  # N: cases with an observed judge verdict
    judge_rate: float  # the judge's own rate over the N cases
    labelled: int  # n: labelled cases of the random sample
    rectifier: float  # mean of (human − judge) over the n labels
    confidence: float
    method: str = METHOD
    rectifier_method: str = ""


def _binary(values: Sequence[float], what: str) -> np.ndarray:
    arr = np.asarray(list(values), dtype=float)
    if arr.ndim != 1 or not np.all((arr == 0.0) | (arr == 1.0)):
        raise ValueError(f"{what} must be a flat sequence of 0/1 verdicts")
    return arr


def corrected_rate(
    judge_all: Sequence[float],
    human: Sequence[float],
    judge_labelled: Sequence[float],
    confidence: float = 0.95,
    *,
    seed: int = 0,
) -> CorrectedRate:
    """The corrected rate from the judge's verdicts on all N cases and (human, judge) on the n labelled ones.

    ``human[i]`` and ``judge_labelled[i]`` belong to the same labelled case; every labelled case must be
    among the N. ``seed`` only draws Gaffke's Monte Carlo weights (from 100 labels).
    """
    f = _binary(judge_all, "judge verdicts")
    h = _binary(human, "human labels")
    g = _binary(judge_labelled, "judge verdicts on the labelled cases")
    if h.size != g.size:
        raise ValueError(f"{h.size} human labels for {g.size} judge verdicts on the labelled cases")
    if f.size == 0 or h.size == 0:
        raise ValueError("a corrected rate needs at least one judged case and one labelled case")
    if h.size > f.size:
        raise ValueError(f"{h.size} labelled cases but only {f.size} judged cases: the labels must be a sample of them")
    alpha = 1.0 - confidence
    j_low, j_high = clopper_pearson(int(f.sum()), int(f.size), 1.0 - alpha / 2)
    shifted = mean_interval(list((h - g + 1.0) / 2.0), 1.0 - alpha / 2, seed=seed)
    r_low, r_high = 2.0 * shifted.low - 1.0, 2.0 * shifted.high - 1.0
    judge_rate, rectifier = float(f.mean()), float((h - g).mean())
    return CorrectedRate(
        value=min(1.0, max(0.0, judge_rate + rectifier)),
        low=max(0.0, j_low + r_low),
        high=min(1.0, j_high + r_high),
        judged=int(f.size),
        judge_rate=judge_rate,
        labelled=int(h.size),
        rectifier=rectifier,
        confidence=confidence,
        rectifier_method=shifted.method,
    )


def corrected_bounds_rows(
    judge_passes: np.ndarray,
    judged: int,
    rectifiers: np.ndarray,
    confidence: float = 0.95,
    *,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """`corrected_rate`'s bounds for many samples at once (the benchmark): one row per sample.

    ``judge_passes``: (r,) judge passes among ``judged`` cases; ``rectifiers``: (r, n) values of
    human − judge in {−1, 0, 1}. The same choice of method as `mean_interval` makes for n ≥ 2
    values (the mixture below `GAFFKE_FROM` labels, Gaffke's bound with shared weights from there).
    """
    alpha = 1.0 - confidence
    k = np.asarray(judge_passes, dtype=float)
    j_low = np.array([clopper_pearson(float(x), judged, 1.0 - alpha / 2)[0] for x in k])
    j_high = np.array([clopper_pearson(float(x), judged, 1.0 - alpha / 2)[1] for x in k])
    y = np.sort((np.asarray(rectifiers, dtype=float) + 1.0) / 2.0, axis=1)
    ones = np.ones_like(y)
    n = y.shape[1]
    if n >= GAFFKE_FROM and gaffke.resolves(n, alpha / 2):
        lo, hi = gaffke.gaffke_bounds(y, ones, alpha / 2, seed=seed)
    else:
        lo, hi = mixture.mixture_bounds(y, ones, alpha / 2)
    return np.maximum(0.0, j_low + 2.0 * lo - 1.0), np.minimum(1.0, j_high + 2.0 * hi - 1.0)
