"""Carrying caches between jobs: export a store's cache to a folder, merge cache folders into a store's cache.

Keys hash the identity of what was computed (§5), so the union of two caches is a cache: an entry present
on both sides must hold the same content. One that does not is refused, naming the key, before anything is
written. Only diskcache's public API is used (iterkeys, get, set in transactions).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_oloproof.errors import OloproofError
from pytest_oloproof.records import fastjson

from .caches import _SCHEMA, KINDS, CacheUnusable, open_diskcache, write_group
from .execution_entry import VERDICTS

if TYPE_CHECKING:
    import diskcache

_DB = "cache.db"  # the file diskcache keeps its index in: what makes a folder a cache folder
_GROUP = 1000  # entries per transaction when writing


class CacheConflict(OloproofError):
    """The same key holds different content in two caches: refused (exit 2), nothing merged."""


@dataclass
class SourceCount:
    """What merging one source did: entries added, already there, updated (verdicts joined), skipped."""

    source: str
    added: dict[str, int] = field(default_factory=lambda: {k: 0 for k in KINDS})
    present: int = 0  # already in the target with the same content
    updated: int = 0  # execution entries whose filed verdicts were joined with the target's
    skipped: int = 0  # not an Oloproof entry, or unreadable (a miss anyway)

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "added": dict(self.added),
            "added_total": sum(self.added.values()),
            "already_present": self.present,
            "updated": self.updated,
            "skipped": self.skipped,
        }


def cache_folder(path: Path) -> Path:
    """The cache folder `path` names: an exported cache folder (holding cache.db) or a store (cache/cache.db).

    Raises CacheUnusable naming the path when it is neither; never creates anything there.
    """
    path = Path(path)
    if (path / _DB).is_file():
        return path
    if (path / "cache" / _DB).is_file():
        return path / "cache"
    if not path.exists():
        raise CacheUnusable(f"{path} does not exist")
    raise CacheUnusable(
        f"{path} is neither a cache folder (with {_DB}) nor a store (with cache/{_DB}); "
        "give a folder `oloproof cache export` wrote, or a store folder"
    )


def _parse(raw: Any, kind: str) -> Any:
    """The entry's value, or None when it is not a readable Oloproof entry of `kind`."""
    if not isinstance(raw, str):
        return None
    try:
        entry = fastjson.loads(raw)
    except Exception:
        return None
    if not isinstance(entry, dict) or entry.get("schema") != _SCHEMA or entry.get("kind") != kind:
        return None
    return entry


