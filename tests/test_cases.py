"""Tests for case files: loading, validation and exact error messages."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_oloproof.errors import CaseFileError
from pytest_oloproof.records.cases import Case, GoldPassage, RelevantUnit, load_cases

REFUND = {
    "id": "refund_annual",
    "input": {"question": "How long do refunds take for annual plans?"},
    "expected": {
        "answer": "14 days",
        "relevant": [{"doc_id": "kb-01"}],
        "gold_context": [{"doc_id": "kb-01", "text": "Refunds are issued within 14 days."}],
    },
    "metadata": {"topic": "billing"},
}


def write(path: Path, *lines: Any) -> Path:
    """Write lines to a file: dicts as JSON, strings verbatim."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "\n".join(line if isinstance(line, str) else json.dumps(line, ensure_ascii=False) for line in lines)
    path.write_text(text + "\n", encoding="utf-8")
    return path


def errors_of(spec: Any, base: Path) -> list[str]:
    """The errors load_cases raises for spec."""
    with pytest.raises(CaseFileError) as info:
        load_cases(spec, base)
    return info.value.errors


# --- good files ------------------------------------------------------------------------


def test_spec_example_loads(tmp_path: Path) -> None:
    write(tmp_path / "cases.jsonl", REFUND)
    [case] = load_cases("cases.jsonl", tmp_path)
    assert case == Case(
        id="refund_annual",
        input={"question": "How long do refunds take for annual plans?"},
        expected=REFUND["expected"],
        metadata={"topic": "billing"},
        relevant=(RelevantUnit(doc_id="kb-01", chunk_id=None, grade=1),),
        gold_context=(GoldPassage(doc_id="kb-01", text="Refunds are issued within 14 days.", chunk_id=None),),
        source="cases.jsonl:1",
    )
    # expected is the raw object, extra keys included
    assert case.expected["answer"] == "14 days"


def test_minimal_case_defaults(tmp_path: Path) -> None:
    write(tmp_path / "c.jsonl", {"id": "a", "input": "plain string"})
    [case] = load_cases("c.jsonl", tmp_path)
    assert case.input == "plain string"
    assert case.expected == {}
    assert case.metadata == {}
    assert case.relevant is None
    assert case.gold_context is None


@pytest.mark.parametrize("value", [None, 0, [1, 2], "x", {"nested": {"deep": [True]}}])
def test_input_any_json_value(tmp_path: Path, value: Any) -> None:
    write(tmp_path / "c.jsonl", {"id": "a", "input": value})
    [case] = load_cases("c.jsonl", tmp_path)
    assert case.input == value


