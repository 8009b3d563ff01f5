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
from pytest_oloproof.records.identity import execution_key, retrieve_key
from pytest_oloproof.store.files import RecordError, Store, load_run_file
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
        ('{"id": "miss", "criteria": {}, "usage": {"totals": "x"}}', "usage.totals: should be a valid dictionary"),
        ('{"id": "miss", "criteria": {}, "cache": {"judgment": "hit"}}', "cache.judgment: should be a valid dict"),
        ('{"id": "miss", "criteria": {}, "metadata": {"cluster": [1]}}', "metadata.cluster"),
    ],
    ids=[
        "garbled",
        "list",
        "criteria-list",
        "bad-status",
        "id-number",
        "no-id",
        "position-string",
        "usage",
        "cache",
        "cluster",
    ],
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
        ("status-odd", "status: should be 'complete', 'incomplete' or 'partial'"),
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

    from pytest_oloproof.records.stored import StoredExecution, is_execution_entry

    try:
        StoredExecution.model_validate(entry)
        valid = True
    except ValidationError:
        valid = False
    assert is_execution_entry(entry, rag=False) is valid


# ------------------------------------------------------------------ half-written runs (issue 22 §6)

SLOW_APP = """
import os
import time
from pathlib import Path

from pytest_oloproof import Passage, Retrieval, rag_system

HERE = Path(__file__).parent


@rag_system(name="slow-rag", version="v1", depth=2, top_k=1, index_version="ix")
class SlowRag:
    def retrieve(self, input, depth):
        return Retrieval(query=input["q"], depth=depth, candidates=(Passage(doc_id="d1", text="the answer is A"),))

    def generate(self, input, context):
        if input["q"] == "hang" and os.environ.get("SLOW_RAG_HANG"):
            (HERE / "hanging").write_text("x", encoding="utf-8")
            time.sleep(600)  # killed here
        return {"answer": "A" if input["q"] != "wrong" else "B"}
"""

SLOW_CONFIG = """
system:
  rag:
    object: slow_app:SlowRag
cases: cases.jsonl
evaluators:
  - {type: contains, criterion: answer_correct, field: answer, expected_field: answer}
  - {type: hit_rate, k: 1}
concurrency: 1
store: .oloproof
"""

SLOW_CASES = ["c1", "c2", "wrong", "hang", "c5"]


