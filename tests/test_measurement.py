"""End to end through pytest: the three states, intervals in the table, slices, evaluators as fixtures."""

from __future__ import annotations

import pytest

from tests.oloproof_project import case, make_project, report, row, section

ANSWER = {"type": "contains", "criterion": "answer_correct"}
REL = {"relevant": [{"doc_id": "d1"}]}


# ------------------------------------------------------------------ observed / missing / excluded


def test_system_error_is_missing_for_every_criterion_and_never_changes_the_rate(pytester: pytest.Pytester) -> None:
    cases = [
        case("a", expected={"answer": "14 days", **REL}),
        case("b", expected={"answer": "14 days", **REL}),
        case("c", expected={"answer": "14 days", **REL}),
        case("d", expected={"answer": "14 days", **REL}, answer="no idea"),
        case("e", expected={"answer": "14 days", **REL}, fail="generate"),
    ]
    make_project(pytester, cases, [ANSWER, {"type": "hit_rate", "k": 2}, {"type": "citation_validity"}])
    result, rep = report(pytester)
    result.assert_outcomes(passed=3, failed=2)
    assert row(result, "answer_correct") == [
        "answer_correct",
        "75.0%",
        "[19.4%, 99.4%]",
        # the missing case at its worst: 3/5 for the lower bound, 4/5 for the upper (Clopper–Pearson)
        "3 / 4 observed · 1 missing · with missing at worst: [14.6%, 99.5%] · 0 excluded",
    ]
    assert row(result, "hit_rate_at_2")[3] == (
        "4 / 4 observed · 1 missing · with missing at worst: [28.3%, 100.0%] · 0 excluded"
    )
    out = "\n".join(section(result))
    for name in ("answer_correct", "hit_rate_at_2", "citations_valid"):
        assert f"{name}: missing — system_error 1" in out
    # the item shows the system's own traceback
    result.stdout.fnmatch_lines(["*the system failed in generate*", "*ValueError: model exploded*"])
    e = next(c for c in rep["cases"] if c["id"] == "e")
    assert {c["status"] for c in e["criteria"].values()} == {"missing"}
    assert {c["reason"] for c in e["criteria"].values()} == {"system_error"}
    m = rep["metrics"]["answer_correct"]
    assert (m["passed"], m["observed"], m["missing"], m["excluded"]) == (3, 4, 1, 0)
    assert m["value"] == 0.75 and m["missing_reasons"] == {"system_error": 1}


def test_retrieve_error_also_leaves_retrieval_metrics_missing(pytester: pytest.Pytester) -> None:
    cases = [case("a", expected=REL), case("b", expected=REL, fail="retrieve")]
    make_project(pytester, cases, [{"type": "recall", "k": 2}])
    result, rep = report(pytester)
    result.assert_outcomes(passed=1, failed=1)
    # recall is a rate here (the labelled cases have one relevant unit each, decided from the labels): 1/1,
    # and with the missing case at its worst 1/2 for the lower bound
    assert row(result, "recall_at_2")[1:] == [
        "100.0%",
        "[2.5%, 100.0%]",
        "1 / 1 observed · 1 missing · with missing at worst: [1.2%, 100.0%] · 0 excluded",
    ]
    b = next(c for c in rep["cases"] if c["id"] == "b")
    assert b["criteria"]["recall_at_2"]["status"] == "missing"
    assert b["error"]["stage"] == "retrieve" and "index is down" in b["error"]["message"]


