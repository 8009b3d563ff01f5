"""citation_validity: every cited id must be a passage of the context generate() received."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import CriterionValue, EvalInput, Evaluator


class CitationValidity(Evaluator):
    """Pass when each citation names a passage of the context (doc_id, and chunk_id when given)."""

    type = "citation_validity"
    kind = "rate"
    reads = frozenset({"output", "context"})
    # Allowed on a plain callable; each case
    # is then excluded with reason no_context, visibly under the table.
    needs_rag = False

    def __init__(
        self,
        criterion: str | None = None,
        asserts: bool | None = None,
        *,
        field: str = "citations",
        require_citations: bool = False,
    ) -> None:
        super().__init__(criterion or self.default_criterion({}), asserts)
        self.field = field
        self.require_citations = require_citations

    @classmethod
    def default_criterion(cls, options: Mapping[str, Any]) -> str:
        return "citations_valid"

    def settings(self) -> dict[str, Any]:
        return {"field": self.field, "require_citations": self.require_citations}

    def evaluate(self, x: EvalInput) -> CriterionValue:
        if x.context is None:
            return CriterionValue.excluded("no_context")
        cited: Any = x.output.get(self.field) if isinstance(x.output, Mapping) else None
        if cited is None:
            cited = []
        if not isinstance(cited, (list, tuple)):
            cited = [cited]
        docs = {p.doc_id for p in x.context}
        chunks = {(p.doc_id, p.chunk_id) for p in x.context}
        invalid = []
        for c in cited:
            if isinstance(c, Mapping):
                doc, chunk = c.get("doc_id"), c.get("chunk_id")
                ok = (doc, chunk) in chunks if chunk is not None else doc in docs
            else:
                ok = str(c) in docs
            if not ok:
                invalid.append(c)
        context_ids = sorted(docs)
        if not cited and self.require_citations:
            return CriterionValue.observed(False, expected="at least one citation", actual="no citations")
        if invalid:
            return CriterionValue.observed(
                False, expected=f"citations among {context_ids}", actual=f"invalid citations {invalid}"
            )
        return CriterionValue.observed(True, expected=f"citations among {context_ids}", actual=list(cited))
