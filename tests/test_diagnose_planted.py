"""Diagnosis of a 27-case project with planted failure reasons: every label, replays, the recorded query.

The reranker replays hand the reranker the query retrieve() returned (a string here),
and a replay with no value is shown as missing with its reason, never as "not recovered".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_oloproof import cli
from tests.diagnose_project import finished
from tests.planted_project import PLANTED, RERANKER_RECOVERS, TOP_K_3_RECOVERS, PlantedProject


@pytest.fixture
def project(tmp_path: Path) -> PlantedProject:
    return PlantedProject(tmp_path)


def main(project: PlantedProject, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main([*args, "--config", str(project.root / "oloproof.yaml")])
    out, err = capsys.readouterr()
    return code, out, err


def recovered(doc: dict[str, Any]) -> set[str]:
    return {e["id"] for e in doc["cases"] if not e["unstable"] and e["replay"].get("value") == 1.0}


def test_the_run_records_each_cases_query(project: PlantedProject) -> None:
    run_id = project.run()
    cases = {c["id"]: c for c in json.loads(json.dumps(list(project_cases(project, run_id))))}
    assert cases["ranked3x1"]["query"] == "what is the code for ranked3x1?"
    # served from the caches, the query is still recorded
    again = {c["id"]: c for c in project_cases(project, project.run())}
    assert again["ranked3x1"]["cache"]["execution"] == "hit"
    assert again["ranked3x1"]["query"] == "what is the code for ranked3x1?"


def project_cases(project: PlantedProject, run_id: str) -> list[dict[str, Any]]:
    path = project.store / "runs" / run_id / "cases.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_every_planted_label_is_found(project: PlantedProject, capsys: pytest.CaptureFixture[str]) -> None:
    run_id = project.run()
    code, out, err = main(project, capsys, "diagnose", run_id, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["undiagnosable"] == ["nogold1"]
    found = {e["id"]: e["label"] for e in doc["cases"]}
    planted = {cid: label for cid, label in PLANTED.items() if label not in ("PASSES", "UNDIAGNOSABLE")}
    assert len(found) == 22
    assert found == planted
    assert doc["counts"]["labels"]["RANKED_OUT"] == 4 and doc["counts"]["labels"]["CONTEXT_ASSEMBLY_LOSS"] == 4
    assert doc["missing"] == {}


def test_top_k_replay_recovers_exactly_the_cases_it_should(
    project: PlantedProject, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = project.run()
    code, out, err = main(project, capsys, "diagnose", run_id, "--intervention", "top-k", "--top-k", "3", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert recovered(doc) == TOP_K_3_RECOVERS
    c = doc["counts"]
    assert (c["diagnosed"], c["recovered"], c["confirmable"], c["confirmed"]) == (21, 2, 4, 2)
    assert c["replay_missing"] == 0


def test_reranker_gets_the_query_string_and_recovers_exactly_the_cases_it_should(
    project: PlantedProject, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = project.run()
    spec = f"{project.module}:keyword_rerank"
    code, out, err = main(project, capsys, "diagnose", run_id, "--intervention", "reranker", "--reranker", spec)
    assert code == 0, err
    lines = out.splitlines()
    assert f"Recovered under reranker {spec}: 8 of 21" in lines
    assert f"Confirmed under reranker {spec}: 8 of 8 RANKED_OUT or CONTEXT_ASSEMBLY_LOSS cases also recovered" in lines
    assert not any("failed on" in line for line in lines)
    doc = json.loads(main(project, capsys, "inspect", lines[-3].split()[1], "--json")[1])
    assert recovered(doc) == RERANKER_RECOVERS
    # the reranker's child run records the query it was given
    replay = {c["id"]: c for c in project_cases(project, doc["child_runs"]["replay"])}
    assert replay["budget1"]["query"] == "what is the code for budget1?"


def test_a_reranker_that_always_raises_is_missing_not_unrecovered(project: PlantedProject) -> None:
    run_id = project.run()
    spec = f"{project.module}:raising_rerank"
    code, out, err = finished(project.cli("diagnose", run_id, "--intervention", "reranker", "--reranker", spec))
    assert code == 1, (out, err)  # nothing was measured: never a success
    lines = out.splitlines()
    failed = next(line for line in lines if line.startswith(f"reranker {spec} failed on"))
    assert failed.startswith(
        f"reranker {spec} failed on 22 of 22 cases: "
        "AttributeError: 'str' object has no attribute 'no_such_method' (budget1, budget2, budget3, …)"
    )
    assert "missing, reason system_error" in failed
    recovered_line = next(line for line in lines if line.startswith("Recovered under"))
    assert recovered_line.startswith(
        f"Recovered under reranker {spec}: 0 of 0 (21 without a value"
    )  # flaky1 is UNSTABLE anyway
    assert "Nothing was measured: every selected case is missing a value (see above); no labels" in lines
    code, out, _ = finished(project.cli("diagnose", run_id, "--intervention", "reranker", "--reranker", spec, "--json"))
    doc = json.loads(out)
    assert code == 1
    assert doc["missing"]["replay"]["count"] == 22 and doc["missing"]["replay"]["reasons"] == {"system_error": 22}
    assert doc["counts"]["diagnosed"] == 0 and doc["counts"]["replay_missing"] == 22


# rerankers returning the recorded passages re-scored; each appended to the project's module
RESCORING = """

