"""Evaluate a LlamaIndex retriever and response synthesizer with Oloproof (extra ``llamaindex``).

    from .llama_index import llama_index_system
    rag = llama_index_system(index, llm=llm, depth=8, top_k=4)

and ``system.rag.object: app:rag`` in oloproof.yaml. The retriever is asked for the
configured depth (``similarity_top_k``); its nodes become Passages in the order it
returned them (doc_id from the node's source document, chunk_id from the node id,
scores kept); the synthesizer receives exactly the context Oloproof assembled, as
NodeWithScore. llama-index-core ships the tiktoken and NLTK files it uses, so it
runs offline as installed.

Token usage: the adapter adds one event handler to LlamaIndex's root instrumentation
dispatcher. While the adapter's generate (or retrieve) runs, every LLM chat or
completion that ends is reported through ``pytest_oloproof.report_usage``: the usage
the provider returned in the response's ``raw`` (``raw["usage"]`` or ``raw.usage``),
else the ``prompt_tokens``/``completion_tokens`` LlamaIndex's OpenAI classes put in
``additional_kwargs``; the model from the LLM's metadata ``model_name``, else the raw
response's ``model``. A completion
made inside a chat (how CustomLLM and MockLLM chat) counts once. An LLM that reports
nothing (MockLLM) is one call of unknown usage, never 0: TokenCountingHandler is not
used, because it counts with a tokenizer that need not be the model's (an estimate).
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextvars import ContextVar
from typing import Any, TypeVar

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

require("llama_index.core", "llama_index", "llamaindex", "llama-index-core")

from llama_index.core import get_response_synthesizer  # noqa: E402
from llama_index.core.base.base_retriever import BaseRetriever  # noqa: E402
from llama_index.core.base.response.schema import Response  # noqa: E402
from llama_index.core.instrumentation import get_dispatcher  # type: ignore[attr-defined]  # noqa: E402
from llama_index.core.instrumentation.event_handlers import BaseEventHandler  # noqa: E402
from llama_index.core.instrumentation.events import BaseEvent  # noqa: E402
from llama_index.core.instrumentation.events.llm import (  # noqa: E402
    LLMChatEndEvent,
    LLMChatStartEvent,
    LLMCompletionEndEvent,
    LLMCompletionStartEvent,
)
from llama_index.core.llms import LLM  # noqa: E402
from llama_index.core.response_synthesizers import BaseSynthesizer  # noqa: E402
from llama_index.core.schema import MetadataMode, NodeRelationship, NodeWithScore, RelatedNodeInfo, TextNode  # noqa: E402

__all__ = ["AsyncLlamaIndexSystem", "LlamaIndexSystem", "UsageEventHandler", "llama_index_system"]


T = TypeVar("T")

#: the LLM calls open in this context while an adapter stage runs (None: not inside one, report nothing)
_OPEN: ContextVar[tuple[dict[str, Any], ...] | None] = ContextVar("oloproof_llama_index_calls", default=None)
_INSTALL_LOCK = threading.Lock()
_installed = False


def _get(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, Mapping) else getattr(obj, key, None)


def _response_usage(response: Any) -> tuple[Any, str | None]:
    """(usage, model) a chat or completion response carries, each None when it says nothing."""
    if response is None:
        return None, None
    raw = getattr(response, "raw", None)
    usage = _get(raw, "usage") if raw is not None else None
    model = _get(raw, "model") if raw is not None else None
    if usage is None:
        extra = getattr(response, "additional_kwargs", None) or {}
        if not extra and getattr(response, "message", None) is not None:
            extra = response.message.additional_kwargs or {}
        if isinstance(extra, Mapping) and ("prompt_tokens" in extra or "completion_tokens" in extra):
            usage = {"prompt_tokens": extra.get("prompt_tokens"), "completion_tokens": extra.get("completion_tokens")}
    return usage, (model if isinstance(model, str) and model else None)


class UsageEventHandler(BaseEventHandler):
    """Reports the LLM calls that end inside an adapter stage (outermost call only) through report_usage."""

    @classmethod
    def class_name(cls) -> str:
        return "OloproofUsageEventHandler"

    def handle(self, event: BaseEvent, **kwargs: Any) -> Any:
        frames = _OPEN.get()
        if frames is None:
            return None
        if isinstance(event, (LLMChatStartEvent, LLMCompletionStartEvent)):
            md = event.model_dict or {}
            model = md.get("model") or md.get("model_name")  # LLMMetadata.model_name; "unknown" when unset
            known = isinstance(model, str) and model and model != "unknown"
            _OPEN.set((*frames, {"model": model if known else None, "usage": None}))
        elif isinstance(event, (LLMChatEndEvent, LLMCompletionEndEvent)) and frames:
            *outer, frame = frames
            usage, model = _response_usage(event.response)
            frame["usage"] = frame["usage"] if usage is None else usage
            frame["model"] = frame["model"] or model
            if outer:  # a completion inside a chat: the outer call reports it, once
                parent = outer[-1]
                parent["usage"] = parent["usage"] if frame["usage"] is None else frame["usage"]
                parent["model"] = parent["model"] or frame["model"]
            else:
                report_usage(model=frame["model"], usage=frame["usage"])
            _OPEN.set(tuple(outer))
        return None


def install_usage_handler() -> None:
    """Add the usage handler to LlamaIndex's root dispatcher (once per process)."""
    global _installed
    with _INSTALL_LOCK:
        if not _installed:
            get_dispatcher().add_event_handler(UsageEventHandler())
            _installed = True


