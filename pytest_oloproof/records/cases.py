"""Case files: JSONL, one case per line, validated before anything runs.

Each line is parsed here (UTF-8, one JSON object, no repeated key, no NaN or lone surrogate), then checked
against the pydantic schema of a case (`_CaseLine`, with `RelevantUnit` and `GoldPassage` for the labels and
passages); every problem of every file is reported at once, naming the file, line, key and what it should be.
"""

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
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainValidator, ValidationError
from pydantic_core import ErrorDetails, PydanticCustomError

from pytest_oloproof.errors import CaseFileError

_GLOB_CHARS = frozenset("*?[")
_PREVIEW_CHARS = 60
#: a \\uD800-\\uDFFF escape: JSON allows it, but alone (not as half of a pair) it is no character UTF-8 can write
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
#: control characters in an id would break node ids, terminal lines and -k selection
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _bad(message: str) -> PydanticCustomError:
    """An error whose text follows the key's path: "must be ..., got ..." (the path is prepended)."""
    return PydanticCustomError("case_file", "{message}", {"message": message})


def _non_empty(value: Any, what: str = "a non-empty string") -> str:
    if not _non_empty_str(value):
        raise _bad(f"must be {what}, got {_preview(value)}")
    return str(value)


def _non_empty_or_null(value: Any) -> str | None:
    return None if value is None else _non_empty(value, "a non-empty string or null")


def _object(value: Any) -> dict[str, Any]:
    """An optional object-valued key; null gives {}."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _bad(f"must be an object, got {_preview(value)}")
    return value


def _grade(value: Any) -> int:
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        raise _bad(f"must be an integer >= 0, got {_preview(value)}")
    return value


def _case_id(value: Any) -> str:
    case_id = _non_empty(value)
    if _CONTROL.search(case_id):
        raise _bad(
            f"{_preview(case_id)} holds a control character (newline, tab, NUL...); "
            "ids name pytest items: use printable characters"
        )
    return case_id


@dataclass(frozen=True)
class RelevantUnit:
    """One relevance label: a document, or a chunk of one, with a graded judgement (one item of expected.relevant)."""

    __pydantic_config__ = ConfigDict(extra="forbid")  # read from a case file: no other key, no value coerced

    doc_id: Annotated[str, PlainValidator(_non_empty)]
    chunk_id: Annotated[str | None, PlainValidator(_non_empty_or_null)] = None
    grade: Annotated[int, PlainValidator(_grade)] = 1  # integer >= 0; 0 = judged not relevant


@dataclass(frozen=True)
class GoldPassage:
    """A reference passage that diagnosis puts in place of the retrieved context (an item of expected.gold_context)."""

    __pydantic_config__ = ConfigDict(extra="forbid")

    doc_id: Annotated[str | None, PlainValidator(_non_empty_or_null), Field(default=None)]  # optional in a case file
    text: Annotated[str, PlainValidator(_non_empty)]
    chunk_id: Annotated[str | None, PlainValidator(_non_empty_or_null)] = None


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


# ------------------------------------------------------------------ the schema of one line
#
# pydantic checks a parsed line against these models; every error it reports, at its location, becomes
# one message naming the key and what it should be (`_message`), in the order of the keys in the schema.


def _relevant_list(value: Any) -> list[Any] | None:
    if value is not None and not isinstance(value, list):
        raise _bad(f"must be a list, got {_preview(value)}")
    return value


def _gold_list(value: Any) -> list[Any] | None:
    if value is not None and (not isinstance(value, list) or not value):
        raise _bad(f"must be a non-empty list, got {_preview(value)}")
    return value


class _Expected(BaseModel):
    """`expected`: free-form, but for the relevance labels and gold passages Oloproof reads."""

    model_config = ConfigDict(extra="allow")

    relevant: Annotated[list[RelevantUnit] | None, BeforeValidator(_relevant_list)] = None
    gold_context: Annotated[list[GoldPassage] | None, BeforeValidator(_gold_list)] = None


class _CaseLine(BaseModel):
    """One line of a case file: a key outside the schema is an error, and no value is coerced."""

    model_config = ConfigDict(extra="forbid")

    id: Annotated[str, PlainValidator(_case_id)]
    input: Any
    expected: Annotated[_Expected, BeforeValidator(_object)] = _Expected()
    metadata: Annotated[dict[str, Any], PlainValidator(_object)] = {}


def _build_case(obj: Any, loc: str, first_seen: dict[str, str], errors: list[str]) -> Case | None:
    """Validate one parsed line; return the Case, or None when it has errors."""
    if not isinstance(obj, dict):
        errors.append(f"{loc}: each line must be a JSON object, got {json_type_name(obj)}")
        return None
    found: list[tuple[tuple[Any, ...], str]] = []  # (where in the schema, message)
    line: _CaseLine | None = None
    try:
        line = _CaseLine.model_validate(obj)
    except ValidationError as exc:
        found = [_message(e, obj) for e in exc.errors(include_url=False)]
    case_id = obj.get("id")
    if isinstance(case_id, str) and not (found and any(where[0] == _ID_RANK for where, _ in found)):
        if case_id in first_seen:  # a valid id: the first line holding it keeps it
            found.append(((_ID_RANK, 1), f'duplicate id "{case_id}" (first at {first_seen[case_id]})'))
        else:
            first_seen[case_id] = loc
    raw_expected = obj.get("expected")
    if isinstance(raw_expected, dict):
        found += _repeated_units(raw_expected.get("relevant"), found)
    if found:
        errors += [f"{loc}: {message}" for _, message in sorted(found, key=lambda f: f[0])]
        return None
    assert line is not None
    expected = line.expected
    return Case(
        id=line.id,
        input=line.input,
        expected=raw_expected or {},  # the object as written (null: none)
        metadata=line.metadata,
        relevant=None if expected.relevant is None else tuple(expected.relevant),
        gold_context=None if expected.gold_context is None else tuple(expected.gold_context),
        source=loc,
    )


#: where each model's keys come in the messages: a line's own keys, then the labels, then the gold passages
_ORDER: dict[type, tuple[str, ...]] = {
    _CaseLine: ("id", "input", "expected", "metadata"),
    _Expected: ("relevant", "gold_context"),
    RelevantUnit: ("doc_id", "chunk_id", "grade"),
    GoldPassage: ("doc_id", "chunk_id", "text"),
}


def _rank(model: type, key: str) -> int:
    """A key's place in its model (unknown keys, ranked 0, come first); keys of `expected` rank after `metadata`."""
    return _ORDER[model].index(key) + 1 + (4 if model is _Expected else 0)


