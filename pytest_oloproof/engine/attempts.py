"""One attempt of a case against its deadline, and which normal cases of a run completed.

A timed-out attempt cannot always be stopped (a sync stage in a thread runs on), so its
cache writes go through an `AttemptDeadline`: after the deadline it writes nothing, and only an
attempt that committed in time counts. A `CompletionLedger` decides, under one lock with the
execution entries, which cases of an interrupted run completed.
"""

from __future__ import annotations

import asyncio
import threading
import time
import weakref
from collections.abc import Coroutine
from typing import Any

from pytest_oloproof.cache.caches import Caches


class AttemptDeadline:
    """Cache writes of one attempt that may be abandoned by a timeout (§11).

    Every write and the abandonment take one lock, so an attempt either commits
    its result before the deadline decision or writes nothing after it.
    """

    __slots__ = ("abandoned", "committed", "deadline", "lock")

    def __init__(self, deadline: float | None = None) -> None:
        self.lock = threading.Lock()
        self.abandoned = False
        self.committed = False
        self.deadline = deadline  # time.monotonic() past which nothing of the attempt is used

    def _past(self) -> bool:
        """Abandoned, or past the deadline (which abandons it); call with the lock held."""
        if not self.abandoned and self.deadline is not None and time.monotonic() > self.deadline:
            self.abandoned = True
        return self.abandoned

    def put(self, caches: Caches, kind: str, key: str, value: Any, bypass: bool, value_json: str | None = None) -> None:
        with self.lock:
            if not self._past():
                caches.put(kind, key, value, bypass=bypass, value_json=value_json)

    def commit(self, caches: Caches, ekey: str, value: Any, bypass: bool) -> bool:
        """Write the execution entry (when there is one) unless abandoned; whether it was stored."""
        with self.lock:
            if self._past():
                return False
            stored = value is not None and caches.put("execution", ekey, value, bypass=bypass)
            self.committed = True
            return stored

    def abandon(self) -> bool:
        """Give up on the attempt; False when it already committed (its result stands)."""
        with self.lock:
            if self.committed:
                return False
            self.abandoned = True
            return True

    def late(self) -> bool:
        """Whether the attempt's result must not be used: it did not commit before its deadline."""
        with self.lock:
            return not self.committed and self._past()


class CompletionLedger:
    """Which normal cases of a run completed, decided under one lock with their execution entries.

    A case counts as completed when its execution entry is written (or it was a
    cache hit, or ended in an error). Once an interrupted session closes the ledger,
    no case commits any more, so its incomplete record holds exactly the completed
    cases, which are exactly what the next run finds in the cache.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.closed = False
        self.done: dict[str, dict[str, Any]] = {}  # case id -> its record, until the session records it

    def forget(self, case_id: str) -> None:
        """The session recorded this case (so memory stays bounded)."""
        with self.lock:
            self.done.pop(case_id, None)

    def close(self) -> dict[str, dict[str, Any]]:
        """No case completes from now on; the completed cases not yet recorded."""
        with self.lock:
            self.closed = True
            return dict(self.done)


def run_attempt_in_thread(run: Any, deadline: AttemptDeadline, timeout_s: float, name: str) -> dict[str, Any] | None:
    """Run `run(deadline)` in a daemon thread; None when it did not finish (commit) within `timeout_s`.

    A thread cannot be stopped, so the abandoned attempt runs on; its deadline makes
    sure it writes nothing to the cache after that, and the execution entry (the one
    that says "this case succeeded") is written only by an attempt that finished in time.
    """
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["rec"] = run(deadline)
        except BaseException as exc:  # handed to the caller's thread
            box["exc"] = exc

    t = threading.Thread(target=target, name=name, daemon=True)
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        if deadline.abandon():
            return None
        t.join()  # it committed at the deadline; only its return is left
    if "exc" in box:
        raise box["exc"]
    if deadline.late():  # finished, but after the deadline: its result is never used
        return None
    return box["rec"]  # type: ignore[no-any-return]


def run_inline(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine that never suspends (the driver with every stage called in this thread) to its end."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise RuntimeError("an inline attempt suspended: it awaited something other than a stage called inline")


#: tasks Oloproof itself cancelled (the run stopping): Python 3.10 has no `Task.cancelling()` to ask
_CANCELLED_BY_OLOPROOF: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()


def cancel_task(task: asyncio.Task[Any]) -> None:
    """Cancel a case's task and remember that Oloproof did, so its CancelledError is not the stage's error."""
    _CANCELLED_BY_OLOPROOF.add(task)
    task.cancel()


def cancelled_from_outside(deadline: AttemptDeadline | None = None) -> bool:
    """Whether a CancelledError is the current task being cancelled (not one a stage raised itself).

    Python 3.11+ asks the task (`cancelling()`). Python 3.10 cannot, so there the cancellations
    Oloproof makes are known instead: the run stopping (`cancel_task`) and the case's timeout
    (`wait_for` fires once the attempt's deadline has passed).
    """
    try:
        task = asyncio.current_task()
    except RuntimeError:
        return True
    if task is None:
        return True
    cancelling = getattr(task, "cancelling", None)
    if cancelling is not None:
        return bool(cancelling())
    if task in _CANCELLED_BY_OLOPROOF:
        return True
    return deadline is not None and deadline.deadline is not None and time.monotonic() >= deadline.deadline