def _metered(fn: Callable[[], T]) -> T:
    """Run one stage with LLM usage reporting on (a fresh stack: a call left open by an error cannot leak)."""
    token = _OPEN.set(())
    try:
        return fn()
    finally:
        _OPEN.reset(token)


async def _ametered(fn: Callable[[], Awaitable[T]]) -> T:
    token = _OPEN.set(())
    try:
        return await fn()
    finally:
        _OPEN.reset(token)


class LlamaIndexSystem:
    """A LlamaIndex retriever (or index) and synthesizer (or LLM) as Oloproof's two stages."""

    def __init__(
        self,
        retriever: Any,
        synthesizer: BaseSynthesizer | None = None,
        *,
        llm: LLM | None = None,
        name: str | None = "llama-index-rag",
        version: str | None = None,
        depth: int | None = None,
        top_k: int | None = None,
        token_budget: int | None = None,
        index_version: str | None = None,
        query_key: str = "question",
        doc_id_key: str | None = None,
        chunk_id_key: str | None = None,
        count_tokens: Callable[[str], int] | None = None,
        tokenizer: Callable[[str], Sequence[Any]] | None = None,
        output: Callable[[Any], Mapping[str, Any]] | None = None,
    ) -> None:
        if (synthesizer is None) == (llm is None):
            raise TypeError("pass a response synthesizer or an llm= (one of them)")
        if not isinstance(retriever, BaseRetriever) and not callable(getattr(retriever, "as_retriever", None)):
            raise TypeError(f"retriever must be a LlamaIndex BaseRetriever or an index, got {type(retriever).__name__}")
        self.source = retriever
        self.synthesizer = synthesizer if synthesizer is not None else get_response_synthesizer(llm=llm)
        self.query_key = query_key
        self.doc_id_key = doc_id_key
        self.chunk_id_key = chunk_id_key
        self.output = output
        self._by_depth: dict[int, BaseRetriever] = {}
        self._lock = threading.Lock()
        self.__oloproof_rag__ = rag_settings(
            name=name, version=version, depth=depth, top_k=top_k, token_budget=token_budget, index_version=index_version
        )
        install_usage_handler()
        tok = tokenizer
        counter = token_counter(count_tokens, None if tok is None else (lambda text: len(tok(text))))
        if counter is not None:  # only then: without a counter a token_budget is a configuration error
            self.count_tokens = counter

    # -- retrieve

    def retriever_for(self, depth: int) -> BaseRetriever:
        """The retriever asked for ``depth`` results: ``index.as_retriever(similarity_top_k=depth)``, or the
        given retriever with its ``similarity_top_k`` set (a retriever without one is called as it is)."""
        with self._lock:
            if isinstance(self.source, BaseRetriever):
                if hasattr(self.source, "similarity_top_k") and self.source.similarity_top_k != depth:
                    self.source.similarity_top_k = depth
                return self.source
            if depth not in self._by_depth:
                self._by_depth[depth] = self.source.as_retriever(similarity_top_k=depth)
            return self._by_depth[depth]

    def retrieve(self, input: Any, depth: int) -> Retrieval:
        """Retrieve ``depth`` nodes; they become Passages in the retriever's order, scores kept."""
        query = query_of(input, self.query_key)
        return self._retrieval(query, depth, _metered(lambda: self.retriever_for(depth).retrieve(query)))

    def _retrieval(self, query: str, depth: int, nodes: Sequence[NodeWithScore]) -> Retrieval:
        return Retrieval(
            query=query, depth=depth, candidates=tuple(self._passage(n, i) for i, n in enumerate(nodes, 1))
        )

    def _passage(self, scored: Any, position: int) -> Passage:
        if not isinstance(scored, NodeWithScore):
            raise ContractError(f"the retriever returned a {type(scored).__name__} at position {position}")
        node = scored.node
        meta = dict(node.metadata or {})
        if self.doc_id_key:
            doc_id = chunk_or_none(meta.get(self.doc_id_key))
            if doc_id is None:
                raise ContractError(f"the node at position {position} has no metadata[{self.doc_id_key!r}]")
        else:
            doc_id = node.ref_doc_id or node.node_id
        if self.chunk_id_key:
            chunk_id = chunk_or_none(meta.get(self.chunk_id_key))
        else:
            chunk_id = node.node_id if node.node_id != doc_id else None
        return Passage(
            doc_id=doc_id,
            chunk_id=chunk_id,
            score=scored.score,
            text=node.get_content(metadata_mode=MetadataMode.NONE),
            metadata=meta or None,
        )

    # -- generate

    def node(self, passage: Passage) -> NodeWithScore:
        """The NodeWithScore a context passage stands for: same id, text, metadata, source and score."""
        meta = context_metadata(passage, self.doc_id_key, self.chunk_id_key)
        node_id = passage.doc_id if self.chunk_id_key or passage.chunk_id is None else passage.chunk_id
        node = TextNode(id_=node_id, text=passage.text or "", metadata=meta)
        if not self.doc_id_key and node_id != passage.doc_id:
            node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=passage.doc_id)
        return NodeWithScore(node=node, score=passage.score)

    def generate(self, input: Any, context: Sequence[Passage]) -> Mapping[str, Any]:
        """Synthesize a response from exactly the assembled context."""
        query = query_of(input, self.query_key)
        nodes = [self.node(p) for p in context]
        return self._output(_metered(lambda: self.synthesizer.synthesize(query, nodes=nodes)))

    def _output(self, response: Any) -> Mapping[str, Any]:
        if self.output is not None:
            return self.output(response)
        if isinstance(response, Response):
            return {"answer": "" if response.response is None else str(response.response)}
        raise ContractError(
            f"the synthesizer returned a {type(response).__name__}; pass output= to turn it into a mapping "
            "such as {'answer': ...} (streaming responses are not evaluated)"
        )


