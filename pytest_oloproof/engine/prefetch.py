"""Executing cases ahead of the pytest items (SPEC §11): worker threads, or one event loop for async systems.

The prefetcher runs cases in item order, at most `concurrency` at once and at
most `window` ahead of the item that last asked for its result, so memory stays
bounded however many cases there are. Once the first item hands it a `Prejudger`,
the evaluators that may run ahead judge each executed case on judge threads of their
own (prejudge.py), so a slow judge never holds a stage's slot. Items take their
record when it is ready. On interruption it stops taking new cases and judges
nothing more; what finished stays in the cache.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import CancelledError, Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TYPE_CHECKING, Any

from pytest_oloproof.records.cases import Case

from .stages import NORMAL, Engine, cancel_task

if TYPE_CHECKING:
    from .prejudge import Plan, Prejudger

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
        self._judging = 0  # cases executed whose record is not ready yet (being judged ahead, or waiting to be)
        # executed cases are planned for judging in item order: (case, record, exception) by index until then
        self._seq_lock = threading.Lock()
        self._arrived: dict[int, tuple[Case, dict[str, Any] | None, BaseException | None]] = {}
        self._next_arrival = 0
        self._handed = False  # the first item said what to judge ahead (judge_ahead)
        self._prejudger: Prejudger | None = None
        self._queue: deque[tuple[Case, dict[str, Any], Plan]] = deque()
        self._jcond = threading.Condition()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None  # the loop's: a case may start (see _amain)
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
        """A case's stages are done: its slot is free; its record goes to be judged ahead, or to its item."""
        if rec is not None:
            self.progress.add(rec)
        with self._cond:
            self._judging += 1  # before the running count drops: stop() then sees every case not ready
            self._running -= 1
            self._cond.notify_all()
        with self._seq_lock:
            self._arrived[self._index[case.id]] = (case, rec, exc)
        self._sequence()

    def _sequence(self) -> None:
        """Plan the executed cases in item order (claiming their verdicts); hand over the others as they are."""
        ready: list[tuple[Case, dict[str, Any] | None, BaseException | None]] = []
        with self._seq_lock:
            if not self._handed and not self._stopping:
                return  # the first item has not said what to judge ahead yet
            if self._stopping:  # judge nothing more: every executed case goes to whoever records it
                ready = [self._arrived[i] for i in sorted(self._arrived)]
                self._arrived.clear()
            prejudger = self._prejudger
            while self._next_arrival in self._arrived:
                arrived = self._arrived.pop(self._next_arrival)
                self._next_arrival += 1
                case, rec, _ = arrived
                plan = None
                if prejudger is not None and rec is not None:
                    try:
                        plan = prejudger.plan(case, rec)
                    except Exception:  # left to the item's evaluation, which records what goes wrong
                        plan = None
                if plan is not None:
                    with self._jcond:  # (judge threads leave only once they saw the run stopping, under it)
                        if not self._stopping:
                            self._queue.append((case, rec, plan))  # type: ignore[arg-type]
                            self._jcond.notify()
                            continue
                    prejudger.abandon(plan)  # type: ignore[union-attr]
                ready.append(arrived)
        for case, rec, exc in ready:
            self._ready(case, rec, exc)

    def _ready(self, case: Case, rec: dict[str, Any] | None, exc: BaseException | None) -> None:
        """The item may take the case's record now."""
        fut = self._futures.get(case.id)
        if fut is not None and not fut.done():  # before the count drops: stop() then sees every result
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(rec)  # type: ignore[arg-type]
        with self._cond:
            self._judging -= 1
            self._cond.notify_all()

    # ------------------------------------------------------------ judging ahead

    def judge_ahead(self, prejudger: Prejudger | None, threads: int = 1) -> None:
        """Say what to judge ahead of the items (once; the first item does, with the evaluators it resolved).

        None: nothing; each record is ready as soon as its case is executed.
        """
        with self._seq_lock:
            if self._handed:
                return
            self._handed = True
            self._prejudger = prejudger
        if prejudger is not None:
            for n in range(max(1, threads)):
                name = f"oloproof-judge-{n}"
                t = threading.Thread(target=self._judge_worker, args=(prejudger,), name=name, daemon=True)
                self._threads.append(t)
                t.start()
        self._sequence()

    def _judge_worker(self, prejudger: Prejudger) -> None:
        while True:
            with self._jcond:
                while not self._queue:
                    if self._stopping:
                        return
                    self._jcond.wait()
                case, rec, plan = self._queue.popleft()
            if not self._stopping:
                try:
                    prejudger.judge(plan, rec, self._is_stopping)
                except BaseException:  # left to the item's evaluation, which records what goes wrong
                    pass
            else:  # not judged: its claims are released for whoever evaluates the others
                prejudger.abandon(plan)
            self._ready(case, rec, None)

    def _is_stopping(self) -> bool:
        return self._stopping

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

        loop = asyncio.get_running_loop()
        wake = self._wake = asyncio.Event()  # set when a case ends, or an item moves the window on

        def ended(task: asyncio.Task[None]) -> None:
            tasks.discard(task)
            wake.set()

        tasks: set[asyncio.Task[None]] = set()
        while True:
            case = self._take(block=False)
            if case is DONE:
                break
            if not isinstance(case, Case):  # concurrency or window full: wait until that changes
                wake.clear()
                case = self._take(block=False)  # (what changed before the clear is seen here)
                if case is None:
                    await wake.wait()
                    continue
                if not isinstance(case, Case):
                    break
            task = loop.create_task(one(case))
            tasks.add(task)
            task.add_done_callback(ended)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def _wake_loop(self) -> None:
        """On the loop's thread: the window moved on, so `_amain` may start more cases."""
        wake = self._wake
        if wake is not None:
            wake.set()

    # ------------------------------------------------------------ items

    def has(self, case_id: str) -> bool:
        return case_id in self._futures

    def result(self, case_id: str, tick: Callable[[], None] | None = None) -> dict[str, Any]:
        """The record of a case (waiting for it), then forgotten here: the item owns it now."""
        if not self._handed:
            self.judge_ahead(None)  # never asked to judge ahead: no record waits for it
        fut = self._futures[case_id]
        with self._cond:
            limit = min(self._index[case_id] + 1 + self.window, len(self.cases))
            held = self._next >= self._limit  # the window holds the next case back
            if limit > self._limit:
                self._limit = limit
                self._cond.notify_all()
            else:
                held = False
        if held and self._loop is not None:
            try:
                self._loop.call_soon_threadsafe(self._wake_loop)
            except RuntimeError:  # the loop is closed: it has nothing left to start
                pass
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

    def stop(self, grace_s: float = 0.0, *, judges: bool = True) -> None:
        """Start no new case; wait up to `grace_s` for running ones (sync), cancel them (async).

        `judges=False`: wait only for cases still executing, not for verdicts being judged ahead.
        """
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        with self._jcond:
            self._jcond.notify_all()
        self._sequence()  # executed cases waiting to be planned are ready as they are
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
            while self._running + (self._judging if judges else 0) > 0 and time.monotonic() < deadline:
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
        """Cases started whose record is not ready yet (executing, or being judged ahead)."""
        return self._running + self._judging

    @property
    def executing(self) -> int:
        """Cases whose stages are running."""
        return self._running

    def settled(self, case_id: str, wait: bool = True) -> dict[str, Any] | None:
        """After stop(): the case's record here, once no judge thread judges it any more (None: none).

        A judge thread still asking for one of its verdicts files it here within that one call (it
        judges nothing more once the run stops); waiting for it means no judge is asked twice.
        `wait=False`: only a record already ready.
        """
        fut = self._futures.get(case_id)
        if fut is None:
            return None
        while wait and not fut.done():
            try:
                fut.result(timeout=POLL_S)
            except (FutureTimeout, CancelledError):
                pass
            except BaseException:  # the case's own error, seen below
                break
        if fut.done() and not fut.cancelled() and fut.exception() is None:
            return fut.result()
        return None


def _cancel_all(loop: asyncio.AbstractEventLoop) -> None:
    for task in asyncio.all_tasks(loop):
        cancel_task(task)
