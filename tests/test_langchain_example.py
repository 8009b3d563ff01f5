"""examples/langchain_rag runs as docs/tutorials/langchain.md shows: real langchain-core components (an
InMemoryVectorStore with explicit ids and a hashing embedding, a BaseRetriever that takes k, a RunnableLambda),
run through real subprocesses (run, diagnose, the second version, compare), every printed block of the page
matched line by line against the output (ids excepted), and the figures the page's prose relies on checked."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_example_docs import assert_printed, blocks  # the support_rag page's matcher, as strict

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "langchain_rag"
PAGE = ROOT / "docs" / "tutorials" / "langchain.md"


def oloproof(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_oloproof.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def walk(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    ex = tmp_path_factory.mktemp("lc") / "langchain_rag"
    shutil.copytree(EXAMPLE, ex, ignore=shutil.ignore_patterns(".oloproof", "__pycache__", ".pytest_cache"))
    out: dict[str, str] = {}
    for name, code, args in [
        ("run", 1, ("run", "-p", "no:cacheprovider")),
        ("diagnose", 0, ("diagnose", "latest", "--intervention", "gold-context")),
        ("v2", 1, ("run", "-p", "no:cacheprovider", "--oloproof-config", "oloproof-v2.yaml")),
        ("compare", 0, ("compare", "latest", "latest~1")),
    ]:
        r = oloproof(*args, cwd=ex)
        assert r.returncode == code, (name, r.stdout, r.stderr)
        out[name] = r.stdout
    return ex, out


@pytest.mark.slow
@pytest.mark.parametrize(
    ("command", "step"),
    [
        ("$ oloproof run", "run"),
        ("$ oloproof diagnose latest --intervention gold-context", "diagnose"),
        ("$ oloproof run --oloproof-config oloproof-v2.yaml", "v2"),
        ("$ oloproof compare latest latest~1", "compare"),
    ],
)
def test_the_page_prints_what_the_example_prints(walk: tuple[Path, dict[str, str]], command: str, step: str) -> None:
    found = [b[1:] for b in blocks(PAGE.read_text(encoding="utf-8")) if b[0] == command]
    assert len(found) == 1, f"{len(found)} blocks start with {command}"
    assert_printed(found[0], walk[1][step])


@pytest.mark.slow
def test_the_retriever_honours_k_and_the_ids_match_the_labels(walk: tuple[Path, dict[str, str]]) -> None:
    ex, _ = walk
    first = sorted((ex / ".oloproof" / "runs").iterdir())[0]
    cases = [json.loads(line) for line in (first / "cases.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(cases) == 12
    for case in cases:
        ids = [c["doc_id"] for c in case["retrieval"]]
        assert len(ids) == 6, case["id"]  # depth 6 reached the retriever (its own default is 4)
        assert all(i.startswith("hc-") for i in ids)  # the store's explicit ids, not random UUIDs
        scores = [c["score"] for c in case["retrieval"]]
        assert scores == sorted(scores, reverse=True) and len(set(scores)) > 1  # score_key carried the similarity
        assert case["relevant_position"] is not None


@pytest.mark.slow
def test_the_example_is_deterministic_across_processes(walk: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    """A fresh copy in another process prints the same table: no random ids, no random embeddings."""
    shutil.copytree(EXAMPLE, tmp_path / "again", ignore=shutil.ignore_patterns(".oloproof", "__pycache__"))
    again = oloproof("run", "-p", "no:cacheprovider", cwd=tmp_path / "again")
    table = [line for line in walk[1]["run"].splitlines() if line.startswith("│")]
    assert table and table == [line for line in again.stdout.splitlines() if line.startswith("│")]
