"""Execution at scale: concurrency, the event loop, timeouts, retries, progress, determinism."""

from __future__ import annotations

import json
import random
import re
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from oloproof_project import PROBE_CONFTEST

from pytest_oloproof import Passage, Retrieval, Transient
from pytest_oloproof.cache.caches import Caches
from pytest_oloproof.engine.attempts import AttemptDeadline as _Gate
from pytest_oloproof.engine.progress import Progress, ProgressDisplay
from pytest_oloproof.engine.scheduler import Scheduler as Prefetcher
from pytest_oloproof.engine.stages import Engine
from pytest_oloproof.engine.system_resolution import ResolvedSystem
from pytest_oloproof.records.cases import Case
from pytest_oloproof.records.identity import execution_key, retrieve_key
from pytest_oloproof.stats.aggregate import summarize_run, summary_settings
from pytest_oloproof.store.summary import slim_case

# ------------------------------------------------------------------ engine-level helpers

SYSCONF = {
    "kind": "rag",
    "object": "test:System",
    "name": "scale-test",
    "version": "1",
    "depth": 2,
    "top_k": 2,
    "token_budget": None,
    "index_version": "i1",
}


def make_case(n: int) -> Case:
    return Case(
        id=f"c{n:03d}",
        input={"q": f"question {n}"},
        expected={},
        metadata={},
        relevant=None,
        gold_context=None,
        source="",
    )


class Flaky(Exception):
    """A system's own transient error type (declared in transient_errors)."""


class ScriptedSystem:
    """Retrieve works; generate follows a per-case script of exceptions to raise before answering."""

    transient_errors = (Flaky,)

    def __init__(self, script: dict[str, list[BaseException]] | None = None) -> None:
        self.script = script or {}
        self.calls: dict[str, int] = {}

    def retrieve(self, input: Any, depth: int) -> Retrieval:
        return Retrieval(query=input["q"], depth=depth, candidates=(Passage("d1", 1.0, "text one"),))

    def generate(self, input: Any, context: Any) -> dict[str, Any]:
        q = input["q"]
        self.calls[q] = self.calls.get(q, 0) + 1
        pending = self.script.get(q) or []
        if pending:
            raise pending.pop(0)
        return {"answer": f"answer to {q}"}


def make_engine(obj: Any, tmp_path: Path, **kw: Any) -> tuple[Engine, Caches, list[float]]:
    caches = Caches(tmp_path / "cache")
    sleeps: list[float] = []
    system = ResolvedSystem("rag", obj, dict(SYSCONF), (Transient, *getattr(obj, "transient_errors", ())))
    engine = Engine(system, caches, _sleep=sleeps.append, **kw)
    return engine, caches, sleeps


# ------------------------------------------------------------------ retries


def test_transient_error_that_succeeds_on_retry_is_observed(tmp_path: Path) -> None:
    system = ScriptedSystem({"question 1": [Transient("rate limited"), Flaky("503")]})
    draws: list[tuple[float, float]] = []

    class Recording(random.Random):
        def uniform(self, a: float, b: float) -> float:
            draws.append((a, b))
            return b / 2

    engine, caches, sleeps = make_engine(system, tmp_path, retries=3, backoff_s=0.5, rng=Recording())
    rec = engine.execute(make_case(1))
    assert rec["error"] is None
    assert rec["output"] == {"answer": "answer to question 1"}
    assert rec["attempts"] == 3
    assert draws == [(0.0, 0.5), (0.0, 1.0)]  # full jitter over an exponential ceiling
    assert sleeps == [0.25, 0.5]  # what the jitter source drew
    caches.close()


def test_exhausted_retries_are_missing_with_the_last_error(tmp_path: Path) -> None:
    system = ScriptedSystem({"question 2": [Flaky("first"), Flaky("second"), Flaky("last one")]})
    engine, caches, sleeps = make_engine(system, tmp_path, retries=2)
    rec = engine.execute(make_case(2))
    assert rec["attempts"] == 3
    assert system.calls["question 2"] == 3
    err = rec["error"]
    assert err["type"] == "Flaky" and err["transient"] is True
    assert "last one" in err["message"] and "gave up after 3 attempts" in err["message"]
    assert len(sleeps) == 2
    # errors are never cached: the next execution calls the system again
    assert caches.get("execution", execution_key(SYSCONF, make_case(2).input)) is None
    caches.close()


