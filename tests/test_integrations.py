"""LangChain and LlamaIndex adapters through real `pytest --oloproof` sessions, offline.

The pipelines are built from the libraries' own fakes (langchain-core's InMemoryVectorStore with
DeterministicFakeEmbedding and RunnableLambda; llama-index-core's in-memory VectorStoreIndex,
MockEmbedding and MockLLM). Every session runs with a conftest that refuses any connection that is
not to 127.0.0.1 and notes the attempt, so a library that tried to download something fails the test
even when it swallows the error.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Mapping
from typing import Any

import pytest
from oloproof_project import module_name
from staged_helpers import by_id, run_records

pytest.importorskip("langchain_core")
pytest.importorskip("llama_index.core")

OFFLINE_CONFTEST = """
import socket

_connect = socket.socket.connect


def _loopback_only(self, address):
    host = address[0] if isinstance(address, tuple) else address
    if self.family in (socket.AF_INET, socket.AF_INET6) and host not in ("127.0.0.1", "::1", "localhost"):
        with open("network-attempts.txt", "a") as f:  # a library may swallow the error; the test still sees it
            f.write(repr(address) + "\\n")
        raise OSError(f"offline test: a connection to {address!r} was attempted")
    return _connect(self, address)


socket.socket.connect = _loopback_only
"""

# Eight documents, each with one word ("w0".."w7") that only it contains; two chunks per source.
TEXTS = [f"Passage {i} mentions w{i} and some filler words here" for i in range(8)]

LANGCHAIN_APP = """
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.runnables import RunnableLambda
from langchain_core.vectorstores import InMemoryVectorStore

from pytest_oloproof.integrations.langchain import langchain_system

TEXTS = {texts!r}
store = InMemoryVectorStore(DeterministicFakeEmbedding(size=16))
store.add_documents(
    [Document(id=f"id{{i}}", page_content=t, metadata={{
        "source": f"src{{i // 2}}", "chunk": f"src{{i // 2}}#{{i % 2}}"}})
     for i, t in enumerate(TEXTS)]
)


def _answer(inputs):
    docs = inputs["context"]
    return {{
        "answer": " ".join(d.page_content for d in docs),
        "citations": [d.metadata["source"] for d in docs],
        "seen": [[d.metadata["source"], d.metadata["chunk"], d.page_content, type(d).__name__] for d in docs],
    }}


async def _aanswer(inputs):
    out = _answer(inputs)
    out["path"] = "ainvoke"
    return out


def _not_sync(inputs):
    raise AssertionError("the async system must not call invoke")


rag = langchain_system(
    store.as_retriever(search_kwargs={{"k": 2}}),
    RunnableLambda(_answer),
    name="lc-rag", version="1", depth=5, top_k=3, token_budget={budget},
    doc_id_key="source", chunk_id_key="chunk", count_tokens=lambda text: len(text.split()),
)
arag = langchain_system(
    store.as_retriever(), RunnableLambda(_not_sync, afunc=_aanswer), asynchronous=True,
    name="lc-rag-async", version="1", depth=5, top_k=3, doc_id_key="source", chunk_id_key="chunk",
)
"""

LLAMA_APP = """
from llama_index.core import VectorStoreIndex
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.llms import MockLLM
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode

from pytest_oloproof.integrations.llama_index import llama_index_system

TEXTS = {texts!r}
# MockEmbedding embeds every query as the same constant vector, so these stored embeddings
# fix one ranking for every query: node 0 first, then 1, 2, ...
nodes = [
    TextNode(id_=f"src{{i // 2}}#{{i % 2}}", text=t, embedding=[1.0, 1.0, 1.0, 1.0 - 0.25 * i],
             relationships={{NodeRelationship.SOURCE: RelatedNodeInfo(node_id=f"src{{i // 2}}")}})
    for i, t in enumerate(TEXTS)
]
index = VectorStoreIndex(nodes=nodes, embed_model=MockEmbedding(embed_dim=4))


def _output(response):
    return {{
        "answer": response.response,
        "citations": [n.node.ref_doc_id for n in response.source_nodes],
        "seen": [[n.node.ref_doc_id, n.node.node_id, n.node.get_content(), type(n).__name__, n.score]
                 for n in response.source_nodes],
    }}


