"""A reranker for `oloproof diagnose --intervention reranker --reranker rerank:by_name`.

It reorders the recorded candidates by how many of the question's words appear in
the candidate's qualified name (`json.dumps` -> json, dumps) and first sentence, the
retriever's score breaking ties. It reads the query text, so it puts a different
passage first for each question.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from app import sentences, words

from pytest_oloproof import Passage


def by_name(query: Any, candidates: Sequence[Passage]) -> list[Passage]:
    question = query["question"] if isinstance(query, Mapping) else str(query)
    q = words(question)

    def key(item: tuple[int, Passage]) -> tuple[int, int, float, int]:
        pos, p = item
        name = words(p.doc_id.replace(".", " ").replace("_", " "))
        first = sentences(p.text or "")[:1]
        lead = words(first[0]) if first else set()
        return (-len(q & name), -len(q & lead), -(p.score or 0.0), pos)

    return [p for _, p in sorted(enumerate(candidates), key=key)]
