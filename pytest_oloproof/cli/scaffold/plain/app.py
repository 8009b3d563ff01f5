"""A small, deterministic RAG system to start from: swap in your own retriever and generator.

The retriever ranks every document in corpus.py by how many question terms it shares
(ties keep the corpus order) and returns the first `depth`; the generator answers with
the sentence of its first context passage that best matches the question, and cites it.
Oloproof calls `retrieve(input, depth)` and `generate(input, context)`; the top-k cut and
the context between them are its own, so it can replay them when it diagnoses a failure.
"""

from __future__ import annotations

from typing import Any

from corpus import CORPUS, best_sentence, terms

from pytest_oloproof import Passage, Retrieval, rag_system


@rag_system(name="my-rag", version="0.1", depth=4, top_k=2, index_version="corpus-1")
class MyRag:
    def retrieve(self, input: dict[str, Any], depth: int) -> Retrieval:
        q = terms(input["question"])
        ranked = sorted(CORPUS.items(), key=lambda item: -len(q & terms(item[1])))  # stable: ties keep corpus order
        candidates = tuple(
            Passage(doc_id=doc_id, score=float(len(q & terms(text))), text=text) for doc_id, text in ranked[:depth]
        )
        return Retrieval(query=input["question"], depth=depth, candidates=candidates)

    def generate(self, input: dict[str, Any], context: list[Passage]) -> dict[str, Any]:
        if not context:
            return {"answer": "I could not find this in the documents.", "citations": []}
        first = context[0]
        return {"answer": best_sentence(input["question"], first.text or ""), "citations": [first.doc_id]}


rag = MyRag()
