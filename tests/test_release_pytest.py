"""A release policy without a baseline decides the pytest session's run; recall's kind from its
labels and missing cases bounded at worst, through real pytest sessions."""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET

import pytest
from scipy.stats import binomtest

from pytest_oloproof.store.files import Store
from tests.oloproof_project import case, make_project, row

RECALL = {"type": "recall", "k": 2}
ANSWER = {"type": "contains", "criterion": "answer_ok", "field": "answer", "expected_field": "answer"}


def cp(k: int, n: int) -> tuple[float, float]:
    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    return float(ci.low), float(ci.high)


def floor_pct(x: float) -> str:
    return f"{math.floor(x * 1000) / 10:.1f}%"


def ceil_pct(x: float) -> str:
    return f"{math.ceil(x * 1000) / 10:.1f}%"


def test_release_policy_decides_the_session_and_block_wins_over_failed_cases(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 9 of 13 answers right: [38.5%, 91.0%] overlaps a 70% floor; four failed cases would exit 1
    cases = [case(f"q{i:02d}", answer="yes" if i < 9 else "no", expected={"answer": "yes"}) for i in range(13)]
    make_project(pytester, cases, [ANSWER])
    pytester.makefile(
        ".yaml",
        release="decisions:\n  - {name: answer-floor, criterion: answer_ok, test: minimum, threshold: 0.70}\n",
    )
    step = pytester.path / "step.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    result = pytester.runpytest(
        "--oloproof",
        "-p",
        "no:cacheprovider",
        "--oloproof-policy",
        "release.yaml",
        "--oloproof-report",
        "r.json",
        "--junitxml",
        "j.xml",
        "--oloproof-html",
        "r.html",
    )
    assert result.ret == 3
    result.stdout.fnmatch_lines(
        [
            "Decision sha256:* of run_* · 13 cases · 1 single-run decision (no baseline)",
            "Decisions",
            "  answer-floor  answer_ok  minimum 70.0%  [38.5%, 91.0%]  INSUFFICIENT_EVIDENCE  "
            "interval_overlaps_threshold",
            "    no sample size would make this PASS: the observed rate (69.2%) is itself below the threshold "
            "(70.0%);*",
            "Gate: BLOCK (exit 3) · blocks on FAIL, INSUFFICIENT_EVIDENCE",
        ]
    )
    (run_id,) = Store(pytester.path / ".oloproof").run_ids()
    report = json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))
    decision = report["decision"]
    assert decision["gate"] == "BLOCK" and decision["run"]["run_id"] == run_id
    stored = pytester.path / ".oloproof" / "decisions" / f"{decision['id'].removeprefix('sha256:')}.json"
    assert json.loads(stored.read_text(encoding="utf-8"))["decisions"] == decision["decisions"]
    props = {p.get("name"): p.get("value") for p in ET.parse(pytester.path / "j.xml").getroot().iter("property")}
    assert props["oloproof.gate"] == "BLOCK" and props["oloproof.gate.id"] == decision["id"]
    assert props["oloproof.decision.answer-floor"] == "INSUFFICIENT_EVIDENCE"
    md = step.read_text(encoding="utf-8")
    assert "### Oloproof gate · BLOCK" in md and "**Gate: BLOCK (exit 3)**" in md
    html = (pytester.path / "r.html").read_text(encoding="utf-8")
    assert 'id="decision-h"' in html and "no sample size would make this PASS" in html


def test_release_policy_passes_the_session_with_gate_on_fail_only(pytester: pytest.Pytester) -> None:
    cases = [case(f"q{i:02d}", answer="yes" if i < 9 else "no", expected={"answer": "yes"}) for i in range(13)]
    make_project(pytester, cases, [ANSWER])
    pytester.makefile(
        ".yaml",
        release="decisions:\n  - {name: floor, criterion: answer_ok, test: minimum, threshold: 0.70}\n"
        "block_on: [FAIL]\n",
    )
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider", "--oloproof-policy", "release.yaml")
    assert result.ret == 0  # INSUFFICIENT_EVIDENCE does not block; the gate's PASS wins over failed cases
    result.stdout.fnmatch_lines(["Gate: PASS (exit 0) · blocks on FAIL"])


def test_release_policy_criterion_the_run_lacks_exits_2_before_any_case_runs(pytester: pytest.Pytester) -> None:
    make_project(pytester, [case("q0", answer="yes", expected={"answer": "yes"})], [ANSWER])
    pytester.makefile(
        ".yaml", release="decisions:\n  - {name: f, criterion: answer_okk, test: minimum, threshold: 0.5}\n"
    )
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider", "--oloproof-policy", "release.yaml")
    assert result.ret == 2
    assert Store(pytester.path / ".oloproof").run_ids() == []