def test_evaluator_error_missing_output_field_and_exclusions(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        from pytest_oloproof import CriterionValue, Evaluator

        class Fragile(Evaluator):
            type = "fragile"
            def __init__(self, criterion=None, asserts=None):
                super().__init__(criterion or "fragile", asserts)
            def evaluate(self, x):
                if x.output.get("answer", "").endswith("!"):
                    raise ZeroDivisionError("evaluator bug")
                return CriterionValue.observed(True)

        def pytest_oloproof_evaluators():
            return [Fragile]
        """
    )
    cases = [
        case("a", expected={"answer": "14 days", **REL}),
        case("b", expected={"answer": "14 days", **REL}, answer="14 days!"),
        case("c", expected={"answer": "14 days"}, drop_answer=True),
        case("d", expected={}),
    ]
    make_project(pytester, cases, [ANSWER, {"type": "fragile"}, {"type": "ndcg", "k": 3}])
    result, rep = report(pytester)
    by_id = {c["id"]: c["criteria"] for c in rep["cases"]}
    assert by_id["b"]["fragile"]["status"] == "missing"
    assert by_id["b"]["fragile"]["reason"].startswith("evaluator_error: ZeroDivisionError: evaluator bug")
    assert by_id["c"]["answer_correct"] == {"status": "missing", "reason": "missing_output_field: answer"}
    assert by_id["d"]["answer_correct"] == {"status": "excluded", "reason": "no_expected_value"}
    assert by_id["c"]["ndcg_at_3"] == {"status": "excluded", "reason": "no_relevance_labels"}
    # the missing case at its worst: 2/3 and 3/4 for the lower bounds (Clopper–Pearson)
    assert (
        row(result, "answer_correct")[3]
        == "2 / 2 observed · 1 missing · with missing at worst: [9.4%, 100.0%] · 1 excluded"
    )
    assert (
        row(result, "fragile")[3] == "3 / 3 observed · 1 missing · with missing at worst: [19.4%, 100.0%] · 0 excluded"
    )
    assert row(result, "ndcg_at_3")[3] == "mean of 2 observed · 0 missing · 2 excluded"  # 0/1 values: still a mean
    out = "\n".join(section(result))
    assert "answer_correct: excluded — no_expected_value 1" in out
    assert "answer_correct: missing — missing_output_field 1" in out
    assert "fragile: missing — evaluator_error 1" in out
    assert "ndcg_at_3: excluded — no_relevance_labels 2" in out
    m = rep["metrics"]["ndcg_at_3"]
    assert m["excluded_reasons"] == {"no_relevance_labels": 2} and m["observed"] == 2
    # a missing asserting criterion fails its item, naming the reason; excluded ones do not
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(["*fragile: missing (evaluator_error: ZeroDivisionError: evaluator bug)*"])
    result.stdout.fnmatch_lines(["*answer_correct: missing (missing_output_field: answer)*"])


# ------------------------------------------------------------------ intervals in the table


def _pass_fail(n_pass: int, n_fail: int) -> list[dict[str, object]]:
    exp = {"answer": "14 days"}
    return [case(f"p{i:02d}", expected=exp) for i in range(n_pass)] + [
        case(f"f{i:02d}", expected=exp, answer="no") for i in range(n_fail)
    ]


@pytest.mark.parametrize(
    ("n_pass", "n_fail", "estimate", "interval"),
    [(9, 4, "69.2%", "[38.5%, 91.0%]"), (13, 0, "100.0%", "[75.2%, 100.0%]"), (12, 1, "92.3%", "[63.9%, 99.9%]")],
)
def test_rate_interval_is_printed_outward(
    pytester: pytest.Pytester, n_pass: int, n_fail: int, estimate: str, interval: str
) -> None:
    make_project(pytester, _pass_fail(n_pass, n_fail), [ANSWER])
    result = pytester.runpytest("--oloproof")
    assert row(result, "answer_correct")[1:3] == [estimate, interval]
    assert row(result, "answer_correct")[3].startswith(f"{n_pass} / 13 observed")


def test_confidence_setting_changes_header_and_bounds(pytester: pytest.Pytester) -> None:
    make_project(pytester, _pass_fail(9, 4), [ANSWER], extra="confidence: 0.9\n")
    result, rep = report(pytester)
    header = next(line for line in section(result) if "criterion" in line)
    assert "90% interval" in header and "95%" not in header
    # scipy binomtest(9, 13).proportion_ci(0.9, "exact") = (0.42738..., 0.88733...)
    assert row(result, "answer_correct")[2] == "[42.7%, 88.8%]"
    assert rep["confidence"] == 0.9 and rep["metrics"]["answer_correct"]["confidence"] == 0.9


def _graded(pytester: pytest.Pytester, orders: list[list[str]], extra: str = "") -> None:
    cases = [
        case(f"c{i:02d}", expected={"relevant": [{"doc_id": "d1"}, {"doc_id": "d3", "grade": 2}]}, order=o)
        for i, o in enumerate(orders)
    ]
    make_project(pytester, cases, [{"type": "ndcg", "k": 3}], extra=extra)


ORDERS = [
    ["d1", "d2", "d3"],
    ["d3", "d1"],
    ["d2", "d4"],
    ["d1"],
    ["d3"],
    ["d2", "d3"],
    ["d4", "d1"],
    ["d3", "d2", "d1"],
]


def test_graded_mean_gets_the_mixture_interval_recorded_in_the_run(pytester: pytest.Pytester) -> None:
    _graded(pytester, ORDERS, extra="seed: 7\n")
    r1, rep1 = report(pytester, "--oloproof-cache=off", name="r1.json")
    r2, rep2 = report(pytester, "--oloproof-cache=off", name="r2.json")
    m1, m2 = rep1["metrics"]["ndcg_at_3"], rep2["metrics"]["ndcg_at_3"]
    assert m1["method"] == "mixture" and rep1["seed"] == 7
    assert (m1["low"], m1["high"]) == (m2["low"], m2["high"])
    assert row(r1, "ndcg_at_3") == row(r2, "ndcg_at_3")
    assert m1["low"] < m1["value"] < m1["high"]
    assert row(r1, "ndcg_at_3")[3] == "mean of 8 observed · 0 missing · 0 excluded"


def test_degenerate_samples_are_shown_honestly(pytester: pytest.Pytester) -> None:
    cases = [
        # one observed recall value, every nDCG equal, no observed answer at all
        case("a", expected={"relevant": [{"doc_id": "d1"}], "tag": "x"}, order=["d1", "d2"]),
        case("b", expected={"tag": "x"}, order=["d1", "d2"]),
        case("c", expected={"tag": "x"}, order=["d1", "d2"]),
    ]
    make_project(
        pytester,
        cases,
        [{"type": "recall", "k": 1}, {"type": "contains", "criterion": "never", "expected_field": "nothing"}],
    )
    result = pytester.runpytest("--oloproof")
    recall = row(result, "recall_at_1")
    # one labelled case with one relevant unit: recall is a rate, and 1 / 1 says little: [2.5%, 100.0%]
    assert recall[1:] == ["100.0%", "[2.5%, 100.0%]", "1 / 1 observed · 0 missing · 2 excluded"]
    assert row(result, "never")[1:] == ["—", "—", "0 / 0 observed · 0 missing · 3 excluded"]


def test_all_equal_graded_values_and_n1_mean_never_get_zero_width(pytester: pytest.Pytester) -> None:
    orders = [["d1", "d3"], ["d1", "d3"], ["d1", "d3"], ["d1", "d3"]]
    _graded(pytester, orders)
    result, rep = report(pytester)
    m = rep["metrics"]["ndcg_at_3"]
    assert m["value"] < 1 and m["low"] < m["value"] < m["high"]
    assert m["note"] == "all values equal"
    out = "\n".join(section(result))
    assert "ndcg_at_3: interval mixture (all values equal)" in out


def test_clusters_are_the_units_and_the_table_says_so(pytester: pytest.Pytester) -> None:
    cases = [
        case(
            f"c{i:02d}",
            expected={"answer": "14 days"},
            answer="14 days" if i % 3 else "no",
            metadata={"cluster": i // 4},
        )
        for i in range(12)
    ]
    make_project(pytester, cases, [ANSWER])
    result, rep = report(pytester)
    m = rep["metrics"]["answer_correct"]
    assert m["clustered"] is True and m["method"] == "cluster-mixture" and "3 clusters" in m["note"]
    assert m["low"] <= 0.5  # 8/12 passes but only 3 clusters: a wide interval
    assert "Intervals treat whole clusters (metadata.cluster) as the independent units." in section(result)


# ------------------------------------------------------------------ slices


def test_slices_metadata_relevant_position_and_truncation(pytester: pytest.Pytester) -> None:
    rel = {"answer": "14 days", "relevant": [{"doc_id": "d1"}]}
    cases = [
        case("a", expected=rel, order=["d1", "d2"], metadata={"topic": "billing"}),
        case("b", expected=rel, order=["d1", "d3"], metadata={"topic": "billing"}),
        case("c", expected=rel, order=["d2", "d1"], metadata={"topic": "billing"}),
        case("d", expected=rel, order=["d2", "d3"], answer="no", metadata={"topic": "billing"}),
        case("e", expected={"answer": "14 days"}, order=["d2", "d3"], answer="14 days", metadata={"topic": "seats"}),
    ]
    make_project(
        pytester,
        cases,
        [ANSWER, {"type": "hit_rate", "k": 1}],
        extra="slices: [metadata.topic, relevant_position, context_truncated]\nmin_slice_support: 2\n",
    )
    result, rep = report(pytester)
    rows = {(r["slice"], r["value"], r["criterion"]): r for r in rep["slices"]}
    billing = rows[("metadata.topic", "billing", "answer_correct")]
    assert (billing["support"], billing["passed"], billing["value_estimate"]) == (4, 3, 0.75)
    assert rows[("metadata.topic", "seats", "answer_correct")]["insufficient_support"] is True
    assert "value_estimate" not in rows[("metadata.topic", "seats", "answer_correct")]
    assert {r["value"] for r in rep["slices"] if r["slice"] == "relevant_position"} == {"1", "2", "none"}
    assert rows[("relevant_position", "1", "hit_rate_at_1")]["value_estimate"] == 1.0
    # case e has no labels, so it is in no relevant_position slice
    assert rows[("relevant_position", "1", "answer_correct")]["support"] == 2
    assert rows[("relevant_position", "none", "answer_correct")]["support"] == 1
    assert rows[("context_truncated", "false", "answer_correct")]["support"] == 5
    assert [c["relevant_position"] for c in rep["cases"]] == [1, 1, 2, "none", None]
    out = section(result)
    assert "Slices (exploratory: estimates within a slice are not population claims; min support 2)" in out
    assert (
        "  metadata.topic=billing: answer_correct 75.0% [19.4%, 99.4%] 3/4 · hit_rate_at_1 50.0% [6.7%, 93.3%] 2/4"
        in out
    )
    # one criterion short of support, the other not: each says so
    assert "  metadata.topic=seats: 1 observed · insufficient support" in out
    assert "  relevant_position=none: 1 observed · insufficient support" in out
    assert (
        "  context_truncated=false: answer_correct 80.0% [28.3%, 99.5%] 4/5 · hit_rate_at_1 50.0% [6.7%, 93.3%] 2/4"
        in out
    )


# ------------------------------------------------------------------ evaluators are fixtures


def test_conftest_fixture_overrides_a_configured_evaluator(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        import pytest
        from pytest_oloproof.evaluators.answers import Contains

        @pytest.fixture(scope="session")
        def answer_correct():
            return Contains(criterion="answer_correct", case_sensitive=True)
        """
    )
    cases = [case("a", expected={"answer": "14 days"}, answer="14 DAYS"), case("b", expected={"answer": "14 days"})]
    make_project(pytester, cases, [ANSWER])
    result, rep = report(pytester)
    result.assert_outcomes(passed=1, failed=1)
    assert rep["evaluators"][0]["settings"]["case_sensitive"] is True
    assert row(result, "answer_correct")[3] == "1 / 2 observed · 0 missing · 0 excluded"


