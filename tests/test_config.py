"""oloproof.yaml: exact error messages, and every error stops the run before anything executes."""

from __future__ import annotations

from pathlib import Path

import pytest
from staged_helpers import (
    RAG_SOURCE,
    assert_nothing_written,
    calls,
    case,
    cases_text,
    config_text,
    last_run,
    unique_module,
)

from pytest_oloproof.config.settings import find_config, load_config
from pytest_oloproof.engine.setup import RunSetup
from pytest_oloproof.errors import ConfigError

BASE = """system:
  name: s
  rag:
    object: {module}:System
    depth: 3
    top_k: 2
cases: cases.jsonl
evaluators:
  - {type: contains, criterion: answer_correct}
  - {type: hit_rate, k: 2}
  - {type: recall, k: 2}
"""

#: (how to break BASE, the exact message after "<path>")
BROKEN = {
    "close_spelling": (("top_k: 2", "topk: 2"), ":6: system.rag.topk: unknown key; did you mean top_k?"),
    "top_level_spelling": (
        ("cases: cases.jsonl", "cases: cases.jsonl\nconcurency: 3"),
        ":8: concurency: unknown key; did you mean concurrency?",
    ),
    "evaluator_type": (
        ("{type: recall, k: 2}", "{type: recall, k: two}"),
        ":11: evaluators[2].k: expected a valid integer, unable to parse string as an integer, got 'two'",
    ),
    "evaluator_key_spelling": (
        ("{type: recall, k: 2}", "{type: recall, kk: 2}"),
        ":11: evaluators[2].kk: unknown key for recall; did you mean k?",
    ),
    "setting_type": (
        ("depth: 3", "depth: three"),
        ":5: system.rag.depth: expected a valid integer, unable to parse string as an integer, got 'three'",
    ),
    "setting_value": (("depth: 3", "depth: 0"), ":5: system.rag.depth: expected greater than or equal to 1, got 0"),
    # numpy's generators take no negative seed: the intervals would fail after the run
    "negative_seed": (
        ("cases: cases.jsonl", "cases: cases.jsonl\nseed: -1"),
        ":8: seed: expected greater than or equal to 0, got -1",
    ),
    "missing_required": (("cases: cases.jsonl\n", ""), ":1: cases: required key is missing"),
    "missing_required_nested": (
        ("    object: {module}:System\n", ""),
        ":3: system.rag.object: required key is missing",
    ),
    "evaluator_value": (
        ("{type: recall, k: 2}", "{type: regex, criterion: r, pattern: 'a('}"),
        ":11: evaluators[2].pattern: 'a(' is not a valid regular expression: "
        "missing ), unterminated subpattern at position 1; escape special characters",
    ),
    "invalid_yaml": (("top_k: 2", "top_k: [2"), ":7:6: invalid YAML: expected ',' or ']', but got ':'"),
    "unset_variable": (
        ("name: s", "name: ${OLOPROOF_TEST_UNSET}"),
        ":2: system.name: environment variable OLOPROOF_TEST_UNSET is not set "
        "(export it, write ${OLOPROOF_TEST_UNSET:-default}, or write the value instead of ${OLOPROOF_TEST_UNSET})",
    ),
    "top_k_over_depth": (("top_k: 2", "top_k: 5"), ":6: system.rag.top_k: 5 is larger than depth 3"),
    # an empty name silently became the class's name (not even the decorator's)
    "empty_name": (
        ("name: s", "name: ''"),
        ":2: system.name: expected a non-empty name, got ''; give the system a name (e.g. name: support-rag), "
        "or leave the key out to use the @rag_system name (else the class or function name)",
    ),
    "blank_rag_name": (
        ("    depth: 3", "    depth: 3\n    name: '  '"),
        ":6: system.rag.name: expected a non-empty name, got '  '; give the system a name (e.g. name: support-rag), "
        "or leave the key out to use the @rag_system name (else the class or function name)",
    ),
    "bad_object_form": (("{module}:System", "{module}.System"), None),
    "unknown_module": (("{module}:System", "no_such_module_xyz:System"), None),
    "unknown_attribute": (("{module}:System", "{module}:Nope"), None),
}


def broken_text(module: str, name: str) -> str:
    (old, new), _ = BROKEN[name]
    assert old in BASE, name
    return BASE.replace(old, new).replace("{module}", module)


def expected_message(path: Path, module: str, name: str) -> str:
    msg = BROKEN[name][1]
    if msg is not None:
        return f"{path}{msg}"
    return (
        f"{path}:4: "
        + {
            "bad_object_form": f"system.rag.object: '{module}.System' is not of the form module:attribute "
            "(e.g. app:SupportRag)",
            "unknown_module": "system.rag.object: cannot import module 'no_such_module_xyz' for "
            "'no_such_module_xyz:System': No module named 'no_such_module_xyz'",
            "unknown_attribute": f"system.rag.object: module '{module}' has no attribute 'Nope' (from '{module}:Nope')",
        }[name]
    )


