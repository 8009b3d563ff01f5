"""Evaluate a LangChain retriever and chain with Oloproof (extra ``langchain``: langchain-core only).

    from pytest_oloproof.integrations.langchain import langchain_system
    rag = langchain_system(vectorstore.as_retriever(), prompt | llm | StrOutputParser(), depth=8, top_k=4)

and ``system.rag.object: app:rag`` in oloproof.yaml. The retriever is called with the
configured depth (``k=depth``); its documents become Passages in the order it returned
them; the chain receives the case input plus ``context``: exactly the context Oloproof
assembled, as LangChain Documents.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import ContractError
from ..system import Passage, Retrieval
from ._common import chunk_or_none, query_of, rag_settings, require, token_counter

require("langchain_core", "langchain", "langchain", "langchain-core")

from langchain_core.documents import Document  # noqa: E402
from langchain_core.messages import BaseMessage  # noqa: E402
from langchain_core.retrievers import BaseRetriever  # noqa: E402
from langchain_core.runnables import Runnable  # noqa: E402

__all__ = ["AsyncLangChainSystem", "LangChainSystem", "langchain_system"]


class LangChainSystem:
    """A LangChain retriever and generation Runnable as Oloproof's two stages (sync: ``invoke``)."""

    def __init__(
        self,
        retriever: BaseRetriever,
        chain: Runnable[Any, Any],
        *,
        name: str | None = "langchain-rag",
        version: str | None = None,
        depth: int | None = None,
        top_k: int | None = None,
        token_budget: int | None = None,
        index_version: str | None = None,
        query_key: str = "question",
        context_key: str = "context",
        depth_kwarg: str | None = "k",
        doc_id_key: str | None = None,
        chunk_id_key: str | None = None,
        score_key: str | None = None,
        count_tokens: Callable[[str], int] | None = None,
        tokenizer: Any = None,
        output: Callable[[Any], Mapping[str, Any]] | None = None,
    ) -> None:
        self.retriever = retriever
        self.chain = chain
        self.query_key = query_key
        self.context_key = context_key
        self.depth_kwarg = depth_kwarg
        self.doc_id_key = doc_id_key
        self.chunk_id_key = chunk_id_key
        self.score_key = score_key
        self.output = output
        self.__oloproof_rag__ = rag_settings(
            name=name, version=version, depth=depth, top_k=top_k, token_budget=token_budget, index_version=index_version
        )
        if tokenizer is not None and not callable(getattr(tokenizer, "get_num_tokens", None)):
            raise TypeError("tokenizer= must be a LangChain language model (it has get_num_tokens(text))")
        counter = token_counter(count_tokens, None if tokenizer is None else tokenizer.get_num_tokens)
        if counter is not None:  # only then: without a counter a token_budget is a configuration error
            self.count_tokens = counter

    # -- retrieve

    def _kwargs(self, depth: int) -> dict[str, Any]:
        return {} if self.depth_kwarg is None else {self.depth_kwarg: depth}

    def retrieve(self, input: Any, depth: int) -> Retrieval:
        """Call the retriever with ``k=depth``; documents become Passages in its order."""
        query = query_of(input, self.query_key)
        docs = self.retriever.invoke(query, **self._kwargs(depth))
        return self._retrieval(query, depth, docs)

    def _retrieval(self, query: str, depth: int, docs: Sequence[Document]) -> Retrieval:
        return Retrieval(query=query, depth=depth, candidates=tuple(self._passage(d, i) for i, d in enumerate(docs, 1)))

    def _passage(self, doc: Any, position: int) -> Passage:
        if not isinstance(doc, Document):
            raise ContractError(f"the retriever returned a {type(doc).__name__} at position {position}, not a Document")
        meta = dict(doc.metadata or {})
        raw = meta.get(self.doc_id_key) if self.doc_id_key else doc.id
        doc_id = chunk_or_none(raw)
        if doc_id is None and self.doc_id_key:
            raise ContractError(
                f"the document at position {position} has no metadata[{self.doc_id_key!r}] (doc_id_key); "
                "add that key to the metadata of every document in the index"
            )
        if doc_id is None:
            raise ContractError(
                f"the document at position {position} has no id (Document.id); give documents ids when adding "
                "them to the vector store, or pass doc_id_key= naming the metadata key that identifies the source"
            )
        score = meta.get(self.score_key) if self.score_key else None
        return Passage(
            doc_id=doc_id,
            chunk_id=chunk_or_none(meta.get(self.chunk_id_key)) if self.chunk_id_key else None,
            score=None if score is None else float(score),
            text=doc.page_content,
            metadata=meta or None,
        )

    # -- generate

    def document(self, passage: Passage) -> Document:
        """The LangChain Document a context passage stands for (the same one the retriever gave)."""
        meta = dict(passage.metadata or {})
        if self.doc_id_key:
            meta.setdefault(self.doc_id_key, passage.doc_id)
        if self.chunk_id_key and passage.chunk_id is not None:
            meta.setdefault(self.chunk_id_key, passage.chunk_id)
        return Document(page_content=passage.text or "", metadata=meta, id=None if self.doc_id_key else passage.doc_id)

    def _chain_input(self, input: Any, context: Sequence[Passage]) -> dict[str, Any]:
        docs = [self.document(p) for p in context]
        base = dict(input) if isinstance(input, Mapping) else {self.query_key: input}
        return {**base, self.context_key: docs}

    def generate(self, input: Any, context: Sequence[Passage]) -> Mapping[str, Any]:
        """Invoke the chain on the case input plus ``context``: the assembled Documents."""
        return self._output(self.chain.invoke(self._chain_input(input, context)))

    def _output(self, result: Any) -> Mapping[str, Any]:
        if self.output is not None:
            return self.output(result)
        if isinstance(result, str):
            return {"answer": result}
        if isinstance(result, BaseMessage):
            return {"answer": _message_text(result)}
        if isinstance(result, Mapping):
            for key, value in result.items():
                if isinstance(value, Document) or (
                    isinstance(value, (list, tuple)) and any(isinstance(v, Document) for v in value)
                ):
                    raise ContractError(
                        f"the chain's output holds Documents under {key!r}; Oloproof records the context itself, "
                        "so pass output= to keep only what the evaluators read (e.g. {'answer': result['answer']})"
                    )
            return {k: (_message_text(v) if isinstance(v, BaseMessage) else v) for k, v in result.items()}
        raise ContractError(
            f"the chain returned a {type(result).__name__}; return a str, a message or a mapping, "
            "or pass output= to turn it into a mapping such as {'answer': ...}"
        )


