"""What a run record says of its cases, computed from the case records alone.

The slim case a run keeps in memory of each full case record (`slim_case`), and the run's usage totals:
per-model call and token tallies, their cost by the run's `pricing`, and what the budget guard stopped.
The recorder of a run and the store's summary of an unfinished run compute them the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

#: the reason a criterion or a case is missing when the run's budget refused its paid call
BUDGET_EXHAUSTED = "budget_exhausted"


def slim_case(rec: Mapping[str, Any]) -> dict[str, Any]:
    """What metrics, slices, cache counts and comparisons read of a case.

    The full record (retrieval with texts, output, tracebacks) is appended to the
    store as it arrives and not kept in memory, so a 100,000-case run stays small.
    """
    no_context = rec.get("retrieval") is None and not rec.get("error")
    error = rec.get("error")
    return {
        "id": rec["id"],
        "criteria": {name: _shared(c, _CRITERION_KEYS) for name, c in (rec.get("criteria") or {}).items()},
        "metadata": rec.get("metadata") or {},
        "relevant_position": rec.get("relevant_position"),
        "context_truncated": None if no_context else bool(rec.get("context_truncated")),
        "error": None if not error else {"reason": error.get("reason"), "stage": error.get("stage")},
        "cache": _shared_cache(rec.get("cache") or {}),
        "digest": rec.get("digest"),
        **_usage_tallies(rec),
        **_repeat_values(rec),
    }


def _repeat_values(rec: Mapping[str, Any]) -> dict[str, Any]:
    """`repeat_values`: per criterion, the value in each repeat (`repeats: N`), when the case has repeats."""
    values = {
        name: c["repeat_values"]
        for name, c in (rec.get("criteria") or {}).items()
        if isinstance(c, Mapping) and isinstance(c.get("repeat_values"), list)
    }
    return {"repeat_values": values} if values else {}


def _usage_tallies(rec: Mapping[str, Any]) -> dict[str, Any]:
    """`usage_tally`: the case's per-model call and token counts (spent and saved), when it reported any."""
    tallies = case_tallies(rec)
    return {"usage_tally": tallies} if tallies else {}


_SHARED: dict[tuple[Any, ...], dict[str, Any]] = {}
_CRITERION_KEYS = ("status", "value", "reason")