rag = llama_index_system(
    index, llm=MockLLM(), name="li-rag", version="1", depth=5, top_k=3, token_budget={budget},
    count_tokens=lambda text: len(text.split()), output=_output,
)
arag = llama_index_system(
    index.as_retriever(similarity_top_k=2), llm=MockLLM(), asynchronous=True,
    name="li-rag-async", version="1", depth=5, top_k=3, output=_output,
)
"""

EVALUATORS = [
    {"type": "contains", "criterion": "answer_correct", "field": "answer", "expected_field": "answer"},
    {"type": "hit_rate", "k": 3, "relevance_unit": "chunk"},
    {"type": "citation_validity"},
]


def cases() -> list[dict[str, Any]]:
    """One case per passage: its unique word is the answer; the passage (as a chunk) is relevant."""
    out = []
    for i, text in enumerate(TEXTS):
        src, chunk = f"src{i // 2}", f"src{i // 2}#{i % 2}"
        out.append(
            {
                "id": f"c{i}",
                "input": {"question": f"which passage talks about topic {i}?"},
                "expected": {
                    "answer": f"w{i}",
                    "relevant": [{"doc_id": src, "chunk_id": chunk}],
                    "gold_context": [{"doc_id": src, "chunk_id": chunk, "text": text}],
                },
                "metadata": {"n": i},
            }
        )
    return out


def project(pytester: pytest.Pytester, source: str, attr: str = "rag", budget: int = 18) -> str:
    """Write app module, conftest, cases and oloproof.yaml; return the app's module name."""
    mod = module_name(pytester, "app")
    pytester.makepyfile(**{mod: source.format(texts=TEXTS, budget=budget)})
    pytester.makeconftest(OFFLINE_CONFTEST)
    pytester.makefile(".jsonl", cases="\n".join(json.dumps(c) for c in cases()) + "\n")
    evs = "\n".join(f"  - {json.dumps(e)}" for e in EVALUATORS)
    pytester.makefile(
        ".yaml", oloproof=f"system:\n  rag:\n    object: {mod}:{attr}\ncases: cases.jsonl\nevaluators:\n{evs}\n"
    )
    return mod


def imported(pytester: pytest.Pytester, mod: str) -> Any:
    """The app module, imported here (an in-process pytest session unloads the modules it imported)."""
    pytester.syspathinsert()
    return importlib.import_module(mod)


def run(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict[str, Any]]:
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider", *args)
    assert result.ret in (0, 1), result.outlines
    attempts = pytester.path / "network-attempts.txt"
    assert not attempts.exists(), f"the session tried the network: {attempts.read_text()}"
    return result, run_records(pytester.path / ".oloproof")[-1]


def context_rows(rec: Mapping[str, Any]) -> list[list[Any]]:
    by_pos = {c["position"]: c for c in rec["retrieval"]}
    return [[by_pos[p]["doc_id"], by_pos[p]["chunk_id"], by_pos[p]["text"]] for p in rec["context"]]


def expected_label(rec: Mapping[str, Any], chunk: str, top_k: int) -> str:
    """The diagnosis label a recovered case must get, from where its relevant chunk sat."""
    positions = [c["position"] for c in rec["retrieval"] if c["chunk_id"] == chunk]
    if not positions:
        return "RETRIEVAL_MISS"
    return "CONTEXT_ASSEMBLY_LOSS" if positions[0] <= top_k else "RANKED_OUT"


def diagnose(pytester: pytest.Pytester, run_id: str) -> dict[str, Any]:
    before = set((pytester.path / ".oloproof" / "diagnoses").glob("*.json"))
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--oloproof", "--oloproof-diagnose", run_id, "--oloproof-criterion", "answer_correct"
    )
    result.stdout.fnmatch_lines(["Diagnosis sha256:*"])
    [new] = set((pytester.path / ".oloproof" / "diagnoses").glob("*.json")) - before
    doc: dict[str, Any] = json.loads(new.read_text(encoding="utf-8"))
    return doc


