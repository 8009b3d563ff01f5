"""No case ever vanishes from a run (issue 12 §1, §7).

Whatever a stage raises (SystemExit, GeneratorExit, a bare BaseException, CancelledError
from an async stage) is that case's error; an error in Oloproof's own code is a recorded
case with reason `internal_error`; only KeyboardInterrupt stops the run. The invariant:
the record's cases are the selected cases and every metric's observed + missing +
excluded is their number, under threads, the event loop and xdist.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_oloproof import Passage, Retrieval
from pytest_oloproof.cache.caches import Caches
from pytest_oloproof.engine.attempts import AttemptDeadline as _Gate
from pytest_oloproof.engine.attempts import CompletionLedger as RunGate
from pytest_oloproof.engine.attempts import cancel_task
from pytest_oloproof.engine.recorder import RunRecorder
from pytest_oloproof.engine.stages import Engine
from pytest_oloproof.engine.system_resolution import ResolvedSystem
from pytest_oloproof.records.identity import execution_key
from pytest_oloproof.store.files import Store
from tests.test_scale import SYSCONF, ScriptedSystem, make_case, make_engine


class Bare(BaseException):
    """Not an Exception: what a careless library may raise."""


RAISED = {
    "SystemExit": lambda: SystemExit(3),
    "GeneratorExit": lambda: GeneratorExit("closed"),
    "Bare": lambda: Bare("not an Exception"),
    "CancelledError": lambda: asyncio.CancelledError("the stage cancelled itself"),
}


def _raiser(stage: str, name: str, use_async: bool) -> Any:
    class Sync(ScriptedSystem):
        def retrieve(self, input: Any, depth: int) -> Retrieval:
            if stage == "retrieve":
                raise RAISED[name]()
            return super().retrieve(input, depth)

        def generate(self, input: Any, context: Any) -> dict[str, Any]:
            if stage == "generate":
                raise RAISED[name]()
            return super().generate(input, context)

    class Async:
        async def retrieve(self, input: Any, depth: int) -> Retrieval:
            await asyncio.sleep(0)
            if stage == "retrieve":
                raise RAISED[name]()
            return Retrieval(query=input["q"], depth=depth, candidates=(Passage("d1", 1.0, "t"),))

        async def generate(self, input: Any, context: Any) -> dict[str, Any]:
            await asyncio.sleep(0)
            if stage == "generate":
                raise RAISED[name]()
            return {"answer": "a"}

    return Async() if use_async else Sync()


@pytest.mark.parametrize("name", list(RAISED))
@pytest.mark.parametrize("stage", ["retrieve", "generate"])
@pytest.mark.parametrize("driver", ["sync", "sync-timeout", "async", "async-timeout"])
def test_a_base_exception_from_a_stage_is_the_cases_error(tmp_path: Path, name: str, stage: str, driver: str) -> None:
    use_async = driver.startswith("async")
    timeout = 30.0 if driver.endswith("timeout") else None
    engine, caches, _ = make_engine(_raiser(stage, name, use_async), tmp_path, timeout_s=timeout)
    case = make_case(1)
    rec = asyncio.run(engine.aexecute(case)) if use_async else engine.execute(case)
    err = rec["error"]
    assert err["reason"] == "system_error" and err["type"] == name and err["stage"] == stage, err
    assert f"{stage}() raised {name}" in err["message"]
    assert rec["output"] is None
    assert caches.get("execution", execution_key(SYSCONF, case.input)) is None  # errors are never cached
    caches.close()


@pytest.mark.parametrize("name", list(RAISED))
@pytest.mark.parametrize("stage", ["retrieve", "generate"])
def test_a_base_exception_from_a_sync_stage_sent_to_a_thread_is_the_cases_error(
    tmp_path: Path, name: str, stage: str
) -> None:
    """On the event loop a sync stage runs in a thread: what it raises (GeneratorExit too) is still its error."""
    engine, caches, _ = make_engine(_raiser(stage, name, use_async=False), tmp_path)
    rec = asyncio.run(engine.aexecute(make_case(1)))
    err = rec["error"]
    assert err["reason"] == "system_error" and err["type"] == name and err["stage"] == stage, err
    assert f"{stage}() raised {name}" in err["message"]
    caches.close()


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_keyboard_interrupt_from_a_stage_still_stops_the_run(tmp_path: Path, use_async: bool) -> None:
    RAISED["KeyboardInterrupt"] = KeyboardInterrupt
    try:
        engine, caches, _ = make_engine(_raiser("generate", "KeyboardInterrupt", use_async), tmp_path)
        with pytest.raises(KeyboardInterrupt):
            asyncio.run(engine.aexecute(make_case(1))) if use_async else engine.execute(make_case(1))
    finally:
        del RAISED["KeyboardInterrupt"]
    caches.close()


@pytest.mark.parametrize("by", ["oloproof", "anyone"])
def test_a_cancelled_case_task_is_still_a_cancellation(tmp_path: Path, by: str) -> None:
    """Only a CancelledError the stage raised itself is its error; cancelling the case's task stops it.

    Python 3.10 cannot ask a task whether it is being cancelled, so there only the cancellations
    Oloproof makes itself (the run stopping, `cancel_task`; the timeout) are told apart.
    """
    if by == "anyone" and sys.version_info < (3, 11):
        pytest.skip("Python 3.10 has no Task.cancelling(): a foreign cancellation looks like the stage's own")

    class Waits:
        async def retrieve(self, input: Any, depth: int) -> Retrieval:
            await asyncio.sleep(30)
            raise AssertionError("never reached")

        async def generate(self, input: Any, context: Any) -> dict[str, Any]:
            return {}

    engine, caches, _ = make_engine(Waits(), tmp_path)

    async def run() -> None:
        task = asyncio.get_running_loop().create_task(engine.aexecute(make_case(1)))
        await asyncio.sleep(0.05)
        cancel_task(task) if by == "oloproof" else task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(run())
    caches.close()


class BrokenCaches(Caches):
    """A real cache whose lookups fail: stands for a bug in Oloproof's own per-case code."""

    def get(self, kind: str, key: str, *, bypass: bool = False) -> Any:
        raise RuntimeError("a bug inside Oloproof")


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_an_error_in_oloproofs_own_code_is_a_recorded_internal_error(tmp_path: Path, use_async: bool) -> None:
    system = ResolvedSystem("rag", ScriptedSystem(), dict(SYSCONF))
    caches = BrokenCaches(tmp_path / "cache")
    engine = Engine(system, caches)
    rec = asyncio.run(engine.aexecute(make_case(1))) if use_async else engine.execute(make_case(1))
    err = rec["error"]
    assert err["reason"] == "internal_error" and err["stage"] == "oloproof"
    assert "RuntimeError: a bug inside Oloproof" in err["traceback"]
    caches.close()


