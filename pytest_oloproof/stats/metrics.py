"""Retrieval-metric kernels on retrieval positions.

Pure functions, no pytest and no numpy: they run once per case and per metric,
so plain Python on short lists is the fastest option. Rankings are taken in the
order the retriever produced them; Oloproof never re-sorts by score.

A *unit* is a doc_id (``relevance_unit: document``) or a ``(doc_id, chunk_id)``
pair (``relevance_unit: chunk``). ``qrels`` maps units to integer grades as in
trec_eval qrels: grade > 0 is relevant, grade <= 0 is judged not relevant.
Every metric agrees with trec_eval (via pytrec_eval) to 1e-9; see the
README's "Retrieval metrics" section.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from typing import Literal

__all__ = [
    "Gain",
    "NoRelevantUnits",
    "Unit",
    "best_relevant_position",
    "first_occurrence_gains",
    "hit_rate",
    "mrr",
    "ndcg",
    "num_relevant",
    "precision",
    "recall",
]

Unit = Hashable
Gain = Literal["linear", "exponential"]


class NoRelevantUnits(ValueError):
    """The labels hold no unit with grade > 0, so the metric is undefined.

    The evaluator turns this into an *excluded* criterion with reason
    ``no_relevant_units`` instead of a misleading 0.
    """


# _DISCOUNTS[i] = 1 / log2(i + 2): the discount of 1-based position i + 1.
_DISCOUNTS: list[float] = [1.0 / math.log2(i + 2) for i in range(256)]


#: 2**1023 is the largest power of two a float holds; 1000 leaves room to sum many such gains
MAX_EXPONENTIAL_GRADE = 1000


def _discounts(n: int) -> list[float]:
    """Return a discount table covering at least ``n`` positions (grown on demand)."""
    if n > len(_DISCOUNTS):
        _DISCOUNTS.extend(1.0 / math.log2(i + 2) for i in range(len(_DISCOUNTS), n))
    return _DISCOUNTS


def _check_k(k: int) -> None:
    """Reject cutoffs that are not integers >= 1 (a cutoff of 0 has no meaning)."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")


def num_relevant(qrels: Mapping[Unit, int]) -> int:
    """Count the labelled units with grade > 0 (trec_eval's ``num_rel``)."""
    return sum(1 for grade in qrels.values() if grade > 0)


def _require_relevant(qrels: Mapping[Unit, int]) -> int:
    """Return ``num_relevant(qrels)``, raising NoRelevantUnits when it is 0."""
    n = num_relevant(qrels)
    if n == 0:
        raise NoRelevantUnits("no labelled unit has grade > 0")
    return n


def _gains(ranking: Sequence[Unit], qrels: Mapping[Unit, int], limit: int) -> list[int]:
    """Grades of the first ``limit`` positions; a unit counts only at its first position."""
    seen: set[Unit] = set()
    gains: list[int] = []
    get = qrels.get
    for unit in ranking[:limit]:
        if unit in seen:
            gains.append(0)
            continue
        seen.add(unit)
        grade = get(unit, 0)
        gains.append(max(0, grade))
    return gains


def first_occurrence_gains(ranking: Sequence[Unit], qrels: Mapping[Unit, int]) -> list[int]:
    """Gain (= grade, 0 if unlabelled or grade <= 0) at each position of ``ranking``.

    Later duplicates of a unit (e.g. a second chunk of a document under
    ``relevance_unit: document``) get 0 but keep their position, so they push
    later units down exactly as they did in the retrieval.
    """
    return _gains(ranking, qrels, len(ranking))


def hit_rate(ranking: Sequence[Unit], qrels: Mapping[Unit, int], k: int) -> float:
    """1.0 if any relevant unit is among the first ``k`` positions, else 0.0 (trec ``success_k``)."""
    _check_k(k)
    _require_relevant(qrels)
    get = qrels.get
    for unit in ranking[:k]:
        if get(unit, 0) > 0:
            return 1.0
    return 0.0


def recall(ranking: Sequence[Unit], qrels: Mapping[Unit, int], k: int) -> float:
    """Distinct relevant units among the first ``k`` / all relevant units (trec ``recall_k``).

    Not capped at ``min(R, k)``: with more relevant units than ``k`` the value stays below 1.
    """
    _check_k(k)
    n = _require_relevant(qrels)
    return sum(1 for g in _gains(ranking, qrels, k) if g > 0) / n


def precision(ranking: Sequence[Unit], qrels: Mapping[Unit, int], k: int) -> float:
    """Distinct relevant units among the first ``k`` / ``k`` (trec ``P_k``).

    Divided by ``k`` even when fewer than ``k`` candidates were retrieved.
    """
    _check_k(k)
    _require_relevant(qrels)
    return sum(1 for g in _gains(ranking, qrels, k) if g > 0) / k


def mrr(ranking: Sequence[Unit], qrels: Mapping[Unit, int], k: int) -> float:
    """1 / position of the first relevant unit within ``k``, else 0.0 (trec ``recip_rank`` on the top k)."""
    _check_k(k)
    _require_relevant(qrels)
    get = qrels.get
    for position, unit in enumerate(ranking[:k], start=1):
        if get(unit, 0) > 0:
            return 1.0 / position
    return 0.0


def ndcg(
    ranking: Sequence[Unit],
    qrels: Mapping[Unit, int],
    k: int,
    gain: Gain = "linear",
) -> float:
    """Graded nDCG over the first ``k`` positions (trec ``ndcg_cut_k``).

    DCG = sum of gain_i / log2(i + 1) over positions i = 1..k, with gain = grade
    (``linear``, trec_eval's choice) or 2**grade - 1 (``exponential``). The ideal
    DCG sorts *all* labelled units with grade > 0 by grade, cut at ``k`` -- never
    only the retrieved ones, which would reward a retriever for missing units.
    """
    _check_k(k)
    if gain not in ("linear", "exponential"):
        raise ValueError(f"gain must be 'linear' or 'exponential', got {gain!r}")
    _require_relevant(qrels)
    grades = _gains(ranking, qrels, k)
    ideal_grades = sorted((g for g in qrels.values() if g > 0), reverse=True)[:k]
    # positions past the ranking and the labels add nothing: a huge k must not build a huge table
    discounts = _discounts(max(len(grades), len(ideal_grades)))
    if gain == "exponential":
        if ideal_grades[0] > MAX_EXPONENTIAL_GRADE:  # 2**grade would exceed a float (or take forever)
            raise ValueError(
                f"grade {ideal_grades[0]} is too large for gain: exponential (2^grade - 1 must fit a float; "
                f"the largest grade is {MAX_EXPONENTIAL_GRADE}); use gain: linear or smaller grades"
            )
        grades = [2**g - 1 for g in grades]
        ideal_grades = [2**g - 1 for g in ideal_grades]
    dcg = 0.0
    for i, g in enumerate(grades):
        if g:
            dcg += g * discounts[i]
    idcg = 0.0
    for i, g in enumerate(ideal_grades):
        idcg += g * discounts[i]
    return dcg / idcg


def best_relevant_position(ranking: Sequence[Unit], qrels: Mapping[Unit, int]) -> int | None:
    """1-based position of the best-placed relevant unit in the whole ranking.

    None when no relevant unit was retrieved; raises NoRelevantUnits when the labels
    hold no relevant unit at all (the slice then excludes the case).
    """
    _require_relevant(qrels)
    get = qrels.get
    for position, unit in enumerate(ranking, start=1):
        if get(unit, 0) > 0:
            return position
    return None
