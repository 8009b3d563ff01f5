"""A LangChain RAG pipeline under Oloproof, offline and deterministic: swap in your own parts.

The vector store is langchain-core's InMemoryVectorStore over corpus.py, embedded with a
bag-of-words embedding (a stand-in for your embedding model: same text, same vector, in
every process). Each Document gets its corpus id (`Document(id=...)`), which is what
cases.jsonl's relevance labels name: without ids the store makes random UUIDs and no label
can ever match. The chain is a RunnableLambda that answers from its first context document
and cites it; replace it with `prompt | your_chat_model | parser` returning
{"answer": ..., "citations": [...]}.

Oloproof calls the retriever with `k=depth`. A retriever of your own must accept it:
`def _get_relevant_documents(self, query, *, run_manager, k=None)`.
"""

from __future__ import annotations

import math
import zlib
from typing import Any

from corpus import CORPUS, best_sentence, terms
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.runnables import RunnableLambda
from langchain_core.vectorstores import InMemoryVectorStore

from pytest_oloproof.integrations.langchain import langchain_system

DIM = 256


class BagOfWordsEmbedding(Embeddings):
    """Each content word hashed (crc32) into one of DIM dimensions, then normalised: deterministic."""

    def _embed(self, text: str) -> list[float]:
        vec = [0.0] * DIM
        for term in terms(text):
            vec[zlib.crc32(term.encode()) % DIM] += 1.0
        norm = math.sqrt(sum(v * v for v in vec)) or 1.0
        return [v / norm for v in vec]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._embed(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._embed(text)


store = InMemoryVectorStore(BagOfWordsEmbedding())
store.add_documents([Document(id=doc_id, page_content=text) for doc_id, text in CORPUS.items()])


def answer(inputs: dict[str, Any]) -> dict[str, Any]:
    """The stand-in for your model: the best sentence of the first context document, citing it."""
    docs: list[Document] = inputs["context"]
    if not docs:
        return {"answer": "I could not find this in the documents.", "citations": []}
    return {"answer": best_sentence(inputs["question"], docs[0].page_content), "citations": [docs[0].id]}


rag = langchain_system(
    store.as_retriever(),
    RunnableLambda(answer),
    name="my-langchain-rag",
    version="0.1",
    depth=4,
    top_k=2,
    index_version="corpus-1",
)
