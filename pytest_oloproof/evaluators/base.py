"""The evaluator contract: what an evaluator sees for one case and what it returns."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

Status = Literal["observed", "missing", "excluded"]
Kind = Literal["rate", "mean"]


@dataclass(frozen=True)
class CandidateView:
    """One retrieved candidate as recorded: 1-based position in retrieval order."""

    position: int
    doc_id: str
    chunk_id: str | None
    score: float | None
    text: str | None
    tokens: int | None = None


@dataclass(frozen=True)
class ContextPassage:
    """One passage of the context `generate` received (assembled, or gold in diagnosis)."""

    doc_id: str
    chunk_id: str | None
    text: str | None
    position: int | None = None


@dataclass(frozen=True)
class EvalInput:
    """Everything an evaluator may read for one case."""

    case_id: str
    input: Any
    expected: Mapping[str, Any]
    metadata: Mapping[str, Any]
    output: Any
    retrieval: Sequence[CandidateView] | None = None  # None for non-RAG systems
    context: Sequence[ContextPassage] | None = None  # None for non-RAG systems


@dataclass(frozen=True)
class CriterionValue:
    """One criterion for one case: observed (value), missing (error) or excluded (reason)."""

    status: Status
    value: float | None = None
    reason: str | None = None
    expected: Any = None  # for failure messages: what was wanted
    actual: Any = None  # ... and what was found
    detail: Mapping[str, Any] = field(default_factory=dict)  # e.g. a judge's rationale

    @classmethod
    def observed(cls, value: float | bool, **kw: Any) -> CriterionValue:
        return cls("observed", float(value), **kw)

    @classmethod
    def missing(cls, reason: str, **kw: Any) -> CriterionValue:
        return cls("missing", None, reason, **kw)

    @classmethod
    def excluded(cls, reason: str, **kw: Any) -> CriterionValue:
        return cls("excluded", None, reason, **kw)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status}
        if self.value is not None:
            out["value"] = self.value
        if self.reason is not None:
            out["reason"] = self.reason
        if self.expected is not None:
            out["expected"] = self.expected
        if self.actual is not None:
            out["actual"] = self.actual
        if self.detail:
            out["detail"] = dict(self.detail)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CriterionValue:
        return cls(
            data["status"],
            data.get("value"),
            data.get("reason"),
            data.get("expected"),
            data.get("actual"),
            dict(data.get("detail") or {}),
        )


class OptionError(ValueError):
    """A bad evaluator setting, raised by a constructor; the registry reports it as `evaluators[i].<key>`."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


class Evaluator(ABC):
    """Base class for evaluator types.

    Subclasses set `type`, `kind` and `reads`, accept their settings as keyword
    arguments, and implement `evaluate`. `settings()` is hashed into the
    judgment-cache identity, so it must hold everything that changes a verdict
    (and never a secret).
    """

    type: ClassVar[str] = ""
    kind: ClassVar[Kind] = "rate"
    #: which parts of EvalInput the verdict depends on (besides expected data)
    reads: ClassVar[frozenset[str]] = frozenset({"output"})
    #: whether failures fail the pytest item by default
    asserts_by_default: ClassVar[bool] = True
    #: whether the evaluator needs a RAG system (retrieval/context)
    needs_rag: ClassVar[bool] = False

    def __init__(self, criterion: str, asserts: bool | None = None) -> None:
        self.criterion = criterion
        self.asserts = self.asserts_by_default if asserts is None else asserts

    @classmethod
    def default_criterion(cls, options: Mapping[str, Any]) -> str:
        """The criterion name used when the config gives none (known before construction)."""
        return cls.type

    def settings(self) -> dict[str, Any]:
        """Settings that are part of this evaluator's judgment identity."""
        return {}

    def kind_for(self, labels: Mapping[str, Any] | None) -> Kind:
        """This run's kind, given the facts of its cases' labels (`retrieval.label_facts`); the class's by default."""
        return self.kind

    @abstractmethod
    def evaluate(self, x: EvalInput) -> CriterionValue:
        """Judge one case."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.criterion}>"
