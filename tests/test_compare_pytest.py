"""The CI form: `pytest --oloproof --oloproof-baseline … --oloproof-policy …` gates the session."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_oloproof.store.files import Store

N_CASES = 40


def project(pytester: pytest.Pytester, module: str, passing: int, n: int = N_CASES) -> None:
    """A plain-callable system whose first `passing` cases answer correctly; one module per run
    (unique names, because in-process pytester runs share sys.modules)."""
    pytester.makepyfile(
        **{
            module: f"""
def answer(input):
    return {{"answer": "yes" if input["q"] < {passing} else "no"}}
"""
        }
    )
    pytester.makefile(
        ".yaml",
        oloproof=f"""
system:
  name: toy-gate
  object: {module}:answer
cases: cases.jsonl
evaluators:
  - {{type: contains, criterion: ok, field: answer, expected_field: answer}}
store: .oloproof
""",
    )
    lines = [json.dumps({"id": f"q{i:02d}", "input": {"q": i}, "expected": {"answer": "yes"}}) for i in range(n)]
    pytester.makefile(".jsonl", cases="\n".join(lines) + "\n")


def policy(pytester: pytest.Pytester, text: str) -> Path:
    return pytester.makefile(".yaml", compare=text)


NOT_WORSE = "decisions:\n  - {name: not-worse, criterion: ok, test: non-inferiority, margin: 5}\nmin_pairs: 10\n"
BETTER = "decisions:\n  - {name: better, criterion: ok, test: superiority}\nmin_pairs: 10\n"


def runs(pytester: pytest.Pytester) -> list[str]:
    return Store(pytester.path / ".oloproof").run_ids()


def first_run(pytester: pytest.Pytester) -> str:
    """Run the project as it stands (it must pass) and return its run id, the baseline; forget the calls it logged."""
    assert pytester.runpytest("--oloproof", "-p", "no:cacheprovider").ret == 0
    (baseline,) = runs(pytester)
    (pytester.path / "calls.log").unlink(missing_ok=True)
    return baseline


def gated(pytester: pytest.Pytester, baseline: str) -> pytest.RunResult:
    """The CI form against `baseline` with compare.yaml."""
    return pytester.runpytest(
        "--oloproof", "-p", "no:cacheprovider", "--oloproof-baseline", baseline, "--oloproof-policy", "compare.yaml"
    )


def test_block_exits_3_even_when_every_case_passes(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    project(pytester, "gate_sys_all_a", passing=N_CASES)
    baseline = first_run(pytester)
    project(pytester, "gate_sys_all_b", passing=N_CASES)
    policy(pytester, NOT_WORSE)
    summary = pytester.path / "step_summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = pytester.runpytest(
        "--oloproof",
        "-p",
        "no:cacheprovider",
        "--oloproof-baseline",
        baseline[:12],
        "--oloproof-policy",
        "compare.yaml",
    )
    result.assert_outcomes(passed=N_CASES)
    assert result.ret == 3
    result.stdout.fnmatch_lines(
        [
            f"Comparison sha256:* of run_* against {baseline} · 40 paired cases",
            "Gate: BLOCK (exit 3)",
            "Decisions",
            "  not-worse  ok  non-inferiority, margin 5.0 points  INSUFFICIENT_EVIDENCE  interval_overlaps_margin",
            "ok: +0.0 points [[]-8.9, +8.9[]] · 40 paired · 0 missing · 0 excluded",
            "ok: 40 paired cases cannot establish non-inferiority at a 5.0-point margin; about 72 would be needed*",
        ]
    )
    md = summary.read_text(encoding="utf-8")
    assert "**Gate: BLOCK (exit 3)**" in md
    assert "| not-worse | ok | non-inferiority, margin 5.0 points | **INSUFFICIENT_EVIDENCE** |" in md
    assert len(list((pytester.path / ".oloproof" / "comparisons").glob("*.json"))) == 1


def test_pass_exits_0_even_when_cases_fail_with_a_json_baseline(pytester: pytest.Pytester) -> None:
    project(pytester, "gate_sys_pass_a", passing=0)
    first = pytester.runpytest("--oloproof", "-p", "no:cacheprovider", "--oloproof-report", "baseline.json")
    assert first.ret == 1
    (baseline,) = runs(pytester)
    project(pytester, "gate_sys_pass_b", passing=30)  # 10 cases still fail
    policy(pytester, BETTER)
    result = pytester.runpytest(
        "--oloproof",
        "-p",
        "no:cacheprovider",
        "--oloproof-baseline",
        "baseline.json",
        "--oloproof-policy",
        "compare.yaml",
    )
    result.assert_outcomes(passed=30, failed=10)
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            f"Comparison sha256:* of run_* against {baseline} · 40 paired cases",
            "Gate: PASS (exit 0)",
            "Decisions",
            "  better  ok  superiority, margin 0.0 points  PASS  lower_bound_above_margin",
            "ok: +75.0 points * · 40 paired · 0 missing · 0 excluded",
        ]
    )


def test_regression_fails_the_gate(pytester: pytest.Pytester) -> None:
    project(pytester, "gate_sys_reg_a", passing=N_CASES)
    baseline = first_run(pytester)
    project(pytester, "gate_sys_reg_b", passing=10)
    policy(pytester, NOT_WORSE)
    result = gated(pytester, baseline)
    assert result.ret == 3
    result.stdout.fnmatch_lines(
        [
            "Gate: BLOCK*",
            "Decisions",
            "  not-worse  ok  non-inferiority, margin 5.0 points  FAIL  upper_bound_below_minus_margin",
        ]
    )


def test_baseline_without_policy_prints_the_comparison_and_keeps_pytest_status(pytester: pytest.Pytester) -> None:
    project(pytester, "gate_sys_nopol_a", passing=N_CASES)
    baseline = first_run(pytester)
    project(pytester, "gate_sys_nopol_b", passing=39)
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider", "--oloproof-baseline", baseline)
    assert result.ret == 1  # pytest's own status: one case failed
    result.stdout.fnmatch_lines(["No policy given: no decisions and no gate*", "ok: -2.5 points * · 40 paired*"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--oloproof-baseline", "run_01NOPE", "--oloproof-policy", "compare.yaml"],
            "*Oloproof cannot start: --oloproof-baseline: no run matches 'run_01NOPE'*",
        ),
        (
            ["--oloproof-baseline", "missing.json", "--oloproof-policy", "compare.yaml"],
            "*Oloproof cannot start: --oloproof-baseline *missing.json: no such run-record file*",
        ),
        (["--oloproof-policy", "compare.yaml"], "*decisions?0?.test: non-inferiority compares a candidate*"),
        (
            ["--oloproof-baseline", "BASE", "--oloproof-policy", "nope.yaml"],
            "*--oloproof-policy: *nope.yaml does not exist*",
        ),
        (
            ["--oloproof-baseline", "BASE", "--oloproof-policy", "bad.yaml"],
            "*bad.yaml:3: min_pair: unknown key; did you mean min_pairs?*",
        ),
    ],
)
def test_bad_gate_options_exit_2_before_any_case_runs(pytester: pytest.Pytester, args: list[str], message: str) -> None:
    project(pytester, "gate_sys_bad_a", passing=3, n=3)
    baseline = first_run(pytester)
    policy(pytester, NOT_WORSE)
    pytester.makefile(".yaml", bad=NOT_WORSE.replace("min_pairs", "min_pair"))
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider", *[baseline if a == "BASE" else a for a in args])
    assert result.ret == 2
    result.stderr.fnmatch_lines([message])
    result.stdout.no_fnmatch_line("*passed*")
    assert runs(pytester) == [baseline]  # no case ran, no run was recorded
    assert not (pytester.path / ".oloproof" / "comparisons").exists()


def test_criterion_missing_from_the_new_run_exits_2(pytester: pytest.Pytester) -> None:
    """A decision's criterion neither run records: known from the baseline before any case runs."""
    project(pytester, "gate_sys_crit_a", passing=3, n=3)
    baseline = first_run(pytester)
    policy(pytester, NOT_WORSE.replace("criterion: ok", "criterion: okay"))
    result = gated(pytester, baseline)
    assert result.ret == 2
    result.stderr.fnmatch_lines(
        [
            "*Oloproof cannot start: *compare.yaml:2: decisions[[]0[]].criterion: unknown criterion 'okay': both runs "
            f"must record it, and the baseline {baseline} does not (criteria of the baseline: ok); did you mean ok?*"
        ]
    )
    assert runs(pytester) == [baseline]


