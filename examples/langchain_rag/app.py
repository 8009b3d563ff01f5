"""A LangChain RAG pipeline over a small help centre, built from langchain-core's own components.

Offline and deterministic: a hashing bag-of-words embedding (no model to download), langchain-core's
``InMemoryVectorStore`` with explicit document ids, a ``BaseRetriever`` that takes ``k`` (so Oloproof's
``depth`` reaches it) and an extractive generator as a ``RunnableLambda``: it answers with the sentence of
its first context document that shares the most words with the question, and cites that document.
``langchain_system`` turns the two into the stages Oloproof runs.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path
from typing import Any

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableLambda
from langchain_core.vectorstores import InMemoryVectorStore

from pytest_oloproof.integrations.langchain import langchain_system

HERE = Path(__file__).parent
STOPWORDS = set("a an and are as at be by can do does for from how i if in is it my of on or the to what when".split())


def words(text: str) -> list[str]:
    return [w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in STOPWORDS]


class HashingEmbeddings(Embeddings):
    """Bag of words hashed into a fixed number of dimensions: the same text gives the same vector everywhere."""

    def __init__(self, size: int = 256) -> None:
        self.size = size

    def _vector(self, text: str) -> list[float]:
        vec = [0.0] * self.size
        for word in words(text):
            vec[int(hashlib.sha256(word.encode()).hexdigest(), 16) % self.size] += 1.0
        norm = math.sqrt(sum(x * x for x in vec)) or 1.0
        return [x / norm for x in vec]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vector(text)


class HelpCentreRetriever(BaseRetriever):
    """Top-k by cosine similarity. `k` is a keyword argument, so `retriever.invoke(query, k=depth)` is honoured
    (a retriever with only a `k` field would silently return its own number of documents)."""

    store: InMemoryVectorStore
    k: int = 4

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int | None = None
    ) -> list[Document]:
        found = self.store.similarity_search_with_score(query, k=k or self.k)
        return [Document(id=doc.id, page_content=doc.page_content, metadata={"score": score}) for doc, score in found]


def answer(inputs: dict[str, Any]) -> dict[str, Any]:
    """The sentence of the first context document sharing the most words with the question, citing it."""
    context: list[Document] = inputs["context"]
    if not context:
        return {"answer": "I don't know.", "citations": []}
    question = set(words(inputs["question"]))
    sentences = re.split(r"(?<=\.)\s+", context[0].page_content)
    best = max(sentences, key=lambda s: len(question & set(words(s))))  # the first of equals wins
    return {"answer": best, "citations": [context[0].id]}


def answer_from_every_passage(inputs: dict[str, Any]) -> dict[str, Any]:
    """The second version: the best sentence of any context document (the first of equals), citing its document."""
    question = set(words(inputs["question"]))
    candidates = [(s, doc) for doc in inputs["context"] for s in re.split(r"(?<=\.)\s+", doc.page_content)]
    if not candidates:
        return {"answer": "I don't know.", "citations": []}
    best, doc = max(candidates, key=lambda c: len(question & set(words(c[0]))))
    return {"answer": best, "citations": [doc.id]}


def build_store() -> InMemoryVectorStore:
    store = InMemoryVectorStore(HashingEmbeddings())
    rows = [json.loads(line) for line in (HERE / "help_centre.jsonl").read_text(encoding="utf-8").splitlines()]
    # explicit ids: without them the store makes random UUIDs, and no retrieved id would ever match a label
    store.add_documents([Document(page_content=r["text"]) for r in rows], ids=[r["id"] for r in rows])
    return store


SETTINGS: dict[str, Any] = {
    "name": "help-centre-langchain",
    "index_version": "help-centre-2026-12",
    "depth": 6,  # more than the retriever's own k: Oloproof's k=depth must reach it
    "top_k": 2,
    "token_budget": 60,
    "score_key": "score",  # the metadata key HelpCentreRetriever puts the similarity in
    "count_tokens": lambda text: len(text.split()),
}
retriever = HelpCentreRetriever(store=build_store())
rag = langchain_system(retriever, RunnableLambda(answer), version="extractive-v1", **SETTINGS)
# oloproof-v2.yaml: the same retriever, a generator that reads every passage of its context
rag_v2 = langchain_system(retriever, RunnableLambda(answer_from_every_passage), version="extractive-v2", **SETTINGS)
