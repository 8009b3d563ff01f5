"""Case files (SPEC §4): JSONL, one case per line, validated before anything runs."""

from __future__ import annotations

import difflib
import glob
import json
import math
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_oloproof.errors import CaseFileError

CASE_KEYS = ("id", "input", "expected", "metadata")
RELEVANT_KEYS = ("doc_id", "chunk_id", "grade")
GOLD_KEYS = ("doc_id", "chunk_id", "text")
_GLOB_CHARS = frozenset("*?[")
_PREVIEW_CHARS = 60
#: a \\uD800-\\uDFFF escape: JSON allows it, but alone (not as half of a pair) it is no character UTF-8 can write
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
#: control characters in an id would break node ids, terminal lines and -k selection
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


@dataclass(frozen=True)
class RelevantUnit:
    """One relevance label: a document, or a chunk of one, with a graded judgement."""

    doc_id: str
    chunk_id: str | None = None
    grade: int = 1  # integer >= 0; 0 = judged not relevant


@dataclass(frozen=True)
class GoldPassage:
    """One reference passage that diagnosis puts in place of the retrieved context."""

    doc_id: str | None
    text: str
    chunk_id: str | None = None


@dataclass(frozen=True)
class Case:
    """One validated case; `expected` and `metadata` are the raw JSON objects."""

    id: str
    input: Any
    expected: Mapping[str, Any]
    metadata: Mapping[str, Any]
    relevant: tuple[RelevantUnit, ...] | None
    gold_context: tuple[GoldPassage, ...] | None
    source: str  # "path:line", for messages


class _DuplicateKey(ValueError):
    """A JSON object on one line repeats a key."""


def load_cases(spec: str | Path | Sequence[str | Path], base_dir: Path) -> list[Case]:
    """Load and validate the cases named by `spec` (paths or globs under `base_dir`).

    Files are read in the order given (a glob's matches sorted, each file once).
    All problems across all files are collected and raised as one `CaseFileError`.
    """
    base = Path(os.path.abspath(base_dir))
    errors: list[str] = []
    files = _resolve(spec, base, errors)
    cases: list[Case] = []
    first_seen: dict[str, str] = {}
    for path in files:
        cases.extend(_read_file(path, _display(path, base), first_seen, errors))
    if errors:
        raise CaseFileError(errors)
    return cases


def _resolve(spec: object, base: Path, errors: list[str]) -> list[Path]:
    """Turn the spec into an ordered, de-duplicated list of existing files."""
    if isinstance(spec, (str, os.PathLike)):
        items: list[object] = [spec]
    elif isinstance(spec, Sequence):
        items = list(spec)
        if not items:
            errors.append("cases: the list of case files is empty")
    else:
        errors.append(f"cases: expected a path, a glob or a list of them, got {json_type_name(spec)}")
        return []
    files: list[Path] = []
    seen: set[str] = set()
    listed = not isinstance(spec, (str, os.PathLike))
    for i, item in enumerate(items):
        label = f"cases[{i}]" if listed else "cases"
        if not isinstance(item, (str, os.PathLike)) or not os.fspath(item):
            errors.append(f"{label}: each entry must be a non-empty path or glob, got {_preview(item)}")
            continue
        pattern = os.fspath(item)
        full = os.path.normpath(os.path.join(base, pattern))
        if _GLOB_CHARS & set(pattern):
            matches = sorted(m for m in glob.glob(full, recursive=True) if os.path.isfile(m))
        else:
            matches = [full] if os.path.exists(full) else []
        if not matches:
            errors.append(f'{label}: no file matches "{pattern}" (relative to {base})')
            continue
        for match in matches:
            key = os.path.realpath(match)
            if key not in seen:
                seen.add(key)
                files.append(Path(match))
    return files


def _display(path: Path, base: Path) -> str:
    """The path relative to the base folder when it lies inside it, else absolute."""
    try:
        return str(path.relative_to(base))
    except ValueError:
        return str(path)