def test_non_transient_error_is_not_retried(tmp_path: Path) -> None:
    system = ScriptedSystem({"question 3": [ValueError("bug")]})
    engine, caches, sleeps = make_engine(system, tmp_path, retries=5)
    rec = engine.execute(make_case(3))
    assert rec["attempts"] == 1 and sleeps == []
    assert rec["error"]["transient"] is False and rec["error"]["type"] == "ValueError"
    caches.close()


async def _arun(engine: Engine, case: Case) -> dict[str, Any]:
    return await engine.aexecute(case)


def test_async_driver_retries_and_times_out(tmp_path: Path) -> None:
    import asyncio

    class AsyncSystem:
        def __init__(self) -> None:
            self.failed = False

        async def retrieve(self, input: Any, depth: int) -> Retrieval:
            return Retrieval(query=input["q"], depth=depth, candidates=(Passage("d1", 1.0, "t"),))

        async def generate(self, input: Any, context: Any) -> dict[str, Any]:
            if input["q"] == "question 1" and not self.failed:
                self.failed = True
                raise Transient("once")
            if input["q"] == "question 2":
                await asyncio.sleep(30)
            return {"answer": "a"}

    # the case that must finish does so under a deadline a loaded machine cannot miss; the one that must
    # time out has a short one (its stage sleeps 30 s: load only makes it later)
    engine, caches, _ = make_engine(AsyncSystem(), tmp_path, retries=1, backoff_s=0.0, timeout_s=30.0)
    ok = asyncio.run(_arun(engine, make_case(1)))
    assert ok["error"] is None and ok["attempts"] == 2
    engine.timeout_s = 0.3
    late = asyncio.run(_arun(engine, make_case(2)))
    assert late["error"]["reason"] == "timeout" and late["output"] is None
    assert caches.get("execution", execution_key(SYSCONF, make_case(2).input)) is None
    caches.close()


# ------------------------------------------------------------------ timeouts


def test_timed_out_case_is_missing_and_its_late_result_is_never_cached(tmp_path: Path) -> None:
    release, returned = threading.Event(), threading.Event()

    class Slow(ScriptedSystem):
        def generate(self, input: Any, context: Any) -> dict[str, Any]:
            release.wait(30)
            returned.set()
            return {"answer": "too late"}

    # the deadline leaves the (instant) retrieve stage ample time on a loaded machine; generate waits for `release`
    engine, caches, _ = make_engine(Slow(), tmp_path, timeout_s=2.0)
    case = make_case(4)
    rec = engine.execute(case)
    assert rec["error"]["reason"] == "timeout" and rec["error"]["stage"] == "timeout"
    assert "timeout_s=2.0" in rec["error"]["message"]
    assert rec["output"] is None
    release.set()  # the abandoned attempt now finishes and tries to write its result
    assert returned.wait(10)
    for t in threading.enumerate():
        if t.name == f"oloproof-case-{case.id}":
            t.join(10)
    # the retrieve stage completed before the deadline: reusing it is right; the
    # late generate and the execution entry (the case "succeeded") were never written
    assert caches.get("retrieve", retrieve_key(SYSCONF, case.input)) is not None
    assert caches.get("execution", execution_key(SYSCONF, case.input)) is None
    assert engine.execute(case)["cache"]["generate"] == "miss"
    caches.close()


def test_gate_commit_and_abandon_are_exclusive(tmp_path: Path) -> None:
    caches = Caches(tmp_path / "cache")
    committed = _Gate()
    committed.commit(caches, "k1", {"output": 1}, False)
    assert committed.abandon() is False  # the result stands: it was written before the deadline
    assert caches.get("execution", "k1") == {"output": 1}
    abandoned = _Gate()
    assert abandoned.abandon() is True
    abandoned.put(caches, "generate", "k2", {"output": 2}, False)
    abandoned.commit(caches, "k3", {"output": 3}, False)
    assert caches.get("generate", "k2") is None and caches.get("execution", "k3") is None
    caches.close()


# ------------------------------------------------------------------ prefetcher and progress


def test_thread_prefetcher_runs_cases_concurrently_in_a_bounded_window(tmp_path: Path) -> None:
    barrier = threading.Barrier(4, timeout=10)
    seen: list[str] = []

    class Together(ScriptedSystem):
        def retrieve(self, input: Any, depth: int) -> Retrieval:
            barrier.wait()  # raises BrokenBarrierError unless 4 cases really run at once
            seen.append(input["q"])
            return super().retrieve(input, depth)

    engine, caches, _ = make_engine(Together(), tmp_path)
    cases = [make_case(i) for i in range(16)]
    pre = Prefetcher(engine, cases, 4, window=8)
    pre.start()
    recs = [pre.result(c.id) for c in cases]
    assert [r["id"] for r in recs] == [c.id for c in cases]
    assert all(r["error"] is None for r in recs), [r["error"] for r in recs if r["error"]]
    assert pre.progress.done == 16 and pre.progress.errors == 0
    assert len(seen) == 16
    pre.stop()
    caches.close()


