"""A LlamaIndex RAG pipeline under Oloproof, offline and deterministic: swap in your own parts.

The index is llama-index-core's in-memory VectorStoreIndex over corpus.py, embedded with a
bag-of-words embedding (a stand-in for your embedding model: same text, same vector, in
every process; MockEmbedding would give every node the same score). Each node gets its
corpus id (`TextNode(id_=...)`), which is what cases.jsonl's relevance labels name: without
ids LlamaIndex makes random UUIDs and no label can ever match. The LLM is MockLLM, which
echoes its prompt (the context and the question): replace it with your model.

The answer cites the nodes it was given (`output=` below), so citation_validity has
citations to check; with `require_citations: true` an answer citing nothing fails.
"""

from __future__ import annotations

import math
import zlib
from typing import Any

from corpus import CORPUS, terms
from llama_index.core import VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.llms import MockLLM
from llama_index.core.schema import TextNode

from pytest_oloproof.integrations.llama_index import llama_index_system

DIM = 256


def bag_of_words(text: str) -> list[float]:
    """Each content word hashed (crc32) into one of DIM dimensions, then normalised: deterministic."""
    vec = [0.0] * DIM
    for term in terms(text):
        vec[zlib.crc32(term.encode()) % DIM] += 1.0
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [v / norm for v in vec]


class BagOfWordsEmbedding(BaseEmbedding):
    def _get_query_embedding(self, query: str) -> list[float]:
        return bag_of_words(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return bag_of_words(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return bag_of_words(text)


index = VectorStoreIndex(
    nodes=[TextNode(id_=doc_id, text=text) for doc_id, text in CORPUS.items()],
    embed_model=BagOfWordsEmbedding(),
)


def output(response: Any) -> dict[str, Any]:
    """The answer and the ids of the nodes it was synthesized from (its citations)."""
    return {"answer": str(response.response), "citations": [n.node.node_id for n in response.source_nodes]}


rag = llama_index_system(
    index,
    llm=MockLLM(),
    name="my-llamaindex-rag",
    version="0.1",
    depth=4,
    top_k=2,
    index_version="corpus-1",
    output=output,
)
