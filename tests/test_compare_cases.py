"""A comparison knows when the cases changed under it (case digests), and judges gate only when both runs' match."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_oloproof.compare.comparison import judge_gate, run_comparison
from pytest_oloproof.evaluate.judge_validation import judge_identity
from pytest_oloproof.report.markdown import comparison_markdown as markdown
from pytest_oloproof.report.text import comparison_lines as render
from pytest_oloproof.store.files import Store
from tests.diagnose_project import Project, finished
from tests.test_compare import _FakeJudge, binary_runs, make_run, policy_file


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project(tmp_path)


def edit_cases(project: Project, edit: Any) -> None:
    path = project.root / "cases.jsonl"
    cases = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    path.write_text("".join(json.dumps(c) + "\n" for c in edit(cases)), encoding="utf-8")


def change_expected(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for c in cases:
        if c["id"] == "ok":
            c["expected"]["answer"] = "ANSWER-something-else"  # same id, other expected answer
    return cases


def test_runs_record_case_digests(project: Project) -> None:
    run_id = project.run()
    record = Store(project.store).load_run(run_id)
    assert record["case_set_digest"].startswith("sha256:")
    ok = next(c for c in record["cases"] if c["id"] == "ok")
    assert set(ok["digest"]) == {"input", "expected"} and len(ok["digest"]["expected"]) == 64
    edit_cases(project, change_expected)
    other = Store(project.store).load_run(project.run())
    assert other["case_set_digest"] != record["case_set_digest"]
    ok2 = next(c for c in other["cases"] if c["id"] == "ok")
    assert ok2["digest"]["input"] == ok["digest"]["input"] and ok2["digest"]["expected"] != ok["digest"]["expected"]


def test_a_changed_case_is_not_a_pair(project: Project) -> None:
    base = project.run()
    edit_cases(project, change_expected)
    cand = project.run()
    store = Store(project.store)
    doc_id, doc = run_comparison(store, cand, base)
    assert doc["case_sets"]["changed"] == {"ok": ["expected"]}
    assert doc["case_sets"]["counts"]["changed"] == 1 and doc["case_sets"]["changes_detectable"] is True
    answer = doc["criteria"]["answer_correct"]
    # without the exclusion the candidate would be charged -11.1 points for the edited case
    assert answer["excluded_reasons"].get("case_changed") == 1
    assert answer["regressed"] == [] and answer["printed"]["estimate"] == "+0.0"
    assert all(c["excluded_reasons"].get("case_changed") == 1 for c in doc["criteria"].values())
    assert doc["paired_cases"] == 8
    row = next(r for r in doc["cases"] if r["id"] == "ok")
    assert row["case_changed"] == ["expected"]
    lines = render(doc, doc_id)
    assert (
        "Warning: 1 case changed between the runs: ok (expected); "
        "excluded from every difference and decision (case_changed)" in lines
    )
    assert "Cases not paired: 1 case changed between the runs: ok (expected)." in markdown(doc, doc_id)


def test_changed_cases_fail_blocks_the_gate(project: Project, tmp_path: Path) -> None:
    base = project.run()
    edit_cases(project, change_expected)
    cand = project.run()
    decisions = "  - {name: ni, criterion: answer_correct, test: non-inferiority, margin: 50.0}\nmin_pairs: 1\n"
    exclude = policy_file(tmp_path, decisions, "missing: exclude\n", name="exclude.yaml")
    fail = policy_file(tmp_path, decisions, "missing: exclude\nchanged_cases: fail\n", name="fail.yaml")
    store = Store(project.store)
    _id, doc = run_comparison(store, cand, base, exclude)
    assert doc["policy"]["changed_cases"] == "exclude"  # the default
    assert doc["decisions"][0]["reason"] != "cases_changed"
    code, out, err = finished(project.cli("compare", cand, base, "--policy", str(fail)))
    assert code == 3, err
    assert "Gate: BLOCK (exit 3) · cases_changed" in out.splitlines()
    assert "  ni  answer_correct  non-inferiority, margin 50.0 points  INSUFFICIENT_EVIDENCE  cases_changed" in out
    code, out, _ = finished(project.cli("compare", cand, base, "--policy", str(fail), "--json"))
    doc = json.loads(out)
    assert code == 3 and doc["gate"] == "BLOCK" and doc["gate_reason"] == "cases_changed"


def test_cases_in_one_run_only_are_counted_and_named(project: Project) -> None:
    base = project.run()
    edit_cases(project, lambda cases: [c for c in cases if c["id"] not in ("ok", "gen")])
    cand = project.run()
    doc_id, doc = run_comparison(Store(project.store), cand, base)
    sets = doc["case_sets"]
    assert sets["only_in_baseline"] == ["gen", "ok"] and sets["counts"]["only_in_baseline"] == 2
    assert sets["counts"]["only_in_candidate"] == 0
    assert "Cases not paired: 2 cases only in the baseline: gen, ok." in markdown(doc, doc_id)


def test_a_run_without_digests_compares_with_a_warning(project: Project) -> None:
    base = project.run()
    cases_path = project.store / "runs" / base / "cases.jsonl"
    old = [{k: v for k, v in json.loads(line).items() if k != "digest"} for line in cases_path.read_text().splitlines()]
    cases_path.write_text("".join(json.dumps(c) + "\n" for c in old), encoding="utf-8")
    edit_cases(project, change_expected)
    cand = project.run()
    doc_id, doc = run_comparison(Store(project.store), cand, base)
    assert doc["case_sets"]["changes_detectable"] is False and doc["case_sets"]["changed"] == {}
    assert (
        "Warning: a run was recorded without case digests (before Oloproof kept them): cases whose input or "
        "expected data changed between the runs cannot be detected" in render(doc, doc_id)
    )


# ------------------------------------------------------------------ judges on both sides


def test_a_judge_criterion_needs_the_same_validated_judge_in_both_runs(tmp_path: Path) -> None:
    store = Store(tmp_path / ".oloproof")
    judge = _FakeJudge("grounded")
    other = {**judge.settings(), "model": "m-unvalidated"}
    evs = [{"criterion": "grounded", "type": "groundedness_judge", "kind": "rate", "settings": judge.settings()}]
    base_evs = [{"criterion": "grounded", "type": "groundedness_judge", "kind": "rate", "settings": other}]
    cand, base = binary_runs(300, set(range(100)), set(range(290)))
    cand = {k: {"grounded": v["ok"]} for k, v in cand.items()}
    base = {k: {"grounded": v["ok"]} for k, v in base.items()}
    validation = {"schema": "oloproof.judge_validation/1", "judge": {"identity": judge_identity(judge)}}
    store.save_doc("judge_validation", {**validation, "passed": True})  # the candidate's judge is validated
    c, b = make_run(store, cand, evaluators=evs), make_run(store, base, evaluators=base_evs)
    same = make_run(store, base, evaluators=evs)
    assert judge_gate("grounded", store.load_run(c), store=store) is None  # candidate alone: validated
    assert judge_gate("grounded", store.load_run(c), store=store, baseline_record=store.load_run(b)) == (
        "judges_differ"
    )
    p = policy_file(tmp_path, "  - {name: g, criterion: grounded, test: superiority}\n")
    _id, doc = run_comparison(store, c, b, p)
    assert [(d["outcome"], d["reason"]) for d in doc["decisions"]] == [("INSUFFICIENT_EVIDENCE", "judges_differ")]
    assert doc["gate"] == "BLOCK"
    _id, doc = run_comparison(store, c, same, p)  # one validated judge on both sides
    assert [(d["outcome"], d["reason"]) for d in doc["decisions"]] == [("PASS", "lower_bound_above_margin")]
    # a baseline whose criterion came from a non-judge evaluator differs too
    plain = [{"criterion": "grounded", "type": "contains", "kind": "rate", "settings": {}}]
    _id, doc = run_comparison(store, c, make_run(store, base, evaluators=plain), p)
    assert doc["decisions"][0]["reason"] == "judges_differ"


def test_the_session_gate_blocks_on_changed_cases(project: Project, tmp_path: Path) -> None:
    base = project.run()
    edit_cases(project, change_expected)
    decisions = "  - {name: ni, criterion: answer_correct, test: non-inferiority, margin: 50.0}\nmin_pairs: 1\n"
    fail = policy_file(tmp_path, decisions, "missing: exclude\nchanged_cases: fail\n", name="fail.yaml")
    args = ["-p", "no:cacheprovider", "--oloproof-baseline", base, "--oloproof-policy", str(fail)]
    code, out, err = finished(project.cli("run", *args))
    assert code == 3, (out, err)
    assert "Warning: 1 case changed between the runs: ok (expected); excluded from every difference" in out
    assert "Gate: BLOCK (exit 3) · cases_changed" in out
