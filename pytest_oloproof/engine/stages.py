"""One case through the stages and caches (SPEC §2, §5, §9 interventions, §11 policy).

The pipeline is written once, as a generator that yields each call into the
user's system; a sync driver and an async driver run it. So threads, an event
loop, interventions and caching all share one path.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import inspect
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_oloproof.cache.caches import Caches
from pytest_oloproof.config.settings import LoadedConfig
from pytest_oloproof.errors import ConfigError, ContractError, Transient
from pytest_oloproof.records.cases import Case
from pytest_oloproof.records.identity import StageKeys, canonical_json
from pytest_oloproof.records.stored import is_candidates, is_execution_entry
from pytest_oloproof.system.assembly import assemble
from pytest_oloproof.system.declare import (
    RAG_SETTINGS,
    Passage,
    check_reranked,
    check_retrieval,
    check_string_keys,
    check_tokens,
    load_object,
    settings_problem,
)
from pytest_oloproof.usage.accounting import PAID_STAGES, Budget, BudgetExhausted, collect


@dataclass
class ResolvedSystem:
    """The system under test with its effective settings (decorator overridden by config)."""

    kind: str  # "rag" | "callable"
    obj: Any
    config: dict[str, Any]
    transient: tuple[type[BaseException], ...] = (Transient,)

    @property
    def is_rag(self) -> bool:
        return self.kind == "rag"


def resolve_system(cfg: LoadedConfig) -> ResolvedSystem:
    """Import the system and merge decorator settings with oloproof.yaml (the file wins)."""
    from pytest_oloproof.config.settings import where_in

    s = cfg.settings.system

    def at(*loc: str) -> str:
        return where_in(cfg.path, cfg.node, loc)

    if s.rag is not None:
        try:
            target = load_object(s.rag.object, cfg.base_dir, what="system.rag.object")
        except ConfigError as exc:
            raise ConfigError(f"{at('system', 'rag', 'object')}: {exc}") from exc
        cls = target if inspect.isclass(target) else type(target)
        declared = dict(getattr(target, "__oloproof_rag__", None) or {})  # an adapter instance carries its own
        if not callable(getattr(target, "retrieve", None)) or not callable(getattr(target, "generate", None)):
            raise ConfigError(
                f"{at('system', 'rag', 'object')}: system.rag.object: {s.rag.object!r} has no retrieve() and "
                "generate(); "
                "decorate a class with @rag_system or use system.object for a plain callable"
            )
        merged = dict(declared)
        for key in RAG_SETTINGS:
            value = getattr(s.rag, key)
            if value is not None:
                merged[key] = value
        for key in ("name", "version"):
            if getattr(s, key) is not None:
                merged[key] = getattr(s, key)
        if merged.get("depth") is None:
            raise ConfigError(f"{at('system', 'rag')}: system.rag.depth: required (set depth in @rag_system or here)")
        problem = settings_problem(merged)  # oloproof.yaml's values are valid: a bad one is the decorator's
        if problem is not None:
            raise ConfigError(
                f"{at('system', 'rag', 'object')}: @rag_system on {s.rag.object}: {problem} "
                "(fix the decorator or set it in oloproof.yaml)"
            )
        obj = _instantiate(target, s.rag.object, at("system", "rag", "object")) if inspect.isclass(target) else target
        config = {
            "kind": "rag",
            "object": s.rag.object,
            "name": merged.get("name") or cls.__name__,
            "version": merged.get("version"),
            "depth": merged["depth"],
            "top_k": merged.get("top_k") or merged["depth"],
            "token_budget": merged.get("token_budget"),
            "index_version": merged.get("index_version"),
        }
        if config["token_budget"] is not None and not callable(getattr(obj, "count_tokens", None)):
            raise ConfigError(
                f"{at('system', 'rag', 'token_budget')}: system.rag.token_budget: set, but {s.rag.object} has no "
                "count_tokens(passage); "
                "add one (Oloproof never estimates tokens) or remove token_budget"
            )
        if config["top_k"] > config["depth"]:
            where = at("system", "rag", "top_k") if s.rag.top_k is not None else at("system", "rag")
            raise ConfigError(f"{where}: system.rag.top_k: {config['top_k']} is larger than depth {config['depth']}")
        extra = tuple(getattr(obj, "transient_errors", ()) or ())
        return ResolvedSystem("rag", obj, config, (Transient, *extra))
    assert s.object is not None
    try:
        fn = load_object(s.object, cfg.base_dir, what="system.object")
    except ConfigError as exc:
        raise ConfigError(f"{at('system', 'object')}: {exc}") from exc
    if not callable(fn):
        raise ConfigError(f"{at('system', 'object')}: system.object: {s.object!r} is not callable")
    config = {
        "kind": "callable",
        "object": s.object,
        "name": s.name or getattr(fn, "__name__", "system"),
        "version": s.version,
    }
    extra = tuple(getattr(fn, "transient_errors", ()) or ())
    return ResolvedSystem("callable", fn, config, (Transient, *extra))


def _instantiate(cls: Any, spec: str, where: str) -> Any:
    """The system's instance; its constructor raising is a config error with the user's traceback."""
    try:
        return cls()
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        raise ConfigError(
            f"{where}: system.rag.object: {spec}() raised {type(exc).__name__}: {_text_of(exc)}\n{_user_traceback(exc)}"
        ) from exc


@dataclass(frozen=True)
class Plan:
    """How to execute a case: normally, or under a diagnosis intervention."""

    label: str = "normal"
    bypass_cache: bool = False
    recorded: Sequence[Mapping[str, Any]] | None = None  # replay these candidates; no retriever call
    gold_context: Sequence[Mapping[str, Any]] | None = None  # the whole context, instead of assembly
    top_k: int | None = None
    reranker: Callable[..., Any] | None = None
    query: Any = None  # the recorded Retrieval.query, for a replay (what a reranker receives)


NORMAL = Plan()


@dataclass
class _Call:
    stage: str
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    usage: list[dict[str, Any]] = field(default_factory=list)  # what the call reported (set by the driver)


class StageFailure(Exception):
    def __init__(self, stage: str, exc: BaseException, tb: str) -> None:
        self.stage, self.exc, self.tb = stage, exc, tb
        super().__init__(_text_of(exc))


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
    _sleep: Callable[[float], None] = field(default=time.sleep, repr=False)
    #: set by the session that records this engine's normal cases (see RunGate)
    run_gate: RunGate | None = field(default=None, repr=False)
    _stage_keys: tuple[dict[str, Any], StageKeys] | None = field(default=None, init=False, repr=False)

    # ------------------------------------------------------------ pipeline

    def _pipeline(
        self, case: Case, plan: Plan, seen: dict[str, Any] | None = None, gate: _Gate | None = None
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
        ekey = keys.execution(input_json)
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
            _check_json(output, case.id, "system", stage="call", path="output")
            rec["output"] = _fresh(output)  # a snapshot: the system may hand out one object it edits later
            self._commit(gate, ekey, rec, use_exec_cache, bypass)
            return rec

        obj = self.system.obj
        depth = sysconf["depth"]
        # -- retrieve (or replay the recorded candidates)
        if plan.recorded is not None:
            candidates = [dict(c) for c in plan.recorded]
            rec["query"] = plan.query
            rec["cache"]["retrieve"] = None
        else:
            rkey = keys.retrieve(input_json)
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
                query_json = _check_json(retrieval.query, case.id, "retrieve() query", stage="retrieve", path="query")
                text = _check_json(candidates, case.id, "retrieve() candidates", stage="retrieve")
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
                self._put(gate, "retrieve", rkey, entry, bypass, entry_json + "}")
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
            budget = sysconf.get("token_budget")
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
        gkey = keys.generate(input_json, context)
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
            text = _check_json(output, case.id, "generate()", stage="generate", path="output")
            output = copy.deepcopy(output)  # a snapshot: the system may hand out one object it edits later
            rec["output"] = output
            rec["cache"]["generate"] = "miss"
            if call.usage:
                entry_json = f'{{"output":{text},"usage":{canonical_json(call.usage)}}}'
                self._put(gate, "generate", gkey, {"output": output, "usage": call.usage}, gen_bypass, entry_json)
            else:
                self._put(gate, "generate", gkey, {"output": output}, gen_bypass, f'{{"output":{text}}}')
        if saved:
            rec.setdefault("usage", {})["saved"] = {"stages": saved}
        self._commit(gate, ekey, rec, use_exec_cache, bypass)
        return rec

    def _put(
        self, gate: _Gate | None, kind: str, key: str, value: Any, bypass: bool, value_json: str | None = None
    ) -> None:
        if gate is None:
            self.caches.put(kind, key, value, bypass=bypass, value_json=value_json)
        else:
            gate.put(self.caches, kind, key, value, bypass, value_json)

    def _commit(self, gate: _Gate | None, ekey: str, rec: dict[str, Any], use_exec_cache: bool, bypass: bool) -> None:
        """The case's last write: its execution entry, unless a timeout abandoned the attempt first.

        Under the run's gate (when there is one), so the entry is written exactly when
        the case is counted as completed: an interrupted run records what the next run reuses.
        """
        value = cacheable(rec) if use_exec_cache else None
        run = self.run_gate if use_exec_cache else None
        with run.lock if run is not None else contextlib.nullcontext():
            if run is not None and run.closed:
                return  # the interrupted run's record is decided; this case did not complete in it
            if gate is None:
                stored = value is not None and self.caches.put("execution", ekey, value, bypass=bypass)
            else:
                stored = gate.commit(self.caches, ekey, value, bypass)
            if stored:
                rec[EXECUTION_ENTRY] = (ekey, {})
            if run is not None and (gate is None or not gate.abandoned):
                run.done[rec["id"]] = dict(rec)

    def _register(self, rec: dict[str, Any]) -> None:
        """Count a normal-plan case as completed in this run (a cache hit, or an error: nothing to commit)."""
        run = self.run_gate
        if run is not None:
            with run.lock:
                if not run.closed:
                    run.done[rec["id"]] = dict(rec)

    def _rerank(
        self, case: Case, plan: Plan, candidates: list[dict[str, Any]]
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

    # ------------------------------------------------------------ drivers

    def execute(self, case: Case, plan: Plan = NORMAL) -> dict[str, Any]:
        """Run one case synchronously with retries.

        Never raises but KeyboardInterrupt: whatever the system raises is the case's
        error, and an error in Oloproof's own code is a record with reason `internal_error`.
        """
        try:
            rec = self._with_retries(case, plan, lambda gate: self._drive_sync(case, plan, gate))
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            rec = internal_error_record(case, exc, plan)
        return self._done(rec, plan)

    async def aexecute(self, case: Case, plan: Plan = NORMAL) -> dict[str, Any]:
        """Run one case on the current event loop (async stages awaited, sync ones in threads).

        Raises only KeyboardInterrupt and the cancellation of its task; as `execute` otherwise.
        """
        try:
            rec = await self._aexecute(case, plan)
        except (KeyboardInterrupt, asyncio.CancelledError):
            raise
        except BaseException as exc:
            rec = internal_error_record(case, exc, plan)
        return self._done(rec, plan)

    def _done(self, rec: dict[str, Any], plan: Plan) -> dict[str, Any]:
        if rec.get("error") and (plan is NORMAL or plan.label == "normal"):
            self._register(rec)
        return rec

    async def _aexecute(self, case: Case, plan: Plan) -> dict[str, Any]:
        attempt = 0
        earlier: dict[str, list[dict[str, Any]]] = {}
        while True:
            attempt += 1
            started = time.perf_counter()
            # the deadline holds even for a stage that blocks the loop, where wait_for cannot fire
            gate = _Gate(time.monotonic() + self.timeout_s) if self.timeout_s else None
            try:
                coro = self._drive_async(case, plan, gate)
                rec = await (asyncio.wait_for(coro, self.timeout_s) if self.timeout_s else coro)
            except asyncio.TimeoutError:
                if gate is not None:
                    gate.abandon()
                rec = self._timeout_record(case, plan)
            if gate is not None and gate.late():
                rec = self._timeout_record(case, plan)
            rec.setdefault("timings", {})["total_s"] = time.perf_counter() - started
            rec["attempts"] = attempt
            earlier = _carry_usage(earlier, rec)
            if not self._should_retry(rec, attempt):
                return self._gave_up(rec, attempt)
            await asyncio.sleep(self._backoff(attempt))

    def _with_retries(self, case: Case, plan: Plan, run: Callable[[_Gate | None], dict[str, Any]]) -> dict[str, Any]:
        attempt = 0
        earlier: dict[str, list[dict[str, Any]]] = {}
        while True:
            attempt += 1
            started = time.perf_counter()
            if self.timeout_s:
                rec = self._run_with_timeout(case, plan, run)
            else:
                with self.caches.batch():  # one commit for the stages of this attempt
                    rec = run(None)
            rec.setdefault("timings", {})["total_s"] = time.perf_counter() - started
            rec["attempts"] = attempt
            earlier = _carry_usage(earlier, rec)
            if not self._should_retry(rec, attempt):
                return self._gave_up(rec, attempt)
            self._sleep(self._backoff(attempt))

    def _run_with_timeout(
        self, case: Case, plan: Plan, run: Callable[[_Gate | None], dict[str, Any]]
    ) -> dict[str, Any]:
        """Run one attempt in a daemon thread; past `timeout_s` the case is missing with reason `timeout`.

        A thread cannot be stopped, so the abandoned attempt runs on; its gate makes
        sure it writes nothing to the cache after the deadline, and the execution
        entry (the one that says "this case succeeded") is written only by an attempt
        that finished in time.
        """
        box: dict[str, Any] = {}
        gate = _Gate(time.monotonic() + (self.timeout_s or 0.0))

        def target() -> None:
            try:
                box["rec"] = run(gate)
            except BaseException as exc:  # handed to the caller's thread
                box["exc"] = exc

        t = threading.Thread(target=target, name=f"oloproof-case-{case.id}", daemon=True)
        t.start()
        t.join(self.timeout_s)
        if t.is_alive():
            if gate.abandon():
                return self._timeout_record(case, plan)
            t.join()  # it committed at the deadline; only its return is left
        if "exc" in box:
            raise box["exc"]
        if gate.late():  # finished, but after the deadline: its result is never used
            return self._timeout_record(case, plan)
        return box["rec"]  # type: ignore[no-any-return]

    def _timeout_record(self, case: Case, plan: Plan) -> dict[str, Any]:
        return error_record(
            case.id,
            plan.label,
            {
                "stage": "timeout",
                "type": "Timeout",
                "message": f"case did not finish within timeout_s={self.timeout_s}",
                "traceback": "",
                "transient": False,
                "reason": "timeout",
            },
        )

    def _gave_up(self, rec: dict[str, Any], attempt: int) -> dict[str, Any]:
        err = rec.get("error")
        if err and err.get("transient") and attempt > 1:
            err["message"] = f"{err['message']} (gave up after {attempt} attempts)"
        return rec

    def _should_retry(self, rec: Mapping[str, Any], attempt: int) -> bool:
        err = rec.get("error")
        return bool(err and err.get("transient") and attempt <= self.retries)

    def _backoff(self, attempt: int) -> float:
        return float(min(self.backoff_s * (2 ** (attempt - 1)), 5.0))

    def _drive_sync(self, case: Case, plan: Plan, gate: _Gate | None = None) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        gen = self._pipeline(case, plan, seen, gate)
        timings: dict[str, float] = {}
        call = _Call("contract", _no_call, ())
        try:
            call = next(gen)
            while True:
                t0 = time.perf_counter()
                try:
                    ticket = self._reserve(call)
                    try:
                        with collect() as call.usage:
                            value = call.fn(*call.args)
                            if inspect.isawaitable(value):
                                value = asyncio.run(_await(value))
                    finally:
                        self._spent(seen, call, ticket)
                except KeyboardInterrupt:  # the one exception that stops the run
                    raise
                except BaseException as exc:  # SystemExit, GeneratorExit, ...: the case's error
                    timings[call.stage + "_s"] = timings.get(call.stage + "_s", 0.0) + time.perf_counter() - t0
                    raise _stage_failure(call.stage, exc) from exc
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

    async def _drive_async(self, case: Case, plan: Plan, gate: _Gate | None = None) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        gen = self._pipeline(case, plan, seen, gate)
        timings: dict[str, float] = {}
        call = _Call("contract", _no_call, ())
        try:
            call = next(gen)
            while True:
                t0 = time.perf_counter()
                try:
                    ticket = self._reserve(call)
                    try:
                        # the collector is this task's (and copied into to_thread's context)
                        with collect() as call.usage:
                            if inspect.iscoroutinefunction(call.fn):
                                value = await call.fn(*call.args)
                            elif call.stage in _OFFLOADED:  # a sync stage must not block the other cases
                                value = await asyncio.to_thread(call.fn, *call.args)
                            else:
                                value = call.fn(*call.args)
                            if inspect.isawaitable(value):  # also a coroutine an async stage returned
                                value = await _await(value)
                    finally:
                        self._spent(seen, call, ticket)
                except asyncio.CancelledError as exc:
                    if _cancelled_from_outside(gate):  # the run stopping, or wait_for's timeout
                        raise
                    raise StageFailure(call.stage, exc, _user_traceback(exc)) from exc  # raised by the stage
                except KeyboardInterrupt:
                    raise
                except BaseException as exc:
                    raise _stage_failure(call.stage, exc) from exc
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
        plan: Plan,
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
            message = f"{stage}() raised {type(exc).__name__}: {_text_of(exc)}"
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


_OFFLOADED = frozenset({"call", "retrieve", "generate", "reranker"})


class _Gate:
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


class RunGate:
    """Which normal cases of a run completed, decided under one lock with their execution entries.

    A case counts as completed when its execution entry is written (or it was a
    cache hit, or ended in an error). Once an interrupted session closes the gate,
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


