"""What the execution cache keeps of a case record, and the fields an entry adds to a record served from it.

The engine writes these entries and evaluation files verdict bundles in them, so both read the shape here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: In a record served by or stored in the execution cache: (key, verdict bundles); evaluation pops it.
EXECUTION_ENTRY = "_execution_entry"
#: The execution entry's field holding its verdict bundles (see evaluate/record.py), never part of a record.
VERDICTS = "verdicts"


def cacheable(rec: Mapping[str, Any]) -> dict[str, Any]:
    """What the execution entry keeps of a record (with what executing it cost, when a stage reported usage)."""
    keep = ("retrieval", "context", "dropped", "context_truncated", "output")
    out = {k: rec[k] for k in keep}
    if "query" in rec:
        out["query"] = rec["query"]
    produced = production_usage(rec)
    if produced:
        out["usage"] = produced
    return out


def production_usage(rec: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Per stage, what producing the record's execution cost: calls made now plus cache entries reused."""
    usage = rec.get("usage")
    if not isinstance(usage, Mapping):
        return {}
    out: dict[str, list[dict[str, Any]]] = {}
    for source in ((usage.get("saved") or {}).get("stages") or {}, usage.get("stages") or {}):
        for stage, entries in source.items():
            out.setdefault(stage, []).extend(entries)
    return out