def _verdicts(entry: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """An execution entry split into what its key determines and the verdict bundles filed in it since."""
    value = dict(entry["value"]) if isinstance(entry.get("value"), dict) else {}
    bundles = value.pop(VERDICTS, None)
    return value, dict(bundles) if isinstance(bundles, dict) else {}


def _same_bundle(a: Any, b: Any) -> bool:
    """Two filed verdict bundles agree on their verdicts (what producing them cost may be recorded differently)."""
    if not (isinstance(a, dict) and isinstance(b, dict)):
        return bool(a == b)
    return {k: v for k, v in a.items() if k != "usage"} == {k: v for k, v in b.items() if k != "usage"}


def _join(kind: str, mine: dict[str, Any], theirs: dict[str, Any]) -> dict[str, Any] | bool | None:
    """`mine` joined with `theirs`: True when equal, a new entry when verdicts were joined, None on a conflict."""
    if kind != "execution":
        return True if mine == theirs else None
    base, bundles = _verdicts(mine)
    other_base, other_bundles = _verdicts(theirs)
    if base != other_base:
        return None
    new = {}
    for bundle_id, bundle in other_bundles.items():
        if bundle_id not in bundles:
            new[bundle_id] = bundle
        elif not _same_bundle(bundles[bundle_id], bundle):
            return None
    if not new:
        return True
    return {**mine, "value": {**base, VERDICTS: {**bundles, **new}}}


def _keys(cache: diskcache.Cache) -> Iterator[str]:
    for key in cache.iterkeys():
        if isinstance(key, str):
            yield key


def merge_into(target: Path, sources: Sequence[Path], *, shown: Sequence[str] | None = None) -> list[SourceCount]:
    """Add the entries of the cache folders `sources` to the cache at `target` (created when absent).

    Every source is compared with the target and the sources before it first; a key whose content differs
    raises CacheConflict and nothing is written. `shown` are the names the messages use for the sources.
    """
    names = list(shown) if shown is not None else [str(s) for s in sources]
    target = Path(target)
    for src, name in zip(sources, names, strict=True):
        if target.exists() and os.path.samefile(src, target):
            raise CacheUnusable(f"{name} is this store's own cache ({target}); nothing to merge")
    opened: list[diskcache.Cache] = []
    try:
        try:
            dst = open_diskcache(target)
            opened.append(dst)
            srcs = []
            for src in sources:
                srcs.append(open_diskcache(src))
                opened.append(srcs[-1])
        except Exception as exc:
            raise CacheUnusable(f"cannot open a cache ({type(exc).__name__}: {exc})") from None
        counts = [SourceCount(name) for name in names]
        plan: dict[str, tuple[int, dict[str, Any] | None]] = {}  # key -> (source, joined entry or None: as is)
        for i in range(len(srcs)):
            try:
                _plan_source(i, srcs, dst, plan, counts, names)
            except CacheConflict:
                raise
            except Exception as exc:
                raise CacheUnusable(
                    f"cannot read the cache {names[i]} ({type(exc).__name__}: {exc}); nothing was merged"
                ) from None
        try:
            _write(dst, ((k, srcs[i], entry) for k, (i, entry) in plan.items()))
        except Exception as exc:
            raise CacheUnusable(f"cannot write the cache at {target} ({type(exc).__name__}: {exc})") from None
        return counts
    finally:
        for cache in opened:
            cache.close()


def _plan_source(
    i: int,
    srcs: Sequence[diskcache.Cache],
    dst: diskcache.Cache,
    plan: dict[str, tuple[int, dict[str, Any] | None]],
    counts: list[SourceCount],
    names: Sequence[str],
) -> None:
    """What source `i` adds or updates; CacheConflict for a key whose content differs from an earlier copy."""
    count, src = counts[i], srcs[i]
    for key in _keys(src):
        kind = key.split(":", 1)[0]
        entry = _parse(src.get(key), kind) if kind in KINDS else None
        if entry is None:
            count.skipped += 1
            continue
        planned = plan.get(key)
        if planned is not None:
            mine, where = planned[1] or _parse(srcs[planned[0]].get(key), kind), names[planned[0]]
        else:
            mine, where = _parse(dst.get(key), kind), "this store's cache"
        if mine is None:
            plan[key] = (i, None)
            count.added[kind] += 1
            continue
        joined = _join(kind, mine, entry)
        if joined is None:
            raise CacheConflict(
                f"cache entry {key} differs between {where} and {names[i]}; nothing was merged. An entry's key "
                "hashes everything that produced it, so the copies should be identical: one is corrupt, or the "
                "stage gave another result for the same inputs (code changed without a `version` bump, or a model "
                "that is not deterministic). Merge without the source at fault, or clear that cache "
                "(`oloproof cache clear --store …`)"
            )
        if joined is True:
            count.present += 1
        else:
            assert isinstance(joined, dict)
            plan[key] = (planned[0] if planned is not None else i, joined)
            count.updated += 1


def _write(dst: diskcache.Cache, entries: Iterable[tuple[str, diskcache.Cache, dict[str, Any] | None]]) -> None:
    """Write the planned entries: joined ones serialised, the others copied as their source holds them."""
    group: dict[str, str] = {}
    for key, src, entry in entries:
        group[key] = fastjson.dumps(entry) if entry is not None else src.get(key)
        if len(group) >= _GROUP:
            write_group(dst, group)
            group = {}
    if group:
        write_group(dst, group)


def export_to(cache_dir: Path, target: Path) -> SourceCount:
    """Write every entry of the cache at `cache_dir` to the new cache folder `target` (absent or empty)."""
    target = Path(target)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise CacheUnusable(
            f"{target} {'is not a folder' if not target.is_dir() else 'is not empty'}; export writes a new "
            "cache folder: give a path that does not exist yet (or an empty folder)"
        )
    if not (Path(cache_dir) / _DB).is_file():
        target.mkdir(parents=True, exist_ok=True)
        open_diskcache(target).close()  # an empty cache is still a cache another store can merge
        return SourceCount(str(cache_dir))
    return merge_into(target, [Path(cache_dir)], shown=[str(cache_dir)])[0]