def test_blank_lines_skipped_and_line_numbers_kept(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text(
        '\n  \n{"id": "a", "input": 1}\n\t\n\r\n{"id": "b", "input": 2}\r\n\n',
        encoding="utf-8",
    )
    cases = load_cases("c.jsonl", tmp_path)
    assert [(c.id, c.source) for c in cases] == [("a", "c.jsonl:3"), ("b", "c.jsonl:6")]


def test_no_trailing_newline_and_bom(tmp_path: Path) -> None:
    (tmp_path / "c.jsonl").write_bytes(b'\xef\xbb\xbf{"id": "a", "input": 1}\n{"id": "b", "input": 2}')
    assert [c.id for c in load_cases("c.jsonl", tmp_path)] == ["a", "b"]


def test_unicode(tmp_path: Path) -> None:
    write(
        tmp_path / "c.jsonl",
        {
            "id": "reembolso_anual",
            "input": {"pergunta": "Quanto tempo leva o reembolso? 💸"},
        },
        {"id": "日本語", "input": "line\u2028separator inside a string"},
    )
    cases = load_cases("c.jsonl", tmp_path)
    assert cases[0].input == {"pergunta": "Quanto tempo leva o reembolso? 💸"}
    assert cases[1].id == "日本語"
    assert cases[1].input == "line\u2028separator inside a string"


def test_grades_and_chunks(tmp_path: Path) -> None:
    write(
        tmp_path / "c.jsonl",
        {
            "id": "a",
            "input": 1,
            "expected": {
                "relevant": [
                    {"doc_id": "kb-01", "chunk_id": "c1", "grade": 3},
                    {"doc_id": "kb-01", "chunk_id": "c2", "grade": 0},
                    {"doc_id": "kb-02", "chunk_id": None},
                    {"doc_id": "kb-03", "grade": 2},
                ],
                "gold_context": [
                    {"text": "no ids at all"},
                    {"doc_id": "kb-01", "chunk_id": "c1", "text": "chunk one"},
                ],
            },
        },
    )
    [case] = load_cases("c.jsonl", tmp_path)
    assert case.relevant == (
        RelevantUnit("kb-01", "c1", 3),
        RelevantUnit("kb-01", "c2", 0),
        RelevantUnit("kb-02", None, 1),
        RelevantUnit("kb-03", None, 2),
    )
    assert case.gold_context == (
        GoldPassage(None, "no ids at all"),
        GoldPassage("kb-01", "chunk one", "c1"),
    )


def test_relevant_empty_list_is_labelled_with_no_units(tmp_path: Path) -> None:
    # an empty label list is "labelled, nothing relevant" (§7 no_relevant_units), not absent
    write(tmp_path / "c.jsonl", {"id": "a", "input": 1, "expected": {"relevant": []}})
    [case] = load_cases("c.jsonl", tmp_path)
    assert case.relevant == ()


def test_null_optional_keys_mean_absent(tmp_path: Path) -> None:
    write(
        tmp_path / "c.jsonl",
        {"id": "a", "input": 1, "expected": None, "metadata": None},
        {"id": "b", "input": 1, "expected": {"relevant": None, "gold_context": None}},
    )
    a, b = load_cases("c.jsonl", tmp_path)
    assert (a.expected, a.metadata, a.relevant, a.gold_context) == ({}, {}, None, None)
    assert (b.relevant, b.gold_context) == (None, None)


def test_glob_matches_sorted(tmp_path: Path) -> None:
    write(tmp_path / "cases" / "b.jsonl", {"id": "b1", "input": 1})
    write(
        tmp_path / "cases" / "a.jsonl",
        {"id": "a1", "input": 1},
        {"id": "a2", "input": 2},
    )
    write(tmp_path / "cases" / "notes.txt", "not a case file")
    cases = load_cases("cases/*.jsonl", tmp_path)
    assert [c.id for c in cases] == ["a1", "a2", "b1"]
    assert [c.source for c in cases] == [
        os.path.join("cases", "a.jsonl") + ":1",
        os.path.join("cases", "a.jsonl") + ":2",
        os.path.join("cases", "b.jsonl") + ":1",
    ]


def test_recursive_glob(tmp_path: Path) -> None:
    write(tmp_path / "cases" / "x" / "deep.jsonl", {"id": "deep", "input": 1})
    write(tmp_path / "cases" / "top.jsonl", {"id": "top", "input": 1})
    assert [c.id for c in load_cases("cases/**/*.jsonl", tmp_path)] == ["top", "deep"]


def test_list_in_given_order(tmp_path: Path) -> None:
    write(tmp_path / "z.jsonl", {"id": "z", "input": 1})
    write(tmp_path / "more" / "a.jsonl", {"id": "a", "input": 1})
    write(tmp_path / "more" / "b.jsonl", {"id": "b", "input": 1})
    cases = load_cases(["z.jsonl", Path("more/*.jsonl")], tmp_path)
    assert [c.id for c in cases] == ["z", "a", "b"]


def test_overlapping_specs_read_each_file_once(tmp_path: Path) -> None:
    write(tmp_path / "a.jsonl", {"id": "a", "input": 1})
    write(tmp_path / "b.jsonl", {"id": "b", "input": 1})
    cases = load_cases(["b.jsonl", "*.jsonl", "./a.jsonl"], tmp_path)
    assert [c.id for c in cases] == ["b", "a"]


def test_path_objects_and_absolute_paths(tmp_path: Path) -> None:
    inside = write(tmp_path / "in.jsonl", {"id": "in", "input": 1})
    outside = write(tmp_path / "other" / "out.jsonl", {"id": "out", "input": 1})
    base = tmp_path / "base"
    base.mkdir()
    cases = load_cases([inside, outside], base)
    # outside base_dir: shown absolute
    assert [c.source for c in cases] == [f"{inside}:1", f"{outside}:1"]
    # inside base_dir, given absolute: shown relative
    [case] = load_cases(inside, tmp_path)
    assert case.source == "in.jsonl:1"


def test_relative_base_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "proj" / "c.jsonl", {"id": "a", "input": 1})
    monkeypatch.chdir(tmp_path)
    [case] = load_cases("c.jsonl", Path("proj"))
    assert case.source == "c.jsonl:1"