def check_diagnosis(pytester: pytest.Pytester, record: Mapping[str, Any]) -> set[str]:
    """The gold-context diagnosis labels each failure by where its relevant chunk was; returns the labels."""
    recs = by_id(record)
    failed = sorted(cid for cid, r in recs.items() if r["criteria"]["answer_correct"]["value"] < 1)
    assert len(failed) >= 2, failed
    doc = diagnose(pytester, record["run_id"])
    got = {e["id"]: e["label"] for e in doc["cases"]}
    chunk = {c["id"]: c["expected"]["relevant"][0]["chunk_id"] for c in cases()}
    assert got == {cid: expected_label(recs[cid], chunk[cid], 3) for cid in failed}
    return set(got.values())


# ---------------------------------------------------------------- LangChain


def test_langchain_positions_context_tokens_and_stage_caches(pytester: pytest.Pytester) -> None:
    mod = project(pytester, LANGCHAIN_APP)
    result, record = run(pytester)
    result.stdout.fnmatch_lines(["Stages: retrieve 0 hit/8 miss; generate 0 hit/8 miss"])
    app = imported(pytester, mod)
    for cid, rec in by_id(record).items():
        question = next(c["input"]["question"] for c in cases() if c["id"] == cid)
        # depth reached the retriever (k=5 overrides its search_kwargs k=2); its order is kept
        docs = app.store.similarity_search(question, k=5)
        assert [(c["position"], c["doc_id"], c["chunk_id"], c["text"]) for c in rec["retrieval"]] == [
            (i, d.metadata["source"], d.metadata["chunk"], d.page_content) for i, d in enumerate(docs, 1)
        ]
        assert [c["tokens"] for c in rec["retrieval"]] == [len(d.page_content.split()) for d in docs]
        # the chain received exactly the assembled context, as Documents, in order
        assert [row[:3] for row in rec["output"]["seen"]] == context_rows(rec)
        assert {row[3] for row in rec["output"]["seen"]} <= {"Document"}
        assert len(rec["context"]) == 2 and rec["context_truncated"] is True  # 3 x 9 words under a budget of 18
    # a new version regenerates everything and retrieves nothing again
    (pytester.path / "oloproof.yaml").write_text(
        (pytester.path / "oloproof.yaml").read_text().replace("system:\n", "system:\n  version: '2'\n")
    )
    result, _ = run(pytester)
    result.stdout.fnmatch_lines(["Stages: retrieve 8 hit/0 miss; generate 0 hit/8 miss"])
    # a larger budget: retrievals reused, only the cases whose context changed generated again
    config = pytester.path / "oloproof.yaml"
    config.write_text(config.read_text().replace("  rag:\n", "  rag:\n    token_budget: 100\n"))
    result, wider = run(pytester)
    changed = [cid for cid, r in by_id(wider).items() if len(r["context"]) == 3]
    assert len(changed) == 8
    result.stdout.fnmatch_lines(["Stages: retrieve 8 hit/0 miss; generate 0 hit/8 miss"])


def test_langchain_gold_context_diagnosis(pytester: pytest.Pytester) -> None:
    project(pytester, LANGCHAIN_APP)
    _, record = run(pytester)
    labels = check_diagnosis(pytester, record)
    assert labels <= {"RETRIEVAL_MISS", "RANKED_OUT", "CONTEXT_ASSEMBLY_LOSS"}


def test_langchain_async_runs_on_the_event_loop(pytester: pytest.Pytester) -> None:
    project(pytester, LANGCHAIN_APP, attr="arag")
    _, record = run(pytester)
    recs = by_id(record)
    assert all(r["error"] is None and r["output"]["path"] == "ainvoke" for r in recs.values())
    assert all(len(r["retrieval"]) == 5 for r in recs.values())  # k=5 reached ainvoke too


def test_langchain_prompt_and_fake_chat_model_give_the_answer(pytester: pytest.Pytester) -> None:
    source = LANGCHAIN_APP + (
        "\nimport json\nfrom langchain_core.language_models.fake_chat_models import FakeListChatModel\n"
        "from langchain_core.output_parsers import StrOutputParser\n"
        "from langchain_core.prompts import ChatPromptTemplate\n"
        "prompt = ChatPromptTemplate.from_messages([('human', 'Context: {{context}}\\nQuestion: {{question}}')])\n"
        "def _keep(value):\n"
        "    with open('prompts.jsonl', 'a') as f:\n"
        "        f.write(json.dumps(value.to_string()) + '\\n')\n"
        "    return value\n"
        "chat = prompt | RunnableLambda(_keep) | FakeListChatModel(responses=['w3 it is']) | StrOutputParser()\n"
        "chatrag = langchain_system(store.as_retriever(), chat, name='lc-chat', depth=4, top_k=2)\n"
    )
    project(pytester, source, attr="chatrag")
    _, record = run(pytester)
    recs = by_id(record)
    assert {r["output"]["answer"] for r in recs.values()} == {"w3 it is"}
    assert [cid for cid, r in recs.items() if r["criteria"]["answer_correct"]["value"] == 1] == ["c3"]
    prompts = [json.loads(line) for line in (pytester.path / "prompts.jsonl").read_text().splitlines()]
    assert len(prompts) == 8 and all("page_content=" in p for p in prompts)  # the documents reached the prompt


