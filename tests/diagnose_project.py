"""A small purpose-built RAG project where every diagnosis label is reachable (tests/test_diagnose*.py).

The retriever returns the ranking a case names in its input, the generator answers
with the first context passage that states an answer (so a decoy ahead of the
relevant passage makes it fail), and every stage call is counted in a file.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

APP = '''
from pathlib import Path
from pytest_oloproof import Passage, Retrieval, rag_system

HERE = Path(__file__).parent
KB = {
    "d1": "nothing useful here",
    "d2": "still nothing here",
    "d3": "off topic words",
    "decoy": "the answer is ANSWER-decoy",
    "rel-miss": "the answer is ANSWER-miss",
    "rel-ranked": "the answer is ANSWER-ranked",
    "big-budget": "a long passage whose answer is ANSWER-budget right here",
    "rel-distract": "the answer is ANSWER-distract",
    "rel-gen": "the answer is ANSWER-gen",
    "rel-flaky": "the answer is ANSWER-flaky",
    "rel-ok": "the answer is ANSWER-ok",
}


def _count(kind, case=None):
    with open(HERE / f"calls_{kind}.txt", "a", encoding="utf-8") as f:
        f.write((case or "") + "\\n")


def calls(kind, case=None):
    path = HERE / f"calls_{kind}.txt"
    if not path.exists():
        return 0
    lines = path.read_text(encoding="utf-8").splitlines()
    return len(lines) if case is None else lines.count(case)


@rag_system(name="diag-rag", version="v1", depth=4, top_k=2, token_budget=10, index_version="ix-1")
class DiagRag:
    def retrieve(self, input, depth):
        _count("retrieve", input["q"])
        ranking = input["ranking"][:depth]
        return Retrieval(query=input["q"], depth=depth, candidates=tuple(
            Passage(doc_id=d, score=float(len(ranking) - i), text=KB[d]) for i, d in enumerate(ranking)))

    def generate(self, input, context):
        _count("generate", input["q"])
        if input.get("broken"):
            return {"answer": "wrong"}
        if input.get("flaky") and calls("generate", input["q"]) == 1:
            return {"answer": "a flaky miss"}
        # the first passage stating an answer wins, else the first passage: a decoy ahead distracts it
        chosen = [p for p in context if "ANSWER" in (p.text or "")] + list(context)
        if not chosen:
            return {"answer": "no context", "citations": []}
        return {"answer": chosen[0].text, "citations": [chosen[0].doc_id]}

    def count_tokens(self, passage):
        return len((passage.text or "").split())


def to_top(query, candidates):
    """A reranker that moves relevant-looking passages (rel-*, big-*) to the top, keeping order otherwise."""
    return sorted(candidates, key=lambda p: not p.doc_id.startswith(("rel-", "big-")))


def answer(input):
    return {"answer": "plain"}
'''

CONFIG = """
system:
  name: diag-rag
  version: v1
  rag:
    object: {module}:DiagRag
cases: cases.jsonl
evaluators:
  - {{type: contains, criterion: answer_correct, field: answer, expected_field: answer}}
  - {{type: hit_rate, k: 2}}
  - {{type: citation_validity}}
markers: [topic]
concurrency: 1
store: .oloproof
"""

CALLABLE_CONFIG = """
system:
  name: plain
  object: {module}:answer
cases: cases.jsonl
evaluators:
  - {{type: contains, criterion: answer_correct, field: answer, expected_field: answer}}
