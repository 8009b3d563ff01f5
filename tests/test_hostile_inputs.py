"""A hostile-input sweep: odd and bad case files, configs and options get a clear error before anything runs.

Each entry is one input that once gave a traceback, a hang, a silently changed run or a vague message
(the tests in test_cases.py, test_config*.py and test_cli*.py cover the ordinary errors).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from staged_helpers import assert_nothing_written, calls, case, rag_project, run_records

from pytest_oloproof.config.settings import load_config
from pytest_oloproof.errors import CaseFileError, ConfigError, StoreError
from pytest_oloproof.records.cases import load_cases
from pytest_oloproof.stats import metrics
from pytest_oloproof.store.files import Store

GOOD = '{"id": "ok", "input": {"q": "x"}}'

#: (name, second line of the case file, phrases the error must hold)
BAD_CASE_LINES = {
    # JSON allows \ud800 escapes; alone they are no character, and writing the run record crashed
    "lone_surrogate_in_id": ('{"id": "a\\ud800", "input": 1}', ["cases.jsonl:2", "lone surrogate", "at id"]),
    "lone_surrogate_in_key": ('{"id": "b", "input": {"\\udfff": 1}}', ["cases.jsonl:2", "lone surrogate", "input."]),
    "control_char_newline": ('{"id": "a\\nb", "input": 1}', ["cases.jsonl:2", "control character", "printable"]),
    "control_char_nul": ('{"id": "a\\u0000b", "input": 1}', ["cases.jsonl:2", "control character"]),
    "huge_integer": ('{"id": "h", "input": ' + "9" * 5000 + "}", ["cases.jsonl:2", "4300 digits", "as a string"]),
    "deep_nesting": ('{"id": "d", "input": ' + "[" * 100_000 + "]" * 100_000 + "}", ["cases.jsonl:2", "too deeply"]),
}


@pytest.mark.parametrize("name", sorted(BAD_CASE_LINES))
def test_bad_case_line_is_a_precise_error(tmp_path: Path, name: str) -> None:
    line, phrases = BAD_CASE_LINES[name]
    (tmp_path / "cases.jsonl").write_text(GOOD + "\n" + line + "\n", encoding="utf-8")
    with pytest.raises(CaseFileError) as info:
        load_cases("cases.jsonl", tmp_path)
    [message] = info.value.errors
    for phrase in phrases:
        assert phrase in message, message
    assert "sys.set_int_max_str_digits" not in message


@pytest.mark.parametrize(
    "case_id", ["a/b", "a[1]", "a::b", "x" * 2000, "cafe\u0301", "\u05e9\u05dc\u05d5\u05dd", "a\U0001f600"]
)
def test_odd_but_printable_ids_are_kept_as_written(tmp_path: Path, case_id: str) -> None:
    (tmp_path / "cases.jsonl").write_text(json.dumps({"id": case_id, "input": 1}) + "\n", encoding="utf-8")
    [loaded] = load_cases("cases.jsonl", tmp_path)
    assert loaded.id == case_id


def test_a_surrogate_pair_escape_is_one_character(tmp_path: Path) -> None:
    (tmp_path / "cases.jsonl").write_text('{"id": "a\\ud83d\\ude00", "input": 1}\n', encoding="utf-8")
    assert [c.id for c in load_cases("cases.jsonl", tmp_path)] == ["a\U0001f600"]


def test_bom_and_crlf_are_read_as_plain_lines(tmp_path: Path) -> None:
    text = GOOD + "\r\n" + GOOD.replace("ok", "ok2") + "\r\n"
    (tmp_path / "cases.jsonl").write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert [c.id for c in load_cases("cases.jsonl", tmp_path)] == ["ok", "ok2"]


# --- oloproof.yaml -------------------------------------------------------------------------

CONFIG = "system:\n  name: s\n  object: app:answer\ncases: cases.jsonl\n"

#: (text added to a valid config, phrases the error must hold)
BAD_CONFIGS = {
    "timeout_inf": ("timeout_s: .inf\n", ["timeout_s", "finite"]),
    "timeout_huge": ("timeout_s: 1e300\n", ["timeout_s", "less than or equal to 604800"]),
    "max_cost_nan": ("max_cost: .nan\npricing: {m: {input: 1, output: 1}}\n", ["max_cost", "finite"]),
    "price_inf": ("pricing: {m: {input: .inf, output: 1}}\n", ["pricing.m.input", "finite"]),
    "store_empty": ("store: ''\n", ["store", "at least 1 character"]),
    "store_under_a_file": ("store: cases.jsonl/runs\n", [":5: store:", "cases.jsonl is a file"]),
    "unclosed_variable": ("store: ${OLO_STORE\n", [":5: store:", "without its closing"]),
    "deep_nesting": ("x: " + "[" * 50_000 + "]" * 50_000 + "\n", ["oloproof.yaml", "nested too deeply"]),
    "alias_bomb": (
        "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
        + "".join(f"{n}: &{n} [{', '.join([f'*{p}'] * 10)}]\n" for p, n in zip("abcdef", "bcdefg", strict=True)),
        ["aliases", "more than 100,000 values"],
    ),
}


@pytest.mark.parametrize("name", sorted(BAD_CONFIGS))
def test_bad_config_is_a_precise_error(tmp_path: Path, name: str) -> None:
    extra, phrases = BAD_CONFIGS[name]
    (tmp_path / "cases.jsonl").write_text(GOOD + "\n", encoding="utf-8")
    path = tmp_path / "oloproof.yaml"
    path.write_text(CONFIG + extra, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert message.startswith(str(path.resolve())), message
    for phrase in phrases:
        assert phrase in message, message


@pytest.mark.parametrize(
    ("module", "phrases"),
    [
        ("import sys\nsys.exit(3)\n", ["importing module", "raised SystemExit: 3"]),
        (None, ["relative module", "without the leading dot"]),
    ],
    ids=["exits_at_import", "relative_name"],
)
def test_a_system_object_that_cannot_be_imported_is_a_config_error(
    tmp_path: Path, module: str | None, phrases: list[str]
) -> None:
    from pytest_oloproof.system.declare import load_object

    spec = ".app:answer"
    if module is not None:
        name = f"olo_exits_{tmp_path.name.replace('-', '_')}"
        (tmp_path / f"{name}.py").write_text(module, encoding="utf-8")
        spec = f"{name}:answer"
    with pytest.raises(ConfigError) as info:
        load_object(spec, tmp_path, what="system.object")
    for phrase in phrases:
        assert phrase in str(info.value)


# --- metrics that must never hang on a big number ------------------------------------------


def test_ndcg_with_a_huge_k_is_computed_over_what_exists() -> None:
    qrels = {"d1": 1, "d2": 1}
    assert metrics.ndcg(["d1", "x"], qrels, 10**12) == metrics.ndcg(["d1", "x"], qrels, 2)


def test_exponential_gain_refuses_a_grade_no_float_holds() -> None:
    assert metrics.ndcg(["d1"], {"d1": 1000}, 1, gain="exponential") == 1.0
    with pytest.raises(ValueError, match="too large for gain: exponential"):
        metrics.ndcg(["d1"], {"d1": 10**13}, 1, gain="exponential")  # 2**10**13 used to run out of memory


# --- the store --------------------------------------------------------------------------------


def test_a_complete_run_that_lost_case_lines_is_damage(pytester: pytest.Pytester) -> None:
    rag_project(pytester, [case("a"), case("b"), case("c")])
    pytester.runpytest("--oloproof", "-p", "no:cacheprovider").assert_outcomes(passed=3)
    store = Store(pytester.path / ".oloproof")
    [run_id] = store.run_ids()
    lines = (store.run_dir(run_id) / "cases.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    (store.run_dir(run_id) / "cases.jsonl").write_text("".join(lines[:2]), encoding="utf-8")  # a whole line gone
    with pytest.raises(StoreError, match=r"holds 2 case records, but run\.json counts 3"):
        store.load_run(run_id)
    (store.run_dir(run_id) / "cases.jsonl").unlink()
    with pytest.raises(StoreError, match=r"holds 0 case records, but run\.json counts 3"):
        store.load_run(run_id)


# --- the plugin: usage errors run nothing and record nothing ------------------------------------


@pytest.mark.parametrize(
    "args",
    [("-k", "and ("), ("--strict-markers", "-m", "nosuch")],
    ids=["bad_k_expression", "unknown_marker"],
)
def test_a_bad_selection_runs_no_case_and_records_no_run(pytester: pytest.Pytester, args: tuple[str, ...]) -> None:
    rag_project(pytester, [case("a"), case("b")], extra="concurrency: 4\n")
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR  # pytest's own code; `oloproof run` makes it 2
    assert calls(pytester) == []
    assert_nothing_written(pytester.path)


@pytest.mark.parametrize(
    ("option", "value", "phrase"),
    [
        ("--oloproof-report", ".", "is a folder"),
        ("--oloproof-html", ".", "is a folder"),
        ("--oloproof-report", "cases.jsonl/r.json", "is a file, so nothing can be written under it"),
    ],
)
def test_a_report_path_that_cannot_be_written_stops_before_any_case(
    pytester: pytest.Pytester, option: str, value: str, phrase: str
) -> None:
    rag_project(pytester, [case("a")])
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider", f"{option}={value}")
    assert result.ret == 2
    result.stdout.fnmatch_lines([f"*Oloproof cannot start: {option}: *{phrase}*"])
    assert calls(pytester) == []
    assert_nothing_written(pytester.path)


def test_a_case_file_with_a_lone_surrogate_stops_the_run_before_anything_runs(pytester: pytest.Pytester) -> None:
    rag_project(pytester, [case("a"), '{"id": "b\\udc00", "input": {"q": "b"}}'])
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider")
    assert result.ret == 2
    result.stdout.fnmatch_lines(["*cases.jsonl:2: a lone surrogate escape*"])
    assert calls(pytester) == []
    assert_nothing_written(pytester.path)


# --- the command line ------------------------------------------------------------------------------


def oloproof(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_oloproof.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    ("flag", "value", "phrase"),
    [
        ("--min-kappa", "nan", "expected a number from -1 to 1, got 'nan'"),
        ("--min-kappa", "5", "expected a number from -1 to 1"),
        ("--min-accuracy", "-1", "expected a number from 0 to 1"),
        ("--min-labels", "-5", "expected a positive integer, got '-5'"),
    ],
)
def test_validate_judge_thresholds_out_of_range_are_usage_errors(
    tmp_path: Path, flag: str, value: str, phrase: str
) -> None:
    proc = oloproof(tmp_path, "validate-judge", "--criterion", "g", "--labels", "l.jsonl", flag, value)
    assert proc.returncode == 2, proc.stderr
    assert phrase in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_store_that_cannot_be_created_is_a_usage_error_before_any_case(pytester: pytest.Pytester) -> None:
    rag_project(pytester, [case("a")], extra="store: cases.jsonl/store\n")
    proc = oloproof(pytester.path, "run", "-p", "no:cacheprovider")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "store: " in proc.stdout and "cases.jsonl is a file; name a folder" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr
    assert calls(pytester) == []
    assert run_records(pytester.path / ".oloproof") == []


def test_a_policy_path_that_is_a_folder_says_so(tmp_path: Path) -> None:
    from pytest_oloproof.compare.policy import load_policy

    with pytest.raises(ConfigError, match="is a folder; give the path of a policy file"):
        load_policy(tmp_path)
