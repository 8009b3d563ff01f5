"""Small purpose-built projects for the staged-run tests: a system module, oloproof.yaml and cases.

Each project gets a uniquely named system module, because in-process pytester runs share
sys.modules with the outer session.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

#: a deterministic RAG system over a tiny in-module knowledge base; `{settings}` goes into @rag_system
RAG_SOURCE = """
import json, os
from pathlib import Path
from pytest_oloproof import Passage, Retrieval, rag_system

HERE = Path(__file__).parent
KB = {
    "d1": "alpha beta gamma delta",
    "d2": "beta gamma",
    "d3": "gamma delta epsilon zeta eta",
    "d4": "delta",
    "d5": "one two three four five six seven eight",
}


def _log(stage, case):
    with open(HERE / "calls.log", "a", encoding="utf-8") as f:
        f.write(json.dumps([stage, case]) + "\\n")


@rag_system({settings})
class System:
    def retrieve(self, input, depth):
        _log("retrieve", input["q"])
        want = input.get("docs", ["d1", "d2", "d3", "d4"])
        passages = [Passage(doc_id=d, score=float(10 - i), text=KB[d]) for i, d in enumerate(want)]
        return Retrieval(query=input["q"], depth=depth, candidates=tuple(passages[:depth]))

    def generate(self, input, context):
        _log("generate", input["q"])
        if (HERE / "fail_once").exists():  # fails once, then works: errors must never be cached
            (HERE / "fail_once").unlink()
            raise RuntimeError("transient failure")
        tag = (HERE / "tag.txt").read_text() if (HERE / "tag.txt").exists() else None
        answer = " | ".join(p.text for p in context)
        return {"answer": answer, "citations": [p.doc_id for p in context], "tag": tag}

    def count_tokens(self, passage):
        return len((passage.text or "").split())
"""


def unique_module(prefix: str = "olosys") -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def cases_text(cases: Sequence[Mapping[str, Any] | str]) -> str:
    return "\n".join(c if isinstance(c, str) else json.dumps(c) for c in cases) + "\n"


def config_text(
    module: str,
    *,
    attr: str = "System",
    rag: Mapping[str, Any] | None = None,
    plain: bool = False,
    evaluators: str | None = None,
    extra: str = "",
    name: str = "sys",
) -> str:
    """An oloproof.yaml for `module:attr`; `rag` adds settings under system.rag."""
    if plain:
        system = f"system:\n  name: {name}\n  object: {module}:{attr}\n"
    else:
        system = f"system:\n  name: {name}\n  rag:\n    object: {module}:{attr}\n"
        for k, v in (rag or {}).items():
            system += f"    {k}: {json.dumps(v)}\n"
    if evaluators is None:
        evaluators = (
            "evaluators:\n  - {type: contains, criterion: answer_correct, field: answer, expected_field: answer}\n"
        )
    return system + "cases: cases.jsonl\n" + evaluators + extra


def rag_project(
    pytester: pytest.Pytester,
    cases: Sequence[Mapping[str, Any] | str],
    *,
    settings: str = "depth=4, top_k=2",
    rag: Mapping[str, Any] | None = None,
    evaluators: str | None = None,
    extra: str = "",
    source: str | None = None,
) -> str:
    """Write the standard RAG system, its config and cases into pytester.path; return the module name."""
    module = unique_module()
    body = (source or RAG_SOURCE).replace("{settings}", settings)
    pytester.makepyfile(**{module: body})
    pytester.makefile(".yaml", oloproof=config_text(module, rag=rag, evaluators=evaluators, extra=extra))
    pytester.makefile(".jsonl", cases=cases_text(cases))
    return module


def case(cid: str, q: str | None = None, answer: str = "gamma", **extra: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "id": cid,
        "input": {"q": q or cid, **extra.pop("input", {})},
        "expected": {"answer": answer},
    }
    doc.update(extra)
    return doc


def calls(pytester: pytest.Pytester) -> list[list[str]]:
    """The (stage, case) calls the standard system logged, in order."""
    log = pytester.path / "calls.log"
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line]


def clear_calls(pytester: pytest.Pytester) -> None:
    (pytester.path / "calls.log").unlink(missing_ok=True)


def run_records(store: Path) -> list[dict[str, Any]]:
    """Every run record under a store, oldest first, with cases inline."""
    from pytest_oloproof.store.files import Store

    s = Store(store)
    return [s.load_run(rid) for rid in reversed(s.run_ids())]


def last_run(pytester: pytest.Pytester) -> dict[str, Any]:
    records = run_records(pytester.path / ".oloproof")
    assert records, "no run was recorded"
    return records[-1]


def by_id(record: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in record["cases"]}


def assert_nothing_written(root: Path) -> None:
    runs = root / ".oloproof" / "runs"
    assert not runs.exists() or not any(runs.iterdir()), f"a run was written under {runs}"
