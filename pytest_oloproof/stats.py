"""Confidence intervals for Oloproof aggregates and comparisons (SPEC §7, §10).

Pure functions over numpy/scipy. Every function returns an :class:`Interval`
that names the method used and, when a fallback was needed, says why in
``note``. No function ever returns a zero-width interval as if it were
certainty: degenerate inputs (no data, one value, all values equal) get an
explicit conservative interval instead.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


class _LazyModule:
    """A scipy submodule imported on first use: importing scipy costs about a second, and most
    pytest sessions with the plugin installed never compute an interval."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        module = self.__dict__.get("_module")
        if module is None:
            module = self.__dict__["_module"] = importlib.import_module(self._name)
        return getattr(module, attr)


optimize: Any = _LazyModule("scipy.optimize")
stats: Any = _LazyModule("scipy.stats")

__all__ = [
    "BOOTSTRAP_RESAMPLES",
    "T_INTERVAL_MIN_N",
    "Interval",
    "clopper_pearson",
    "mean_interval",
    "paired_mean_diff_interval",
    "pairs_needed_without_change",
    "rate_interval",
    "round_outward",
    "tango_interval",
    "z_for",
]

#: Number of bootstrap resamples (scipy's default, fixed so results are reproducible).
BOOTSTRAP_RESAMPLES = 9999
#: From this many observations on, means use a t-interval instead of the bootstrap.
T_INTERVAL_MIN_N = 30

# Notes explaining fallbacks (kept as constants so callers and tests can match them).
NOTE_NO_OBSERVATIONS = "no observations"
NOTE_N_LT_2 = "n < 2"
NOTE_ALL_EQUAL = "all values equal"
NOTE_ALL_DIFFS_EQUAL = "all differences equal"
NOTE_FEW_CLUSTERS = "fewer than 2 clusters"
NOTE_BCA_NAN = "BCa undefined (nan); percentile bootstrap used"
NOTE_WIDENED_TO_CP = "widened to the unclustered Clopper-Pearson interval"


@dataclass(frozen=True)
class Interval:
    """A confidence interval with the method that produced it and why, if a fallback."""

    low: float
    high: float
    method: str
    note: str | None = None

    @property
    def width(self) -> float:
        """High minus low."""
        return self.high - self.low


def z_for(confidence: float) -> float:
    """Two-sided standard-normal critical value for ``confidence`` (0.95 -> 1.959964)."""
    _check_confidence(confidence)
    return float(stats.norm.ppf(0.5 + confidence / 2.0))


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")


def _as_array(values: Sequence[float], lo: float, hi: float, what: str) -> np.ndarray:
    """Float array of ``values``, checked to be finite and within [lo, hi]."""
    arr = np.asarray(list(values), dtype=float)
    if arr.ndim != 1:
        raise ValueError(f"{what} must be a flat sequence of numbers")
    if arr.size and (not np.all(np.isfinite(arr)) or arr.min() < lo or arr.max() > hi):
        raise ValueError(f"{what} must be finite numbers in [{lo}, {hi}]")
    return arr


def _cluster_ids(clusters: Sequence[Hashable | None], n: int) -> np.ndarray:
    """Integer cluster index per value; ``None`` entries become singleton clusters."""
    if len(clusters) != n:
        raise ValueError(f"clusters has {len(clusters)} entries for {n} values")
    index: dict[Hashable, int] = {}
    ids = np.empty(n, dtype=int)
    for i, key in enumerate(clusters):
        if key is None:
            ids[i] = len(index)
            index[("__oloproof_singleton__", i)] = ids[i]
        else:
            ids[i] = index.setdefault(key, len(index))
    return ids


