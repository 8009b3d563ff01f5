"""Each built-in evaluator on hand-computed cases, and building evaluators from config."""

from __future__ import annotations

import math
from typing import Any

import pytest

from pytest_oloproof.config.settings import EvaluatorSettings
from pytest_oloproof.errors import ConfigError
from pytest_oloproof.evaluate.record import failed_criteria, missing_criteria
from pytest_oloproof.evaluators import Registry
from pytest_oloproof.evaluators.answers import Contains, ExactMatch, Regex
from pytest_oloproof.evaluators.base import CandidateView, ContextPassage, CriterionValue, EvalInput, Evaluator
from pytest_oloproof.evaluators.citations import CitationValidity
from pytest_oloproof.evaluators.retrieval import MRR, NDCG, HitRate, Precision, Recall


def x(
    output: Any = None,
    expected: dict[str, Any] | None = None,
    retrieval: list[tuple[str, str | None]] | None = None,
    context: list[tuple[str, str | None]] | None = None,
) -> EvalInput:
    views = None
    if retrieval is not None:
        views = [CandidateView(i + 1, d, c, 1.0 / (i + 1), f"text {d}") for i, (d, c) in enumerate(retrieval)]
    ctx = None if context is None else [ContextPassage(d, c, f"text {d}") for d, c in context]
    return EvalInput("case", {"q": "?"}, expected or {}, {}, output, views, ctx)


def value(ev: Evaluator, inp: EvalInput) -> float | None:
    cv = ev.evaluate(inp)
    assert cv.status == "observed", cv
    return cv.value


def build(entry: dict[str, Any], *, is_rag: bool = True, index: int = 2) -> Evaluator:
    return Registry().build(EvaluatorSettings.model_validate(entry), index, "oloproof.yaml", None, is_rag=is_rag)


# ------------------------------------------------------------------ answers


def test_contains_is_case_and_whitespace_insensitive_by_default() -> None:
    ev = Contains(criterion="answer_correct")
    assert value(ev, x({"answer": "Refunds take\n 14   DAYS."}, {"answer": "14 days"})) == 1.0
    assert value(ev, x({"answer": "Refunds take 15 days."}, {"answer": "14 days"})) == 0.0
    cv = ev.evaluate(x({"answer": "nope"}, {"answer": "14 days"}))
    assert (cv.expected, cv.actual) == ("contains '14 days'", "nope")


def test_contains_options() -> None:
    out = {"answer": "Refunds take 14  Days"}
    assert value(Contains(case_sensitive=True), x(out, {"answer": "14  Days"})) == 1.0
    assert value(Contains(case_sensitive=True), x(out, {"answer": "14 days"})) == 0.0
    assert value(Contains(normalize_whitespace=False), x(out, {"answer": "14 days"})) == 0.0
    assert value(Contains(), x(out, {"answer": "14 days"})) == 1.0
    # other fields, dotted paths into nested expected data
    ev = Contains(field="text", expected_field="gold.short")
    assert value(ev, x({"text": "it is 7 days"}, {"gold": {"short": "7 DAYS"}})) == 1.0
    # a plain-string output is the answer itself
    assert value(Contains(), x("about 14 days", {"answer": "14 days"})) == 1.0
    assert Contains().criterion == "contains"


def test_answer_evaluators_missing_and_excluded() -> None:
    ev = Contains(criterion="answer_correct")
    missing = ev.evaluate(x({"text": "14 days"}, {"answer": "14 days"}))
    assert (missing.status, missing.reason) == ("missing", "missing_output_field: answer")
    excluded = ev.evaluate(x({"answer": "14 days"}, {"relevant": []}))
    assert (excluded.status, excluded.reason) == ("excluded", "no_expected_value")
    assert ev.evaluate(x({"answer": "14 days"}, {"answer": None})).reason == "no_expected_value"
    assert value(ev, x({"answer": None}, {"answer": "14 days"})) == 0.0


def test_exact_match() -> None:
    ev = ExactMatch(criterion="exact")
    assert value(ev, x({"answer": "  14   Days "}, {"answer": "14 days"})) == 1.0
    assert value(ev, x({"answer": "14 days."}, {"answer": "14 days"})) == 0.0
    assert value(ExactMatch(case_sensitive=True), x({"answer": "14 Days"}, {"answer": "14 days"})) == 0.0


