"""Declaring a system: the public API, async stages, plain callables, and every contract violation."""

from __future__ import annotations

import dataclasses

import pytest
from staged_helpers import assert_nothing_written, by_id, case, config_text, last_run, rag_project, unique_module

from pytest_oloproof import Passage, Retrieval, rag_system

# ------------------------------------------------------------------ the API as docs/guides/systems.md declares it


def test_passage_and_retrieval_are_immutable_with_the_spec_fields() -> None:
    p = Passage("kb-01")
    assert (p.doc_id, p.score, p.text, p.chunk_id, p.metadata) == ("kb-01", None, None, None, None)
    p = Passage(doc_id="kb-02", score=3.2, text="t", chunk_id="c1", metadata={"a": 1})
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.doc_id = "x"  # type: ignore[misc]
    r = Retrieval(query="q", depth=6, candidates=(p,))
    assert r.candidates == (p,)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.depth = 1  # type: ignore[misc]


def test_rag_system_records_its_settings_and_returns_the_class() -> None:
    @rag_system(name="n", version="v", depth=6, top_k=2, token_budget=40, index_version="i")
    class S:
        def retrieve(self, input, depth): ...

        def generate(self, input, context): ...

    assert isinstance(S, type)
    assert S.__oloproof_rag__ == {  # type: ignore[attr-defined]
        "name": "n",
        "version": "v",
        "depth": 6,
        "top_k": 2,
        "token_budget": 40,
        "index_version": "i",
    }


def test_rag_system_without_stages_is_refused() -> None:
    with pytest.raises(TypeError, match="has no generate"):

        @rag_system(depth=2)
        class S:
            def retrieve(self, input, depth): ...


# ------------------------------------------------------------------ running systems

ASYNC_SOURCE = """
import asyncio
from pytest_oloproof import Passage, Retrieval, rag_system


@rag_system(name="async-rag", depth=3, top_k=2)
class System:
    async def retrieve(self, input, depth):
        await asyncio.sleep(0)
        candidates = (Passage("a", 2.0, "alpha"), Passage("g", 1.0, "gamma"))
        return Retrieval(query=input["q"], depth=depth, candidates=candidates)

    async def generate(self, input, context):
        await asyncio.sleep(0)
        return {"answer": " ".join(p.text for p in context), "citations": [p.doc_id for p in context]}
"""


