"""The real-corpus example, examples/stdlib_docs: corpus, bm25s retrieval, the walk-through, the LLM path.

The corpus depends on the interpreter, so the walk-through's exact figures are checked on the
Python its README quotes (3.11.7) and its structure on any other.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from staged_helpers import by_id, run_records

from pytest_oloproof import Passage
from tests.judge_server import Recorded, Reply, ScriptedServer
from tests.test_example_docs import assert_printed, console_block

pytest.importorskip("bm25s")

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "stdlib_docs"
README_PYTHON = (3, 11, 7)  # the interpreter whose figures the example's README quotes
MODULES = ("app", "corpus", "rerank")


def copy_example(dest: Path) -> Path:
    shutil.copytree(
        EXAMPLE,
        dest,
        dirs_exist_ok=True,
        ignore=shutil.ignore_patterns(".oloproof", "__pycache__", "corpus", ".pytest_cache"),
    )
    return dest


@pytest.fixture
def example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh copy of the example (no corpus built yet), importable as app/corpus/rerank."""
    root = copy_example(tmp_path / "stdlib_docs")
    for name in MODULES:  # the example's module names are generic
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.syspath_prepend(str(root))
    yield root
    for name in MODULES:
        sys.modules.pop(name, None)


def load(name: str) -> ModuleType:
    return importlib.import_module(name)


