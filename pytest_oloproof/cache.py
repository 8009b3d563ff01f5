"""Stage caches on diskcache (SPEC §5): JSON values, corrupt entries are misses, errors never stored."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import diskcache


KINDS = ("execution", "retrieve", "generate", "judgment")
_SCHEMA = "oloproof.cache/1"


class CacheMode(str, Enum):
    """How a run uses the cache; the default reads and writes."""

    READWRITE = "readwrite"
    OFF = "off"  # neither read nor write
    READ = "read"  # reuse what is there, add nothing (e.g. CI on a shared cache)
    WRITE = "write"  # never reuse; store new results, keep existing entries
    REFRESH = "refresh"  # never reuse; overwrite entries with fresh results

    @property
    def reads(self) -> bool:
        return self in (CacheMode.READWRITE, CacheMode.READ)

    @property
    def writes(self) -> bool:
        return self in (CacheMode.READWRITE, CacheMode.WRITE, CacheMode.REFRESH)


def parse_mode(value: str) -> CacheMode:
    try:
        return CacheMode(value)
    except ValueError:
        choices = "off, read, write, refresh (default: read and write)"
        raise ValueError(f"--oloproof-cache: {value!r} is not one of {choices}") from None


class Caches:
    """All four caches in one diskcache directory, keys prefixed by kind."""

    def __init__(self, directory: Path | None, mode: CacheMode = CacheMode.READWRITE) -> None:
        self.directory = directory
        self.mode = mode if directory is not None else CacheMode.OFF
        self._cache: diskcache.Cache | None = None
        self._lock = threading.Lock()
        self._local = threading.local()

    def _open(self) -> diskcache.Cache:
        with self._lock:
            if self._cache is None:
                assert self.directory is not None
                import diskcache  # imported when a cache is first used, not with the plugin

                self._cache = diskcache.Cache(str(self.directory), size_limit=2**40, eviction_policy="none")
            return self._cache

    def get(self, kind: str, key: str, *, bypass: bool = False) -> Any | None:
        """The stored value, or None on a miss; an unreadable entry is a miss."""
        if bypass or not self.mode.reads:
            return None
        try:
            raw = self._open().get(f"{kind}:{key}")
            if raw is None:
                return None
            entry = json.loads(raw)
            if entry.get("schema") != _SCHEMA or entry.get("kind") != kind:
                return None
            return entry["value"]
        except Exception:
            return None

    def put(self, kind: str, key: str, value: Any, *, bypass: bool = False) -> None:
        if bypass or not self.mode.writes:
            return
        cache = self._open()
        full = f"{kind}:{key}"
        if self.mode is CacheMode.WRITE and full in cache:
            return
        try:
            text = json.dumps({"schema": _SCHEMA, "kind": kind, "value": value}, allow_nan=False)
        except (TypeError, ValueError):
            return  # not JSON: the contract check reports it; never store it
        pending = getattr(self._local, "pending", None)
        if pending is not None:
            pending.append((full, text))
        else:
            cache.set(full, text)

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Store this thread's writes of the block in one transaction (one SQLite commit per case, not six).

        Only entries whose stage succeeded are ever put, so an exception in the block
        still stores what was put before it. Nested blocks join the outer one.
        """
        if getattr(self._local, "pending", None) is not None or not self.mode.writes:
            yield
            return
        self._local.pending = []
        try:
            yield
        finally:
            pending, self._local.pending = self._local.pending, None
            if pending:
                cache = self._open()
                with cache.transact(retry=True):
                    for full, text in pending:
                        cache.set(full, text, retry=True)

    def stats(self) -> dict[str, int]:
        if self.directory is None or not Path(self.directory).exists():
            return {k: 0 for k in KINDS}
        counts = {k: 0 for k in KINDS}
        for key in self._open().iterkeys():
            kind = str(key).split(":", 1)[0]
            if kind in counts:
                counts[kind] += 1
        return counts

    def clear(self) -> int:
        if self.directory is None or not Path(self.directory).exists():
            return 0
        return int(self._open().clear())

    def close(self) -> None:
        with self._lock:
            if self._cache is not None:
                self._cache.close()
                self._cache = None
