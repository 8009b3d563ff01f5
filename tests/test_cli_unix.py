"""Issue 12 §5 and §6 through real subprocesses: the command line as a Unix tool, and a corrupt cache.

A reader that goes away (`| head -1`) is simulated exactly: the pipe's read end is
closed before the command writes anything, so its first write meets EPIPE.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from staged_helpers import case, rag_project, run_records

CLI_GUIDE = Path(__file__).resolve().parent.parent / "docs" / "guides" / "cli.md"


def oloproof(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_oloproof.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


def with_closed_stdout(cwd: Path, *args: str) -> tuple[int, str]:
    """Run the command with its stdout a pipe nobody reads any more; (exit code, stderr)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest_oloproof.cli", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the first line is written
    with proc.stderr:
        err = proc.stderr.read().decode("utf-8", "replace")
    return proc.wait(timeout=300), err


def _project_with_runs(pytester: pytest.Pytester, n_cases: int = 3) -> None:
    rag_project(pytester, [case(f"c{i}") for i in range(n_cases)])
    proc = oloproof(pytester.path, "run", "-p", "no:cacheprovider", "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ------------------------------------------------------------------ closed stdout


@pytest.mark.parametrize(
    "args", [("runs",), ("runs", "--json"), ("cache", "stats"), ("inspect", "run_"), ("inspect", "run_", "--json")]
)
def test_a_closed_stdout_ends_output_quietly_with_141(pytester: pytest.Pytester, args: tuple[str, ...]) -> None:
    _project_with_runs(pytester)
    code, err = with_closed_stdout(pytester.path, *args)
    assert code == 141, err
    assert "Traceback" not in err and "internal error" not in err and "BrokenPipe" not in err, err


def test_run_with_a_closed_stdout_finishes_and_records_every_case(pytester: pytest.Pytester) -> None:
    rag_project(pytester, [case(f"c{i}") for i in range(120)])
    code, err = with_closed_stdout(pytester.path, "run", "-p", "no:cacheprovider", "-v")
    assert code == 0, err  # the run's own exit code: every case passed
    assert "Traceback" not in err and "INTERNALERROR" not in err, err
    [record] = run_records(pytester.path / ".oloproof")
    assert record["status"] == "complete"
    assert len(record["cases"]) == 120


# ------------------------------------------------------------------ --json errors


def test_json_errors_are_a_json_object_on_stdout_and_text_on_stderr(pytester: pytest.Pytester) -> None:
    _project_with_runs(pytester)
    unknown = oloproof(pytester.path, "inspect", "run_nope", "--json")
    assert unknown.returncode == 2
    doc = json.loads(unknown.stdout)
    assert doc["error"]["code"] == 2 and "no run" in doc["error"]["message"]
    assert "oloproof: error: no run" in unknown.stderr

    usage = oloproof(pytester.path, "cache", "purge", "--json")
    assert usage.returncode == 2
    assert json.loads(usage.stdout)["error"]["code"] == 2
    assert "invalid choice" in json.loads(usage.stdout)["error"]["message"]

    ok = oloproof(pytester.path, "runs", "--json")
    assert ok.returncode == 0 and "error" not in json.loads(ok.stdout)


# ------------------------------------------------------------------ exit codes


def test_run_selecting_no_case_exits_5_as_documented(pytester: pytest.Pytester) -> None:
    rag_project(pytester, [case("c1")])
    proc = oloproof(pytester.path, "run", "-p", "no:cacheprovider", "-k", "nomatch")
    assert proc.returncode == 5, proc.stdout + proc.stderr
    table = CLI_GUIDE.read_text(encoding="utf-8").split("## Exit codes", 1)[1].split("\n#", 1)[0]
    assert "| 5 |" in table and "no case" in table


def test_cache_stats_on_a_store_that_is_a_file_is_an_error(pytester: pytest.Pytester) -> None:
    (pytester.path / "not-a-store").write_text("x")
    proc = oloproof(pytester.path, "cache", "stats", "--store", "not-a-store")
    assert proc.returncode == 2
    assert f"--store: {pytester.path / 'not-a-store'} is a file, not a store folder" in proc.stderr
    assert "entries" not in proc.stdout


# ------------------------------------------------------------------ §6 a corrupt cache


def _corrupt_cache(root: Path) -> Path:
    db = root / ".oloproof" / "cache" / "cache.db"
    assert db.is_file()
    db.write_bytes(b"this is not an SQLite database\n" * 200)
    return db


def test_corrupt_cache_stats_and_clear_recover(pytester: pytest.Pytester) -> None:
    _project_with_runs(pytester)
    _corrupt_cache(pytester.path)
    store = pytester.path / ".oloproof"

    stats = oloproof(pytester.path, "cache", "stats")
    assert stats.returncode == 2, stats.stderr
    assert "Traceback" not in stats.stderr
    fix = f"reset it with: oloproof cache clear --store {store}"
    assert f"is unusable (DatabaseError: file is not a database); {fix}" in stats.stderr

    clear = oloproof(pytester.path, "cache", "clear")
    assert clear.returncode == 0, clear.stderr
    [aside] = store.glob("cache.unreadable-*")  # moved aside, never deleted
    assert f"was unreadable: moved it to {aside} and created an empty one" in clear.stdout
    assert (aside / "cache.db").read_bytes().startswith(b"this is not an SQLite database")

    after = oloproof(pytester.path, "cache", "stats", "--json")
    assert after.returncode == 0, after.stderr
    assert set(json.loads(after.stdout)["entries"].values()) == {0}
    # and it is a working cache: a run fills it, the next run reuses it
    oloproof(pytester.path, "run", "-p", "no:cacheprovider", "-q")
    second = oloproof(pytester.path, "run", "-p", "no:cacheprovider", "-q")
    assert "Cache: execution 3 hit/0 miss" in second.stdout


def test_cache_clear_replaces_a_file_standing_where_the_cache_folder_goes(pytester: pytest.Pytester) -> None:
    (pytester.path / "s").mkdir()
    (pytester.path / "s" / "cache").write_text("junk")
    clear = oloproof(pytester.path, "cache", "clear", "--store", "s")
    assert clear.returncode == 0, clear.stderr
    assert (pytester.path / "s" / "cache" / "cache.db").is_file()
    [aside] = (pytester.path / "s").glob("cache.unreadable-*")
    assert aside.read_text() == "junk"


def test_a_run_with_a_corrupt_cache_runs_uncached_and_says_how_to_fix_it_once(pytester: pytest.Pytester) -> None:
    _project_with_runs(pytester)
    _corrupt_cache(pytester.path)
    proc = oloproof(pytester.path, "run", "-p", "no:cacheprovider")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    fix = f"Reset the cache with: oloproof cache clear --store {pytester.path / '.oloproof'}"
    assert out.count(fix) == 1, out
    assert "this run is uncached" in out
    assert "the next run recomputes" not in out
    assert "Cache: execution 0 hit/3 miss" in out
    records = run_records(pytester.path / ".oloproof")
    assert records[-1]["status"] == "complete" and records[-1]["cache_mode"] == "off"
