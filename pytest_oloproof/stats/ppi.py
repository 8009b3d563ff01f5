"""Judge-corrected pass rates: prediction-powered inference with a finite-sample interval.

A. N. Angelopoulos, S. Bates, C. Fannjiang, M. I. Jordan and T. Zrnic, "Prediction-powered
inference", Science 382(6671):669–674, 2023. For a pass rate the estimate is

    θ̂ = mean of the judge's verdicts over all N judged cases
       + mean of (human − judge) over n cases labelled by people,

the judge's rate plus the *rectifier*, its average error measured on the labelled cases. It is
unbiased for the human pass rate whatever the judge's bias, provided the labelled cases are a
uniform random sample of the judged ones (so only samples Oloproof drew may correct).

The paper's interval uses the normal approximation. This one does not: it adds two intervals at
α/2 each, the exact Clopper–Pearson interval of the judge's rate over the N cases and the exact
interval of the rectifier. The rectifier's mean over the labelled pairs (human, judge) is
P(human passes, judge fails) − P(judge passes, human fails): a difference of paired proportions,
whose exact interval compatible with McNemar's test (Fay & Lumbard 2021, `intervals.paired_rate_interval`)
the comparisons already use; at 30–200 labels it is narrower than a bounded-mean interval on
(rectifier + 1)/2 (the betting mixture was 0.53 wide where it is 0.40 at 30 labels). Each interval
holds with probability ≥ 1 − α/2 for its own expectation (a uniform sample of i.i.d. cases is
i.i.d.), so by the union bound their sum holds ≥ 1 − α for the human rate, without independence
between them; the result is clipped to [0, 1]. `benchmarks/bench_ppi.py` measures coverage and width.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .intervals import clopper_pearson, paired_rate_interval

METHOD = "ppi: clopper-pearson + exact-mcnemar at alpha/2 each"


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
) -> CorrectedRate:
    """The corrected rate from the judge's verdicts on all N cases and (human, judge) on the n labelled ones.

    ``human[i]`` and ``judge_labelled[i]`` belong to the same labelled case; every labelled case must be
    among the N. Nothing random: the interval depends only on the counts.
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
    r_low, r_high = _rectifier_bounds(int(np.sum(h > g)), int(np.sum(h < g)), int(h.size), alpha)
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
    )


def _rectifier_bounds(human_only: int, judge_only: int, n: int, alpha: float) -> tuple[float, float]:
    """The (1 − α/2) exact paired interval of human − judge: `human_only` pairs the people pass and the judge
    fails, `judge_only` the reverse, of `n` labelled pairs."""
    iv = paired_rate_interval(human_only, judge_only, n, 1.0 - alpha / 2)
    return iv.low, iv.high


def corrected_bounds_rows(
    judge_passes: np.ndarray, judged: int, rectifiers: np.ndarray, confidence: float = 0.95
) -> tuple[np.ndarray, np.ndarray]:
    """`corrected_rate`'s bounds for many samples at once (the benchmark): one row per sample.

    ``judge_passes``: (r,) judge passes among ``judged`` cases; ``rectifiers``: (r, n) values of
    human − judge in {−1, 0, 1}. Each distinct count is computed once.
    """
    alpha = 1.0 - confidence
    r = np.asarray(rectifiers)
    n = r.shape[1]
    judge_cp = {k: clopper_pearson(k, judged, 1.0 - alpha / 2) for k in {int(x) for x in judge_passes}}
    counts = list(zip((r > 0).sum(axis=1).tolist(), (r < 0).sum(axis=1).tolist(), strict=True))
    rect = {bc: _rectifier_bounds(bc[0], bc[1], n, alpha) for bc in set(counts)}
    low = np.array([judge_cp[int(k)][0] + rect[bc][0] for k, bc in zip(judge_passes, counts, strict=True)])
    high = np.array([judge_cp[int(k)][1] + rect[bc][1] for k, bc in zip(judge_passes, counts, strict=True)])
    return np.maximum(0.0, low), np.minimum(1.0, high)