def _cluster_totals(values: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-cluster sums of values and per-cluster sizes."""
    g = int(ids.max()) + 1
    return np.bincount(ids, weights=values, minlength=g), np.bincount(ids, minlength=g).astype(float)


def clopper_pearson(k: float, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Clopper–Pearson bounds from beta quantiles; ``k`` may be fractional (k = n·mean).

    For integer ``k`` this equals scipy's ``binomtest(k, n).proportion_ci(method="exact")``;
    the beta form extends it continuously to a non-integer number of "successes".
    """
    _check_confidence(confidence)
    if n <= 0:
        return 0.0, 1.0
    if not 0.0 <= k <= n:
        raise ValueError(f"k must be in [0, n], got k={k!r}, n={n!r}")
    alpha = 1.0 - confidence
    low = 0.0 if k <= 0 else float(stats.beta.ppf(alpha / 2, k, n - k + 1))
    high = 1.0 if k >= n else float(stats.beta.ppf(1 - alpha / 2, k + 1, n - k))
    return low, high


def _exact_rate(k: int, n: int, confidence: float, note: str | None = None) -> Interval:
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=confidence, method="exact")
    return Interval(float(ci.low), float(ci.high), "clopper-pearson", note)


def _ratio(sums: np.ndarray, sizes: np.ndarray, axis: int = -1) -> np.ndarray:
    """Pooled mean of resampled clusters (vectorised statistic for scipy.stats.bootstrap)."""
    ratio: np.ndarray = np.sum(sums, axis=axis) / np.sum(sizes, axis=axis)
    return ratio


def _bootstrap(
    data: tuple[np.ndarray, ...],
    statistic: Callable[..., np.ndarray],
    confidence: float,
    seed: int,
    *,
    paired: bool,
    method: str,
    fallback: str,
    lo: float,
    hi: float,
) -> Interval:
    """Seeded BCa bootstrap; falls back to the percentile method if BCa gives nan."""

    def run(kind: str) -> Any:  # scipy's ConfidenceInterval(low, high)
        return stats.bootstrap(
            data,
            statistic,
            n_resamples=BOOTSTRAP_RESAMPLES,
            paired=paired,
            vectorized=True,
            confidence_level=confidence,
            method=kind,
            rng=np.random.default_rng(seed),
        ).confidence_interval

    with np.errstate(all="ignore"):
        ci = run("BCa")
        note = None
        if not (math.isfinite(ci.low) and math.isfinite(ci.high)):
            ci = run("percentile")
            method, note = fallback, NOTE_BCA_NAN
    return Interval(max(lo, float(ci.low)), min(hi, float(ci.high)), method, note)


