"""Stored records are read strictly (issue 12 §2): a damaged record is an error naming file, line and field.

Never a case silently skipped (inspect showing 12 of 13, diagnose selecting 3 failed
cases instead of 4), never an AttributeError; `oloproof runs` still lists the readable
runs; a well-formed cache entry of the wrong shape is a miss.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_oloproof import cli
from pytest_oloproof.identity import execution_key, retrieve_key
from pytest_oloproof.store import RecordError, Store, load_run_file
from tests.diagnose_project import Project
from tests.test_scale import SYSCONF, ScriptedSystem, make_case, make_engine


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project(tmp_path)


def main(project: Project, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main([*args, "--config", str(project.root / "oloproof.yaml")])
    out, err = capsys.readouterr()
    return code, out, err


def cases_file(project: Project, run_id: str) -> Path:
    return project.store / "runs" / run_id / "cases.jsonl"


def rewrite_line(path: Path, number: int, text: str) -> None:
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[number - 1] = text + "\n"
    path.write_text("".join(lines), encoding="utf-8")


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ('{"id": "miss", "criteria": {"answer_corr', "not a JSON object"),  # garbled (torn, not at the end)
        ("[]", "expected a JSON object, got list"),
        ('{"id": "miss", "criteria": []}', "criteria: should be a valid dictionary"),
        ('{"id": "miss", "criteria": {"answer_correct": {"status": "maybe"}}}', "criteria.answer_correct.status"),
        ('{"id": 7, "criteria": {}}', "id: should be a valid string"),
        ('{"criteria": {}}', "id: missing required key"),
        (
            '{"id": "miss", "criteria": {}, "retrieval": [{"position": "1", "doc_id": "d1"}]}',
            "retrieval[0].position: should be a valid integer",
        ),
    ],
    ids=["garbled", "list", "criteria-list", "bad-status", "id-number", "no-id", "position-string"],
)
def test_a_damaged_case_line_fails_inspect_diagnose_and_compare_naming_file_and_line(
    project: Project, capsys: pytest.CaptureFixture[str], line: str, problem: str
) -> None:
    run_id = project.run()
    other = project.run()
    path = cases_file(project, run_id)
    assert len(path.read_text().splitlines()) == 9
    rewrite_line(path, 1, line)  # the "miss" case, one of the failed cases diagnosis selects
    where = f"{path}:1: "
    for args in (
        ("inspect", run_id),
        ("diagnose", run_id, "--intervention", "gold-context"),
        ("compare", other, run_id),
        ("compare", run_id, other),
    ):
        code, out, err = main(project, capsys, *args)
        assert code == 2, (args, out, err)
        assert where in err and problem in err, (args, err)
        assert "Selected:" not in out  # never a diagnosis of a smaller set
    assert not (project.store / "diagnoses").exists()
    assert not (project.store / "comparisons").exists()


def test_a_torn_last_line_is_forgiven_only_in_a_run_that_did_not_complete(project: Project) -> None:
    store = Store(project.store)
    incomplete, complete = project.run(status="incomplete"), project.run()
    for run_id in (incomplete, complete):
        with cases_file(project, run_id).open("a", encoding="utf-8") as f:
            f.write('{"id": "extra", "crit')  # a process killed mid-write leaves no newline
    assert len(store.load_run(incomplete)["cases"]) == 9
    with pytest.raises(RecordError, match=r"cases\.jsonl:10: not a JSON object"):
        store.load_run(complete)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("[]", "expected a JSON object, got list"),
        ("null", "expected a JSON object, got null"),
        ("{not json", "not readable JSON"),
        (None, 'system: should be a valid dictionary (got "x")'),
        ("metrics-list", "metrics: should be a valid dictionary"),
        ("status-odd", "status: should be 'complete' or 'incomplete'"),
    ],
    ids=["list", "null", "garbled", "system-string", "metrics-list", "status"],
)
def test_a_wrong_shaped_run_json_is_an_error_and_runs_lists_the_others(
    project: Project, capsys: pytest.CaptureFixture[str], content: str | None, problem: str
) -> None:
    good, bad = project.run(), project.run()
    path = project.store / "runs" / bad / "run.json"
    header = json.loads(path.read_text(encoding="utf-8"))
    where = f"{path}: "
    changed = {None: {"system": "x"}, "metrics-list": {"metrics": [header["metrics"]]}, "status-odd": {"status": "?"}}
    if content in changed:
        key = next(iter(changed[content]))
        content = json.dumps({**header, **changed[content]}, indent=2)  # as run.json is written
        line = next(n for n, text in enumerate(content.splitlines(), 1) if text.startswith(f'  "{key}":'))
        where = f"{path}:{line}: "  # the line of the key that is wrong
    path.write_text(content, encoding="utf-8")

    code, out, err = main(project, capsys, "inspect", bad)
    assert code == 2, out + err
    assert where in err and problem in err, err

    code, out, err = main(project, capsys, "runs")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith(f"{bad} unreadable: run.json: ") and problem in lines[0], out
    assert lines[1].startswith(good) and "complete" in lines[1]

    code, out, err = main(project, capsys, "runs", "--json")
    assert code == 0, err
    rows = json.loads(out)["runs"]
    assert rows[0]["run_id"] == bad and rows[0]["status"] == "unreadable" and problem in rows[0]["error"]
    assert rows[1] == {**rows[1], "run_id": good, "status": "complete"}

    code, out, err = main(project, capsys, "compare", good, bad)
    assert code == 2 and problem in err, err


def test_runs_in_a_real_process_keeps_listing_past_an_unreadable_run(project: Project) -> None:
    good, bad = project.run(), project.run()
    (project.store / "runs" / bad / "run.json").write_text("[]", encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest_oloproof.cli", "runs"],
        cwd=project.root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(rf"^{bad} unreadable: run\.json: expected a JSON object, got list$", proc.stdout, re.M)
    assert re.search(rf"^{good}\s+complete", proc.stdout, re.M)


def test_a_run_report_used_as_a_baseline_is_validated_whole(project: Project, tmp_path: Path) -> None:
    run_id = project.run()
    store = Store(project.store)
    record: dict[str, Any] = store.load_run(run_id)
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps(record), encoding="utf-8")
    assert len(load_run_file(path)["cases"]) == 9
    record["cases"][3]["criteria"] = {"answer_correct": {"status": "observed", "value": "1.0"}}
    path.write_text(json.dumps(record), encoding="utf-8")
    with pytest.raises(RecordError, match=r"baseline\.json: cases\[3\]\.criteria\.answer_correct\.value"):
        load_run_file(path)


# ------------------------------------------------------------------ cache entries of the wrong shape


@pytest.mark.parametrize(
    "entry",
    [
        {"query": "q"},
        {"query": "q", "retrieval": None, "context": None, "dropped": [], "context_truncated": False, "output": None},
        {
            "query": "q",
            "retrieval": [{"position": 1}],
            "context": [1],
            "dropped": [],
            "context_truncated": False,
            "output": {},
        },
        {"query": "q", "retrieval": [], "context": [], "dropped": [], "context_truncated": "no", "output": {"a": 1}},
    ],
    ids=["only-query", "no-retrieval", "bad-candidate", "string-bool"],
)
def test_an_execution_entry_of_the_wrong_shape_is_a_miss(tmp_path: Path, entry: dict[str, Any]) -> None:
    engine, caches, _ = make_engine(ScriptedSystem(), tmp_path)
    case = make_case(1)
    assert caches.put("execution", execution_key(SYSCONF, case.input), entry)
    rec = engine.execute(case)
    assert rec["cache"]["execution"] == "miss"
    assert rec["error"] is None and rec["output"] == {"answer": "answer to question 1"}
    assert rec["retrieval"][0]["doc_id"] == "d1"
    caches.close()


def test_stage_entries_of_the_wrong_shape_are_misses(tmp_path: Path) -> None:
    engine, caches, _ = make_engine(ScriptedSystem(), tmp_path)
    case = make_case(2)
    # the shape of a retrieve entry, but its candidates are not candidates
    caches.put("retrieve", retrieve_key(SYSCONF, case.input), {"query": "q", "candidates": [1, {"position": "1"}]})
    rec = engine.execute(case)
    assert rec["error"] is None and rec["cache"]["retrieve"] == "miss"
    assert rec["output"] == {"answer": "answer to question 2"}
    caches.close()


LOOSE_SYSTEM = """
from pytest_oloproof import Passage, Retrieval, rag_system


