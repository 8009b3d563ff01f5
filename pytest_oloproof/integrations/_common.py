"""What the framework adapters share: the settings Oloproof reads, the query, token counting."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from pytest_oloproof.system.declare import Passage


def require(module: str, adapter: str, extra: str, package: str) -> ModuleType:
    """Import a framework module or fail with the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"pytest_oloproof.integrations.{adapter} needs {package}, which is not installed: "
            f"pip install 'pytest-oloproof[{extra}]' (or pip install {package})"
        ) from exc


def rag_settings(**settings: Any) -> dict[str, Any]:
    """The @rag_system settings of an adapter instance (oloproof.yaml still overrides them)."""
    return {k: v for k, v in settings.items() if v is not None}


def query_of(input: Any, query_key: str) -> str:
    """The query text in a case input: ``input[query_key]``, or the input itself when it is a string."""
    if isinstance(input, str):
        return input
    if isinstance(input, Mapping) and isinstance(input.get(query_key), str):
        return str(input[query_key])
    keys = sorted(input) if isinstance(input, Mapping) else type(input).__name__
    raise ValueError(
        f"the case input has no string {query_key!r} to send to the retriever (it has {keys}); "
        f"pass query_key= to name the field that holds the question"
    )


def token_counter(
    count_tokens: Callable[[str], int] | None, tokenizer: Callable[[str], int] | None
) -> Callable[[Passage], int] | None:
    """count_tokens(passage) from the user's counter or a named tokenizer; None when neither is given.

    Oloproof never estimates: with neither, a token_budget is a configuration error.
    """
    if count_tokens is not None and tokenizer is not None:
        raise ValueError("pass count_tokens= or tokenizer=, not both")
    counter = count_tokens or tokenizer
    if counter is None:
        return None
    fn = counter

    def count(passage: Passage) -> int:
        return fn(passage.text or "")

    return count


def chunk_or_none(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)


def context_metadata(passage: Passage, doc_id_key: str | None, chunk_id_key: str | None) -> dict[str, Any]:
    """A context passage's metadata with the ids it was read from put back under the user's named keys."""
    meta = dict(passage.metadata or {})
    if doc_id_key:
        meta.setdefault(doc_id_key, passage.doc_id)
    if chunk_id_key and passage.chunk_id is not None:
        meta.setdefault(chunk_id_key, passage.chunk_id)
    return meta