# A plain-callable system that logs each call, so a test can tell that no case ran.
LOGGED_SYSTEM = """
from pathlib import Path


def answer(input):
    with open(Path(__file__).parent / "calls.log", "a") as f:
        f.write(str(input["q"]) + "\\n")
    return {"answer": "yes"}
"""

# oloproof.yaml of that system; `{extra}` adds evaluators, `{settings}` top-level keys
LOGGED_CONFIG = """
system:
  name: toy-gate
  object: {module}:answer
cases: cases.jsonl
evaluators:
  - {{type: contains, criterion: ok, field: answer, expected_field: answer}}
{extra}{settings}
"""

EXTRA_CRITERION = "  - {type: exact_match, criterion: exact, field: answer, expected_field: answer}\n"

#: a conftest.py adding the criterion `exact` through an evaluator fixture, not through oloproof.yaml
EXACT_CONFTEST = """
import pytest_oloproof
from pytest_oloproof.evaluators.answers import ExactMatch


@pytest_oloproof.evaluator
def exact():
    return ExactMatch(criterion="exact", field="answer", expected_field="answer")
"""


def logged_project(pytester: pytest.Pytester, module: str, *, extra: str = "", settings: str = "") -> None:
    pytester.makepyfile(**{module: LOGGED_SYSTEM})
    pytester.makefile(".yaml", oloproof=LOGGED_CONFIG.format(module=module, extra=extra, settings=settings))
    lines = [json.dumps({"id": f"q{i:02d}", "input": {"q": i}, "expected": {"answer": "yes"}}) for i in range(12)]
    pytester.makefile(".jsonl", cases="\n".join(lines) + "\n")


