"""The stored schemas (SPEC §13), read strictly: run.json, cases.jsonl lines and execution cache entries.

Every reader of the store goes through these models, so a garbled or
wrong-shaped record is an error naming its file, line and field instead of a
case silently skipped or an AttributeError far away. The models check the type
of every field Oloproof reads and accept any other key: fields added later are
optional when read, and a newer writer's extra fields never break an older reader.
Readers get the validated mapping back unchanged (the models are a check, not a copy).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .cases import json_type_name


class _Stored(BaseModel):
    """Strict types (no "1" for 1, no 1 for true), unknown keys kept."""

    model_config = ConfigDict(extra="allow", strict=True, populate_by_name=True)


class StoredCandidate(_Stored):
    """A recorded candidate: what the stage contract checks is checked again here, and no more
    (a retriever's chunk ids and texts are its own business), so every record a run writes reads back."""

    position: int
    doc_id: str
    chunk_id: str | int | None = None
    score: float | None = None
    tokens: int | None = None
    text: Any = None
    metadata: dict[str, Any] | None = None


class StoredDropped(_Stored):
    position: int
    reason: str


class StoredCriterion(_Stored):
    status: Literal["observed", "missing", "excluded"]
    value: bool | float | None = None
    reason: str | None = None


class StoredError(_Stored):
    stage: str | None = None
    type: str | None = None
    message: str = ""
    traceback: str | None = None
    transient: bool | None = None
    reason: str | None = None


class StoredRelevant(_Stored):
    doc_id: str
    chunk_id: str | None = None
    grade: int = 1


class StoredGold(_Stored):
    doc_id: str | None = None
    chunk_id: str | None = None
    text: str


class StoredExpected(_Stored):
    relevant: list[StoredRelevant] | None = None
    gold_context: list[StoredGold] | None = None


class StoredCase(_Stored):
    """One line of cases.jsonl (and one entry of a run report's `cases`)."""

    id: str
    criteria: dict[str, StoredCriterion]
    retrieval: list[StoredCandidate] | None = None
    context: list[int] | None = None
    dropped: list[StoredDropped] = []
    context_truncated: bool | None = None
    output: Any = None
    error: StoredError | None = None
    input: Any = None
    expected: StoredExpected | None = None
    metadata: dict[str, Any] | None = None
    relevant_position: int | Literal["none"] | None = None
    cache: dict[str, Any] | None = None
    source: str | None = None


Scalar = str | int | float | bool


class StoredSystem(_Stored):
    """The effective system settings (a decorator's values are not type-checked, so names may be any scalar)."""

    name: Scalar
    kind: str | None = None
    version: Scalar | None = None
    depth: int | None = None
    top_k: int | None = None
    token_budget: int | None = None
    index_version: Scalar | None = None


class StoredEvaluator(_Stored):
    criterion: str
    type: str | None = None
    kind: str | None = None
    asserts: bool | None = None
    settings: dict[str, Any] | None = None


class StoredMetric(_Stored):
    kind: str
    observed: int
    missing: int
    excluded: int
    value: float | None = None
    low: float | None = None
    high: float | None = None
    passed: int | None = None


class StoredCounts(_Stored):
    cases: int | None = None
    errors: int | None = None
    internal_errors: int | None = None


class StoredRun(_Stored):
    """run.json: the header written when a run starts, completed with its summary when it ends."""

    schema_: Literal["oloproof.run/1"] = Field(alias="schema")
    run_id: str
    status: Literal["complete", "incomplete"]
    purpose: str = "run"
    started_at: str | None = None
    system: StoredSystem
    evaluators: list[StoredEvaluator] = []
    metrics: dict[str, StoredMetric] = {}
    slices: list[Any] = []
    cache: dict[str, Any] | None = None
    counts: StoredCounts | None = None
    confidence: float | None = None
    min_slice_support: int | None = None


class StoredExecution(_Stored):
    """An execution cache entry's value: every field a served record is rebuilt from, none defaulted."""

    retrieval: list[StoredCandidate] | None
    context: list[int] | None
    dropped: list[StoredDropped]
    context_truncated: bool
    output: Any


def problems(exc: ValidationError, prefix: str = "") -> str:
    """What pydantic found, as `key.path: message (got value)`, the first few joined by '; '."""
    out = []
    for err in exc.errors(include_url=False)[:3]:
        path = prefix
        for part in err["loc"]:
            path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
        got = _preview(err.get("input"))
        what = re.sub(r" or instance of \w+", "", err["msg"]).replace("Input should be", "should be")
        if not path:
            out.append(f"expected a JSON object, got {json_type_name(err.get('input'))}")
            continue
        if err["type"] == "missing":
            out.append(f"{path}: missing required key")
        else:
            out.append(f"{path}: {what} (got {got})")
    more = len(exc.errors()) - len(out)
    return "; ".join(out) + (f"; and {more} more" if more > 0 else "")


def check_case(value: Any, prefix: str = "") -> str | None:
    """None if `value` is a well-formed stored case, else what is wrong with it."""
    try:
        StoredCase.model_validate(value)
    except ValidationError as exc:
        return problems(exc, prefix)
    return None


def check_run(value: Any, prefix: str = "") -> str | None:
    """None if `value` is a well-formed run.json (or run report head), else what is wrong with it."""
    try:
        StoredRun.model_validate(value)
    except ValidationError as exc:
        return problems(exc, prefix)
    return None


def is_execution_entry(value: Any, *, rag: bool) -> bool:
    """Whether a cached execution value can stand in for executing the case (else it is a miss).

    The check StoredExecution describes, written out by hand: it runs on every execution-cache
    hit (a warm run's one lookup per case), where pydantic would cost several times as much.
    """
    if type(value) is not dict or not _EXECUTION_KEYS <= value.keys():
        return False
    retrieval, context, dropped = value["retrieval"], value["context"], value["dropped"]
    if retrieval is not None and not is_candidates(retrieval):
        return False
    if context is not None and not (type(context) is list and all(type(p) is int for p in context)):
        return False
    if type(dropped) is not list or not all(
        type(d) is dict and type(d.get("position")) is int and type(d.get("reason")) is str for d in dropped
    ):
        return False
    if type(value["context_truncated"]) is not bool:
        return False
    if rag:
        return retrieval is not None and context is not None and isinstance(value["output"], Mapping)
    return True


def is_candidates(value: Any) -> bool:
    """Whether a cached retrieve value is a list of well-formed candidates (StoredCandidate, by hand)."""
    return type(value) is list and all(_is_candidate(c) for c in value)


_EXECUTION_KEYS = frozenset(StoredExecution.model_fields)


def _is_candidate(c: Any) -> bool:
    if type(c) is not dict or type(c.get("position")) is not int or type(c.get("doc_id")) is not str:
        return False
    chunk, score, tokens, meta = c.get("chunk_id"), c.get("score"), c.get("tokens"), c.get("metadata")
    return (
        (chunk is None or type(chunk) in (str, int))
        and (score is None or type(score) in (float, int))
        and (tokens is None or type(tokens) is int)
        and (meta is None or type(meta) is dict)
    )


def _preview(value: Any, limit: int = 40) -> str:
    import json

    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
