"""One case executed N times (`repeats: N`): the repeats kept in the case record, and the case's value per
criterion as the mean over its repeats.

The record keeps repeat 0 where a record without repeats keeps its fields (retrieval, context, output, error),
so every reader of a case works unchanged; `repeats` lists every repeat (repeat 0 too) with its output and
verdicts; each criterion's value is the mean over the repeats in which it was observed, and the repeats in
which it was missing are named (`missing_repeats`). A criterion missing in every repeat is missing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pytest_oloproof.records.repeats import flaky_criteria, repeat_verdicts

__all__ = ["REPEATS", "combine_repeats", "flaky_criteria", "mean_over_repeats", "repeat_verdicts"]

#: Key of an execution record that holds the records of its repeats 1 … N−1 (set by the engine, popped by
#: `combine_repeats`' caller before evaluation): never part of a stored record.
REPEATS = "_oloproof_repeats"

#: What each entry of a case record's `repeats` keeps of that repeat's execution.
_REPEAT_FIELDS = ("output", "error", "context", "dropped", "context_truncated", "cache")


def combine_repeats(first: dict[str, Any], others: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The case record of repeats [first, *others], each already evaluated (see the module's docstring)."""
    reps: list[Mapping[str, Any]] = [first, *others]
    entries = []
    for i, r in enumerate(reps):
        entry: dict[str, Any] = {"repeat": i, "criteria": dict(r.get("criteria") or {})}
        entry.update({k: r.get(k) for k in _REPEAT_FIELDS if k in r})
        if i and r.get("retrieval") != first.get("retrieval"):  # `repeat_retrieval: true`: its own retrieval
            entry["retrieval"] = r.get("retrieval")
        entries.append(entry)
    names = list(dict.fromkeys(name for r in reps for name in (r.get("criteria") or {})))
    first["criteria"] = {name: mean_over_repeats([(r.get("criteria") or {}).get(name) for r in reps]) for name in names}
    first["repeats"] = entries
    first["cache"] = _cache_over(reps)
    usage = _usage_over(reps)
    if usage:
        first["usage"] = usage
    return first


def mean_over_repeats(values: Sequence[Mapping[str, Any] | None]) -> dict[str, Any]:
    """One criterion over a case's repeats: observed with the mean of the observed repeats (the missing ones
    named), missing when no repeat observed it, excluded when every repeat excluded it."""
    observed = [(i, float(v["value"])) for i, v in enumerate(values) if v and v.get("status") == "observed"]
    missing = [i for i, v in enumerate(values) if not v or v.get("status") == "missing"]
    if observed:
        out: dict[str, Any] = {
            "status": "observed",
            "value": sum(x for _, x in observed) / len(observed),
            "repeat_values": [_value(v) if v and v.get("status") == "observed" else None for v in values],
        }
        failed = next((v for v in values if v and v.get("status") == "observed" and float(v["value"]) < 1.0), None)
        for k in ("expected", "actual"):  # what a failing repeat expected and got, for the item's message
            if failed is not None and k in failed:
                out[k] = failed[k]
        if missing:
            out["missing_repeats"] = missing
            reasons = [str((values[i] or {}).get("reason") or "missing") for i in missing]
            out["detail"] = {"missing_reasons": reasons}
        return out
    if missing:
        first_missing = values[missing[0]] or {"status": "missing", "reason": "missing"}
        out = dict(first_missing)
        out["missing_repeats"] = missing
        return out
    return dict(values[0] or {"status": "excluded", "reason": "excluded"})


def _value(v: Mapping[str, Any] | None) -> float | None:
    return float(v["value"]) if v and v.get("value") is not None else None


def _cache_over(reps: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Repeat 0's cache statuses (the case's own, as in a run without repeats), the other repeats' counted under
    `repeats` (hit/miss per cache, judgments too), which the run's cache counts add."""
    first = dict(reps[0].get("cache") or {})
    counts = {k: {"hit": 0, "miss": 0} for k in ("execution", "retrieve", "generate", "judgment")}
    for r in reps[1:]:
        cache = r.get("cache") or {}
        for k in ("execution", "retrieve", "generate"):
            if cache.get(k) in ("hit", "miss"):
                counts[k][cache[k]] += 1
        j = cache.get("judgment") or {}
        counts["judgment"]["hit"] += int(j.get("hit", 0))
        counts["judgment"]["miss"] += int(j.get("miss", 0))
    first["repeats"] = counts
    return first


def _usage_over(reps: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Every repeat's usage in the case's: each stage's and judge's calls (and what the caches saved) appended."""
    out: dict[str, Any] = {}
    for r in reps:
        usage = r.get("usage")
        if not isinstance(usage, Mapping):
            continue
        for group in ("stages", "judges"):
            for name, entries in (usage.get(group) or {}).items():
                out.setdefault(group, {}).setdefault(name, []).extend(entries)
        saved = usage.get("saved") or {}
        for group in ("stages", "judges"):
            for name, entries in (saved.get(group) or {}).items():
                out.setdefault("saved", {}).setdefault(group, {}).setdefault(name, []).extend(entries)
        for k, v in usage.items():  # anything else (totals are recomputed by the recorder) stays repeat 0's
            if k not in ("stages", "judges", "saved") and k not in out:
                out[k] = v
    return out