def write_project(root: Path, name: str) -> str:
    module = unique_module()
    (root / f"{module}.py").write_text(RAG_SOURCE.replace("{settings}", "depth=3"), encoding="utf-8")
    (root / "cases.jsonl").write_text(cases_text([case("c1")]), encoding="utf-8")
    (root / "oloproof.yaml").write_text(broken_text(module, name), encoding="utf-8")
    return module


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_config_error_message(tmp_path: Path, name: str) -> None:
    module = write_project(tmp_path, name)
    path = (tmp_path / "oloproof.yaml").resolve()
    with pytest.raises(ConfigError) as info:
        RunSetup.load(path)
    assert str(info.value) == expected_message(path, module, name)


@pytest.mark.parametrize(
    "name", ["close_spelling", "evaluator_type", "invalid_yaml", "unset_variable", "unknown_module", "empty_name"]
)
def test_config_error_stops_the_run_before_anything_runs(pytester: pytest.Pytester, name: str) -> None:
    module = write_project(pytester.path, name)
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider")
    assert result.ret == 2
    path = (pytester.path / "oloproof.yaml").resolve()
    result.stdout.fnmatch_lines(
        ["*Oloproof cannot start*", f"*{expected_message(path, module, name)}*".replace("[", "?").replace("]", "?")]
    )
    assert calls(pytester) == []
    assert_nothing_written(pytester.path)