@pytest.mark.parametrize("concurrency", [1, 4])
def test_async_stages_are_awaited(pytester: pytest.Pytester, concurrency: int) -> None:
    rag_project(pytester, [case("c1"), case("c2", answer="beta")], source=ASYNC_SOURCE)
    result = pytester.runpytest("--oloproof", f"--oloproof-concurrency={concurrency}", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    rec = by_id(last_run(pytester))
    assert rec["c1"]["output"] == {"answer": "alpha gamma", "citations": ["a", "g"]}
    assert rec["c1"]["cache"]["retrieve"] == "miss"


def test_sync_stages_returning_awaitables_are_awaited(pytester: pytest.Pytester) -> None:
    source = ASYNC_SOURCE.replace(
        "async def generate(self, input, context):",
        "def generate(self, input, context):\n        return self._gen(context)\n\n    async def _gen(self, context):",
    )
    rag_project(pytester, [case("c1")], source=source)
    pytester.runpytest("--oloproof", "-p", "no:cacheprovider").assert_outcomes(passed=1)
    assert by_id(last_run(pytester))["c1"]["output"]["answer"] == "alpha gamma"


def test_plain_callable_system(pytester: pytest.Pytester) -> None:
    module = unique_module()
    pytester.makepyfile(**{module: "def answer(input):\n    return {'answer': input['q'].upper()}\n"})
    pytester.makefile(".yaml", oloproof=config_text(module, attr="answer", plain=True, name="plain"))
    pytester.makefile(
        ".jsonl",
        cases="\n".join(
            [
                '{"id": "a", "input": {"q": "gamma"}, "expected": {"answer": "GAMMA"}}',
                '{"id": "b", "input": {"q": "x"}, "expected": {"answer": "no"}}',
            ]
        ),
    )
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*oloproof.yaml::plain?b?*"])
    record = last_run(pytester)
    assert record["system"]["kind"] == "callable"
    rec = by_id(record)["a"]
    assert rec["output"] == {"answer": "GAMMA"}
    assert rec["retrieval"] is None
    assert rec["cache"]["retrieve"] is None and rec["cache"]["generate"] is None
    assert record["cache"]["retrieve"] == {"hit": 0, "miss": 0}


def test_plain_callable_may_be_async_and_return_a_string(pytester: pytest.Pytester) -> None:
    module = unique_module()
    pytester.makepyfile(**{module: "async def answer(input):\n    return 'it is ' + input['q']\n"})
    pytester.makefile(".yaml", oloproof=config_text(module, attr="answer", plain=True))
    pytester.makefile(".jsonl", cases='{"id": "a", "input": {"q": "gamma"}, "expected": {"answer": "is gamma"}}\n')
    pytester.runpytest("--oloproof", "-p", "no:cacheprovider").assert_outcomes(passed=1)
    assert by_id(last_run(pytester))["a"]["output"] == "it is gamma"


# ------------------------------------------------------------------ contract violations

VIOLATIONS = """
from pytest_oloproof import Passage, Retrieval, rag_system


@rag_system(name="bad", depth=2, top_k=2, token_budget=100)
class System:
    def retrieve(self, input, depth):
        mode = input["mode"]
        if mode == "too_many":
            three = (Passage("a", text="a"), Passage("b", text="b"), Passage("c", text="c"))
            return Retrieval(query="q", depth=depth, candidates=three)
        if mode == "not_passage":
            return Retrieval(query="q", depth=depth, candidates=(Passage("a", text="a"), {"doc_id": "b"}))
        if mode == "not_retrieval":
            return [Passage("a", text="a")]
        return Retrieval(query="q", depth=depth, candidates=(Passage(mode, text="t"),))

    def generate(self, input, context):
        mode = input["mode"]
        if mode == "gen_string":
            return "an answer"
        if mode == "gen_not_json":
            return {"answer": object()}
        return {"answer": "ok"}

    def count_tokens(self, passage):
        if passage.doc_id == "tokens_float":
            return 1.5
        if passage.doc_id == "tokens_negative":
            return -1
        if passage.doc_id == "tokens_bool":
            return True
        return 1
"""

EXPECTED_VIOLATIONS = {
    "too_many": ("retrieve", ["retrieve()", "3 candidates", "depth=2"]),
    "not_passage": ("retrieve", ["retrieve()", "position 2", "dict", "not a Passage"]),
    "not_retrieval": ("retrieve", ["retrieve()", "must return a Retrieval", "list"]),
    "gen_string": ("generate", ["generate()", "JSON-serialisable mapping", "str"]),
    "gen_not_json": ("generate", ["generate()", "not JSON-serialisable"]),
    "tokens_float": ("count_tokens", ["count_tokens()", "1.5", "non-negative integer"]),
    "tokens_negative": ("count_tokens", ["count_tokens()", "-1", "non-negative integer"]),
    "tokens_bool": ("count_tokens", ["count_tokens()", "True", "non-negative integer"]),
}


def test_each_contract_violation_is_a_per_case_error(pytester: pytest.Pytester) -> None:
    cases = [{"id": f"case_{m}", "input": {"mode": m}, "expected": {"answer": "ok"}} for m in EXPECTED_VIOLATIONS]
    cases.append({"id": "fine", "input": {"mode": "fine"}, "expected": {"answer": "ok"}})
    rag_project(pytester, cases, source=VIOLATIONS)
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider")
    # one bad case never stops the others
    result.assert_outcomes(passed=1, failed=len(EXPECTED_VIOLATIONS))
    record = last_run(pytester)
    recs = by_id(record)
    assert recs["fine"]["error"] is None
    for mode, (stage, fragments) in EXPECTED_VIOLATIONS.items():
        err = recs[f"case_{mode}"]["error"]
        assert err is not None, mode
        assert err["reason"] == "contract_violation", mode
        assert err["stage"] == stage, (mode, err)
        assert f"case 'case_{mode}'" in err["message"], err["message"]
        for fragment in fragments:
            assert fragment in err["message"], (mode, fragment, err["message"])
        # the case is missing for every criterion, with the reason kept
        assert recs[f"case_{mode}"]["criteria"]["answer_correct"]["status"] == "missing"
        result.stdout.fnmatch_lines([f"*case 'case_{mode}'*{stage}*"])
    assert record["metrics"]["answer_correct"]["missing"] == len(EXPECTED_VIOLATIONS)
    # a contract error is never cached: the stage caches hold only the good case's results
    from pytest_oloproof.cache.caches import Caches

    caches = Caches(pytester.path / ".oloproof" / "cache")
    try:
        assert caches.stats()["execution"] == 1
        assert caches.stats()["generate"] == 1
    finally:
        caches.close()


def test_missing_count_tokens_with_a_budget_is_a_config_error_before_any_case(pytester: pytest.Pytester) -> None:
    source = """
from pathlib import Path
from pytest_oloproof import Passage, Retrieval, rag_system


@rag_system(name="nocount", depth=2, top_k=2, token_budget=40)
class System:
    def retrieve(self, input, depth):
        Path(__file__).with_name("CALLED").write_text("retrieve")
        return Retrieval(query="q", depth=depth, candidates=())

    def generate(self, input, context):
        Path(__file__).with_name("CALLED").write_text("generate")
        return {"answer": ""}
"""
    module = rag_project(pytester, [case("c1")], source=source)
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider")
    assert result.ret == 2
    result.stdout.fnmatch_lines(
        [f"*oloproof.yaml:3: system.rag.token_budget: set, but {module}:System has no count_tokens(passage)*"]
    )
    assert not (pytester.path / "CALLED").exists()
    assert_nothing_written(pytester.path)


def test_system_exception_shows_the_users_traceback(pytester: pytest.Pytester) -> None:
    source = """
from pytest_oloproof import Passage, Retrieval, rag_system


@rag_system(name="boom", depth=2, top_k=1)
class System:
    def retrieve(self, input, depth):
        return Retrieval(query="q", depth=depth, candidates=(Passage("a", text="alpha"),))

    def generate(self, input, context):
        return explode_in_user_code(input)


def explode_in_user_code(input):
    raise RuntimeError("the model endpoint is down for " + input["q"])
"""

    def line_of(text: str) -> int:
        return next(i for i, line in enumerate(source.splitlines()[1:], 1) if text in line)

    module = rag_project(
        pytester,
        [case("c1"), case("c2")],
        source=source,
        evaluators="""evaluators:
  - {type: contains, criterion: answer_correct}
  - {type: citation_validity}
""",
    )
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            "*case 'c1': the system failed in generate; every criterion is missing*",
            "Traceback (most recent call last):",
            f'  File "*{module}.py", line {line_of("return explode_in_user_code")}, in generate',
            f'  File "*{module}.py", line {line_of("raise RuntimeError")}, in explode_in_user_code',
            '*raise RuntimeError("the model endpoint is down for " + input?"q"?)',
            "RuntimeError: the model endpoint is down for c1",
        ]
    )
    # the system's own traceback, not Oloproof's driver frames
    c1_section = result.stdout.str().split("oloproof case c1")[1].split("oloproof case c2")[0]
    assert "pytest_oloproof" not in c1_section
    rec = by_id(last_run(pytester))["c1"]
    assert rec["error"]["stage"] == "generate"
    assert rec["error"]["type"] == "RuntimeError"
    assert "explode_in_user_code" in rec["error"]["traceback"]
    assert {c["status"] for c in rec["criteria"].values()} == {"missing"}
    assert set(rec["criteria"]) == {"answer_correct", "citations_valid"}