@pytest.mark.parametrize("two_relevant", [False, True])
def test_recall_is_a_rate_when_every_labelled_case_has_one_relevant_unit(
    pytester: pytest.Pytester, two_relevant: bool
) -> None:
    # the retriever returns d1, d2, d3 for every case; relevant: d1 (hit) or d5 (miss)
    cases = [case(f"q{i}", expected={"relevant": [{"doc_id": "d1" if i < 5 else "d5"}]}) for i in range(6)]
    cases.append(case("unlabelled", expected={"relevant": [{"doc_id": "d4", "grade": 0}]}))  # no relevant unit
    if two_relevant:  # one case with two relevant units: recall can be 0.5, so it is a mean for the whole run
        cases[0] = case("q0", expected={"relevant": [{"doc_id": "d1"}, {"doc_id": "d4"}]})
    make_project(pytester, cases, [RECALL])
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider")
    cells = row(result, "recall_at_2")
    (run_id,) = Store(pytester.path / ".oloproof").run_ids()
    header = Store(pytester.path / ".oloproof").run_header(run_id)
    (ev,) = header["evaluators"]
    if two_relevant:
        assert ev["kind"] == "mean" and cells[1] == f"{(0.5 + 4) / 6:.3f}"
        assert cells[3].startswith("mean of 6 observed")
    else:
        low, high = cp(5, 6)
        assert ev["kind"] == "rate" and header["labels"]["one_relevant_unit"]["document"] is True
        assert cells[1] == "83.3%" and cells[3].startswith("5 / 6 observed · 0 missing · 1 excluded")
        assert cells[2] == f"[{floor_pct(low)}, {ceil_pct(high)}]"


def test_missing_cases_are_bounded_at_worst_in_the_accounting(pytester: pytest.Pytester) -> None:
    # 9 right, 2 wrong, 2 whose generation fails (missing): with the 2 at worst, [CP(9, 13).low, CP(11, 13).high]
    cases = [case(f"q{i:02d}", answer="yes" if i < 9 else "no", expected={"answer": "yes"}) for i in range(11)]
    cases += [case(f"f{i}", fail="generate", expected={"answer": "yes"}) for i in range(2)]
    make_project(pytester, cases, [ANSWER])
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider", "--oloproof-report", "r.json")
    low, high = cp(9, 13)[0], cp(11, 13)[1]
    assert row(result, "answer_ok")[3] == (
        f"9 / 11 observed · 2 missing · with missing at worst: [{floor_pct(low)}, {ceil_pct(high)}] · 0 excluded"
    )
    worst = json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))["metrics"]["answer_ok"]
    assert worst["missing_at_worst"]["low"] == pytest.approx(low, abs=1e-9)
    assert worst["missing_at_worst"]["high"] == pytest.approx(high, abs=1e-9)
    assert worst["missing_at_worst"]["cases"] == 13


def test_under_xdist_the_release_policy_decides_and_recall_is_still_a_rate(pytester: pytest.Pytester) -> None:
    # the controller collects nothing under xdist: the labels' facts come from the case file it loads itself
    cases = [
        case(f"q{i}", answer="yes" if i < 5 else "no", expected={"answer": "yes", "relevant": [{"doc_id": "d1"}]})
        for i in range(6)
    ]
    make_project(pytester, cases, [ANSWER, RECALL])
    pytester.makefile(
        ".yaml", release="decisions:\n  - {name: recall-floor, criterion: recall_at_2, test: minimum, threshold: 0.3}\n"
    )
    result = pytester.runpytest_subprocess(
        "--oloproof", "-p", "no:cacheprovider", "-n", "2", "--oloproof-policy", "release.yaml"
    )
    assert result.ret == 0  # 6 / 6 recalled: [54.0%, 100.0%] is above 0.3; the failed answer does not decide
    assert row(result, "recall_at_2")[1:3] == ["100.0%", "[54.0%, 100.0%]"]
    result.stdout.fnmatch_lines(["*recall-floor  recall_at_2  minimum 30.0%  *  PASS  lower_bound_above_threshold"])


def test_baseline_latest_is_the_newest_run_before_the_session(pytester: pytest.Pytester) -> None:
    cases = [case(f"q{i:02d}", answer="yes", expected={"answer": "yes"}) for i in range(12)]
    make_project(pytester, cases, [ANSWER])
    assert pytester.runpytest("--oloproof", "-p", "no:cacheprovider").ret == 0
    (first,) = Store(pytester.path / ".oloproof").run_ids()
    pytester.makefile(
        ".yaml", compare="decisions:\n  - {name: ni, criterion: answer_ok, test: non-inferiority, margin: 5}\n"
    )
    result = pytester.runpytest(
        "--oloproof", "-p", "no:cacheprovider", "--oloproof-baseline", "latest", "--oloproof-policy", "compare.yaml"
    )
    assert result.ret == 3  # 12 unchanged pairs cannot show non-inferiority at 5 points
    result.stdout.fnmatch_lines([f"Comparison sha256:* of run_* against {first} · 12 paired cases"])
