"""Executing and judging cases ahead of the pytest items: one bounded look-ahead scheduler.

One event loop, on a thread of its own, runs the cases in item order: at most `concurrency`
executing at once and at most `window` ahead of the item that last asked for its record, so
memory stays bounded however many cases there are. An async system's stages are awaited on the
loop (its sync ones through threads); a sync system's case runs inline on a thread, as a sequential
run would run it. Threads (judges' too) are daemon threads, so a call stuck in the system never
holds the process at exit.

Once the first item says what may be judged ahead (`judge_ahead`), each executed case's verdicts
are judged off pytest's main thread, at most the judges' concurrency at once, without holding a
stage's slot. Judges are shared through one map from judgment key to a shared future: cases take
their turn on a key in item order, and a case whose key an earlier case holds waits for that
case's verdict, then looks it up. So exactly the cases that would hit in a sequential run hit,
and no judge is asked twice for one verdict.

Items take their record when it is ready. Stopping starts no new case and judges nothing more;
what finished stays in the cache.
"""

from __future__ import annotations

import asyncio
import contextvars
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import CancelledError, Future
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures import wait as wait_futures
from typing import Any

from pytest_oloproof.evaluate.record import AHEAD, Ahead
from pytest_oloproof.records.cases import Case

from .attempts import cancel_task
from .judging_ahead import AheadJudge
from .progress import Progress
from .stages import NORMAL, Engine

#: How often (seconds) an item waiting for its record wakes up to refresh the progress display.
POLL_S = 0.25