def test_a_case_record_that_cannot_be_written_is_recorded_as_an_internal_error(tmp_path: Path) -> None:
    store = Store(tmp_path / ".oloproof")
    header = {"evaluators": [{"criterion": "ok", "kind": "rate"}], "slices": [], "confidence": 0.95, "seed": 0}
    recorder = RunRecorder(store, {"system": {"name": "s"}, **header})
    good = {"id": "a", "criteria": {"ok": {"status": "observed", "value": 1.0}}, "error": None, "cache": {}}
    odd = {"id": "b", "criteria": {"ok": {"status": "observed", "value": 1.0, "actual": object()}}, "cache": {}}
    recorder.add(good)
    recorder.add(odd)
    record = recorder.finish("complete")
    recorder.close()
    stored = store.load_run(recorder.run_id)
    assert [c["id"] for c in stored["cases"]] == ["a", "b"]
    assert stored["cases"][1]["criteria"]["ok"] == {"status": "missing", "reason": "internal_error"}
    assert stored["cases"][1]["error"]["reason"] == "internal_error"
    m = record["metrics"]["ok"]
    assert (m["observed"], m["missing"], m["excluded"]) == (1, 1, 0)
    assert record["counts"]["internal_errors"] == 1


# ------------------------------------------------------------------ §7: the stage that broke the contract


