"""Declaring a system: Passage, Retrieval, @rag_system, and calling stages."""

from __future__ import annotations

import importlib
import json
import math
import numbers
import sys
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pytest_oloproof.errors import ConfigError, ContractError

T = TypeVar("T")

#: settings the decorator accepts and oloproof.yaml may override
RAG_SETTINGS = ("name", "version", "depth", "top_k", "token_budget", "index_version")


@dataclass(frozen=True)
class Passage:
    """One retrieved unit of text; immutable so a recorded retrieval can't be edited."""

    doc_id: str
    score: float | None = None
    text: str | None = None
    chunk_id: str | None = None
    metadata: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Retrieval:
    """What `retrieve` returns: candidates in the retriever's own order."""

    query: Any
    depth: int
    candidates: tuple[Passage, ...] = field(default_factory=tuple)


def rag_system(
    *,
    name: str | None = None,
    version: str | None = None,
    depth: int | None = None,
    top_k: int | None = None,
    token_budget: int | None = None,
    index_version: str | None = None,
) -> Callable[[T], T]:
    """Mark a class with `retrieve` and `generate` stages as a RAG system.

    The settings are defaults; oloproof.yaml overrides any of them.
    """

    def mark(cls: T) -> T:
        for stage in ("retrieve", "generate"):
            if not callable(getattr(cls, stage, None)):
                raise TypeError(f"@rag_system class {getattr(cls, '__name__', cls)!r} has no {stage}() method")
        settings = {
            "name": name,
            "version": version,
            "depth": depth,
            "top_k": top_k,
            "token_budget": token_budget,
            "index_version": index_version,
        }
        cls.__oloproof_rag__ = {k: v for k, v in settings.items() if v is not None}  # type: ignore[attr-defined]
        return cls

    return mark


def settings_problem(settings: Mapping[str, Any]) -> str | None:
    """What is wrong with a system's declared sizes (the rules oloproof.yaml enforces), or None.

    Names and versions may be any scalar (they only enter identities), as the stored-record models accept;
    but an empty name is no name (it would silently become the class's).
    """
    name = settings.get("name")
    if isinstance(name, str) and not name.strip():
        return f"name={name!r}: expected a non-empty name"
    for key in ("depth", "top_k", "token_budget"):
        value = settings.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            return f"{key}={value!r}: expected an integer >= 1"
    return None


