"""Every cache miss says why: against the previous run of the same system, per stage, aggregated."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_oloproof.cache.miss_reasons import lines
from pytest_oloproof.store.files import Store
from tests.diagnose_project import Project, finished


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project(tmp_path)


def misses(project: Project, run_id: str) -> dict[str, Any]:
    record = json.loads((project.store / "runs" / run_id / "run.json").read_text(encoding="utf-8"))
    return dict(record["cache_misses"])


def reasons(m: dict[str, Any], stage: str) -> list[tuple[str, int, str | None]]:
    return [(r["reason"], r["count"], r.get("detail")) for r in m["stages"][stage]["reasons"]]


def set_config(project: Project, old: str, new: str) -> None:
    path = project.root / "oloproof.yaml"
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def edit_cases(project: Project, edit: Any) -> None:
    path = project.root / "cases.jsonl"
    cases = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    path.write_text("".join(json.dumps(c) + "\n" for c in edit(cases)), encoding="utf-8")


def test_the_first_run_has_nothing_to_compare_with(project: Project) -> None:
    m = misses(project, project.run())
    assert m["previous_run"] is None
    assert m["note"] == "no earlier run of diag-rag in this store to compare with"
    assert lines(m) == []  # recorded, not printed: a first run misses everything


def test_a_changed_index_version_explains_retrieve_and_execution_misses(project: Project) -> None:
    first = project.run()
    set_config(project, "object: ", "index_version: ix-2\n    object: ")
    m = misses(project, project.run())
    assert m["previous_run"] == first
    assert reasons(m, "retrieve") == [("index_version ix-1 → ix-2", 9, None)]
    assert reasons(m, "execution") == [("index_version ix-1 → ix-2", 9, None)]
    assert "generate" not in m["stages"]  # the same passages: the same contexts, every generation reused
    assert lines(m)[1:] == [
        "  execution 9 miss: index_version ix-1 → ix-2 (9)",
        "  retrieve 9 miss: index_version ix-1 → ix-2 (9)",
    ]


def test_a_larger_budget_explains_generate_misses_by_the_context(project: Project) -> None:
    project.run()
    set_config(project, "object: ", "token_budget: 40\n    object: ")
    m = misses(project, project.run())
    assert reasons(m, "execution") == [("token_budget 10 → 40", 9, None)]
    # only the case whose assembled context changed (budget) was generated again
    assert reasons(m, "generate") == [("context changed", 1, "token_budget 10 → 40")]
    assert "  generate 1 miss: context changed (1; token_budget 10 → 40)" in lines(m)


def test_new_cases_changed_inputs_and_a_changed_version(project: Project) -> None:
    project.run()

    def edit(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
        extra = [{**cases[-1], "id": f"new{i}"} for i in range(3)]
        for extra_case in extra:
            extra_case["input"] = {**extra_case["input"], "q": extra_case["id"]}
        cases[-1]["input"]["extra"] = "changed"  # "ok": same id, another input
        return cases + extra

    edit_cases(project, edit)
    set_config(project, "version: v1", "version: v2")
    m = misses(project, project.run())
    assert reasons(m, "execution") == [("version v1 → v2", 9, None), ("new case", 3, None)]
    assert reasons(m, "retrieve") == [("new case", 3, None), ("input changed", 1, None)]
    assert reasons(m, "generate")[0] == ("version v1 → v2", 9, None)
    assert m["new_cases"] == 3 and lines(m)[-1] == "  3 new cases"


def test_changed_evaluator_settings_explain_judgment_misses(project: Project) -> None:
    project.run()
    set_config(project, "expected_field: answer}", "expected_field: answer, case_sensitive: true}")
    m = misses(project, project.run())
    assert reasons(m, "judgment") == [("evaluator settings changed", 9, "answer_correct: case_sensitive false → true")]
    assert "  judgment 9 miss: evaluator settings changed (9; answer_correct: case_sensitive false → true)" in lines(m)


def test_a_cleared_cache_and_a_refresh_say_so(project: Project) -> None:
    project.run()
    from pytest_oloproof.cache.caches import CacheMode, Caches

    Caches(Store(project.store).cache_dir, CacheMode.READWRITE).clear()
    m = misses(project, project.run())
    gone = "entry not in the cache (cleared, or written to another store)"
    assert reasons(m, "execution") == [(gone, 9, None)]
    assert reasons(m, "retrieve") == [(gone, 9, None)]


def test_the_terminal_and_the_json_report_show_the_reasons(project: Project, tmp_path: Path) -> None:
    code, out, err = finished(project.cli("run", "-q", "-p", "no:cacheprovider"))
    assert code == 1, err  # cases fail in this project
    set_config(project, "object: ", "index_version: ix-2\n    object: ")
    report = tmp_path / "report.json"
    code, out, err = finished(project.cli("run", "-q", "-p", "no:cacheprovider", f"--oloproof-report={report}"))
    assert "  retrieve 9 miss: index_version ix-1 → ix-2 (9)" in out.splitlines(), out
    assert any(line.startswith("Cache misses (against the previous run run_") for line in out.splitlines())
    doc = json.loads(report.read_text(encoding="utf-8"))
    assert doc["cache_misses"]["stages"]["retrieve"]["reasons"][0]["reason"] == "index_version ix-1 → ix-2"
    code, out, err = finished(project.cli("run", "-q", "-p", "no:cacheprovider", "--oloproof-cache=refresh"))
    assert "  retrieve 9 miss: cache mode refresh does not read entries (9)" in out.splitlines(), out
