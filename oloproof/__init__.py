"""`oloproof`: the short import name of `pytest_oloproof` (the public API only, the very same objects).

``from oloproof import Passage, Retrieval, rag_system`` and
``from pytest_oloproof import Passage, Retrieval, rag_system`` give identical
classes, so systems and evaluators written either way mix freely.
"""

from __future__ import annotations

from pytest_oloproof import (
    CandidateView,
    ContextPassage,
    CriterionValue,
    EvalInput,
    Evaluator,
    Passage,
    Retrieval,
    Transient,
    __version__,
    current_repeat,
    evaluator,
    rag_system,
    report_usage,
)

__all__ = [
    "CandidateView",
    "ContextPassage",
    "CriterionValue",
    "EvalInput",
    "Evaluator",
    "Passage",
    "Retrieval",
    "Transient",
    "__version__",
    "current_repeat",
    "evaluator",
    "rag_system",
    "report_usage",
]
