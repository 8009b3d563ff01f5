"""pytest's conventions under --oloproof, on the newest pytest and on the lowest supported one (CI runs this
file in a second venv with pytest 8.0): Oloproof's own help first, help text on every option, and -k, -m, -x,
--lf/--ff and --collect-only selecting or listing cases without running or spending anything else."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from staged_helpers import calls, case, last_run, rag_project

from tests.judge_server import Reply, ScriptedServer

FAILING = ("c1", "c3")


def oloproof(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_oloproof.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def project(pytester: pytest.Pytester, evaluators: str | None = None) -> None:
    """Five cases of the counting system (calls.log); c1 and c3 answer wrong; c2 and c4 carry topic: billing."""
    cases = [
        case(f"c{i}", answer="nowhere" if f"c{i}" in FAILING else "gamma", metadata={"topic": "billing"})
        if i % 2 == 0 and i
        else case(f"c{i}", answer="nowhere" if f"c{i}" in FAILING else "gamma")
        for i in range(5)
    ]
    rag_project(pytester, cases, evaluators=evaluators, extra="markers: [topic]\nstore: .oloproof\n")


def ran(result: pytest.RunResult) -> list[str]:
    return re.findall(r"sys\[(c\d)\] (?:PASSED|FAILED)", result.stdout.str())


def test_run_help_leads_with_oloproof_and_says_where_pytest_help_is(tmp_path: Path) -> None:
    proc = oloproof(tmp_path, "run", "--help")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("usage: oloproof run [OLOPROOF OPTIONS] [PYTEST OPTIONS] [FILE_OR_DIR ...]")
    assert "usage: pytest.main()" not in out and "positional arguments" not in out
    assert out.index("Oloproof: RAG evaluation") < out.index("oloproof_progress") < out.index("--help-pytest")
    assert len(out.splitlines()) < 80
    whole = oloproof(tmp_path, "run", "--help-pytest")
    assert whole.returncode == 0 and "-k EXPRESSION" in whole.stdout and "--oloproof-config" in whole.stdout


def test_every_oloproof_option_has_help_text(tmp_path: Path) -> None:
    """Read from pytest's own help: an option without help shows nothing after its name."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--help", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = proc.stdout.splitlines()
    options = [i for i, line in enumerate(lines) if line.startswith("  --oloproof")]
    assert len(options) >= 14
    for i in options:
        name, _, same_line = lines[i].strip().partition("  ")
        below = lines[i + 1] if i + 1 < len(lines) else ""
        help_text = same_line.strip() or (below.strip() if below.startswith(" " * 10) else "")
        assert help_text, f"{name} has no help text"


def test_k_selects_cases_by_id(pytester: pytest.Pytester) -> None:
    project(pytester)
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider", "-v", "-k", "c0 or c3")
    result.assert_outcomes(passed=1, failed=1)
    assert sorted(ran(result)) == ["c0", "c3"]
    assert sorted(c for _, c in calls(pytester) if _ == "generate") == ["c0", "c3"]
    assert sorted(c["id"] for c in last_run(pytester)["cases"]) == ["c0", "c3"]


def test_m_selects_cases_by_metadata_marker(pytester: pytest.Pytester) -> None:
    project(pytester)
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider", "-v", "-m", "billing")
    assert sorted(ran(result)) == ["c2", "c4"], result.stdout.str()
    assert sorted(c["id"] for c in last_run(pytester)["cases"]) == ["c2", "c4"]


def test_x_stops_at_the_first_failed_case(pytester: pytest.Pytester) -> None:
    project(pytester)
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider", "-p", "no:randomly", "-v", "-x")
    assert result.ret == 1
    assert ran(result) == ["c0", "c1"]
    assert "stopping after 1 failures" in result.stdout.str()
    assert last_run(pytester)["status"] == "incomplete"


def test_last_failed_then_failed_first(pytester: pytest.Pytester) -> None:
    project(pytester)
    pytester.runpytest("--oloproof", "-p", "no:randomly", "-v")
    again = pytester.runpytest("--oloproof", "-p", "no:randomly", "-v", "--lf")
    assert ran(again) == list(FAILING)
    first = pytester.runpytest("--oloproof", "-p", "no:randomly", "-v", "--ff")
    assert ran(first)[:2] == list(FAILING) and len(ran(first)) == 5


def test_collect_only_spends_nothing(pytester: pytest.Pytester) -> None:
    with ScriptedServer([Reply.verdict("pass")]) as server:
        project(
            pytester,
            "evaluators:\n"
            "  - {type: contains, criterion: answer_correct, field: answer, expected_field: answer}\n"
            f"  - {{type: groundedness_judge, provider: openai, base_url: '{server.base_url}', model: m, "
            "retries: 0}\n",
        )
        result = pytester.runpytest_subprocess("--oloproof", "-p", "no:cacheprovider", "--collect-only", "-q")
        requests = len(server.requests)
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*oloproof.yaml::sys[[]c4[]]*"])
    assert calls(pytester) == [] and requests == 0
    assert not (pytester.path / ".oloproof").exists()
