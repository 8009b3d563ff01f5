"""CI step summaries render as meant (issue 18 §5): the Markdown is rendered with a CommonMark + GFM-table
renderer (markdown-it-py, as GitHub would) and the assertions are on the HTML, not on the Markdown text."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from pytest_oloproof.report.markdown import FAILED_CASES_SHOWN, code, text
from pytest_oloproof.report.markdown import comparison_markdown as markdown
from pytest_oloproof.report.markdown import run_markdown as markdown_summary

# ------------------------------------------------------------------ rendering and reading the HTML


@dataclass
class Node:
    tag: str
    children: list[Node | str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text for c in self.children)

    def elements(self) -> list[Node]:
        return [c for c in self.children if isinstance(c, Node)]

    def find(self, tag: str) -> list[Node]:
        found = []
        for c in self.elements():
            if c.tag == tag:
                found.append(c)
            found += c.find(tag)
        return found


class _Tree(HTMLParser):
    VOID = frozenset({"br", "hr", "img", "input"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("root")
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag)
        self.stack[-1].children.append(node)
        if tag not in self.VOID:
            self.stack.append(node)

    def handle_endtag(self, tag: str) -> None:
        if tag in self.VOID:
            return
        assert self.stack[-1].tag == tag, (tag, self.stack[-1].tag)
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def render(md: str) -> Node:
    """CommonMark with GFM tables and strikethrough, as GitHub renders a step summary."""
    html = MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(md)
    tree = _Tree()
    tree.feed(html)
    tree.close()
    return tree.root


def rows(table: Node) -> list[list[str]]:
    return [[cell.text.strip() for cell in tr.elements()] for tr in table.find("tr")]


def assert_nothing_swallowed(root: Node) -> None:
    """No table markup left as text outside a table, no table inside a blockquote or a list."""
    for node in root.find("p") + root.find("li") + root.find("blockquote"):
        assert "|---" not in node.text and not node.text.lstrip().startswith("| "), node.text
    for container in root.find("blockquote") + root.find("li"):
        assert not container.find("table"), container.text


# ------------------------------------------------------------------ the pieces


def test_free_text_renders_literally() -> None:
    nasty = "a | b *not bold* _nor this_ <b>no html</b> [x](http://y) `tick` ~~no~~ & co, ~$0.12 vs $0.10"
    root = render(f"| {text(nasty)} |\n|---|\n| {code('run_`01`')} |\n")
    ((head,), (cell,)) = rows(root.find("table")[0])
    assert head == nasty and cell == "run_`01`"
    assert not root.find("strong") and not root.find("em") and not root.find("a") and not root.find("b")
    for start in ("# heading", "- item", "13. item", "> quote", "+ x"):
        assert render(text(start)).elements()[0].tag == "p" and render(text(start)).text.strip() == start


def _comparison(warnings: list[str]) -> dict[str, object]:
    return {
        "gate": "BLOCK",
        "exit_code": 3,
        "candidate": {"run_id": "run_CAND"},
        "baseline": {"run_id": "run_BASE"},
        "paired_cases": 11,
        "warnings": warnings,
        "criteria": {
            "answer_correct": {
                "paired": 11,
                "missing": 2,
                "excluded": 0,
                "printed": {"estimate": "+0.0", "low": "-24.8", "high": "+24.8"},
                "missing_reasons": {"missing_in_candidate": 2},
                "excluded_reasons": {},
            },
            "ndcg_at_6": {"paired": 0, "missing": 0, "excluded": 13, "excluded_reasons": {"no_relevance_labels": 13}},
        },
        "sample_size_notes": [
            "answer_correct: 11 paired cases cannot establish non-inferiority at a 5.0-point margin; "
            "about 73 would be needed with no changed verdicts"
        ],
        "decisions": [
            {
                "name": "answers-not-worse",
                "criterion": "answer_correct",
                "test": "non-inferiority",
                "margin": 5.0,
                "outcome": "INSUFFICIENT_EVIDENCE",
                "reason": "interval_overlaps_margin",
            }
        ],
    }


def test_comparison_warnings_are_blockquotes_and_the_table_stays_a_table() -> None:
    warnings = [
        "the runs used different case sets: 0 case(s) only in the candidate, 2 only in the baseline (q30, q31)",
        "the runs used different index_version: candidate 'kb|2', baseline '*kb-1*'",
    ]
    root = render(markdown(_comparison(warnings), "sha256:abc"))
    assert_nothing_swallowed(root)
    tags = [e.tag for e in root.elements()]
    assert tags == ["h3", "p", "blockquote", "table", "ul", "p", "table", "p"], tags
    (quote,) = root.find("blockquote")
    assert [line.strip() for line in quote.text.splitlines() if line.strip()] == [f"Warning: {w}" for w in warnings]
    criteria, decisions = root.find("table")
    assert rows(criteria) == [
        ["criterion", "difference (points)", "interval", "accounting"],
        ["answer_correct", "+0.0", "[-24.8, +24.8]", "11 paired · 2 missing · 0 excluded"],
        ["ndcg_at_6", "—", "—", "0 paired · 0 missing · 13 excluded"],
    ]
    (accounting,) = root.find("ul")
    assert [li.text for li in accounting.find("li")] == [
        "answer_correct — missing: missing_in_candidate 2",
        "ndcg_at_6 — excluded: no_relevance_labels 13",
    ]
    assert [root.elements()[5].text] == _comparison([])["sample_size_notes"]
    assert rows(decisions)[1] == [
        "answers-not-worse",
        "answer_correct",
        "non-inferiority, margin 5.0 points",
        "INSUFFICIENT_EVIDENCE",
        "interval_overlaps_margin",
    ]
    assert root.elements()[-1].text == "Gate: BLOCK (exit 3)"


def test_a_comparison_without_warnings_or_policy_renders_too() -> None:
    doc = {**_comparison([]), "decisions": [], "gate": None, "sample_size_notes": []}
    root = render(markdown(doc, "sha256:abc"))
    assert_nothing_swallowed(root)
    assert [e.tag for e in root.elements()] == ["h3", "p", "table", "ul"]
    assert root.find("h3")[0].text == "Oloproof gate · no policy"


def _record(n_cases: int, n_failed: int) -> dict[str, object]:
    cases = []
    for i in range(n_cases):
        failed = i < n_failed
        criteria = {
            "answer_correct": {"status": "observed", "value": 0.0 if failed else 1.0},
            "style": {"status": "observed", "value": 0.0},  # does not assert: never a failure
        }
        if i == 0:
            criteria["grounded"] = {"status": "missing", "reason": "judge_error: HTTP 500"}
        cases.append({"id": f"case_{i:02d}", "criteria": criteria, "error": None})
    cases.append({"id": "boom", "criteria": {}, "error": {"stage": "generate", "message": "ValueError: x|y"}})
    metric = {"kind": "rate", "value": 0.5, "low": 0.2, "high": 0.8, "passed": 1, "observed": 2}
    return {
        "run_id": "run_01ABC",
        "status": "complete",
        "system": {"name": "support-rag"},
        "confidence": 0.95,
        "evaluators": [
            {"criterion": "answer_correct", "asserts": True},
            {"criterion": "grounded", "asserts": True},
            {"criterion": "style", "asserts": False},
        ],
        "metrics": {"answer_correct": {**metric, "missing": 1, "excluded": 0, "missing_reasons": {"system_error": 1}}},
        "cache": {k: {"hit": 0, "miss": 1} for k in ("execution", "judgment", "retrieve", "generate")},
        "cases": cases,
    }


def test_run_summary_lists_failed_cases_with_their_criteria_then_how_many_more() -> None:
    record = _record(30, 25)
    root = render(markdown_summary(record))
    assert_nothing_swallowed(root)
    assert [e.tag for e in root.elements()] == ["h3", "table", "ul", "p", "p", "ul"]
    assert root.find("h3")[0].text == "Oloproof · support-rag · run_01ABC (complete)"
    assert rows(root.find("table")[0])[1] == [
        "answer_correct",
        "50.0%",
        "[20.0%, 80.0%]",
        "1 / 2 observed · 1 missing · 0 excluded",
    ]
    assert root.elements()[3].text.splitlines()[0] == "Cache: execution 0 hit/1 miss; judgment 0 hit/1 miss"
    assert root.elements()[4].text == "Failed cases (26 of 31)"
    items = [li.text for li in root.elements()[5].find("li")]
    assert len(items) == FAILED_CASES_SHOWN + 1
    assert items[0] == "case_00: answer_correct; grounded missing (judge_error: HTTP 500)"
    assert items[1] == "case_01: answer_correct"
    assert items[-1] == "and 6 more (oloproof inspect run_01ABC lists every case)"
    assert all("style" not in item for item in items)


def test_few_failures_are_all_listed_and_none_means_no_list() -> None:
    record = _record(5, 2)
    items = [li.text for li in render(markdown_summary(record)).find("ul")[-1].find("li")]
    assert items == [
        "case_00: answer_correct; grounded missing (judge_error: HTTP 500)",
        "case_01: answer_correct",
        "boom: system error in generate: ValueError: x|y",
    ]
    clean = _record(3, 0)
    clean["cases"] = [c for c in clean["cases"] if c["id"] not in ("boom", "case_00")]  # type: ignore[index,union-attr]
    assert "Failed cases" not in render(markdown_summary(clean)).text


# ------------------------------------------------------------------ the file a real gated session appends to


def _project(pytester: pytest.Pytester, module: str, passing: int, n: int, broken: int = 0) -> None:
    """Cases q00.. answer correctly below `passing`; the last `broken` raise (their criteria are missing)."""
    pytester.makepyfile(
        **{
            module: f"""