def _read_file(path: Path, name: str, first_seen: dict[str, str], errors: list[str]) -> list[Case]:
    """Parse one JSONL file; append problems to `errors`, return its valid cases."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        errors.append(f"{name}: cannot read file: {exc.strerror or exc}")
        return []
    cases: list[Case] = []
    non_blank = 0
    numbers = _Numbers()
    for number, raw in enumerate(data.split(b"\n"), start=1):
        loc = f"{name}:{number}"
        try:
            line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError as exc:
            errors.append(
                f"{loc}: not valid UTF-8 (byte {raw[exc.start]:#04x} "
                f"at position {exc.start + 1}); save the file as UTF-8"
            )
            non_blank += 1
            continue
        if not line.strip():
            continue
        non_blank += 1
        numbers.seen = False
        try:
            obj = json.loads(
                line,
                object_pairs_hook=_no_duplicate_keys,
                parse_constant=numbers.constant,
                parse_float=numbers.float,
            )
        except json.JSONDecodeError as exc:
            errors.append(f"{loc}:{exc.colno}: invalid JSON: {exc.msg} (fix the line so it is one JSON object)")
            continue
        except RecursionError:
            errors.append(f"{loc}: invalid JSON: nested too deeply (flatten the line's arrays and objects)")
            continue
        except ValueError as exc:
            message = str(exc)
            if "integer string conversion" in message:
                message = "an integer has more than 4300 digits (write it as a string)"
            errors.append(f"{loc}: invalid JSON: {message}")
            continue
        if _SURROGATE_ESCAPE.search(line):
            lone = list(_lone_surrogates(obj, ""))
            if lone:
                for key_path in lone:
                    errors.append(
                        f"{loc}: a lone surrogate escape (\\ud800-\\udfff without its pair) at "
                        f"{key_path or 'the top level'} is no character; remove it or write the whole pair"
                    )
                continue
        bad = list(_non_finite(obj, "")) if numbers.seen else []
        if bad:
            for key_path, literal in bad:
                errors.append(
                    f"{loc}: non-finite number at {key_path or 'the top level'} ({literal} is not a finite 64-bit "
                    "number; JSON has no NaN or Infinity: use null, a string, or a finite number)"
                )
            continue
        case = _build_case(obj, loc, first_seen, errors)
        if case is not None:
            cases.append(case)
    if non_blank == 0:
        errors.append(f"{name}: no cases")
    return cases


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """object_pairs_hook: refuse repeated keys (json would keep the last silently)."""
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise _DuplicateKey(f'duplicate key "{key}" in a JSON object')
        obj[key] = value
    return obj


class _NonFinite(str):
    """parse_constant / parse_float: a NaN, Infinity or out-of-range literal, kept to be reported with its key path."""


class _Numbers:
    """The json hooks for numbers: a non-finite one becomes a _NonFinite marker, and `seen` says one was met."""

    def __init__(self) -> None:
        self.seen = False

    def constant(self, literal: str) -> Any:  # NaN, Infinity, -Infinity
        self.seen = True
        return _NonFinite(literal)

    def float(self, literal: str) -> Any:
        value = float(literal)
        if math.isfinite(value):
            return value
        self.seen = True  # e.g. 1e400, which Python reads as inf
        return _NonFinite(literal)


def _non_finite(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """(key path, literal) of every non-finite number in a parsed line (1e400 would become inf)."""
    if isinstance(value, _NonFinite):
        yield path, str(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _non_finite(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _non_finite(item, f"{path}[{index}]")


def _lone_surrogates(value: Any, path: str) -> Iterator[str]:
    """Key paths of strings (keys included) holding a lone surrogate, which no UTF-8 file can store."""
    if isinstance(value, str):
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                yield path
    elif isinstance(value, dict):
        for key, item in value.items():
            sub = f"{path}.{key}" if path else str(key)
            yield from _lone_surrogates(key, sub)
            yield from _lone_surrogates(item, sub)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _lone_surrogates(item, f"{path}[{index}]")


def _build_case(obj: Any, loc: str, first_seen: dict[str, str], errors: list[str]) -> Case | None:
    """Validate one parsed line; return the Case, or None when it has errors."""
    if not isinstance(obj, dict):
        errors.append(f"{loc}: each line must be a JSON object, got {json_type_name(obj)}")
        return None
    before = len(errors)
    _check_keys(obj, CASE_KEYS, "", loc, errors)

    case_id = obj.get("id")
    if "id" not in obj:
        errors.append(f'{loc}: missing required key "id"')
    elif not isinstance(case_id, str) or not case_id.strip():
        errors.append(f"{loc}: id must be a non-empty string, got {_preview(case_id)}")
    elif _CONTROL.search(case_id):
        errors.append(
            f"{loc}: id {_preview(case_id)} holds a control character (newline, tab, NUL...); "
            "ids name pytest items: use printable characters"
        )
    elif case_id in first_seen:
        errors.append(f'{loc}: duplicate id "{case_id}" (first at {first_seen[case_id]})')
    else:
        first_seen[case_id] = loc

    if "input" not in obj:
        errors.append(f'{loc}: missing required key "input"')

    expected = _optional_object(obj, "expected", loc, errors)
    metadata = _optional_object(obj, "metadata", loc, errors)
    relevant = _relevant(expected.get("relevant"), loc, errors)
    gold = _gold_context(expected.get("gold_context"), loc, errors)

    if len(errors) > before:
        return None
    return Case(
        id=str(case_id),
        input=obj["input"],
        expected=expected,
        metadata=metadata,
        relevant=relevant,
        gold_context=gold,
        source=loc,
    )


def _optional_object(obj: dict[str, Any], key: str, loc: str, errors: list[str]) -> dict[str, Any]:
    """An optional object-valued key; absent or null gives {}."""
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        errors.append(f"{loc}: {key} must be an object, got {_preview(value)}")
        return {}
    return value


def _relevant(value: Any, loc: str, errors: list[str]) -> tuple[RelevantUnit, ...] | None:
    """expected.relevant: a list of {doc_id, chunk_id?, grade?}; None when absent."""
    if value is None:
        return None
    if not isinstance(value, list):
        errors.append(f"{loc}: expected.relevant must be a list, got {_preview(value)}")
        return None
    units: list[RelevantUnit] = []
    seen: dict[tuple[str, str | None], str] = {}
    for index, item in enumerate(value):
        path = f"expected.relevant[{index}]"
        if not isinstance(item, dict):
            errors.append(f"{loc}: {path} must be an object, got {_preview(item)}")
            continue
        ok = _check_keys(item, RELEVANT_KEYS, path + ".", loc, errors)
        doc_id = item.get("doc_id")
        if "doc_id" not in item:
            errors.append(f'{loc}: {path}: missing required key "doc_id"')
            ok = False
        elif not _non_empty_str(doc_id):
            errors.append(f"{loc}: {path}.doc_id must be a non-empty string, got {_preview(doc_id)}")
            ok = False
        chunk_id = item.get("chunk_id")
        if chunk_id is not None and not _non_empty_str(chunk_id):
            errors.append(f"{loc}: {path}.chunk_id must be a non-empty string or null, got {_preview(chunk_id)}")
            ok = False
        grade = item.get("grade", 1)
        if not (isinstance(grade, int) and not isinstance(grade, bool) and grade >= 0):
            errors.append(f"{loc}: {path}.grade must be an integer >= 0, got {_preview(grade)}")
            ok = False
        if not ok:
            continue
        unit_key = (str(doc_id), chunk_id)
        if unit_key in seen:
            errors.append(f"{loc}: {path} labels the same unit as {seen[unit_key]}")
            continue
        seen[unit_key] = path
        units.append(RelevantUnit(doc_id=str(doc_id), chunk_id=chunk_id, grade=grade))
    return tuple(units)


def _gold_context(value: Any, loc: str, errors: list[str]) -> tuple[GoldPassage, ...] | None:
    """expected.gold_context: non-empty list of {doc_id?, chunk_id?, text}, or None."""
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        errors.append(f"{loc}: expected.gold_context must be a non-empty list, got {_preview(value)}")
        return None
    passages: list[GoldPassage] = []
    for index, item in enumerate(value):
        path = f"expected.gold_context[{index}]"
        if not isinstance(item, dict):
            errors.append(f"{loc}: {path} must be an object, got {_preview(item)}")
            continue
        ok = _check_keys(item, GOLD_KEYS, path + ".", loc, errors)
        for key in ("doc_id", "chunk_id"):
            ident = item.get(key)
            if ident is not None and not _non_empty_str(ident):
                errors.append(f"{loc}: {path}.{key} must be a non-empty string or null, got {_preview(ident)}")
                ok = False
        text = item.get("text")
        if "text" not in item:
            errors.append(f'{loc}: {path}: missing required key "text"')
            ok = False
        elif not _non_empty_str(text):
            errors.append(f"{loc}: {path}.text must be a non-empty string, got {_preview(text)}")
            ok = False
        if ok:
            passages.append(GoldPassage(doc_id=item.get("doc_id"), text=str(text), chunk_id=item.get("chunk_id")))
    return tuple(passages)


def _check_keys(
    obj: dict[str, Any],
    allowed: Sequence[str],
    prefix: str,
    loc: str,
    errors: list[str],
) -> bool:
    """Report keys outside `allowed`, with a close spelling when there is one."""
    ok = True
    lowered = {key.lower(): key for key in allowed}
    for key in obj:
        if key in allowed:
            continue
        ok = False
        close = difflib.get_close_matches(key.lower(), list(lowered), n=1, cutoff=0.6)
        if close:
            hint = f'did you mean "{lowered[close[0]]}"?'
        else:
            hint = "allowed keys: " + ", ".join(allowed)
        errors.append(f'{loc}: unknown key "{prefix}{key}" ({hint})')
    return ok


def _non_empty_str(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def json_type_name(value: Any) -> str:
    """The JSON name of a parsed value's type (for error messages about case files and stored records)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "list"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def _preview(value: Any) -> str:
    """A value as JSON, shortened for messages."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    if len(text) > _PREVIEW_CHARS:
        text = text[: _PREVIEW_CHARS - 1] + "…"
    return text