def _message_text(message: BaseMessage) -> str:
    """A chat message's text (``.text`` is a property in langchain-core 1.x, a method before)."""
    text: Any = message.text
    return str(text() if callable(text) else text)


class AsyncLangChainSystem(LangChainSystem):
    """The same stages on the event loop: ``ainvoke`` for the retriever and the chain."""

    async def retrieve(self, input: Any, depth: int) -> Retrieval:  # type: ignore[override]
        query = query_of(input, self.query_key)
        docs = await self.retriever.ainvoke(query, **self._kwargs(depth))
        return self._retrieval(query, depth, docs)

    async def generate(self, input: Any, context: Sequence[Passage]) -> Mapping[str, Any]:  # type: ignore[override]
        return self._output(await self.chain.ainvoke(self._chain_input(input, context)))


def langchain_system(
    retriever: BaseRetriever, chain: Runnable[Any, Any], *, asynchronous: bool = False, **options: Any
) -> LangChainSystem:
    """A staged system from a LangChain retriever and chain; ``asynchronous=True`` uses ``ainvoke``.

    Options: name, version, depth, top_k, token_budget, index_version (as in @rag_system);
    query_key (default "question"), context_key ("context"), depth_kwarg ("k"), doc_id_key,
    chunk_id_key, score_key (metadata keys), count_tokens(text) or tokenizer (a model with
    get_num_tokens), output(result) -> mapping.
    """
    cls = AsyncLangChainSystem if asynchronous else LangChainSystem
    return cls(retriever, chain, **options)
