"""Confidence intervals for Oloproof aggregates and comparisons.

Pure functions over numpy/scipy. Pass rates: exact Clopper–Pearson; paired pass/fail: the
exact interval of Fay & Lumbard 2021, compatible with the exact McNemar test (module
`paired_exact`); graded means, paired graded differences and anything clustered: the
order-free betting mixture (module `mixture`; valid at every n by Markov's inequality) below
100 independent units, Gaffke's bound (module `gaffke`) from 100 units of equal size
(conjectured valid at every n; no counterexample known). Every function depends only on the
multiset of its values, never on their order. Every function returns an :class:`Interval`
that names the method used and, when a fallback was needed, says why in
``note``. No function ever returns a zero-width interval as if it were
certainty: degenerate inputs (no data, one value, all values equal) get an
explicit conservative interval instead.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

import numpy as np

from . import gaffke, mixture


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
#: The quantile functions a run needs: `import scipy.special` costs about a third of `import scipy.stats`.
special: Any = _LazyModule("scipy.special")

__all__ = [
    "Interval",
    "clopper_pearson",
    "kappa_interval",
    "mean_interval",
    "mean_pairs_needed_without_change",
    "paired_mean_diff_interval",
    "paired_rate_interval",
    "pairs_needed_without_change",
    "rate_interval",
    "round_outward",
    "tango_interval",
    "z_for",
]

# Notes explaining fallbacks (kept as constants so callers and tests can match them).
NOTE_NO_OBSERVATIONS = "no observations"
NOTE_N_LT_2 = "n < 2"
NOTE_ALL_EQUAL = "all values equal"
NOTE_ALL_DIFFS_EQUAL = "all differences equal"
NOTE_FEW_CLUSTERS = "fewer than 2 clusters"
NOTE_WIDENED_TO_CP = "widened to the unclustered Clopper-Pearson interval"

#: From this many independent units (cases, or clusters of one size) graded means use Gaffke's
#: bound instead of the betting mixture; decided in advance, never from the data's values.
GAFFKE_FROM = 100


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
    return float(special.ndtri(0.5 + confidence / 2.0))  # what scipy.stats.norm.ppf computes


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")


def _is_number(value: object) -> TypeGuard[int | float | np.integer[Any] | np.floating[Any]]:
    """Whether ``value`` is a real number (a bool, a numpy bool or a string is not)."""
    return not isinstance(value, (bool, np.bool_)) and isinstance(value, (int, float, np.integer, np.floating))


def _as_array(values: Sequence[float], lo: float, hi: float, what: str) -> np.ndarray:
    """Float array of ``values``, checked to be real numbers (not strings, not booleans), finite and within [lo, hi]."""
    if isinstance(values, (str, bytes)):
        raise ValueError(f"{what} must be a sequence of numbers, got the string {values!r}; pass a list of floats")
    items = list(values)
    for i, v in enumerate(items):
        if not _is_number(v):
            raise ValueError(
                f"{what}[{i}] is {v!r} ({type(v).__name__}), not a number; pass floats in [{lo}, {hi}]"
                + (" (True/False: use 1.0/0.0)" if isinstance(v, (bool, np.bool_)) else "")
            )
    arr = np.asarray(items, dtype=float)
    if arr.ndim != 1:
        raise ValueError(f"{what} must be a flat sequence of numbers")
    bad = np.flatnonzero(~np.isfinite(arr) | (arr < lo) | (arr > hi)) if arr.size else np.empty(0, dtype=int)
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"{what}[{i}] is {items[i]!r}; {what} must be finite numbers in [{lo}, {hi}]")
    return arr


def _check_count(value: object, name: str) -> int:
    """``value`` as a non-negative whole count: NaN, fractions, booleans and strings are refused."""
    if not _is_number(value):
        raise ValueError(f"{name} must be a whole number of cases, got {value!r} ({type(value).__name__})")
    if not math.isfinite(float(value)) or float(value) != int(value) or value < 0:
        raise ValueError(f"{name} must be a non-negative whole number of cases, got {value!r}; pass an int")
    return int(value)


def _cluster_ids(clusters: Sequence[Hashable | None], n: int) -> np.ndarray:
    """Integer cluster index per value; ``None`` entries become singleton clusters."""
    if len(clusters) != n:
        raise ValueError(f"clusters has {len(clusters)} entries for {n} values")
    index: dict[Hashable, int] = {}
    ids = np.empty(n, dtype=int)
    for i, key in enumerate(clusters):
        if isinstance(key, float) and math.isnan(key):
            raise ValueError(
                f"clusters[{i}] is NaN: NaN is never equal to itself, so it cannot name a cluster; "
                "use None for a case without a cluster, or a string"
            )
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

    For integer ``k`` this equals scipy's ``binomtest(k, n).proportion_ci(method="exact")`` (which
    finds the same bounds by root-finding, to within 2e-12); the beta form extends it continuously
    to a non-integer number of "successes". ``betaincinv`` is what ``scipy.stats.beta.ppf`` calls.
    """
    _check_confidence(confidence)
    n = _check_count(n, "n")
    if not _is_number(k):
        raise ValueError(f"k must be a number of successes, got {k!r} ({type(k).__name__}); pass an int or a float")
    if not math.isfinite(float(k)):
        raise ValueError(f"k must be a number of successes in [0, n], got {k!r}")
    if n == 0:
        return 0.0, 1.0
    if not 0.0 <= k <= n:
        raise ValueError(f"k must be in [0, n], got k={k!r}, n={n!r}")
    alpha = 1.0 - confidence
    low = 0.0 if k <= 0 else float(special.betaincinv(k, n - k + 1, alpha / 2))
    high = 1.0 if k >= n else float(special.betaincinv(k + 1, n - k, 1 - alpha / 2))
    return low, high


