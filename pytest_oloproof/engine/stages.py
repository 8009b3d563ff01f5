"""One case through the stages and caches.

The pipeline is written once, as a generator that yields each call into the
user's system, and one driver runs it: inline (every stage called in the calling
thread, for `Engine.execute`) or on an event loop (async stages awaited, sync ones
through threads, for `Engine.aexecute` and the scheduler). So threads, an event
loop, interventions and caching all share one path.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import inspect
import random
import time
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_oloproof.cache.caches import Caches
from pytest_oloproof.cache.execution_entry import EXECUTION_ENTRY, VERDICTS, cacheable
from pytest_oloproof.errors import ContractError
from pytest_oloproof.evaluate.repeats import REPEATS
from pytest_oloproof.evaluators.pacing import backoff_delay
from pytest_oloproof.records.cases import Case
from pytest_oloproof.records.identity import StageKeys, canonical_json
from pytest_oloproof.records.stored import is_candidates, is_execution_entry
from pytest_oloproof.system.assembly import assemble
from pytest_oloproof.system.declare import Passage, check_reranked, check_retrieval, check_string_keys, check_tokens
from pytest_oloproof.system.repeat import repeat_scope
from pytest_oloproof.usage.accounting import PAID_STAGES, Budget, BudgetExhausted, collect

from .attempts import (
    AttemptDeadline,
    CompletionLedger,
    cancelled_from_outside,
    run_attempt_in_thread,
    run_inline,
)
from .error_records import (
    StageFailure,
    error_record,
    internal_error_record,
    stage_failure,
    text_of,
    timeout_error,
    user_traceback,
)
from .system_resolution import ResolvedSystem

#: Runs a sync stage call off the event loop: `offload(fn, *args)` (asyncio.to_thread by default).
Offload = Callable[..., Awaitable[Any]]


@dataclass(frozen=True)
class ExecutionPlan:
    """How to execute a case: normally, or under a diagnosis intervention."""

    label: str = "normal"
    bypass_cache: bool = False
    recorded: Sequence[Mapping[str, Any]] | None = None  # replay these candidates; no retriever call
    gold_context: Sequence[Mapping[str, Any]] | None = None  # the whole context, instead of assembly
    top_k: int | None = None
    reranker: Callable[..., Any] | None = None
    query: Any = None  # the recorded Retrieval.query, for a replay (what a reranker receives)
    token_budget: int | None = None  # assemble under this budget instead of the system's (a token-budget replay)
    repeat: int = 0  # which repeat of the case (`repeats: N`); > 0 is part of the execution/generate keys
    #: a repeat's retrieval, shared from repeat 0 (query, candidates): retrieval runs once per case
    shared_retrieval: tuple[Any, Sequence[Mapping[str, Any]]] | None = None


NORMAL = ExecutionPlan()


@dataclass
class _Call:
    stage: str
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    usage: list[dict[str, Any]] = field(default_factory=list)  # what the call reported (set by the driver)


@dataclass
class Engine:
    """Executes cases of one system with its caches; thread-safe if the system is."""

    system: ResolvedSystem
    caches: Caches
    timeout_s: float | None = None
    retries: int = 0
    backoff_s: float = 0.05
    base_dir: Path | None = None
    budget: Budget | None = None  # max_cost / max_judge_calls of the run (usage.py)
    repeats: int = 1  # `repeats: N`: each normal case's generation runs N times
    repeat_retrieval: bool = False  # retrieve again in every repeat (default: repeat 0's retrieval is shared)
    _sleep: Callable[[float], None] = field(default=time.sleep, repr=False)
    #: draws the backoff's full jitter (a seeded `random.Random` repeats it)
    rng: random.Random = field(default_factory=random.Random, repr=False)
    #: set by the session that records this engine's normal cases (see CompletionLedger)
    ledger: CompletionLedger | None = field(default=None, repr=False)
    _stage_keys: tuple[dict[str, Any], StageKeys] | None = field(default=None, init=False, repr=False)

    # ------------------------------------------------------------ pipeline

    def _pipeline(
        self,
        case: Case,
        plan: ExecutionPlan,
        seen: dict[str, Any] | None = None,
        deadline: AttemptDeadline | None = None,
    ) -> Generator[_Call, Any, dict[str, Any]]:
        sysconf = self.system.config
        rec: dict[str, Any] = {
            "id": case.id,
            "plan": plan.label,
            "retrieval": None,
            "context": None,
            "dropped": [],
            "context_truncated": False,
            "output": None,
            "error": None,
            "cache": {"execution": "miss", "retrieve": None, "generate": None},
        }
        if self.system.is_rag:
            rec["query"] = None
        if seen is not None:  # the drivers read the stage cache statuses of a case that then fails
            seen["cache"] = rec["cache"]
            seen["rec"] = rec  # ... and put the usage of the calls they made in it
        use_exec_cache = plan is NORMAL or plan.label == "normal"
        bypass = plan.bypass_cache
        keys = self._keys()
        input_json = canonical_json(case.input)
        ekey = keys.execution(input_json, plan.repeat, self.repeat_retrieval)
        if plan.repeat:
            rec["repeat"] = plan.repeat
        if use_exec_cache:
            hit = self.caches.get("execution", ekey, bypass=bypass)
            # an entry from before the query was recorded lacks it: recomputed, so the record keeps the query;
            # one of the wrong shape (e.g. {}) is a miss too, never a hit that leaves every criterion missing
            if (
                isinstance(hit, dict)
                and is_execution_entry(hit, rag=self.system.is_rag)
                and (not self.system.is_rag or "query" in hit)
            ):
                verdicts = hit.pop(VERDICTS, None)
                produced = hit.pop("usage", None)
                rec.update(hit)
                if isinstance(produced, dict) and produced:  # what executing it cost: saved by this hit
                    rec["usage"] = {"saved": {"stages": produced}}
                rec["cache"] = {"execution": "hit", "retrieve": None, "generate": None}
                rec[EXECUTION_ENTRY] = (ekey, verdicts if isinstance(verdicts, dict) else {})
                self._register(rec)
                return rec
        saved: dict[str, list[dict[str, Any]]] = {}  # stage -> usage of the cache entries that served it
        if not self.system.is_rag:
            output = yield _Call("call", self.system.obj, (_fresh(case.input),))
            check_json(output, case.id, "system", stage="call", path="output")
            rec["output"] = _fresh(output)  # a snapshot: the system may hand out one object it edits later
            self._commit(deadline, ekey, rec, use_exec_cache, bypass)
            return rec

        obj = self.system.obj
        depth = sysconf["depth"]
        # -- retrieve (or replay the recorded candidates)
        if plan.recorded is not None:
            candidates = [dict(c) for c in plan.recorded]
            rec["query"] = plan.query
            rec["cache"]["retrieve"] = None
        elif plan.shared_retrieval is not None:  # a repeat: repeat 0's retrieval, not consulted again
            rec["query"] = plan.shared_retrieval[0]
            candidates = [dict(c) for c in plan.shared_retrieval[1]]
        else:
            rkey = keys.retrieve(input_json, plan.repeat if self.repeat_retrieval else 0)
            cached = self.caches.get("retrieve", rkey, bypass=bypass)
            # {"query", "candidates", "usage"?}; a bare list (an entry from before the query was kept) is a miss,
            # and so are candidates of the wrong shape
            if isinstance(cached, dict) and is_candidates(cached.get("candidates")):
                candidates = cached["candidates"]
                rec["query"] = cached.get("query")
                if isinstance(cached.get("usage"), list) and cached["usage"]:  # what retrieving it cost
                    saved["retrieve"] = cached["usage"]
                rec["cache"]["retrieve"] = "hit"
            else:
                call = _Call("retrieve", obj.retrieve, (_fresh(case.input), depth))
                result = yield call
                retrieve_usage = list(call.usage)
                retrieval = check_retrieval(result, depth, case.id)
                candidates = []
                for pos, p in enumerate(retrieval.candidates, 1):
                    tokens = None
                    if callable(getattr(obj, "count_tokens", None)):
                        call = _Call("count_tokens", obj.count_tokens, (p,))
                        t = yield call
                        retrieve_usage += call.usage
                        tokens = check_tokens(t, case.id, pos)
                    candidates.append(
                        {
                            "position": pos,
                            "doc_id": p.doc_id,
                            "chunk_id": p.chunk_id,
                            "score": None if p.score is None else float(p.score),
                            "tokens": tokens,
                            "text": p.text,
                            "metadata": dict(p.metadata) if p.metadata else None,
                        }
                    )
                query_json = check_json(retrieval.query, case.id, "retrieve() query", stage="retrieve", path="query")
                text = check_json(candidates, case.id, "retrieve() candidates", stage="retrieve")
                query = _fresh(retrieval.query)  # snapshots, as the cache keeps them
                for c in candidates:
                    if c["metadata"]:
                        c["metadata"] = copy.deepcopy(c["metadata"])
                rec["query"] = query
                rec["cache"]["retrieve"] = "miss"
                entry: dict[str, Any] = {"query": query, "candidates": candidates}
                entry_json = f'{{"candidates":{text},"query":{query_json}'
                if retrieve_usage:  # kept with the entry, so a later hit counts it as saved
                    entry["usage"] = retrieve_usage
                    entry_json += f',"usage":{canonical_json(retrieve_usage)}'
                self._put(deadline, "retrieve", rkey, entry, bypass, entry_json + "}")
        if plan.reranker is not None:
            candidates = yield from self._rerank(case, plan, candidates)
        rec["retrieval"] = candidates

        # -- assemble
        if plan.gold_context is not None:
            context = [
                Passage(doc_id=g.get("doc_id") or "gold", text=g.get("text"), chunk_id=g.get("chunk_id"))
                for g in plan.gold_context
            ]
            rec["context"] = []
            rec["gold_context"] = True
        else:
            top_k = plan.top_k or sysconf["top_k"]
            budget = sysconf.get("token_budget") if plan.token_budget is None else plan.token_budget
            if budget is not None:
                for c in candidates:
                    if c.get("tokens") is None:
                        t = yield _Call("count_tokens", obj.count_tokens, (_passage(c),))
                        c["tokens"] = check_tokens(t, case.id, c["position"])
            counts: list[int | None] = [c.get("tokens") for c in candidates]
            asm = assemble(len(candidates), top_k, budget, counts)
            by_pos = {c["position"]: c for c in candidates}
            context = [_passage(by_pos[p]) for p in asm.kept]
            rec["context"] = list(asm.kept)
            rec["dropped"] = [{"position": p, "reason": r} for p, r in asm.dropped]
            rec["context_truncated"] = asm.truncated

        # -- generate
        gkey = keys.generate(input_json, context, plan.repeat)
        gen_bypass = bypass or plan.gold_context is not None or plan.recorded is not None
        cached_out = self.caches.get("generate", gkey, bypass=gen_bypass)
        if isinstance(cached_out, dict) and isinstance(cached_out.get("output"), Mapping):
            rec["output"] = cached_out["output"]
            rec["cache"]["generate"] = "hit"
            if isinstance(cached_out.get("usage"), list) and cached_out["usage"]:
                saved["generate"] = cached_out["usage"]
        else:
            call = _Call("generate", obj.generate, (_fresh(case.input), tuple(context)))
            output = yield call
            if not isinstance(output, Mapping):
                raise ContractError(
                    f"case {case.id!r}: generate() must return a JSON-serialisable mapping "
                    f"(e.g. {{'answer': ...}}), got {type(output).__name__}",
                    stage="generate",
                )
            output = dict(output)
            text = check_json(output, case.id, "generate()", stage="generate", path="output")
            output = copy.deepcopy(output)  # a snapshot: the system may hand out one object it edits later
            rec["output"] = output
            rec["cache"]["generate"] = "miss"
            if call.usage:
                entry_json = f'{{"output":{text},"usage":{canonical_json(call.usage)}}}'
                self._put(deadline, "generate", gkey, {"output": output, "usage": call.usage}, gen_bypass, entry_json)
            else:
                self._put(deadline, "generate", gkey, {"output": output}, gen_bypass, f'{{"output":{text}}}')
        if saved:
            rec.setdefault("usage", {})["saved"] = {"stages": saved}
        self._commit(deadline, ekey, rec, use_exec_cache, bypass)
        return rec

    def _put(
        self,
        deadline: AttemptDeadline | None,
        kind: str,
        key: str,
        value: Any,
        bypass: bool,
        value_json: str | None = None,
    ) -> None:
        if deadline is None:
            self.caches.put(kind, key, value, bypass=bypass, value_json=value_json)
        else:
            deadline.put(self.caches, kind, key, value, bypass, value_json)

    def _commit(
        self, deadline: AttemptDeadline | None, ekey: str, rec: dict[str, Any], use_exec_cache: bool, bypass: bool
    ) -> None:
        """The case's last write: its execution entry, unless a timeout abandoned the attempt first.

        Under the run's completion ledger (when there is one), so the entry is written exactly when
        the case is counted as completed: an interrupted run records what the next run reuses.
        """
        value = cacheable(rec) if use_exec_cache else None
        # a repeat > 0 is not a case of its own: the ledger counts the case when its repeat 0 completes
        ledger = self.ledger if use_exec_cache and not rec.get("repeat") else None
        with ledger.lock if ledger is not None else contextlib.nullcontext():
            if ledger is not None and ledger.closed:
                return  # the interrupted run's record is decided; this case did not complete in it
            if deadline is None:
                stored = value is not None and self.caches.put("execution", ekey, value, bypass=bypass)
            else:
                stored = deadline.commit(self.caches, ekey, value, bypass)
            if stored:
                rec[EXECUTION_ENTRY] = (ekey, {})
            if ledger is not None and (deadline is None or not deadline.abandoned):
                ledger.done[rec["id"]] = dict(rec)

    def _register(self, rec: dict[str, Any]) -> None:
        """Count a normal-plan case as completed in this run (a cache hit, or an error: nothing to commit)."""
        ledger = self.ledger
        if ledger is not None and not rec.get("repeat"):
            with ledger.lock:
                if not ledger.closed:
                    ledger.done[rec["id"]] = dict(rec)

    def _rerank(
        self, case: Case, plan: ExecutionPlan, candidates: list[dict[str, Any]]
    ) -> Generator[_Call, Any, list[dict[str, Any]]]:
        passages = tuple(_passage(c) for c in candidates)
        # the query text retrieve() returned (Retrieval.query), as recorded: never the case's input
        result = yield _Call("reranker", plan.reranker, (plan.query, passages))  # type: ignore[arg-type]
        result = check_reranked(result, case.id)
        originals = {(c["doc_id"], c["chunk_id"], c["text"]): c for c in candidates}
        out = []
        for pos, p in enumerate(result, 1):
            src = originals.get((p.doc_id, p.chunk_id, p.text), {})
            out.append(
                {
                    "position": pos,
                    "doc_id": p.doc_id,
                    "chunk_id": p.chunk_id,
                    "score": None if p.score is None else float(p.score),
                    "tokens": src.get("tokens"),
                    "text": p.text,
                    "metadata": dict(p.metadata) if p.metadata else None,
                    "original_position": src.get("position"),
                }
            )
        return out

    def _keys(self) -> StageKeys:
        """Stage keys for the current system settings (built again if the settings object is replaced)."""
        if self._stage_keys is None or self._stage_keys[0] is not self.system.config:
            self._stage_keys = (self.system.config, StageKeys(self.system.config))
        return self._stage_keys[1]

    # ------------------------------------------------------------ driving

    def execute(self, case: Case, plan: ExecutionPlan = NORMAL) -> dict[str, Any]:
        """Run one case in this thread with retries (an async stage on an event loop of its own).

        Never raises but KeyboardInterrupt: whatever the system raises is the case's
        error, and an error in Oloproof's own code is a record with reason `internal_error`.
        """
        rec = self._execute_one(case, plan)
        if plan is NORMAL and self.repeats > 1:
            rec[REPEATS] = [self._execute_one(case, self._repeat_plan(rec, r)) for r in range(1, self.repeats)]
        return rec

    def _execute_one(self, case: Case, plan: ExecutionPlan) -> dict[str, Any]:
        try:
            rec = run_inline(self._attempts(case, plan, inline=True))
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            rec = internal_error_record(case, exc, plan.label)
        return self._done(rec, plan)

    def _repeat_plan(self, first: Mapping[str, Any], repeat: int) -> ExecutionPlan:
        """Repeat `repeat` of a case: a normal execution under its own keys, with repeat 0's retrieval
        (unless `repeat_retrieval`, or repeat 0 has none, e.g. its retriever failed)."""
        shared = None
        if not self.repeat_retrieval and self.system.is_rag and first.get("retrieval") is not None:
            shared = (first.get("query"), first["retrieval"])
        return ExecutionPlan(label="normal", repeat=repeat, shared_retrieval=shared)

    async def aexecute(
        self, case: Case, plan: ExecutionPlan = NORMAL, *, offload: Offload | None = None
    ) -> dict[str, Any]:
        """Run one case on the current event loop (async stages awaited, sync ones through `offload`'s threads).

        Raises only KeyboardInterrupt and the cancellation of its task; as `execute` otherwise.
        """
        rec = await self._aexecute_one(case, plan, offload)
        if plan is NORMAL and self.repeats > 1:
            rec[REPEATS] = [
                await self._aexecute_one(case, self._repeat_plan(rec, r), offload) for r in range(1, self.repeats)
            ]
        return rec

    async def _aexecute_one(self, case: Case, plan: ExecutionPlan, offload: Offload | None) -> dict[str, Any]:
        try:
            rec = await self._attempts(case, plan, inline=False, offload=offload or asyncio.to_thread)
        except (KeyboardInterrupt, asyncio.CancelledError):
            raise
        except BaseException as exc:
            rec = internal_error_record(case, exc, plan.label)
        return self._done(rec, plan)

    def _done(self, rec: dict[str, Any], plan: ExecutionPlan) -> dict[str, Any]:
        if plan.repeat:
            rec["repeat"] = plan.repeat  # also on a record of an error (which the pipeline did not build)
        if rec.get("error") and (plan is NORMAL or plan.label == "normal"):
            self._register(rec)
        return rec

    async def _attempts(
        self, case: Case, plan: ExecutionPlan, *, inline: bool, offload: Offload = asyncio.to_thread
    ) -> dict[str, Any]:
        """Attempts until one succeeds or fails for good: a transient error is retried `retries` times, with backoff
        (uniform(0, backoff_s * 2**n), at most 5 s).

        `inline`: nothing here suspends (the backoff sleeps the thread), so `run_inline` runs it to its end.
        """
        attempt = 0
        earlier: dict[str, list[dict[str, Any]]] = {}
        while True:
            attempt += 1
            started = time.perf_counter()
            rec = self._attempt_inline(case, plan) if inline else await self._attempt_on_loop(case, plan, offload)
            rec.setdefault("timings", {})["total_s"] = time.perf_counter() - started
            rec["attempts"] = attempt
            earlier = _carry_usage(earlier, rec)
            err = rec.get("error")
            if not (err and err.get("transient") and attempt <= self.retries):
                if err and err.get("transient") and attempt > 1:
                    err["message"] = f"{err['message']} (gave up after {attempt} attempts)"
                return rec
            pause = backoff_delay(attempt - 1, self.backoff_s, 5.0, self.rng)  # full jitter: no retries in lock-step
            if inline:
                self._sleep(pause)
            else:
                await asyncio.sleep(pause)

    def _attempt_inline(self, case: Case, plan: ExecutionPlan) -> dict[str, Any]:
        """One attempt in this thread; under a timeout, in a daemon thread this one gives up on at the deadline."""
        if not self.timeout_s:
            with self.caches.batch():  # one commit for the stages of this attempt
                return run_inline(self._drive(case, plan, None))  # type: ignore[no-any-return]
        deadline = AttemptDeadline(time.monotonic() + self.timeout_s)
        rec = run_attempt_in_thread(
            lambda d: run_inline(self._drive(case, plan, d)), deadline, self.timeout_s, f"oloproof-case-{case.id}"
        )
        return rec if rec is not None else self._timeout_record(case, plan)

    async def _attempt_on_loop(self, case: Case, plan: ExecutionPlan, offload: Offload) -> dict[str, Any]:
        """One attempt on the event loop; past `timeout_s` the case is missing with reason `timeout`."""
        if not self.timeout_s:
            return await self._drive(case, plan, None, offload)
        # the deadline holds even for a stage that blocks the loop, where wait_for cannot fire
        deadline = AttemptDeadline(time.monotonic() + self.timeout_s)
        try:
            rec = await asyncio.wait_for(self._drive(case, plan, deadline, offload), self.timeout_s)
        except asyncio.TimeoutError:
            deadline.abandon()
            return self._timeout_record(case, plan)
        return self._timeout_record(case, plan) if deadline.late() else rec

    def _timeout_record(self, case: Case, plan: ExecutionPlan) -> dict[str, Any]:
        return error_record(case.id, plan.label, timeout_error(self.timeout_s))

    async def _drive(
        self, case: Case, plan: ExecutionPlan, deadline: AttemptDeadline | None, offload: Offload | None = None
    ) -> dict[str, Any]:
        """One attempt: the pipeline's calls into the system, each timed, budgeted and its usage filed.

        Without `offload` (inline) every stage is called in this thread, an async one on an event loop of
        its own, so the coroutine never suspends. With it, async stages are awaited and the sync stages that
        may block run through `offload`'s threads, so they never hold up the other cases on the loop.
        """
        with repeat_scope(plan.repeat):  # what `current_repeat()` returns in the system's calls
            return await self._drive_calls(case, plan, deadline, offload)

    async def _drive_calls(
        self, case: Case, plan: ExecutionPlan, deadline: AttemptDeadline | None, offload: Offload | None
    ) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        gen = self._pipeline(case, plan, seen, deadline)
        timings: dict[str, float] = {}
        call = _Call("contract", _no_call, ())
        try:
            call = next(gen)
            while True:
                t0 = time.perf_counter()
                try:
                    ticket = self._reserve(call)
                    try:
                        # the collector is this task's (and copied into the stage thread's context)
                        with collect() as call.usage:
                            if offload is None:
                                value = call.fn(*call.args)
                                if inspect.isawaitable(value):
                                    value = asyncio.run(_await(value))
                            else:
                                if inspect.iscoroutinefunction(call.fn):
                                    value = await call.fn(*call.args)
                                elif call.stage in _OFFLOADED:  # a sync stage must not block the other cases
                                    ok, value = await offload(_outcome_of, call.fn, *call.args)
                                    if not ok:  # raised here, not thrown in by the loop (GeneratorExit would close us)
                                        raise value
                                else:
                                    value = call.fn(*call.args)
                                if inspect.isawaitable(value):  # also a coroutine an async stage returned
                                    value = await _await(value)
                    finally:
                        self._spent(seen, call, ticket)
                except asyncio.CancelledError as exc:
                    if offload is not None and cancelled_from_outside(deadline):  # the run stopping, or a timeout
                        raise
                    raise StageFailure(call.stage, exc, user_traceback(exc)) from exc  # raised by the stage
                except KeyboardInterrupt:  # the one exception that stops the run
                    raise
                except BaseException as exc:  # SystemExit, GeneratorExit, ...: the case's error
                    raise stage_failure(call.stage, exc) from exc
                finally:
                    timings[call.stage + "_s"] = timings.get(call.stage + "_s", 0.0) + time.perf_counter() - t0
                call = gen.send(value)
        except StopIteration as stop:
            rec: dict[str, Any] = stop.value
            rec["timings"] = timings
            return rec
        except StageFailure as f:
            return self._failure(
                case, plan, f.stage, f.exc, f.tb, timings, cache=seen.get("cache"), usage=_usage_of(seen)
            )
        except ContractError as exc:
            stage = exc.stage or call.stage
            return self._failure(
                case, plan, stage, exc, "", timings, contract=True, cache=seen.get("cache"), usage=_usage_of(seen)
            )

    def _reserve(self, call: _Call) -> Any:
        """Reserve a paid stage call from the budget (BudgetExhausted: the call is not made)."""
        if self.budget is None or self.budget.max_cost is None or call.stage not in PAID_STAGES:
            return None
        return self.budget.reserve(call.stage)

    def _spent(self, seen: dict[str, Any], call: _Call, ticket: Any) -> None:
        """File what a call reported under `usage.stages` of the case record; settle its reservation."""
        if ticket is not None and self.budget is not None:
            self.budget.settle(ticket, call.usage)
        rec = seen.get("rec")
        if call.usage and rec is not None:
            rec.setdefault("usage", {}).setdefault("stages", {}).setdefault(call.stage, []).extend(call.usage)

    def _failure(
        self,
        case: Case,
        plan: ExecutionPlan,
        stage: str,
        exc: BaseException,
        tb: str,
        timings: dict[str, float],
        *,
        contract: bool = False,
        cache: dict[str, Any] | None = None,
        usage: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        transient = isinstance(exc, self.system.transient)
        if contract:
            reason = "contract_violation"
            message = str(exc)
        elif isinstance(exc, BudgetExhausted):
            reason = "budget_exhausted"
            message = f"{exc}; {stage}() was not called"
            transient = False
            tb = ""  # nothing of the user's ran: a traceback would only show Oloproof's frames
        else:
            reason = "system_error"
            message = f"{stage}() raised {type(exc).__name__}: {text_of(exc)}"
        rec = error_record(
            case.id,
            plan.label,
            {
                "stage": stage,
                "type": type(exc).__name__,
                "message": message,
                "traceback": tb,
                "transient": transient,
                "reason": reason,
            },
        )
        rec["timings"] = timings
        if cache is not None:  # stages that ran before the failure did hit or miss (and were cached)
            rec["cache"] = dict(cache)
        if usage:  # the calls made before the failure were paid for all the same
            rec["usage"] = usage
        return rec


async def _await(aw: Any) -> Any:
    """Await until the result is no longer awaitable (an async stage may return a coroutine)."""
    value = await aw
    while inspect.isawaitable(value):
        value = await value
    return value


def _outcome_of(fn: Callable[..., Any], *args: Any) -> tuple[bool, Any]:
    """(True, fn(*args)), or (False, what it raised): a stage's exception crosses from its thread as a value."""
    try:
        return True, fn(*args)
    except BaseException as exc:
        return False, exc


#: Sync stages that may block: on the event loop they run through threads.
_OFFLOADED = frozenset({"call", "retrieve", "generate", "reranker"})


def _no_call() -> None:
    """Placeholder stage before the pipeline's first call into the system."""


def _passage(c: Mapping[str, Any]) -> Passage:
    """A recorded candidate as the Passage a stage receives (its own metadata: a stage may not edit the record)."""
    metadata = c.get("metadata")
    return Passage(
        doc_id=c["doc_id"],
        score=c.get("score"),
        text=c.get("text"),
        chunk_id=c.get("chunk_id"),
        metadata=None if metadata is None else copy.deepcopy(metadata),
    )


def _fresh(value: Any) -> Any:
    """A case's input as one stage call receives it: its own copy, so a stage that edits it changes nothing else."""
    return value if isinstance(value, (str, int, float, type(None))) else copy.deepcopy(value)


def _carry_usage(earlier: dict[str, list[dict[str, Any]]], rec: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Add what earlier (failed, retried) attempts spent to this attempt's `usage.stages`; returns the total."""
    stages = (rec.get("usage") or {}).get("stages") or {}
    total = {stage: [*earlier.get(stage, []), *stages.get(stage, [])] for stage in dict.fromkeys([*earlier, *stages])}
    if earlier:
        rec.setdefault("usage", {})["stages"] = total
    return total


def _usage_of(seen: Mapping[str, Any]) -> dict[str, Any] | None:
    """The usage filed in a case record that then failed: only what its calls spent."""
    rec = seen.get("rec")
    stages = ((rec or {}).get("usage") or {}).get("stages")
    return {"stages": stages} if stages else None


def check_json(value: Any, case_id: str, what: str, *, stage: str | None = None, path: str | None = None) -> str:
    """The value as canonical JSON, or a ContractError naming the case and the stage (also for text UTF-8
    cannot encode, which the record could not store).

    With `path` (the value's name in the record), a mapping key that is not a string is an error too:
    JSON would turn it into a string silently, so a cached re-run would see another value.
    """
    if path is not None:
        check_string_keys(value, f"case {case_id!r}: {what}", path, stage=stage)
    try:
        text = canonical_json(value)
    except (TypeError, ValueError) as exc:
        raise ContractError(
            f"case {case_id!r}: {what} returned a value that is not JSON-serialisable: {exc}", stage=stage
        ) from None
    try:
        if not text.isascii():  # (O(1) in CPython) ASCII text always encodes: no copy on the usual path
            text.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate ('\ud800'): no record file can hold it
        raise ContractError(
            f"case {case_id!r}: {what} returned text holding a lone surrogate "
            f"({exc.object[exc.start : exc.end]!r}), which no UTF-8 file can hold; decode bytes with "
            "errors='replace', or drop the character",
            stage=stage,
        ) from None
    return text
