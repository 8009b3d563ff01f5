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