def _exact_rate(k: int, n: int, confidence: float, note: str | None = None) -> Interval:
    low, high = clopper_pearson(k, n, confidence)
    return Interval(low, high, "clopper-pearson", note)


def rate_interval(
    values: Sequence[float],
    confidence: float = 0.95,
    *,
    seed: int = 0,
    clusters: Sequence[Hashable | None] | None = None,
) -> Interval:
    """Interval for a pass rate from 0/1 values.

    Without clusters: exact Clopper–Pearson (never anti-conservative). With clusters:
    the mixture over whole clusters (as for graded means; valid at every number
    of clusters, so 3 clusters give a wide interval), never narrower than the unclustered
    Clopper–Pearson interval (clustering can only add uncertainty).
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
    g = int(ids.max()) + 1
    if g == n:  # every cluster is a singleton: clustering changes nothing
        return _exact_rate(k, n, confidence, "all clusters are singletons")
    if g < 2:
        return Interval(0.0, 1.0, "degenerate", NOTE_FEW_CLUSTERS)
    low, high, how = _bounded_mean(arr, confidence, seed, ids)
    exact = _exact_rate(k, n, confidence)
    note = _join(NOTE_ALL_EQUAL if k in (0, n) else None, f"{g} clusters")
    if low <= exact.low and high >= exact.high:
        return Interval(low, high, "cluster-" + how, note)
    return Interval(min(low, exact.low), max(high, exact.high), "cluster-" + how, _join(note, NOTE_WIDENED_TO_CP))


def _bounded_mean(
    values: np.ndarray,
    confidence: float,
    seed: int,
    ids: np.ndarray | None = None,
) -> tuple[float, float, str]:
    """Bounds for the mean of ``values`` in [0, 1], clusters optional, and the method's name.

    From `GAFFKE_FROM` independent units of one size (cases, or clusters that all have the
    same number of cases): Gaffke's bound (`gaffke`), Monte Carlo weights from the run's seed
    applied to the units in sorted order (so the order of the cases changes nothing; sorting
    keeps the bound monotone in every value), a closed form for all values equal or all 0/1,
    unless the draws affordable at that many units cannot read the tail at this confidence
    (`gaffke.resolves`; e.g. 99% from 1,000 units). Otherwise the order-free betting mixture
    (`mixture`), which has no seed at all.
    """
    if ids is None:
        sums, sizes = values, np.ones_like(values)
    else:
        sums, sizes = _cluster_totals(values, ids)
    top = float(sizes.max())
    alpha = 1.0 - confidence
    units, ones = np.sort(sums / top)[None, :], np.ones((1, sums.size))
    if (
        sums.size >= GAFFKE_FROM
        and np.all(sizes == top)
        and (gaffke.resolves(sums.size, alpha) or bool(gaffke.exact_rows(units, ones)[0]))
    ):
        low, high = gaffke.gaffke_bounds(units, ones, alpha, seed=seed)
        return float(low[0]), float(high[0]), "gaffke"
    low, high = mixture.mixture_bounds(sums[None, :], sizes[None, :], alpha)
    return float(low[0]), float(high[0]), "mixture"


def mean_interval(
    values: Sequence[float],
    confidence: float = 0.95,
    *,
    seed: int = 0,
    clusters: Sequence[Hashable | None] | None = None,
) -> Interval:
    """Interval for the mean of graded scores in [0, 1], valid at every n (from `GAFFKE_FROM` units: conjectured).

    Below `GAFFKE_FROM` independent units, the order-free betting mixture
    (`pytest_oloproof.stats.mixture`); from there, Gaffke's bound (`pytest_oloproof.stats.gaffke`), about as
    narrow as the t-interval where the CLT holds. Neither uses the CLT or bootstrap
    asymptotics, only the bounds [0, 1], and neither depends on the order of the values
    (``seed`` only draws Gaffke's Monte Carlo weights). With clusters the units are whole
    clusters (Gaffke's bound only when all clusters have one size), so a handful of clusters
    gives a wide interval. All values equal is no special case (the interval stays wide at
    small n); n < 2 gives [0, 1].
    """
    _check_confidence(confidence)
    arr = _as_array(values, 0.0, 1.0, "scores")
    n = int(arr.size)
    if n == 0:
        return Interval(0.0, 1.0, "degenerate", NOTE_NO_OBSERVATIONS)
    if n == 1:
        return Interval(0.0, 1.0, "degenerate", NOTE_N_LT_2)
    note = NOTE_ALL_EQUAL if np.all(arr == arr[0]) else None
    if clusters is not None:
        ids = _cluster_ids(clusters, n)
        g = int(ids.max()) + 1
        if g < n:
            if g < 2:
                return Interval(0.0, 1.0, "degenerate", NOTE_FEW_CLUSTERS)
            low, high, how = _bounded_mean(arr, confidence, seed, ids)
            return Interval(low, high, "cluster-" + how, _join(note, f"{g} clusters"))
    low, high, how = _bounded_mean(arr, confidence, seed)
    return Interval(low, high, how, note)


def _join(*notes: str | None) -> str | None:
    return "; ".join(x for x in notes if x) or None


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

    Not used by comparisons (it covers as little as 0.838 at 13 pairs by exact sums; see
    `paired_rate_interval`); kept as the reference the paired-rate benchmark measures against.

    ``b`` = pairs where only the candidate passes, ``c`` = only the baseline passes,
    ``n`` = all pairs. Unlike Wald or a naive bootstrap it stays wide when no verdict
    changes (b = c = 0 gives ±z²/(n+z²)). Each bound is a root of the score equation.
    """
    _check_confidence(confidence)
    b, c, n = _check_count(b, "b"), _check_count(c, "c"), _check_count(n, "n")
    if b + c > n:
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


def paired_mean_diff_interval(
    diffs: Sequence[float],
    confidence: float = 0.95,
    *,
    seed: int = 0,
    clusters: Sequence[Hashable | None] | None = None,
) -> Interval:
    """Interval for the mean of paired differences of [0, 1] scores (values in [-1, 1]).

    The interval of a single-run mean (the mixture, or Gaffke's from 100 pairs) on (d + 1) / 2,
    which lies in [0, 1], mapped back: valid at every n (Gaffke's: conjectured), and wide when
    nothing changed (13 zero differences give ±0.335, printed ±33.6 points), never the
    zero-width interval of a paired t or a bootstrap.
    """
    _check_confidence(confidence)
    arr = _as_array(diffs, -1.0, 1.0, "differences")
    n = int(arr.size)
    if n == 0:
        return Interval(-1.0, 1.0, "degenerate", NOTE_NO_OBSERVATIONS)
    if n == 1:
        return Interval(-1.0, 1.0, "degenerate", NOTE_N_LT_2)
    iv = mean_interval(((arr + 1.0) / 2.0).tolist(), confidence, seed=seed, clusters=clusters)
    note = NOTE_ALL_DIFFS_EQUAL if np.all(arr == arr[0]) else None
    if iv.method == "degenerate":
        return Interval(-1.0, 1.0, "degenerate", iv.note)
    method = "paired-" + iv.method
    if iv.note:  # the shifted values' "all values equal" is already said as "all differences equal"
        note = _join(note, *(x for x in iv.note.split("; ") if x != NOTE_ALL_EQUAL))
    return Interval(max(-1.0, 2.0 * iv.low - 1.0), min(1.0, 2.0 * iv.high - 1.0), method, note)


def mean_pairs_needed_without_change(margin: float, confidence: float = 0.95) -> int:
    """Smallest number of pairs whose paired interval (`paired_mean_diff_interval`), with every
    difference 0, has a lower bound above −``margin`` (a proportion): below it, even an unchanged
    graded criterion cannot pass a non-inferiority or equivalence test at that margin.

    All differences equal need no Monte Carlo (the mixture, or Gaffke's closed form), so the
    seed does not matter; the lower bound rises with n, so a doubling then bisection search
    finds the smallest n.
    """
    if not 0.0 < margin < 1.0:
        raise ValueError(f"margin must be in (0, 1), got {margin!r}")

    def passes(n: int) -> bool:
        return n >= 2 and paired_mean_diff_interval(np.zeros(n).tolist(), confidence).low > -margin

    hi = 2
    while not passes(hi):
        hi *= 2
    lo = hi // 2  # fails (or is 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if passes(mid) else (mid, hi)
    return hi


def paired_rate_interval(b: int, c: int, n: int, confidence: float = 0.95) -> Interval:
    """Exact interval for p_candidate − p_baseline from paired pass/fail (Fay & Lumbard 2021).

    ``b`` = pairs where only the candidate passes, ``c`` = only the baseline passes, ``n`` =
    all pairs; bounds are fractions in [−1, 1]. Compatible with the exact McNemar test (it
    excludes 0 exactly when that test rejects) and measured to cover ≥ 95% in every cell by
    exact sums (`pytest_oloproof.stats.paired_exact`). No changed verdict in 13 pairs gives ±0.247.
    """
    _check_confidence(confidence)
    b, c, n = _check_count(b, "b"), _check_count(c, "c"), _check_count(n, "n")
    if b + c > n:
        raise ValueError(
            f"b + c must be at most n (b: only the candidate passes, c: only the baseline passes, n: all pairs), "
            f"got b={b}, c={c}, n={n}"
        )
    if n == 0:
        return Interval(-1.0, 1.0, "degenerate", NOTE_NO_OBSERVATIONS)
    from . import paired_exact  # imported on first use: it imports scipy

    low, high = paired_exact.bounds(b, c, n, (1.0 - confidence) / 2.0)
    return Interval(max(-1.0, low), min(1.0, high), "exact-mcnemar")


def pairs_needed_without_change(margin: float, confidence: float = 0.95) -> int:
    """Smallest number of pairs for which the exact paired interval with no changed verdict
    (b = c = 0, bounds ±(1 − (α/2)^(1/n))) has a lower bound above −``margin`` (a proportion, e.g. 0.05)."""
    if not 0.0 < margin < 1.0:
        raise ValueError(f"margin must be in (0, 1), got {margin!r}")
    _check_confidence(confidence)
    each = (1.0 - confidence) / 2.0
    n = max(1, math.floor(math.log(each) / math.log1p(-margin)))
    while n > 1 and -math.expm1(math.log(each) / (n - 1)) < margin:  # guard against float error at the edge
        n -= 1
    while -math.expm1(math.log(each) / n) >= margin:
        n += 1
    return n


def kappa_interval(
    agree: int, first_pass: int, second_pass: int, n: int, confidence: float = 0.95, *, cells: int = 100
) -> Interval:
    """Interval for Cohen's kappa of two pass/fail raters on ``n`` items, valid at every n.

    Kappa = 1 − (1 − p_o) / (1 − p_e), with p_e = a·b + (1 − a)(1 − b), is a function of three
    proportions: the agreement p_o and each rater's pass rate a, b. Each gets a Clopper–Pearson
    interval at level 1 − α/3, so all three hold at once with probability at least 1 − α
    (Bonferroni); the interval is the range of kappa over that box, restricted to the
    proportions a 2×2 table can have (|a + b − 1| ≤ p_o ≤ 1 − |a − b|). The range is bounded
    rigorously cell by cell on a ``cells``×``cells`` grid of (a, b): in each cell the least
    and largest feasible p_o and 1 − p_e (bilinear, so extreme at the cell's corners) give
    bounds that hold for every point of the cell, so the result can only be wider than the
    exact range, never narrower. Conservative, never zero-width: 5 agreements out of 5
    give about [−0.47, 1].
    """
    _check_confidence(confidence)
    agree, first_pass = _check_count(agree, "agree"), _check_count(first_pass, "first_pass")
    second_pass, n = _check_count(second_pass, "second_pass"), _check_count(n, "n")
    if n == 0:
        return Interval(-1.0, 1.0, "degenerate", NOTE_NO_OBSERVATIONS)
    if not (agree <= n and first_pass <= n and second_pass <= n):
        raise ValueError(f"counts must be in [0, n], got {agree}, {first_pass}, {second_pass} of {n}")
    if (agree - n + first_pass + second_pass) % 2 or not (
        abs(first_pass + second_pass - n) <= agree <= n - abs(first_pass - second_pass)
    ):
        raise ValueError(
            f"no 2x2 table has {agree} agreements of {n} items with {first_pass} and {second_pass} passes: "
            f"agreements must lie in [{abs(first_pass + second_pass - n)}, {n - abs(first_pass - second_pass)}] "
            f"and have the parity of n − first_pass − second_pass; "
            "check that the counts come from the same items"
        )
    each = 1.0 - (1.0 - confidence) / 3.0
    o_low, o_high = clopper_pearson(agree, n, each)
    a_edges = np.linspace(*clopper_pearson(first_pass, n, each), cells + 1)
    b_edges = np.linspace(*clopper_pearson(second_pass, n, each), cells + 1)
    a0, b0 = np.meshgrid(a_edges[:-1], b_edges[:-1], indexing="ij")
    a1, b1 = np.meshgrid(a_edges[1:], b_edges[1:], indexing="ij")
    corners = [(a0, b0), (a0, b1), (a1, b0), (a1, b1)]
    disagree_chance = np.stack([x + y - 2 * x * y for x, y in corners])  # 1 − p_e
    total = np.stack([x + y - 1 for x, y in corners])
    gap = np.stack([x - y for x, y in corners])

    def least_abs(v: np.ndarray) -> np.ndarray:  # min of |v| over a cell (0 where v changes sign)
        out: np.ndarray = np.where((v.min(axis=0) <= 0) & (v.max(axis=0) >= 0), 0.0, np.abs(v).min(axis=0))
        return out

    p_min = np.maximum(o_low, least_abs(total))  # least agreement a table in the cell can have
    p_max = np.minimum(o_high, 1.0 - least_abs(gap))  # and the most
    feasible = p_min <= p_max  # the observed proportions' cell always is
    den_low, den_high = disagree_chance.min(axis=0), disagree_chance.max(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        low = np.where(den_low > 0, 1.0 - (1.0 - p_min) / den_low, -1.0)
        high = np.where(p_max >= 1.0, 1.0, np.where(den_high > 0, 1.0 - (1.0 - p_max) / den_high, 1.0))
    low, high = np.clip(low, -1.0, 1.0), np.clip(high, -1.0, 1.0)
    return Interval(float(low[feasible].min()), float(high[feasible].max()), "bonferroni-clopper-pearson")