import dataclasses

import numpy


def rescored(candidates, score):
    return [dataclasses.replace(c, score=score) for c in candidates]


def nan_rerank(query, candidates):
    return rescored(candidates, float("nan"))


def word_rerank(query, candidates):
    return rescored(candidates, "high")


def numeric_text_rerank(query, candidates):
    return rescored(candidates, "0.5")


def boolean_rerank(query, candidates):
    return rescored(candidates, True)


def numpy_rerank(query, candidates):  # as a cross-encoder scores: numpy floats are numbers
    ranked = keyword_rerank(query, candidates)
    return [dataclasses.replace(c, score=numpy.float32(len(ranked) - i)) for i, c in enumerate(ranked)]
"""


@pytest.mark.parametrize(
    ("reranker", "problem"),
    [
        ("nan_rerank", "candidate at position 1 has score nan; a finite number is required"),
        ("word_rerank", "candidate at position 1 has a non-numeric score 'high'"),
        ("numeric_text_rerank", "candidate at position 1 has a non-numeric score '0.5'"),
        ("boolean_rerank", "candidate at position 1 has a non-numeric score True"),
    ],
)
def test_a_reranker_score_that_is_not_a_finite_number_is_a_contract_error_as_in_retrieval(
    project: PlantedProject, reranker: str, problem: str
) -> None:
    """Never silently float()ed (True as 1.0, '0.5' as 0.5) nor recorded as null (nan): each case is missing."""
    with open(project.root / f"{project.module}.py", "a", encoding="utf-8") as f:
        f.write(RESCORING)
    run_id = project.run()
    spec = f"{project.module}:{reranker}"
    code, out, err = finished(project.cli("diagnose", run_id, "--intervention", "reranker", "--reranker", spec))
    assert code == 1, (out, err)  # nothing was measured
    failed = next(line for line in out.splitlines() if line.startswith(f"reranker {spec} failed on"))
    assert failed.startswith(f"reranker {spec} failed on 22 of 22 cases: case 'budget1': the reranker: {problem}")
    assert "missing, reason contract_violation" in failed
    code, out, _ = finished(project.cli("diagnose", run_id, "--intervention", "reranker", "--reranker", spec, "--json"))
    doc = json.loads(out)
    assert doc["missing"]["replay"]["reasons"] == {"contract_violation": 22}


def test_a_reranker_scoring_with_numpy_floats_is_recorded_with_those_scores(project: PlantedProject) -> None:
    with open(project.root / f"{project.module}.py", "a", encoding="utf-8") as f:
        f.write(RESCORING)
    run_id = project.run()
    spec = f"{project.module}:numpy_rerank"
    code, out, err = finished(project.cli("diagnose", run_id, "--intervention", "reranker", "--reranker", spec))
    assert code == 0, (out, err)
    assert f"Recovered under reranker {spec}: 8 of 21" in out.splitlines()
    diagnosis = next(line.split()[1] for line in out.splitlines() if line.startswith("Diagnosis sha256:"))
    code, out, _ = finished(project.cli("inspect", diagnosis, "--json"))
    replay = {c["id"]: c for c in project_cases(project, json.loads(out)["child_runs"]["replay"])}
    assert [c["score"] for c in replay["budget1"]["retrieval"]] == [3.0, 2.0, 1.0]


def test_a_run_recorded_without_queries_refuses_a_reranker_replay(
    project: PlantedProject, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = project.run()
    path = project.store / "runs" / run_id / "cases.jsonl"
    old = [{k: v for k, v in c.items() if k != "query"} for c in project_cases(project, run_id)]
    path.write_text("".join(json.dumps(c) + "\n" for c in old), encoding="utf-8")
    listing = project.listing()
    spec = f"{project.module}:keyword_rerank"
    code, out, err = main(project, capsys, "diagnose", run_id, "--intervention", "reranker", "--reranker", spec)
    assert code == 2 and out == ""
    assert f"run {run_id} does not record the retrieval query (Retrieval.query) of 22 failed case(s)" in err
    assert "re-run the cases and diagnose the new run" in err
    assert project.listing() == listing
    # the gold-context diagnosis does not need the query
    assert main(project, capsys, "diagnose", run_id)[0] == 0


def test_a_missing_control_or_gold_context_is_shown_as_missing() -> None:
    from pytest_oloproof.diagnose.diagnosis import build_gold_doc, label_case
    from pytest_oloproof.report.text import diagnosis_lines as render

    def rec(cid: str) -> dict[str, Any]:
        return {"id": cid, "criteria": {"ok": {"status": "observed", "value": 0.0}}, "expected": {}, "retrieval": []}

    error = {"status": "missing", "reason": "system_error", "message": "generate() raised ValueError: boom"}
    fail = {"status": "observed", "value": 0.0}
    entries = [
        label_case(rec("a"), "ok", fail, error, top_k=2, unit="document"),
        label_case(rec("b"), "ok", error, {"status": "observed", "value": 1.0}, top_k=2, unit="document"),
    ]
    assert [(e["label"], e["reason"]) for e in entries] == [
        ("NOT_DIAGNOSED", "intervention_system_error"),
        ("NOT_DIAGNOSED", "control_system_error"),
    ]
    doc = build_gold_doc({}, entries, [], {"gold_context": "run_g", "control": "run_c"})
    assert doc["counts"]["recovered"] == 0 and doc["counts"]["diagnosed"] == 0
    lines = render(doc, "sha256:x")
    assert "Control: 0 of 2 passed when re-executed without the intervention (1 without a value)" in lines
    assert "control failed on 1 of 2 cases: ValueError: boom (b); missing, reason system_error; " in "\n".join(lines)
    assert "gold context failed on 1 of 2 cases: ValueError: boom (a); missing, reason system_error; " in "\n".join(
        lines
    )
    assert "Nothing was measured" not in "\n".join(lines)  # one case of each still had values elsewhere
    only = build_gold_doc({}, entries[:1], [], {"gold_context": "run_g", "control": "run_c"})
    assert "Nothing was measured: every selected case is missing a value (see above); no labels" in render(only, "x")


def test_the_pytest_form_fails_when_every_replay_is_missing(project: PlantedProject) -> None:
    run_id = project.run()
    spec = f"{project.module}:raising_rerank"
    args = ["-p", "no:cacheprovider", "--oloproof-diagnose", run_id, "--oloproof-intervention", "reranker"]
    code, out, err = finished(project.cli("run", *args, "--oloproof-reranker", spec))
    assert code == 1, (out, err)
    assert f"reranker {spec} failed on 22 of 22 cases: AttributeError:" in out
    good = f"{project.module}:keyword_rerank"
    code, out, err = finished(project.cli("run", *args, "--oloproof-reranker", good))
    assert code == 0, (out, err)
    assert f"Recovered under reranker {good}: 8 of 21" in out


def test_the_example_reranker_reads_the_question(tmp_path: Path) -> None:
    import shutil
    import subprocess
    import sys
    from subprocess import PIPE

    from tests.test_example import EXAMPLE

    root = tmp_path / "support_rag"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns(".oloproof", "__pycache__"))

    def cli(*args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "pytest_oloproof.cli", *args], cwd=root, stdout=PIPE, stderr=PIPE, text=True
        )

    code, out, err = finished(cli("run", "-q", "-p", "no:cacheprovider"))
    assert code == 1, (out, err)
    run_id = next(line.split()[1] for line in out.splitlines() if line.startswith("Run run_"))
    spec = "app:keyword_reranker"
    code, out, err = finished(cli("diagnose", run_id, "--intervention", "reranker", "--reranker", spec))
    assert code == 0, err
    lines = out.splitlines()
    assert f"Recovered under reranker {spec}: 1 of 4" in lines
    assert f"Confirmed under reranker {spec}: 1 of 2 RANKED_OUT or CONTEXT_ASSEMBLY_LOSS cases also recovered" in lines
    code, out, _ = finished(cli("inspect", lines[-3].split()[1]))
    assert "security_review: CONTEXT_ASSEMBLY_LOSS" in out and f"under reranker {spec}: recovered" in out