def test_added_evaluator_fixture_appears_in_the_record_and_table(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        import pytest_oloproof
        from pytest_oloproof import CriterionValue, Evaluator

        class Short(Evaluator):
            type = "short_answer"
            def __init__(self, criterion="short_answer", asserts=None, *, max_words=3):
                super().__init__(criterion, asserts)
                self.max_words = max_words
            def settings(self):
                return {"max_words": self.max_words}
            def evaluate(self, x):
                return CriterionValue.observed(len(x.output["answer"].split()) <= self.max_words)

        @pytest_oloproof.evaluator
        def short_answer():
            return Short()
        """
    )
    cases = [
        case("a", expected={"answer": "14 days"}, answer="14 days"),
        case("b", expected={"answer": "x"}, answer="x y z w"),
    ]
    make_project(pytester, cases, [ANSWER])
    result, rep = report(pytester)
    result.assert_outcomes(passed=1, failed=1)
    assert [e["criterion"] for e in rep["evaluators"]] == ["answer_correct", "short_answer"]
    assert rep["evaluators"][1]["type"] == "short_answer" and rep["evaluators"][1]["settings"] == {"max_words": 3}
    assert rep["metrics"]["short_answer"]["passed"] == 1
    assert row(result, "short_answer")[1:] == ["50.0%", "[1.2%, 98.8%]", "1 / 2 observed · 0 missing · 0 excluded"]
    b = next(c for c in rep["cases"] if c["id"] == "b")
    assert b["criteria"]["short_answer"]["value"] == 0.0


def test_hook_adds_an_evaluator_type_usable_in_the_config(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        from pytest_oloproof import CriterionValue, Evaluator

        class Polite(Evaluator):
            type = "polite"
            kind = "rate"
            def __init__(self, criterion=None, asserts=None, *, word: str = "please"):
                super().__init__(criterion or "polite", asserts)
                self.word = word
            def settings(self):
                return {"word": self.word}
            def evaluate(self, x):
                return CriterionValue.observed(self.word in x.output["answer"])

        def pytest_oloproof_evaluators():
            return {"polite": Polite}
        """
    )
    cases = [case("a", answer="thanks a lot"), case("b", answer="no thanks")]
    make_project(
        pytester, cases, [{"type": "polite", "word": "thanks"}, {"type": "polite", "criterion": "lot", "word": "lot"}]
    )
    result, rep = report(pytester)
    result.assert_outcomes(passed=1, failed=1)
    assert row(result, "polite")[3] == "2 / 2 observed · 0 missing · 0 excluded"
    assert row(result, "lot")[3] == "1 / 2 observed · 0 missing · 0 excluded"
    assert {e["criterion"]: e["settings"] for e in rep["evaluators"]} == {
        "polite": {"word": "thanks"},
        "lot": {"word": "lot"},
    }