def test_regex_pattern_from_settings() -> None:
    ev = Regex(pattern=r"\b1[0-9] days\b")
    assert value(ev, x({"answer": "within 14 DAYS."}, {})) == 1.0  # case-insensitive by default
    assert value(ev, x({"answer": "within 140 days"}, {})) == 0.0
    assert value(Regex(pattern=r"14 days", case_sensitive=True), x({"answer": "14 DAYS"}, {})) == 0.0
    assert value(Regex(pattern=r"\d+ days", fullmatch=True), x({"answer": "14 days."}, {})) == 0.0
    assert ev.evaluate(x({"text": "14 days"}, {})).reason == "missing_output_field: answer"


def test_regex_pattern_from_the_expected_field() -> None:
    ev = Regex(criterion="answer_format")
    assert value(ev, x({"answer": "Call 555-0101"}, {"pattern": r"\d{3}-\d{4}"})) == 1.0
    assert value(ev, x({"answer": "Call us"}, {"pattern": r"\d{3}-\d{4}"})) == 0.0
    assert ev.evaluate(x({"answer": "x"}, {})).reason == "no_expected_value"
    bad = ev.evaluate(x({"answer": "x"}, {"pattern": "(unclosed"}))
    assert bad.status == "missing" and bad.reason is not None and bad.reason.startswith("invalid_pattern")
    assert value(Regex(expected_field="rx"), x({"answer": "ok"}, {"rx": "^OK$"})) == 1.0


def test_invalid_regex_in_settings_is_a_config_error_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"oloproof\.yaml: evaluators\[2\]\.pattern: '\(' is not a valid regular"):
        build({"type": "regex", "pattern": "("})


# ------------------------------------------------------------------ citations


CTX = [("d1", "c1"), ("d2", "c7")]


def test_citation_validity_document_ids() -> None:
    ev = CitationValidity()
    assert ev.criterion == "citations_valid"
    assert value(ev, x({"citations": ["d1", "d2"]}, context=CTX)) == 1.0
    bad = ev.evaluate(x({"citations": ["d1", "d9"]}, context=CTX))
    assert bad.value == 0.0 and "d9" in str(bad.actual)
    # retrieved but dropped from the context is still invalid: the model never saw it
    assert value(ev, x({"citations": ["d3"]}, retrieval=[*CTX, ("d3", None)], context=CTX)) == 0.0
    assert value(ev, x({"citations": "d1"}, context=CTX)) == 1.0  # a single id


def test_citation_validity_chunk_citations() -> None:
    ev = CitationValidity()
    assert value(ev, x({"citations": [{"doc_id": "d1", "chunk_id": "c1"}]}, context=CTX)) == 1.0
    assert value(ev, x({"citations": [{"doc_id": "d1", "chunk_id": "c7"}]}, context=CTX)) == 0.0
    assert value(ev, x({"citations": [{"doc_id": "d2"}]}, context=CTX)) == 1.0


def test_citation_validity_require_citations_and_non_rag() -> None:
    assert value(CitationValidity(), x({"citations": []}, context=CTX)) == 1.0
    assert value(CitationValidity(), x({"answer": "no citations key"}, context=CTX)) == 1.0
    strict = CitationValidity(require_citations=True)
    assert value(strict, x({"citations": []}, context=CTX)) == 0.0
    assert value(strict, x({"answer": "x"}, context=CTX)) == 0.0
    assert value(CitationValidity(field="refs"), x({"refs": ["d9"]}, context=CTX)) == 0.0
    cv = CitationValidity().evaluate(x({"citations": ["d1"]}))  # a plain callable: no context
    assert (cv.status, cv.reason) == ("excluded", "no_context")
    # and the registry accepts it for a plain callable
    assert build({"type": "citation_validity"}, is_rag=False).criterion == "citations_valid"


# ------------------------------------------------------------------ retrieval


RANKING = [("d1", None), ("d2", None), ("d3", None)]


