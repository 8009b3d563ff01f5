"""Canonical JSON and the sha256 identities of the caches (SPEC §5)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any


def canonical_json(value: Any) -> str:
    """One spelling per value: sorted keys, no whitespace, UTF-8; fails on non-JSON values."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def sha256_of(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def context_identity(context: Sequence[Any]) -> list[list[Any]]:
    """What of a context matters to generation: doc_id, chunk_id and text, in order."""
    return [[p.doc_id, p.chunk_id, p.text] for p in context]


def retrieve_key(system: Mapping[str, Any], input: Any) -> str:
    return sha256_of(
        {
            "cache": "retrieve/1",
            "system": system["name"],
            "index_version": system.get("index_version"),
            "depth": system.get("depth"),
            "input": input,
        }
    )


def generate_key(system: Mapping[str, Any], input: Any, context: Sequence[Any]) -> str:
    return sha256_of(
        {
            "cache": "generate/1",
            "system": system["name"],
            "version": system.get("version"),
            "input": input,
            "context": context_identity(context),
        }
    )


def execution_key(system: Mapping[str, Any], input: Any) -> str:
    return sha256_of({"cache": "execution/1", "system": dict(system), "input": input})


def judgment_key(
    evaluator_type: str,
    settings: Mapping[str, Any],
    expected: Mapping[str, Any],
    reads: Mapping[str, Any],
) -> str:
    """Identity of one verdict: the evaluator and everything it reads (never a secret)."""
    return sha256_of(
        {
            "cache": "judgment/1",
            "type": evaluator_type,
            "settings": dict(settings),
            "expected": dict(expected),
            "reads": dict(reads),
        }
    )


def settings_identity(settings: Mapping[str, Any]) -> str:
    """`sha256:<hex>` naming an evaluator's settings: how a judge validation is matched to a judge."""
    return "sha256:" + sha256_of(dict(settings))