def test_stopped_prefetcher_starts_nothing_new(tmp_path: Path) -> None:
    engine, caches, _ = make_engine(ScriptedSystem(), tmp_path)
    cases = [make_case(i) for i in range(50)]
    pre = Prefetcher(engine, cases, 2, window=4)
    pre.start()
    pre.result(cases[0].id)
    pre.stop(grace_s=5)
    done = [(c, rec) for c in cases if (rec := pre.settled(c.id, wait=False)) is not None]
    assert pre.running == 0
    # at most the window past the claimed case was ever started
    assert 0 < pre.progress.done <= 1 + 4 + 2
    assert all(c.id != cases[0].id for c, _ in done)  # the claimed one belongs to its item
    assert len(done) == pre.progress.done - 1
    caches.close()


def test_progress_line_is_throttled_and_counts_hits_and_errors() -> None:
    now = [100.0]
    progress = Progress(10, clock=lambda: now[0])
    lines: list[str] = []
    display = ProgressDisplay(progress, lines.append, every_s=2.0, after_s=2.0, clock=lambda: now[0])
    progress.add({"cache": {"execution": "hit"}, "error": None})
    display.tick()
    assert lines == []  # not a long run yet
    now[0] += 2.5
    progress.add({"cache": {"execution": "miss"}, "error": {"message": "boom"}})
    display.tick()
    display.tick()  # throttled
    now[0] += 2.0
    display.tick()
    assert len(lines) == 2
    assert lines[0] == "oloproof: 2/10 cases · 1 cache hits · 1 errors · 0.8 cases/s"


# ------------------------------------------------------------------ through pytest

ASYNC_SYSTEM = """
import asyncio, json, threading
from pathlib import Path
from pytest_oloproof import Passage, Retrieval, rag_system

STATE = {"inflight": 0, "max": 0, "threads": set(), "gate": None}


@rag_system(name="async-rag", version="1", depth=2, top_k=1)
class AsyncRag:
    async def retrieve(self, input, depth):
        if STATE["gate"] is None:
            STATE["gate"] = asyncio.Event()
        STATE["threads"].add(threading.get_ident())
        STATE["inflight"] += 1
        STATE["max"] = max(STATE["max"], STATE["inflight"])
        if STATE["inflight"] >= 8:
            STATE["gate"].set()
        # fails (TimeoutError) unless 8 cases are in flight together on this loop
        await asyncio.wait_for(STATE["gate"].wait(), 10)
        await asyncio.sleep(0)
        STATE["inflight"] -= 1
        return Retrieval(query=input["q"], depth=depth, candidates=(Passage("d1", 1.0, "text"),))

    async def generate(self, input, context):
        await asyncio.sleep(0)
        seen = {"max": STATE["max"], "threads": len(STATE["threads"])}
        Path(__file__).with_name("state.json").write_text(json.dumps(seen))
        return {"answer": "yes " + input["q"]}
"""


def write_project(root: Path, module: str, source: str, n: int, extra: str = "") -> None:
    (root / f"{module}.py").write_text(source)
    with (root / "cases.jsonl").open("w") as f:
        for i in range(n):
            case = {"id": f"c{i:03d}", "input": {"q": f"q{i}"}, "expected": {"answer": "yes"}}
            f.write(json.dumps(case) + "\n")
    (root / "oloproof.yaml").write_text(
        f"system:\n  rag:\n    object: {module}:{'AsyncRag' if 'AsyncRag' in source else 'System'}\n"
        "cases: cases.jsonl\n"
        "evaluators:\n  - {type: contains, criterion: answer_correct, field: answer, expected_field: answer}\n"
        "store: .oloproof\n" + extra
    )


def test_async_system_runs_many_cases_on_one_event_loop(pytester: pytest.Pytester) -> None:
    module = f"asyncsys_{uuid.uuid4().hex[:8]}"
    write_project(pytester.path, module, ASYNC_SYSTEM, 24, "concurrency: 8\n")
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=24)
    state = json.loads((pytester.path / "state.json").read_text())
    assert state["max"] == 8  # never more than `concurrency` at once
    assert state["threads"] == 1  # all of them on one event loop thread