def test_case_is_frozen(tmp_path: Path) -> None:
    write(tmp_path / "c.jsonl", {"id": "a", "input": 1})
    [case] = load_cases("c.jsonl", tmp_path)
    with pytest.raises(AttributeError):
        case.id = "b"  # type: ignore[misc]


# --- errors: one per message format ---------------------------------------------------


def test_invalid_json_line_and_column(tmp_path: Path) -> None:
    write(
        tmp_path / "cases.jsonl",
        {"id": "a", "input": 1},
        {"id": "b", "input": 1},
        '{"id": "c" "input": 1}',
    )
    assert errors_of("cases.jsonl", tmp_path) == [
        ("cases.jsonl:3:12: invalid JSON: Expecting ',' delimiter (fix the line so it is one JSON object)")
    ]


def test_invalid_json_column_counts_characters(tmp_path: Path) -> None:
    write(tmp_path / "cases.jsonl", '{"id": "é", "input": }')
    assert errors_of("cases.jsonl", tmp_path) == [
        "cases.jsonl:1:22: invalid JSON: Expecting value (fix the line so it is one JSON object)"
    ]


def test_pretty_printed_object_is_invalid(tmp_path: Path) -> None:
    write(tmp_path / "cases.jsonl", "{", '  "id": "a",', '  "input": 1', "}")
    errors = errors_of("cases.jsonl", tmp_path)
    assert errors[0] == (
        "cases.jsonl:1:2: invalid JSON: Expecting property name enclosed in double quotes "
        "(fix the line so it is one JSON object)"
    )
    assert len(errors) == 4


def test_nan_is_not_json(tmp_path: Path) -> None:
    write(tmp_path / "cases.jsonl", '{"id": "a", "input": NaN}')
    assert errors_of("cases.jsonl", tmp_path) == [
        "cases.jsonl:1: non-finite number at input (NaN is not a finite 64-bit number; "
        "JSON has no NaN or Infinity: use null, a string, or a finite number)"
    ]


def test_non_finite_numbers_are_rejected_at_load_with_their_key_path(tmp_path: Path) -> None:
    # 1e400 is valid JSON text but Python reads it as inf: the case used to vanish when it ran
    write(
        tmp_path / "cases.jsonl",
        {"id": "ok", "input": {"n": 1.5}},
        '{"id": "big", "input": {"n": 1e400}}',
        '{"id": "lists", "input": {"q": "x"}, "expected": {"scores": [1, -Infinity]}, "metadata": {"w": NaN}}',
        '{"id": "negative", "input": {"n": -1E+999}}',
    )
    errors = errors_of("cases.jsonl", tmp_path)
    assert [e.split(" (")[0] for e in errors] == [
        "cases.jsonl:2: non-finite number at input.n",
        "cases.jsonl:3: non-finite number at expected.scores[1]",
        "cases.jsonl:3: non-finite number at metadata.w",
        "cases.jsonl:4: non-finite number at input.n",
    ]
    assert "1e400 is not a finite 64-bit number" in errors[0]
    assert "-Infinity" in errors[1]


def test_duplicate_key_in_line(tmp_path: Path) -> None:
    write(tmp_path / "cases.jsonl", '{"id": "a", "input": 1, "id": "b"}')
    assert errors_of("cases.jsonl", tmp_path) == ['cases.jsonl:1: invalid JSON: duplicate key "id" in a JSON object']


def test_deep_nesting_is_reported_not_raised(tmp_path: Path) -> None:
    write(
        tmp_path / "cases.jsonl",
        '{"id": "a", "input": ' + "[" * 100_000 + "]" * 100_000 + "}",
    )
    [message] = errors_of("cases.jsonl", tmp_path)
    assert message.startswith("cases.jsonl:1: invalid JSON: ")