# ---------------------------------------------------------------- LlamaIndex


def test_llama_index_positions_scores_nodes_and_stage_caches(pytester: pytest.Pytester) -> None:
    mod = project(pytester, LLAMA_APP)
    result, record = run(pytester)
    result.stdout.fnmatch_lines(["Stages: retrieve 0 hit/8 miss; generate 0 hit/8 miss"])
    app = imported(pytester, mod)
    for rec in by_id(record).values():
        # similarity_top_k=depth; the ranking the stored embeddings fix; scores kept
        nodes = app.index.as_retriever(similarity_top_k=5).retrieve("anything")
        assert [(c["doc_id"], c["chunk_id"], c["score"]) for c in rec["retrieval"]] == [
            (n.node.ref_doc_id, n.node.node_id, n.score) for n in nodes
        ]
        assert [c["chunk_id"] for c in rec["retrieval"]] == ["src0#0", "src0#1", "src1#0", "src1#1", "src2#0"]
        # the synthesizer got exactly the assembled context as NodeWithScore, with ids and scores
        by_pos = {c["position"]: c for c in rec["retrieval"]}
        assert rec["output"]["seen"] == [
            [by_pos[p]["doc_id"], by_pos[p]["chunk_id"], by_pos[p]["text"], "NodeWithScore", by_pos[p]["score"]]
            for p in rec["context"]
        ]
        assert rec["context"] == [1, 2]  # 9 + 9 words fill the budget of 18
    config = pytester.path / "oloproof.yaml"
    config.write_text(config.read_text().replace("  rag:\n", "  rag:\n    token_budget: 100\n"))
    result, _ = run(pytester)
    result.stdout.fnmatch_lines(["Stages: retrieve 8 hit/0 miss; generate 0 hit/8 miss"])
    result, _ = run(pytester)  # unchanged: the execution cache serves every case
    result.stdout.fnmatch_lines(["Stages: retrieve 0 hit/0 miss; generate 0 hit/0 miss"])


def test_llama_index_gold_context_diagnosis(pytester: pytest.Pytester) -> None:
    project(pytester, LLAMA_APP)
    _, record = run(pytester)
    # one ranking for every question: c0, c1 in the context; c2 cut by the budget; c3, c4 ranked out; rest missed
    passed = sorted(cid for cid, r in by_id(record).items() if r["criteria"]["answer_correct"]["value"] == 1)
    assert passed == ["c0", "c1"]
    labels = check_diagnosis(pytester, record)
    assert labels == {"RETRIEVAL_MISS", "RANKED_OUT", "CONTEXT_ASSEMBLY_LOSS"}


def test_llama_index_async_runs_on_the_event_loop(pytester: pytest.Pytester) -> None:
    project(pytester, LLAMA_APP, attr="arag")
    _, record = run(pytester)
    recs = by_id(record)
    assert all(r["error"] is None for r in recs.values())
    # depth reached the retriever (its similarity_top_k=2 was raised to 5)
    assert all(len(r["retrieval"]) == 5 for r in recs.values())
    assert all(len(r["output"]["seen"]) == 3 for r in recs.values())


