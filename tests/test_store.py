"""The store: run directories, the versioned record, atomic writes, id and prefix lookup."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest
from staged_helpers import case, last_run, rag_project

from pytest_oloproof.errors import StoreError
from pytest_oloproof.store.files import RUN_SCHEMA, Store, atomic_write_text, new_run_id, write_json


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_atomic_write_keeps_the_old_file_when_the_rename_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "run.json"
    write_json(target, {"status": "complete", "n": 1})

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        write_json(target, {"status": "complete", "n": 2})
    assert json.loads(target.read_text()) == {"status": "complete", "n": 1}
    assert leftovers(tmp_path) == []


def test_an_interrupted_write_never_leaves_a_half_written_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "run.json"
    atomic_write_text(target, '{"old": true}\n')

    def interrupted(fd: int) -> None:
        raise KeyboardInterrupt  # Ctrl-C between writing and renaming

    monkeypatch.setattr(os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        atomic_write_text(target, '{"new": true, "padding": "' + "x" * 100_000 + '"}\n')
    assert target.read_text() == '{"old": true}\n'
    assert leftovers(tmp_path) == []


def test_unserialisable_data_never_touches_the_file(tmp_path: Path) -> None:
    target = tmp_path / "run.json"
    write_json(target, {"a": 1})
    with pytest.raises(ValueError):
        write_json(target, {"a": float("nan")})
    assert json.loads(target.read_text()) == {"a": 1}


def test_atomic_write_creates_folders(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "doc.json"
    write_json(target, [1, 2])
    assert json.loads(target.read_text()) == [1, 2]


#: what a finished run.json holds in `cache` (the store's readers check it)
CACHE = {k: {"hit": 0, "miss": 0} for k in ("execution", "judgment", "retrieve", "generate")}


def make_runs(store: Store, n: int) -> list[str]:
    ids = []
    for i in range(n):
        run_id = new_run_id()
        writer = store.start_run(run_id, {"purpose": "run", "system": {"name": "s", "version": str(i)}})
        writer.add_case({"id": f"c{i}", "criteria": {}})
        writer.finish({"status": "complete", "counts": {"cases": 1}, "metrics": {}, "cache": CACHE})
        ids.append(run_id)
        time.sleep(0.002)  # ULIDs order by millisecond
    return ids


def test_run_writer_lifecycle(tmp_path: Path) -> None:
    store = Store(tmp_path)
    run_id = new_run_id()
    assert re.fullmatch(r"run_[0-9A-HJKMNP-TV-Z]{26}", run_id)
    writer = store.start_run(run_id, {"purpose": "run", "system": {"name": "s"}})
    header = json.loads((store.run_dir(run_id) / "run.json").read_text())
    assert header == {
        "schema": RUN_SCHEMA,
        "run_id": run_id,
        "purpose": "run",
        "system": {"name": "s"},
        "status": "incomplete",
    }
    writer.add_case({"id": "a", "criteria": {}, "output": {"answer": "x"}})
    writer.add_case({"id": "b", "criteria": {}, "output": None})
    writer.finish({"status": "complete", "metrics": {}, "cache": CACHE, "counts": {"cases": 2}})
    record = store.load_run(run_id)
    assert record["status"] == "complete"
    assert record["schema"] == RUN_SCHEMA
    assert [c["id"] for c in record["cases"]] == ["a", "b"]
    assert leftovers(store.run_dir(run_id)) == []


def test_a_torn_last_case_line_is_skipped(tmp_path: Path) -> None:
    store = Store(tmp_path)
    run_id = new_run_id()
    writer = store.start_run(run_id, {"system": {"name": "s"}})
    writer.add_case({"id": "a", "criteria": {}})
    writer.close()
    with (store.run_dir(run_id) / "cases.jsonl").open("a") as f:
        f.write('{"id": "b", "outp')  # killed mid-line
    record = store.load_run(run_id)
    assert record["status"] == "incomplete"
    assert [c["id"] for c in record["cases"]] == ["a"]


def test_runs_newest_first_and_prefix_resolution(tmp_path: Path) -> None:
    store = Store(tmp_path)
    ids = make_runs(store, 3)
    assert store.run_ids() == list(reversed(ids))
    assert store.resolve(ids[1]) == ("run", ids[1])
    # the shortest prefix that names only ids[1]
    n = next(n for n in range(5, 31) if sum(i.startswith(ids[1][:n]) for i in ids) == 1)
    assert store.resolve(ids[1][:n]) == ("run", ids[1])
    assert store.load_run(ids[1][:n])["run_id"] == ids[1]
    with pytest.raises(StoreError, match=r"'run_' is ambiguous: it matches 3 ids"):
        store.resolve("run_")
    with pytest.raises(StoreError, match=r"no run or diagnosis or comparison.* matches 'run_ZZZZ'"):
        store.resolve("run_ZZZZ")


def test_a_folder_without_run_json_is_not_a_run(tmp_path: Path) -> None:
    store = Store(tmp_path)
    (tmp_path / "runs" / "run_01JUNK").mkdir(parents=True)
    assert store.run_ids() == []


def test_a_run_record_through_pytest(pytester: pytest.Pytester) -> None:
    rag_project(pytester, [case("a"), case("b", answer="nope")])
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    runs = pytester.path / ".oloproof" / "runs"
    [run_dir] = list(runs.iterdir())
    assert re.fullmatch(r"run_[0-9A-Z]{26}", run_dir.name)
    header = json.loads((run_dir / "run.json").read_text())
    assert header["schema"] == "oloproof.run/1"
    assert header["run_id"] == run_dir.name
    assert header["status"] == "complete"
    assert header["system"]["name"] == "sys"
    assert header["cache"]["execution"] == {"hit": 0, "miss": 2}
    assert header["metrics"]["answer_correct"]["passed"] == 1
    assert "cases" not in header  # cases live in cases.jsonl, appended as they finish
    assert len((run_dir / "cases.jsonl").read_text().splitlines()) == 2
    result.stdout.fnmatch_lines([f"Run {run_dir.name} (complete, 2 cases) stored in *"])
    record = last_run(pytester)
    assert {c["id"] for c in record["cases"]} == {"a", "b"}
    assert leftovers(run_dir) == []


def test_an_interrupted_session_is_recorded_incomplete_and_keeps_finished_cases(pytester: pytest.Pytester) -> None:
    source = """