def test_the_error_stage_is_the_stage_whose_output_broke_the_contract(tmp_path: Path) -> None:
    class NanScore(ScriptedSystem):
        def retrieve(self, input: Any, depth: int) -> Retrieval:
            meta = {"when": object()} if input["q"] == "question 2" else None
            score = 1.0 if meta else float("nan")
            return Retrieval(query=input["q"], depth=depth, candidates=(Passage("d1", score, "t", metadata=meta),))

        def count_tokens(self, passage: Passage) -> int:
            return 1

    engine, caches, _ = make_engine(NanScore(), tmp_path)
    for n in (1, 2):  # a NaN score, then non-serialisable metadata; count_tokens ran last both times
        err = engine.execute(make_case(n))["error"]
        assert err["reason"] == "contract_violation"
        assert err["stage"] == "retrieve", err
        assert ("has score nan" if n == 1 else "retrieve() candidates") in err["message"], err["message"]
    caches.close()


# ------------------------------------------------------------------ §7: a result after the timeout is never used


def test_an_async_stage_that_blocks_the_loop_past_its_timeout_is_a_timeout(tmp_path: Path) -> None:
    class Blocking:
        async def retrieve(self, input: Any, depth: int) -> Retrieval:
            return Retrieval(query=input["q"], depth=depth, candidates=(Passage("d1", 1.0, "t"),))

        async def generate(self, input: Any, context: Any) -> dict[str, Any]:
            time.sleep(0.6)  # blocks the event loop: wait_for cannot fire until it returns
            return {"answer": "late"}

    engine, caches, _ = make_engine(Blocking(), tmp_path, timeout_s=0.2)
    case = make_case(1)
    rec = asyncio.run(engine.aexecute(case))
    assert rec["error"] is not None and rec["error"]["reason"] == "timeout", rec
    assert rec["output"] is None
    assert caches.get("execution", execution_key(SYSCONF, case.input)) is None
    caches.close()


def test_a_gate_past_its_deadline_commits_nothing() -> None:
    gate = _Gate(deadline=time.monotonic() - 1.0)
    assert gate.late()
    assert not gate.commit(None, "key", {"x": 1}, False)  # type: ignore[arg-type]  # never reaches the cache
    ontime = _Gate(deadline=time.monotonic() + 60.0)
    assert not ontime.late()


def test_a_closed_run_gate_lets_no_case_complete(tmp_path: Path) -> None:
    """Once an interrupted session decides its record, no case writes its execution entry any more."""
    engine, caches, _ = make_engine(ScriptedSystem(), tmp_path)
    engine.ledger = gate = RunGate()
    first = engine.execute(make_case(1))
    assert first["error"] is None
    assert list(gate.close()) == ["c001"]
    second = make_case(2)
    engine.execute(second)
    assert caches.get("execution", execution_key(SYSCONF, second.input)) is None
    assert list(gate.done) == ["c001"]
    caches.close()


# ------------------------------------------------------------------ the invariant, through pytest

MIXED_SYSTEM = """
import asyncio
from pytest_oloproof import Passage, Retrieval, rag_system


class Bare(BaseException):
    pass


def boom(kind):
    if kind == "system_exit":
        raise SystemExit(3)
    if kind == "generator_exit":
        raise GeneratorExit("closed")
    if kind == "bare":
        raise Bare("not an Exception")
    if kind == "cancelled":
        raise asyncio.CancelledError("the stage cancelled itself")
    if kind == "error":
        raise RuntimeError("plain")


@rag_system(name="mixed", version="1", depth=2, top_k=2)
class System:
    {prefix}def retrieve(self, input, depth):
        boom(input.get("retrieve"))
        score = float("nan") if input.get("nan_score") else 1.0
        return Retrieval(query=input["q"], depth=depth, candidates=(Passage("d1", score, "refunds take 14 days"),))

    {prefix}def generate(self, input, context):
        boom(input.get("generate"))
        return {{"answer": " ".join(p.text for p in context)}}
"""

# an Oloproof bug for one case, in every process of the session (xdist workers load it too)
BUGGY_CONFTEST = """
import pytest_oloproof.evaluate.record as evaluation

_original = evaluation.relevant_position


def _buggy(case, views, unit="document"):
    if case.id == "internal":
        raise RuntimeError("a bug inside Oloproof")
    return _original(case, views, unit)


evaluation.relevant_position = _buggy
"""

