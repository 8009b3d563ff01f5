"""`oloproof` is the short import name of `pytest_oloproof`: the product page's code runs as written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

# the declaration as the product page prints it (its `...` bodies filled in)
PAGE_SYSTEM = """
from oloproof import Passage, Retrieval, rag_system


@rag_system(
    name="support-rag",
    version="slice-b-example",
    depth=6,
    top_k=2,
    token_budget=40,
    index_version="kb-2026-09-16",
)
class SupportRag:
    def retrieve(self, input, depth):
        passages = [Passage(doc_id="kb-01", score=1.0, text="Refunds take 14 days.")]
        return Retrieval(query=input["question"], depth=depth, candidates=tuple(passages))

    def generate(self, input, context):
        best = context[0]
        return {"answer": best.text, "citations": [best.doc_id]}

    def count_tokens(self, passage):
        return len((passage.text or "").split())
"""

# a conftest written against the short name: an Evaluator subclass and @oloproof.evaluator
SHORT_CONFTEST = """
import oloproof
from oloproof import CriterionValue, Evaluator


class Short(Evaluator):
    type = "short_words"
    reads = frozenset({"output"})

    def evaluate(self, x):
        return CriterionValue.observed(len(x.output["answer"].split()) <= 5)


@oloproof.evaluator
def short_words():
    return Short("short_words")
"""


def test_both_names_give_the_same_public_objects() -> None:
    code = (
        "import oloproof, pytest_oloproof\n"
        "names = oloproof.__all__\n"
        "assert all(getattr(oloproof, n) is getattr(pytest_oloproof, n) for n in names), names\n"
        "import json; print(json.dumps(sorted(names)))\n"
    )
    # a fresh interpreter in another folder: the installed package, not this checkout's path
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/", check=True).stdout
    names = set(json.loads(out))
    assert {"rag_system", "Passage", "Retrieval", "evaluator", "Transient", "Evaluator", "CriterionValue"} <= names
    assert {"EvalInput", "ContextPassage", "report_usage"} <= names


def test_the_product_pages_system_runs_under_the_short_name(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(page_app=PAGE_SYSTEM)
    pytester.makeconftest(SHORT_CONFTEST)
    case = {"id": "refund", "input": {"question": "refund time?"}, "expected": {"answer": "14 days"}}
    pytester.makefile(".jsonl", cases=json.dumps(case))
    pytester.makefile(
        ".yaml",
        oloproof=(
            "system:\n  rag: {object: 'page_app:SupportRag'}\ncases: cases.jsonl\n"
            "evaluators:\n  - {type: contains, criterion: answer_correct}\n  - {type: citation_validity}\n"
            "store: .store\n"
        ),
    )
    result = pytester.runpytest("--oloproof", "--oloproof-report", "r.json")
    result.assert_outcomes(passed=1)
    report = json.loads((Path(pytester.path) / "r.json").read_text())
    criteria = report["cases"][0]["criteria"]
    assert criteria["answer_correct"]["value"] == 1.0 and criteria["short_words"]["value"] == 1.0
    assert report["system"]["name"] == "support-rag"
