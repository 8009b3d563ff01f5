"""Small purpose-built Oloproof projects for pytester sessions (shared by the measurement tests)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

# A deterministic RAG system driven by its case input: `order` lists the doc ids the
# retriever returns, `answer` is what the generator says, `fail` makes a stage raise,
# `cite` overrides the citations. The generator cites every passage it received.
RAG_SYSTEM = """
from pytest_oloproof import Passage, Retrieval, rag_system

KB = {"d1": "Refunds take 14 days.", "d2": "Plans renew monthly.", "d3": "Teams get 10 seats.",
      "d4": "Passwords reset by email.", "d5": "Invoices are sent monthly."}

@rag_system(name="mini", version="1", depth=4, top_k=2)
class Mini:
    def retrieve(self, input, depth):
        if input.get("fail") == "retrieve":
            raise RuntimeError("index is down")
        order = input.get("order", ["d1", "d2", "d3"])
        cands = tuple(Passage(d, score=1.0 / (i + 1), text=KB[d]) for i, d in enumerate(order[:depth]))
        return Retrieval(query=input["q"], depth=depth, candidates=cands)

    def generate(self, input, context):
        if input.get("fail") == "generate":
            raise ValueError("model exploded")
        out = {"answer": input.get("answer", " ".join(p.text for p in context)),
               "citations": input.get("cite", [p.doc_id for p in context])}
        if input.get("drop_answer"):
            del out["answer"]
        return out
"""


# A conftest.py that watches a session from inside. It sets the item count from which a session is
# long, and writes to gc.json the collector's frozen-object count during the first item and once
# pytest is done with the session.
PROBE_CONFTEST = """
import gc, json

import pytest_oloproof.session.run as plugin

plugin.LONG_SESSION_MIN_ITEMS = {min_items}
_seen = {{}}


def pytest_runtest_call(item):
    _seen.setdefault("during", gc.get_freeze_count())


def pytest_configure(config):
    def done():  # runs after every cleanup registered later, Oloproof's included
        _seen["after"] = gc.get_freeze_count()
        with open("gc.json", "w") as f:
            json.dump(_seen, f)

    config.add_cleanup(done)
"""


def module_name(pytester: pytest.Pytester, stem: str = "sys") -> str:
    """A module name unique to this test, since in-process runs share sys.modules."""
    tail = re.sub(r"\W", "_", pytester.path.name)
    return f"{stem}_{tail}"


def case(cid: str, *, q: str = "?", expected: Mapping[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
    """One case line; keyword arguments other than metadata go into the input."""
    meta = kw.pop("metadata", None)
    out: dict[str, Any] = {"id": cid, "input": {"q": q, **kw}}
    if expected is not None:
        out["expected"] = dict(expected)
    if meta is not None:
        out["metadata"] = meta
    return out


def make_project(
    pytester: pytest.Pytester,
    cases: Sequence[Mapping[str, Any]],
    evaluators: Sequence[Mapping[str, Any]],
    *,
    extra: str = "",
) -> str:
    """Write the system module, cases.jsonl and oloproof.yaml; return the system module name."""
    mod = module_name(pytester)
    pytester.makepyfile(**{mod: RAG_SYSTEM})
    pytester.makefile(".jsonl", cases="\n".join(json.dumps(c) for c in cases) + "\n")
    evs = "\n".join(f"  - {json.dumps(e)}" for e in evaluators) or "  []"
    sysblock = f"  rag:\n    object: {mod}:Mini\n"
    pytester.makefile(
        ".yaml",
        oloproof=f"system:\n{sysblock}cases: cases.jsonl\nevaluators:\n{evs}\nstore: .oloproof\n{extra}",
    )
    return mod


def section(result: pytest.RunResult) -> list[str]:
    """The lines of the `oloproof` terminal-summary section."""
    lines = result.outlines
    start = next(i for i, line in enumerate(lines) if re.match(r"=+ oloproof =+", line))
    out = []
    for line in lines[start + 1 :]:
        if re.match(r"=+ .* =+$", line):
            break
        out.append(line)
    return out


def row(result: pytest.RunResult, criterion: str) -> list[str]:
    """The cells of a criterion's row in the metrics table."""
    for line in section(result):
        cells = [c.strip() for c in line.strip("│").split("│")]
        if line.startswith("│") and cells[0] == criterion:
            return cells
    raise AssertionError(f"no table row for {criterion}:\n" + "\n".join(section(result)))


def report(pytester: pytest.Pytester, *args: str, name: str = "report.json") -> tuple[pytest.RunResult, dict[str, Any]]:
    """Run with --oloproof-report and return the result and the parsed JSON report."""
    path = pytester.path / name
    result = pytester.runpytest("--oloproof", f"--oloproof-report={path}", *args)
    return result, json.loads(path.read_text(encoding="utf-8"))