def test_token_counts_come_from_the_named_tokenizer(pytester: pytest.Pytester) -> None:
    """tokenizer=: a LangChain model's get_num_tokens; LlamaIndex's Settings.tokenizer (tiktoken, shipped)."""
    source = LANGCHAIN_APP + (
        "\nfrom langchain_core.language_models.fake_chat_models import FakeListChatModel\n"
        "model = FakeListChatModel(responses=['x'], custom_get_token_ids=lambda text: [0, 1] * len(text.split()))\n"
        "tokrag = langchain_system(store.as_retriever(), RunnableLambda(_answer), doc_id_key='source',\n"
        "                          chunk_id_key='chunk', depth=3, token_budget=40, tokenizer=model)\n"
    )
    project(pytester, source, attr="tokrag")
    _, record = run(pytester)
    for rec in by_id(record).values():
        assert [c["tokens"] for c in rec["retrieval"]] == [2 * len(c["text"].split()) for c in rec["retrieval"]]
        assert rec["context"] == [1, 2]  # 18 + 18 tokens fit in 40, the third does not

    source = LLAMA_APP + (
        "\nfrom llama_index.core import Settings\n"
        "tokrag = llama_index_system(index, llm=MockLLM(), depth=3, token_budget=40, tokenizer=Settings.tokenizer)\n"
    )
    (pytester.path / ".oloproof").rename(pytester.path / "langchain-store")
    project(pytester, source, attr="tokrag")
    _, record = run(pytester)
    from llama_index.core import Settings

    for rec in by_id(record).values():
        assert [c["tokens"] for c in rec["retrieval"]] == [len(Settings.tokenizer(c["text"])) for c in rec["retrieval"]]


# ---------------------------------------------------------------- without the library


@pytest.mark.parametrize(
    ("adapter", "library", "extra"),
    [("langchain", "langchain_core", "langchain"), ("llama_index", "llama_index.core", "llamaindex")],
)
def test_importing_an_adapter_without_its_library_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, adapter: str, library: str, extra: str
) -> None:
    name = f"pytest_oloproof.integrations.{adapter}"
    monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setitem(sys.modules, library, None)  # what an uninstalled package looks like to import
    with pytest.raises(ImportError, match=rf"pip install 'pytest-oloproof\[{extra}\]'"):
        importlib.import_module(name)
    monkeypatch.delitem(sys.modules, name, raising=False)


def test_a_chain_output_holding_documents_is_a_clear_case_error(pytester: pytest.Pytester) -> None:
    source = LANGCHAIN_APP + (
        "\nechoes = langchain_system(store.as_retriever(), RunnableLambda(lambda x: dict(x, answer='a')),\n"
        "                          doc_id_key='source', depth=3)\n"
        "picked = langchain_system(store.as_retriever(), RunnableLambda(lambda x: dict(x, answer='a')),\n"
        "                          doc_id_key='source', depth=3, output=lambda r: dict(answer=r['answer']))\n"
    )
    project(pytester, source, attr="echoes")
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=8)
    result.stdout.fnmatch_lines(["*ContractError: the chain's output holds Documents under 'context'*output=*"])
    project(pytester, source, attr="picked")
    _, record = run(pytester)
    assert {r["output"]["answer"] for r in by_id(record).values()} == {"a"}


def test_a_document_without_an_id_is_a_clear_case_error(pytester: pytest.Pytester) -> None:
    source = LANGCHAIN_APP + (
        "\nbare = InMemoryVectorStore(DeterministicFakeEmbedding(size=16))\n"
        "bare.add_documents([Document(page_content=t) for t in TEXTS])\n"
        "norag = langchain_system(bare.as_retriever(), RunnableLambda(_answer), doc_id_key='source', depth=3)\n"
    )
    project(pytester, source, attr="norag")
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=8)
    result.stdout.fnmatch_lines(["*ContractError: the document at position 1 has no metadata?'source'? (doc_id_key)*"])


# ---------------------------------------------------------------- token usage through report_usage

METERED_LANGCHAIN = (
    LANGCHAIN_APP
    + """
from langchain_core.language_models.fake_chat_models import FakeListChatModel, FakeMessagesListChatModel
from langchain_core.messages import AIMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate

prompt = ChatPromptTemplate.from_messages([('human', 'Context: {{context}}\\nQuestion: {{question}}')])
reply = AIMessage(
    content="w3 it is",
    usage_metadata={{
        "input_tokens": 30, "output_tokens": 4, "total_tokens": 34, "input_token_details": {{"cache_read": 10}}
    }},
    response_metadata={{"model_name": "fake-gen"}},
)
metered = prompt | FakeMessagesListChatModel(responses=[reply]) | StrOutputParser()
mrag = langchain_system(store.as_retriever(), metered, name="lc-metered", depth=4, top_k=2)
amrag = langchain_system(store.as_retriever(), metered, asynchronous=True, name="lc-metered", depth=4, top_k=2)
silent = langchain_system(
    store.as_retriever(), prompt | FakeListChatModel(responses=["w3"]) | StrOutputParser(), name="lc-silent", depth=4
)
"""
)

