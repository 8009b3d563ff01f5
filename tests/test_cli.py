"""The `oloproof` command through real subprocesses: exit codes, runs, inspect, cache."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from staged_helpers import assert_nothing_written, case, cases_text, rag_project, run_records


def oloproof(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_oloproof.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def main_in_process(
    cwd: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *args: str
) -> tuple[int, str, str]:
    """The same entry point the script calls, in this process (faster than a subprocess)."""
    from pytest_oloproof.cli import main

    monkeypatch.chdir(cwd)
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_run_exit_codes_follow_the_cases(pytester: pytest.Pytester) -> None:
    rag_project(pytester, [case("good"), case("bad", answer="not there")])
    proc = oloproof(pytester.path, "run", "-p", "no:cacheprovider")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "1 failed, 1 passed" in proc.stdout
    assert "Cache: execution 0 hit/2 miss; judgment 0 hit/2 miss" in proc.stdout

    (pytester.path / "cases.jsonl").write_text(cases_text([case("good")]))
    proc = oloproof(pytester.path, "run", "-p", "no:cacheprovider", "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Cache: execution 1 hit/0 miss; judgment 1 hit/0 miss" in proc.stdout
    assert [r["status"] for r in run_records(pytester.path / ".oloproof")] == ["complete", "complete"]


def test_run_config_error_exits_2_and_writes_nothing(pytester: pytest.Pytester) -> None:
    rag_project(pytester, [case("good")], rag={"topk": 2})
    proc = oloproof(pytester.path, "run", "-p", "no:cacheprovider")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "system.rag.topk: unknown key; did you mean top_k?" in proc.stdout
    assert not (pytester.path / "calls.log").exists()
    assert_nothing_written(pytester.path)


def test_run_bad_cache_mode_exits_2(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    rag_project(pytester, [case("good")])
    code, out, err = main_in_process(pytester.path, capsys, monkeypatch, "run", "--oloproof-cache=sometimes")
    assert code == 2, out + err
    assert "--oloproof-cache: 'sometimes' is not one of off, read, write, refresh" in err
    assert not (pytester.path / ".oloproof").exists()


@pytest.fixture
def two_runs(pytester: pytest.Pytester) -> list[str]:
    """Two stored runs (in-process, which is faster), oldest first."""
    rag_project(pytester, [case("good"), case("bad", answer="not there")])
    pytester.runpytest("--oloproof", "-p", "no:cacheprovider").assert_outcomes(passed=1, failed=1)
    pytester.runpytest("--oloproof", "-p", "no:cacheprovider", "-k", "good").assert_outcomes(passed=1)
    return [r["run_id"] for r in run_records(pytester.path / ".oloproof")]


def test_runs_lists_newest_first(
    pytester: pytest.Pytester, two_runs: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    proc = oloproof(pytester.path, "runs")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert [line.split()[0] for line in lines] == list(reversed(two_runs))
    assert "complete" in lines[0] and "1 case " in lines[0] and "2 cases" in lines[1]

    code, out, _ = main_in_process(pytester.path, capsys, monkeypatch, "runs", "--json")
    assert code == 0
    doc = json.loads(out)
    assert [r["run_id"] for r in doc["runs"]] == list(reversed(two_runs))
    assert doc["runs"][1]["cases"] == 2
    assert doc["store"] == str((pytester.path / ".oloproof").resolve())


def test_inspect_by_id_prefix_ambiguous_and_unknown(
    pytester: pytest.Pytester, two_runs: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    proc = oloproof(pytester.path, "inspect", "run_ZZZZZZ")
    assert proc.returncode == 2
    assert "matches 'run_ZZZZZZ'" in proc.stderr and "oloproof runs" in proc.stderr

    older = two_runs[0]
    n = next(n for n in range(5, 31) if not two_runs[1].startswith(older[:n]))
    code, out, err = main_in_process(pytester.path, capsys, monkeypatch, "inspect", older[:n], "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["run_id"] == older
    assert doc["schema"] == "oloproof.run/1"
    assert sorted(c["id"] for c in doc["cases"]) == ["bad", "good"]

    code, out, _ = main_in_process(pytester.path, capsys, monkeypatch, "inspect", older)
    assert code == 0
    assert f"Run {older}" in out
    assert "Cases:" in out and "bad" in out

    code, _, err = main_in_process(pytester.path, capsys, monkeypatch, "inspect", "run_")
    assert code == 2
    assert "'run_' is ambiguous: it matches 2 ids" in err


def test_cache_stats_and_clear(
    pytester: pytest.Pytester, two_runs: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, err = main_in_process(pytester.path, capsys, monkeypatch, "cache", "stats", "--json")
    assert code == 0, err
    assert json.loads(out)["entries"] == {"execution": 2, "retrieve": 2, "generate": 2, "judgment": 2}

    code, out, _ = main_in_process(pytester.path, capsys, monkeypatch, "cache", "clear")
    assert code == 0
    assert out.startswith("cleared 8 entries from ")
    # the runs are kept; the next run starts cold
    pytester.runpytest("--oloproof", "-p", "no:cacheprovider").assert_outcomes(passed=1, failed=1)
    records = run_records(pytester.path / ".oloproof")
    assert len(records) == 3
    assert records[-1]["cache"]["execution"] == {"hit": 0, "miss": 2}


def test_unknown_subcommand_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, _, err = main_in_process(tmp_path, capsys, monkeypatch, "frobnicate")
    assert code == 2
    assert "invalid choice: 'frobnicate'" in err
