"""Judges of prefetched cases run ahead of their items, concurrently, as a sequential run records them."""

from __future__ import annotations

import json
import shutil
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.judge_server import Recorded, Reply, ScriptedServer

SYSTEM = """
import asyncio, time
from pytest_oloproof import Passage, Retrieval, rag_system

DOCS = ["Refunds take 14 days.", "Seats cost 8 dollars.", "Plans renew monthly."]
DISTINCT = {distinct!r}


@rag_system(name="ahead", version="1", depth=2, top_k=1, index_version="i1")
class Ahead:
    {a}def retrieve(self, input, depth):
        n = input["n"] % 3
        return Retrieval(query=input["q"], depth=depth, candidates=(Passage(f"d{{n}}", 1.0, DOCS[n]),))

    {a}def generate(self, input, context):
        {sleep}
        answer = context[0].text + (" (" + input["q"] + ")" if DISTINCT else "")
        return {{"answer": answer, "citations": [context[0].doc_id]}}
"""

N = 12


def _answer(req: Recorded) -> str:
    return str(req.json()["messages"][-1]["content"]).split("ANSWER:", 1)[1]


def verdicts(delay: float) -> Any:
    """A judge model: 'monthly' answers are ungrounded, the others grounded; each reply after `delay`."""

    def respond(req: Recorded) -> Reply:
        return Reply.verdict("fail" if "monthly" in _answer(req) else "pass", delay=delay)

    return respond


def project(
    root: Path,
    base_url: str,
    *,
    distinct: bool = True,
    use_async: bool = False,
    concurrency: int = 8,
    judge_concurrency: int = 3,
    judge_extra: str = "retries: 0",
) -> str:
    module = f"ahead_{uuid.uuid4().hex[:8]}"
    a = "async " if use_async else ""
    sleep = "await asyncio.sleep(0.02)" if use_async else "time.sleep(0.02)"
    (root / f"{module}.py").write_text(SYSTEM.format(distinct=distinct, a=a, sleep=sleep))
    with (root / "cases.jsonl").open("w") as f:
        for i in range(N):
            f.write(
                json.dumps({"id": f"c{i:02d}", "input": {"q": f"question {i}", "n": i}, "expected": {"answer": "s"}})
            )
            f.write("\n")
    (root / "oloproof.yaml").write_text(
        f"system:\n  rag: {{object: '{module}:Ahead'}}\n"
        "cases: cases.jsonl\n"
        "evaluators:\n"
        "  - {type: contains, criterion: answer_correct, field: answer, expected_field: answer}\n"
        f"  - {{type: groundedness_judge, provider: openai, base_url: '{base_url}', model: m, "
        f"concurrency: {judge_concurrency}, {judge_extra}}}\n"
        f"concurrency: {concurrency}\n"
        "store: .store\n"
    )
    return module


def cases_lines(root: Path) -> list[dict[str, Any]]:
    (run_dir,) = (root / ".store" / "runs").iterdir()
    return [json.loads(line) for line in (run_dir / "cases.jsonl").read_text().splitlines()]


def without_timings(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_timings(v) for k, v in value.items() if k != "timings"}
    if isinstance(value, list):
        return [without_timings(v) for v in value]
    return value


@pytest.mark.parametrize("use_async", [False, True], ids=["threads", "event-loop"])
def test_judges_of_prefetched_cases_run_concurrently_within_the_judge_concurrency(
    pytester: pytest.Pytester, use_async: bool
) -> None:
    # the first verdict is held until a second is asked for: the overlap does not depend on scheduling
    with ScriptedServer(responder=verdicts(0.3), hold_until_in_flight=2) as server:
        project(pytester.path, server.base_url, use_async=use_async)
        result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider")
        in_flight, requests = server.max_in_flight, len(server.requests)
    result.assert_outcomes(passed=8, failed=4)  # the four 'monthly' answers are ungrounded
    assert requests == N
    # more than one verdict was asked for at once, never more than the judge's `concurrency: 3`
    assert 1 < in_flight <= 3
    grounded = {c["id"]: c["criteria"]["grounded"] for c in cases_lines(pytester.path)}
    assert [grounded[f"c{i:02d}"]["value"] for i in range(N)] == [1.0, 1.0, 0.0] * 4