def _shared(d: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """One dict object per distinct small value (most criteria are 0.0 or 1.0): read-only by convention."""
    key = tuple(d.get(k) for k in keys)
    found = _SHARED.get(key)
    if found is None:
        found = {k: d[k] for k in keys if k in d}
        if len(_SHARED) < 100_000:
            _SHARED[key] = found
    return found


def _shared_cache(cache: Mapping[str, Any]) -> dict[str, Any]:
    j = cache.get("judgment") or {}
    key: tuple[Any, ...] = (
        "cache",
        cache.get("execution"),
        cache.get("retrieve"),
        cache.get("generate"),
        j.get("hit"),
        j.get("miss"),
    )
    if cache.get("repeats"):  # the counts of a case's repeats 1 … N−1 (`repeats: N`)
        key += (repr(cache["repeats"]),)
    found = _SHARED.get(key)
    if found is None:
        found = {**cache, "judgment": dict(j)}
        _SHARED[key] = found
    return found


def usage_fields(cases: Sequence[Mapping[str, Any]], header: Mapping[str, Any]) -> dict[str, Any]:
    """`usage` (tokens, cost, saved) and `budget` (what the guard stopped) of slim `cases`, by the run header's
    `pricing` and `budget` limits; a key is left out when there is nothing to say."""
    out: dict[str, Any] = {}
    summary = summarize(cases, header.get("pricing"))
    if summary is not None:
        out["usage"] = summary
    budget = budget_summary(cases, header.get("budget"))
    if budget is not None:
        out["budget"] = budget
    return out


# ------------------------------------------------------------------ usage totals


def _tally_into(tally: dict[str, list[int]], entries: Iterable[Mapping[str, Any]]) -> None:
    """Per model: [calls, input, output, cached, calls with unknown tokens, calls reporting cached]."""
    for e in entries:
        row = tally.setdefault(e.get("model") or "", [0, 0, 0, 0, 0, 0])
        row[0] += 1
        inp, out = e.get("input_tokens"), e.get("output_tokens")
        if inp is None or out is None:
            row[4] += 1
        else:
            row[1] += int(inp)
            row[2] += int(out)
        if e.get("cached_input_tokens") is not None:
            row[3] += int(e["cached_input_tokens"])
            row[5] += 1


def merge_tallies(into: dict[str, list[int]], other: Mapping[str, Sequence[int]]) -> None:
    for model, row in other.items():
        have = into.setdefault(model, [0] * 6)
        for i, v in enumerate(row):
            have[i] += int(v)


def case_tallies(rec: Mapping[str, Any]) -> dict[str, dict[str, list[int]]] | None:
    """A case's usage reduced to per-model counts: spent and saved, judges and system (None when empty).

    Takes a full case record (its `usage` entries) or a slim one (its `usage_tally`).
    """
    if isinstance(rec.get("usage_tally"), Mapping):
        return dict(rec["usage_tally"])
    usage = rec.get("usage")
    if not isinstance(usage, Mapping):
        return None
    saved = usage.get("saved") or {}
    out: dict[str, dict[str, list[int]]] = {}
    for name, groups in (
        ("judges", usage.get("judges")),
        ("system", usage.get("stages")),
        ("saved_judges", saved.get("judges")),
        ("saved_system", saved.get("stages")),
    ):
        if groups:
            tally: dict[str, list[int]] = {}
            for entries in groups.values():
                _tally_into(tally, entries)
            out[name] = tally
    return out or None


def source_summary(tally: Mapping[str, Sequence[int]], pricing: Mapping[str, Any] | None) -> dict[str, Any]:
    """{"calls", "input_tokens", "output_tokens", "cached_input_tokens", "unknown_calls", "cost", ...}.

    Token totals are None when no call reported them; `cost` is None with a
    `cost_missing` reason unless every call has known tokens and a priced model.
    """
    calls = sum(r[0] for r in tally.values())
    unknown = sum(r[4] for r in tally.values())
    known = calls - unknown
    out: dict[str, Any] = {
        "calls": calls,
        "input_tokens": sum(r[1] for r in tally.values()) if known or not calls else None,
        "output_tokens": sum(r[2] for r in tally.values()) if known or not calls else None,
        "cached_input_tokens": sum(r[3] for r in tally.values()) if any(r[5] for r in tally.values()) else None,
        "unknown_calls": unknown,
    }
    cost, missing = 0.0, None
    models: dict[str, Any] = {}
    for model, r in sorted(tally.items()):
        m_cost = None
        price = (pricing or {}).get(model) if model else None
        if price is not None and not r[4]:
            m_cost = round(cost_of_row(r, price), 12)
        models[model or "(unnamed)"] = {
            "calls": r[0],
            "input_tokens": r[1] if r[0] > r[4] else None,
            "output_tokens": r[2] if r[0] > r[4] else None,
            "unknown_calls": r[4],
            "cost": m_cost,
        }
        if m_cost is None:
            missing = missing or ("no_pricing" if not pricing else ("usage_unknown" if r[4] else "unpriced_model"))
        else:
            cost += m_cost
    out["cost"] = None if missing or not pricing else round(cost, 12)
    if out["cost"] is None and calls:
        out["cost_missing"] = missing or "no_pricing"
    out["models"] = models
    if pricing:
        unpriced = sorted(name for name in models if name == "(unnamed)" or name not in pricing)
        if unpriced:
            out["unpriced_models"] = unpriced
    return out


def cost_of_row(r: Sequence[int], price: Mapping[str, Any]) -> float:
    cached = r[3] if price.get("cached_input") is not None else 0
    cached = min(cached, r[1])
    total = (
        (r[1] - cached) * float(price["input"])
        + cached * float(price.get("cached_input") or 0.0)
        + r[2] * float(price["output"])
    )
    return total / 1_000_000


def summarize(cases: Iterable[Mapping[str, Any]], pricing: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The run's `usage` object from case records (full or slim); None when nothing was reported."""
    totals: dict[str, dict[str, list[int]]] = {}
    for c in cases:
        for name, tally in (case_tallies(c) or {}).items():
            merge_tallies(totals.setdefault(name, {}), tally)
    if not totals:
        return None
    judges = source_summary(totals.get("judges", {}), pricing)
    system = source_summary(totals.get("system", {}), pricing)
    sj = source_summary(totals.get("saved_judges", {}), pricing)
    ss = source_summary(totals.get("saved_system", {}), pricing)
    return {
        "judges": judges,
        "system": system,
        "saved": {
            "judges": sj,
            "system": ss,
            "calls": sj["calls"] + ss["calls"],
            "tokens": _tokens(sj, ss),
            "cost": None if (saved_cost := _sum_costs(sj, ss)) is None else round(saved_cost, 12),
        },
        "priced": bool(pricing),
    }


def _tokens(*sources: Mapping[str, Any]) -> int | None:
    total = 0
    for s in sources:
        if not s["calls"]:
            continue
        if s["input_tokens"] is None or s["output_tokens"] is None:
            return None
        total += s["input_tokens"] + s["output_tokens"]
    return total


def _sum_costs(*sources: Mapping[str, Any]) -> float | None:
    total = 0.0
    for s in sources:
        if not s["calls"]:
            continue
        if s.get("cost") is None:
            return None
        total += s["cost"]
    return total


def budget_summary(cases: Iterable[Mapping[str, Any]], settings: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The record's `budget` object: the limits, and which cases it left unjudged or unexecuted."""
    if not settings or (settings.get("max_cost") is None and settings.get("max_judge_calls") is None):
        return None
    not_executed: list[str] = []
    not_judged: list[str] = []
    criteria = 0
    for c in cases:
        err = c.get("error") or {}
        hit = [n for n, v in (c.get("criteria") or {}).items() if v.get("reason") == BUDGET_EXHAUSTED]
        criteria += len(hit)
        if err.get("reason") == BUDGET_EXHAUSTED:
            not_executed.append(c["id"])
        elif hit:
            not_judged.append(c["id"])
    return {
        "max_cost": settings.get("max_cost"),
        "max_judge_calls": settings.get("max_judge_calls"),
        "exhausted": bool(not_executed or not_judged),
        "cases_not_executed": sorted(not_executed),
        "cases_not_judged": sorted(not_judged),
        "criteria_missing": criteria,
    }
