"""pytest-xdist parity: one process or two give the same run record, metrics and cache counts."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.test_scale import assert_same, strip_volatile

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "support_rag"


def copy_example(dest: Path) -> None:
    dest.mkdir(parents=True)
    for name in ("app.py", "cases.jsonl", "knowledge_base.jsonl", "oloproof.yaml", "pytest.ini"):
        shutil.copy(EXAMPLE / name, dest / name)


def normalized(report: dict[str, Any]) -> dict[str, Any]:
    """The report without ids, times and timings; cases keyed by id (workers finish in any order)."""
    out = strip_volatile(report)
    out["cases"] = {c["id"]: c for c in out["cases"]}
    return out


def test_xdist_two_workers_match_one_process(pytester: pytest.Pytester) -> None:
    reports: dict[str, list[dict[str, Any]]] = {}
    for mode in ("0", "2"):
        project = pytester.path / f"n{mode}"
        copy_example(project)
        reports[mode] = []
        for run in ("cold", "warm"):
            report = project / f"{run}.json"
            result = pytester.runpytest_subprocess(
                "--oloproof",
                "-p",
                "xdist",
                "-n",
                mode,
                "-p",
                "no:cacheprovider",
                f"--oloproof-report={report}",
                str(project),
            )
            result.assert_outcomes(passed=9, failed=4)
            reports[mode].append(json.loads(report.read_text()))
        runs = sorted(p.name for p in (project / ".oloproof" / "runs").iterdir())
        assert len(runs) == 2, runs  # one run per session: the controller writes, workers never do
        for rep in reports[mode]:
            assert rep["status"] == "complete" and rep["counts"]["cases"] == 13
    for cold_or_warm in (0, 1):
        single, double = (normalized(reports[m][cold_or_warm]) for m in ("0", "2"))
        # the config path differs only by the project folder
        single.pop("config_path", None), double.pop("config_path", None)
        assert_same(single, double)
    cold, warm = reports["2"]
    assert cold["cache"]["execution"] == {"hit": 0, "miss": 13}
    assert warm["cache"]["execution"] == {"hit": 13, "miss": 0}
    assert cold["metrics"]["answer_correct"]["passed"] == 9


USAGE_ERRORS = {
    "config": "*oloproof.yaml:8: system.rag.top_k: expected a valid integer*got 'zero'*",
    "cases": "*cases.jsonl:14:*invalid JSON*",
    "diagnose": "*cannot diagnose 'run_nope': no run matches 'run_nope'*",
}


@pytest.mark.parametrize("breakage", sorted(USAGE_ERRORS))
@pytest.mark.parametrize("mode", ["0", "2"], ids=["one-process", "xdist"])
def test_a_usage_error_exits_2_and_runs_nothing_with_or_without_xdist(
    pytester: pytest.Pytester, mode: str, breakage: str
) -> None:
    """Under xdist the controller collects nothing: it must still stop a bad config or case file with exit 2."""
    project = pytester.path / "project"
    copy_example(project)
    (project / "test_ordinary.py").write_text("def test_ordinary():\n    open('ordinary.ran', 'w').close()\n")
    args = ["--oloproof", "-p", "xdist", "-n", mode, "-p", "no:cacheprovider", f"--rootdir={project}", str(project)]
    if breakage == "config":
        cfg = project / "oloproof.yaml"
        cfg.write_text(cfg.read_text().replace("top_k: 2", "top_k: zero"))
    elif breakage == "cases":
        with open(project / "cases.jsonl", "a") as f:
            f.write('{"id": "late", "input": \n')
    else:
        args += ["--oloproof-diagnose", "run_nope"]
    result = pytester.runpytest_subprocess(*args)
    assert result.ret == 2, result.stdout.str()
    result.stdout.fnmatch_lines(["*Oloproof cannot start*", USAGE_ERRORS[breakage]])
    assert not (pytester.path / "ordinary.ran").exists()  # nothing ran: not even the ordinary tests
    runs = project / ".oloproof" / "runs"
    assert not runs.exists() or not any(runs.iterdir())