def load_object(spec: str, base_dir: Path | None, *, what: str = "object") -> Any:
    """Import `module:attribute` with the config's folder first on sys.path."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"{what}: {spec!r} is not of the form module:attribute (e.g. app:SupportRag)")
    if module_name.startswith("."):
        raise ConfigError(
            f"{what}: {spec!r} names a relative module; write it without the leading dot "
            "(modules are imported from the config's folder)"
        )
    if base_dir is not None:
        folder = str(Path(base_dir).resolve())
        if folder not in sys.path:
            sys.path.insert(0, folder)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{what}: cannot import module {module_name!r} for {spec!r}: {exc}") from exc
    except (Exception, SystemExit) as exc:  # the module itself is broken (or exits): say where, keep its traceback
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        raise ConfigError(
            f"{what}: importing module {module_name!r} for {spec!r} raised {type(exc).__name__}: {exc}\n{tb}"
        ) from exc
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigError(f"{what}: module {module_name!r} has no attribute {attr!r} (from {spec!r})") from None
    return obj


def check_retrieval(result: Any, depth: int, case_id: str) -> Retrieval:
    """Enforce the retrieve contract; violations are per-case errors, never fixed silently."""
    where = f"case {case_id!r}: retrieve()"
    if not isinstance(result, Retrieval):
        raise ContractError(f"{where} must return a Retrieval, got {type(result).__name__}")
    # Retrieval.depth is the retriever's own note (e.g. len(candidates)): Oloproof asked for `depth` and holds
    # the candidates to it; a different value there is not a reason to lose the case
    candidates = result.candidates
    if not isinstance(candidates, (tuple, list)):
        raise ContractError(f"{where}: candidates must be a tuple of Passage, got {type(candidates).__name__}")
    if len(candidates) > depth:
        raise ContractError(f"{where} returned {len(candidates)} candidates, more than depth={depth}")
    for i, c in enumerate(candidates, 1):
        check_passage(c, where, i)
    return result


def check_passage(c: Any, where: str, position: int) -> None:
    """One candidate's contract (retrieve's, and a reranker's): a Passage with a doc_id, a finite score or None,
    and metadata that is a mapping with string keys or None."""
    i = position
    if not isinstance(c, Passage):
        raise ContractError(f"{where}: candidate at position {i} is a {type(c).__name__}, not a Passage")
    if not isinstance(c.doc_id, str) or not c.doc_id:
        raise ContractError(
            f"{where}: candidate at position {i} has doc_id {c.doc_id!r}; a non-empty string is required"
        )
    # any real number (numpy's floats too, as a cross-encoder returns them), never a boolean or a string
    score = c.score
    if (
        score is not None
        and type(score) not in (float, int)  # the common case, without the slower abstract-class check
        and (isinstance(score, bool) or not isinstance(score, numbers.Real))
    ):
        raise ContractError(f"{where}: candidate at position {i} has a non-numeric score {score!r}")
    if score is not None and not _finite(score):
        raise ContractError(f"{where}: candidate at position {i} has score {score!r}; a finite number is required")
    if c.metadata is not None and not isinstance(c.metadata, Mapping):
        raise ContractError(
            f"{where}: candidate at position {i} has metadata of type {type(c.metadata).__name__}; "
            "a mapping or None is required"
        )
    if c.metadata:
        check_string_keys(c.metadata, f"{where}: candidate at position {i}", "metadata")


def check_reranked(result: Any, case_id: str) -> tuple[Passage, ...]:
    """Enforce a reranker's contract (a sequence of Passage, each checked as retrieve's candidates are)."""
    where = f"case {case_id!r}: the reranker"
    if not isinstance(result, (list, tuple)) or not all(isinstance(p, Passage) for p in result):
        raise ContractError(f"{where} must return a sequence of Passage", stage="reranker")
    try:
        for i, c in enumerate(result, 1):
            check_passage(c, where, i)
    except ContractError as exc:
        raise ContractError(str(exc), stage="reranker") from None
    return tuple(result)


#: types that hold no mapping key: skipped at once by the key scan
_LEAVES = frozenset({str, int, float, bool, type(None)})


def non_string_key(value: Any, path: str) -> tuple[str, Any] | None:
    """(where, key) of the first mapping key inside `value` that is not a string, or None.

    JSON object keys are strings: `json` writes the key 1 as "1" without a word, so a value read
    back from the cache or the store would differ from the one the system returned. One walk, depth
    first and in order; the path is kept as (parent, step) pairs and spelled only for a key it reports.
    A container met twice is walked once, so a value that contains itself ends the walk (JSON then
    names the cycle).
    """
    stack: list[tuple[Any, Any]] = [(value, path)]
    seen: set[int] = set()
    while stack:
        current, where = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, Mapping):
            children: list[tuple[Any, Any]] = []
            for k, item in current.items():
                if type(k) is not str and not isinstance(k, str):
                    return _spelled(where), k
                if type(item) not in _LEAVES:
                    children.append((item, (where, k)))
        elif isinstance(current, (list, tuple)):
            children = [(item, (where, i)) for i, item in enumerate(current) if type(item) not in _LEAVES]
        else:
            continue
        stack.extend(reversed(children))
    return None


def _spelled(where: Any) -> str:
    """A path kept as nested (parent, step) pairs, spelled `output.by_rank[0]` (an int step is a list index)."""
    steps = []
    while isinstance(where, tuple):
        where, step = where
        steps.append(f"[{step}]" if isinstance(step, int) else f".{step}")
    return str(where) + "".join(reversed(steps))


def check_string_keys(value: Any, what: str, path: str, *, stage: str | None = None) -> None:
    """A ContractError for a mapping key that is not a string (e.g. {1: "a"}), naming where it is."""
    if not isinstance(value, (Mapping, list, tuple)):
        return
    found = non_string_key(value, path)
    if found is None:
        return
    where, key = found
    if isinstance(key, (bool, int, float)) or key is None:
        as_json = json.dumps(key) if not isinstance(key, float) or math.isfinite(key) else None
        read_back = f"; a cached or stored copy would read it back as the string {as_json!r}" if as_json else ""
    else:
        read_back = ""
    raise ContractError(
        f"{what}: {where} has the key {key!r} ({type(key).__name__}); JSON object keys are strings{read_back}. "
        "Use string keys",
        stage=stage,
    )


def _finite(score: float) -> bool:
    """Whether a score is a finite float (an int too large for a float is not)."""
    try:
        return math.isfinite(float(score))
    except OverflowError:
        return False


def check_tokens(value: Any, case_id: str, position: int) -> int:
    """Enforce the count_tokens contract: a non-negative int."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ContractError(
            f"case {case_id!r}: count_tokens() returned {value!r} for the candidate at position {position}; "
            "a non-negative integer is required"
        )
    return value
