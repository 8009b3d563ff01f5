"""Executing cases ahead of the pytest items (SPEC §11): a thread pool, or one event loop for async systems."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from .cases import Case
from .execute import NORMAL, Engine


class Progress:
    """Counts for the live progress line: cases done, cache hits, errors, rate."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.done = 0
        self.hits = 0
        self.errors = 0
        self.started = time.perf_counter()
        self._lock = threading.Lock()

    def add(self, rec: dict[str, Any]) -> None:
        with self._lock:
            self.done += 1
            self.hits += (rec.get("cache") or {}).get("execution") == "hit"
            self.errors += bool(rec.get("error"))

    def line(self) -> str:
        elapsed = max(time.perf_counter() - self.started, 1e-9)
        return (
            f"oloproof: {self.done}/{self.total} cases · {self.hits} cache hits · "
            f"{self.errors} errors · {self.done / elapsed:.1f} cases/s"
        )


class Prefetcher:
    """Runs cases concurrently in item order; items take their result when it is ready."""

    def __init__(
        self,
        engine: Engine,
        cases: Sequence[Case],
        concurrency: int,
        *,
        use_async: bool = False,
        on_done: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.engine = engine
        self.cases = list(cases)
        self.concurrency = max(1, concurrency)
        self.use_async = use_async
        self.on_done = on_done
        self.progress = Progress(len(self.cases))
        self._futures: dict[str, Future[dict[str, Any]]] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False

    def start(self) -> None:
        if self.use_async:
            self._start_async()
        else:
            self._pool = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="oloproof")
            for case in self.cases:
                fut = self._pool.submit(self._run_sync, case)
                self._futures[case.id] = fut

    def _run_sync(self, case: Case) -> dict[str, Any]:
        rec = self.engine.execute(case, NORMAL)
        self.progress.add(rec)
        if self.on_done:
            self.on_done(rec)
        return rec

    def _start_async(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        sem: asyncio.Semaphore | None = None

        async def one(case: Case) -> dict[str, Any]:
            assert sem is not None
            async with sem:
                rec = await self.engine.aexecute(case, NORMAL)
            self.progress.add(rec)
            if self.on_done:
                self.on_done(rec)
            return rec

        async def main() -> None:
            nonlocal sem
            sem = asyncio.Semaphore(self.concurrency)
            tasks = []
            for case in self.cases:
                cf: Future[dict[str, Any]] = self._futures[case.id]
                task = asyncio.ensure_future(one(case))
                task.add_done_callback(lambda t, cf=cf: _copy_result(t, cf))
                tasks.append(task)
            await asyncio.gather(*tasks, return_exceptions=True)

        for case in self.cases:
            self._futures[case.id] = Future()

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(main())
            finally:
                loop.close()

        self._thread = threading.Thread(target=run, name="oloproof-loop", daemon=True)
        self._thread.start()

    def has(self, case_id: str) -> bool:
        return case_id in self._futures

    def result(self, case_id: str) -> dict[str, Any]:
        return self._futures[case_id].result()

    def stop(self) -> None:
        """Cancel what has not started; what finished stays cached."""
        self._stopping = True
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        if self._loop is not None and not self._loop.is_closed():
            loop = self._loop
            try:
                loop.call_soon_threadsafe(lambda: [t.cancel() for t in asyncio.all_tasks(loop)])
            except RuntimeError:
                pass


def _copy_result(task: asyncio.Task[dict[str, Any]], fut: Future[dict[str, Any]]) -> None:
    if fut.done():
        return
    if task.cancelled():
        fut.cancel()
    elif task.exception() is not None:
        fut.set_exception(task.exception())  # type: ignore[arg-type]
    else:
        fut.set_result(task.result())