METERED_LLAMA = (
    LLAMA_APP
    + """
from llama_index.core.llms import CompletionResponse
from llama_index.core.llms.callbacks import llm_completion_callback


class MeteredLLM(MockLLM):
    \"\"\"MockLLM whose replies carry the provider usage a real LLM class puts in raw.\"\"\"

    @llm_completion_callback()
    def complete(self, prompt, formatted=False, **kwargs):
        return CompletionResponse(
            text="w0 it is", raw={{"model": "mock-gen", "usage": {{"prompt_tokens": 50, "completion_tokens": 5}}}}
        )


mrag = llama_index_system(index, llm=MeteredLLM(), name="li-metered", depth=5, top_k=3)
amrag = llama_index_system(index, llm=MeteredLLM(), asynchronous=True, name="li-metered", depth=5, top_k=3)
silent = llama_index_system(index, llm=MockLLM(), name="li-silent", depth=5, top_k=3)
"""
)

PRICED = "pricing:\n  fake-gen: {input: 1.0, output: 2.0, cached_input: 0.5}\n  mock-gen: {input: 1.0, output: 2.0}\n"


def metered_project(pytester: pytest.Pytester, source: str, attr: str) -> None:
    project(pytester, source, attr=attr)
    config = pytester.path / "oloproof.yaml"
    config.write_text(config.read_text().rstrip("\n") + "\n" + PRICED)


def report(pytester: pytest.Pytester, name: str) -> tuple[pytest.RunResult, dict[str, Any]]:
    result, _ = run(pytester, "--oloproof-report", name)
    doc: dict[str, Any] = json.loads((pytester.path / name).read_text(encoding="utf-8"))
    return result, doc


@pytest.mark.parametrize("attr", ["mrag", "amrag"])
def test_langchain_usage_metadata_reaches_the_tokens_line_through_a_str_output_parser(
    pytester: pytest.Pytester, attr: str
) -> None:
    metered_project(pytester, METERED_LANGCHAIN, attr)
    result, doc = report(pytester, "r1.json")
    for case in doc["cases"]:
        assert case["usage"]["stages"] == {
            "generate": [{"model": "fake-gen", "input_tokens": 30, "output_tokens": 4, "cached_input_tokens": 10}]
        }  # LangChain retrievers report nothing, so retrieval records nothing (not 0)
    system = doc["usage"]["system"]
    assert (system["calls"], system["input_tokens"], system["output_tokens"], system["cached_input_tokens"]) == (
        8,
        240,
        32,
        80,
    )
    assert system["cost"] == pytest.approx(8 * (20 * 1.0 + 10 * 0.5 + 4 * 2.0) / 1e6, abs=1e-12)
    result.stdout.fnmatch_lines(
        ["Tokens: judges 0 calls; system 8 calls, 240 in / 32 out (80 cached in), ~$0.00026; saved nothing"]
    )  # the line docs/guides/cost.md quotes
    result, again = report(pytester, "r2.json")  # served by the cache: what it saved
    result.stdout.fnmatch_lines(
        ["Tokens: judges 0 calls; system none reported; saved 8 system calls, 272 tokens, ~$0.00026"]
    )
    assert again["usage"]["system"]["calls"] == 0 and again["usage"]["saved"]["system"]["calls"] == 8
    assert again["usage"]["saved"]["tokens"] == 8 * 34


def test_langchain_model_without_usage_is_unknown_never_zero(pytester: pytest.Pytester) -> None:
    metered_project(pytester, METERED_LANGCHAIN, "silent")
    result, doc = report(pytester, "r.json")
    system = doc["usage"]["system"]
    assert (system["calls"], system["unknown_calls"], system["input_tokens"], system["cost"]) == (8, 8, None, None)
    result.stdout.fnmatch_lines(["Tokens: judges 0 calls; system 8 calls, tokens unknown (not reported)*"])


