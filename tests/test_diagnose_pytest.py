"""Diagnosis as a pytest session (marker-selected reruns) and the example's walk-through figures."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.diagnose_project import Project

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "support_rag"


@pytest.fixture
def project(pytester: pytest.Pytester) -> Project:
    return Project(pytester.path)


def diagnose_args(run_id: str, *extra: str) -> list[str]:
    return ["-p", "no:cacheprovider", "--oloproof", "--oloproof-diagnose", run_id, *extra]


def stored_diagnoses(project: Project) -> list[dict]:
    return [json.loads(p.read_text()) for p in (project.store / "diagnoses").glob("*.json")]


def test_items_are_the_failed_cases_with_diagnosis_markers(pytester: pytest.Pytester, project: Project) -> None:
    run_id = project.run()
    result = pytester.runpytest(
        *diagnose_args(run_id), "--collect-only", "-q", "-m", "oloproof_failed and oloproof_diagnose"
    )
    names = sorted(line for line in result.outlines if line.startswith("oloproof.yaml::"))
    expected = ["budget", "distract", "flaky", "gen", "miss", "nogold", "ranked", "unlabeled"]
    assert names == [f"oloproof.yaml::diag-rag[{cid}]" for cid in expected]
    result = pytester.runpytest(*diagnose_args(run_id), "--collect-only", "-q", "-m", "oloproof and security")
    assert sorted(line for line in result.outlines if line.startswith("oloproof.yaml::")) == [
        "oloproof.yaml::diag-rag[flaky]",
        "oloproof.yaml::diag-rag[gen]",
    ]


def test_marker_selects_the_cases_diagnosed(pytester: pytest.Pytester, project: Project) -> None:
    run_id = project.run()
    result = pytester.runpytest(
        *diagnose_args(run_id, "--oloproof-criterion", "answer_correct", "-m", "billing", "--junitxml=out.xml")
    )
    result.assert_outcomes(passed=2, skipped=1, deselected=5)
    result.stdout.fnmatch_lines(
        [
            "Selected: 2 failed cases with gold context (observed; no population claim)",
            "Undiagnosable: 1 failed case(s) without gold context: nogold",
            "Control: 0 of 2 passed when re-executed without the intervention",
            "Recovered under gold context: 2 of 2",
            "RETRIEVAL_MISS: 1 of 2, recovered; no relevant evidence was retrieved",
            "RANKED_OUT: 1 of 2, recovered; relevant evidence was retrieved but ranked below the top-k cut",
            "Implicated: retrieval, in 1 of the 2 recovered failures; ranking cut, in 1 of the 2 recovered failures.",
            "Diagnosis sha256:*",
            "Child runs: gold context run_*, control run_*",
        ]
    )
    [doc] = stored_diagnoses(project)
    assert doc["selected"] == ["miss", "ranked"] and doc["undiagnosable"] == ["nogold"]
    header = json.loads((project.store / "runs" / doc["child_runs"]["control"] / "run.json").read_text())
    assert header["purpose"] == "diagnosis-control" and header["counts"]["cases"] == 2
    junit = (pytester.path / "out.xml").read_text()
    assert 'name="oloproof.diagnosis.label" value="RANKED_OUT"' in junit


def test_keyword_narrows_and_replay_carries_labels(pytester: pytest.Pytester, project: Project) -> None:
    run_id = project.run()
    result = pytester.runpytest(*diagnose_args(run_id, "-k", "distract"))
    result.assert_outcomes(passed=1, deselected=7)
    result.stdout.fnmatch_lines(["CONTEXT_DISTRACTION: 1 of 1, recovered; *", "Implicated: other passages in *"])
    retrieves = project.calls("retrieve")
    result = pytester.runpytest(
        *diagnose_args(run_id, "--oloproof-intervention", "top-k", "--oloproof-top-k", "3", "-k", "ranked or gen")
    )
    result.assert_outcomes(passed=2, deselected=6)
    result.stdout.fnmatch_lines(
        [
            "Recovered under top-k 3: 1 of 2",
            "Confirmed under top-k 3: 1 of 1 RANKED_OUT cases also recovered",
            "Labels from gold context (diagnosis sha256:*): 1 of 2 recovered",
        ]
    )
    # the gold-context part ran inside the items (no diagnosis covered these cases): only its control retrieves
    assert project.calls("retrieve") - retrieves == 2


def test_token_budget_replay_as_a_pytest_session(pytester: pytest.Pytester, project: Project) -> None:
    run_id = project.run()
    retrieves = project.calls("retrieve")
    args = ("--oloproof-intervention", "token-budget", "--oloproof-token-budget", "20", "-k", "budget or gen")
    result = pytester.runpytest(*diagnose_args(run_id, *args))
    result.assert_outcomes(passed=2, deselected=6)
    result.stdout.fnmatch_lines(
        [
            "Recovered under token budget 20: 1 of 2",
            "Confirmed under token budget 20: 1 of 1 CONTEXT_ASSEMBLY_LOSS cases also recovered",
            "Labels from gold context (diagnosis sha256:*): 1 of 2 recovered",
        ]
    )
    assert project.calls("retrieve") - retrieves == 2  # the gold-context control's; the replay calls none
    result = pytester.runpytest(*diagnose_args(run_id, "--oloproof-intervention", "token-budget"))
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*--intervention token-budget needs --token-budget N*"])


def test_bad_run_id_stops_the_session_and_writes_nothing(pytester: pytest.Pytester, project: Project) -> None:
    project.run()
    listing = project.listing()
    result = pytester.runpytest(*diagnose_args("run_missing"))
    assert result.ret != 0
    result.stdout.fnmatch_lines(["Oloproof cannot start:", "cannot diagnose 'run_missing': no run matches *"])
    assert project.listing() == listing


def test_example_walk_through_figures(tmp_path: Path) -> None:
    project = tmp_path / "support_rag"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns(".oloproof", ".pytest_cache", "__pycache__"))
    script = textwrap.dedent(
        """
        import io, contextlib, json
        from pathlib import Path
        from pytest_oloproof.cli import main
        from pytest_oloproof.store.files import Store

        def call(*args):
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                code = main(list(args))
            return {"code": code, "out": buf.getvalue().splitlines()}

        out = {"run": call("run", "-q", "-p", "no:cacheprovider")}
        run_id = Store(Path(".oloproof").resolve()).run_ids()[0]
        out["diagnose"] = call("diagnose", run_id, "--intervention", "gold-context", "--criterion", "answer_correct")
        doc_id = out["diagnose"]["out"][-3].split()[1]
        out["inspect"] = call("inspect", doc_id[:20])
        out["top_k"] = call("diagnose", run_id, "--intervention", "top-k", "--top-k", "4")
        print("@@" + json.dumps(out))
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=project, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.split("@@", 1)[1])
    assert out["run"]["code"] == 1  # four failed cases
    assert out["diagnose"]["code"] == 0
    assert out["diagnose"]["out"][:9] == [
        "Selected: 4 failed cases with gold context (observed; no population claim)",
        "Control: 0 of 4 passed when re-executed without the intervention",
        "Recovered under gold context: 3 of 4",
        "RETRIEVAL_MISS: 1 of 4, recovered; no relevant evidence was retrieved",
        "CONTEXT_ASSEMBLY_LOSS: 2 of 4, recovered; relevant evidence within top-k was left out of the context",
        "GENERATION_FAILURE: 1 of 4, still failed with the gold context",
        "Implicated: context budget, in 2 of the 3 recovered failures.",
        "Candidate experiment: a larger token budget. This is a hypothesis to test, not an established cause.",
        "Candidate experiment: smaller chunks. This is a hypothesis to test, not an established cause.",
    ]
    assert out["inspect"]["out"] == [
        "money_back: RETRIEVAL_MISS, relevant_not_retrieved, strength intervention_recovery, "
        "best relevant position none",
        "refund_review: CONTEXT_ASSEMBLY_LOSS, relevant_dropped_from_context, strength intervention_recovery, "
        "best relevant position 2",
        "seat_count: GENERATION_FAILURE, fails_with_gold_context, strength intervention_non_recovery, "
        "best relevant position 1",
        "security_review: CONTEXT_ASSEMBLY_LOSS, relevant_dropped_from_context, strength intervention_recovery, "
        "best relevant position 2",
    ]
    top_k = out["top_k"]["out"]
    gold_id = out["diagnose"]["out"][-3].split()[1]
    assert top_k[:8] == [
        "Selected: 4 failed cases with gold context (observed; no population claim)",
        "Control: 0 of 4 passed when re-executed without the intervention",
        "Recovered under top-k 4: 0 of 4",
        "Confirmed under top-k 4: 0 of 0 RANKED_OUT cases also recovered",
        f"Labels from gold context (diagnosis {gold_id}): 3 of 4 recovered",
        "RETRIEVAL_MISS: 1 of 4, recovered; no relevant evidence was retrieved",
        "CONTEXT_ASSEMBLY_LOSS: 2 of 4, recovered; relevant evidence within top-k was left out of the context",
        "GENERATION_FAILURE: 1 of 4, still failed with the gold context",
    ]
    gold_children = out["diagnose"]["out"][-2].removeprefix("Child runs: ")
    assert top_k[-2].startswith(f"Child runs: {gold_children}, top-k 4 run_")