def _slow_project(root: Path) -> Path:
    (root / "slow_app.py").write_text(SLOW_APP, encoding="utf-8")
    (root / "oloproof.yaml").write_text(SLOW_CONFIG, encoding="utf-8")
    lines = [
        json.dumps({"id": q, "input": {"q": q}, "expected": {"answer": "A", "relevant": [{"doc_id": "d1"}]}})
        for q in SLOW_CASES
    ]
    (root / "cases.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def _oloproof(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_oloproof.cli", *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
def test_a_run_killed_mid_way_reads_as_incomplete_with_the_cases_that_finished(tmp_path: Path) -> None:
    """kill -9 leaves run.json as the start header: every reader shows the 3 finished cases, marked incomplete."""
    import os
    import time

    root = _slow_project(tmp_path)
    done = _oloproof(root, "run", "-p", "no:cacheprovider", "-q")
    assert done.returncode == 1, done.stdout + done.stderr  # one case fails; a complete run of 5
    (complete,) = Store(root / ".oloproof").run_ids()

    env = {**os.environ, "SLOW_RAG_HANG": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest_oloproof.cli", "run", "-p", "no:cacheprovider", "--oloproof-cache", "off"],
        cwd=root,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not (root / "hanging").exists():  # the 4th case is being generated: 3 are recorded
            assert proc.poll() is None and time.monotonic() < deadline, "the run never reached the hanging case"
            time.sleep(0.05)
        live = next(r for r in Store(root / ".oloproof").run_ids() if r != complete)
        going = _oloproof(root, "inspect", live)  # while the run is still going
        assert going.returncode == 0 and f"Run {live} (incomplete, 3 cases)" in going.stdout, going.stderr
    finally:
        proc.kill()  # SIGKILL: no finally block, no atexit, nothing written after this
        proc.wait(timeout=30)
    assert proc.returncode == -9
    store = Store(root / ".oloproof")
    killed = next(r for r in store.run_ids() if r != complete)
    header = json.loads((store.run_dir(killed) / "run.json").read_text(encoding="utf-8"))
    assert header["status"] == "incomplete" and "counts" not in header and "finished_at" not in header

    runs = _oloproof(root, "runs")
    assert runs.returncode == 0, runs.stderr
    assert re.search(rf"^{killed}\s+incomplete .* 3 cases .*start header", runs.stdout, re.M), runs.stdout
    rows = json.loads(_oloproof(root, "runs", "--json").stdout)["runs"]
    assert rows[0]["run_id"] == killed and rows[0]["status"] == "incomplete" and rows[0]["cases"] == 3

    shown = _oloproof(root, "inspect", killed)
    assert shown.returncode == 0, shown.stderr
    assert f"Run {killed} (incomplete, 3 cases)" in shown.stdout
    assert "run.json holds only the header written when the run started" in shown.stdout
    assert re.search(r"answer_correct .* 2 / 3 observed", shown.stdout), shown.stdout  # c1, c2 pass; wrong fails
    assert [ln.split(":")[0].strip() for ln in shown.stdout.split("Cases:\n")[1].splitlines()] == SLOW_CASES[:3]

    record = json.loads(_oloproof(root, "inspect", killed, "--json").stdout)
    assert record["status"] == "incomplete" and record["counts"]["cases"] == 3 and len(record["cases"]) == 3
    assert record["metrics"]["answer_correct"]["observed"] == 3 and record["metrics"]["answer_correct"]["passed"] == 2

    page = tmp_path / "killed.html"
    written = _oloproof(root, "report", killed, "--html", str(page))
    assert written.returncode == 0, written.stderr
    html = page.read_text(encoding="utf-8")
    assert "incomplete" in html and "holds only the header" in html
    index = _oloproof(root, "report", "--html", str(tmp_path / "site"))
    assert index.returncode == 0 and "unreadable" not in index.stdout, index.stdout + index.stderr

    compared = _oloproof(root, "compare", killed, complete)
    assert compared.returncode == 0, compared.stderr
    assert f"the candidate run {killed} is incomplete" in compared.stdout
    assert "3 paired cases" in compared.stdout

    diagnosed = _oloproof(root, "diagnose", killed)
    assert diagnosed.returncode == 2 and f"run {killed} is incomplete" in diagnosed.stderr


HEADER_KEYS = ("schema", "run_id", "oloproof_version", "purpose", "started_at", "config_path", "config", "system")
HEADER_KEYS += ("evaluators", "slices", "min_slice_support", "confidence", "seed", "cache_mode")


def test_a_hand_truncated_run_reads_as_incomplete(project: Project, capsys: pytest.CaptureFixture[str]) -> None:
    """run.json cut back to its start header (as SIGHUP or a full disk leave it), 6 of 9 case lines kept."""
    run_id = project.run()
    run_dir = project.store / "runs" / run_id
    record = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    header = {k: record[k] for k in HEADER_KEYS if k in record}
    header["slices"] = list(record["config"].get("slices") or [])  # the start header lists slice names
    (run_dir / "run.json").write_text(json.dumps({**header, "status": "incomplete"}, indent=2), encoding="utf-8")
    path = cases_file(project, run_id)
    kept = path.read_text(encoding="utf-8").splitlines()[:6]
    path.write_text("\n".join(kept) + "\n" + kept[0][:20], encoding="utf-8")  # and a torn 7th line
    code, out, err = main(project, capsys, "inspect", run_id)
    assert code == 0, err
    assert f"Run {run_id} (incomplete, 6 cases)" in out and "computed from the 6 case(s)" in out
    code, out, err = main(project, capsys, "inspect", run_id, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["counts"]["cases"] == 6 and doc["cache"]["execution"]["miss"] == 6
    assert sum(doc["metrics"]["answer_correct"][k] for k in ("observed", "missing", "excluded")) == 6
    code, out, err = main(project, capsys, "runs")
    assert re.search(rf"^{run_id}\s+incomplete .* 6 cases", out, re.M), out
    code, out, err = main(project, capsys, "report", run_id, "--html", str(project.root / "r.html"))
    assert code == 0, err


# ------------------------------------------------------------------ edited or foreign records (issue 22 §10-14)


@pytest.mark.parametrize("edit", ["absent", "null", "no-cases"])
def test_a_complete_run_without_counts_is_refused_not_read_short(
    project: Project, capsys: pytest.CaptureFixture[str], edit: str
) -> None:
    """Without counts, 3 lost case lines could not be told from a smaller run: refused, naming file and field."""
    other, run_id = project.run(), project.run()
    path = project.store / "runs" / run_id / "run.json"
    record = json.loads(path.read_text(encoding="utf-8"))
    if edit == "absent":
        del record["counts"]
    else:
        record["counts"] = None if edit == "null" else {"errors": 0}
    path.write_text(json.dumps(record, indent=2), encoding="utf-8")
    lines = cases_file(project, run_id).read_text(encoding="utf-8").splitlines(keepends=True)
    cases_file(project, run_id).write_text("".join(lines[3:]), encoding="utf-8")
    field = "counts.cases: missing" if edit == "no-cases" else f"counts: {'null' if edit == 'null' else 'missing'}"
    for args in (
        ("inspect", run_id),
        ("inspect", run_id, "--json"),
        ("compare", other, run_id),
        ("diagnose", run_id),
        ("report", run_id, "--html", str(project.root / "r.html")),
    ):
        code, out, err = main(project, capsys, *args)
        assert code == 2, (args, out, err)
        assert f"{path}" in err and field in err, (args, err)
        assert "Selected:" not in out
    assert not (project.store / "diagnoses").exists() and not (project.root / "r.html").exists()


def test_a_case_id_recorded_twice_is_refused_naming_both_lines(
    project: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    """Same line count, one id twice: never collapsed into a regression that does not exist."""
    other, run_id = project.run(), project.run()
    path = cases_file(project, run_id)
    lines = path.read_text(encoding="utf-8").splitlines()
    second = json.loads(lines[5])
    second["id"] = json.loads(lines[1])["id"]
    rewrite_line(path, 6, json.dumps(second))
    for args in (("inspect", run_id), ("compare", other, run_id), ("compare", run_id, other), ("diagnose", run_id)):
        code, out, err = main(project, capsys, *args)
        assert code == 2, (args, out, err)
        assert f'{path}:6: case id "ranked" is recorded twice, on lines 2 and 6' in err, (args, err)
        assert "Comparison" not in out
    assert not (project.store / "comparisons").exists()


def test_a_baseline_file_with_a_case_id_twice_is_refused(
    project: Project, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    run_id = project.run()
    record = Store(project.store).load_run(run_id)
    record["cases"][4] = {**record["cases"][4], "id": record["cases"][1]["id"]}
    path = tmp_path / "baseline.json"
    head = json.dumps({k: v for k, v in record.items() if k != "cases"}, indent=2)[:-2]
    # as --oloproof-report writes it: the head, then one case per line
    path.write_text(head + ',\n  "cases": [\n    ' + ",\n    ".join(map(json.dumps, record["cases"])) + "\n  ]\n}\n")
    at = [n for n, line in enumerate(path.read_text().splitlines(), 1) if line.startswith('    {"id": "ranked"')]
    code, out, err = main(project, capsys, "compare", run_id, str(path))
    assert code == 2, out + err
    expected = f'case id "ranked" is recorded twice, at cases[1] and cases[4] (lines {at[0]} and {at[1]})'
    assert str(path) in err and expected in err, err
    path.write_text(json.dumps(record), encoding="utf-8")  # one line: the indexes still name them
    code, out, err = main(project, capsys, "compare", run_id, str(path))
    assert code == 2 and "recorded twice, at cases[1] and cases[4] (lines 1 and 1)" in err, err
    del record["cases"][4]  # no duplicate, but one case fewer than the file counts
    path.write_text(json.dumps(record), encoding="utf-8")
    code, out, err = main(project, capsys, "compare", run_id, str(path))
    assert code == 2 and f"{path}: cases: holds 8 case records, but counts.cases is 9" in err, err


@pytest.mark.parametrize(
    ("criterion", "problem"),
    [
        ({"status": "observed"}, "criteria.answer_correct: an observed criterion has no value"),
        ({"status": "observed", "value": None}, "criteria.answer_correct: an observed criterion has no value"),
        ({"status": "observed", "value": 7.5}, "criteria.answer_correct: value should be a number in [0, 1] (got 7.5)"),
        ({"status": "observed", "value": -1}, "criteria.answer_correct: value should be a number in [0, 1] (got -1"),
        ({"status": "passed", "value": 1.0}, "criteria.answer_correct.status: should be 'observed', 'missing' or"),
    ],
    ids=["no-value", "null-value", "7.5", "negative", "unknown-status"],
)
def test_an_impossible_criterion_value_fails_the_record_check(
    project: Project, capsys: pytest.CaptureFixture[str], criterion: dict[str, Any], problem: str
) -> None:
    other, run_id = project.run(), project.run()
    path = cases_file(project, run_id)
    first = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
    first["criteria"]["answer_correct"] = criterion
    rewrite_line(path, 1, json.dumps(first))
    for args in (("inspect", run_id), ("inspect", run_id, "--json"), ("compare", other, run_id)):
        code, out, err = main(project, capsys, *args)
        assert code == 2, (args, out, err)
        assert f'{path}:1: case "miss": {problem}' in err, (args, err)
        assert "record the run again with `oloproof run`" in err  # the fix


def test_a_run_folder_whose_run_id_differs_is_refused_naming_both(
    project: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    """A copied run folder: `compare COPY ORIGINAL` must never print "of ORIGINAL against ORIGINAL"."""
    import shutil

    from pytest_oloproof.store.files import new_run_id

    original = project.run()
    copy = new_run_id()
    shutil.copytree(project.store / "runs" / original, project.store / "runs" / copy)
    path = project.store / "runs" / copy / "run.json"
    page = str(project.root / "r.html")
    for args in (("compare", copy, original), ("inspect", copy), ("report", copy, "--html", page)):
        code, out, err = main(project, capsys, *args)
        assert code == 2, (args, out, err)
        assert f"{path}:" in err and f"run_id: '{original}' is not the run its folder names ({copy})" in err, err
        assert f"of {original} against {original}" not in out
    code, out, err = main(project, capsys, "runs")
    assert code == 0 and re.search(rf"^{copy} unreadable: run\.json: run_id: '{original}'", out, re.M), out
    assert re.search(rf"^{original}\s+complete", out, re.M), out


POLICY = """
decisions:
  - {name: answers-not-worse, criterion: answer_correct, test: non-inferiority, margin: 5.0}
min_pairs: 2
"""


def test_stored_diagnoses_and_comparisons_are_validated_on_read(
    project: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    """What the writers store reads back; `{}`, a list or a wrong type is an error naming file and field (exit 2)."""
    from pytest_oloproof.records.stored import check_doc

    base, cand = project.run(), project.run()
    (project.root / "compare.yaml").write_text(POLICY, encoding="utf-8")
    for args in (
        ("diagnose", base),
        ("diagnose", base, "--intervention", "top-k", "--top-k", "3"),
        ("compare", cand, base, "--policy", str(project.root / "compare.yaml")),
        ("compare", base, cand),
    ):
        code, out, err = main(project, capsys, *args)
        assert code in (0, 3), (args, out, err)
    store = Store(project.store)
    docs = {kind: [store.load_doc(kind, d) for d in store.docs(kind)] for kind in ("diagnosis", "comparison")}
    assert len(docs["diagnosis"]) == 2 and len(docs["comparison"]) == 2
    assert {d["intervention"]["name"] for d in docs["diagnosis"]} == {"gold-context", "top-k"}
    assert all(check_doc(kind, d) is None for kind, ds in docs.items() for d in ds)

    gold = next(d for d in docs["diagnosis"] if d["intervention"]["name"] == "gold-context")
    replay = next(d for d in docs["diagnosis"] if d["intervention"]["name"] == "top-k")
    gated = next(d for d in docs["comparison"] if d["policy"] is not None)
    edits: list[tuple[str, Any, str]] = [
        ("diagnosis", {}, "schema: missing required key"),
        ("diagnosis", [], "expected a JSON object, got list"),
        ("diagnosis", {**gold, "counts": {**gold["counts"], "selected": "4"}}, "counts.selected: should be a valid"),
        ("diagnosis", {**gold, "cases": [{**gold["cases"][0], "control": {"status": "observed"}}]}, "cases[0].control"),
        ("diagnosis", {**replay, "child_runs": {"gold_context": "x"}}, "child_runs.control: missing required key"),
        ("diagnosis", {**gold, "intervention": "gold"}, "intervention: should be a valid dictionary"),
        ("comparison", {}, "schema: missing required key"),
        ("comparison", {**gated, "candidate": None}, "candidate: should be a valid dictionary"),
        ("comparison", {**gated, "decisions": [{"name": "x"}]}, "decisions[0].criterion: missing required key"),
        (
            "comparison",
            {**gated, "criteria": {"answer_correct": {**gated["criteria"]["answer_correct"], "printed": None}}},
            "criteria.answer_correct: 9 pairs but no printed interval",
        ),
        (
            "comparison",
            {**gated, "cost": {"paired": 2, **{k: {} for k in ("candidate", "baseline", "difference")}}},
            "cost.candidate.cost: missing required key",
        ),
    ]
    for n, (kind, doc, problem) in enumerate(edits):
        folder = project.store / ("diagnoses" if kind == "diagnosis" else "comparisons")
        digest = f"{n:064x}"
        path = folder / f"{digest}.json"
        path.write_text(json.dumps(doc), encoding="utf-8")
        for args in (
            ("inspect", f"sha256:{digest}"),
            ("inspect", f"sha256:{digest}", "--json"),
            ("report", f"sha256:{digest}", "--html", str(project.root / "doc.html")),
        ):
            code, out, err = main(project, capsys, *args)
            assert code == 2, (args, problem, out, err)
            assert f"{path}: " in err and problem in err, (args, err)
            if "--json" in args:
                assert problem in json.loads(out)["error"]["message"]
        path.unlink()
    assert not (project.root / "doc.html").exists()


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"seed": None}, None),  # null: the default seed, as for a header without one
        ({"budget": {"max_cost": 1.0, "max_judge_calls": 3}}, None),  # a header's budget holds only the limits
        ({"confidence": None}, "confidence: should be a valid number (got null)"),
        ({"evaluators": [{"criterion": "answer_correct", "type": "contains"}]}, "evaluators[0].kind: missing"),
        ({"slices": [{"slice": "metadata.topic"}]}, "slices[0]: should be a valid string"),
        ({"seed": "7"}, "seed: should be a valid integer"),
    ],
    ids=["null-seed", "budget-limits", "null-confidence", "no-kind", "slice-rows", "seed-string"],
)
def test_a_start_header_is_checked_for_what_its_summary_is_computed_from(
    project: Project, capsys: pytest.CaptureFixture[str], change: dict[str, Any], problem: str | None
) -> None:
    run_id = project.run()
    path = project.store / "runs" / run_id / "run.json"
    record = json.loads(path.read_text(encoding="utf-8"))
    header = {k: record[k] for k in HEADER_KEYS if k in record}
    header = {**header, "slices": [], "status": "incomplete", **change}
    path.write_text(json.dumps(header, indent=2), encoding="utf-8")
    code, out, err = main(project, capsys, "inspect", run_id)
    if problem is None:
        assert code == 0 and f"Run {run_id} (incomplete, 9 cases)" in out, err
        assert "95% interval" in out
        return
    assert code == 2 and f"{path}" in err and problem in err, out + err
    code, out, err = main(project, capsys, "runs")
    assert f"{run_id} unreadable: run.json: " in out and problem in out, out


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda r: r["metrics"]["answer_correct"].pop("low"), "metrics.answer_correct.low: missing required key"),
        (lambda r: r.update(cache={}), "cache.execution: missing required key"),
        (lambda r: r.update(cache={**r["cache"], "execution": "x"}), "cache.execution: should be a valid dict"),
        (lambda r: r.update(usage="x"), "usage: should be a valid dictionary"),
        (lambda r: r.update(cache_misses=[1]), "cache_misses: should be a valid dictionary"),
        (
            lambda r: r.update(cache_misses={"stages": {"retrieve": {"miss": 1, "reasons": [{}]}}}),
            "cache_misses.stages.retrieve.reasons[0].reason: missing required key",
        ),
        (lambda r: r.update(budget={"exhausted": True}), "budget: exhausted, but no cases_not_executed"),
        (lambda r: r["slices"][0].pop("low"), "slices[0]: a row with enough support but no low"),
        (lambda r: r.update(config="x"), "config: should be a valid dictionary"),
    ],
    ids=["metric-low", "cache-empty", "cache-str", "usage", "misses-list", "miss-reason", "budget", "slice", "config"],
)
def test_a_run_summary_of_the_wrong_shape_is_an_error_not_a_crash(
    project: Project, capsys: pytest.CaptureFixture[str], change: Any, problem: str
) -> None:
    """Every field of run.json that inspect, report and compare print is checked where run.json is read."""
    with (project.root / "oloproof.yaml").open("a", encoding="utf-8") as f:
        f.write("slices: [metadata.topic]\nmin_slice_support: 1\n")
    run_id = project.run()
    path = project.store / "runs" / run_id / "run.json"
    record = json.loads(path.read_text(encoding="utf-8"))
    change(record)
    path.write_text(json.dumps(record, indent=2), encoding="utf-8")
    for args in (
        ("inspect", run_id),
        ("inspect", run_id, "--json"),
        ("report", run_id, "--html", str(project.root / "r.html")),
    ):
        code, out, err = main(project, capsys, *args)
        assert code == 2, (args, out, err)
        assert f"{path}" in err and problem in err, (args, err)
