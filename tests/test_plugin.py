"""pytest integration: items, selection, markers, failure messages, case-file errors, staying away."""

from __future__ import annotations

import signal

import pytest
from staged_helpers import assert_nothing_written, by_id, calls, case, last_run, rag_project

CASES = [
    case("refund_annual", answer="gamma", metadata={"topic": "billing", "tier": "gold"}),
    case("sso_setup", answer="gamma", metadata={"topic": "security", "tier": "free"}),
    case("seat_limit", answer="no such text", metadata={"topic": "billing", "tier": "free"}),
]
MARKERS = "markers: [topic]\n"


def project(pytester: pytest.Pytester) -> None:
    rag_project(pytester, CASES, settings="depth=4, top_k=2", extra=MARKERS)
    pytester.makepyfile(test_ordinary="def test_ordinary():\n    assert True\n")


def test_items_are_named_after_config_system_and_case(pytester: pytest.Pytester) -> None:
    project(pytester)
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider", "--collect-only", "-q")
    result.stdout.fnmatch_lines(
        [
            "oloproof.yaml::sys[[]refund_annual[]]",
            "oloproof.yaml::sys[[]sso_setup[]]",
            "oloproof.yaml::sys[[]seat_limit[]]",
        ],
        consecutive=False,
    )
    result.stdout.fnmatch_lines(["test_ordinary.py::test_ordinary"])
    assert calls(pytester) == []  # collecting runs nothing


def test_k_selects_case_ids_and_metadata_values(pytester: pytest.Pytester) -> None:
    project(pytester)
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider", "-k", "sso_setup")
    result.assert_outcomes(passed=1)
    assert {q for _, q in calls(pytester)} == {"sso_setup"}
    assert [c["id"] for c in last_run(pytester)["cases"]] == ["sso_setup"]

    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider", "-k", "gold or security")
    result.assert_outcomes(passed=2)
    assert sorted(by_id(last_run(pytester))) == ["refund_annual", "sso_setup"]


def test_m_selects_the_oloproof_marker_and_metadata_markers(pytester: pytest.Pytester) -> None:
    project(pytester)
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider", "-m", "oloproof")
    result.assert_outcomes(passed=2, failed=1)  # test_ordinary is deselected
    result.stdout.fnmatch_lines(["*1 deselected*"])

    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider", "-m", "billing", "--strict-markers")
    result.assert_outcomes(passed=1, failed=1)
    assert sorted(by_id(last_run(pytester))) == ["refund_annual", "seat_limit"]

    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider", "-m", "not oloproof", "--strict-markers")
    result.assert_outcomes(passed=1)


def test_strict_markers_accepts_the_registered_markers(pytester: pytest.Pytester) -> None:
    project(pytester)
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider", "--strict-markers")
    result.assert_outcomes(passed=3, failed=1)
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider", "--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.oloproof: an Oloproof evaluation case"])


def test_failing_item_names_each_failed_criterion_with_expected_and_actual(pytester: pytest.Pytester) -> None:
    rag_project(
        pytester,
        [case("bad", answer="zeta", input={"docs": ["d1", "d2"]})],
        evaluators="""evaluators:
  - {type: contains, criterion: answer_correct}
  - {type: exact_match, criterion: answer_exact}
  - {type: contains, criterion: cites_d1, field: citations, expected_field: answer, assert: false}
""",
    )
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*oloproof case bad*",
            "case 'bad' failed 2 criterion(s):",
            "  answer_correct: expected \"contains 'zeta'\", actual 'alpha beta gamma delta | beta gamma'",
            "  answer_exact: expected 'zeta', actual 'alpha beta gamma delta | beta gamma'",
        ]
    )
    assert "cites_d1:" not in result.stdout.str()  # assert: false records, never fails the item
    crit = by_id(last_run(pytester))["bad"]["criteria"]
    assert crit["cites_d1"]["status"] == "observed"


def test_without_oloproof_an_ordinary_suite_is_untouched(pytester: pytest.Pytester) -> None:
    project(pytester)
    for args in ([], ["-p", "no:oloproof"]):
        result = pytester.runpytest("-p", "no:cacheprovider", *args)
        result.assert_outcomes(passed=1)
        out = result.stdout.str()
        assert "oloproof.yaml" not in out
        assert "== oloproof ==" not in out and "Cache:" not in out
        assert calls(pytester) == []
        assert not (pytester.path / ".oloproof").exists()


def test_without_oloproof_collect_only_lists_only_ordinary_tests(pytester: pytest.Pytester) -> None:
    project(pytester)
    result = pytester.runpytest("--collect-only", "-q", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["test_ordinary.py::test_ordinary", "", "1 test collected*"])


def test_oloproof_with_an_ordinary_suite_runs_both(pytester: pytest.Pytester) -> None:
    project(pytester)
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, failed=1)
    assert len(last_run(pytester)["cases"]) == 3  # the ordinary test is not a case


@pytest.mark.parametrize(
    "lines, message",
    [
        (
            ['{"id": "a", "input": {"q": "a"}}', '{"id": "a", "input": {"q": "b"}}'],
            'duplicate id "a" (first at cases.jsonl:1)',
        ),
        (['{"id": "a", "input": {"q": "a"}}', '{"id": "b", "input": '], "invalid JSON"),
        (['{"input": {"q": "a"}}'], "id"),
        (['{"id": "a", "input": {"q": "a"}}', '{"id": "b", "input": {"n": 1e400}}'], "non-finite number at input.n"),
    ],
)
def test_invalid_cases_stop_the_run_before_anything_executes(
    pytester: pytest.Pytester, lines: list[str], message: str
) -> None:
    rag_project(pytester, lines)
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider")
    assert result.ret == 2
    result.stdout.fnmatch_lines(["*Oloproof cannot start*", f"*cases.jsonl:*{message}*"])
    assert calls(pytester) == []
    assert_nothing_written(pytester.path)


def test_invalid_cases_keep_earlier_runs_intact(pytester: pytest.Pytester) -> None:
    rag_project(pytester, [case("a")])
    pytester.runpytest("--oloproof", "-p", "no:cacheprovider").assert_outcomes(passed=1)
    before = last_run(pytester)
    pytester.makefile(".jsonl", cases='{"id": "a", "input": {"q": "a"}}\n{"id": "a", "input": {"q": "a"}}\n')
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider")
    assert result.ret == 2
    runs = list((pytester.path / ".oloproof" / "runs").iterdir())
    assert len(runs) == 1
    assert last_run(pytester) == before


def test_an_in_process_session_leaves_the_sigterm_handler_as_it_found_it(pytester: pytest.Pytester) -> None:
    rag_project(pytester, [case("a")])
    before = signal.getsignal(signal.SIGTERM)
    pytester.runpytest("--oloproof", "-p", "no:cacheprovider").assert_outcomes(passed=1)
    assert signal.getsignal(signal.SIGTERM) == before