def test_not_utf8(tmp_path: Path) -> None:
    (tmp_path / "cases.jsonl").write_bytes(b'{"id": "a", "input": "caf\xe9"}\n')
    assert errors_of("cases.jsonl", tmp_path) == [
        "cases.jsonl:1: not valid UTF-8 (byte 0xe9 at position 26); save the file as UTF-8"
    ]


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        ("[1, 2]", "list"),
        ('"text"', "string"),
        ("3", "number"),
        ("null", "null"),
        ("true", "boolean"),
    ],
)
def test_not_an_object(tmp_path: Path, line: str, kind: str) -> None:
    write(tmp_path / "cases.jsonl", {"id": "a", "input": 1}, line)
    assert errors_of("cases.jsonl", tmp_path) == [f"cases.jsonl:2: each line must be a JSON object, got {kind}"]


def test_missing_id(tmp_path: Path) -> None:
    write(tmp_path / "cases.jsonl", {"input": 1})
    assert errors_of("cases.jsonl", tmp_path) == ['cases.jsonl:1: missing required key "id"']


def test_missing_input(tmp_path: Path) -> None:
    write(tmp_path / "cases.jsonl", {"id": "a"})
    assert errors_of("cases.jsonl", tmp_path) == ['cases.jsonl:1: missing required key "input"']


@pytest.mark.parametrize(
    ("value", "shown"),
    [(7, "7"), ("", '""'), ("   ", '"   "'), (None, "null"), (["a"], '["a"]')],
)
def test_bad_id(tmp_path: Path, value: Any, shown: str) -> None:
    write(tmp_path / "cases.jsonl", {"id": value, "input": 1})
    assert errors_of("cases.jsonl", tmp_path) == [f"cases.jsonl:1: id must be a non-empty string, got {shown}"]


def test_duplicate_id_in_one_file(tmp_path: Path) -> None:
    write(
        tmp_path / "cases.jsonl",
        {"id": "other", "input": 1},
        {"id": "refund_annual", "input": 1},
        "",
        {"id": "x", "input": 1},
        "",
        "",
        {"id": "refund_annual", "input": 2},
    )
    assert errors_of("cases.jsonl", tmp_path) == [
        'cases.jsonl:7: duplicate id "refund_annual" (first at cases.jsonl:2)'
    ]


def test_duplicate_id_across_files(tmp_path: Path) -> None:
    write(tmp_path / "a.jsonl", {"id": "dup", "input": 1})
    write(tmp_path / "b.jsonl", {"id": "ok", "input": 1}, {"id": "dup", "input": 2})
    assert errors_of(["a.jsonl", "b.jsonl"], tmp_path) == ['b.jsonl:2: duplicate id "dup" (first at a.jsonl:1)']


def test_duplicate_id_of_an_otherwise_invalid_line_still_reported(
    tmp_path: Path,
) -> None:
    write(tmp_path / "cases.jsonl", {"id": "a"}, {"id": "a", "input": 1})
    assert errors_of("cases.jsonl", tmp_path) == [
        'cases.jsonl:1: missing required key "input"',
        'cases.jsonl:2: duplicate id "a" (first at cases.jsonl:1)',
    ]


def test_unknown_top_level_key_with_suggestion(tmp_path: Path) -> None:
    write(
        tmp_path / "cases.jsonl",
        {"id": "a", "input": 1, "metdata": {}},
        {"id": "b", "input": 1, "expect": {}},
        {"ID": "c", "input": 1},
    )
    assert errors_of("cases.jsonl", tmp_path) == [
        'cases.jsonl:1: unknown key "metdata" (did you mean "metadata"?)',
        'cases.jsonl:2: unknown key "expect" (did you mean "expected"?)',
        'cases.jsonl:3: unknown key "ID" (did you mean "id"?)',
        'cases.jsonl:3: missing required key "id"',
    ]


def test_unknown_key_without_suggestion(tmp_path: Path) -> None:
    write(tmp_path / "cases.jsonl", {"id": "a", "input": 1, "zzz": 0})
    assert errors_of("cases.jsonl", tmp_path) == [
        'cases.jsonl:1: unknown key "zzz" (allowed keys: id, input, expected, metadata)'
    ]


@pytest.mark.parametrize("key", ["expected", "metadata"])
def test_expected_and_metadata_must_be_objects(tmp_path: Path, key: str) -> None:
    write(tmp_path / "cases.jsonl", {"id": "a", "input": 1, key: ["x"]})
    assert errors_of("cases.jsonl", tmp_path) == [f'cases.jsonl:1: {key} must be an object, got ["x"]']