def calls(pytester: pytest.Pytester) -> list[str]:
    log = pytester.path / "calls.log"
    return log.read_text().split() if log.exists() else []


@pytest.mark.parametrize("concurrency", [1, 4])
def test_policy_criterion_only_the_baseline_records_exits_2_before_any_case_runs(
    pytester: pytest.Pytester, concurrency: int
) -> None:
    """The baseline records `exact`, this run's evaluators do not: no case may run (the prefetcher waits too)."""
    logged_project(pytester, f"gate_sys_only_base_a{concurrency}", extra=EXTRA_CRITERION)
    baseline = first_run(pytester)
    logged_project(pytester, f"gate_sys_only_base_b{concurrency}", settings=f"concurrency: {concurrency}\n")
    policy(pytester, NOT_WORSE.replace("criterion: ok", "criterion: exact"))
    result = gated(pytester, baseline)
    assert result.ret == 2, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*Oloproof cannot start: *compare.yaml:2: decisions[[]0[]].criterion: unknown criterion 'exact': both runs "
            "must record it, and this run's evaluators (oloproof.yaml and conftest.py fixtures) do not "
            "(criteria in both runs: ok)*"
        ]
    )
    assert calls(pytester) == []  # no case ran
    assert runs(pytester) == [baseline]  # nothing recorded
    assert not (pytester.path / ".oloproof" / "comparisons").exists()