def answer(input):
    if input["q"] >= {n - broken}:
        raise ValueError("index offline")
    return {{"answer": "yes" if input["q"] < {passing} else "no"}}
"""
        }
    )
    pytester.makefile(
        ".yaml",
        oloproof=f"system:\n  name: toy-md\n  object: {module}:answer\ncases: cases.jsonl\n"
        "evaluators:\n  - {type: contains, criterion: ok, field: answer, expected_field: answer}\nstore: .oloproof\n",
    )
    lines = [json.dumps({"id": f"q{i:02d}", "input": {"q": i}, "expected": {"answer": "yes"}}) for i in range(n)]
    pytester.makefile(".jsonl", cases="\n".join(lines) + "\n")


def test_the_step_summary_of_a_gated_session_renders(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _project(pytester, "md_sys_base", passing=32, n=32)
    first = pytester.runpytest("--oloproof", "-p", "no:cacheprovider", "--oloproof-report", "base.json")
    assert first.ret == 0
    _project(pytester, "md_sys_cand", passing=5, n=30, broken=2)
    pytester.makefile(
        ".yaml", compare="decisions:\n  - {name: not-worse, criterion: ok, test: non-inferiority, margin: 5}\n"
    )
    summary = Path(pytester.path) / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = pytester.runpytest(
        "--oloproof", "-p", "no:cacheprovider", "--oloproof-baseline", "base.json", "--oloproof-policy", "compare.yaml"
    )
    assert result.ret == 3
    terminal = result.stdout.str()
    assert "  missing: missing_in_candidate 2, not_in_candidate 2" in terminal
    root = render(summary.read_text(encoding="utf-8"))
    assert_nothing_swallowed(root)
    run_title, gate_title = (h.text for h in root.find("h3"))
    assert run_title.startswith("Oloproof · toy-md · run_") and gate_title == "Oloproof gate · BLOCK"
    (quote,) = root.find("blockquote")
    assert "Warning: the runs used different case sets" in quote.text and "(q30, q31)" in quote.text
    tables = root.find("table")
    assert len(tables) == 3  # run metrics, comparison criteria, decisions
    assert rows(tables[1])[1][0] == "ok" and rows(tables[2])[1][0] == "not-worse"
    items = [li.text for li in root.find("li")]
    assert "ok — missing: missing_in_candidate 2, not_in_candidate 2" in items
    assert "q05: ok" in items and "and 5 more (oloproof inspect " + run_title.split(" · ")[2].split()[0] in " ".join(
        items
    )
    assert sum(1 for i in items if i.startswith("q") and i.endswith(": ok")) == FAILED_CASES_SHOWN
    assert root.elements()[-1].text.startswith("Gate: BLOCK (exit 3)")


def test_extra_paragraphs_and_the_gate_reason_render_in_place() -> None:
    from pytest_oloproof.report.markdown import comparison_markdown

    doc = {**_comparison(["one warning"]), "gate_reason": "cases_changed"}
    doc["case_sets"] = {"changed": {"refund_review": ["expected"]}}  # the paragraph comes from the case sets
    para = "Cases not paired: 1 case changed between the runs: refund_review (expected)."
    root = render(comparison_markdown(doc, "sha256:abc"))
    assert_nothing_swallowed(root)
    tags = [e.tag for e in root.elements()]
    assert tags[:5] == ["h3", "p", "blockquote", "p", "table"], tags
    assert root.elements()[3].text == para
    assert root.elements()[-1].text == "Gate: BLOCK (exit 3) · cases_changed"