def relevant_errors(tmp_path: Path, relevant: Any) -> list[str]:
    """Errors for one case whose expected.relevant is `relevant`."""
    write(
        tmp_path / "cases.jsonl",
        {"id": "a", "input": 1, "expected": {"relevant": relevant}},
    )
    return errors_of("cases.jsonl", tmp_path)


@pytest.mark.parametrize(
    ("grade", "shown"),
    [
        ("high", '"high"'),
        (-1, "-1"),
        (1.5, "1.5"),
        (1.0, "1.0"),
        (True, "true"),
        (None, "null"),
    ],
)
def test_bad_grade(tmp_path: Path, grade: Any, shown: str) -> None:
    assert relevant_errors(tmp_path, [{"doc_id": "kb", "grade": grade}]) == [
        f"cases.jsonl:1: expected.relevant[0].grade must be an integer >= 0, got {shown}"
    ]


def test_relevant_structure_errors(tmp_path: Path) -> None:
    assert relevant_errors(tmp_path, {"doc_id": "kb"}) == [
        'cases.jsonl:1: expected.relevant must be a list, got {"doc_id": "kb"}'
    ]
    assert relevant_errors(tmp_path, ["kb-01", {"chunk_id": "c1"}, {"doc_id": 3}]) == [
        'cases.jsonl:1: expected.relevant[0] must be an object, got "kb-01"',
        'cases.jsonl:1: expected.relevant[1]: missing required key "doc_id"',
        "cases.jsonl:1: expected.relevant[2].doc_id must be a non-empty string, got 3",
    ]
    assert relevant_errors(tmp_path, [{"doc_id": "kb", "chunk_id": 4}]) == [
        "cases.jsonl:1: expected.relevant[0].chunk_id must be a non-empty string or null, got 4"
    ]
    assert relevant_errors(tmp_path, [{"doc_id": "kb", "grad": 2}]) == [
        'cases.jsonl:1: unknown key "expected.relevant[0].grad" (did you mean "grade"?)'
    ]


def test_relevant_repeated_unit(tmp_path: Path) -> None:
    labels = [
        {"doc_id": "kb", "chunk_id": "c1"},
        {"doc_id": "kb"},
        {"doc_id": "kb", "chunk_id": "c1", "grade": 2},
    ]
    assert relevant_errors(tmp_path, labels) == [
        "cases.jsonl:1: expected.relevant[2] labels the same unit as expected.relevant[0]"
    ]


def gold_errors(tmp_path: Path, gold: Any) -> list[str]:
    """Errors for one case whose expected.gold_context is `gold`."""
    write(
        tmp_path / "cases.jsonl",
        {"id": "a", "input": 1, "expected": {"gold_context": gold}},
    )
    return errors_of("cases.jsonl", tmp_path)


def test_gold_context_errors(tmp_path: Path) -> None:
    assert gold_errors(tmp_path, "the text") == [
        'cases.jsonl:1: expected.gold_context must be a non-empty list, got "the text"'
    ]
    assert gold_errors(tmp_path, []) == ["cases.jsonl:1: expected.gold_context must be a non-empty list, got []"]
    assert gold_errors(tmp_path, [{"doc_id": "kb"}, {"text": 5}, {"text": "t", "doc_id": 1}]) == [
        'cases.jsonl:1: expected.gold_context[0]: missing required key "text"',
        "cases.jsonl:1: expected.gold_context[1].text must be a non-empty string, got 5",
        "cases.jsonl:1: expected.gold_context[2].doc_id must be a non-empty string or null, got 1",
    ]
    assert gold_errors(tmp_path, [{"txt": "t"}]) == [
        'cases.jsonl:1: unknown key "expected.gold_context[0].txt" (did you mean "text"?)',
        'cases.jsonl:1: expected.gold_context[0]: missing required key "text"',
    ]


def test_long_values_are_shortened(tmp_path: Path) -> None:
    write(tmp_path / "cases.jsonl", {"id": "a", "input": 1, "metadata": "x" * 100})
    [message] = errors_of("cases.jsonl", tmp_path)
    assert message == 'cases.jsonl:1: metadata must be an object, got "' + "x" * 58 + "…"


