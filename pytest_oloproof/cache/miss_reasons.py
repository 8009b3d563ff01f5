"""Why the caches missed: each miss explained against the previous run of the same system.

When a case misses a stage cache where the previous run of the system (the
newest stored run with the same system name) had an entry, the reason is the
part of the stage's identity that changed: a system setting (`index_version
kb-1 → kb-2`), the case's input, the assembled context, an evaluator's
settings, or nothing at all (the entry is gone). Identities are compared once
per run, at its end, from the run records alone: nothing is added to a lookup.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from pytest_oloproof.errors import StoreError
from pytest_oloproof.records.identity import sha256_of
from pytest_oloproof.records.shapes import RunRecord
from pytest_oloproof.store.files import Store

STAGES = ("execution", "retrieve", "generate", "judgment")
#: the system settings in each stage's cache key (identity.StageKeys); execution takes them all
STAGE_FIELDS = {"retrieve": ("name", "index_version", "depth"), "generate": ("name", "version")}
#: settings that shape the assembled context (what generate is keyed on besides its own settings)
CONTEXT_FIELDS = ("index_version", "depth", "top_k", "token_budget")
READING_MODES = ("readwrite", "read")
WRITING_MODES = ("readwrite", "write", "refresh")
NEW_CASE = "new case"
GONE = "entry not in the cache (cleared, or written to another store)"
NO_ENTRY = "the previous run stored no entry (an error, or its cache mode)"
NEW_REPEATS = "new repeats (the previous run made {n} per case; each repeat has entries of its own)"


def reads_digests(rec: Mapping[str, Any]) -> dict[str, str]:
    """Digests of what generation and the judges read of a full case record: its context and its output."""
    by_pos = {c.get("position"): c for c in rec.get("retrieval") or []}
    context = [
        [by_pos[p].get("doc_id"), by_pos[p].get("chunk_id"), by_pos[p].get("text")]
        for p in rec.get("context") or []
        if p in by_pos
    ]
    return {"context": sha256_of(context), "output": sha256_of(rec.get("output"))}


def _show(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v)


def setting_changes(old: Mapping[str, Any], new: Mapping[str, Any], keys: Iterable[str] | None = None) -> list[str]:
    """`index_version kb-1 → kb-2` for each key whose value differs."""
    names = list(keys) if keys is not None else sorted(set(old) | set(new))
    return [f"{k} {_show(old.get(k))} → {_show(new.get(k))}" for k in names if old.get(k) != new.get(k)]


def evaluator_changes(old: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]]) -> list[str]:
    """`grounded: model m1 → m2` per criterion whose evaluator type or settings changed (or is new)."""
    before = {e.get("criterion"): e for e in old}
    out = []
    for e in new:
        name = e.get("criterion")
        prev = before.get(name)
        if prev is None:
            out.append(f"{name}: new evaluator")
            continue
        diffs = setting_changes({"type": prev.get("type")}, {"type": e.get("type")})
        diffs += setting_changes(prev.get("settings") or {}, e.get("settings") or {})
        if diffs:
            out.append(f"{name}: {', '.join(diffs)}")
    return out


def previous_run(store: Store, run_id: str, system_name: Any) -> tuple[str, RunRecord] | None:
    """The newest run stored before `run_id` of the same system (an ordinary run, not a diagnosis child)."""
    for other in store.run_ids():
        if other >= run_id:
            continue
        try:
            header = store.run_header(other)
        except StoreError:
            continue
        if header.get("purpose", "run") == "run" and (header.get("system") or {}).get("name") == system_name:
            return other, header
    return None


def _had_entry(stage: str, prev: Mapping[str, Any], writes: bool) -> bool:
    cache = prev.get("cache") or {}
    if stage == "judgment":
        j = cache.get("judgment") or {}
        return bool(j.get("hit")) or (writes and bool(j.get("miss")))
    status = cache.get(stage)
    if stage == "execution" and prev.get("error"):
        return False  # a failed case stores no execution entry
    if stage != "execution" and status is None and cache.get("execution") == "hit" and not prev.get("error"):
        return True  # served whole by the execution cache: its stages had been stored under the same identity
    return status == "hit" or (writes and status == "miss")


def _repeat_misses(stage: str, case: Mapping[str, Any]) -> int:
    """The misses of a case's repeats 1 … N−1 (`repeats: N`), counted apart from repeat 0's."""
    counts = ((case.get("cache") or {}).get("repeats") or {}).get(stage) or {}
    return int(counts.get("miss", 0)) if isinstance(counts, Mapping) else 0


def _misses(stage: str, case: Mapping[str, Any]) -> int:
    cache = case.get("cache") or {}
    if stage == "judgment":
        return int((cache.get("judgment") or {}).get("miss", 0))
    return 1 if cache.get(stage) == "miss" else 0


def explain(
    store: Store,
    run_id: str,
    header: Mapping[str, Any],
    cases: Sequence[Mapping[str, Any]],
    full_cases: Callable[[], Iterable[Mapping[str, Any]]] | None = None,
) -> dict[str, Any] | None:
    """Reasons for a run's cache misses, aggregated per stage; None when nothing missed.

    `cases` are the run's slim case summaries (with `digest`); the previous run's
    cases are read from the store, and only when a miss is explained by neither a
    setting nor the input are the contexts and outputs of both runs read again
    (`full_cases` gives this run's full records), all once per run.
    """
    repeat_misses = {stage: sum(_repeat_misses(stage, c) for c in cases) for stage in STAGES}
    totals = {stage: sum(_misses(stage, c) for c in cases) + repeat_misses[stage] for stage in STAGES}
    if not any(totals.values()):
        return None
    system = dict(header.get("system") or {})
    mode = str(header.get("cache_mode") or "readwrite")
    out: dict[str, Any] = {"previous_run": None, "stages": {}, "new_cases": 0}
    if mode not in READING_MODES:
        reason = f"cache mode {mode} does not read entries"
        out["stages"] = {s: _stage(n, Counter({reason: n}), {}) for s, n in totals.items() if n}
        return out
    found = previous_run(store, run_id, system.get("name"))
    if found is None:
        out["note"] = f"no earlier run of {system.get('name')} in this store to compare with"
        return out
    prev_id, prev_header = found
    out["previous_run"] = prev_id
    missed = {c["id"] for c in cases if any(_misses(s, c) for s in STAGES)}
    prev_cases: dict[str, dict[str, Any]] = {}
    for rec in store.iter_cases(prev_id, strict=False):  # a best-effort explanation: a damaged line is skipped
        cid = rec.get("id")
        if isinstance(cid, str) and cid in missed:
            prev_cases[cid] = {"cache": rec.get("cache") or {}, "error": rec.get("error"), "digest": rec.get("digest")}
    prev_system = dict(prev_header.get("system") or {})
    writes = str(prev_header.get("cache_mode") or "readwrite") in WRITING_MODES
    changed = {
        "execution": "; ".join(setting_changes(prev_system, system)),
        "retrieve": "; ".join(setting_changes(prev_system, system, STAGE_FIELDS["retrieve"])),
        "generate": "; ".join(setting_changes(prev_system, system, STAGE_FIELDS["generate"])),
    }
    context_hint = "; ".join(setting_changes(prev_system, system, CONTEXT_FIELDS))
    judges = "; ".join(evaluator_changes(prev_header.get("evaluators") or [], header.get("evaluators") or []))
    counts = {stage: Counter[str]() for stage in STAGES}
    hints: dict[str, dict[str, str]] = {stage: {} for stage in STAGES}
    new_cases = 0
    pending: list[tuple[str, str, int]] = []  # (case, stage, misses) explained by neither a setting nor the input
    for c in cases:
        if c["id"] not in missed:
            continue
        prev = prev_cases.get(c["id"])
        if prev is None:
            new_cases += 1
        for stage in STAGES:
            n = _misses(stage, c)
            if not n:
                continue
            reason, hint = _reason(stage, c, prev, writes, changed, judges)
            if reason is _READS:
                pending.append((c["id"], stage, n))
                continue
            counts[stage][reason] += n
            if hint:
                hints[stage][reason] = hint
    if pending:
        wanted = {cid for cid, _s, _n in pending}
        before = _reads_of(store.iter_cases(prev_id, strict=False), wanted)
        now = _reads_of(full_cases() if full_cases is not None else (), wanted)
        for cid, stage, n in pending:
            reason, hint = _by_reads(stage, now.get(cid), before.get(cid), context_hint)
            counts[stage][reason] += n
            if hint:
                hints[stage][reason] = hint
    before_repeats = int(prev_header.get("repeats") or 1)
    for stage, n in repeat_misses.items():  # repeats 1 … N−1 have entries of their own (`repeats: N`)
        if n:
            reason = NEW_REPEATS.format(n=before_repeats) if before_repeats < int(header.get("repeats") or 1) else GONE
            counts[stage][reason] += n
    out["stages"] = {s: _stage(totals[s], counts[s], hints[s]) for s in STAGES if totals[s]}
    out["new_cases"] = new_cases
    return out


_READS = "(the context or output decides)"


def _reads_of(records: Iterable[Mapping[str, Any]], wanted: set[str]) -> dict[str, dict[str, str]]:
    return {str(r["id"]): reads_digests(r) for r in records if r.get("id") in wanted}


def _reason(
    stage: str,
    case: Mapping[str, Any],
    prev: Mapping[str, Any] | None,
    writes: bool,
    changed: Mapping[str, str],
    judges: str,
) -> tuple[str, str | None]:
    """(reason, hint) for one case's miss of one stage: the first part of its identity that changed.

    `_READS` when only the case's context or output can tell (see `_by_reads`).
    """
    if prev is None:
        return NEW_CASE, None
    if not _had_entry(stage, prev, writes):
        return NO_ENTRY, None
    if stage == "judgment" and judges:
        return "evaluator settings changed", judges
    if stage != "judgment" and changed.get(stage):
        return changed[stage], None
    digest, before = case.get("digest") or {}, prev.get("digest") or {}
    if stage == "judgment" and digest.get("expected") != before.get("expected"):
        return "expected changed", None
    if digest.get("input") != before.get("input"):
        return "input changed", None
    if stage in ("generate", "judgment"):
        return _READS, None
    return GONE, None


def _by_reads(
    stage: str, now: Mapping[str, str] | None, before: Mapping[str, str] | None, context_hint: str
) -> tuple[str, str | None]:
    now, before = now or {}, before or {}
    if stage == "judgment" and now.get("output") != before.get("output"):
        return "output changed", None
    if now.get("context") != before.get("context"):
        return "context changed", context_hint or None
    return GONE, None


def _stage(miss: int, counts: Counter[str], hints: Mapping[str, str]) -> dict[str, Any]:
    reasons = []
    for reason, n in sorted(counts.items(), key=lambda t: (-t[1], t[0])):
        entry: dict[str, Any] = {"reason": reason, "count": n}
        if hints.get(reason):
            entry["detail"] = hints[reason]
        reasons.append(entry)
    return {"miss": miss, "reasons": reasons}


def lines(misses: Mapping[str, Any] | None) -> list[str]:
    """`retrieve 13 miss: index_version kb-1 → kb-2 (13)` per stage, then `3 new cases`."""
    if not misses:
        return []
    if misses.get("note"):
        # a store's first run of a system: everything missed, nothing to say why (kept in the record)
        return [] if "previous_run" in misses and not misses.get("stages") else [f"Cache misses: {misses['note']}"]
    prev = misses.get("previous_run")
    head = f"Cache misses (against the previous run {prev}):" if prev else "Cache misses:"
    out = [head]
    for stage in STAGES:
        s = (misses.get("stages") or {}).get(stage)
        if not s:
            continue
        parts = [f"{r['reason']} ({r['count']}{'; ' + r['detail'] if r.get('detail') else ''})" for r in s["reasons"]]
        out.append(f"  {stage} {s['miss']} miss: {'; '.join(parts)}")
    n = int(misses.get("new_cases") or 0)
    if n:
        out.append(f"  {n} new case{'' if n == 1 else 's'}")
    return out


def pool(found: Iterable[Mapping[str, Any] | None]) -> dict[str, Any] | None:
    """The shards' reasons for their cache misses as one run's (`oloproof merge`): each shard explained its misses
    against the previous run in its own store, so the counts per stage and reason are summed, and a note or a
    previous run is kept only when the shards agree on it. None when no shard missed."""
    given = [m for m in found if m]
    if not given:
        return None
    out: dict[str, Any] = {"previous_run": None, "stages": {}, "new_cases": 0}
    previous = {m.get("previous_run") for m in given}
    if len(previous) == 1:
        out["previous_run"] = previous.pop()
    counts: dict[str, Counter[str]] = {}
    hints: dict[str, dict[str, str]] = {}
    misses: Counter[str] = Counter()
    for m in given:
        out["new_cases"] += int(m.get("new_cases") or 0)
        for stage, entry in (m.get("stages") or {}).items():
            misses[stage] += int(entry.get("miss", 0))
            for r in entry.get("reasons") or []:
                counts.setdefault(stage, Counter())[r["reason"]] += int(r["count"])
                if r.get("detail"):
                    hints.setdefault(stage, {}).setdefault(r["reason"], r["detail"])
    out["stages"] = {s: _stage(misses[s], counts.get(s, Counter()), hints.get(s, {})) for s in misses}
    notes = list(dict.fromkeys(str(m["note"]) for m in given if m.get("note")))
    if notes:
        out["note"] = "; ".join(notes)
    return out
