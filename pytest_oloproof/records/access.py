"""The accessors of a record, each written once: every reader (compare, diagnose, release, the report)
asks a run for its criteria, its relevance unit or its cases by id here, so they cannot drift apart.

They read the plain mappings of `shapes.py` as written and tolerate what a stored record may lack
(an older run without evaluators, a run.json loaded without its cases).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

_Entry = TypeVar("_Entry", bound=Mapping[str, Any])

#: the unit relevance labels are matched at when no evaluator names one (as the run recorded its cases)
DEFAULT_RELEVANCE_UNIT = "document"


def evaluator_rows(run: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The run's evaluators, in the order it declared them (the order of its metrics table)."""
    return [e for e in run.get("evaluators") or [] if isinstance(e, Mapping)]


def criteria_of(run: Mapping[str, Any]) -> list[str]:
    """The criteria a run recorded: its evaluators' in the order it declared them (the order of its
    metrics table), then any other its metrics or its cases hold, in the order first seen.

    A criterion a case holds is listed even when no evaluator declares it (an older or hand-made
    record), so no reader drops a recorded value.
    """
    seen: dict[str, None] = {str(e["criterion"]): None for e in evaluator_rows(run) if e.get("criterion")}
    for name in run.get("metrics") or {}:
        seen.setdefault(name, None)
    for case in run.get("cases") or []:
        for name in case.get("criteria") or {}:
            seen.setdefault(name, None)
    return list(seen)


def shared_criteria(candidate: Mapping[str, Any], baseline: Mapping[str, Any]) -> list[str]:
    """The candidate's criteria the baseline recorded too, in the candidate's order."""
    base = set(criteria_of(baseline))
    return [c for c in criteria_of(candidate) if c in base]


def asserting(run: Mapping[str, Any]) -> list[str]:
    """The run's pass/fail (asserting) criteria, in evaluator order."""
    return [str(e["criterion"]) for e in evaluator_rows(run) if e.get("asserts")]


def recorded_relevance_unit(run: Mapping[str, Any]) -> str | None:
    """The relevance unit the run's first evaluator naming one recorded, or None when none does."""
    for e in evaluator_rows(run):
        unit = (e.get("settings") or {}).get("relevance_unit")
        if unit:
            return str(unit)
    return None


def relevance_unit(run: Mapping[str, Any]) -> str:
    """The unit the run matched relevance labels at: its evaluators' (the recorded
    `relevant_position` was computed with it), "document" when no evaluator names one."""
    return recorded_relevance_unit(run) or DEFAULT_RELEVANCE_UNIT


def by_id(entries: Iterable[_Entry] | None) -> dict[str, _Entry]:
    """Entries (cases of a run, cases of a diagnosis) by their id; a later duplicate replaces an earlier one."""
    return {str(e["id"]): e for e in entries or ()}


def cases_by_id(record: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    """A record's `cases` by id (none for a record without cases, or no record)."""
    return by_id((record or {}).get("cases"))