def test_retrieval_metrics_by_hand() -> None:
    exp = {"relevant": [{"doc_id": "d2"}]}
    assert value(HitRate(k=1), x(retrieval=RANKING, expected=exp)) == 0.0
    assert value(HitRate(k=2), x(retrieval=RANKING, expected=exp)) == 1.0
    assert value(Recall(k=2), x(retrieval=RANKING, expected=exp)) == 1.0
    assert value(Precision(k=2), x(retrieval=RANKING, expected=exp)) == 0.5
    # divided by k, not by the list length
    assert value(Precision(k=5), x(retrieval=RANKING, expected=exp)) == pytest.approx(0.2, abs=1e-12)
    assert value(MRR(k=3), x(retrieval=RANKING, expected=exp)) == 0.5
    assert value(MRR(k=1), x(retrieval=RANKING, expected=exp)) == 0.0
    assert value(NDCG(k=3), x(retrieval=RANKING, expected=exp)) == pytest.approx(1 / math.log2(3), abs=1e-12)
    names = [e(k=2).criterion for e in (HitRate, Recall, Precision, MRR, NDCG)]
    assert names == ["hit_rate_at_2", "recall_at_2", "precision_at_2", "mrr_at_2", "ndcg_at_2"]
    assert HitRate(k=2, criterion="hits").criterion == "hits"


def test_graded_ndcg_linear_and_exponential() -> None:
    exp = {"relevant": [{"doc_id": "d1"}, {"doc_id": "d3", "grade": 2}]}
    # linear (trec_eval): DCG = 1/1 + 2/log2(4) = 2; IDCG = 2/1 + 1/log2(3)
    want = 2 / (2 + 1 / math.log2(3))
    assert value(NDCG(k=3), x(retrieval=RANKING, expected=exp)) == pytest.approx(want, abs=1e-12)
    # exponential: gains 1 and 3; DCG = 1 + 3/2; IDCG = 3 + 1/log2(3)
    want_exp = 2.5 / (3 + 1 / math.log2(3))
    assert value(NDCG(k=3, gain="exponential"), x(retrieval=RANKING, expected=exp)) == pytest.approx(
        want_exp, abs=1e-12
    )


def test_ideal_ranking_and_recall_use_every_labelled_unit() -> None:
    exp = {"relevant": [{"doc_id": "d1"}, {"doc_id": "d9"}]}  # d9 never retrieved
    assert value(Recall(k=3), x(retrieval=RANKING, expected=exp)) == 0.5
    assert value(NDCG(k=3), x(retrieval=RANKING, expected=exp)) == pytest.approx(1 / (1 + 1 / math.log2(3)), abs=1e-12)


def test_grade_zero_labels_and_cases_without_labels() -> None:
    none_relevant = {"relevant": [{"doc_id": "d1", "grade": 0}]}
    for ev in (HitRate(k=2), Recall(k=2), Precision(k=2), MRR(k=2), NDCG(k=2)):
        assert ev.evaluate(x(retrieval=RANKING, expected=none_relevant)).reason == "no_relevant_units"
        assert ev.evaluate(x(retrieval=RANKING, expected={"relevant": []})).reason == "no_relevant_units"
        cv = ev.evaluate(x(retrieval=RANKING, expected={"answer": "x"}))
        assert (cv.status, cv.reason) == ("excluded", "no_relevance_labels")
        # a retriever that returned nothing is observed, with 0
        assert value(ev, x(retrieval=[], expected={"relevant": [{"doc_id": "d1"}]})) == 0.0
    # a grade-0 unit retrieved first is not a hit
    mixed = {"relevant": [{"doc_id": "d1", "grade": 0}, {"doc_id": "d3"}]}
    assert value(HitRate(k=2), x(retrieval=RANKING, expected=mixed)) == 0.0
    assert value(MRR(k=3), x(retrieval=RANKING, expected=mixed)) == pytest.approx(1 / 3)


def test_document_and_chunk_units() -> None:
    ranking = [("d1", "c1"), ("d1", "c2"), ("d2", "c1")]
    exp = {"relevant": [{"doc_id": "d1", "chunk_id": "c2"}]}
    # document units: d1 counts once, at its first position
    assert value(HitRate(k=1), x(retrieval=ranking, expected=exp)) == 1.0
    assert value(Precision(k=3), x(retrieval=ranking, expected=exp)) == pytest.approx(1 / 3)
    # chunk units: only (d1, c2) is relevant, at position 2
    assert value(HitRate(k=1, relevance_unit="chunk"), x(retrieval=ranking, expected=exp)) == 0.0
    assert value(MRR(k=3, relevance_unit="chunk"), x(retrieval=ranking, expected=exp)) == 0.5


