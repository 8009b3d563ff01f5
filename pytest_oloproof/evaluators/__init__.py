"""Evaluator types. The contract is in `base`; the registry (with pydantic) loads on first use."""

from __future__ import annotations

from typing import Any

from .base import (
    CandidateView,
    ContextPassage,
    CriterionValue,
    EvalInput,
    Evaluator,
    OptionError,
)

__all__ = [
    "CandidateView",
    "ContextPassage",
    "CriterionValue",
    "EvalInput",
    "Evaluator",
    "OptionError",
    "Registry",
    "builtin_types",
]


def __getattr__(name: str) -> Any:
    if name in ("Registry", "builtin_types"):
        from . import registry

        return getattr(registry, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
