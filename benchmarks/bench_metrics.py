"""Benchmark 3: metrics and intervals over 100,000 cases against a pure-numpy floor (target <= 3x).

    python benchmarks/bench_metrics.py [--cases 100000]

Both sides start from the same per-case records (dicts as stored in cases.jsonl)
and compute, per criterion, the observed/missing/excluded accounting, the
estimate and its interval: Clopper-Pearson (scipy.stats.beta) for the two pass
rates, and for the graded mean the interval Oloproof uses at that n (from 100 cases
Gaffke's bound, `pytest_oloproof.stats.gaffke`, called directly on a numpy array with the
run's seed, on the sorted values; below, the betting mixture). The time of a
t-interval floor (the method before issue 13) is printed too, to show what the
interval itself costs.
"""

from __future__ import annotations

import argparse
import random
import time

import numpy as np
from scipy import stats

from pytest_oloproof.stats import gaffke, mixture
from pytest_oloproof.stats.aggregate import compute_metrics
from pytest_oloproof.stats.intervals import GAFFKE_FROM

CRITERIA = [("answer_correct", "rate"), ("hit_rate_at_4", "rate"), ("ndcg_at_10", "mean")]


def records(n: int) -> list[dict]:
    r = random.Random(7)
    out = []
    for i in range(n):
        crit = {
            "answer_correct": {"status": "observed", "value": float(r.random() < 0.7)},
            "hit_rate_at_4": {"status": "observed", "value": float(r.random() < 0.8)},
            "ndcg_at_10": {"status": "observed", "value": round(r.random(), 6)},
        }
        if i % 50 == 0:
            crit["ndcg_at_10"] = {"status": "excluded", "reason": "no_relevance_labels"}
        if i % 97 == 0:
            crit["answer_correct"] = {"status": "missing", "reason": "system_error"}
        out.append({"id": f"c{i:06d}", "criteria": crit, "metadata": {"topic": f"t{i % 4}"}})
    return out


def numpy_floor(cases: list[dict], conf: float, graded: str = "bounded") -> dict:
    out = {}
    alpha = 1 - conf
    for name, kind in CRITERIA:
        cvs = [c["criteria"][name] for c in cases]
        observed = np.fromiter((cv["value"] for cv in cvs if cv["status"] == "observed"), dtype=float)
        missing = sum(cv["status"] == "missing" for cv in cvs)
        excluded = len(cvs) - len(observed) - missing
        n = observed.size
        mean = float(observed.mean())
        if kind == "rate":
            k = int(observed.sum())
            low = stats.beta.ppf(alpha / 2, k, n - k + 1) if k > 0 else 0.0
            high = stats.beta.ppf(1 - alpha / 2, k + 1, n - k) if k < n else 1.0
        elif graded == "bounded" and n >= GAFFKE_FROM:
            lows, highs = gaffke.gaffke_bounds(np.sort(observed)[None, :], np.ones((1, n)), alpha, seed=0)
            low, high = lows[0], highs[0]
        elif graded == "bounded":
            lows, highs = mixture.mixture_bounds(observed[None, :], np.ones((1, n)), alpha)
            low, high = lows[0], highs[0]
        else:
            half = stats.t.ppf(1 - alpha / 2, n - 1) * observed.std(ddof=1) / np.sqrt(n)
            low, high = mean - half, mean + half
        out[name] = (mean, float(low), float(high), n, missing, excluded)
    return out


def best_of(fn, repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cases", type=int, default=100_000)
    args = ap.parse_args()
    cases = records(args.cases)
    ours = compute_metrics(cases, CRITERIA, confidence=0.95, seed=0)
    floor = numpy_floor(cases, 0.95)
    for name, _ in CRITERIA:  # the same numbers, or the comparison means nothing
        m, (mean, low, high, n, missing, excluded) = ours[name], floor[name]
        assert (m["observed"], m["missing"], m["excluded"]) == (n, missing, excluded), name
        assert abs(m["value"] - mean) < 1e-12 and abs(m["low"] - low) < 1e-6 and abs(m["high"] - high) < 1e-6, (
            name,
            m,
            floor[name],
        )
    t_ours = best_of(lambda: compute_metrics(cases, CRITERIA, confidence=0.95, seed=0))
    t_floor = best_of(lambda: numpy_floor(cases, 0.95))
    t_tfloor = best_of(lambda: numpy_floor(cases, 0.95, graded="t"))
    print(f"cases: {args.cases}, criteria: {len(CRITERIA)} (2 rates, 1 graded mean)")
    print(f"aggregate.compute_metrics: {t_ours * 1e3:8.1f} ms")
    print(f"numpy/scipy floor:         {t_floor * 1e3:8.1f} ms (the same interval for the graded mean)")
    print(f"  the same with a t-interval: {t_tfloor * 1e3:6.1f} ms (what the graded interval costs)")
    print(f"ratio {t_ours / t_floor:.2f}x (target <= 3.0x); against the t-interval floor {t_ours / t_tfloor:.2f}x")


if __name__ == "__main__":
    main()
