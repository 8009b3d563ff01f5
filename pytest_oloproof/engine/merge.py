"""`oloproof merge`: the runs of a sharded evaluation (`--oloproof-shard I/N`) pooled into one complete run.

The shards must agree on everything that makes runs comparable and together hold the planned case set exactly
once; their per-case records are then recorded again, in the planned order, through the same `RunRecorder` a
single job records with, so every aggregate, interval, slice and digest is computed by the same code from the
same cases. Averaging the shards' metrics instead would give intervals about √N too wide.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_oloproof.cache.miss_reasons import pool as pool_misses
from pytest_oloproof.errors import ExitCode, OloproofError
from pytest_oloproof.records.identity import case_set_digest, sha256_of
from pytest_oloproof.records.shapes import CaseRecord, RunRecord
from pytest_oloproof.store.files import RunFolder, Store

from .recorder import RunRecorder


class MergeError(OloproofError):
    """The shards cannot be merged (they disagree, overlap or leave cases out): exit 2, nothing is stored."""

    exit_code = ExitCode.USAGE


@dataclass(frozen=True)
class ShardRun:
    """One shard's run as found in a SOURCE: where it came from, how to read it, and its run.json."""

    source: Path
    store: Store
    run_id: str
    header: RunRecord

    @property
    def name(self) -> str:
        shard = self.header.get("shard") or {}
        which = f"shard {shard.get('index')}/{shard.get('count')}" if shard else "run"
        return f"{which} (run {self.run_id}, from {self.source})"

    def cases(self) -> Iterable[CaseRecord]:
        return self.store.iter_cases(self.run_id, header=self.header)


def _field(name: str, get: Callable[[Mapping[str, Any]], Any]) -> tuple[str, Callable[[Mapping[str, Any]], Any]]:
    return name, get


#: what the shards must agree on: what makes runs comparable, and the sharding itself
AGREE = (
    _field("oloproof_version", lambda h: h.get("oloproof_version")),
    _field("purpose", lambda h: h.get("purpose", "run")),
    _field("system", lambda h: h.get("system")),
    _field("evaluators", lambda h: h.get("evaluators")),
    _field("labels", lambda h: h.get("labels")),
    _field("seed", lambda h: h.get("seed")),
    _field("confidence", lambda h: h.get("confidence")),
    _field("slices", lambda h: _slice_names(h)),
    _field("min_slice_support", lambda h: h.get("min_slice_support")),
    _field("cache_mode", lambda h: h.get("cache_mode")),
    _field("pricing", lambda h: h.get("pricing")),
    _field("budget limits", lambda h: _limits(h)),
    _field("config", lambda h: h.get("config")),  # oloproof.yaml as read (after the settings it gives above)
    _field("shard.count", lambda h: (h.get("shard") or {}).get("count")),
    _field("planned.case_set_digest", lambda h: (h.get("planned") or {}).get("case_set_digest")),
    _field("planned.cases", lambda h: (h.get("planned") or {}).get("cases")),
)

#: keys of a shard's run.json that are its own (or computed from its cases), never carried into the merged run
OWN_KEYS = frozenset(
    {
        "schema",
        "run_id",
        "status",
        "finished_at",
        "shard",
        "planned",
        "metrics",
        "slices",
        "cache",
        "cache_misses",
        "usage",
        "budget",
        "counts",
        "case_set_digest",
        "note",
    }
)


def _slice_names(header: Mapping[str, Any]) -> list[str]:
    """The slices a run was configured with (its finished run.json holds the computed rows instead)."""
    return list((header.get("config") or {}).get("slices") or [])


def _limits(header: Mapping[str, Any]) -> dict[str, Any] | None:
    budget = header.get("budget")
    if not budget:
        return None
    return {"max_cost": budget.get("max_cost"), "max_judge_calls": budget.get("max_judge_calls")}


def _differing_keys(a: Any, b: Any) -> str:
    """Which keys of oloproof.yaml differ (their values may be long, or secrets spelled `${VAR}`)."""
    if not isinstance(a, Mapping) or not isinstance(b, Mapping):
        return f"{_preview(b)} vs {_preview(a)}"
    keys = sorted(k for k in set(a) | set(b) if sha256_of(a.get(k)) != sha256_of(b.get(k)))
    return f"oloproof.yaml differs in {', '.join(keys)}"


def _preview(value: Any, limit: int = 120) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def find_shard_runs(source: Path) -> list[ShardRun]:
    """The shard runs a SOURCE holds: a run folder (run.json and cases.jsonl), or a store folder (its runs of
    `--oloproof-shard`). Raises MergeError when it is neither, or holds none."""
    source = Path(source)
    if (source / "run.json").is_file():
        folder = RunFolder(source)
        try:
            run_id = str(json.loads((source / "run.json").read_text(encoding="utf-8")).get("run_id"))
        except (OSError, ValueError, AttributeError):
            run_id = source.name  # run_header says what is wrong with it
        return [ShardRun(source, folder, run_id, folder.run_header(run_id))]
    if not source.is_dir():
        raise MergeError(f"{source}: no such folder; give a store folder or a run folder (one holding run.json)")
    store = Store(source)
    if not (source / "runs").is_dir():
        raise MergeError(
            f"{source}: neither a run folder (no run.json) nor a store folder (no runs/); give the folder a shard's "
            "run was stored in, or the run's own folder"
        )
    found = []
    for run_id in store.run_ids():
        header = store.run_header(run_id)
        if header.get("shard") is not None:
            found.append(ShardRun(source, store, run_id, header))
    if not found:
        raise MergeError(
            f"{source}: the store holds no shard's run (none recorded with --oloproof-shard I/N); "
            "run each shard with `pytest --oloproof --oloproof-shard I/N`, then merge their stores or run folders"
        )
    return sorted(found, key=lambda s: s.run_id)


