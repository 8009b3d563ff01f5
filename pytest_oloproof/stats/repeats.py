"""Repeats (`repeats: N`): the flaky cases, and the variance of a run's mean split into between-case and
within-case parts, with what more repeats would buy.

Miller (2024), "Adding Error Bars to Evals: A Statistical Approach to Language Model Evaluations",
arXiv:2411.00640, §"Reducing variance by resampling answers": with n questions and K answers per question,
the variance of the eval's mean is

    Var(mean) = (σ²_between + σ²_within / K) / n

where σ²_between is the variance of the questions' expected scores and σ²_within the expected variance of a
question's score across answers. More answers per question shrink only the second term: the floor is
σ²_between / n, however many repeats.

The parts are estimated as in a one-way random-effects analysis of variance: σ²_within is the mean over cases
of each case's sample variance across its repeats (ddof 1); the sample variance of the case means (ddof 1)
estimates σ²_between + σ²_within · mean(1/K_i), so σ²_between is that minus σ̂²_within · mean(1/K_i),
set to 0 when negative (said in a note). K_i is the number of repeats in which case i was observed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_oloproof.records.repeats import flaky_criteria, repeat_verdicts


def variance_split(per_case: Sequence[Sequence[float]], repeats: int) -> dict[str, Any] | None:
    """The split for one criterion, from each case's observed values across its repeats; None below 2 cases.

    Returns σ²_between, σ²_within, the standard error of the run's mean now (from the case means, as the
    interval treats them), and at 2× the repeats and with unlimited repeats (the model above).
    """
    cases = [list(v) for v in per_case if len(v) >= 1]
    n = len(cases)
    if n < 2:
        return None
    means = [sum(v) / len(v) for v in cases]
    grand = sum(means) / n
    s2_means = sum((m - grand) ** 2 for m in means) / (n - 1)
    spread = [_sample_variance(v) for v in cases if len(v) >= 2]
    if not spread:
        return None
    within = sum(spread) / len(spread)
    inv_k = sum(1.0 / len(v) for v in cases) / n
    between_raw = s2_means - within * inv_k
    between = max(between_raw, 0.0)
    k_now = 1.0 / inv_k  # the harmonic mean of the repeats observed per case (= N when none is missing)

    def se(k: float) -> float:
        return math.sqrt((between + within / k) / n)

    out: dict[str, Any] = {
        "cases": n,
        "repeats": repeats,
        "repeats_observed": k_now,
        "between": between,
        "within": within,
        "se": math.sqrt(s2_means / n),
        "se_model": se(k_now),
        "se_double": se(2 * k_now),
        "se_floor": math.sqrt(between / n),
        "within_share": (within / k_now) / (between + within / k_now) if between + within > 0 else 0.0,
    }
    if between_raw < 0:
        out["note"] = "the case means vary less than the repeats predict: between-case variance set to 0"
    return out


def _sample_variance(values: Sequence[float]) -> float:
    m = sum(values) / len(values)
    return sum((x - m) ** 2 for x in values) / (len(values) - 1)


def repeats_summary(cases: Sequence[Mapping[str, Any]], criteria: Sequence[str], repeats: int) -> dict[str, Any] | None:
    """`repeats` of a run's summary: the flaky cases (per criterion, the case ids whose verdicts differ across
    repeats) and each criterion's variance split; None for a run without repeats."""
    if repeats < 2:
        return None
    flaky: dict[str, list[str]] = {name: [] for name in criteria}
    split: dict[str, Any] = {}
    per_criterion: dict[str, list[list[float]]] = {name: [] for name in criteria}
    for c in sorted(cases, key=lambda c: str(c["id"])):
        verdicts = repeat_verdicts(c)
        for name in flaky_criteria(c):
            if name in flaky:
                flaky[name].append(str(c["id"]))
        for name in criteria:
            values = [v for v in verdicts.get(name, []) if v is not None]
            if values:
                per_criterion[name].append(values)
    for name in criteria:
        s = variance_split(per_criterion[name], repeats)
        if s is not None:
            split[name] = s
    flaky_cases = sorted({cid for ids in flaky.values() for cid in ids})
    return {"n": repeats, "flaky": {k: v for k, v in flaky.items() if v}, "flaky_cases": flaky_cases, "variance": split}