def test_no_cases(tmp_path: Path) -> None:
    (tmp_path / "cases.jsonl").write_text("\n  \n\n", encoding="utf-8")
    (tmp_path / "empty.jsonl").write_text("", encoding="utf-8")
    assert errors_of(["cases.jsonl", "empty.jsonl"], tmp_path) == [
        "cases.jsonl: no cases",
        "empty.jsonl: no cases",
    ]


def test_no_file_matches(tmp_path: Path) -> None:
    assert errors_of("missing/*.jsonl", tmp_path) == [
        f'cases: no file matches "missing/*.jsonl" (relative to {tmp_path})'
    ]
    assert errors_of("nope.jsonl", tmp_path) == [f'cases: no file matches "nope.jsonl" (relative to {tmp_path})']


def test_unreadable_file(tmp_path: Path) -> None:
    (tmp_path / "adir.jsonl").mkdir()
    assert errors_of("adir.jsonl", tmp_path) == ["adir.jsonl: cannot read file: Is a directory"]


@pytest.mark.skipif(
    sys.platform == "win32" or os.geteuid() == 0,
    reason="needs POSIX permissions, non-root",
)
def test_permission_denied(tmp_path: Path) -> None:
    path = write(tmp_path / "locked.jsonl", {"id": "a", "input": 1})
    path.chmod(0)
    try:
        assert errors_of("locked.jsonl", tmp_path) == ["locked.jsonl: cannot read file: Permission denied"]
    finally:
        path.chmod(0o644)


def test_bad_spec(tmp_path: Path) -> None:
    assert errors_of([], tmp_path) == ["cases: the list of case files is empty"]
    assert errors_of(3, tmp_path) == ["cases: expected a path, a glob or a list of them, got number"]
    assert errors_of(["", 4], tmp_path) == [
        'cases[0]: each entry must be a non-empty path or glob, got ""',
        "cases[1]: each entry must be a non-empty path or glob, got 4",
    ]


# --- several errors at once -----------------------------------------------------------


def test_all_errors_collected_across_files(tmp_path: Path) -> None:
    write(
        tmp_path / "a.jsonl",
        {"id": "refund_annual", "input": 1},
        '{"id": "x", "input": 1,}',
        "[]",
        {"input": 1, "metdata": {}},
    )
    write(
        tmp_path / "b.jsonl",
        {"id": "fine", "input": 1},
        {"id": "refund_annual"},
        {
            "id": "g",
            "input": 1,
            "expected": {"relevant": [{"doc_id": "kb", "grade": "high"}]},
        },
    )
    (tmp_path / "c.jsonl").write_text("\n", encoding="utf-8")
    errors = errors_of(["a.jsonl", "b.jsonl", "c.jsonl", "gone/*.jsonl"], tmp_path)
    assert errors == [
        f'cases[3]: no file matches "gone/*.jsonl" (relative to {tmp_path})',
        (
            "a.jsonl:2:24: invalid JSON: Expecting property name enclosed in double quotes "
            "(fix the line so it is one JSON object)"
        ),
        "a.jsonl:3: each line must be a JSON object, got list",
        'a.jsonl:4: unknown key "metdata" (did you mean "metadata"?)',
        'a.jsonl:4: missing required key "id"',
        'b.jsonl:2: duplicate id "refund_annual" (first at a.jsonl:1)',
        'b.jsonl:2: missing required key "input"',
        'b.jsonl:3: expected.relevant[0].grade must be an integer >= 0, got "high"',
        "c.jsonl: no cases",
    ]


def test_error_message_lists_every_error(tmp_path: Path) -> None:
    write(tmp_path / "cases.jsonl", {"id": "a"}, {"input": 1})
    with pytest.raises(CaseFileError) as info:
        load_cases("cases.jsonl", tmp_path)
    assert str(info.value) == (
        "invalid case file(s):\n"
        '  cases.jsonl:1: missing required key "input"\n'
        '  cases.jsonl:2: missing required key "id"'
    )


def test_module_does_not_import_pytest() -> None:
    import pytest_oloproof.records.cases as module

    source = Path(module.__file__).read_text(encoding="utf-8")
    assert "import pytest" not in source