class AsyncLlamaIndexSystem(LlamaIndexSystem):
    """The same stages on the event loop: ``aretrieve`` and ``asynthesize``."""

    async def retrieve(self, input: Any, depth: int) -> Retrieval:  # type: ignore[override]
        query = query_of(input, self.query_key)
        retriever = self.retriever_for(depth)
        return self._retrieval(query, depth, await _ametered(lambda: retriever.aretrieve(query)))

    async def generate(self, input: Any, context: Sequence[Passage]) -> Mapping[str, Any]:  # type: ignore[override]
        query = query_of(input, self.query_key)
        nodes = [self.node(p) for p in context]
        return self._output(await _ametered(lambda: self.synthesizer.asynthesize(query, nodes=nodes)))


def llama_index_system(
    retriever: Any, synthesizer: BaseSynthesizer | None = None, *, asynchronous: bool = False, **options: Any
) -> LlamaIndexSystem:
    """A staged system from a LlamaIndex index or retriever and a synthesizer (or ``llm=``).

    ``asynchronous=True`` uses ``aretrieve`` and ``asynthesize``. Options: name, version, depth,
    top_k, token_budget, index_version (as in @rag_system); query_key (default "question"),
    doc_id_key, chunk_id_key (metadata keys), count_tokens(text) or tokenizer (text -> tokens,
    e.g. ``Settings.tokenizer``), output(response) -> mapping.
    """
    cls = AsyncLlamaIndexSystem if asynchronous else LlamaIndexSystem
    return cls(retriever, synthesizer, **options)
