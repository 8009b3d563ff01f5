"""The live progress line of a run: counts of cases done, cache hits and errors, written at most every few seconds."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any


class Progress:
    """Counts for the live progress line: cases done, cache hits, errors, rate."""

    def __init__(self, total: int | None, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.total = total
        self.done = 0
        self.hits = 0
        self.errors = 0
        self._clock = clock
        self.started = clock()
        self._lock = threading.Lock()

    def add(self, rec: dict[str, Any]) -> None:
        with self._lock:
            self.done += 1
            self.hits += (rec.get("cache") or {}).get("execution") == "hit"
            self.errors += bool(rec.get("error"))

    def line(self) -> str:
        elapsed = max(self._clock() - self.started, 1e-9)
        total = "?" if self.total is None else str(self.total)
        return (
            f"oloproof: {self.done}/{total} cases · {self.hits} cache hits · "
            f"{self.errors} errors · {self.done / elapsed:.1f} cases/s"
        )


class ProgressDisplay:
    """Writes the progress line through `write`, at most every `every_s`, once the run has lasted `after_s`.

    Only the thread that owns the terminal calls `tick` (pytest's main thread). `write`
    returns False when it cannot write now (pytest is in the middle of a line); the
    display then tries again on the next tick instead of waiting out another interval.
    """

    def __init__(
        self,
        progress: Progress,
        write: Callable[[str], bool | None],
        *,
        every_s: float = 2.0,
        after_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.progress = progress
        self.write = write
        self.every_s = every_s
        self.after_s = after_s
        self._clock = clock
        self._last: float | None = None
        self.shown = 0

    def tick(self) -> None:
        now = self._clock()
        if now - self.progress.started < self.after_s:
            return
        if self._last is not None and now - self._last < self.every_s:
            return
        try:
            written = self.write(self.progress.line())
        except Exception:  # a closed or odd terminal must never fail the run
            written = True  # counted as shown: do not retry on every tick
        if written is False:
            return
        self._last = now
        self.shown += 1
