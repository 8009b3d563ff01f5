"""`oloproof init`: a project that runs at once, never an overwritten file, and what its suite can decide."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_oloproof.compare.policy import Decision
from pytest_oloproof.compare.release import suite_capacity


def oloproof(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_oloproof.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "template",
    [
        "plain",
        pytest.param(
            "langchain",
            marks=pytest.mark.skipif(importlib.util.find_spec("langchain_core") is None, reason="no langchain-core"),
        ),
        pytest.param(
            "llamaindex",
            marks=pytest.mark.skipif(importlib.util.find_spec("llama_index") is None, reason="no llama-index-core"),
        ),
    ],
)
def test_init_then_run_passes_at_once(tmp_path: Path, template: str) -> None:
    args = ("init", "demo") if template == "plain" else ("init", "demo", "--template", template)
    made = oloproof(tmp_path, *args)
    assert made.returncode == 0, made.stdout + made.stderr
    assert "cd demo" in made.stdout and "oloproof run" in made.stdout
    assert "answer-floor (answer_correct minimum 50.0%): PASS only if all 6 cases pass" in made.stdout
    demo = tmp_path / "demo"
    assert sorted(p.name for p in demo.iterdir()) == sorted(
        ["app.py", "corpus.py", "cases.jsonl", "oloproof.yaml", "release.yaml", "pytest.ini"]
    )
    run = oloproof(demo, "run", "-p", "no:cacheprovider")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "6 passed" in run.stdout
    record = json.loads(oloproof(demo, "inspect", "latest", "--json").stdout)
    assert record["metrics"]["answer_correct"]["value"] == 1.0
    assert record["metrics"]["hit_rate_at_2"]["value"] == 1.0
    gated = oloproof(demo, "gate", "latest", "--policy", "release.yaml")
    assert gated.returncode == 0, gated.stdout + gated.stderr


def test_init_refuses_to_overwrite_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "cases.jsonl").write_text("mine\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    proc = oloproof(tmp_path, "init")
    assert proc.returncode == 2
    assert "cases.jsonl, pytest.ini" in proc.stderr and "wrote nothing" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cases.jsonl", "pytest.ini"]
    assert (tmp_path / "cases.jsonl").read_text() == "mine\n"


def test_init_in_the_current_folder_says_no_cd(tmp_path: Path) -> None:
    proc = oloproof(tmp_path, "init")
    assert proc.returncode == 0, proc.stderr
    assert "cd " not in proc.stdout and (tmp_path / "app.py").is_file()


def _minimum(threshold: float) -> Decision:
    return Decision(name="floor", criterion="answer_correct", test="minimum", threshold=threshold)


def test_suite_capacity_against_clopper_pearson_by_hand() -> None:
    # every case passing: the exact lower bound is (alpha/2)^(1/n); 6 cases -> 0.025^(1/6) = 0.5407
    assert suite_capacity(_minimum(0.50), 6, 0.95)["failures_allowed"] == 0
    assert suite_capacity(_minimum(0.54), 6, 0.95)["failures_allowed"] == 0
    assert suite_capacity(_minimum(0.55), 6, 0.95)["failures_allowed"] is None
    # a 70% floor: the smallest n with 0.025^(1/n) > 0.7 is ceil(ln 0.025 / ln 0.7) = 11
    need = math.ceil(math.log(0.025) / math.log(0.7))
    c = suite_capacity(_minimum(0.70), 6, 0.95)
    assert c["failures_allowed"] is None and c["cases_needed"] == need == 11
    # 20 cases, 50% floor: 18/20 has lower bound 0.683, 16/20 0.563, 15/20 0.509, 14/20 0.457 -> 5 may fail
    assert suite_capacity(_minimum(0.50), 20, 0.95)["failures_allowed"] == 5
    counted = Decision(name="cv", criterion="citations_valid", test="max-failures", max_failures=0)
    assert suite_capacity(counted, 6, 0.95) == {
        "name": "cv",
        "criterion": "citations_valid",
        "test": "max-failures",
        "cases": 6,
        "max_failures": 0,
    }


@pytest.mark.slow
def test_a_built_wheel_installs_runs_init_and_gives_no_rewrite_warning(tmp_path: Path) -> None:
    """The install story for CI: a wheel built from the checkout, installed in a fresh venv, carries the init
    templates, and `oloproof run` gives no PytestAssertRewriteWarning (it imports the package before pytest
    starts; the package holds no assertions and says PYTEST_DONT_REWRITE)."""
    root = Path(__file__).resolve().parents[1]
    wheels = tmp_path / "wheels"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(root)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("pytest_oloproof-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    installed = subprocess.run(
        [str(py), "-m", "pip", "install", "-q", str(wheel)], capture_output=True, text=True, timeout=900
    )
    assert installed.returncode == 0, installed.stderr
    # the first run from the fresh install is the one that warned
    assert oloproof(tmp_path, "init", "demo").returncode == 0
    run = subprocess.run(
        [str(venv / "bin" / "oloproof"), "run", "-p", "no:cacheprovider"],
        cwd=tmp_path / "demo",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "6 passed" in run.stdout
    assert "PytestAssertRewriteWarning" not in run.stdout + run.stderr
    made = subprocess.run(
        [str(venv / "bin" / "oloproof"), "init", "again"], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert made.returncode == 0, made.stdout + made.stderr  # the wheel carries the init templates
    assert (tmp_path / "again" / "app.py").is_file()