def test_concurrency_1_and_8_give_identical_cases_with_verdicts_reused_inside_the_run(
    pytester: pytest.Pytester,
) -> None:
    """Answers repeat (three distinct verdicts): exactly the cases that hit sequentially hit concurrently."""
    runs = {}
    for conc in (1, 8):
        with ScriptedServer(responder=verdicts(0.1)) as server:
            project(pytester.path, server.base_url, distinct=False, concurrency=conc)
            shutil.rmtree(pytester.path / ".store", ignore_errors=True)  # the same cold cache for both
            result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider", "-p", "no:randomly")
            result.assert_outcomes(passed=8, failed=4)
            assert len(server.requests) == 3, f"concurrency {conc}: one judge call per distinct verdict"
            result.stdout.fnmatch_lines([f"Cache: execution 0 hit/{N} miss; judgment {2 * N - 6} hit/6 miss"])
        runs[conc] = [json.dumps(without_timings(c)) for c in cases_lines(pytester.path)]
    assert runs[1] == runs[8]
    first = json.loads(runs[8][0])
    assert first["cache"]["judgment"] == {"hit": 0, "miss": 2} and "judges" in first["usage"]
    assert json.loads(runs[8][3])["cache"]["judgment"] == {"hit": 2, "miss": 0}


OVERRIDE = """
import threading
from pathlib import Path

import pytest
from pytest_oloproof import CriterionValue, Evaluator

THREADS = Path(__file__).parent / "threads.txt"


class Shouting(Evaluator):
    reads = frozenset({"output"})

    def evaluate(self, x):
        with THREADS.open("a") as f:
            f.write(threading.current_thread().name + "\\n")
        return CriterionValue.observed(1.0, detail={"by": "conftest"})


@pytest.fixture(scope="session")
def answer_correct():
    return Shouting("answer_correct")
"""


def test_an_evaluator_fixture_from_conftest_still_takes_effect_and_runs_on_the_main_thread(
    pytester: pytest.Pytester,
) -> None:
    with ScriptedServer(responder=verdicts(0.3)) as server:
        project(pytester.path, server.base_url)
        pytester.makeconftest(OVERRIDE)
        result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider")
        in_flight = server.max_in_flight
    result.assert_outcomes(passed=8, failed=4)
    cases = cases_lines(pytester.path)
    assert all(c["criteria"]["answer_correct"]["detail"] == {"by": "conftest"} for c in cases)
    # the user's evaluator ran in the items, on pytest's thread; the configured judge ran ahead of them
    assert (pytester.path / "threads.txt").read_text().splitlines() == ["MainThread"] * N
    assert in_flight > 1


PROVIDER_FIXTURE = """
import json, threading
from pathlib import Path

import pytest

THREADS = Path(__file__).parent / "threads.txt"


class Recording:
    def identity(self):
        return {"provider": "fixture", "model": "always-pass"}

    def complete(self, messages):
        with THREADS.open("a") as f:
            f.write(threading.current_thread().name + "\\n")
        return json.dumps({"verdict": "pass", "rationale": "from the fixture"})


@pytest.fixture(scope="session")
def oloproof_judge_provider():
    return Recording()
"""


def test_a_judge_given_the_provider_fixture_stays_on_the_main_thread(pytester: pytest.Pytester) -> None:
    project(pytester.path, "http://127.0.0.1:9/v1")  # nobody listens there: the fixture's provider answers
    pytester.makeconftest(PROVIDER_FIXTURE)
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=N)
    assert all(
        c["criteria"]["grounded"]["detail"]["rationale"] == "from the fixture" for c in cases_lines(pytester.path)
    )
    assert (pytester.path / "threads.txt").read_text().splitlines() == ["MainThread"] * N