@pytest.mark.parametrize("concurrency", [1, 4])
def test_policy_criterion_from_a_conftest_evaluator_fixture_gates_the_run(
    pytester: pytest.Pytester, concurrency: int
) -> None:
    """Legal: a decision on a criterion oloproof.yaml does not configure but a conftest.py fixture adds."""
    logged_project(pytester, f"gate_sys_fixture_a{concurrency}", extra=EXTRA_CRITERION)
    baseline = first_run(pytester)
    logged_project(pytester, f"gate_sys_fixture_b{concurrency}", settings=f"concurrency: {concurrency}\n")
    pytester.makeconftest(EXACT_CONFTEST)
    policy(pytester, NOT_WORSE.replace("criterion: ok", "criterion: exact").replace("margin: 5", "margin: 50"))
    result = gated(pytester, baseline)
    result.assert_outcomes(passed=12)
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(
        ["Gate: PASS*", "Decisions", "  not-worse  exact  non-inferiority, margin 50.0 points  PASS  *"]
    )
    assert len(runs(pytester)) == 2


def test_under_xdist_a_policy_criterion_the_workers_lack_is_still_found_after_the_run(
    pytester: pytest.Pytester,
) -> None:
    """Under xdist only the workers resolve the evaluator fixtures: the check stays after the run, with exit 2."""
    logged_project(pytester, "gate_sys_xdist_a", extra=EXTRA_CRITERION)
    baseline = first_run(pytester)
    logged_project(pytester, "gate_sys_xdist_b")
    policy(pytester, NOT_WORSE.replace("criterion: ok", "criterion: exact"))
    result = pytester.runpytest_subprocess(
        "--oloproof",
        "-p",
        "xdist",
        "-n",
        "2",
        "-p",
        "no:cacheprovider",
        "--oloproof-baseline",
        baseline,
        "--oloproof-policy",
        "compare.yaml",
    )
    assert result.ret == 2, result.stdout.str()
    result.stdout.fnmatch_lines(["Comparison not possible: *compare.yaml:2: *unknown criterion 'exact'*"])


def test_policy_against_a_baseline_of_another_system_exits_2_before_any_case_runs(pytester: pytest.Pytester) -> None:
    logged_project(pytester, "gate_sys_other_a")
    baseline = first_run(pytester)
    logged_project(pytester, "gate_sys_other_b")
    cfg = pytester.path / "oloproof.yaml"
    cfg.write_text(cfg.read_text().replace("name: toy-gate", "name: toy-other"))
    policy(pytester, NOT_WORSE)
    result = gated(pytester, baseline)
    assert result.ret == 2
    result.stdout.fnmatch_lines(
        [
            f"*Oloproof cannot start: --oloproof-baseline: run {baseline} is of system 'toy-gate', but this session "
            "runs 'toy-other'*give a baseline of 'toy-other'*"
        ]
    )
    assert calls(pytester) == []
    assert runs(pytester) == [baseline]


def test_oloproof_run_with_a_policy_checks_its_criteria_before_any_case_runs(pytester: pytest.Pytester) -> None:
    """`oloproof run` is pytest with --oloproof: the same check, in a real subprocess of the command."""
    import subprocess
    import sys

    logged_project(pytester, "gate_sys_cli_a")
    baseline = first_run(pytester)
    policy(pytester, NOT_WORSE.replace("criterion: ok", "criterion: okk"))
    gate = ["--oloproof-baseline", baseline, "--oloproof-policy", "compare.yaml"]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest_oloproof.cli", "run", "-p", "no:cacheprovider", *gate],
        cwd=pytester.path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "unknown criterion 'okk'" in proc.stdout + proc.stderr
    assert "did you mean ok?" in proc.stdout + proc.stderr
    assert calls(pytester) == []
    assert runs(pytester) == [baseline]


def test_a_system_named_from_an_environment_variable_is_compared_with_its_own_baseline(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store writes that name as ${VAR}; the session's run, compared before it is written, holds the value."""
    monkeypatch.setenv("OLOPROOF_GATE_NAME", "toy-gate-from-env")
    logged_project(pytester, "gate_sys_env_a")
    cfg = pytester.path / "oloproof.yaml"
    cfg.write_text(cfg.read_text().replace("name: toy-gate", "name: ${OLOPROOF_GATE_NAME}"))
    baseline = first_run(pytester)
    policy(pytester, NOT_WORSE.replace("margin: 5", "margin: 50"))
    result = gated(pytester, baseline)
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines(["Gate: PASS (exit 0)"])
