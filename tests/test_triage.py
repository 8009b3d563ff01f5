"""Triage in the terminal: inspect --failures / --case, runs with headline metrics and kinds, the sample-size
note beside a PASS, and `latest` wherever a run id goes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from staged_helpers import case, rag_project, run_records

from pytest_oloproof.compare.comparison import sample_size_notes

EVALUATORS = (
    "evaluators:\n"
    "  - {type: contains, criterion: answer_correct, field: answer, expected_field: answer}\n"
    "  - {type: hit_rate, k: 2}\n"
    "  - {type: citation_validity}\n"
)


def oloproof(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_oloproof.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def labelled(cid: str, relevant: str, expected_extra: bool = False, **extra: object) -> dict[str, object]:
    c = case(cid, **extra)  # type: ignore[arg-type]
    c["expected"]["relevant"] = [{"doc_id": relevant}]
    if expected_extra:  # gold context, so diagnose can re-run it
        c["expected"]["gold_context"] = [{"doc_id": relevant, "text": "gamma delta epsilon zeta eta"}]
    return c


@pytest.fixture
def project(pytester: pytest.Pytester) -> Path:
    """Three passing cases, one failing on its answer (its relevant d3 below the top-k cut), one system error."""
    rag_project(
        pytester,
        [
            labelled("good1", "d1"),
            labelled("good2", "d2"),
            labelled("good3", "d1"),
            labelled("wrong", "d3", answer="epsilon", expected_extra=True),
            labelled("broken", "d1", input={"docs": ["nope"]}),  # KeyError in retrieve
        ],
        evaluators=EVALUATORS,
        settings="depth=4, top_k=2, token_budget=5",
    )
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider")
    assert result.ret == 1
    # the summary names the command that shows the errored case, and counts in the singular
    result.stdout.fnmatch_lines(
        ["System errors: 1 case missing for every criterion (see oloproof inspect run_* --failures)"]
    )
    return pytester.path


def test_one_case_is_one_case(pytester: pytest.Pytester) -> None:
    rag_project(pytester, [case("only")])
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["Run run_* (complete, 1 case) stored in *"])


def test_inspect_failures_one_line_per_failed_or_errored_case(project: Path) -> None:
    proc = oloproof(project, "inspect", "latest", "--failures")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    run_id = run_records(project / ".oloproof")[-1]["run_id"]
    assert lines[0] == f"Run {run_id} · 5 cases · 2 failed"
    assert lines[1].split() == ["wrong", "answer_correct"]
    assert lines[2].startswith("  broken  system error in retrieve: ") and "nope" in lines[2]
    assert lines[3] == f"One case whole: oloproof inspect {run_id} --case wrong"
    doc = json.loads(oloproof(project, "inspect", "latest", "--failures", "--json").stdout)
    assert [f["id"] for f in doc["failed"]] == ["wrong", "broken"]


def test_inspect_case_shows_the_ladder_cut_context_output_and_verdicts(project: Path) -> None:
    proc = oloproof(project, "inspect", "latest", "--case", "wrong")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    lines = out.splitlines()
    assert lines[0].endswith("· FAILED: answer_correct")
    assert 'Input: {"q": "wrong"}' in lines
    assert "Retrieval: 4 of depth 4, top-k 2 (* relevant)" in lines
    cut = lines.index("  ---- top-k cut (2): below, not given to generate ----")
    assert lines[cut - 2].split()[:4] == ["1", "d1", "score", "10"] and "context" in lines[cut - 2]
    assert "dropped (token_budget)" in lines[cut - 1]  # d2: within top-k, over the 5-token budget
    assert lines[cut + 1].split()[:3] == ["*", "3", "d3"] and "below" in lines[cut + 1]
    assert "Context: 1 passage (truncated by the token budget)" in lines
    assert "  [1] d1: alpha beta gamma delta" in lines
    assert 'Output: {"answer": "alpha beta gamma delta", "citations": ["d1"], "tag": null}' in lines
    verdicts = lines[lines.index("Verdicts:") + 1 :]
    assert verdicts[0].split()[:4] == ["answer_correct", "FAIL", "0", "asserts"]
    assert "expected contains 'epsilon'" in verdicts[0]
    assert verdicts[1].split()[:4] == ["hit_rate_at_2", "0", "measured", "expected"]
    missing = oloproof(project, "inspect", "latest", "--case", "wron")
    assert missing.returncode == 2 and "has no case 'wron'; did you mean wrong?" in missing.stderr


def test_runs_show_the_headline_metric_and_mark_child_and_partial_runs(project: Path) -> None:
    store = project / ".oloproof"
    first = run_records(store)[-1]["run_id"]
    diagnose = oloproof(project, "diagnose", "latest")
    assert diagnose.returncode == 0, diagnose.stderr
    assert "Cases by label:" in diagnose.stdout
    # a shard's run is recorded `partial` with its shard, and marked
    sharded = oloproof(project, "run", "--oloproof-shard", "1/2", "-p", "no:cacheprovider")
    assert sharded.returncode in (0, 1), sharded.stdout + sharded.stderr
    shard_run = run_records(store)[-1]
    assert shard_run["status"] == "partial" and shard_run["shard"] == {"index": 1, "count": 2}
    lines = oloproof(project, "runs").stdout.splitlines()
    mine = next(x for x in lines if x.startswith(first))
    assert "5 cases  answer_correct 75.0%" in mine and "part of the suite" not in mine
    part = next(x for x in lines if x.startswith(shard_run["run_id"]))
    assert "partial" in part and "[shard 1/2: part of the suite]" in part
    children = [x for x in lines if not x.startswith((first, shard_run["run_id"]))]
    assert len(children) == 2 and all("[child run (diagnosis-" in x for x in children)
    assert all("1 case " in x for x in children)  # the one diagnosable failure: one case, not "1 cases"
    doc = json.loads(oloproof(project, "runs", "--json").stdout)
    row = next(r for r in doc["runs"] if r["run_id"] == first)
    assert row["headline"]["criterion"] == "answer_correct" and row["partial"] is None
    assert next(r for r in doc["runs"] if r["run_id"] == shard_run["run_id"])["partial"] == "shard 1/2"


def test_latest_goes_wherever_a_run_id_goes(project: Path, pytester: pytest.Pytester) -> None:
    pytester.makefile(
        ".yaml", release="decisions:\n  - {name: floor, criterion: answer_correct, test: minimum, threshold: 0.1}\n"
    )
    pytester.makefile(
        ".yaml",
        compare="decisions:\n  - {name: ni, criterion: answer_correct, test: non-inferiority, margin: 50}\n"
        "min_pairs: 1\n",
    )
    second = pytester.runpytest("--oloproof", "-p", "no:cacheprovider", "--oloproof-baseline", "latest")
    assert "Comparison sha256:" in second.stdout.str()
    for args in (
        ("inspect", "latest"),
        ("inspect", "latest~1", "--failures"),
        ("inspect", "latest", "--case", "good1"),
        ("compare", "latest", "latest~1"),
        ("gate", "latest", "--policy", "release.yaml"),
        ("plan", "latest~1", "--policy", "release.yaml"),
        ("report", "latest", "--html", "r.html"),
        ("diagnose", "latest~1"),
    ):
        proc = oloproof(project, *args)
        assert proc.returncode in (0, 1, 3), (args, proc.stderr)
        assert "error" not in proc.stderr, (args, proc.stderr)


def test_the_sample_size_note_beside_a_pass_says_what_carried_it() -> None:
    row = {
        "criterion": "ok",
        "name": "ni",
        "test": "non-inferiority",
        "margin": 5.0,
        "paired": 20,
        "pairs_needed_without_change": 72,
        "kind": "rate",
    }
    assert sample_size_notes([{**row, "outcome": "INSUFFICIENT_EVIDENCE"}]) == [
        "ok: 20 paired cases cannot establish non-inferiority at a 5.0-point margin; about 72 would be needed "
        "with no changed verdicts"
    ]
    assert sample_size_notes([{**row, "outcome": "PASS"}]) == [
        "ok: ni PASSED on 20 paired cases because the candidate's changes favour it; with no changed verdicts, "
        "about 72 pairs would be needed to establish non-inferiority at a 5.0-point margin"
    ]