def test_progress_is_shown_on_request_and_off_by_default_without_a_terminal(pytester: pytest.Pytester) -> None:
    module = f"progsys_{uuid.uuid4().hex[:8]}"
    source = ASYNC_SYSTEM.replace('STATE["inflight"] >= 8', "True")
    # enough cases for pytest to wrap its line of dots: the progress line is written only between lines
    write_project(pytester.path, module, source, 150, "concurrency: 3\n")
    quiet = pytester.runpytest("--oloproof", "-p", "no:cacheprovider", "-q")
    assert "cases/s" not in quiet.stdout.str()
    shown = pytester.runpytest(
        "--oloproof", "-p", "no:cacheprovider", "-q", "-o", "oloproof_progress=on", "-o", "oloproof_progress_interval=0"
    )
    shown.assert_outcomes(passed=150)
    shown.stdout.fnmatch_lines(["oloproof: */150 cases · * cache hits · 0 errors · * cases/s"])
    for line in shown.stdout.lines:  # never glued to pytest's dots
        assert "oloproof: " not in line or line.startswith("oloproof: ") or line.startswith("Run ")


TIMEOUT_SYSTEM = """
import time
from pytest_oloproof import Passage, Retrieval, rag_system


@rag_system(name="slow-rag", version="1", depth=1, top_k=1)
class System:
    def retrieve(self, input, depth):
        return Retrieval(query=input["q"], depth=depth, candidates=(Passage("d1", 1.0, "t"),))

    def generate(self, input, context):
        if input["q"] == "q1":
            time.sleep(5)
        return {"answer": "yes"}
"""


def test_timed_out_case_fails_its_item_as_missing_with_reason_timeout(pytester: pytest.Pytester) -> None:
    module = f"slowsys_{uuid.uuid4().hex[:8]}"
    # every case has the same deadline: 3 s leaves the two instant cases (stages and cache writes) ample
    # time on a loaded machine; the third sleeps 5 s
    write_project(pytester.path, module, TIMEOUT_SYSTEM, 3, "timeout_s: 3.0\nconcurrency: 3\n")
    report = pytester.path / "report.json"
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider", f"--oloproof-report={report}")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*case 'c001'*", "*did not finish within timeout_s=3.0*"])
    record = json.loads(report.read_text())
    by_id = {c["id"]: c for c in record["cases"]}
    assert by_id["c001"]["criteria"]["answer_correct"] == {
        "status": "missing",
        "reason": "timeout",
        "detail": {"message": "case did not finish within timeout_s=3.0"},
    }
    assert record["metrics"]["answer_correct"]["missing_reasons"] == {"timeout": 1}
    assert by_id["c000"]["criteria"]["answer_correct"]["status"] == "observed"


# ------------------------------------------------------------------ concurrency never changes results

SEEDED_SYSTEM = """
import hashlib, random, time
from pytest_oloproof import Passage, Retrieval, rag_system


def rng(key):
    return random.Random(int(hashlib.sha256(key.encode()).hexdigest()[:16], 16))


@rag_system(name="seeded-rag", version="1", depth=5, top_k=3, token_budget=12, index_version="i1")
class System:
    def retrieve(self, input, depth):
        r = rng("retrieve" + input["q"])
        time.sleep(r.random() * 0.004)  # finish out of order under concurrency
        docs = r.sample(range(20), depth)
        return Retrieval(
            query=input["q"],
            depth=depth,
            candidates=tuple(Passage(f"d{d}", round(r.random(), 6), " ".join(["w"] * r.randint(1, 8))) for d in docs),
        )

    def generate(self, input, context):
        r = rng("generate" + input["q"])
        if r.random() < 0.1:
            raise RuntimeError("seeded failure for " + input["q"])
        answer = "yes" if r.random() < 0.6 else "no"
        return {"answer": answer, "citations": [p.doc_id for p in context][: r.randint(0, 2)]}

    def count_tokens(self, passage):
        return len(passage.text.split())
"""

VOLATILE = {"run_id", "started_at", "finished_at", "timings", "duration_s", "config_path"}