#: tasks Oloproof itself cancelled (the run stopping): Python 3.10 has no `Task.cancelling()` to ask
_CANCELLED_BY_OLOPROOF: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()


def cancel_task(task: asyncio.Task[Any]) -> None:
    """Cancel a case's task and remember that Oloproof did, so its CancelledError is not the stage's error."""
    _CANCELLED_BY_OLOPROOF.add(task)
    task.cancel()


def _cancelled_from_outside(gate: _Gate | None = None) -> bool:
    """Whether a CancelledError is the current task being cancelled (not one a stage raised itself).

    Python 3.11+ asks the task (`cancelling()`). Python 3.10 cannot, so there the cancellations
    Oloproof makes are known instead: the run stopping (`cancel_task`) and the case's timeout
    (`wait_for` fires once the attempt's deadline, which its gate holds, has passed).
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
    return gate is not None and gate.deadline is not None and time.monotonic() >= gate.deadline


def _no_call() -> None:
    """Placeholder stage before the pipeline's first call into the system."""


_PACKAGE_DIR = str(Path(__file__).resolve().parent.parent)


def _stage_failure(stage: str, exc: BaseException) -> StageFailure:
    """The stage's error as the user raised it: a StopIteration a coroutine turned into RuntimeError is itself."""
    cause = exc.__cause__
    if isinstance(exc, RuntimeError) and isinstance(cause, (StopIteration, StopAsyncIteration)):
        if _text_of(exc) == f"coroutine raised {type(cause).__name__}":
            exc = cause
    return StageFailure(stage, exc, _user_traceback(exc))