store: .oloproof
"""


def gold(doc: str) -> list[dict[str, str]]:
    return [{"doc_id": doc, "text": f"the answer is ANSWER-{doc.split('-', 1)[1]}"}]


def case(cid: str, ranking: list[str], relevant: str | None, topic: str, *, with_gold: bool = True, **inp: Any) -> dict:
    expected: dict[str, Any] = {"answer": f"ANSWER-{cid}"}
    if relevant:
        expected["relevant"] = [{"doc_id": relevant}]
    if with_gold:
        expected["gold_context"] = gold(relevant or f"rel-{cid}")
    inp = {"q": cid, "ranking": ranking, **inp}
    return {"id": cid, "input": inp, "expected": expected, "metadata": {"topic": topic}}


CASES = [
    case("miss", ["d1", "d2", "d3"], "rel-miss", "billing"),  # RETRIEVAL_MISS, best none
    case("ranked", ["d1", "d2", "rel-ranked"], "rel-ranked", "billing"),  # RANKED_OUT, best 3 (top_k + 1)
    case("budget", ["d1", "big-budget", "d2"], "big-budget", "account"),  # CONTEXT_ASSEMBLY_LOSS, best 2
    case("distract", ["decoy", "rel-distract"], "rel-distract", "account"),  # CONTEXT_DISTRACTION, best 2
    case("unlabeled", ["d1"], None, "account"),  # RECOVERED_UNLABELED
    case("gen", ["rel-gen"], "rel-gen", "security", broken=True),  # GENERATION_FAILURE, best 1
    case("flaky", ["rel-flaky"], "rel-flaky", "security", flaky=True),  # fails once, then passes: UNSTABLE
    case("nogold", ["d1"], "rel-nogold", "billing", with_gold=False),  # undiagnosable
    case("ok", ["rel-ok"], "rel-ok", "billing"),  # passes: not selected
]
# the budget case's gold passage is the long one, so it is what the generator reads first
CASES[2]["expected"]["gold_context"] = [{"doc_id": "big-budget", "text": "the answer is ANSWER-budget"}]

EXPECTED_LABELS = {
    "miss": ("RETRIEVAL_MISS", "relevant_not_retrieved", "intervention_recovery", "none"),
    "ranked": ("RANKED_OUT", "relevant_ranked_below_top_k", "intervention_recovery", 3),
    "budget": ("CONTEXT_ASSEMBLY_LOSS", "relevant_dropped_from_context", "intervention_recovery", 2),
    "distract": ("CONTEXT_DISTRACTION", "recovered_without_other_passages", "intervention_recovery", 2),
    "unlabeled": ("RECOVERED_UNLABELED", "no_relevance_labels", "intervention_recovery", None),
    "gen": ("GENERATION_FAILURE", "fails_with_gold_context", "intervention_non_recovery", 1),
    "flaky": ("UNSTABLE", "passed_in_control", "not_diagnosed", 1),
}


class Project:
    """The project on disk, with its module under a unique name (in-process imports are cached)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.module = f"diagapp_{uuid.uuid4().hex[:12]}"
        (root / f"{self.module}.py").write_text(APP, encoding="utf-8")
        (root / "oloproof.yaml").write_text(CONFIG.format(module=self.module), encoding="utf-8")
        (root / "callable.yaml").write_text(CALLABLE_CONFIG.format(module=self.module), encoding="utf-8")
        (root / "cases.jsonl").write_text("\n".join(json.dumps(c) for c in CASES) + "\n", encoding="utf-8")

    @property
    def store(self) -> Path:
        return self.root / ".oloproof"

    def calls(self, kind: str, case: str | None = None) -> int:
        path = self.root / f"calls_{kind}.txt"
        if not path.exists():
            return 0
        lines = path.read_text(encoding="utf-8").splitlines()
        return len(lines) if case is None else lines.count(case)

    def run(self, config: str = "oloproof.yaml", status: str = "complete") -> str:
        """Record a run through the core (no pytest), returning its id."""
        from pytest_oloproof.engine.recorder import RunRecorder, run_cases
        from pytest_oloproof.engine.setup import RunSetup

        ev = RunSetup.load(self.root / config)
        try:
            recorder = RunRecorder(ev.store, ev.header(cache_mode=ev.caches.mode))
            run_cases(ev, ev.cases, recorder)
            return str(recorder.finish(status)["run_id"])
        finally:
            ev.caches.close()

    def listing(self) -> list[str]:
        return sorted(str(p.relative_to(self.store)) for p in self.store.rglob("*")) if self.store.exists() else []

    def cli(self, *args: str) -> subprocess.Popen[str]:
        """Start `oloproof ARGS` as a real process in the project folder."""
        return subprocess.Popen(
            [sys.executable, "-m", "pytest_oloproof.cli", *args],
            cwd=self.root,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


def finished(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err
