"""Issue 12 §4: every configuration mistake is an error naming the file, the line and the key path.

A table of broken oloproof.yaml files, each loaded the way a run loads it
(`RunSetup.load`: config, system, evaluators, case files). Each message must
hold `<file>:<line>:` with the line the mistake is on, followed by the key path.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from staged_helpers import RAG_SOURCE, case, cases_text, unique_module

from pytest_oloproof.config.settings import load_config
from pytest_oloproof.engine.setup import RunSetup
from pytest_oloproof.errors import OloproofError

BASE = """system:
  name: s
  version: v1
  rag:
    object: {module}:System
    depth: 3
    top_k: 2
cases: cases.jsonl
evaluators:
  - {type: contains, criterion: answer_correct}
  - {type: hit_rate, k: 2}
store: .store
"""

JUDGE = "  - {type: groundedness_judge, provider: python, object: '{module}:judge'"


@dataclass(frozen=True)
class Bad:
    """How to break BASE, the key path the error must name, and the text on the line it must name."""

    old: str
    new: str
    key: str
    marker: str  # the error's line is the line holding this text (its `nth` occurrence) in the broken file
    nth: int = 1
    source: tuple[str, str] = ("", "")  # a change to the system module
    files: dict[str, str] = field(default_factory=dict)


def judge(extra: str) -> Bad:
    """An added groundedness judge (evaluators[2]) with `extra` settings."""
    line = "  - {type: groundedness_judge" + extra + "}\n"
    return Bad("store: .store", line + "store: .store", "", "groundedness_judge")


def _j(extra: str, key: str) -> Bad:
    b = judge(extra)
    return Bad(b.old, b.new, key, b.marker)


TABLE: dict[str, Bad] = {
    # ---- system.rag
    "depth_bool": Bad("depth: 3", "depth: true", "system.rag.depth", "depth: true"),
    "depth_zero": Bad("depth: 3", "depth: 0", "system.rag.depth", "depth: 0"),
    "depth_word": Bad("depth: 3", "depth: three", "system.rag.depth", "depth: three"),
    "depth_fraction": Bad("depth: 3", "depth: 2.5", "system.rag.depth", "depth: 2.5"),
    "depth_list": Bad("depth: 3", "depth: [3]", "system.rag.depth", "depth: [3]"),
    "depth_missing": Bad("    depth: 3\n", "", "system.rag.depth", "rag:"),
    "top_k_bool": Bad("top_k: 2", "top_k: false", "system.rag.top_k", "top_k: false"),
    "top_k_zero": Bad("top_k: 2", "top_k: 0", "system.rag.top_k", "top_k: 0"),
    "top_k_over_depth": Bad("top_k: 2", "top_k: 5", "system.rag.top_k", "top_k: 5"),
    "token_budget_bool": Bad("top_k: 2", "top_k: 2\n    token_budget: true", "system.rag.token_budget", "token_budget"),
    "token_budget_without_count_tokens": Bad(
        "top_k: 2",
        "top_k: 2\n    token_budget: 100",
        "system.rag.token_budget",
        "token_budget",
        source=("def count_tokens", "def _no_count_tokens"),
    ),
    "object_form": Bad("{module}:System", "{module}.System", "system.rag.object", "object:"),
    "object_no_module": Bad("{module}:System", "no_such_module_olo:System", "system.rag.object", "object:"),
    "object_no_attribute": Bad("{module}:System", "{module}:Nope", "system.rag.object", "object:"),
    "object_import_raises": Bad(
        "{module}:System",
        "{module}:System",
        "system.rag.object",
        "object:",
        source=("import json, os", "import json, os\nraise RuntimeError('no key in this shell')"),
    ),
    "object_not_rag": Bad("{module}:System", "{module}:_log", "system.rag.object", "object:"),
    "object_not_string": Bad("{module}:System", "[1]", "system.rag.object", "object:"),
    "rag_key_spelling": Bad("top_k: 2", "topk: 2", "system.rag.topk", "topk"),
    "index_version_list": Bad(
        "top_k: 2", "top_k: 2\n    index_version: [a]", "system.rag.index_version", "index_version"
    ),
    # ---- system
    "system_key_spelling": Bad("  name: s", "  nme: s", "system.nme", "nme:"),
    "system_name_list": Bad("  name: s", "  name: [s]", "system.name", "name: [s]"),
    "system_version_number": Bad("version: v1", "version: 1.0", "system.version", "version: 1.0"),
    "system_both_kinds": Bad("  version: v1", "  version: v1\n  object: '{module}:System'", "system", "system:"),
    "system_neither_kind": Bad(
        "  rag:\n    object: {module}:System\n    depth: 3\n    top_k: 2\n", "", "system", "system:"
    ),
    "system_not_mapping": Bad(
        "system:\n  name: s\n  version: v1\n  rag:\n    object: {module}:System\n    depth: 3\n    top_k: 2\n",
        "system: 5\n",
        "system",
        "system:",
    ),
    "system_missing": Bad(
        "system:\n  name: s\n  version: v1\n  rag:\n    object: {module}:System\n    depth: 3\n    top_k: 2\n",
        "",
        "system",
        "cases:",
    ),
    "plain_object_not_callable": Bad(
        "  rag:\n    object: {module}:System\n    depth: 3\n    top_k: 2\n",
        "  object: {module}:KB\n",
        "system.object",
        "object:",
    ),
    "plain_object_no_module": Bad(
        "  rag:\n    object: {module}:System\n    depth: 3\n    top_k: 2\n",
        "  object: nowhere_olo:fn\n",
        "system.object",
        "object:",
    ),
    # ---- cases
    "cases_number": Bad("cases: cases.jsonl", "cases: 5", "cases", "cases: 5"),
    "cases_list_of_number": Bad("cases: cases.jsonl", "cases: [5]", "cases", "cases: [5]"),
    "cases_mapping": Bad("cases: cases.jsonl", "cases: {a: 1}", "cases", "cases: {a"),
    "cases_no_file": Bad("cases: cases.jsonl", "cases: nope.jsonl", "cases", "cases: nope"),
    "cases_glob_no_match": Bad("cases: cases.jsonl", "cases: 'gone/*.jsonl'", "cases", "cases: 'gone"),
    "cases_list_entry_missing": Bad(
        "cases: cases.jsonl", "cases:\n  - cases.jsonl\n  - gone.jsonl", "cases[1]", "gone.jsonl"
    ),
    "cases_empty_entry": Bad("cases: cases.jsonl", "cases:\n  - cases.jsonl\n  - ''", "cases[1]", "- ''"),
    "cases_missing": Bad("cases: cases.jsonl\n", "", "cases", "system:"),
    # ---- top-level settings
    "unknown_top_level_key": Bad("store: .store", "store: .store\nconcurency: 2", "concurency", "concurency"),
    "concurrency_zero": Bad("store: .store", "store: .store\nconcurrency: 0", "concurrency", "concurrency"),
    "concurrency_bool": Bad("store: .store", "store: .store\nconcurrency: true", "concurrency", "concurrency"),
    "concurrency_word": Bad("store: .store", "store: .store\nconcurrency: many", "concurrency", "concurrency"),
    "confidence_high": Bad("store: .store", "store: .store\nconfidence: 1.5", "confidence", "confidence"),
    "confidence_low": Bad("store: .store", "store: .store\nconfidence: 0.3", "confidence", "confidence"),
    "confidence_bool": Bad("store: .store", "store: .store\nconfidence: true", "confidence", "confidence"),
    "timeout_zero": Bad("store: .store", "store: .store\ntimeout_s: 0", "timeout_s", "timeout_s"),
    "timeout_bool": Bad("store: .store", "store: .store\ntimeout_s: true", "timeout_s", "timeout_s"),
    "retries_negative": Bad("store: .store", "store: .store\nretries: -1", "retries", "retries"),
    "retries_bool": Bad("store: .store", "store: .store\nretries: yes", "retries", "retries"),
    "seed_bool": Bad("store: .store", "store: .store\nseed: true", "seed", "seed"),
    "seed_word": Bad("store: .store", "store: .store\nseed: x", "seed", "seed"),
    "min_slice_support_zero": Bad(
        "store: .store", "store: .store\nmin_slice_support: 0", "min_slice_support", "min_slice"
    ),
    "min_slice_support_bool": Bad(
        "store: .store", "store: .store\nmin_slice_support: true", "min_slice_support", "min_slice"
    ),
    "slices_unknown": Bad("store: .store", "store: .store\nslices: [bogus]", "slices", "slices"),
    "slices_not_list": Bad("store: .store", "store: .store\nslices: 5", "slices", "slices"),
    "markers_not_list": Bad("store: .store", "store: .store\nmarkers: 5", "markers", "markers"),
    "store_list": Bad("store: .store", "store: [a]", "store", "store"),
    "store_is_a_file": Bad("store: .store", "store: a-file.txt", "store", "store", files={"a-file.txt": "x"}),
    # ---- YAML itself
    "duplicate_key_nested": Bad("depth: 3", "depth: 6\n    depth: 3", "system.rag.depth", "depth: 3"),
    "duplicate_key_top": Bad("store: .store", "store: .store\ncases: other.jsonl", "cases", "cases: other"),
    "duplicate_key_flow": Bad(
        "{type: contains, criterion: answer_correct}",
        "{type: contains, criterion: answer_correct, criterion: again}",
        "evaluators[0].criterion",
        "again",
    ),
    "bad_variable_name": Bad("  name: s", "  name: ${1BAD}", "system.name", "1BAD"),
    "unset_variable": Bad("  name: s", "  name: ${OLO_TABLE_UNSET}", "system.name", "OLO_TABLE_UNSET"),
    "unsupported_expansion": Bad("  name: s", "  name: '${OLO_TABLE_UNSET:?say}'", "system.name", "OLO_TABLE"),
    "empty_variable_reference": Bad("version: v1", "version: x${}", "system.version", "x${}"),
    # ---- evaluators
    "evaluators_not_list": Bad(
        "evaluators:\n  - {type: contains, criterion: answer_correct}\n  - {type: hit_rate, k: 2}\n",
        "evaluators: 5\n",
        "evaluators",
        "evaluators",
    ),
    "evaluator_unknown_type": Bad("{type: contains,", "{type: containz,", "evaluators[0].type", "containz"),
    "evaluator_type_missing": Bad("{type: hit_rate, k: 2}", "{k: 2}", "evaluators[1].type", "{k: 2}"),
    "evaluator_k_bool": Bad("{type: hit_rate, k: 2}", "{type: hit_rate, k: true}", "evaluators[1].k", "hit_rate"),
    "evaluator_k_word": Bad("{type: hit_rate, k: 2}", "{type: hit_rate, k: two}", "evaluators[1].k", "hit_rate"),
    "evaluator_k_zero": Bad("{type: hit_rate, k: 2}", "{type: hit_rate, k: 0}", "evaluators[1].k", "hit_rate"),
    "evaluator_key_spelling": Bad("{type: hit_rate, k: 2}", "{type: hit_rate, kk: 2}", "evaluators[1].kk", "kk"),
    "evaluator_assert_word": Bad(
        "{type: hit_rate, k: 2}", "{type: hit_rate, k: 2, assert: maybe}", "evaluators[1].assert", "maybe"
    ),
    "evaluator_bad_regex": Bad(
        "{type: hit_rate, k: 2}", "{type: regex, criterion: r, pattern: 'a('}", "evaluators[1].pattern", "regex"
    ),
    "duplicate_criterion": Bad(
        "{type: hit_rate, k: 2}", "{type: contains, criterion: answer_correct}", "evaluators[1].criterion", "- {", 2
    ),
    "duplicate_default_criterion": Bad(
        "{type: hit_rate, k: 2}", "{type: hit_rate, k: 2}\n  - {type: hit_rate, k: 2}", "evaluators[2]", "- {", 3
    ),
    # ---- judges (evaluators[2])
    "judge_unknown_provider": _j(", provider: nope", "evaluators[2].provider"),
    "judge_python_without_object": _j(", provider: python", "evaluators[2].object"),
    "judge_object_form": _j(", provider: python, object: nocolon", "evaluators[2].object"),
    "judge_object_no_module": _j(", provider: python, object: 'nowhere_olo:fn'", "evaluators[2].object"),
    "judge_object_no_attribute": _j(", provider: python, object: '{module}:nothing'", "evaluators[2].object"),
    "judge_object_not_callable": _j(", provider: python, object: '{module}:KB'", "evaluators[2].object"),
    "judge_prompt_file_missing": _j(
        ", provider: python, object: '{module}:_log', prompt: missing.txt", "evaluators[2].prompt"
    ),
    "judge_prompt_placeholders": _j(
        ", provider: python, object: '{module}:_log', prompt: 'judge {answer}'", "evaluators[2].prompt"
    ),
    "judge_openai_without_model": _j(", provider: openai", "evaluators[2].model"),
    "judge_concurrency_zero": _j(", model: m, concurrency: 0", "evaluators[2].concurrency"),
    "judge_timeout_bool": _j(", model: m, timeout_s: true", "evaluators[2].timeout_s"),
    "judge_api_key_env_unset": _j(", model: m, api_key_env: OLO_TABLE_NO_KEY", "evaluators[2].api_key_env"),
    "judge_api_key_env_not_a_name": _j(", model: m, api_key_env: 5", "evaluators[2].api_key_env"),
    "judge_unknown_key": _j(", model: m, temprature: 0", "evaluators[2].temprature"),
}


def broken(module: str, bad: Bad) -> str:
    assert bad.old in BASE, bad
    return BASE.replace(bad.old, bad.new, 1).replace("{module}", module)


def expected_line(text: str, bad: Bad) -> int:
    hits = [i for i, line in enumerate(text.splitlines(), 1) if bad.marker.replace("{module}", "") in line]
    assert len(hits) >= bad.nth, (bad.marker, text)
    return hits[bad.nth - 1]


def write(root: Path, bad: Bad) -> tuple[Path, str]:
    module = unique_module()
    old, new = bad.source
    source = RAG_SOURCE.replace("{settings}", "")
    if old:
        assert old in source
        source = source.replace(old, new)
    (root / f"{module}.py").write_text(source, encoding="utf-8")
    (root / "cases.jsonl").write_text(cases_text([case("c1")]), encoding="utf-8")
    for name, content in bad.files.items():
        (root / name).write_text(content, encoding="utf-8")
    text = broken(module, bad)
    (root / "oloproof.yaml").write_text(text, encoding="utf-8")
    return (root / "oloproof.yaml").resolve(), text


def test_the_table_is_large() -> None:
    assert len(TABLE) >= 60


@pytest.mark.parametrize("name", sorted(TABLE))
def test_every_config_error_names_file_line_and_key_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.delenv("OLO_TABLE_UNSET", raising=False)
    monkeypatch.delenv("OLO_TABLE_NO_KEY", raising=False)
    bad = TABLE[name]
    path, text = write(tmp_path, bad)
    with pytest.raises(OloproofError) as info:
        RunSetup.load(path)
    message = str(info.value)
    line = expected_line(text, bad)
    located = re.compile(rf"^\s*{re.escape(str(path))}:{line}(:\d+)?: {re.escape(bad.key)}: ")
    assert any(located.match(m) for m in message.splitlines()), f"want {path.name}:{line}: {bad.key}: …, got\n{message}"
    assert not (tmp_path / ".store").exists()  # nothing ran, nothing was written


def test_duplicate_key_names_both_lines(tmp_path: Path) -> None:
    path, _ = write(tmp_path, TABLE["duplicate_key_nested"])
    with pytest.raises(OloproofError) as info:
        load_config(path)
    assert str(info.value) == f"{path}:7: system.rag.depth: duplicate key (first given on line 6); keep one of them"


def test_non_utf8_byte_is_an_error_with_file_and_offset(tmp_path: Path) -> None:
    path, text = write(tmp_path, Bad("", "", "", ""))
    data = text.encode("utf-8").replace(b"name: s", b"name: s\xe9")
    path.write_bytes(data)
    with pytest.raises(OloproofError) as info:
        load_config(path)
    offset = data.index(b"\xe9")
    assert str(info.value) == f"{path}:2: byte {offset}: not UTF-8 (0xe9); save the file as UTF-8"


def test_non_utf8_compare_yaml_is_an_error_with_file_and_offset(tmp_path: Path) -> None:
    from pytest_oloproof.compare.policy import load_policy

    policy = tmp_path / "compare.yaml"
    policy.write_bytes(b"decisions:\n  - criterion: caf\xc3\n")
    with pytest.raises(OloproofError) as info:
        load_policy(policy)
    assert str(info.value).startswith(f"{policy}:2: byte 29: not UTF-8 (0xc3)")


def test_variable_defaults_work_as_in_the_shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OLO_UNSET", raising=False)
    monkeypatch.setenv("OLO_EMPTY", "")
    path, _ = write(tmp_path, Bad("version: v1", "version: ${OLO_UNSET:-v1}-${OLO_EMPTY:-e}-${OLO_EMPTY-x}", "", ""))
    cfg = load_config(path)
    assert cfg.settings.system.version == "v1-e-"
    monkeypatch.setenv("OLO_UNSET", "v2")
    assert load_config(path).settings.system.version == "v2-e-"


def test_depth_true_never_runs(pytester: pytest.Pytester) -> None:
    write(pytester.path, TABLE["depth_bool"])
    result = pytester.runpytest_subprocess("--oloproof", "-p", "no:cacheprovider")
    assert result.ret == 2
    result.stdout.fnmatch_lines(["*oloproof.yaml:6: system.rag.depth: expected a number, got true (a boolean)*"])
    assert not (pytester.path / "calls.log").exists()


def test_store_naming_a_file_stops_before_any_case(pytester: pytest.Pytester) -> None:
    write(pytester.path, TABLE["store_is_a_file"])
    result = pytester.runpytest_subprocess("--oloproof", "-p", "no:cacheprovider")
    assert result.ret == 2, result.stdout.str()
    result.stdout.fnmatch_lines(["*oloproof.yaml:12: store: * is a file, not a folder*"])
    assert not (pytester.path / "calls.log").exists()


def test_config_option_naming_a_folder_says_so(pytester: pytest.Pytester) -> None:
    write(pytester.path, TABLE["depth_zero"])
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--oloproof", "--oloproof-config", ".", "-p", "no:cacheprovider"],
        cwd=pytester.path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    out = proc.stdout + proc.stderr
    assert f"--oloproof-config: {pytester.path} is a folder; give the path of a YAML file" in out
    assert f"did you mean {pytester.path / 'oloproof.yaml'}?" in out
