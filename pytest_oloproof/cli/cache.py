"""`oloproof cache stats|clear|export DIR|merge SOURCE…`: the store's cache, and carrying it between jobs."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_oloproof.errors import ExitCode

from . import core as cli

_PATHS = {"stats": (0, 0), "clear": (0, 0), "export": (1, 1), "merge": (1, None)}


def add_parser(sub: Any, common: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser(
        "cache",
        help="cache statistics, clearing, export to a folder, merging folders in",
        description="stats: entries per kind. clear: remove every entry. export DIR: write the cache's entries to "
        "a new cache folder DIR (for a CI artifact). merge SOURCE…: add the entries of exported cache folders or "
        "other stores to this store's cache; an entry present on both sides with other content is refused.",
    )
    p.add_argument("action", choices=list(_PATHS))
    p.add_argument("paths", nargs="*", metavar="PATH", help="export: the new folder; merge: one or more sources")
    common(p)


def cmd_cache(args: argparse.Namespace) -> int:
    from pytest_oloproof.cache.caches import Caches

    low, high = _PATHS[args.action]
    if not low <= len(args.paths) <= (high if high is not None else len(args.paths)):
        wanted = {"stats": "no path", "clear": "no path", "export": "one folder", "merge": "one or more sources"}
        raise cli.UsageError(f"oloproof cache {args.action} takes {wanted[args.action]}, got {len(args.paths)}")
    store = cli._store_from(args)
    if args.action == "export":
        return _export(args, store.cache_dir, Path(args.paths[0]))
    if args.action == "merge":
        return _merge(args, store.cache_dir)
    caches = Caches(store.cache_dir)
    try:
        if args.action == "clear":
            n = caches.clear()
            line = (
                f"cleared {n} entries from {store.cache_dir}"
                if n is not None
                else f"the cache at {store.cache_dir} was unreadable: moved it to {caches.aside} and created an "
                "empty one (delete that once you no longer need it)"
            )
            doc = {"cleared": n, "recreated": n is None, "directory": str(store.cache_dir)}
            if caches.aside is not None:
                doc["moved_to"] = str(caches.aside)
            cli._emit(args, doc, [line])
        else:
            counts = caches.stats()
            lines = [f"{store.cache_dir}"] + [f"  {k}: {v} entries" for k, v in counts.items()]
            cli._emit(args, {"directory": str(store.cache_dir), "entries": counts}, lines)
    finally:
        caches.close()
    return ExitCode.OK


def _kinds(added: dict[str, int]) -> str:
    return ", ".join(f"{kind} {n}" for kind, n in added.items())


def _export(args: argparse.Namespace, cache_dir: Path, target: Path) -> int:
    from pytest_oloproof.cache.transfer import export_to

    count = export_to(cache_dir, target)
    total = sum(count.added.values())
    doc = {"directory": str(cache_dir), "exported_to": str(target.resolve()), **count.to_json()}
    lines = [f"exported {total} entries from {cache_dir} to {target.resolve()} ({_kinds(count.added)})"]
    if count.skipped:
        lines.append(f"skipped {count.skipped} entries that are not readable Oloproof entries")
    cli._emit(args, doc, lines)
    return ExitCode.OK


def _merge(args: argparse.Namespace, cache_dir: Path) -> int:
    from pytest_oloproof.cache.transfer import cache_folder, merge_into

    folders = [cache_folder(Path(p)) for p in args.paths]
    counts = merge_into(cache_dir, folders, shown=list(args.paths))
    lines = []
    for c in counts:
        lines.append(
            f"{c.source}: added {sum(c.added.values())} ({_kinds(c.added)}); {c.present} already present"
            + (f"; {c.updated} execution entries gained verdicts" if c.updated else "")
            + (f"; skipped {c.skipped} unreadable" if c.skipped else "")
        )
    lines.append(f"merged into {cache_dir}")
    cli._emit(args, {"directory": str(cache_dir), "sources": [c.to_json() for c in counts]}, lines)
    return ExitCode.OK


SUBCOMMAND = cli.Subcommand("cache", add_parser, cmd_cache)