def test_hook_type_with_a_bad_setting_is_a_config_error(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        from pytest_oloproof import CriterionValue, Evaluator

        class Polite(Evaluator):
            type = "polite"
            def __init__(self, criterion=None, asserts=None, *, word: str = "please"):
                super().__init__(criterion or "polite", asserts)
            def evaluate(self, x):
                return CriterionValue.observed(True)

        def pytest_oloproof_evaluators():
            return [Polite]
        """
    )
    make_project(pytester, [case("a")], [{"type": "polite", "wrod": "x"}])
    result = pytester.runpytest("--oloproof")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*evaluators[[]0[]].wrod: unknown key for polite*did you mean word?*"])


def test_fixture_returning_a_non_evaluator_fails_clearly(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        import pytest

        @pytest.fixture(scope="session")
        def answer_correct():
            return lambda x: True
        """
    )
    make_project(pytester, [case("a", expected={"answer": "x"})], [ANSWER])
    result = pytester.runpytest("--oloproof")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*fixture 'answer_correct' must return a pytest_oloproof.Evaluator, got function*"])


def test_evaluator_fixtures_are_usable_from_ordinary_tests(pytester: pytest.Pytester) -> None:
    make_project(
        pytester,
        [case("a", expected={"answer": "x"}, answer="x")],
        [ANSWER, {"type": "ndcg", "k": 3, "gain": "exponential"}],
    )
    pytester.makepyfile(
        test_uses_fixture="""
        def test_fixture(answer_correct, ndcg_at_3):
            assert answer_correct.criterion == "answer_correct" and answer_correct.type == "contains"
            assert ndcg_at_3.gain == "exponential"
        """
    )
    result = pytester.runpytest("--oloproof")
    result.assert_outcomes(passed=2)
    # naming the test file alone leaves the evaluation out (paths select what runs); its fixtures still serve
    result = pytester.runpytest("--oloproof", "test_uses_fixture.py")
    result.assert_outcomes(passed=1)