def test_judge_retries_timeouts_and_errors_hold_ahead_of_the_items(pytester: pytest.Pytester) -> None:
    seen: set[str] = set()

    def respond(req: Recorded) -> Reply:
        answer = _answer(req)
        if "question 5)" in answer:
            return Reply.verdict("pass", delay=60.0)  # past the judge's timeout_s, on every attempt
        if "question 7)" in answer:
            return Reply(400, {}, "bad request")  # not retried: the criterion is missing, the case recorded
        if answer not in seen:
            seen.add(answer)
            return Reply(503, {}, "busy")  # retried once
        return Reply.verdict("fail" if "monthly" in answer else "pass")

    with ScriptedServer(responder=respond) as server:
        # the deadline applies to every verdict: 2 s leaves the ones that must arrive ample time on a
        # loaded machine; c05's reply would take a minute (the server drops it when it closes)
        project(pytester.path, server.base_url, judge_extra="retries: 1, timeout_s: 2.0")
        result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider")
        # c05's last attempt timed out client-side: the server may not have read it yet
        requests = server.wait_for_requests(2 * (N - 1) + 1)
    assert requests == len(server.requests) == 2 * (N - 1) + 1  # every verdict retried once, but the 400
    cases = {c["id"]: c for c in cases_lines(pytester.path)}
    assert sorted(cases) == [f"c{i:02d}" for i in range(N)]  # no case vanishes
    grounded = {cid: c["criteria"]["grounded"] for cid, c in cases.items()}
    assert grounded["c05"]["status"] == "missing" and "timed out" in grounded["c05"]["reason"]
    assert grounded["c07"]["status"] == "missing" and "HTTP 400" in grounded["c07"]["reason"]
    others = [grounded[f"c{i:02d}"]["value"] for i in range(N) if i not in (5, 7)]
    assert others == [1.0 if i % 3 != 2 else 0.0 for i in range(N) if i not in (5, 7)]
    result.assert_outcomes(passed=7, failed=5)  # the 4 'monthly' answers (one is c05's) and c07


def test_which_evaluators_may_run_ahead_and_on_how_many_threads(tmp_path: Path) -> None:
    from pytest_oloproof.engine.judging_ahead import judge_threads, may_judge_ahead
    from pytest_oloproof.evaluators.answers import Contains
    from pytest_oloproof.evaluators.judges import GroundednessJudge
    from pytest_oloproof.evaluators.providers import OpenAIProvider
    from pytest_oloproof.usage.accounting import Budget

    contains = Contains(criterion="answer_correct")
    judge = GroundednessJudge(provider=OpenAIProvider("http://127.0.0.1:9/v1", "m", concurrency=6))
    other = GroundednessJudge(criterion="g2", provider=OpenAIProvider("http://127.0.0.1:9/v1", "m", concurrency=2))
    configured = [contains, judge, other]
    assert may_judge_ahead(contains, configured, None) and may_judge_ahead(judge, configured, None)
    # an evaluator the configuration did not build (a fixture's) stays on the main thread
    assert not may_judge_ahead(Contains(criterion="answer_correct"), configured, None)
    # under a budget guard, judges stay in item order; the checks that ask no model still run ahead
    budget = Budget(max_judge_calls=3)
    assert may_judge_ahead(contains, configured, budget) and not may_judge_ahead(judge, configured, budget)
    assert judge_threads([contains], 32) == 1  # nothing waits on a model: one thread computes them all
    assert judge_threads([contains, judge, other], 32) == 8  # each judge's concurrency kept busy
    assert judge_threads([judge, judge.with_provider(judge.provider)], 32) == 6  # one provider, counted once


WARM_CONFTEST = """
import json, sys, time
from pathlib import Path

_SEEN = []


def pytest_runtest_teardown(item):
    if _SEEN:
        return
    deadline = time.monotonic() + (30 if item.config.getoption("oloproof_concurrency") > 1 else 0)
    while "scipy.special" not in sys.modules and time.monotonic() < deadline:
        time.sleep(0.05)
    _SEEN.append("scipy.special" in sys.modules)
    (Path(__file__).parent / "warm.json").write_text(json.dumps(_SEEN))
"""


