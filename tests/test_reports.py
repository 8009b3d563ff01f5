"""Reports (JSON run report, GitHub step summary, JUnit properties) and the example's first run."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.oloproof_project import case, make_project, report, row, section

EVALUATORS = [
    {"type": "contains", "criterion": "answer_correct"},
    {"type": "hit_rate", "k": 1},
    {"type": "ndcg", "k": 3},
    {"type": "citation_validity"},
]


def _project(pytester: pytest.Pytester) -> None:
    rel = {"answer": "14 days", "relevant": [{"doc_id": "d1"}]}
    cases = [
        case("a", expected=rel, order=["d1", "d2"], metadata={"topic": "billing"}),
        case("b", expected=rel, order=["d2", "d1"], answer="no", metadata={"topic": "billing"}),
        case("c", expected={"answer": "14 days"}, metadata={"topic": "seats"}),
        case("d", expected=rel, fail="generate", metadata={"topic": "seats"}),
    ]
    make_project(
        pytester, cases, EVALUATORS, extra="slices: [metadata.topic, relevant_position]\nmin_slice_support: 1\n"
    )


def test_json_report_has_the_run_schema(pytester: pytest.Pytester) -> None:
    _project(pytester)
    result, rep = report(pytester)
    result.assert_outcomes(passed=2, failed=2)
    assert rep["schema"] == "oloproof.run/1"
    assert rep["run_id"].startswith("run_") and rep["status"] == "complete"
    assert (pytester.path / ".oloproof" / "runs" / rep["run_id"] / "run.json").is_file()
    assert {"name", "version", "depth", "top_k", "token_budget", "index_version"} <= set(rep["system"])
    assert (rep["system"]["name"], rep["system"]["depth"], rep["system"]["top_k"]) == ("mini", 4, 2)
    assert rep["cache"]["execution"] == {"hit": 0, "miss": 4}
    assert rep["cache"]["judgment"] == {"hit": 0, "miss": 12}  # 3 evaluated cases x 4 evaluators
    # the stage counters of the three cases that ran cleanly (a failed case's record keeps none)
    assert rep["cache"]["generate"] == {"hit": 0, "miss": 3} and rep["cache"]["retrieve"]["hit"] == 0
    m = rep["metrics"]["answer_correct"]
    assert {"kind", "value", "low", "high", "passed", "observed", "missing", "excluded", "excluded_reasons"} <= set(m)
    assert (m["kind"], m["passed"], m["observed"], m["missing"], m["excluded"]) == ("rate", 2, 3, 1, 0)
    assert m["value"] == pytest.approx(2 / 3) and 0 < m["low"] < m["value"] < m["high"] < 1
    h = rep["metrics"]["hit_rate_at_1"]
    assert (h["observed"], h["excluded"], h["excluded_reasons"]) == (2, 1, {"no_relevance_labels": 1})
    # slices rows
    billing = next(
        r
        for r in rep["slices"]
        if (r["slice"], r["value"], r["criterion"]) == ("metadata.topic", "billing", "answer_correct")
    )
    assert billing["support"] == 2 and billing["value_estimate"] == 0.5 and billing["low"] < 0.5 < billing["high"]
    # cases
    by_id = {c["id"]: c for c in rep["cases"]}
    a, b, c, d = (by_id[k] for k in "abcd")
    for cr in (a, b, c, d):
        assert {
            "id",
            "criteria",
            "retrieval",
            "context",
            "dropped",
            "context_truncated",
            "relevant_position",
            "output",
            "error",
        } <= set(cr)
    assert a["criteria"]["answer_correct"] == {
        "status": "observed",
        "value": 1.0,
        "expected": "contains '14 days'",
        "actual": "Refunds take 14 days. Plans renew monthly.",
    }
    assert c["criteria"]["ndcg_at_3"] == {"status": "excluded", "reason": "no_relevance_labels"}
    assert (
        d["criteria"]["answer_correct"]["status"] == "missing"
        and d["criteria"]["answer_correct"]["reason"] == "system_error"
    )
    pos1 = b["retrieval"][0]
    assert {k: pos1[k] for k in ("position", "doc_id", "chunk_id", "score")} == {
        "position": 1,
        "doc_id": "d2",
        "chunk_id": None,
        "score": 1.0,
    }
    assert "tokens" in pos1
    assert b["context"] == [1, 2] and b["dropped"] == [] and b["context_truncated"] is False
    assert (a["relevant_position"], b["relevant_position"], c["relevant_position"]) == (1, 2, None)
    assert b["output"] == {"answer": "no", "citations": ["d2", "d1"]}
    assert a["error"] is None and d["error"]["stage"] == "generate"
    assert json.loads(json.dumps(rep)) == rep  # plain JSON throughout


def test_markdown_summary_is_appended_to_github_step_summary(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _project(pytester)
    summary = pytester.path / "step_summary.md"
    summary.write_text("## Earlier step\n", encoding="utf-8")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    pytester.runpytest("--oloproof")
    pytester.runpytest("--oloproof")
    text = summary.read_text(encoding="utf-8")
    assert text.startswith("## Earlier step\n")
    assert text.count("### Oloproof · mini") == 2
    assert "| criterion | estimate | 95% interval | accounting |" in text
    # the missing case at worst: Clopper–Pearson of 2 / 4 for the lower bound, 3 / 4 for the upper
    assert (
        "| answer_correct | 66.7% | [9.4%, 99.2%] | 2 / 3 observed · 1 missing · with missing at worst: "
        "[6.7%, 99.4%] · 0 excluded |"
    ) in text
    assert "- answer_correct: missing — system_error 1" in text
    assert "- hit_rate_at_1: excluded — no_relevance_labels 1" in text
    assert "`Cache: execution 0 hit/4 miss; judgment 0 hit/12 miss`" in text
    # second run: the failed case is re-executed (errors are never cached), the rest are hits
    assert "`Cache: execution 3 hit/1 miss; judgment 12 hit/0 miss`" in text


def test_no_step_summary_without_the_variable(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    _project(pytester)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    result = pytester.runpytest("--oloproof")
    assert "answer_correct" in "\n".join(section(result))
    assert not list(pytester.path.glob("*.md"))


def test_criterion_values_are_junit_user_properties(pytester: pytest.Pytester) -> None:
    _project(pytester)
    xml_path = pytester.path / "junit.xml"
    pytester.runpytest("--oloproof", f"--junitxml={xml_path}")
    root = ET.parse(xml_path).getroot()
    props = {}
    for tc in root.iter("testcase"):
        props[tc.get("name")] = {p.get("name"): p.get("value") for p in tc.iter("property")}
    assert props["mini[a]"] == {
        "oloproof.answer_correct": "1.0",
        "oloproof.hit_rate_at_1": "1.0",
        "oloproof.ndcg_at_3": "1.0",
        "oloproof.citations_valid": "1.0",
    }
    assert props["mini[b]"]["oloproof.answer_correct"] == "0.0"
    assert float(props["mini[b]"]["oloproof.ndcg_at_3"]) == pytest.approx(0.6309297535714575)
    assert props["mini[c]"]["oloproof.ndcg_at_3"] == "excluded: no_relevance_labels"
    assert props["mini[d]"]["oloproof.answer_correct"] == "missing: system_error"


def test_added_evaluator_and_report_under_xdist(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    pytester.makeconftest(
        """
        import pytest_oloproof
        from pytest_oloproof import CriterionValue, Evaluator

        class Cited(Evaluator):
            type = "cites_something"
            def __init__(self):
                super().__init__("cites_something")
            def evaluate(self, x):
                return CriterionValue.observed(bool(x.output.get("citations")))

        @pytest_oloproof.evaluator
        def cites_something():
            return Cited()
        """
    )
    _project(pytester)
    serial, rep1 = report(pytester, "--oloproof-cache=off", name="serial.json")
    parallel, rep2 = report(pytester, "-n", "2", "--oloproof-cache=off", name="parallel.json")
    assert [e["criterion"] for e in rep2["evaluators"]] == [*(e.get("criterion") for e in rep1["evaluators"])]
    assert rep2["evaluators"][-1]["criterion"] == "cites_something"
    assert rep1["metrics"] == rep2["metrics"] and rep1["slices"] == rep2["slices"]
    assert row(serial, "cites_something") == row(parallel, "cites_something")


# ------------------------------------------------------------------ the example


EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "support_rag"


def test_example_first_run(pytester: pytest.Pytester, tmp_path: Path) -> None:
    project = tmp_path / "support_rag"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns(".oloproof", ".pytest_cache", "__pycache__"))
    # a subprocess: the example's `app` module must not be shared with other in-process runs
    result = pytester.runpytest_subprocess(
        "--oloproof", f"--rootdir={project}", f"--oloproof-config={project / 'oloproof.yaml'}"
    )
    result.assert_outcomes(passed=9, failed=4)
    assert row(result, "answer_correct")[1:] == ["69.2%", "[38.5%, 91.0%]", "9 / 13 observed · 0 missing · 0 excluded"]
    cells = row(result, "hit_rate_at_2")  # a rate: Clopper-Pearson
    assert cells[1] == "92.3%" and cells[2].startswith("[63.9%, ") and cells[3].startswith("12 / 13 observed")
    cells = row(result, "recall_at_2")  # a rate: every labelled case has one relevant unit (recall@2 = hit@2)
    assert cells[1:] == ["92.3%", "[63.9%, 99.9%]", "12 / 13 observed · 0 missing · 0 excluded"]
    ndcg = row(result, "ndcg_at_6")
    assert ndcg[3] == "mean of 13 observed · 0 missing · 0 excluded"
    low, high = (float(v) for v in ndcg[2].strip("[]").split(", "))
    assert low < float(ndcg[1]) < high <= 1.0
    assert row(result, "citations_valid")[1:3] == ["100.0%", "[75.2%, 100.0%]"]
    lines = section(result)
    assert "Cache: execution 0 hit/13 miss; judgment 0 hit/65 miss" in lines
    assert "Stages: retrieve 0 hit/13 miss; generate 0 hit/13 miss" in lines
    runs = list((project / ".oloproof" / "runs").iterdir())
    record = json.loads((runs[0] / "run.json").read_text(encoding="utf-8"))
    assert record["metrics"]["ndcg_at_6"]["method"] == "mixture" and "seed" in record


def test_slice_lines_wrap_and_say_insufficient_support() -> None:
    from pytest_oloproof.report.text import SLICE_WIDTH, slice_lines

    rows = [
        {"slice": "metadata.topic", "value": "billing", "criterion": f"criterion_{i}", "support": 5, "kind": "rate"}
        | {"value_estimate": 0.8, "low": 0.2836, "high": 0.9949, "passed": 4}
        for i in range(6)
    ] + [
        {
            "slice": "relevant_position",
            "value": "none",
            "criterion": "criterion_0",
            "support": 1,
            "insufficient_support": True,
        }
    ]
    lines = slice_lines(rows, 4)
    assert lines[0].startswith("Slices (exploratory") and lines[0].endswith("min support 4)")
    assert lines[1].startswith("  metadata.topic=billing: criterion_0 80.0% [28.3%, 99.5%] 4/5 · ")
    billing = [line for line in lines[1:] if not line.startswith("  relevant_position")]
    assert len(billing) > 1 and all(len(line) <= SLICE_WIDTH for line in billing)
    assert sum(line.count("criterion_") for line in billing) == 6
    assert lines[-1] == "  relevant_position=none: 1 observed · insufficient support"
