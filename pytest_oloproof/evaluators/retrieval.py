"""Retrieval evaluators over recorded retrieval positions (trec_eval semantics, see metrics.py)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, ClassVar, Literal

from pytest_oloproof.stats import metrics

from .base import CandidateView, CriterionValue, EvalInput, Evaluator, OptionError

Unit = Literal["document", "chunk"]


def units_of(retrieval: Sequence[CandidateView], unit: Unit) -> list[Hashable]:
    if unit == "chunk":
        return [(c.doc_id, c.chunk_id) for c in retrieval]
    return [c.doc_id for c in retrieval]


def qrels_of(relevant: Sequence[Any], unit: Unit) -> dict[Hashable, int]:
    """Labels as trec_eval qrels; under document units a document takes its best chunk's grade."""
    qrels: dict[Hashable, int] = {}
    for r in relevant:
        doc, chunk, grade = _label(r)
        key: Hashable = (doc, chunk) if unit == "chunk" else doc
        qrels[key] = max(grade, qrels.get(key, grade))
    return qrels


def _label(r: Any) -> tuple[str, str | None, int]:
    if isinstance(r, dict):
        return r["doc_id"], r.get("chunk_id"), int(r.get("grade", 1))
    return r.doc_id, r.chunk_id, int(r.grade)


class _RetrievalEvaluator(Evaluator):
    kind = "mean"
    reads = frozenset({"retrieval"})
    asserts_by_default = False
    needs_rag = True
    prefix: ClassVar[str] = ""
    metric: ClassVar[Callable[..., float]]

    def __init__(
        self,
        criterion: str | None = None,
        asserts: bool | None = None,
        *,
        k: int,
        relevance_unit: Unit = "document",
    ) -> None:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise OptionError("k", f"expected an integer >= 1, got {k!r}")
        super().__init__(criterion or self.default_criterion({"k": k}), asserts)
        self.k = k
        self.relevance_unit = relevance_unit

    @classmethod
    def default_criterion(cls, options: Mapping[str, Any]) -> str:
        return f"{cls.prefix}_at_{options.get('k')}"

    def settings(self) -> dict[str, Any]:
        return {"k": self.k, "relevance_unit": self.relevance_unit}

    def _score(self, ranking: list[Hashable], qrels: dict[Hashable, int]) -> float:
        return type(self).metric(ranking, qrels, self.k)

    def evaluate(self, x: EvalInput) -> CriterionValue:
        relevant = x.expected.get("relevant") if x.expected else None
        if relevant is None:
            return CriterionValue.excluded("no_relevance_labels")
        if x.retrieval is None:
            return CriterionValue.excluded("no_retrieval")
        qrels = qrels_of(relevant, self.relevance_unit)
        try:
            value = self._score(units_of(x.retrieval, self.relevance_unit), qrels)
        except metrics.NoRelevantUnits:
            return CriterionValue.excluded("no_relevant_units")
        return CriterionValue.observed(value, expected=f"relevant units within the first {self.k}", actual=value)


class HitRate(_RetrievalEvaluator):
    """1 when any relevant unit is among the first k candidates."""

    type = "hit_rate"
    kind = "rate"  # type: ignore[assignment]  # a 0/1 metric, unlike the graded ones
    prefix = "hit_rate"
    metric = staticmethod(metrics.hit_rate)


class Recall(_RetrievalEvaluator):
    """Relevant units among the first k / all relevant units.

    A rate when every labelled case has exactly one relevant unit (then recall@k is hit@k and
    every value is 0 or 1), a mean otherwise: decided from the labels (`label_facts`), before
    anything runs, never from the values a run happens to produce.
    """

    type = "recall"
    prefix = "recall"
    metric = staticmethod(metrics.recall)

    def kind_for(self, labels: Mapping[str, Any] | None) -> Literal["rate", "mean"]:
        one = (labels or {}).get("one_relevant_unit") or {}
        return "rate" if one.get(self.relevance_unit) is True else "mean"


def label_facts(relevant_labels: Iterable[Sequence[Any] | None]) -> dict[str, Any]:
    """What the run's relevance labels say about its metrics' kinds, per relevance unit.

    `one_relevant_unit[unit]` is true when at least one case is labelled and every labelled case
    (one with a unit of grade > 0) has exactly one relevant unit, counted in that unit.
    """
    labelled = 0
    one = {"document": True, "chunk": True}
    for relevant in relevant_labels:
        if relevant is None:
            continue
        counts = {u: metrics.num_relevant(qrels_of(relevant, u)) for u in ("document", "chunk")}
        if counts["document"] == 0 and counts["chunk"] == 0:
            continue
        labelled += 1
        for u in one:
            one[u] = one[u] and counts[u] == 1
    if not labelled:
        one = {"document": False, "chunk": False}
    return {"labelled_cases": labelled, "one_relevant_unit": one}


class Precision(_RetrievalEvaluator):
    """Relevant units among the first k / k."""

    type = "precision"
    prefix = "precision"
    metric = staticmethod(metrics.precision)


class MRR(_RetrievalEvaluator):
    """1 / rank of the first relevant unit within k, else 0."""

    type = "mrr"
    prefix = "mrr"
    metric = staticmethod(metrics.mrr)


class NDCG(_RetrievalEvaluator):
    """Graded nDCG at k: linear gain as trec_eval, or exponential (2^grade - 1)."""

    type = "ndcg"
    prefix = "ndcg"
    metric = staticmethod(metrics.ndcg)

    def __init__(
        self,
        criterion: str | None = None,
        asserts: bool | None = None,
        *,
        k: int,
        relevance_unit: Unit = "document",
        gain: Literal["linear", "exponential"] = "linear",
    ) -> None:
        super().__init__(criterion, asserts, k=k, relevance_unit=relevance_unit)
        self.gain = gain

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "gain": self.gain}

    def _score(self, ranking: list[Hashable], qrels: dict[Hashable, int]) -> float:
        return metrics.ndcg(ranking, qrels, self.k, gain=self.gain)