def _text_of(exc: BaseException) -> str:
    """str(exc), even for an exception whose __str__ itself raises (then says so)."""
    try:
        return str(exc)
    except Exception as inner:
        return f"<str() of the {type(exc).__name__} raised {type(inner).__name__}>"


def _user_traceback(exc: BaseException) -> str:
    """The traceback from the system's own code on: Oloproof's driver frames are noise to the user."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None and tb.tb_frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def error_record(
    case_id: str, plan_label: str, error: dict[str, Any], cache: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The record of a case that produced nothing but its error (system, timeout or internal)."""
    return {
        "id": case_id,
        "plan": plan_label,
        "retrieval": None,
        "context": None,
        "dropped": [],
        "context_truncated": False,
        "output": None,
        "error": error,
        "cache": cache if cache is not None else {"execution": "miss", "retrieve": None, "generate": None},
    }


def internal_error(exc: BaseException) -> dict[str, Any]:
    """The error entry of a case that hit an error in Oloproof's own code, with the traceback."""
    return {
        "stage": "oloproof",
        "type": type(exc).__name__,
        "message": f"internal error in Oloproof: {type(exc).__name__}: {_text_of(exc)}",
        "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
        "transient": False,
        "reason": "internal_error",
    }


def internal_error_record(case: Case, exc: BaseException, plan: Plan = NORMAL) -> dict[str, Any]:
    """A case that hit an error in Oloproof's own code: recorded, every criterion missing, with the traceback."""
    return error_record(case.id, plan.label, internal_error(exc))


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


#: In a record served by or stored in the execution cache: (key, verdict bundles); evaluation pops it.
EXECUTION_ENTRY = "_execution_entry"
#: The execution entry's field holding its verdict bundles (see evaluation.py), never part of a record.
VERDICTS = "verdicts"


def cacheable(rec: Mapping[str, Any]) -> dict[str, Any]:
    """What the execution entry keeps of a record (with what executing it cost, when a stage reported usage)."""
    keep = ("retrieval", "context", "dropped", "context_truncated", "output")
    out = {k: rec[k] for k in keep}
    if "query" in rec:
        out["query"] = rec["query"]
    produced = production_usage(rec)
    if produced:
        out["usage"] = produced
    return out


def production_usage(rec: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Per stage, what producing the record's execution cost: calls made now plus cache entries reused."""
    usage = rec.get("usage")
    if not isinstance(usage, Mapping):
        return {}
    out: dict[str, list[dict[str, Any]]] = {}
    for source in ((usage.get("saved") or {}).get("stages") or {}, usage.get("stages") or {}):
        for stage, entries in source.items():
            out.setdefault(stage, []).extend(entries)
    return out


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


def _check_json(value: Any, case_id: str, what: str, *, stage: str | None = None, path: str | None = None) -> str:
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