# ------------------------------------------------------------------ assert: true|false


def test_assert_setting_decides_whether_a_failure_fails_the_item(pytester: pytest.Pytester) -> None:
    exp = {"answer": "14 days", "relevant": [{"doc_id": "d3"}]}
    cases = [case("a", expected=exp, answer="no", order=["d1", "d2"])]
    evs = [
        {"type": "contains", "criterion": "soft", "assert": False},
        {"type": "recall", "k": 2},  # retrieval metrics do not assert by default
        {"type": "hit_rate", "k": 1, "assert": True},
    ]
    make_project(pytester, cases, evs)
    result, rep = report(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*failed 1 criterion(s):*", "*hit_rate_at_1: expected*"])
    assert "soft:" not in result.stdout.str().split("failed 1 criterion(s):")[1].split("\n")[1]
    assert {e["criterion"]: e["asserts"] for e in rep["evaluators"]} == {
        "soft": False,
        "recall_at_2": False,
        "hit_rate_at_1": True,
    }


def test_single_graded_value_gets_the_whole_unit_interval(pytester: pytest.Pytester) -> None:
    _graded(pytester, [["d2", "d1"]])
    result = pytester.runpytest("--oloproof")
    cells = row(result, "ndcg_at_3")
    assert cells[2] == "[0.000, 1.000]" and cells[3] == "mean of 1 observed · 0 missing · 0 excluded"
    assert "ndcg_at_3: interval degenerate (n < 2)" in section(result)


@pytest.mark.parametrize(
    "bad", ['CriterionValue.observed(float("nan"))', "CriterionValue.observed(7.5)", 'CriterionValue("observed")']
)
def test_a_non_finite_criterion_value_is_missing_not_recorded(pytester: pytest.Pytester, bad: str) -> None:
    """Only a number in [0, 1] is recorded as observed: what the store's readers accept (issue 22 §12)."""
    pytester.makeconftest(
        f"""
        from pytest_oloproof import CriterionValue, Evaluator

        class Nan(Evaluator):
            type = "nan_score"
            reads = frozenset({{"input"}})
            def __init__(self, criterion=None, asserts=None):
                super().__init__(criterion or "nan_score", asserts)
            def evaluate(self, x):
                return {bad} if x.input["q"] == "nan" else CriterionValue.observed(1.0)

        def pytest_oloproof_evaluators():
            return [Nan]
        """
    )
    make_project(pytester, [case("a", expected=REL), case("b", q="nan", expected=REL)], [{"type": "nan_score"}])
    _, rep = report(pytester)
    by_id = {c["id"]: c["criteria"] for c in rep["cases"]}
    assert by_id["a"]["nan_score"] == {"status": "observed", "value": 1.0}
    assert by_id["b"]["nan_score"]["status"] == "missing", by_id
    assert "must be a finite number" in by_id["b"]["nan_score"]["reason"]
    assert rep["status"] == "complete" and rep["metrics"]["nan_score"]["missing"] == 1
