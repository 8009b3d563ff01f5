"""A 27-case RAG project whose every failure has a planted reason (tests/test_diagnose_planted.py).

Each case's input names the diagnosis label its failure was built to get
(`planted`), so a test can check every label, and which replays should recover
it. The retriever returns the ranking the case names; the query it returns is a
question string (not the input dict), which the keyword reranker below really
reads. Assembly is top_k 2 with a 12-token budget (tokens are words):

- RETRIEVAL_MISS: no relevant passage among the candidates.
- RANKED_OUT: the relevant passage at position 3 (a top-k 3 replay brings it in) or 4 (three fillers ahead of
  it fill the budget, so top-k 3 cannot).
- CONTEXT_ASSEMBLY_LOSS: the relevant passage (11 tokens) at position 2, dropped by the budget; ahead of the
  filler it fits.
- CONTEXT_DISTRACTION: a decoy in the context makes the generator answer wrongly wherever it stands.
- GENERATION_FAILURE: the generator is broken for the case.
- RECOVERED_UNLABELED: no relevance labels; the gold context recovers it.
- UNSTABLE: fails on the first generation only. One case has no gold context, four pass.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from tests.diagnose_project import Project

APP = '''
import re
from pathlib import Path
from pytest_oloproof import Passage, Retrieval, rag_system

HERE = Path(__file__).parent
FILLER = {"f1": "nothing useful here", "f2": "still nothing here", "f3": "off topic words"}


def text_of(doc_id):
    if doc_id in FILLER:
        return FILLER[doc_id]
    kind, cid = doc_id.split("-", 1)
    if kind == "rel":
        return f"the answer is ANSWER-{cid}"
    if kind == "big":
        return f"a long passage whose answer is ANSWER-{cid} right here at last"
    return "DECOY text distracting"


def generations(case):
    path = HERE / "generations.txt"
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    return lines.count(case)


@rag_system(name="planted-rag", version="v1", depth=4, top_k=2, token_budget=12, index_version="ix-1")
class PlantedRag:
    def retrieve(self, input, depth):
        ranking = input["ranking"][:depth]
        return Retrieval(
            query=input["question"],
            depth=depth,
            candidates=tuple(
                Passage(doc_id=d, score=float(len(ranking) - i), text=text_of(d)) for i, d in enumerate(ranking)
            ),
        )

    def generate(self, input, context):
        cid = input["question"].rsplit(" ", 1)[1].rstrip("?")
        with open(HERE / "generations.txt", "a", encoding="utf-8") as f:
            f.write(cid + "\\n")
        if input.get("broken"):
            return {"answer": "wrong"}
        if input.get("flaky") and generations(cid) == 1:
            return {"answer": "a flaky miss"}
        if any("DECOY" in (p.text or "") for p in context):
            return {"answer": "distracted"}
        stating = [p for p in context if "ANSWER" in (p.text or "")] + list(context)
        return {"answer": stating[0].text if stating else "no context"}

    def count_tokens(self, passage):
        return len((passage.text or "").split())


WORD = re.compile(r"[a-z0-9]+")


def keyword_rerank(query, candidates):
    """Passages sharing more words with the query first (a stable sort): it reads the query string."""
    words = set(WORD.findall(query.lower()))
    return sorted(candidates, key=lambda p: -len(words & set(WORD.findall((p.text or "").lower()))))


def raising_rerank(query, candidates):
    return query.no_such_method()
'''

CONFIG = """
system:
  name: planted-rag
  version: v1
  rag:
    object: {module}:PlantedRag
cases: cases.jsonl
evaluators:
  - {{type: contains, criterion: answer_correct, field: answer, expected_field: answer}}
concurrency: 1
store: .oloproof
"""


def _case(cid: str, planted: str, ranking: list[str], *, labelled: bool = True, gold: bool = True, **inp: Any) -> dict:
    relevant = next((d for d in ranking if d.startswith(("rel-", "big-"))), f"rel-{cid}")
    expected: dict[str, Any] = {"answer": f"ANSWER-{cid}"}
    if labelled:
        expected["relevant"] = [{"doc_id": relevant}]
    if gold:
        expected["gold_context"] = [{"doc_id": relevant, "text": f"the answer is ANSWER-{cid}"}]
    return {
        "id": cid,
        "input": {"question": f"what is the code for {cid}?", "ranking": ranking, "planted": planted, **inp},
        "expected": expected,
    }


def _cases() -> list[dict[str, Any]]:
    out = []
    for i in range(1, 5):
        out.append(_case(f"miss{i}", "RETRIEVAL_MISS", ["f1", "f2", "f3"]))
    for i in range(1, 3):
        out.append(_case(f"ranked3x{i}", "RANKED_OUT", ["f1", "f2", f"rel-ranked3x{i}"]))
        out.append(_case(f"ranked4x{i}", "RANKED_OUT", ["f1", "f2", "f3", f"rel-ranked4x{i}"]))
    for i in range(1, 5):
        out.append(_case(f"budget{i}", "CONTEXT_ASSEMBLY_LOSS", ["f1", f"big-budget{i}", "f2"]))
    for i in range(1, 5):
        out.append(_case(f"distract{i}", "CONTEXT_DISTRACTION", [f"decoy-distract{i}", f"rel-distract{i}", "f1"]))
    for i in range(1, 4):
        out.append(_case(f"gen{i}", "GENERATION_FAILURE", [f"rel-gen{i}", "f1"], broken=True))
    for i in range(1, 3):
        out.append(_case(f"unlabeled{i}", "RECOVERED_UNLABELED", ["f1", "f2"], labelled=False))
    out.append(_case("flaky1", "UNSTABLE", ["f1", "rel-flaky1"], flaky=True))
    out.append(_case("nogold1", "UNDIAGNOSABLE", ["f1", "f2"], gold=False))
    for i in range(1, 5):
        out.append(_case(f"ok{i}", "PASSES", [f"rel-ok{i}", "f1"]))
    return out


CASES = _cases()
assert len(CASES) == 27
PLANTED = {c["id"]: c["input"]["planted"] for c in CASES}
#: which cases each replay should recover (not counting UNSTABLE ones, which a replay control passes)
TOP_K_3_RECOVERS = {"ranked3x1", "ranked3x2"}
RERANKER_RECOVERS = {c for c, p in PLANTED.items() if p in ("RANKED_OUT", "CONTEXT_ASSEMBLY_LOSS")}


class PlantedProject(Project):
    """The planted project on disk (same helpers as the diagnosis test project)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.module = f"plantedapp_{uuid.uuid4().hex[:12]}"
        (root / f"{self.module}.py").write_text(APP, encoding="utf-8")
        (root / "oloproof.yaml").write_text(CONFIG.format(module=self.module), encoding="utf-8")
        (root / "cases.jsonl").write_text("\n".join(json.dumps(c) for c in CASES) + "\n", encoding="utf-8")