@pytest.mark.parametrize("concurrency", [1, 4])
def test_a_prefetched_session_imports_what_its_summary_needs_while_the_cases_run(
    pytester: pytest.Pytester, concurrency: int
) -> None:
    project(pytester.path, "http://127.0.0.1:9/v1", concurrency=concurrency)
    cfg = pytester.path / "oloproof.yaml"
    cfg.write_text("".join(line for line in cfg.read_text().splitlines(True) if "groundedness_judge" not in line))
    pytester.makeconftest(WARM_CONFTEST)
    conc = f"--oloproof-concurrency={concurrency}"
    result = pytester.runpytest_subprocess("--oloproof", "-p", "no:cacheprovider", conc)
    result.assert_outcomes(passed=N)
    # the intervals' quantiles, imported during the first item when cases run ahead; at the end otherwise
    assert json.loads((pytester.path / "warm.json").read_text()) == [concurrency > 1]


def test_the_openai_provider_loads_its_ca_bundle_once_not_per_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """A TLS context per request cost about 40 ms of CPU per judge call: more than the judged run's stages."""
    import ssl

    from pytest_oloproof.evaluators.providers import OpenAIProvider

    loads: list[object] = []
    original = ssl.SSLContext.load_verify_locations

    def counting(self: ssl.SSLContext, *args: Any, **kwargs: Any) -> None:
        loads.append(args or kwargs)
        original(self, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counting)
    with ScriptedServer([Reply.verdict("pass")]) as server:
        provider = OpenAIProvider(server.base_url, "m", retries=0)
        replies = [provider.complete([{"role": "user", "content": f"q{i}"}]) for i in range(3)]
        assert len(server.requests) == 3
    assert all('"pass"' in r for r in replies)
    assert len(loads) == 1


def test_a_run_stopped_by_x_asks_no_judge_twice_for_the_verdicts_in_flight(pytester: pytest.Pytester) -> None:
    """`-x` stops the run at the first failing case (c02) while judge threads are asking for later cases'
    verdicts; the completed cases are then recorded. Those in flight used to be asked for again on
    pytest's thread, as each was recorded: two requests for one verdict."""
    with ScriptedServer(responder=verdicts(0.5)) as server:
        project(pytester.path, server.base_url, concurrency=8, judge_concurrency=3)
        result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider", "-p", "no:randomly", "-x")
        answers = Counter(_answer(r) for r in server.requests)
    result.assert_outcomes(passed=2, failed=1)
    cases = cases_lines(pytester.path)
    assert len(cases) == len({c["id"] for c in cases}) > 3  # the completed cases are recorded, once each
    assert all(c["criteria"]["grounded"]["status"] == "observed" for c in cases)
    assert len(answers) == len(cases) and set(answers.values()) == {1}, answers  # one request per verdict


BROKEN_OVERRIDE = """
import time

import pytest


@pytest.fixture(scope="session")
def answer_correct():
    time.sleep(1.0)  # the look-ahead completes cases meanwhile (a loaded machine may start it late)
    return "not an evaluator"
"""


def test_cases_completed_ahead_are_not_recorded_with_evaluators_the_conftest_replaced(
    pytester: pytest.Pytester,
) -> None:
    """A conftest fixture overriding a criterion returns no Evaluator: the first item fails on it and `-x`
    stops the run. The cases the prefetcher had completed used to be recorded judged by the configured
    evaluators instead, verdicts of an evaluator the user had replaced; now, as in a sequential run, none
    is recorded, and the session says why."""
    with ScriptedServer(responder=verdicts(0.0)) as server:
        project(pytester.path, server.base_url, concurrency=8)
        pytester.makeconftest(BROKEN_OVERRIDE)
        result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider", "-p", "no:randomly", "-x")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*oloproof: * completed case(s) not recorded: the evaluator fixtures could not be resolved "
            "(fixture 'answer_correct' must return a pytest_oloproof.Evaluator, got str)*"
        ]
    )
    runs = pytester.path / ".store" / "runs"
    assert not runs.exists() or not any((d / "cases.jsonl").read_text() for d in runs.iterdir())