def test_variables_are_expanded_and_the_raw_text_is_recorded(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = unique_module()
    pytester.makepyfile(**{module: RAG_SOURCE.replace("{settings}", "depth=3")})
    pytester.makefile(".jsonl", cases=cases_text([case("c1")]))
    text = config_text(module, rag={"top_k": 2}).replace("name: sys", "name: ${OLOPROOF_TEST_NAME}-rag")
    pytester.makefile(".yaml", oloproof=text)
    monkeypatch.setenv("OLOPROOF_TEST_NAME", "xq7-expanded")
    assert load_config(pytester.path / "oloproof.yaml").settings.system.name == "xq7-expanded-rag"
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider", "-v")
    result.assert_outcomes(passed=1)
    record = last_run(pytester)
    # a value from the environment may be a secret: everything written spells it as the reference
    assert record["system"]["name"] == "${OLOPROOF_TEST_NAME}-rag"
    assert record["config"]["system"]["name"] == "${OLOPROOF_TEST_NAME}-rag"
    assert "xq7-expanded" not in result.stdout.str()
    result.stdout.fnmatch_lines(["*${OLOPROOF_TEST_NAME}-rag?c1? PASSED*"])


def test_decorator_settings_are_overridden_by_the_file(pytester: pytest.Pytester) -> None:
    module = unique_module()
    settings = 'name="from-decorator", version="v1", depth=4, top_k=1, token_budget=3, index_version="i1"'
    pytester.makepyfile(**{module: RAG_SOURCE.replace("{settings}", settings)})
    pytester.makefile(".jsonl", cases=cases_text([case("c1")]))
    yaml = f"system:\n  rag:\n    object: {module}:System\n    top_k: 3\n    token_budget: 100\ncases: cases.jsonl\n"
    pytester.makefile(".yaml", oloproof=yaml)
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider", "-v")
    result.stdout.fnmatch_lines(["*oloproof.yaml::from-decorator?c1? PASSED*"])
    system = last_run(pytester)["system"]
    assert {k: system[k] for k in ("name", "version", "depth", "top_k", "token_budget", "index_version")} == {
        "name": "from-decorator",
        "version": "v1",
        "depth": 4,
        "top_k": 3,
        "token_budget": 100,
        "index_version": "i1",
    }
    assert by_context(pytester) == [1, 2, 3]


def by_context(pytester: pytest.Pytester) -> list[int]:
    return last_run(pytester)["cases"][0]["context"]


def test_object_is_imported_relative_to_the_config_folder(pytester: pytest.Pytester) -> None:
    """--oloproof-config in another folder: its module is found there, its cases and store are there."""
    proj = pytester.mkdir("proj")
    module = unique_module()
    (proj / f"{module}.py").write_text(RAG_SOURCE.replace("{settings}", "depth=3, top_k=2"), encoding="utf-8")
    (proj / "cases.jsonl").write_text(cases_text([case("c1")]), encoding="utf-8")
    (proj / "oloproof.yaml").write_text(config_text(module), encoding="utf-8")
    pytester.makepyfile(test_plain="def test_ok():\n    pass\n")
    result = pytester.runpytest("--oloproof", "--oloproof-config", "proj/oloproof.yaml", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    assert (proj / ".oloproof" / "runs").is_dir()
    assert not (pytester.path / ".oloproof").exists()


def test_ini_option_names_the_config(pytester: pytest.Pytester) -> None:
    proj = pytester.mkdir("evals")
    module = unique_module()
    (proj / f"{module}.py").write_text(RAG_SOURCE.replace("{settings}", "depth=3, top_k=2"), encoding="utf-8")
    (proj / "cases.jsonl").write_text(cases_text([case("c1"), case("c2")]), encoding="utf-8")
    (proj / "olo.yaml").write_text(config_text(module), encoding="utf-8")
    pytester.makeini("[pytest]\noloproof_config = evals/olo.yaml\n")
    sub = pytester.mkdir("sub")
    # relative to the ini file, wherever pytest is invoked from
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(sub)
        result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider", str(pytester.path))
    result.assert_outcomes(passed=2)
    assert len(list((proj / ".oloproof" / "runs").iterdir())) == 1


def test_no_config_found_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="def test_ok():\n    pass\n")
    # in a process of its own: the exit comes from pytest_configure, before pytester's in-process recorder
    result = pytester.runpytest_subprocess("--oloproof", "-p", "no:cacheprovider")
    assert result.ret == 2
    result.stderr.fnmatch_lines(
        ["Exit: Oloproof cannot start: no oloproof.yaml in *create one or pass --oloproof-config PATH"]
    )
    # one clear message, printed once, not again as `_pytest.outcomes.Exit`
    everything = result.stdout.str() + result.stderr.str()
    assert everything.count("Oloproof cannot start") == 1 and "_pytest.outcomes" not in everything
    assert "test_ok" not in everything
    assert not (pytester.path / ".oloproof").exists()


def test_explicit_config_that_does_not_exist(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess("--oloproof", "--oloproof-config", "nope.yaml", "-p", "no:cacheprovider")
    assert result.ret == 2
    result.stderr.fnmatch_lines([f"*--oloproof-config: {pytester.path / 'nope.yaml'} does not exist*"])


def test_find_config_prefers_the_explicit_path(tmp_path: Path) -> None:
    (tmp_path / "oloproof.yaml").write_text("x: 1\n")
    other = tmp_path / "other.yaml"
    other.write_text("x: 1\n")
    assert find_config(None, tmp_path, tmp_path) == (tmp_path / "oloproof.yaml").resolve()
    assert find_config("other.yaml", tmp_path, tmp_path) == other.resolve()


def test_both_system_kinds_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "oloproof.yaml"
    path.write_text("system:\n  object: a:b\n  rag:\n    object: a:C\ncases: c.jsonl\n")
    with pytest.raises(ConfigError, match=r"oloproof.yaml:1: system: give exactly one of system.rag.object"):
        load_config(path)


def test_module_that_fails_on_import_is_a_config_error_with_its_traceback(tmp_path: Path) -> None:
    module = unique_module()
    (tmp_path / f"{module}.py").write_text(
        "def helper():\n    raise RuntimeError('no API key in this shell')\n\nhelper()\n"
    )
    (tmp_path / "cases.jsonl").write_text(cases_text([case("c1")]))
    (tmp_path / "oloproof.yaml").write_text(config_text(module, attr="answer", plain=True))
    with pytest.raises(ConfigError) as info:
        RunSetup.load(tmp_path / "oloproof.yaml")
    msg = str(info.value)
    assert msg.startswith(
        f"{(tmp_path / 'oloproof.yaml').resolve()}:3: "
        f"system.object: importing module '{module}' for '{module}:answer' raised RuntimeError: "
        "no API key in this shell"
    )
    assert "in helper" in msg


@pytest.mark.parametrize("plain", [False, True], ids=["rag", "plain-callable"])
def test_an_empty_system_name_from_a_variable_is_an_error_not_a_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plain: bool
) -> None:
    monkeypatch.setenv("OLOPROOF_TEST_EMPTY", "")
    module = unique_module()
    (tmp_path / f"{module}.py").write_text(
        RAG_SOURCE.replace("{settings}", "depth=3") + "\ndef answer(x):\n    return x\n"
    )
    (tmp_path / "cases.jsonl").write_text(cases_text([case("c1")]), encoding="utf-8")
    cfg = config_text(module, attr="answer" if plain else "System", plain=plain, name="${OLOPROOF_TEST_EMPTY:-}")
    (tmp_path / "oloproof.yaml").write_text(cfg, encoding="utf-8")
    with pytest.raises(ConfigError, match=r"oloproof.yaml:2: system.name: expected a non-empty name, got ''"):
        RunSetup.load(tmp_path / "oloproof.yaml")


def test_an_empty_decorator_name_is_an_error_unless_the_file_names_the_system(tmp_path: Path) -> None:
    module = unique_module()
    (tmp_path / f"{module}.py").write_text(RAG_SOURCE.replace("{settings}", "name='', depth=3"), encoding="utf-8")
    (tmp_path / "cases.jsonl").write_text(cases_text([case("c1")]), encoding="utf-8")
    path = tmp_path / "oloproof.yaml"
    path.write_text(config_text(module).replace("  name: sys\n", ""), encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        RunSetup.load(path)
    assert str(info.value) == (
        f"{path.resolve()}:3: @rag_system on {module}:System: name='': expected a non-empty name "
        "(fix the decorator or set it in oloproof.yaml)"
    )
    path.write_text(config_text(module, name="named-here"), encoding="utf-8")  # the file wins over the decorator
    ev = RunSetup.load(path)
    try:
        assert ev.system.config["name"] == "named-here"
    finally:
        ev.caches.close()
