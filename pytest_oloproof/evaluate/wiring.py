"""Wiring checks: signs, across a whole run, that the system is connected to Oloproof the wrong way.

Each check looks at every executed case and speaks only when the sign holds for all of them
(one odd case is a case to look at, not a wiring problem):

- `short_retrieval`: the retriever returned fewer than `depth` candidates in every case (a
  LangChain retriever whose `_get_relevant_documents` drops the `k` Oloproof passes, a store
  holding fewer documents than `depth`, a filter);
- `no_label_match`: relevance labels exist, yet no retrieved unit of any case matches any label
  (ids made up by the vector store, e.g. random UUIDs, instead of the ids the labels name);
- `vacuous_citations`: a `citation_validity` criterion without `require_citations` was observed
  on outputs that cite nothing, in every case (it then passes without checking anything);
- `identical_scores`: every candidate of every case has the same score (a mock embedding).

The findings are data (the record's `wiring` list); report/ words them. They never fail a run.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from pytest_oloproof.evaluators.retrieval import qrels_of

SHORT_RETRIEVAL = "short_retrieval"
NO_LABEL_MATCH = "no_label_match"
VACUOUS_CITATIONS = "vacuous_citations"
IDENTICAL_SCORES = "identical_scores"


def _unit_key(cand: Mapping[str, Any], unit: str) -> Hashable:
    return (cand.get("doc_id"), cand.get("chunk_id")) if unit == "chunk" else cand.get("doc_id")


class WiringChecks:
    """Fed every full case record of a run (`add`), then asked for its findings (`findings`)."""

    def __init__(self, header: Mapping[str, Any]) -> None:
        system = header.get("system") or {}
        depth = system.get("depth")
        self.depth: int | None = depth if isinstance(depth, int) else None
        evaluators = [e for e in header.get("evaluators") or [] if isinstance(e, Mapping)]
        units: set[str] = set()
        for e in evaluators:
            unit = (e.get("settings") or {}).get("relevance_unit")
            if unit in ("document", "chunk"):
                units.add(str(unit))
        self.units: list[str] = sorted(units) or ["document"]
        #: citation criteria that pass an output citing nothing: name -> the output field they read
        self.citation_fields = {
            e["criterion"]: (e.get("settings") or {}).get("field", "citations")
            for e in evaluators
            if e.get("type") == "citation_validity" and not (e.get("settings") or {}).get("require_citations")
        }
        self.retrieved = 0  # cases with a retrieval
        self.short = 0
        self.most_returned = 0
        self.labelled = 0  # retrieved cases with relevance labels
        self.matched = False
        self.example_retrieved: Any = None
        self.example_label: Any = None
        self.scored = 0  # cases with two or more scored candidates
        self.flat = 0
        self.scores: set[float] = set()
        self.cited: dict[str, list[int]] = {name: [0, 0] for name in self.citation_fields}  # observed, cite nothing

    def add(self, rec: Mapping[str, Any]) -> None:
        """Take one full case record into account (an errored case or one without retrieval says nothing)."""
        if rec.get("error"):
            return
        for name, field in self.citation_fields.items():
            c = (rec.get("criteria") or {}).get(name) or {}
            if c.get("status") == "observed":
                self.cited[name][0] += 1
                output = rec.get("output")
                cites = output.get(field) if isinstance(output, Mapping) else None
                if not cites:
                    self.cited[name][1] += 1
        retrieval = rec.get("retrieval")
        if not isinstance(retrieval, list):
            return
        self.retrieved += 1
        self.most_returned = max(self.most_returned, len(retrieval))
        if self.depth is not None and len(retrieval) < self.depth:
            self.short += 1
        scores = [c.get("score") for c in retrieval if isinstance(c, Mapping)]
        if len(scores) >= 2 and all(isinstance(s, (int, float)) for s in scores):
            self.scored += 1
            if len(set(scores)) == 1:
                self.flat += 1
                self.scores.add(float(scores[0]))  # type: ignore[arg-type]
        self._labels(rec, retrieval)

    def _labels(self, rec: Mapping[str, Any], retrieval: list[Any]) -> None:
        expected = rec.get("expected")
        relevant = expected.get("relevant") if isinstance(expected, Mapping) else None
        if not relevant or self.matched:
            return
        try:
            qrels = {unit: qrels_of(relevant, unit) for unit in self.units}  # type: ignore[arg-type]
        except (KeyError, TypeError, ValueError):
            return
        if not any(qrels.values()):
            return
        self.labelled += 1
        for unit, grades in qrels.items():
            keys = [_unit_key(c, unit) for c in retrieval if isinstance(c, Mapping)]
            if any(grades.get(k, 0) > 0 for k in keys):
                self.matched = True
                return
            if self.example_label is None and grades:
                self.example_label = next(iter(grades))
            if self.example_retrieved is None and keys:
                self.example_retrieved = keys[0]

    def findings(self) -> list[dict[str, Any]]:
        """One entry per check whose sign held in every case it could look at."""
        out: list[dict[str, Any]] = []
        if self.retrieved and self.depth is not None and self.short == self.retrieved:
            out.append(
                {
                    "check": SHORT_RETRIEVAL,
                    "cases": self.retrieved,
                    "depth": self.depth,
                    "most_returned": self.most_returned,
                }
            )
        if self.labelled and not self.matched:
            out.append(
                {
                    "check": NO_LABEL_MATCH,
                    "cases": self.labelled,
                    "unit": self.units[0],
                    "retrieved_example": _plain(self.example_retrieved),
                    "label_example": _plain(self.example_label),
                }
            )
        for name, (observed, nothing) in self.cited.items():
            if observed and nothing == observed:
                out.append(
                    {
                        "check": VACUOUS_CITATIONS,
                        "cases": observed,
                        "criterion": name,
                        "field": self.citation_fields[name],
                    }
                )
        if self.scored and self.flat == self.scored:
            out.append(
                {
                    "check": IDENTICAL_SCORES,
                    "cases": self.scored,
                    "score": next(iter(self.scores)) if len(self.scores) == 1 else None,
                }
            )
        return out


def _plain(key: Any) -> Any:
    """A unit key as JSON: a document id, or {doc_id, chunk_id} for a chunk."""
    if isinstance(key, tuple):
        return {"doc_id": key[0], "chunk_id": key[1]}
    return key