class Scheduler:
    """Runs cases concurrently in item order and judges them ahead; items take their record when it is ready."""

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
        self.use_async = use_async  # stopping cancels an async system's running cases (a thread cannot be)
        self.progress = progress or Progress(len(self.cases))
        self.window = window if window is not None else max(64, 8 * self.concurrency)
        self._index = {c.id: i for i, c in enumerate(self.cases)}
        self._records: dict[str, Future[dict[str, Any]]] = {c.id: Future() for c in self.cases}
        # counts read by stop() on the caller's thread, changed on the loop's
        self._counts = threading.Condition()
        self._executing = 0
        self._judging = 0  # executed, record not ready yet (its verdicts being judged ahead, or waiting to be)
        self._stopping = False
        self._limit = min(self.window, len(self.cases))  # cases before this index may start (items move it on)
        self._held = False  # the loop waits for the window to move on (only then does an item wake it)
        self._judge: AheadJudge | None = None
        self._handed = False  # the first item said what to judge ahead
        self._judge_slots = asyncio.Semaphore(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._draining = False  # the loop's cases are done; only its default executor's shutdown is left
        # the loop's own state, touched only on its thread once it runs
        self._wake = asyncio.Event()  # a case may start: a slot freed, the window moved, or the run stops
        self._executing_tasks: set[asyncio.Task[Any]] = set()
        self._own_tasks: set[asyncio.Task[Any]] = set()  # the scheduler's: never cancelled by stopping
        #: judgment key -> the future of the latest case to take its turn on it, set once its verdict is in
        self._turns: dict[str, asyncio.Future[None]] = {}

    # ------------------------------------------------------------ the items' side

    def start(self) -> None:
        loop = self._loop = asyncio.new_event_loop()
        self._told: asyncio.Future[None] = loop.create_future()  # judge_ahead was called (or the run stops)
        self._stopped: asyncio.Future[None] = loop.create_future()
        self._threads = _DaemonThreads(loop)  # stages sent off the loop, and judges
        self._case_threads = _DaemonThreads(loop, size=self.concurrency)  # a sync system's cases
        with self._counts:
            if self._handed:
                self._told.set_result(None)
        self._thread = threading.Thread(target=self._run_loop, name="oloproof-loop", daemon=True)
        self._thread.start()

    def judge_ahead(self, judge: AheadJudge | None, concurrency: int = 1) -> None:
        """Say what to judge ahead of the items, once (the first item does, with the evaluators it resolved).

        None: nothing; each record is ready as soon as its case is executed. `concurrency`: judge calls at once.
        """
        with self._counts:
            if self._handed:
                return
            self._handed = True
            self._judge = judge
            self._judge_slots = asyncio.Semaphore(max(1, concurrency))
            if self._loop is not None:
                self._call(_settle, self._told, None)

    def has(self, case_id: str) -> bool:
        return case_id in self._records

    def result(self, case_id: str, tick: Callable[[], None] | None = None) -> dict[str, Any]:
        """The record of a case (waiting for it), then forgotten here: the item owns it now."""
        if not self._handed:
            self.judge_ahead(None)  # never asked to judge ahead: no record waits for it
        fut = self._records[case_id]
        limit = min(self._index[case_id] + 1 + self.window, len(self.cases))
        if limit > self._limit:
            self._limit = limit
            if self._held:  # (the loop sets it before it looks at the limit again)
                self._call(self._wake.set)
        while True:
            try:
                rec = fut.result(timeout=POLL_S)
                break
            except FutureTimeout:
                if tick is not None:
                    tick()
        del self._records[case_id]
        return rec

    def stop(self, grace_s: float = 0.0, *, judges: bool = True) -> None:
        """Start no new case and judge nothing more; wait up to `grace_s` for the cases still running.

        An async system's running cases are cancelled; a sync stage's thread cannot be, so those are
        waited for. `judges=False`: wait only for cases still executing, not for verdicts being judged.
        """
        with self._counts:
            self._stopping = True
        for fut in list(self._records.values()):
            fut.cancel()  # only cases not started yet can be cancelled
        self._call(self._on_stop)
        deadline = time.monotonic() + grace_s
        with self._counts:
            while self._executing + (self._judging if judges else 0) > 0:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._counts.wait(left)

    @property
    def running(self) -> int:
        """Cases started whose record is not ready yet (executing, or being judged ahead)."""
        return self._executing + self._judging

    @property
    def executing(self) -> int:
        """Cases whose stages are running."""
        return self._executing

    def settled(self, case_id: str, wait: bool = True) -> dict[str, Any] | None:
        """After stop(): the case's record here, once no judge judges it any more (None: none).

        A judge still asked for one of its verdicts files it here within that one call (nothing more
        is judged once the run stops); waiting for it means no judge is asked twice.
        `wait=False`: only a record already ready.
        """
        fut = self._records.get(case_id)
        if fut is None:
            return None
        if wait:
            wait_futures([fut])
        if fut.done() and not fut.cancelled() and fut.exception() is None:
            return fut.result()
        return None

    def _call(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run `fn(*args)` on the loop's thread (nothing when the loop is not running any more)."""
        loop = self._loop
        if loop is None:
            fn(*args)  # not started: nothing runs on the loop yet
            return
        try:
            loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop is closed: it has nothing left to start or judge
            pass

    # ------------------------------------------------------------ the loop's side

    def _run_loop(self) -> None:
        loop = self._loop
        assert loop is not None
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._main())
        finally:
            self._draining = True  # set on the loop's thread, so a later stop() cannot cancel the shutdown
            self._threads.close()
            self._case_threads.close()
            try:
                loop.run_until_complete(loop.shutdown_default_executor())
            finally:
                loop.close()

    async def _main(self) -> None:
        """Start the cases in item order, within the window (and, for an async system, the concurrency).

        A sync system's cases are queued for its `concurrency` case threads, which start them in order: a
        thread that finishes a case takes the next without waiting for the loop.
        """
        loop = asyncio.get_running_loop()
        tasks = self._own_tasks
        tasks.add(asyncio.current_task())  # type: ignore[arg-type]
        before: asyncio.Future[None] | None = None  # the previous case's turns are taken
        for index, case in enumerate(self.cases):
            while not self._stopping and (self._slots_full() or index >= self._limit):
                self._wake.clear()
                self._held = True
                if self._slots_full() or index >= self._limit:
                    await self._wake.wait()
                self._held = False
            if self._stopping or (self.use_async and not self._started(case)):
                break
            turns_taken: asyncio.Future[None] = loop.create_future()
            task = loop.create_task(self._run_case(case, before, turns_taken))
            before = turns_taken
            self._executing_tasks.add(task)
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        running = [t for t in tasks if t is not asyncio.current_task()]
        if running:
            await asyncio.gather(*running, return_exceptions=True)

    def _slots_full(self) -> bool:
        return self.use_async and self._executing >= self.concurrency

    def _started(self, case: Case) -> bool:
        """Count the case as executing, unless the run stopped (then it never starts)."""
        with self._counts:
            if self._stopping or not self._records[case.id].set_running_or_notify_cancel():
                return False
            self._executing += 1
            return True

    def _execute_in_thread(self, case: Case) -> dict[str, Any] | None:
        """On a case thread: the case's whole attempt, as a sequential run makes it; None if the run stopped first."""
        if not self._started(case):
            return None
        return self.engine.execute(case, NORMAL)

    async def _run_case(
        self, case: Case, before: asyncio.Future[None] | None, turns_taken: asyncio.Future[None]
    ) -> None:
        """Execute one case, take its turns on its judgment keys after the previous case, judge, hand it over."""
        task = asyncio.current_task()
        rec: dict[str, Any] | None = None
        exc: BaseException | None = None
        try:
            if self.use_async:
                rec = await self.engine.aexecute(case, NORMAL, offload=self._threads.run)
            else:  # a stage's result is its own: nothing runs between it and the snapshot the pipeline takes
                rec = await self._case_threads.run(self._execute_in_thread, case)
                if rec is None:  # never started: the run stopped
                    _settle(turns_taken, None)
                    return
        except asyncio.CancelledError:  # the run stopping
            exc = CancelledError()
        except BaseException as e:  # KeyboardInterrupt from a stage, or an Oloproof bug: the item re-raises it
            exc = e
        self._executing_tasks.discard(task)
        if rec is not None:
            self.progress.add(rec)
        with self._counts:
            self._judging += 1  # before the executing count drops: stop() then sees every case not ready
            self._executing -= 1
            self._counts.notify_all()
        self._wake.set()
        try:
            try:
                planned = await self._take_turns(case, rec, before)
            finally:
                _settle(turns_taken, None)
            if planned is not None and rec is not None:
                await self._judge_case(rec, *planned)
        except BaseException:  # left to the item's evaluation, which records what goes wrong
            pass
        fut = self._records.get(case.id)
        if fut is not None and not fut.done():
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(rec)  # type: ignore[arg-type]
        with self._counts:
            self._judging -= 1
            self._counts.notify_all()

    async def _take_turns(
        self, case: Case, rec: dict[str, Any] | None, before: asyncio.Future[None] | None
    ) -> tuple[Ahead, list[tuple[int, str | None, asyncio.Future[None] | None, asyncio.Future[None]]]] | None:
        """In item order (after the previous case), take this case's turn on each of its judgment keys.

        Per verdict: (evaluator position, key, the earlier case's future to wait for, this case's own).
        None when nothing is to be judged ahead.
        """
        if before is not None:
            await self._until(before)
        await self._until(self._told)
        judge = self._judge
        if self._stopping or judge is None or rec is None:
            return None
        try:
            planned = judge.verdicts_to_judge(case, rec)
        except Exception:  # left to the item's evaluation, which records what goes wrong
            return None
        if planned is None:
            return None
        ahead, keys = planned
        loop = asyncio.get_running_loop()
        turns = []
        for i, key in keys:
            mine: asyncio.Future[None] = loop.create_future()
            earlier = None
            if key is not None:
                earlier = self._turns.get(key)
                self._turns[key] = mine
            turns.append((i, key, earlier, mine))
        return ahead, turns

    async def _judge_case(
        self,
        rec: dict[str, Any],
        ahead: Ahead,
        turns: list[tuple[int, str | None, asyncio.Future[None] | None, asyncio.Future[None]]],
    ) -> None:
        """Judge the case's verdicts in order, each after the earlier case holding its key; file them in `rec`.

        Every turn is given up, whatever happens. A run that stops leaves the rest of the case's
        verdicts to the evaluation that records it (nothing is lost, nothing filed is judged twice).
        """
        judge = self._judge
        assert judge is not None
        pending = list(turns)
        try:
            while pending and not self._stopping:
                i, key, earlier, mine = pending[0]
                if earlier is not None:
                    await self._until(earlier)
                    if self._stopping:
                        return
                async with self._judge_slots:
                    if self._stopping:
                        return
                    await self._threads.run(judge.judge, ahead, i, key)
                pending.pop(0)
                self._give_up_turn(key, mine)
        finally:
            for _, key, _, mine in pending:
                self._give_up_turn(key, mine)
            if ahead.verdicts:
                rec[AHEAD] = ahead

    async def _until(self, fut: asyncio.Future[None]) -> None:
        """Wait for `fut`, or until the run stops."""
        if not fut.done():
            await asyncio.wait((fut, self._stopped), return_when=asyncio.FIRST_COMPLETED)

    def _give_up_turn(self, key: str | None, mine: asyncio.Future[None]) -> None:
        """This case's verdict for `key` is in the cache (or never will be): the next case may look it up."""
        if key is not None and self._turns.get(key) is mine:
            del self._turns[key]
        _settle(mine, None)

    def _on_stop(self) -> None:
        """On the loop's thread: wake whatever waits; cancel an async system's running cases.

        Never the default executor's shutdown: work a system left there (langchain-core's async path
        runs sync code in it) keeps that shutdown waiting; cancelling it would kill the thread with an error.
        """
        if self._loop is None:
            return
        _settle(self._told, None)
        _settle(self._stopped, None)
        self._wake.set()
        if not self.use_async or self._draining:
            return
        for task in asyncio.all_tasks(self._loop):
            # the cases executing and the system's own tasks; not the scheduler's work once a case is executed
            if task in self._executing_tasks or task not in self._own_tasks:
                cancel_task(task)


def _settle(fut: asyncio.Future[Any], value: Any) -> None:
    if not fut.done():
        fut.set_result(value)


class _DaemonThreads:
    """Daemon threads for the blocking calls the loop hands off: started as calls need them, idle ones reused.

    Daemon, so a stage stuck in a system call never holds the process at exit (an executor's threads would
    be joined). Each call runs in a copy of the caller's context (usage collectors, the budget).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, size: int | None = None) -> None:
        self._loop = loop
        self._size = size  # at most this many threads, taking queued calls in order (None: one per call waiting)
        self._jobs: queue.SimpleQueue[tuple[asyncio.Future[Any], contextvars.Context, Any, tuple[Any, ...]] | None]
        self._jobs = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        self._started = 0
        self._closed = False

    def run(self, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        """On the loop: call `fn(*args)` on one of the threads; a future of its result."""
        fut: asyncio.Future[Any] = self._loop.create_future()
        with self._lock:
            if self._size is not None:
                spawn = self._started < self._size
            else:
                spawn = self._idle == 0
                if not spawn:
                    self._idle -= 1
            self._started += spawn
        self._jobs.put((fut, contextvars.copy_context(), fn, args))
        if spawn:
            threading.Thread(target=self._work, name=f"oloproof-{self._started}", daemon=True).start()
        return fut

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fut, ctx, fn, args = job
            try:
                outcome: tuple[bool, Any] = (True, ctx.run(fn, *args))
            except BaseException as exc:  # handed to the awaiting task
                outcome = (False, exc)
            try:
                self._loop.call_soon_threadsafe(_settle_call, fut, outcome)
            except RuntimeError:  # the loop is closed: nobody waits for it any more
                pass
            del job, fut, outcome
            with self._lock:
                if self._closed:
                    return
                self._idle += self._size is None  # (a fixed pool's threads take what is queued)

    def close(self) -> None:
        """The idle threads end now, the busy ones once their call returns."""
        with self._lock:
            self._closed = True
            idle, self._idle = (self._idle if self._size is None else self._started), 0
        for _ in range(idle):
            self._jobs.put(None)


def _settle_call(fut: asyncio.Future[Any], outcome: tuple[bool, Any]) -> None:
    """On the loop: the result of a call made on a thread, or what it raised."""
    if fut.cancelled():
        return
    ok, value = outcome
    if ok:
        fut.set_result(value)
    else:
        fut.set_exception(value)
