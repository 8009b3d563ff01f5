"""The JSON run report (`--oloproof-report`): the case lines a session wrote are copied, not re-encoded.

Each report is checked against what the previous implementation wrote (every case read back
from cases.jsonl and encoded again with `store.write_json_stream`): the same JSON, no secret.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from pytest_oloproof.engine.recorder import RunRecorder
from pytest_oloproof.records import redaction
from pytest_oloproof.store.files import Store, write_json_stream

SECRET = "sk-report-4f9Qa7ZtLm"

SYSTEM = """
import os
from pytest_oloproof import Passage, Retrieval, rag_system


@rag_system(name="echo", version="1", depth=2, top_k=2, index_version="i1")
class Echo:
    def retrieve(self, input, depth):
        return Retrieval(query=input["q"], depth=depth, candidates=(Passage("d1", 1.0, "one ünïcode"),))

    def generate(self, input, context):
        # a system that leaks the key it was configured with into its answer
        return {"answer": input["answer"] + " " + os.environ["OLO_REPORT_KEY"]}
"""


@pytest.fixture(autouse=True)
def _fresh_redactor() -> Any:
    redaction.clear()
    yield None
    redaction.clear()


def _project(pytester: pytest.Pytester, n: int) -> None:
    module = f"echo_{uuid.uuid4().hex[:8]}"
    pytester.makepyfile(**{module: SYSTEM})
    with (pytester.path / "cases.jsonl").open("w") as f:
        for i in range(n):
            answer = "yes" if i != 3 else "no"  # the fourth case fails
            case = {"id": f"c{i}", "input": {"q": f"q{i}", "answer": answer}, "expected": {"answer": "yes"}}
            f.write(json.dumps(case) + "\n")
    (pytester.path / "oloproof.yaml").write_text(
        # the key comes from the environment, so it is a secret to redact everywhere
        f"system:\n  name: ${{OLO_REPORT_KEY}}-rag\n  rag:\n    object: {module}:Echo\n"
        "cases: cases.jsonl\n"
        "evaluators:\n  - {type: contains, criterion: answer_correct, field: answer, expected_field: answer}\n"
        "store: .oloproof\n"
    )


def _previous_report(store: Store, report: dict[str, Any], out: Path) -> dict[str, Any]:
    """The report as the previous implementation wrote it: each stored case parsed and encoded again."""
    head = {k: v for k, v in report.items() if k != "cases"}
    write_json_stream(out, head, "cases", store.iter_cases(report["run_id"], strict=False))
    return json.loads(out.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def _case_lines(report_text: str) -> list[str]:
    """The case items of a report as written (one per line, after the opening of the cases array)."""
    body = report_text[report_text.index('"cases": [') :].splitlines()[1:-2]
    return [line.strip().removesuffix(",") for line in body]


def test_reports_of_an_incomplete_run_and_of_the_run_that_reuses_it_are_the_stored_cases(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    n = 8
    _project(pytester, n)
    monkeypatch.setenv("OLO_REPORT_KEY", SECRET)
    store = Store(pytester.path / ".oloproof")
    redaction.register(SECRET, "OLO_REPORT_KEY")  # for the reference written here, as the session did
    args = ("--oloproof", "-p", "no:cacheprovider", "-p", "no:randomly")
    # -x: the session stops at the failing fourth case, so its run is incomplete (4 of 8 cases)
    first = pytester.runpytest_subprocess(*args, "-x", "--oloproof-report", "r1.json")
    first.assert_outcomes(passed=3, failed=1)
    # the next run reuses the four that completed and runs the rest
    second = pytester.runpytest_subprocess(*args, "--oloproof-report", "r2.json")
    second.assert_outcomes(passed=n - 1, failed=1)
    assert "Cache: execution 4 hit/4 miss" in second.stdout.str()

    for name, status, count in (("r1.json", "incomplete", 4), ("r2.json", "complete", n)):
        text = (pytester.path / name).read_text(encoding="utf-8")
        report = json.loads(text)
        assert report["status"] == status and len(report["cases"]) == count
        assert SECRET not in text and "${OLO_REPORT_KEY}" in text  # the leaked key is redacted
        assert report["cases"][0]["output"]["answer"] == "yes ${OLO_REPORT_KEY}"
        # the same JSON as the previous implementation's report ...
        assert report == _previous_report(store, report, pytester.path / f"previous-{name}")
        # ... whose case items are the stored lines themselves, byte for byte (not encoded again)
        stored = (store.run_dir(report["run_id"]) / "cases.jsonl").read_text(encoding="utf-8").splitlines()
        assert _case_lines(text) == stored


def _record(i: int, answer: str) -> dict[str, Any]:
    return {"id": f"c{i}", "input": {"q": "?"}, "output": {"answer": answer}, "criteria": {}, "error": None}


def test_a_case_file_that_is_not_only_the_recorders_own_is_read_back_record_by_record(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    recorder = RunRecorder(store, {"evaluators": []})
    for i in range(3):
        recorder.add(_record(i, "fine"))
    cases_file = store.run_dir(recorder.run_id) / "cases.jsonl"
    with cases_file.open("a", encoding="utf-8") as f:  # a line this recorder did not write
        f.write(json.dumps(_record(9, "from elsewhere")) + "\n")
    record = recorder.finish("complete")
    recorder.write_report(tmp_path / "r.json", record)
    text = (tmp_path / "r.json").read_text(encoding="utf-8")
    report = json.loads(text)
    assert [c["id"] for c in report["cases"]] == ["c0", "c1", "c2", "c9"]  # the whole file, as it is now
    assert report == _previous_report(store, report, tmp_path / "previous.json")
    assert _case_lines(text)[0].startswith('{"id": "c0"')  # encoded again, by the previous implementation


def test_a_secret_registered_after_its_line_was_written_is_redacted_in_the_report(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    recorder = RunRecorder(store, {"evaluators": []})
    recorder.add(_record(0, f"leaked {SECRET}"))
    redaction.register(SECRET, "LATE_KEY")  # e.g. a judge configured after the first case
    recorder.add(_record(1, f"leaked {SECRET}"))
    record = recorder.finish("complete")
    recorder.write_report(tmp_path / "r.json", record)
    text = (tmp_path / "r.json").read_text(encoding="utf-8")
    assert SECRET in (store.run_dir(recorder.run_id) / "cases.jsonl").read_text()  # the first line has it
    assert SECRET not in text
    assert [c["output"]["answer"] for c in json.loads(text)["cases"]] == ["leaked ${LATE_KEY}"] * 2