# ------------------------------------------------------------------ config and assert


def test_registry_builds_with_renaming_and_assert() -> None:
    ev = build({"type": "ndcg", "k": 6, "criterion": "ndcg_exp", "gain": "exponential", "assert": True})
    assert (ev.criterion, ev.asserts, ev.settings()["gain"]) == ("ndcg_exp", True, "exponential")
    assert build({"type": "hit_rate", "k": 2}).asserts is False  # retrieval metrics do not assert by default
    assert build({"type": "contains"}).asserts is True
    assert build({"type": "citation_validity"}).asserts is True
    assert build({"type": "contains", "assert": False}).asserts is False


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"type": "recall", "k": 0}, r"evaluators\[2\]\.k: expected an integer >= 1, got 0"),
        ({"type": "recall"}, r"evaluators\[2\]\.k: required for recall"),
        (
            {"type": "recall", "k": 2, "relevance_unit": "passage"},
            r"evaluators\[2\]\.relevance_unit: expected 'document'",
        ),
        ({"type": "ndcg", "k": 2, "gain": "squared"}, r"evaluators\[2\]\.gain: expected 'linear' or 'exponential'"),
        ({"type": "recal", "k": 2}, r"evaluators\[2\]\.type: unknown evaluator type 'recal'.*did you mean recall"),
        ({"type": "contains", "feild": "x"}, r"evaluators\[2\]\.feild: unknown key for contains.*did you mean field"),
    ],
)
def test_bad_settings_are_config_errors_naming_the_key(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build(entry)


def test_retrieval_metrics_need_a_rag_system() -> None:
    with pytest.raises(ConfigError, match=r"evaluators\[2\]: hit_rate needs a RAG system"):
        build({"type": "hit_rate", "k": 2}, is_rag=False)


def test_two_evaluators_with_one_criterion_are_a_config_error(pytester: pytest.Pytester) -> None:
    from tests.oloproof_project import case, make_project

    make_project(
        pytester, [case("a")], [{"type": "recall", "k": 2}, {"type": "ndcg", "k": 3, "criterion": "recall_at_2"}]
    )
    result = pytester.runpytest("--oloproof")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*evaluators[[]1[]]: criterion 'recall_at_2' is also produced by evaluators[[]0[]]*"])
    assert not (pytester.path / ".oloproof" / "runs").exists()


def test_failed_and_missing_criteria_follow_assert() -> None:
    evs = [Contains(criterion="a"), Contains(criterion="b", asserts=False), Recall(k=2), Recall(k=1, asserts=True)]
    rec = {
        "criteria": {
            "a": CriterionValue.observed(False).to_json(),
            "b": CriterionValue.observed(False).to_json(),
            "recall_at_2": CriterionValue.observed(0.5).to_json(),
            "recall_at_1": CriterionValue.observed(0.5).to_json(),
        }
    }
    assert [n for n, _ in failed_criteria(rec, evs)] == ["a", "recall_at_1"]
    rec["criteria"]["a"] = CriterionValue.missing("evaluator_error: boom").to_json()
    rec["criteria"]["b"] = CriterionValue.missing("evaluator_error: boom").to_json()
    assert [n for n, _ in missing_criteria(rec, evs)] == ["a"]
    assert [n for n, _ in failed_criteria(rec, evs)] == ["recall_at_1"]


def test_registry_names_an_added_type_after_it_by_default() -> None:
    class Polite(Evaluator):
        type = "polite"

        def __init__(self, criterion: str, asserts: bool | None = None, *, word: str = "please") -> None:
            super().__init__(criterion, asserts)
            self.word = word

        def evaluate(self, x: EvalInput) -> CriterionValue:
            return CriterionValue.observed(self.word in str(x.output))

    registry = Registry()
    registry.add([Polite])
    settings = EvaluatorSettings.model_validate({"type": "polite", "word": "thanks"})
    ev = registry.build(settings, 0, "oloproof.yaml", None, is_rag=False)
    assert (ev.criterion, ev.asserts, value(ev, x("thanks!"))) == ("polite", True, 1.0)
    with pytest.raises(TypeError, match="not an Evaluator subclass"):
        registry.add([dict])  # type: ignore[list-item]