@rag_system(name="loose", version=2, depth=2, index_version=7)  # the decorator does not check types
class System:
    def retrieve(self, input, depth):
        return Retrieval(query=input["q"], depth=depth, candidates=(Passage("d1", 1, "text", chunk_id=3),))

    def generate(self, input, context):
        return {"answer": "text"}
"""


def test_every_record_a_run_writes_reads_back_and_is_served_from_the_cache(pytester: pytest.Pytester) -> None:
    """The strict models check what the writers guarantee, nothing more: a run's own records always read back."""
    pytester.makepyfile(loose_app=LOOSE_SYSTEM)
    pytester.makefile(".jsonl", cases='{"id": "a", "input": {"q": "x"}, "expected": {"answer": "text"}}\n')
    pytester.makefile(
        ".yaml",
        oloproof="system:\n  rag:\n    object: loose_app:System\ncases: cases.jsonl\nevaluators:\n"
        "  - {type: contains, criterion: answer_correct, field: answer, expected_field: answer}\nstore: .oloproof\n",
    )
    for _ in range(2):
        result = pytester.runpytest_subprocess("--oloproof", "-p", "no:cacheprovider")
        result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*Cache: execution 1 hit/0 miss*"])
    store = Store(pytester.path / ".oloproof")
    for run_id in store.run_ids():
        record = store.load_run(run_id)
        assert record["system"]["version"] == 2 and record["cases"][0]["retrieval"][0]["chunk_id"] == 3


@pytest.mark.parametrize(
    "entry",
    [
        {"retrieval": [], "context": [], "dropped": [], "context_truncated": False, "output": {}},
        {
            "retrieval": [{"position": 1, "doc_id": "d", "chunk_id": 2, "score": 1, "tokens": 3, "metadata": {}}],
            "context": [1],
            "dropped": [{"position": 1, "reason": "token_budget"}],
            "context_truncated": True,
            "output": {"answer": "x"},
            "verdicts": {},
        },
        {"retrieval": None, "context": None, "dropped": [], "context_truncated": False, "output": "plain"},
        {"retrieval": [{"position": True, "doc_id": "d"}], "context": [], "dropped": [], "context_truncated": False},
        {"retrieval": [], "context": [1.0], "dropped": [], "context_truncated": False, "output": {}},
        {"retrieval": [], "context": [], "dropped": [{"position": 1}], "context_truncated": False, "output": {}},
        {
            "retrieval": [{"position": 1, "doc_id": "d", "score": "high"}],
            "context": [],
            "dropped": [],
            "context_truncated": False,
            "output": {},
        },
        [],
    ],
)
def test_the_fast_execution_entry_check_agrees_with_its_model(entry: Any) -> None:
    from pydantic import ValidationError

    from pytest_oloproof.records import StoredExecution, is_execution_entry

    try:
        StoredExecution.model_validate(entry)
        valid = True
    except ValidationError:
        valid = False
    assert is_execution_entry(entry, rag=False) is valid