def rate_interval(
    values: Sequence[float],
    confidence: float = 0.95,
    *,
    seed: int = 0,
    clusters: Sequence[Hashable | None] | None = None,
) -> Interval:
    """Interval for a pass rate from 0/1 values.

    Without clusters: exact Clopper–Pearson (never anti-conservative). With clusters:
    BCa bootstrap resampling whole clusters (pooled proportion as statistic), because
    cases in one cluster are not independent evidence; the result is never narrower
    than the unclustered Clopper–Pearson interval (a bootstrap over few clusters
    undercovers). If every value is equal the bootstrap would be zero-width, so we fall
    back to Clopper–Pearson with the effective sample size = number of clusters.
    """
    _check_confidence(confidence)
    arr = _as_array(values, 0.0, 1.0, "pass/fail values")
    if arr.size and not np.all((arr == 0.0) | (arr == 1.0)):
        raise ValueError("pass/fail values must be 0 or 1")
    n = int(arr.size)
    if n == 0:
        return Interval(0.0, 1.0, "degenerate", NOTE_NO_OBSERVATIONS)
    k = int(arr.sum())
    if clusters is None:
        return _exact_rate(k, n, confidence)
    ids = _cluster_ids(clusters, n)
    sums, sizes = _cluster_totals(arr, ids)
    g = sums.size
    if g == n:  # every cluster is a singleton: clustering changes nothing
        return _exact_rate(k, n, confidence, "all clusters are singletons")
    if k in (0, n):
        return _exact_rate(k // n * g, g, confidence, f"{NOTE_ALL_EQUAL}; Clopper-Pearson on {g} clusters")
    if g < 2:
        return Interval(0.0, 1.0, "degenerate", NOTE_FEW_CLUSTERS)
    boot = _bootstrap(
        (sums, sizes),
        _ratio,
        confidence,
        seed,
        paired=True,
        method="cluster-bootstrap",
        fallback="cluster-bootstrap",
        lo=0.0,
        hi=1.0,
    )
    exact = _exact_rate(k, n, confidence)
    if boot.low <= exact.low and boot.high >= exact.high:
        return boot
    # Clustering can only add uncertainty: never report less than the exact interval
    # that treats every case as independent (the bootstrap undercovers with few clusters).
    note = "; ".join(x for x in (boot.note, NOTE_WIDENED_TO_CP) if x)
    return Interval(min(boot.low, exact.low), max(boot.high, exact.high), boot.method, note)


def _all_equal_mean(value: float, n_eff: int, confidence: float, note: str) -> Interval:
    """Conservative interval for a [0,1] mean when the sample shows no variation.

    A Bernoulli variable has the largest variance of any [0,1] variable with the same
    mean, so Clopper–Pearson at k = n·mean is a conservative stand-in.
    """
    low, high = clopper_pearson(value * n_eff, n_eff, confidence)
    return Interval(low, high, "clopper-pearson", note)


def mean_interval(
    values: Sequence[float],
    confidence: float = 0.95,
    *,
    seed: int = 0,
    clusters: Sequence[Hashable | None] | None = None,
) -> Interval:
    """Interval for the mean of graded scores in [0, 1].

    n >= 30: t-interval on the standard error, clipped to [0, 1]. 2 <= n < 30: seeded
    BCa bootstrap (percentile if BCa is nan). With clusters: BCa bootstrap over whole
    clusters. Degenerate inputs get [0, 1] (n < 2) or a Clopper–Pearson bound at the
    observed mean (all values equal), never a zero-width interval.
    """
    _check_confidence(confidence)
    arr = _as_array(values, 0.0, 1.0, "scores")
    n = int(arr.size)
    if n == 0:
        return Interval(0.0, 1.0, "degenerate", NOTE_NO_OBSERVATIONS)
    if n == 1:
        return Interval(0.0, 1.0, "degenerate", NOTE_N_LT_2)
    if clusters is not None:
        ids = _cluster_ids(clusters, n)
        sums, sizes = _cluster_totals(arr, ids)
        g = sums.size
        if g < n:
            if np.all(arr == arr[0]):
                return _all_equal_mean(
                    float(arr[0]),
                    g,
                    confidence,
                    f"{NOTE_ALL_EQUAL}; Clopper-Pearson on {g} clusters",
                )
            if g < 2:
                return Interval(0.0, 1.0, "degenerate", NOTE_FEW_CLUSTERS)
            return _bootstrap(
                (sums, sizes),
                _ratio,
                confidence,
                seed,
                paired=True,
                method="cluster-bootstrap",
                fallback="cluster-bootstrap",
                lo=0.0,
                hi=1.0,
            )
    if np.all(arr == arr[0]):
        return _all_equal_mean(float(arr[0]), n, confidence, NOTE_ALL_EQUAL)
    if n >= T_INTERVAL_MIN_N:
        ci = stats.ttest_1samp(arr, 0.0).confidence_interval(confidence_level=confidence)
        return Interval(max(0.0, float(ci.low)), min(1.0, float(ci.high)), "t")
    return _bootstrap(
        (arr,),
        np.mean,
        confidence,
        seed,
        paired=False,
        method="bca-bootstrap",
        fallback="percentile-bootstrap",
        lo=0.0,
        hi=1.0,
    )


def round_outward(low: float, high: float, decimals: int) -> tuple[float, float]:
    """Floor ``low`` and ceil ``high`` at ``decimals`` places, so a printed interval
    never claims more than the data. Float noise (0.75 stored as 0.7500000000000001)
    is snapped to the nearby grid point first, so exact values stay exact."""
    scale = 10.0**decimals

    def snap(x: float) -> float | None:
        v = x * scale
        r = round(v)
        return float(r) if abs(v - r) <= 1e-9 * max(1.0, abs(v)) else None

    lo_s, hi_s = snap(low), snap(high)
    lo = lo_s if lo_s is not None else math.floor(low * scale)
    hi = hi_s if hi_s is not None else math.ceil(high * scale)
    return round(lo / scale, decimals) + 0.0, round(hi / scale, decimals) + 0.0


def _tango_statistic(delta: float, b: int, c: int, n: int) -> float:
    """Tango's score statistic for H0: p_candidate - p_baseline = delta.

    Uses the restricted maximum-likelihood estimate of the baseline-only cell
    probability (Tango 1998; as written in Fagerland, Lydersen & Laake 2013).
    """
    qa = 2.0 * n
    qb = -b - c + (2.0 * n - b + c) * delta
    qc = -c * delta * (1.0 - delta)
    p21 = (math.sqrt(max(qb * qb - 4.0 * qa * qc, 0.0)) - qb) / (2.0 * qa)
    num = b - c - n * delta
    var = n * (2.0 * p21 + delta * (1.0 - delta))
    if var <= 0.0:
        return 0.0 if num == 0 else math.copysign(1e300, num)
    return num / math.sqrt(var)


def tango_interval(b: int, c: int, n: int, confidence: float = 0.95) -> Interval:
    """Tango (1998) score interval for p_candidate - p_baseline from paired pass/fail.

    ``b`` = pairs where only the candidate passes, ``c`` = only the baseline passes,
    ``n`` = all pairs. Unlike Wald or a naive bootstrap it stays wide when no verdict
    changes (b = c = 0 gives ±z²/(n+z²)). Each bound is a root of the score equation.
    """
    _check_confidence(confidence)
    if min(b, c, n) < 0 or b + c > n:
        raise ValueError(f"need 0 <= b, c and b + c <= n, got b={b}, c={c}, n={n}")
    if n == 0:
        return Interval(-1.0, 1.0, "degenerate", NOTE_NO_OBSERVATIONS)
    z = z_for(confidence)
    est = (b - c) / n
    eps = 1e-12

    def f(delta: float, target: float) -> float:
        return _tango_statistic(delta, b, c, n) - target

    low = -1.0 if c == n else optimize.brentq(f, -1.0 + eps, est, args=(z,), xtol=1e-14)
    high = 1.0 if b == n else optimize.brentq(f, est, 1.0 - eps, args=(-z,), xtol=1e-14)
    return Interval(max(-1.0, float(low)), min(1.0, float(high)), "tango")


def paired_mean_diff_interval(diffs: Sequence[float], confidence: float = 0.95, *, seed: int = 0) -> Interval:
    """Interval for the mean of paired differences of [0, 1] scores (values in [-1, 1]).

    n >= 30: paired t-interval. 2 <= n < 30: seeded BCa bootstrap of the mean difference.
    If every difference is equal (typically all zero) both would be zero-width, so we use
    the Tango half-width with no discordant pairs, ±z²/(n+z²), around that difference.
    """
    _check_confidence(confidence)
    arr = _as_array(diffs, -1.0, 1.0, "differences")
    n = int(arr.size)
    if n == 0:
        return Interval(-1.0, 1.0, "degenerate", NOTE_NO_OBSERVATIONS)
    if n == 1:
        return Interval(-1.0, 1.0, "degenerate", NOTE_N_LT_2)
    if np.all(arr == arr[0]):
        half = tango_interval(0, 0, n, confidence).high
        centre = float(arr[0])
        return Interval(
            max(-1.0, centre - half),
            min(1.0, centre + half),
            "tango",
            f"{NOTE_ALL_DIFFS_EQUAL}; Tango bound with no discordant pairs",
        )
    if n >= T_INTERVAL_MIN_N:
        ci = stats.ttest_1samp(arr, 0.0).confidence_interval(confidence_level=confidence)
        return Interval(max(-1.0, float(ci.low)), min(1.0, float(ci.high)), "paired-t")
    return _bootstrap(
        (arr,),
        np.mean,
        confidence,
        seed,
        paired=False,
        method="bca-bootstrap",
        fallback="percentile-bootstrap",
        lo=-1.0,
        hi=1.0,
    )


def pairs_needed_without_change(margin: float, confidence: float = 0.95) -> int:
    """Smallest number of pairs for which the Tango interval with no changed verdict
    (b = c = 0) has half-width z²/(n+z²) below ``margin`` (a proportion, e.g. 0.05)."""
    if not 0.0 < margin < 1.0:
        raise ValueError(f"margin must be in (0, 1), got {margin!r}")
    z2 = z_for(confidence) ** 2
    n = max(1, math.floor(z2 * (1.0 - margin) / margin) + 1)
    while n > 1 and z2 / (n - 1 + z2) < margin:  # guard against float error at the edge
        n -= 1
    while z2 / (n + z2) >= margin:
        n += 1
    return n
