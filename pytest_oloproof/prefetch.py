"""Executing cases ahead of the pytest items (SPEC §11): worker threads, or one event loop for async systems.

The prefetcher runs cases in item order, at most `concurrency` at once and at
most `window` ahead of the item that last asked for its result, so memory stays
bounded however many cases there are. Items take their record when it is ready.
On interruption it stops taking new cases; what finished stays in the cache.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import CancelledError, Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from .cases import Case
from .execute import NORMAL, Engine, cancel_task

#: How often (seconds) a waiting item wakes up to refresh the progress display.
POLL_S = 0.25
#: Returned by Prefetcher._take when no case is left to start.
DONE = object()


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


class Prefetcher:
    """Runs cases concurrently in item order; items take their result when it is ready."""

    def __init__(
        self,
        engine: Engine,
        cases: Sequence[Case],
        concurrency: int,
        *,
        use_async: bool = False,
        progress: Progress | None = None,
        window: int | None = None,
    ) -> None:
        self.engine = engine
        self.cases = list(cases)
        self.concurrency = max(1, concurrency)
        self.use_async = use_async
        self.progress = progress or Progress(len(self.cases))
        self.window = window if window is not None else max(64, 8 * self.concurrency)
        self._index = {c.id: i for i, c in enumerate(self.cases)}
        self._futures: dict[str, Future[dict[str, Any]]] = {c.id: Future() for c in self.cases}
        self._cond = threading.Condition()
        self._next = 0  # next case to start
        self._limit = min(self.window, len(self.cases))  # cases before this index may start
        self._running = 0
        self._stopping = False
        self._threads: list[threading.Thread] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._draining = False  # the loop's cases are done; only its executor's shutdown is left

    # ------------------------------------------------------------ starting

    def start(self) -> None:
        if self.use_async:
            t = threading.Thread(target=self._run_loop, name="oloproof-loop", daemon=True)
            self._threads.append(t)
            t.start()
            return
        # Daemon threads: an interrupted session leaves without waiting for a stuck system call.
        for n in range(min(self.concurrency, len(self.cases))):
            t = threading.Thread(target=self._worker, name=f"oloproof-{n}", daemon=True)
            self._threads.append(t)
            t.start()

    def _take(self, block: bool = True) -> Case | object | None:
        """The next case to start; None if none may start now (non-blocking); DONE when nothing is left."""
        with self._cond:
            while True:
                if self._stopping or self._next >= len(self.cases):
                    return DONE
                if self._next < self._limit and (block or self._running < self.concurrency):
                    case = self.cases[self._next]
                    self._next += 1
                    if not self._futures[case.id].set_running_or_notify_cancel():
                        continue
                    self._running += 1
                    return case
                if not block:
                    return None
                self._cond.wait()

    def _finish(self, case: Case, rec: dict[str, Any] | None, exc: BaseException | None) -> None:
        fut = self._futures.get(case.id)
        if rec is not None:
            self.progress.add(rec)
        if fut is not None and not fut.done():  # before the count drops: stop() then sees every result
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(rec)  # type: ignore[arg-type]
        with self._cond:
            self._running -= 1
            self._cond.notify_all()

    def _worker(self) -> None:
        while True:
            case = self._take()
            if not isinstance(case, Case):
                return
            try:
                rec = self.engine.execute(case, NORMAL)
            except BaseException as exc:  # an Oloproof bug: the item re-raises it
                self._finish(case, None, exc)
            else:
                self._finish(case, rec, None)

    def _run_loop(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._amain())
        except asyncio.CancelledError:  # stop() cancelled everything
            pass
        finally:
            self._draining = True  # set on the loop's thread, so a later stop() cannot cancel the shutdown
            try:
                loop.run_until_complete(loop.shutdown_default_executor())
            finally:
                loop.close()

    async def _amain(self) -> None:
        async def one(case: Case) -> None:
            try:
                rec = await self.engine.aexecute(case, NORMAL)
            except asyncio.CancelledError:
                self._finish(case, None, CancelledError())
                raise
            except BaseException as exc:
                self._finish(case, None, exc)
            else:
                self._finish(case, rec, None)

        tasks: set[asyncio.Task[None]] = set()
        while True:
            case = self._take(block=False)
            if case is DONE:
                break
            if not isinstance(case, Case):  # concurrency or window full: let running cases progress
                await asyncio.sleep(0.002)
                continue
            task = asyncio.get_running_loop().create_task(one(case))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    # ------------------------------------------------------------ items

    def has(self, case_id: str) -> bool:
        return case_id in self._futures

    def result(self, case_id: str, tick: Callable[[], None] | None = None) -> dict[str, Any]:
        """The record of a case (waiting for it), then forgotten here: the item owns it now."""
        fut = self._futures[case_id]
        with self._cond:
            self._limit = max(self._limit, min(self._index[case_id] + 1 + self.window, len(self.cases)))
            self._cond.notify_all()
        while True:
            try:
                rec = fut.result(timeout=POLL_S)
                break
            except FutureTimeout:
                if tick is not None:
                    tick()
        del self._futures[case_id]
        return rec

    # ------------------------------------------------------------ stopping

    def stop(self, grace_s: float = 0.0) -> None:
        """Start no new case; wait up to `grace_s` for running ones (sync), cancel them (async)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        for fut in list(self._futures.values()):
            fut.cancel()  # only cases not started yet can be cancelled
        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._cancel_running, loop)
            except RuntimeError:
                pass
        deadline = time.monotonic() + grace_s
        with self._cond:
            while self._running > 0 and time.monotonic() < deadline:
                self._cond.wait(min(0.05, max(deadline - time.monotonic(), 0.0)))

    def _cancel_running(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the loop's thread: cancel the running cases, but never the default executor's shutdown.

        Work a system left in the loop's default executor (langchain-core's async path runs sync
        code there) keeps that shutdown waiting; cancelling it would kill the thread with an error.
        """
        if not self._draining:
            _cancel_all(loop)

    @property
    def running(self) -> int:
        return self._running

    def finished(self) -> list[tuple[Case, dict[str, Any]]]:
        """Cases executed but not yet taken by an item, in item order (for an interrupted run)."""
        out = []
        for case in self.cases:
            fut = self._futures.get(case.id)
            if fut is not None and fut.done() and not fut.cancelled() and fut.exception() is None:
                out.append((case, fut.result()))
        return out


def _cancel_all(loop: asyncio.AbstractEventLoop) -> None:
    for task in asyncio.all_tasks(loop):
        cancel_task(task)