_ID_RANK = _rank(_CaseLine, "id")


def _message(error: ErrorDetails, obj: Mapping[str, Any]) -> tuple[tuple[Any, ...], str]:
    """One pydantic error as (its place in the schema, the message naming the key and what it should be)."""
    where = tuple(error["loc"])
    parent, key = where[:-1], where[-1]
    if error["type"] == "dataclass_type":  # a label or passage that is no object
        return _place(where, 0), f"{_path(where)} must be an object, got {_preview(error['input'])}"
    if error["type"] in ("extra_forbidden", "unexpected_keyword_argument"):  # named with its path, a close spelling
        allowed = list(_ORDER[_model_at(parent)])
        position = list(_at(obj, parent)).index(key)
        return _place(parent, 0, position), _unknown(str(key), _path(parent), allowed)
    place = _place(parent, _rank(_model_at(parent), str(key)))
    if error["type"] in ("missing", "missing_argument"):
        return place, f'{_path(parent) + ": " if parent else ""}missing required key "{key}"'
    return place, f"{_path(where)} {error['msg']}"


def _model_at(parent: tuple[str | int, ...]) -> type:
    if not parent:
        return _CaseLine
    if parent == ("expected",):
        return _Expected
    return RelevantUnit if parent[1] == "relevant" else GoldPassage


def _place(parent: tuple[str | int, ...], rank: int, *more: int) -> tuple[Any, ...]:
    """The sort key of a message: the line's own keys by rank, then each label and passage by index and rank."""
    if not parent:
        return (rank, *more)
    if parent == ("expected",):
        return (rank, -1, *more)
    field, index = str(parent[1]), int(parent[2])
    return (_rank(_Expected, field), index, rank, *more)


def _at(obj: Mapping[str, Any], parent: tuple[str | int, ...]) -> Any:
    value: Any = obj
    for part in parent:
        value = value[part]
    return value


def _path(where: tuple[str | int, ...]) -> str:
    """("expected", "relevant", 0, "grade") -> "expected.relevant[0].grade"."""
    out = ""
    for part in where:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _unknown(key: str, parent: str, allowed: Sequence[str]) -> str:
    """An unknown key, with a close spelling when there is one."""
    lowered = {name.lower(): name for name in allowed}
    close = difflib.get_close_matches(key.lower(), list(lowered), n=1, cutoff=0.6)
    hint = f'did you mean "{lowered[close[0]]}"?' if close else "allowed keys: " + ", ".join(allowed)
    return f'unknown key "{parent + "." if parent else ""}{key}" ({hint})'


def _repeated_units(labels: Any, found: Sequence[tuple[tuple[Any, ...], str]]) -> list[tuple[tuple[Any, ...], str]]:
    """A relevance label naming the unit an earlier (valid) label names."""
    if not isinstance(labels, list) or len(labels) < 2:
        return []
    rank = _rank(_Expected, "relevant")
    wrong = {where[1] for where, _ in found if where[0] == rank and len(where) > 1}
    seen: dict[tuple[str, str | None], int] = {}
    out = []
    for index, item in enumerate(labels):
        if index in wrong or not isinstance(item, dict):
            continue
        unit = (str(item["doc_id"]), item.get("chunk_id"))
        if unit in seen:
            out.append(
                (
                    (rank, index, 0),
                    f"expected.relevant[{index}] labels the same unit as expected.relevant[{seen[unit]}]",
                )
            )
            continue
        seen[unit] = index
    return out


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
