"""A small, deterministic support-desk RAG system for the Oloproof walk-through.

The retriever scores each knowledge-base document by how many distinct question
terms it contains (ties keep knowledge-base order). The generator answers only
from its context: it reads the first passage it was given, picks the sentence
sharing the most terms with the question, and cites that passage. Both are
deliberately simple so every number in the walk-through can be checked by hand.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from pytest_oloproof import Passage, Retrieval, rag_system

HERE = Path(__file__).parent
STOPWORDS = {
    "a",
    "an",
    "and",
    "are",
    "as",
    "at",
    "be",
    "by",
    "can",
    "do",
    "does",
    "for",
    "from",
    "how",
    "i",
    "if",
    "in",
    "is",
    "it",
    "my",
    "of",
    "on",
    "or",
    "the",
    "to",
    "what",
    "when",
    "where",
    "which",
    "who",
    "why",
    "with",
    "you",
    "your",
    "there",
    "any",
    "we",
    "our",
    "me",
    "this",
    "that",
    "long",
    "many",
}


def terms(text: str) -> set[str]:
    """Lower-cased content words with a plural 's' removed."""
    out = set()
    for word in re.findall(r"[a-z0-9-]+", text.lower()):
        if word in STOPWORDS:
            continue
        if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
            word = word[:-1]
        out.add(word)
    return out


def load_kb() -> list[dict[str, str]]:
    with (HERE / "knowledge_base.jsonl").open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@rag_system(
    name="support-rag",
    version="slice-b-example",
    depth=6,
    top_k=2,
    token_budget=40,
    index_version="kb-2026-09-16",
)
class SupportRag:
    def __init__(self) -> None:
        self.kb = load_kb()

    def retrieve(self, input, depth):
        q = terms(input["question"])
        scored = []
        for order, doc in enumerate(self.kb):
            score = len(q & terms(doc["text"]))
            if score > 0:
                scored.append((-score, order, doc))
        scored.sort(key=lambda t: (t[0], t[1]))
        passages = [
            Passage(doc_id=doc["doc_id"], score=float(-neg), text=doc["text"]) for neg, _, doc in scored[:depth]
        ]
        return Retrieval(query=input["question"], depth=depth, candidates=tuple(passages))

    def generate(self, input, context):
        if not context:
            return {"answer": "I could not find this in the knowledge base.", "citations": []}
        best = context[0]
        q = terms(input["question"])
        sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", best.text or "") if s.strip()]
        answer = max(sentences, key=lambda s: len(q & terms(s))) if sentences else ""
        return {"answer": answer, "citations": [best.doc_id]}

    def count_tokens(self, passage):
        return len((passage.text or "").split())


def keyword_reranker(query, candidates):
    """A reranker for `oloproof diagnose --intervention reranker --reranker app:keyword_reranker`.

    `query` is the question string `retrieve` returned in `Retrieval(query=...)`. Passages
    dense in question terms (shared terms per word) come first; a short, on-topic passage
    can then move ahead of a long one, and fit the token budget.
    """
    q = terms(query)

    def density(p: Passage) -> float:
        words = len((p.text or "").split())
        return len(q & terms(p.text or "")) / max(1, words)

    return sorted(candidates, key=density, reverse=True)
