"""Oloproof: evaluate RAG systems with pytest, and learn why an answer was wrong.

PYTEST_DONT_REWRITE: the package holds no test assertions, and `oloproof run` imports it before pytest starts,
so pytest would otherwise warn that it cannot rewrite it (in a wheel or `pip install .`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

__version__ = "0.1.0"

from pytest_oloproof.errors import Transient
from pytest_oloproof.evaluators.base import CandidateView, ContextPassage, CriterionValue, EvalInput, Evaluator
from pytest_oloproof.system.declare import Passage, Retrieval, rag_system
from pytest_oloproof.system.repeat import current_repeat
from pytest_oloproof.usage.accounting import report_usage

F = TypeVar("F", bound=Callable[..., Any])

__all__ = [
    "CandidateView",
    "ContextPassage",
    "CriterionValue",
    "EvalInput",
    "Evaluator",
    "Passage",
    "Retrieval",
    "Transient",
    "current_repeat",
    "evaluator",
    "rag_system",
    "report_usage",
]


def evaluator(fn: F | None = None, *, name: str | None = None) -> Any:
    """Declare a conftest.py fixture that returns an Evaluator; Oloproof runs it on every case.

    Use as ``@pytest_oloproof.evaluator`` on a function returning an Evaluator
    instance. The fixture is session-scoped and named after the function (or
    ``name``).
    """
    import pytest

    def wrap(f: F) -> Any:
        f.__oloproof_evaluator__ = name or f.__name__  # type: ignore[attr-defined]
        return pytest.fixture(scope="session", name=name)(f)

    return wrap(fn) if fn is not None else wrap