def strip_volatile(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: strip_volatile(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [strip_volatile(v) for v in value]
    return value


def assert_same(a: Any, b: Any, path: str = "$") -> None:
    """Field-by-field comparison that names the first differing path."""
    if isinstance(a, dict) and isinstance(b, dict):
        assert sorted(a) == sorted(b), f"{path}: keys differ: {sorted(set(a) ^ set(b))}"
        for k in a:
            assert_same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), f"{path}: {len(a)} != {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{path}[{i}]")
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def seeded_project(root: Path, module: str, n: int) -> None:
    (root / f"{module}.py").write_text(SEEDED_SYSTEM)
    with (root / "cases.jsonl").open("w") as f:
        for i in range(n):
            case = {
                "id": f"s{i:03d}",
                "input": {"q": f"seeded question {i}"},
                "expected": {"answer": "yes", "relevant": [{"doc_id": f"d{i % 20}"}]},
                "metadata": {"topic": f"t{i % 3}"},
            }
            f.write(json.dumps(case) + "\n")
    (root / "oloproof.yaml").write_text(
        f"system:\n  rag:\n    object: {module}:System\n"
        "cases: cases.jsonl\n"
        "evaluators:\n"
        "  - {type: contains, criterion: answer_correct, field: answer, expected_field: answer}\n"
        "  - {type: hit_rate, k: 3}\n"
        "  - {type: ndcg, k: 5}\n"
        "  - {type: citation_validity}\n"
        "slices: [metadata.topic, relevant_position, context_truncated]\n"
        "min_slice_support: 3\n"
        "store: .oloproof\n"
    )


def test_concurrency_1_and_16_give_identical_records(pytester: pytest.Pytester) -> None:
    import shutil

    module = f"seeded_{uuid.uuid4().hex[:8]}"
    seeded_project(pytester.path, module, 60)
    reports = {}
    for conc in (1, 16):
        shutil.rmtree(pytester.path / ".oloproof", ignore_errors=True)  # same cold cache for both
        report = pytester.path / f"report-{conc}.json"
        result = pytester.runpytest(
            "--oloproof", "-p", "no:cacheprovider", f"--oloproof-concurrency={conc}", f"--oloproof-report={report}"
        )
        assert result.ret == 1  # the seeded failures
        reports[conc] = json.loads(report.read_text())
    one, many = (strip_volatile(reports[c]) for c in (1, 16))
    assert len(one["cases"]) == 60
    assert any(c["error"] for c in one["cases"]) and any(c["context_truncated"] for c in one["cases"])
    assert_same(one, many)


# ------------------------------------------------------------------ long sessions

PLAIN_SYSTEM = """
from pytest_oloproof import Passage, Retrieval, rag_system


@rag_system(name="plain-rag", version="1", depth=2, top_k=2, index_version="i1")
class System:
    def retrieve(self, input, depth):
        return Retrieval(query=input["q"], depth=depth, candidates=(Passage("d1", 1.0, "one " + input["q"]),))

    def generate(self, input, context):
        return {"answer": "yes " + input["q"]}
"""


def test_a_long_session_freezes_what_it_collected_and_commits_its_cache_writes_itself(
    pytester: pytest.Pytester,
) -> None:
    n = 40
    write_project(pytester.path, f"plain_{uuid.uuid4().hex[:8]}", PLAIN_SYSTEM, n)
    pytester.makeconftest(PROBE_CONFTEST.format(min_items=n))  # a session of n items counts as long

    def run(*args: str) -> tuple[pytest.RunResult, dict[str, int]]:
        result = pytester.runpytest_subprocess("--oloproof", "-p", "no:cacheprovider", "-p", "no:randomly", *args)
        return result, json.loads((pytester.path / "gc.json").read_text())

    result, seen = run()
    result.assert_outcomes(passed=n)
    assert seen["during"] > 0 and seen["after"] == 0  # frozen while the cases ran, released at the end
    assert "answer_correct │ 100.0%" in result.stdout.str()  # the summary, computed by the session itself
    # the summary is the one computed from the stored cases
    (run_dir,) = (pytester.path / ".oloproof" / "runs").iterdir()
    record = json.loads((run_dir / "run.json").read_text())
    cases = [slim_case(json.loads(line)) for line in (run_dir / "cases.jsonl").read_text().splitlines()]
    settings = summary_settings({**record, "slices": []})  # the record's "slices" holds the computed slices
    assert json.loads(json.dumps(summarize_run(cases, settings))) == {
        k: record[k] for k in ("metrics", "slices", "cache", "counts")
    }

    result, seen = run()  # every group of writes was committed by the session itself
    assert re.search(rf"Cache: execution {n} hit/0 miss; judgment {n} hit/0 miss", result.stdout.str())

    result, seen = run("-k", "c000 or c001", "--oloproof-cache=refresh")  # a short session: no freeze
    result.assert_outcomes(passed=2)
    assert seen == {"during": 0, "after": 0}
