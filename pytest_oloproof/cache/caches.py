"""Stage caches on diskcache: JSON values, corrupt entries are misses, errors never stored."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_oloproof.errors import OloproofError
from pytest_oloproof.records import fastjson
from pytest_oloproof.records.redaction import redact

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


class CacheUnusable(OloproofError):
    """The cache folder cannot be opened or read (e.g. a corrupt cache.db): exit 2, with the fix."""


def _unwritable(folder: Path) -> str | None:
    """Why nothing can be created in `folder` (a read-only mount, no permission), or None: tried, not guessed."""
    import tempfile

    try:
        fd, probe = tempfile.mkstemp(prefix=".oloproof-probe.", dir=folder)
    except OSError as exc:
        return exc.strerror or str(exc)
    os.close(fd)
    os.unlink(probe)
    return None


def clear_command(directory: Path) -> str:
    """The exact command that resets the cache of the store holding `directory`."""
    import shlex

    return f"oloproof cache clear --store {shlex.quote(str(Path(directory).parent))}"


def parse_mode(value: str) -> CacheMode:
    try:
        return CacheMode(value)
    except ValueError:
        choices = "off, read, write, refresh (default: read and write)"
        raise ValueError(f"--oloproof-cache: {value!r} is not one of {choices}") from None


def open_diskcache(directory: Path) -> diskcache.Cache:
    """The diskcache under a store, opened with the same settings by every process that writes it."""
    import diskcache  # imported when a cache is first used, not with the plugin

    # cull_limit=0: nothing is ever evicted, so no eviction query on every write
    return diskcache.Cache(str(directory), size_limit=2**40, eviction_policy="none", cull_limit=0)


def write_group(cache: diskcache.Cache, group: Mapping[str, str]) -> None:
    """Commit a group of entries in one transaction: one SQLite commit for the group, not one per entry.

    Every entry goes through `Cache.set`, so diskcache keeps its own rows, counts and files
    (values of 32 KiB and up) whatever its version; `retry` waits out another process's write.
    """
    with cache.transact(retry=True):
        put = cache.set
        for full, text in group.items():
            put(full, text, retry=True)


class Caches:
    """All the caches in one diskcache directory, keys prefixed by kind.

    Writes inside `batch()` blocks are committed together at the end of the
    outermost block. A single-process session may `hold_writes()` to commit in
    larger groups instead (one diskcache transaction per group, fewer SQLite
    commits), and `track_keys()` so a lookup of a key that is not in the cache skips
    SQLite. Held writes are readable at once and committed by `flush()` or `close()`.
    """

    #: while keys are tracked, how often (seconds) a lookup of an absent key checks whether another
    #: process has written since: the entry count is one SQLite read
    RECHECK_S = 0.1

    def __init__(self, directory: Path | None, mode: CacheMode = CacheMode.READWRITE) -> None:
        self.directory = directory
        self.mode = mode if directory is not None else CacheMode.OFF  # (sets _reads and _writes)
        self._cache: diskcache.Cache | None = None
        self._lock = threading.RLock()
        self._local = threading.local()
        self._pending: dict[str, str] = {}  # full key -> entry text, not yet committed
        self._pending_since = 0.0
        self._hold: tuple[int, float] | None = None  # (max entries, max seconds) while holding writes
        self._known: set[int] | None = None  # hash() of every committed key in the cache, while tracked
        self._checked_at = 0.0  # when the entry count was last compared with `_known`
        self.aside: Path | None = None  # where `clear` moved an unreadable cache, when it did
        self.write_failure: str | None = None  # why writes stopped during the session, when they did

    @property
    def mode(self) -> CacheMode:
        return self._mode

    @mode.setter
    def mode(self, mode: CacheMode) -> None:
        # read on every lookup and write: plain booleans, not the enum's properties (a measurable cost at 10k cases)
        self._mode = mode
        self._reads = mode.reads
        self._writes = mode.writes

    def _open(self) -> diskcache.Cache:
        cache = self._cache
        if cache is not None:
            return cache
        with self._lock:
            if self._cache is None:
                assert self.directory is not None
                self._cache = open_diskcache(self.directory)
            return self._cache

    # ------------------------------------------------------------ options

    def hold_writes(self, max_entries: int = 4096, max_age_s: float = 1.0) -> None:
        """Commit writes in groups of up to `max_entries` or `max_age_s` seconds, not once per case.

        For one process that owns a session: other processes see the entries only
        once committed, and a process killed outright (not interrupted) loses at
        most the last group.
        """
        self._hold = (max(1, max_entries), max(0.0, max_age_s))

    def track_keys(self, limit: int = 200_000) -> bool:
        """Load which keys exist (when there are at most `limit`), so lookups of absent keys skip SQLite.

        Entries another process adds later are found: a lookup of an absent key
        compares the cache's entry count with the keys known (at most every
        RECHECK_S), and once another process has added entries every lookup
        goes to SQLite. Returns whether keys are tracked.
        """
        if self.directory is None or not self._reads:
            return False
        try:
            cache = self._open()
            if len(cache) > limit:
                return False
            known = self._key_hashes(cache)
        except Exception:
            return False
        with self._lock:
            self._known = known  # held writes join it when committed (until then they are read from memory)
            self._checked_at = time.monotonic()
        return True

    def _key_hashes(self, cache: diskcache.Cache) -> set[int]:
        """hash() of every key in the cache (diskcache iterates them by row, a hundred per query)."""
        return {hash(k) for k in cache}

    # ------------------------------------------------------------ entries

    def get(self, kind: str, key: str, *, bypass: bool = False) -> Any | None:
        """The stored value, or None on a miss; an unreadable entry is a miss."""
        if bypass or not self._reads:
            return None
        full = f"{kind}:{key}"
        raw = self._pending.get(full)  # written this session, not committed yet
        try:
            if raw is None:
                known = self._known
                if known is not None and hash(full) not in known and not self._others_wrote():
                    return None
                raw = self._open().get(full)
                if raw is None:
                    return None
            entry = fastjson.loads(raw)
            if entry.get("schema") != _SCHEMA or entry.get("kind") != kind:
                return None
            return entry["value"]
        except Exception:
            return None

    def put(self, kind: str, key: str, value: Any, *, bypass: bool = False, value_json: str | None = None) -> bool:
        """Store a value; False when nothing was stored (bypassed, a mode that keeps entries, not JSON).

        `value_json` is the value already serialised (e.g. by a contract check), so it is not encoded twice.
        """
        if bypass or not self._writes:
            return False
        full = f"{kind}:{key}"
        if self._mode is CacheMode.WRITE and self._exists(full):
            return False
        if value_json is not None:
            text = f'{{"schema":"{_SCHEMA}","kind":"{kind}","value":{value_json}}}'
        else:
            try:
                text = fastjson.dumps({"schema": _SCHEMA, "kind": kind, "value": value})
            except (TypeError, ValueError):
                return False  # not JSON: the contract check reports it; never store it
        text = redact(text)  # a stage's output or a judge's reply may echo a secret
        with self._lock:
            if self._hold is not None or self._depth():
                if not self._pending:
                    self._pending_since = time.monotonic()
                self._pending[full] = text
                return True
        try:
            self._open().set(full, text, retry=True)
        except Exception as exc:
            self._write_failed(exc)
            return False
        known = self._known
        if known is not None:
            known.add(hash(full))
        return True

    def _exists(self, full: str) -> bool:
        if full in self._pending:
            return True
        known = self._known
        if known is not None and hash(full) not in known and not self._others_wrote():
            return False
        return full in self._open()

    def _others_wrote(self) -> bool:
        """Whether another process added entries since the keys were loaded; if so, stop tracking them.

        Compares the cache's entry count with the keys known (every committed write of this session
        joins them), at most every RECHECK_S seconds; between checks, an absent key is a miss.
        """
        if time.monotonic() - self._checked_at < self.RECHECK_S:
            return False
        with self._lock:
            known = self._known
            if known is None:
                return True
            self._checked_at = time.monotonic()
            try:
                same = len(self._open()) == len(known)
            except Exception:
                same = False
            if not same:
                self._known = None  # from now on every lookup asks SQLite
            return not same

    def _depth(self) -> int:
        """How many batch() blocks this thread is in."""
        depth: int = getattr(self._local, "depth", 0)
        return depth

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Commit this thread's writes of the block together (one SQLite commit per case, not six).

        Only entries whose stage succeeded are ever put, so an exception in the block
        still stores what was put before it. Nested blocks join the outer one; while
        writes are held, the group is committed once it is big or old enough.
        """
        if not self._writes:
            yield
            return
        depth = self._depth()
        self._local.depth = depth + 1
        try:
            yield
        finally:
            self._local.depth = depth
            if depth == 0:
                self._commit(force=self._hold is None)

    def flush(self) -> None:
        """Commit every held write now."""
        self._commit(force=True)

    def _commit(self, force: bool) -> None:
        with self._lock:
            if self._pending and not force and self._hold is not None:
                max_entries, max_age = self._hold
                if len(self._pending) < max_entries and time.monotonic() - self._pending_since < max_age:
                    return
            if not self._pending:
                return
            group = self._pending
            try:
                write_group(self._open(), group)
            except Exception as exc:
                self._write_failed(exc)
                return
            if self._known is not None:
                self._known.update(hash(k) for k in group)
            self._pending = {}  # readable from memory until committed, then from the cache

    def _write_failed(self, exc: BaseException) -> None:
        """A write the cache refused (a full disk, a read-only folder): no more writes this session, no case fails.

        The entries not committed are dropped, so their stages are misses next time, never wrong
        values; `write_failure` says why, for the session's summary.
        """
        with self._lock:
            if self.write_failure is None:
                self.write_failure = f"{type(exc).__name__}: {exc}"
            self._pending = {}
            self._writes = False

    def unusable(self) -> str | None:
        """Why this cache cannot be used (None when it can): opened and read once, nothing written."""
        if self.directory is None or self.mode is CacheMode.OFF:
            return None
        try:
            cache = self._open()
            len(cache)
            cache.get("oloproof:probe")
        except Exception as exc:  # sqlite3.DatabaseError, OSError, diskcache's own errors
            self._discard()
            return f"{type(exc).__name__}: {exc}"
        return None

    def disable_if_unusable(self) -> str | None:
        """Turn the cache off when it cannot be used, so a run goes on uncached; returns why, or None."""
        reason = self.unusable()
        if reason is not None:
            self.mode = CacheMode.OFF
        return reason

    def _discard(self) -> None:
        """Forget an open cache without committing anything (it is unusable)."""
        with self._lock:
            cache, self._cache = self._cache, None
            self._pending = {}
        if cache is not None:
            try:
                cache.close()
            except Exception:
                pass

    def stats(self) -> dict[str, int]:
        """Entries per kind; CacheUnusable (with the command that fixes it) when the cache cannot be read."""
        if self.directory is None or not Path(self.directory).exists():
            return {k: 0 for k in KINDS}
        if not Path(self.directory).is_dir():
            raise CacheUnusable(f"{self.directory} is not a folder; {clear_command(self.directory)} replaces it")
        counts = {k: 0 for k in KINDS}
        try:
            for key in self._open().iterkeys():
                kind = str(key).split(":", 1)[0]
                if kind in counts:
                    counts[kind] += 1
        except Exception as exc:
            self._discard()
            raise CacheUnusable(
                f"the cache at {self.directory} is unusable ({type(exc).__name__}: {exc}); "
                f"reset it with: {clear_command(self.directory)}"
            ) from None
        return counts

    def clear(self) -> int | None:
        """Remove every entry (diskcache's own `clear`); the number removed, or None when it was set aside.

        Nothing is ever deleted wholesale. A cache whose folder cannot be written (a read-only
        mount, another user's files) or whose clearing fails for any reason but corruption is
        left exactly as it was: CacheUnusable names the folder and the cause (exit 2). Only a
        cache SQLite cannot read (a corrupt cache.db), or a file standing where the folder goes,
        is moved aside (see `set_aside`) and an empty cache made in its place.
        """
        import sqlite3

        if self.directory is None or not (Path(self.directory).exists() or Path(self.directory).is_symlink()):
            return 0
        path = Path(self.directory)
        problem = _unwritable(path if path.is_dir() else path.parent)
        if problem is not None:
            raise CacheUnusable(f"cannot clear the cache at {path}: {problem}; nothing was deleted")
        if path.is_dir():
            try:
                self.flush()
                with self._lock:
                    if self._known is not None:
                        self._known.clear()
                return int(self._open().clear(retry=True))
            except Exception as exc:
                self._discard()
                corrupt = isinstance(exc, sqlite3.DatabaseError) and not isinstance(exc, sqlite3.OperationalError)
                if not corrupt:  # readonly, locked, disk full, ...: not a reason to touch the files
                    raise CacheUnusable(
                        f"cannot clear the cache at {path} ({type(exc).__name__}: {exc}); nothing was deleted"
                    ) from None
        self.aside = self.set_aside()
        return None

    def set_aside(self) -> Path:
        """Move the unreadable cache folder (or a file in its place) aside and make an empty cache; returns where.

        Renamed, never deleted: it may be the only copy of results someone wants to look at. The
        new name is beside it, `cache.unreadable-<UTC time>`; delete it once it is not needed.
        """
        assert self.directory is not None
        path = Path(self.directory)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        aside = path.with_name(f"{path.name}.unreadable-{stamp}")
        n = 1
        while aside.exists() or aside.is_symlink():
            n += 1
            aside = path.with_name(f"{path.name}.unreadable-{stamp}-{n}")
        with self._lock:
            self._pending = {}
            if self._known is not None:
                self._known.clear()
            try:
                os.rename(path, aside)
                open_diskcache(path).close()
            except OSError as exc:
                raise CacheUnusable(f"cannot reset the cache at {path} ({exc.strerror or exc})") from None
        return aside

    def close(self) -> None:
        """Commit held writes and close the cache."""
        try:
            self.flush()
        finally:
            with self._lock:
                if self._cache is not None:
                    self._cache.close()
                    self._cache = None