LABELS = {"relevant": [{"doc_id": "d1"}], "answer": "14 days"}
MIXED_CASES: list[dict[str, Any]] = [
    {"id": "ok", "input": {"q": "a"}, "expected": LABELS},
    {"id": "ok_unlabelled", "input": {"q": "b"}, "expected": {"answer": "14 days"}},
    {"id": "deselected", "input": {"q": "c"}, "expected": LABELS},
    {"id": "system_exit", "input": {"q": "d", "retrieve": "system_exit"}, "expected": LABELS},
    {"id": "generator_exit", "input": {"q": "e", "generate": "generator_exit"}, "expected": LABELS},
    {"id": "bare", "input": {"q": "f", "generate": "bare"}, "expected": LABELS},
    {"id": "cancelled", "input": {"q": "g", "generate": "cancelled"}, "expected": LABELS},
    {"id": "error", "input": {"q": "h", "retrieve": "error"}, "expected": {"answer": "x"}},
    {"id": "nan_score", "input": {"q": "i", "nan_score": True}, "expected": LABELS},
    {"id": "internal", "input": {"q": "j"}, "expected": LABELS},
    {"id": "wrong", "input": {"q": "k"}, "expected": {"answer": "30 days"}},
]
SELECTED = sorted(c["id"] for c in MIXED_CASES if c["id"] != "deselected")


@pytest.mark.parametrize(
    ("use_async", "concurrency", "workers"),
    [(False, 1, 0), (False, 4, 0), (True, 4, 0), (False, 1, 2), (True, 2, 2)],
    ids=["main-thread", "threads", "event-loop", "xdist", "xdist-event-loop"],
)
def test_every_selected_case_is_recorded_whatever_fails(
    pytester: pytest.Pytester, use_async: bool, concurrency: int, workers: int
) -> None:
    pytester.makepyfile(mixed_app=MIXED_SYSTEM.format(prefix="async " if use_async else ""))
    pytester.makeconftest(BUGGY_CONFTEST)
    pytester.makefile(".jsonl", cases="\n".join(json.dumps(c) for c in MIXED_CASES) + "\n")
    pytester.makefile(
        ".yaml",
        oloproof="system:\n  rag:\n    object: mixed_app:System\ncases: cases.jsonl\nevaluators:\n"
        "  - {type: contains, criterion: answer_correct, field: answer, expected_field: answer}\n"
        "  - {type: hit_rate, k: 2}\n"
        f"concurrency: {concurrency}\nstore: .oloproof\n",
    )
    report = pytester.path / "report.json"
    xdist = ["-p", "xdist", "-n", str(workers)] if workers else []
    result = pytester.runpytest_subprocess(
        "--oloproof", "-p", "no:cacheprovider", "-k", "not deselected", f"--oloproof-report={report}", *xdist
    )
    assert result.ret == 1, result.stdout.str()
    record = json.loads(report.read_text())
    assert record["status"] == "complete"
    assert sorted(c["id"] for c in record["cases"]) == SELECTED
    for name, m in record["metrics"].items():
        assert m["observed"] + m["missing"] + m["excluded"] == len(SELECTED), (name, m)
    by_id = {c["id"]: c for c in record["cases"]}
    for cid, stage, type_ in [
        ("system_exit", "retrieve", "SystemExit"),
        ("generator_exit", "generate", "GeneratorExit"),
        ("bare", "generate", "Bare"),
        ("cancelled", "generate", "CancelledError"),
        ("error", "retrieve", "RuntimeError"),
    ]:
        err = by_id[cid]["error"]
        assert (err["reason"], err["stage"], err["type"]) == ("system_error", stage, type_), (cid, err)
        assert {c["status"] for c in by_id[cid]["criteria"].values()} == {"missing"}
        assert {c["reason"] for c in by_id[cid]["criteria"].values()} == {"system_error"}
    assert by_id["nan_score"]["error"]["stage"] == "retrieve"
    assert by_id["nan_score"]["error"]["reason"] == "contract_violation"
    internal = by_id["internal"]
    assert internal["error"]["reason"] == "internal_error"
    assert "a bug inside Oloproof" in internal["error"]["traceback"]
    assert {c["reason"] for c in internal["criteria"].values()} == {"internal_error"}
    assert by_id["ok"]["criteria"]["answer_correct"]["value"] == 1.0
    assert by_id["ok_unlabelled"]["criteria"]["hit_rate_at_2"]["status"] == "excluded"
    assert record["counts"]["internal_errors"] == 1
    result.stdout.fnmatch_lines(
        ["*System errors: 6 cases missing for every criterion*", "*Internal errors: 1 case(s) hit an error inside*"]
    )


