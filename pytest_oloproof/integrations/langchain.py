"""Evaluate a LangChain retriever and chain with Oloproof (extra ``langchain``: langchain-core only).

    from .langchain import langchain_system
    rag = langchain_system(vectorstore.as_retriever(), prompt | llm | StrOutputParser(), depth=8, top_k=4)

and ``system.rag.object: app:rag`` in oloproof.yaml. The retriever is called with the
configured depth (``k=depth``); its documents become Passages in the order it returned
them; the chain receives the case input plus ``context``: exactly the context Oloproof
assembled, as LangChain Documents.

Token usage: the chain is invoked with a callback handler (``UsageCallback``, added to
any callbacks the chain already has) that reports every model call that ends inside it
through ``pytest_oloproof.report_usage``: the AIMessage's ``usage_metadata`` (input,
output, cached-read tokens), else the LLM result's ``llm_output`` token usage, with the
model name from ``response_metadata``/``llm_output``. So the ``Tokens:`` line counts the
generation whatever the chain's last step is (a StrOutputParser included). A model call
that reported no usage is recorded as one call of unknown usage, never as 0 tokens.
LangChain retrievers and embeddings report no usage, so retrieval records none unless
your own code calls ``report_usage``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any
from uuid import UUID

from pytest_oloproof.errors import ContractError
from pytest_oloproof.system.declare import Passage, Retrieval
from pytest_oloproof.usage.accounting import report_usage

from ._common import (
    chunk_or_none,
    context_metadata,
    query_of,
    rag_settings,
    require,
    token_counter,
)

require("langchain_core", "langchain", "langchain", "langchain-core")

from langchain_core.callbacks import BaseCallbackHandler  # noqa: E402
from langchain_core.documents import Document  # noqa: E402
from langchain_core.messages import AIMessage, BaseMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, LLMResult  # noqa: E402
from langchain_core.retrievers import BaseRetriever  # noqa: E402
from langchain_core.runnables import Runnable, RunnableConfig  # noqa: E402

__all__ = ["AsyncLangChainSystem", "LangChainSystem", "UsageCallback", "langchain_system"]


def _model_name(*sources: Any) -> str | None:
    for meta in sources:
        if isinstance(meta, Mapping):
            for key in ("model_name", "model", "ls_model_name"):
                if isinstance(meta.get(key), str) and meta[key]:
                    return str(meta[key])
    return None


class UsageCallback(BaseCallbackHandler):
    """Reports each model call that ends under it through ``report_usage`` (one entry per prompt).

    The usage is the generation message's ``usage_metadata``; else the result's
    ``llm_output["token_usage"]`` (or ``["usage"]``); else the call is one of unknown
    usage. ``run_inline``: called in the caller's context, where Oloproof collects usage.
    """

    run_inline = True

    def __init__(self) -> None:
        self.calls = 0
        self._started: dict[UUID, Any] = {}

    def on_chat_model_start(self, serialized: Any, messages: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._started[run_id] = kwargs.get("metadata")

    def on_llm_start(self, serialized: Any, prompts: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._started[run_id] = kwargs.get("metadata")

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        started = self._started.pop(run_id, None)
        llm_output = response.llm_output if isinstance(response.llm_output, Mapping) else {}
        call_usage = llm_output.get("token_usage") or llm_output.get("usage")
        reported = False
        for candidates in response.generations:
            for gen in candidates:
                message = gen.message if isinstance(gen, ChatGeneration) else None
                if isinstance(message, AIMessage) and message.usage_metadata:
                    model = _model_name(message.response_metadata, llm_output, started)
                    report_usage(model=model, usage=dict(message.usage_metadata))
                    self.calls += 1
                    reported = True
                    break  # one entry per prompt: the first candidate carries the call's usage
        if not reported:
            messages = [g.message for c in response.generations for g in c if isinstance(g, ChatGeneration)]
            meta = messages[0].response_metadata if messages else None
            report_usage(model=_model_name(meta, llm_output, started), usage=call_usage or None)
            self.calls += 1


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
        meta = context_metadata(passage, self.doc_id_key, self.chunk_id_key)
        return Document(page_content=passage.text or "", metadata=meta, id=None if self.doc_id_key else passage.doc_id)

    def _chain_input(self, input: Any, context: Sequence[Passage]) -> dict[str, Any]:
        docs = [self.document(p) for p in context]
        base = dict(input) if isinstance(input, Mapping) else {self.query_key: input}
        return {**base, self.context_key: docs}

    def generate(self, input: Any, context: Sequence[Passage]) -> Mapping[str, Any]:
        """Invoke the chain on the case input plus ``context``: the assembled Documents."""
        return self._output(self.chain.invoke(self._chain_input(input, context), config=self._config()))

    def _config(self) -> RunnableConfig:
        """The run config carrying a fresh usage callback (merged with the chain's own callbacks)."""
        return RunnableConfig(callbacks=[UsageCallback()])

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
        return self._output(await self.chain.ainvoke(self._chain_input(input, context), config=self._config()))


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
