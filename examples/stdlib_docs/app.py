"""A RAG system over the standard library's docstrings: bm25s retrieval, an extractive or LLM generator.

Retrieval is BM25 (the `bm25s` package) over every chunk of corpus.py's corpus; a
chunk is indexed with its qualified name (`json.dumps` also as `json dumps`), as a
documentation search would index a title. The default generator is extractive and
deterministic: it answers with the context sentence sharing the most words with the
question and cites that passage. Set OLOPROOF_EXAMPLE_BASE_URL (an OpenAI-compatible
endpoint such as http://127.0.0.1:8000/v1 for vLLM or http://127.0.0.1:11434/v1 for
Ollama) and OLOPROOF_EXAMPLE_MODEL to generate with a real model instead;
OLOPROOF_EXAMPLE_API_KEY is sent as a bearer token when set and never recorded.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from importlib.metadata import version as dist_version

import bm25s
import corpus
import httpx
import numpy as np
from bm25s.tokenization import Tokenizer

from pytest_oloproof import Passage, Retrieval, rag_system

ROWS, DIGEST = corpus.load()
K1, B = 1.5, 0.75
#: everything the index is built from; a change to any of it is a new index_version
INDEX_SETTINGS = {
    "python": sys.version.split()[0],
    "corpus_sha256": DIGEST,
    "chunking": corpus.SETTINGS,
    "bm25s": dist_version("bm25s"),
    "k1": K1,
    "b": B,
    "stopwords": "en",
    "title": "qualname",
}
INDEX_VERSION = "stdlib-" + hashlib.sha256(json.dumps(INDEX_SETTINGS, sort_keys=True).encode()).hexdigest()[:16]

BASE_URL = os.environ.get("OLOPROOF_EXAMPLE_BASE_URL", "").rstrip("/")
MODEL = os.environ.get("OLOPROOF_EXAMPLE_MODEL", "")
VERSION = f"chat:{MODEL}" if BASE_URL and MODEL else "extractive-1"

WORD = re.compile(r"[a-z0-9_]+")
STOPWORDS = frozenset(
    "a an and are as at be by can do does for from get how i if in into is it its me my of on or should "
    "the there this to use used using what when which who why will with without you your python".split()
)


def words(text: str) -> set[str]:
    """Content words of a question or sentence, lower-cased, a plural 's' removed."""
    out = set()
    for w in WORD.findall(text.lower()):
        if w in STOPWORDS or len(w) < 2:
            continue
        out.add(w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w)
    return out


def indexed_text(row: dict[str, str]) -> str:
    name = row["doc_id"]
    return f"{name} {name.replace('.', ' ').replace('_', ' ')} {row['text']}"


class Index:
    """bm25s over the corpus; ties keep corpus order, so a ranking is the same on every run."""

    def __init__(self) -> None:
        self.tokenizer = Tokenizer(stopwords="en", lower=True)
        tokens = self.tokenizer.tokenize([indexed_text(r) for r in ROWS], return_as="string", show_progress=False)
        self.bm25 = bm25s.BM25(k1=K1, b=B)
        self.bm25.index(tokens, show_progress=False)
        self.vocab = set(self.bm25.vocab_dict)
        self.order = np.arange(len(ROWS))

    def search(self, query: str, k: int) -> list[tuple[int, float]]:
        [tokens] = self.tokenizer.tokenize([query], update_vocab=False, return_as="string", show_progress=False)
        known = [t for t in tokens if t and t in self.vocab]  # bm25s maps unknown words to ""
        if not known:
            return []
        scores = self.bm25.get_scores(known)
        ranked = np.lexsort((self.order, -scores))[:k]
        return [(int(i), float(scores[i])) for i in ranked if scores[i] > 0]


def sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?:])\s+", text) if s.strip()]


def extractive_answer(question: str, context: tuple[Passage, ...]) -> dict[str, object]:
    """The context sentence sharing the most words with the question (first such on a tie), cited."""
    q = words(question)
    best: tuple[int, str, str] | None = None
    for p in context:
        for s in sentences(p.text or ""):
            score = len(q & words(s))
            if best is None or score > best[0]:
                best = (score, s, p.chunk_id or p.doc_id)
    if best is None or best[0] == 0:
        return {"answer": "The documentation I was given does not say.", "citations": []}
    return {"answer": best[1], "citations": [best[2].split("#")[0]]}


def chat_answer(question: str, context: tuple[Passage, ...]) -> dict[str, object]:
    """Ask an OpenAI-compatible chat endpoint to answer from the context and cite passage ids."""
    blocks = "\n\n".join(f"[{p.doc_id}]\n{p.text}" for p in context)
    messages = [
        {
            "role": "system",
            "content": "Answer the question using only the documentation passages given. Cite the passages you "
            "used by their id in square brackets, e.g. [json.dumps]. If they do not answer it, say so.",
        },
        {"role": "user", "content": f"Passages:\n{blocks}\n\nQuestion: {question}"},
    ]
    key = os.environ.get("OLOPROOF_EXAMPLE_API_KEY")
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    reply = httpx.post(
        f"{BASE_URL}/chat/completions",
        json={"model": MODEL, "messages": messages, "temperature": 0},
        headers=headers,
        timeout=120.0,
    )
    reply.raise_for_status()
    answer = str(reply.json()["choices"][0]["message"]["content"])
    ids = {p.doc_id for p in context}
    cited = [c for c in dict.fromkeys(re.findall(r"\[([^\]\s]+)\]", answer)) if c in ids]
    return {"answer": answer, "citations": cited}


@rag_system(name="stdlib-docs", version=VERSION, depth=20, top_k=4, token_budget=150, index_version=INDEX_VERSION)
class StdlibDocs:
    def __init__(self) -> None:
        self.index = Index()

    def retrieve(self, input, depth):
        question = input["question"]
        hits = self.index.search(question, depth)
        passages = tuple(
            Passage(doc_id=ROWS[i]["doc_id"], chunk_id=ROWS[i]["chunk_id"], score=s, text=ROWS[i]["text"])
            for i, s in hits
        )
        return Retrieval(query=question, depth=depth, candidates=passages)

    def generate(self, input, context):
        if BASE_URL and MODEL:
            return chat_answer(input["question"], context)
        return extractive_answer(input["question"], context)

    def count_tokens(self, passage):
        return len((passage.text or "").split())  # this system's own unit: whitespace words