# ------------------------------------------------------------------ §7: an interrupted record, exactly

# Ctrl-C lands in an item after its case executed (and was cached) but before its report was recorded.
INTERRUPT_CONFTEST = """
import os
import pytest_oloproof.evaluate.record as evaluation

_original = evaluation.relevant_position
_pressed = []


def _interrupted(case, views, unit="document"):
    if os.environ.get("OLO_INTERRUPT_AT") == case.id and not _pressed:  # Ctrl-C, once
        _pressed.append(case.id)
        raise KeyboardInterrupt
    return _original(case, views, unit)


evaluation.relevant_position = _interrupted
"""


@pytest.mark.parametrize("concurrency", [1, 8])
def test_an_interrupted_record_holds_exactly_the_cases_that_completed(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, concurrency: int
) -> None:
    pytester.makepyfile(mixed_app=MIXED_SYSTEM.format(prefix=""))
    pytester.makeconftest(INTERRUPT_CONFTEST)
    cases = [{"id": f"c{i:02d}", "input": {"q": f"q{i}"}, "expected": LABELS} for i in range(24)]
    pytester.makefile(".jsonl", cases="\n".join(json.dumps(c) for c in cases) + "\n")
    pytester.makefile(
        ".yaml",
        oloproof="system:\n  rag:\n    object: mixed_app:System\ncases: cases.jsonl\nevaluators:\n"
        "  - {type: contains, criterion: answer_correct, field: answer, expected_field: answer}\n"
        f"concurrency: {concurrency}\nstore: .oloproof\n",
    )
    monkeypatch.setenv("OLO_INTERRUPT_AT", "c03")
    first = pytester.runpytest_subprocess("--oloproof", "-p", "no:cacheprovider")
    assert first.ret == pytest.ExitCode.INTERRUPTED, first.stdout.str()
    (run_dir,) = (pytester.path / ".oloproof" / "runs").iterdir()
    recorded = [json.loads(line)["id"] for line in (run_dir / "cases.jsonl").read_text().splitlines()]
    assert json.loads((run_dir / "run.json").read_text())["status"] == "incomplete"
    assert "c03" in recorded  # it completed (and was cached) before the interruption
    assert len(recorded) == len(set(recorded))

    monkeypatch.delenv("OLO_INTERRUPT_AT")
    report = pytester.path / "again.json"
    again = pytester.runpytest_subprocess("--oloproof", "-p", "no:cacheprovider", f"--oloproof-report={report}")
    assert again.ret == 0, again.stdout.str()
    hits = sorted(c["id"] for c in json.loads(report.read_text())["cases"] if c["cache"]["execution"] == "hit")
    assert hits == sorted(recorded)


def test_a_record_with_fewer_cases_than_selected_is_never_complete(pytester: pytest.Pytester) -> None:
    """A case whose item never ran (here a conftest fixture errors in its setup) leaves the run incomplete."""
    pytester.makepyfile(mixed_app=MIXED_SYSTEM.format(prefix=""))
    pytester.makeconftest(
        "import pytest\n\n\n@pytest.fixture(autouse=True)\ndef guard(request):\n"
        "    if request.node.name.endswith('[b]'):\n        raise RuntimeError('setup failed')\n"
    )
    cases = [{"id": cid, "input": {"q": cid}, "expected": LABELS} for cid in ("a", "b", "c")]
    pytester.makefile(".jsonl", cases="\n".join(json.dumps(c) for c in cases) + "\n")
    pytester.makefile(
        ".yaml",
        oloproof="system:\n  rag:\n    object: mixed_app:System\ncases: cases.jsonl\nevaluators:\n"
        "  - {type: contains, criterion: answer_correct, field: answer, expected_field: answer}\nstore: .oloproof\n",
    )
    report = pytester.path / "report.json"
    result = pytester.runpytest_subprocess("--oloproof", "-p", "no:cacheprovider", f"--oloproof-report={report}")
    result.assert_outcomes(passed=2, errors=1)
    record = json.loads(report.read_text())
    assert sorted(c["id"] for c in record["cases"]) == ["a", "c"]
    assert record["status"] == "incomplete"