@pytest.mark.parametrize("attr", ["mrag", "amrag"])
def test_llama_index_raw_usage_reaches_the_tokens_line(pytester: pytest.Pytester, attr: str) -> None:
    metered_project(pytester, METERED_LLAMA, attr)
    result, doc = report(pytester, "r.json")
    for case in doc["cases"]:
        assert case["usage"]["stages"] == {
            "generate": [{"model": "mock-gen", "input_tokens": 50, "output_tokens": 5, "cached_input_tokens": None}]
        }  # one synthesizer call per case; MockEmbedding reports nothing, so retrieval records nothing
    system = doc["usage"]["system"]
    assert (system["calls"], system["input_tokens"], system["output_tokens"]) == (8, 400, 40)
    assert system["cost"] == pytest.approx(8 * (50 * 1.0 + 5 * 2.0) / 1e6, abs=1e-12)
    result.stdout.fnmatch_lines(["Tokens: judges 0 calls; system 8 calls, 400 in / 40 out, ~$*"])


def test_llama_index_mock_llm_usage_is_unknown_and_a_chat_counts_once(pytester: pytest.Pytester) -> None:
    metered_project(pytester, METERED_LLAMA, "silent")
    result, doc = report(pytester, "r.json")
    system = doc["usage"]["system"]
    assert (system["calls"], system["unknown_calls"], system["input_tokens"]) == (8, 8, None)
    result.stdout.fnmatch_lines(["Tokens: judges 0 calls; system 8 calls, tokens unknown (not reported)*"])


def test_llama_index_usage_handler_counts_a_completion_inside_a_chat_once() -> None:
    """CustomLLM.chat calls complete: two LlamaIndex events, one paid call; outside a stage nothing is reported."""
    from llama_index.core.llms import ChatMessage, CompletionResponse, MockLLM
    from llama_index.core.llms.callbacks import llm_completion_callback

    from pytest_oloproof.integrations import llama_index as adapter
    from pytest_oloproof.usage import accounting as usage

    class Metered(MockLLM):
        @llm_completion_callback()
        def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
            return CompletionResponse(text="ok", raw={"usage": {"prompt_tokens": len(prompt), "completion_tokens": 2}})

    adapter.install_usage_handler()
    llm = Metered()
    with usage.collect() as got:
        reply = adapter._metered(lambda: llm.chat([ChatMessage(role="user", content="abc")]))
        llm.complete("not inside an adapter stage")
    prompt_len = len(llm.messages_to_prompt([ChatMessage(role="user", content="abc")]))
    assert reply.message.content == "ok"
    assert got == [{"model": None, "input_tokens": prompt_len, "output_tokens": 2, "cached_input_tokens": None}]


def test_langchain_usage_callback_reads_llm_output_when_messages_carry_none() -> None:
    """A completion LLM's usage comes in llm_output (OpenAI's token_usage); per-message usage_metadata wins."""
    from uuid import uuid4

    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration, Generation, LLMResult

    from pytest_oloproof.integrations.langchain import UsageCallback
    from pytest_oloproof.usage import accounting as usage

    legacy = LLMResult(
        generations=[[Generation(text="a")]],
        llm_output={"token_usage": {"prompt_tokens": 12, "completion_tokens": 3}, "model_name": "legacy-m"},
    )
    message = AIMessage(content="b", usage_metadata={"input_tokens": 7, "output_tokens": 1, "total_tokens": 8})
    chat = LLMResult(generations=[[ChatGeneration(message=message)]], llm_output={"token_usage": {"prompt_tokens": 99}})
    handler = UsageCallback()
    with usage.collect() as got:
        run_id = uuid4()
        handler.on_llm_start({}, ["p"], run_id=run_id, metadata={"ls_model_name": "chat-m"})
        handler.on_llm_end(chat, run_id=run_id)
        handler.on_llm_end(legacy, run_id=uuid4())
        handler.on_llm_end(LLMResult(generations=[[Generation(text="c")]]), run_id=uuid4())
    assert got == [
        {"model": "chat-m", "input_tokens": 7, "output_tokens": 1, "cached_input_tokens": None},
        {"model": "legacy-m", "input_tokens": 12, "output_tokens": 3, "cached_input_tokens": None},
        {"model": None, "input_tokens": None, "output_tokens": None, "cached_input_tokens": None},
    ]
