"""Reading a case's repeats (`repeats: N`): its value per criterion in each repeat, and which verdicts flipped.

Shared by the statistics (the `flaky` slice, the variance split), the reports, comparison and diagnosis.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def repeat_verdicts(case: Mapping[str, Any]) -> dict[str, list[float | None]]:
    """Per criterion, the case's value in each repeat (None where missing or excluded); {} without repeats.

    Reads a full case record (`repeats`) or a slim one (`repeat_values`, see store/summary.py).
    """
    slim = case.get("repeat_values")
    if isinstance(slim, Mapping):
        return {str(k): list(v) for k, v in slim.items()}
    out: dict[str, list[float | None]] = {}
    for name, c in (case.get("criteria") or {}).items():
        if isinstance(c, Mapping) and isinstance(c.get("repeat_values"), list):
            out[name] = list(c["repeat_values"])
    return out


def flaky_criteria(case: Mapping[str, Any]) -> list[str]:
    """The criteria whose observed values differ across the case's repeats (a verdict that flipped)."""
    return [name for name, vals in repeat_verdicts(case).items() if len({v for v in vals if v is not None}) > 1]


#: Evaluator types that read the retrieval only: with retrieval shared across repeats their value is one per case.
RETRIEVAL_TYPES = frozenset({"hit_rate", "recall", "precision", "mrr", "ndcg"})


def kind_over_repeats(record: Mapping[str, Any], evaluator: Mapping[str, Any]) -> str:
    """The kind a run with repeats reads a criterion as (its header and the evaluator's entry in it).

    A rate becomes a mean of per-case means (fractions in [0, 1]), so it takes the bounded-mean intervals, in
    one run and paired, whatever the values turn out to be: choosing Clopper–Pearson or McNemar because the
    values happen to be 0/1 would pick the method from the data. A retrieval metric keeps its kind while
    retrieval is shared across repeats (`repeat_retrieval: false`): its value is the same in every repeat.
    """
    kind = str(evaluator.get("kind"))
    if kind != "rate" or run_repeats(record) < 2:
        return kind
    if evaluator.get("type") in RETRIEVAL_TYPES and not record.get("repeat_retrieval"):
        return kind
    return "mean"


def run_repeats(record: Mapping[str, Any]) -> int:
    """How many repeats per case a run (its header or record) asked for; 1 without repeats."""
    value = record.get("repeats")
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and value > 1 else 1