def cases() -> list[dict[str, Any]]:
    with (EXAMPLE / "cases.jsonl").open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def cli(root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_oloproof.cli", *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def test_the_corpus_is_built_on_first_use_deterministically_and_covers_the_cases(
    example: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # built by a plain interpreter in another copy ...
    other = copy_example(tmp_path / "other")
    built = subprocess.run([sys.executable, "corpus.py"], cwd=other, capture_output=True, text=True, check=True)
    # ... and here, by a program that has replaced a standard-library object (as pytest does)
    monkeypatch.setattr("threading.excepthook", lambda args: None)
    corpus = load("corpus")
    assert not corpus.corpus_path().exists()
    rows, digest = corpus.load()
    assert f"{len(rows)} chunks of" in built.stdout and f"sha256 {digest[:16]} " in built.stdout
    assert corpus.corpus_path().is_relative_to(example / "corpus")
    assert len(rows) >= 2000
    assert len({r["chunk_id"] for r in rows}) == len(rows)
    assert all(re.fullmatch(re.escape(r["doc_id"]) + r"#chunk\d+", r["chunk_id"]) for r in rows)
    assert all(len(r["text"].split()) <= corpus.MAX_WORDS for r in rows)
    first = corpus.corpus_path().read_bytes()
    corpus.corpus_path().unlink()
    again, digest_again = corpus.load()  # built again from the interpreter: byte-identical
    assert (digest_again, corpus.corpus_path().read_bytes()) == (digest, first)
    assert again == rows
    # every relevance label and gold passage names a chunk of this corpus
    text = {r["chunk_id"]: r["text"] for r in rows}
    all_cases = cases()
    assert len(all_cases) >= 80
    for c in all_cases:
        exp = c["expected"]
        assert {r["chunk_id"] for r in exp["relevant"]} <= set(text), c["id"]
        assert {r["grade"] for r in exp["relevant"]} <= {1, 2} and exp["gold_context"]
        assert set(c["metadata"]) >= {"family", "kind"}
        for g in exp["gold_context"]:
            assert g["chunk_id"] in text
            if sys.version_info[:3] == README_PYTHON:  # the cases were written from this interpreter's text
                assert g["text"] == text[g["chunk_id"]]
                assert exp["answer"].lower() in g["text"].lower()


def test_the_retriever_is_bm25_in_a_stable_order(example: Path) -> None:
    app = load("app")
    system = app.StdlibDocs()
    first = system.retrieve({"question": "How do I delete a folder and everything inside it?"}, 20)
    again = app.StdlibDocs().retrieve({"question": "How do I delete a folder and everything inside it?"}, 20)
    assert first == again and len(first.candidates) == 20
    scores = [p.score for p in first.candidates]
    assert scores == sorted(scores, reverse=True) and scores[-1] > 0
    assert all(p.chunk_id and p.chunk_id.startswith(p.doc_id + "#chunk") for p in first.candidates)
    # BM25 matches words: "folder" finds nothing of shutil.rmtree ("directory tree"); its own words do
    assert "shutil.rmtree#chunk0" not in [p.chunk_id for p in first.candidates]
    worded = system.retrieve({"question": "How do I recursively delete a directory tree?"}, 20)
    assert worded.candidates[0].chunk_id == "shutil.rmtree#chunk0"
    assert app.StdlibDocs().retrieve({"question": "zzzz qqqq"}, 20).candidates == ()
    # the index version names the interpreter, the corpus and the settings it was built from
    assert app.INDEX_SETTINGS["python"] == sys.version.split()[0]
    assert app.INDEX_SETTINGS["corpus_sha256"] == load("corpus").load()[1]
    assert app.INDEX_VERSION.startswith("stdlib-")


def test_the_reranker_reads_the_query(example: Path) -> None:
    rerank = load("rerank")
    candidates = (
        Passage("json.dumps", 3.0, "Serialize ``obj`` to a JSON formatted ``str``.", "json.dumps#chunk0"),
        Passage("shutil.rmtree", 2.0, "Recursively delete a directory tree.", "shutil.rmtree#chunk0"),
        Passage("os.remove", 1.0, "Remove a file (same as unlink()).", "os.remove#chunk0"),
    )
    by_name = rerank.by_name
    assert by_name("Should I use rmtree to delete a tree?", candidates)[0].doc_id == "shutil.rmtree"
    assert by_name("How do I remove one file?", candidates)[0].doc_id == "os.remove"
    assert by_name({"question": "How do I remove one file?"}, candidates)[0].doc_id == "os.remove"  # an input mapping
    assert by_name("unrelated words", candidates) == list(candidates)  # no overlap: the retriever's order
    assert sorted(by_name("file", candidates), key=lambda p: p.doc_id) == sorted(candidates, key=lambda p: p.doc_id)


def summary_row(out: str, criterion: str) -> str:
    return next(line for line in out.splitlines() if line.startswith(f"│ {criterion} "))


def test_the_walk_through(example: Path) -> None:
    """run → diagnose → reranker replay → the suggested config change → compare, as the README shows."""
    exact = sys.version_info[:3] == README_PYTHON
    first = cli(example, "run", "-p", "no:cacheprovider")
    assert first.returncode == 1, first.stderr  # failed cases, no policy
    assert "Stages: retrieve 0 hit/134 miss; generate 0 hit/134 miss" in first.stdout
    [run] = run_records(example / ".oloproof")
    assert run["status"] == "complete" and run["system"]["index_version"] == load("app").INDEX_VERSION
    if exact:
        assert "49 / 134 observed" in summary_row(first.stdout, "answer_correct")
        assert "87 / 134 observed" in summary_row(first.stdout, "hit_rate_at_4")
    rid = run["run_id"]

    diag = cli(example, "diagnose", rid, "--intervention", "gold-context", "--criterion", "answer_correct")
    assert diag.returncode == 0, diag.stderr
    failed = run["metrics"]["answer_correct"]["observed"] - run["metrics"]["answer_correct"]["passed"]
    assert f"Selected: {failed} failed cases with gold context" in diag.stdout
    if exact:
        for line in (
            "Recovered under gold context: 46 of 85",
            "RETRIEVAL_MISS: 15 of 85, recovered; no relevant evidence was retrieved",
            "RANKED_OUT: 14 of 85, recovered; relevant evidence was retrieved but ranked below the top-k cut",
            "CONTEXT_ASSEMBLY_LOSS: 3 of 85, recovered; relevant evidence within top-k was left out of the context",
            "GENERATION_FAILURE: 39 of 85, still failed with the gold context",
        ):
            assert line in diag.stdout

    replay = cli(
        example, "diagnose", rid, "--intervention", "reranker", "--reranker", "rerank:by_name", "--criterion",
        "answer_correct",
    )  # fmt: skip
    assert replay.returncode == 0, replay.stderr
    assert re.search(r"Recovered under reranker rerank:by_name: \d+ of ", replay.stdout)
    if exact:
        assert "Recovered under reranker rerank:by_name: 8 of 85" in replay.stdout

    wider = cli(example, "run", "--oloproof-config", "oloproof-wider.yaml", "-p", "no:cacheprovider")
    assert wider.returncode == 1, wider.stderr
    assert "Stages: retrieve 134 hit/0 miss; generate 0 hit/134 miss" in wider.stdout  # same retrievals, reused
    new = next(r for r in run_records(example / ".oloproof") if r["purpose"] == "run" and r["run_id"] != rid)
    if exact:
        assert "52 / 134 observed" in summary_row(wider.stdout, "answer_correct")
        assert "Cache: execution 0 hit/134 miss; judgment 531 hit/139 miss" in wider.stdout  # as the README
        assert (
            "  judgment 139 miss: context changed (124; top_k 4 → 8; token_budget 150 → 400); output changed (15)"
        ) in wider.stdout.splitlines()

    compare = cli(example, "compare", new["run_id"], rid, "--policy", "compare.yaml")
    assert f"of {new['run_id']} against {rid} · 134 paired cases" in compare.stdout
    if exact:
        assert "answer_correct: +2.2 points [-1.2, +6.5]" in compare.stdout
        assert compare.stdout.splitlines()[1] == "Gate: PASS (exit 0)" and compare.returncode == 0  # gate first
        # every block the README prints is this output (ids and elided parts excepted)
        readme = (EXAMPLE / "README.md").read_text(encoding="utf-8")
        for command, out in (
            ("python3 -m venv", first.stdout),
            ("oloproof diagnose run_01M8RF69JN25R3XQNPZD06S3KQ --intervention gold-context", diag.stdout),
            ("oloproof diagnose run_01M8RF69JN25R3XQNPZD06S3KQ --intervention reranker", replay.stdout),
            ("oloproof run --oloproof-config oloproof-wider.yaml", wider.stdout),
            ("oloproof compare", compare.stdout),
        ):
            assert_printed(console_block(readme, command), out)


def test_a_different_corpus_is_never_served_cached_retrievals(pytester: pytest.Pytester, example: Path) -> None:
    shutil.copytree(example, pytester.path, dirs_exist_ok=True)
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider", "-k", "json")
    result.stdout.fnmatch_lines(["Stages: retrieve 0 hit/6 miss; generate 0 hit/6 miss"])
    [path] = (pytester.path / "corpus").glob("stdlib-*.jsonl")
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    path.write_text("".join(lines[:-1]), encoding="utf-8")  # a corpus with one chunk fewer
    for name in MODULES:
        sys.modules.pop(name, None)
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider", "-k", "json")
    result.stdout.fnmatch_lines(["Stages: retrieve 0 hit/6 miss; *"])
    first, second = run_records(pytester.path / ".oloproof")
    assert first["system"]["index_version"] != second["system"]["index_version"]


def rec_question(rec: dict[str, Any]) -> str:
    return str(next(c["input"]["question"] for c in cases() if c["id"] == rec["id"]))


def test_an_openai_compatible_endpoint_generates_when_configured(pytester: pytest.Pytester, example: Path) -> None:
    shutil.copytree(example, pytester.path, dirs_exist_ok=True)

    def answer(request: Recorded) -> Reply:
        body = request.json()
        ids = re.findall(r"^\[([^\]]+)\]$", body["messages"][1]["content"], flags=re.M)
        return Reply.chat(f"From the docs [{ids[0]}] and [not.in.context]." if ids else "They do not say.")

    with ScriptedServer(responder=answer) as server:
        env = {
            "OLOPROOF_EXAMPLE_BASE_URL": server.base_url,
            "OLOPROOF_EXAMPLE_MODEL": "test-model",
            "OLOPROOF_EXAMPLE_API_KEY": "sk-example-secret",
        }
        with pytest.MonkeyPatch.context() as mp:
            for key, value in env.items():
                mp.setenv(key, value)
            for name in MODULES:
                sys.modules.pop(name, None)
            result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider", "-k", "rmtree or json_to_string")
    assert result.ret in (0, 1)
    [record] = run_records(pytester.path / ".oloproof")
    assert record["system"]["version"] == "chat:test-model"
    recs = by_id(record)
    assert sorted(recs) == ["json_to_string", "rmtree", "rmtree_errors"]
    assert len(server.requests) == 3
    questions = {c["input"]["question"]: c["id"] for c in cases()}
    for request in server.requests:
        assert request.path == "/v1/chat/completions"
        assert request.headers.get("Authorization") == "Bearer sk-example-secret"
        body = request.json()
        assert body["model"] == "test-model" and body["temperature"] == 0
        content = body["messages"][1]["content"]
        rec = recs[questions[content.rsplit("\n\nQuestion: ", 1)[1]]]
        by_pos = {c["position"]: c for c in rec["retrieval"]}
        # the model saw exactly the assembled context, in order
        blocks = [f"[{by_pos[p]['doc_id']}]\n{by_pos[p]['text']}" for p in rec["context"]]
        assert content == "Passages:\n" + "\n\n".join(blocks) + "\n\nQuestion: " + rec_question(rec)
        # only ids from the context count as citations
        assert rec["output"]["citations"] == [by_pos[rec["context"][0]]["doc_id"]]
        assert rec["output"]["answer"].startswith("From the docs [")
    stored = "".join(p.read_text(encoding="utf-8") for p in (pytester.path / ".oloproof" / "runs").rglob("*.*"))
    assert "sk-example-secret" not in stored
