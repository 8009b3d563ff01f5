"""Context assembly: unit tests of `assemble`, and the same edge cases end to end in the run record."""

from __future__ import annotations

import pytest
from staged_helpers import by_id, case, last_run, rag_project

from pytest_oloproof.system.assembly import Assembly, assemble


def test_budget_exactly_met_is_kept() -> None:
    asm = assemble(3, 3, 10, [4, 6, 1])
    assert asm == Assembly(kept=(1, 2), dropped=((3, "token_budget"),))
    assert asm.truncated


def test_passage_larger_than_whole_budget_is_dropped_and_later_ones_that_fit_are_kept() -> None:
    asm = assemble(4, 4, 3, [4, 2, 5, 1])
    assert asm.kept == (2, 4)
    assert asm.dropped == ((1, "token_budget"), (3, "token_budget"))


def test_top_k_larger_than_candidates_takes_them_all() -> None:
    asm = assemble(2, 5, None, [None, None])
    assert asm == Assembly(kept=(1, 2), dropped=())
    assert not asm.truncated


def test_empty_retrieval_gives_an_empty_context() -> None:
    asm = assemble(0, 2, 40, [])
    assert asm == Assembly(kept=(), dropped=())
    assert not asm.truncated


def test_no_budget_drops_nothing_and_top_k_cuts_without_a_drop_reason() -> None:
    asm = assemble(5, 2, None, [100, 100, 100, 100, 100])
    assert asm.kept == (1, 2)
    assert asm.dropped == ()  # below the cut is not "dropped": only top-k passages can be
    assert not asm.truncated


def test_budget_applies_only_within_top_k() -> None:
    # positions 3 and 4 would fit, but they are past the top-k cut
    asm = assemble(4, 2, 5, [3, 9, 1, 1])
    assert asm.kept == (1,)
    assert asm.dropped == ((2, "token_budget"),)


def test_missing_token_counts_with_a_budget_are_refused() -> None:
    with pytest.raises(ValueError, match="token counts are required"):
        assemble(1, 1, 10, [None])


# ------------------------------------------------------------------ end to end in the run record


def test_assembly_is_recorded_per_case(pytester: pytest.Pytester) -> None:
    rag_project(
        pytester,
        [
            case("exact", input={"docs": ["d1", "d2", "d3"]}),  # 4 + 2 = 6 tokens: budget exactly met
            case("too_big", input={"docs": ["d5", "d2", "d4"]}),  # d5 (8 tokens) is larger than the budget
            case("empty", input={"docs": []}),
            case("few", input={"docs": ["d4"]}),  # top_k 3 > one candidate
        ],
        settings="depth=4, top_k=3, token_budget=6",
    )
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=2)  # "empty" and "few" have no "gamma" in their context
    rec = by_id(last_run(pytester))

    exact = rec["exact"]
    assert [(c["position"], c["doc_id"], c["score"], c["tokens"]) for c in exact["retrieval"]] == [
        (1, "d1", 10.0, 4),
        (2, "d2", 9.0, 2),
        (3, "d3", 8.0, 5),
    ]
    assert exact["context"] == [1, 2]
    assert exact["dropped"] == [{"position": 3, "reason": "token_budget"}]
    assert exact["context_truncated"] is True
    assert exact["output"]["citations"] == ["d1", "d2"]

    too_big = rec["too_big"]
    assert [c["tokens"] for c in too_big["retrieval"]] == [8, 2, 1]
    assert too_big["context"] == [2, 3]
    assert too_big["dropped"] == [{"position": 1, "reason": "token_budget"}]
    assert too_big["context_truncated"] is True
    assert too_big["output"]["citations"] == ["d2", "d4"]

    empty = rec["empty"]
    assert empty["retrieval"] == []
    assert empty["context"] == []
    assert empty["dropped"] == []
    assert empty["context_truncated"] is False
    assert empty["error"] is None
    assert empty["output"]["citations"] == []

    few = rec["few"]
    assert few["context"] == [1]
    assert few["dropped"] == []
    assert few["context_truncated"] is False


def test_without_budget_nothing_is_dropped_end_to_end(pytester: pytest.Pytester) -> None:
    rag_project(pytester, [case("all", input={"docs": ["d5", "d3", "d1", "d2"]})], settings="depth=4, top_k=3")
    pytester.runpytest("--oloproof", "-p", "no:cacheprovider").assert_outcomes(passed=1)
    rec = by_id(last_run(pytester))["all"]
    assert rec["context"] == [1, 2, 3]
    assert rec["dropped"] == []
    assert rec["context_truncated"] is False
    assert rec["output"]["citations"] == ["d5", "d3", "d1"]
    # count_tokens exists, so tokens are recorded even without a budget
    assert [c["tokens"] for c in rec["retrieval"]] == [8, 5, 4, 2]