from pytest_oloproof import Passage, Retrieval, rag_system


@rag_system(name="ctrlc", depth=1)
class System:
    def retrieve(self, input, depth):
        if input["q"] == "b":
            raise KeyboardInterrupt
        return Retrieval(query="q", depth=depth, candidates=(Passage("a", text="gamma"),))

    def generate(self, input, context):
        return {"answer": context[0].text}
"""
    rag_project(pytester, [case("a"), case("b"), case("c")], source=source)
    # no_reraise_ctrlc: the inner session's Ctrl-C must not stop this one
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider", no_reraise_ctrlc=True)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    record = last_run(pytester)
    assert record["status"] == "incomplete"
    assert [c["id"] for c in record["cases"]] == ["a"]
    # what finished is reused next time
    pytester.makefile(".jsonl", cases=json.dumps(case("a")) + "\n")
    pytester.runpytest("--oloproof", "-p", "no:cacheprovider").assert_outcomes(passed=1)
    assert last_run(pytester)["cache"]["execution"] == {"hit": 1, "miss": 0}


def _case_record(cid: str, value: float) -> dict[str, object]:
    return {"id": cid, "criteria": {"ok": {"status": "observed", "value": value}}, "metadata": {}, "error": None}


def test_an_interrupted_run_counts_the_cases_its_file_holds(tmp_path: Path) -> None:
    """Ctrl-C between writing a case's line and noting it in memory: the record follows the file."""
    from pytest_oloproof.engine.recorder import RunRecorder

    store = Store(tmp_path / ".oloproof")
    header = {"evaluators": [{"criterion": "ok", "kind": "rate"}], "slices": [], "confidence": 0.95, "seed": 0}
    recorder = RunRecorder(store, header)
    recorder.add(_case_record("a", 1.0))
    recorder.add(_case_record("b", 0.0))
    recorder._open().add_case(_case_record("c", 1.0))  # the line is written; the interruption came before the rest
    record = recorder.finish("incomplete")
    assert record["counts"]["cases"] == 3
    assert [c["id"] for c in record["cases"]] == ["a", "b", "c"]
    assert record["metrics"]["ok"]["passed"] == 2 and record["metrics"]["ok"]["observed"] == 3
    stored = json.loads((store.run_dir(recorder.run_id) / "run.json").read_text())
    assert stored["counts"]["cases"] == 3