def check_shards(shards: Sequence[ShardRun]) -> list[ShardRun]:
    """The shards in shard order, once every check passed (MergeError naming the shard and the field otherwise)."""
    for s in shards:
        if s.header.get("shard") is None:
            raise MergeError(
                f"{s.name} is not a shard's run (it was not recorded with --oloproof-shard I/N; status "
                f"{s.header.get('status')}): `oloproof merge` pools the runs of every shard of one evaluation"
            )
        if s.header.get("status") != "partial":
            raise MergeError(
                f"{s.name} is {s.header.get('status')}: it stopped before every case of its shard ran; "
                "run that shard again and merge its new run"
            )
    first = shards[0]
    for s in shards[1:]:
        for name, get in AGREE:
            a, b = get(first.header), get(s.header)
            if a != b:
                shown = _differing_keys(a, b) if name == "config" else f"{_preview(b)} vs {_preview(a)}"
                raise MergeError(
                    f"{s.name} differs from {first.name} in {name}: {shown}; merge the shards "
                    "of one evaluation (same Oloproof version, system, evaluators, config, seed and case set)"
                )
    count = int(first.header["shard"]["count"])
    by_index: dict[int, ShardRun] = {}
    for s in shards:
        index = int(s.header["shard"]["index"])
        if index in by_index:
            raise MergeError(
                f"shard {index}/{count} is given twice: {by_index[index].name} and {s.name}; "
                "give each shard's run once (name run folders when a store holds several)"
            )
        by_index[index] = s
    missing = [i for i in range(1, count + 1) if i not in by_index]
    if missing:
        shown = ", ".join(f"{i}/{count}" for i in missing)
        raise MergeError(
            f"shard{'s' if len(missing) > 1 else ''} {shown} missing: {len(by_index)} of {count} shards given; "
            "give the store or run folder of every shard"
        )
    return [by_index[i] for i in range(1, count + 1)]


def pool_cases(shards: Sequence[ShardRun]) -> dict[str, CaseRecord]:
    """Every shard's case records by id: disjoint, inside the planned set, and together the whole of it."""
    planned: list[str] = list(shards[0].header["planned"]["cases"])
    wanted = set(planned)
    pooled: dict[str, CaseRecord] = {}
    owner: dict[str, ShardRun] = {}
    for s in shards:
        for rec in s.cases():
            cid = rec["id"]
            if cid in owner:
                raise MergeError(
                    f"case {cid!r} is in {owner[cid].name} and in {s.name}: shards must not overlap; "
                    "run every shard with the same N (--oloproof-shard I/N)"
                )
            if cid not in wanted:
                raise MergeError(f"{s.name} recorded case {cid!r}, which is not in the planned case set")
            owner[cid] = s
            pooled[cid] = rec
    left = [cid for cid in planned if cid not in pooled]
    if left:
        shown = ", ".join(left[:5]) + (f" and {len(left) - 5} more" if len(left) > 5 else "")
        raise MergeError(
            f"{len(left)} case(s) of the planned set are in no shard's run ({shown}): the shards' union must be the "
            "planned set (a -k or -m selection, or an interrupted shard, leaves cases out); run those shards again"
        )
    digest = case_set_digest([pooled[cid] for cid in planned])
    if digest != shards[0].header["planned"]["case_set_digest"]:
        raise MergeError(
            f"the shards' cases hold other input or expected data than the planned set (case-set digest {digest} vs "
            f"{shards[0].header['planned']['case_set_digest']}); run every shard on the same case files"
        )
    return pooled


def merge_runs(shards: Sequence[ShardRun], store: Store) -> RunRecord:
    """Check the shards, pool their cases and record the merged `complete` run in `store` (what a single job
    would have recorded, plus `merged_from`); nothing is written when a check fails."""
    ordered = check_shards(shards)
    pooled = pool_cases(ordered)
    first = ordered[0].header
    header = {k: v for k, v in first.items() if k not in OWN_KEYS}
    header["slices"] = _slice_names(first)
    limits = _limits(first)
    if limits is not None:
        header["budget"] = limits
    starts = [s.header.get("started_at") for s in ordered if s.header.get("started_at")]
    if starts:
        header["started_at"] = min(str(t) for t in starts)
    merged_from = [s.run_id for s in ordered]
    recorder = RunRecorder(store, header)
    try:
        for cid in first["planned"]["cases"]:
            recorder.add(dict(pooled[cid]))
        extra: dict[str, Any] = {"evaluators": header.get("evaluators", []), "merged_from": merged_from}
        misses = pool_misses(s.header.get("cache_misses") for s in ordered)
        if misses is not None:
            extra["cache_misses"] = misses
        return recorder.finish("complete", extra, explain=False)
    finally:
        recorder.close()
