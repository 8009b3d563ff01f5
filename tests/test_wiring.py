"""Wiring checks after every run: each sign, held in every case, named under the summary, in the run record,
the JSON report and the HTML page; never a failure by itself."""

from __future__ import annotations

import json
from typing import Any

import pytest
from staged_helpers import RAG_SOURCE, case, last_run, rag_project

LABELLED = {"relevant": [{"doc_id": "d1"}]}
CITES = (
    "evaluators:\n"
    "  - {type: contains, criterion: answer_correct, field: answer, expected_field: answer}\n"
    "  - {type: hit_rate, k: 2}\n"
    "  - {type: citation_validity}\n"
)


def labelled(cid: str, relevant: str = "d1", **extra: Any) -> dict[str, Any]:
    c = case(cid, **extra)
    c["expected"]["relevant"] = [{"doc_id": relevant}]
    return c


def run(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, list[dict[str, Any]]]:
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider", *args)
    return result, last_run(pytester).get("wiring")  # type: ignore[return-value]


def checks(wiring: list[dict[str, Any]]) -> list[str]:
    return [w["check"] for w in wiring]


def test_a_healthy_project_triggers_no_check(pytester: pytest.Pytester) -> None:
    rag_project(pytester, [labelled("a"), labelled("b"), labelled("c")], evaluators=CITES)
    result, wiring = run(pytester)
    assert result.ret == 0
    assert wiring == []
    assert "Check wiring" not in result.stdout.str()


def test_a_retriever_short_of_depth_in_every_case(pytester: pytest.Pytester) -> None:
    two = {"docs": ["d1", "d2"]}
    rag_project(pytester, [labelled("a", input=two), labelled("b", input={"docs": ["d1", "d3", "d2"]})])
    result, wiring = run(pytester, "--oloproof-report", "report.json", "--oloproof-html", "report.html")
    assert result.ret == 0  # never a failure by itself
    assert wiring == [{"check": "short_retrieval", "cases": 2, "depth": 4, "most_returned": 3}]
    out = result.stdout.str()
    assert "Check wiring: the retriever returned fewer than depth 4 candidates in every case (2)" in out
    assert "def _get_relevant_documents(self, query, *, run_manager, k=None)" in out
    assert json.loads((pytester.path / "report.json").read_text())["wiring"] == wiring
    html = (pytester.path / "report.html").read_text()
    assert 'id="wiring"' in html and "fewer than depth 4 candidates" in html


def test_one_case_at_depth_silences_the_short_retrieval_check(pytester: pytest.Pytester) -> None:
    rag_project(pytester, [labelled("a", input={"docs": ["d1", "d2"]}), labelled("b")])
    _, wiring = run(pytester)
    assert wiring == []


def test_no_retrieved_id_ever_matches_a_label(pytester: pytest.Pytester) -> None:
    rag_project(pytester, [labelled("a", relevant="kb-1"), labelled("b", relevant="kb-2"), case("unlabelled")])
    result, wiring = run(pytester)
    assert wiring == [
        {"check": "no_label_match", "cases": 2, "unit": "document", "retrieved_example": "d1", "label_example": "kb-1"}
    ]
    assert "retrieved e.g. 'd1', labels name e.g. 'kb-1'" in result.stdout.str()


def test_citation_validity_on_outputs_citing_nothing(pytester: pytest.Pytester) -> None:
    source = RAG_SOURCE.replace('"citations": [p.doc_id for p in context]', '"citations": []')
    rag_project(pytester, [labelled("a"), labelled("b")], evaluators=CITES, source=source)
    result, wiring = run(pytester)
    assert result.ret == 0
    assert wiring == [{"check": "vacuous_citations", "cases": 2, "criterion": "citations_valid", "field": "citations"}]
    assert "require_citations: true" in result.stdout.str()
    # with require_citations the criterion fails such answers itself: nothing to warn about
    rag_project(
        pytester,
        [labelled("a"), labelled("b")],
        source=source,
        evaluators=CITES.replace("{type: citation_validity}", "{type: citation_validity, require_citations: true}"),
    )
    _, wiring = run(pytester)
    assert wiring == []


def test_identical_scores_for_every_candidate(pytester: pytest.Pytester) -> None:
    source = RAG_SOURCE.replace("score=float(10 - i)", "score=1.0")
    rag_project(pytester, [labelled("a"), labelled("b")], source=source)
    result, wiring = run(pytester)
    assert wiring == [{"check": "identical_scores", "cases": 2, "score": 1.0}]
    assert "every candidate of every case (2) has the same score (1)" in result.stdout.str()
