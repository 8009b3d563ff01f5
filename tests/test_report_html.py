"""The HTML report without a browser: SVG forest plots, safe embedding, the funnel, views, the CLI and the option."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from staged_helpers import case, rag_project, run_records

from pytest_oloproof.report import model
from pytest_oloproof.report.html import embed_json, render_page
from pytest_oloproof.report.svg import ForestRow, forest_plot, nice_symmetric, percent_tick, scale

SVG = "{http://www.w3.org/2000/svg}"
HOSTILE = '</script><script>alert(1)</script><img src=x onerror="alert(2)"><!--'


def oloproof(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_oloproof.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


# ------------------------------------------------------------------ svg


def test_scale_maps_and_clamps() -> None:
    assert scale(0.0, (0.0, 1.0), 100, 300) == 100
    assert scale(0.25, (0.0, 1.0), 100, 300) == 150
    assert scale(-5.0, (-10.0, 10.0), 0, 200) == 50
    assert scale(2.0, (0.0, 1.0), 100, 300) == 300  # clamped: an interval past the axis ends at its edge
    with pytest.raises(ValueError):
        scale(0.5, (1.0, 1.0), 0, 10)


def test_nice_symmetric_holds_every_bound() -> None:
    assert nice_symmetric([-22.8, 22.8, -5.0]) == 25.0
    assert nice_symmetric([0.0, 1.0]) == 5.0
    assert nice_symmetric([-60.0, None, float("nan")]) == 100.0
    assert nice_symmetric([-250.0]) == 300.0


def _plot(rows: list[ForestRow]) -> ET.Element:
    svg = forest_plot(
        rows,
        domain=(0.0, 1.0),
        ticks=(0.0, 0.5, 1.0),
        tick_format=percent_tick,
        title=HOSTILE,
        label_width=100,
        plot_width=200,
    )
    return ET.fromstring(str(svg))


def test_forest_plot_draws_each_interval_at_its_coordinates() -> None:
    root = _plot([ForestRow("a", 0.5, 0.25, 0.75, text="50%"), ForestRow("b", 1.0, 0.75, 1.0, text="100%")])
    rows = root.findall(f"{SVG}g")
    assert [g.get("data-label") for g in rows] == ["a", "b"]
    line = rows[0].find(f"{SVG}line[@class='ci']")
    assert line is not None
    assert (float(line.get("x1", "")), float(line.get("x2", ""))) == (150.0, 250.0)
    est = rows[0].find(f"{SVG}rect[@class='est']")
    assert est is not None and float(est.get("x", "")) + 4 == 200.0
    assert [t.text for t in root.findall(f"{SVG}text[@class='tick']")] == ["0%", "50%", "100%"]


def test_forest_plot_shows_a_row_without_estimate_by_its_note() -> None:
    root = _plot([ForestRow("metadata.topic=x · c", None, None, None, note="2 observed · insufficient support")])
    g = root.find(f"{SVG}g")
    assert g is not None
    assert g.find(f"{SVG}line[@class='ci']") is None and g.find(f"{SVG}rect") is None
    sides = [t.text for t in g.findall(f"{SVG}text[@class='side']")]
    assert sides == ["2 observed · insufficient support"]


def test_forest_plot_escapes_every_string() -> None:
    root = _plot([ForestRow(HOSTILE, 0.5, 0.4, 0.6, text=HOSTILE, marks=((0.2, HOSTILE),))])
    assert root.find(f"{SVG}title") is not None and root.find(f"{SVG}title").text == HOSTILE  # type: ignore[union-attr]
    assert all(el.tag.startswith(SVG) for el in root.iter())  # no <script> or <img> element came out of the text
    labels = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "label"]
    assert labels == [HOSTILE]


# ------------------------------------------------------------------ embedding


def test_embedded_json_cannot_end_its_script_block() -> None:
    data = {"answer": HOSTILE, "sep": "a\u2028b\u2029c", "amp": "&lt;", "bad": float("nan"), "inf": float("inf")}
    text = str(embed_json(data))
    assert "</" not in text and "<!--" not in text and "<" not in text and ">" not in text
    assert "\u2028" not in text and "\u2029" not in text
    back = json.loads(text)
    assert back == {"answer": HOSTILE, "sep": "a\u2028b\u2029c", "amp": "&lt;", "bad": "nan", "inf": "inf"}


# ------------------------------------------------------------------ the funnel and the case payload


def _cand(pos: int, doc: str, text: str = "t") -> dict[str, Any]:
    return {"position": pos, "doc_id": doc, "chunk_id": None, "score": 1.0, "tokens": 5, "text": text}


def _case(cid: str, relevant: str | None, retrieval: list[str], context: list[int], passed: bool) -> dict[str, Any]:
    expected: dict[str, Any] = {"answer": "x"}
    if relevant:
        expected["relevant"] = [{"doc_id": relevant}]
    return {
        "id": cid,
        "retrieval": [_cand(i + 1, d) for i, d in enumerate(retrieval)],
        "context": context,
        "dropped": [
            {"position": p, "reason": "token_budget"} for p in (1, 2) if p <= len(retrieval) and p not in context
        ],
        "context_truncated": len(context) < min(2, len(retrieval)),
        "criteria": {"answer_correct": {"status": "observed", "value": 1.0 if passed else 0.0}},
        "expected": expected,
        "output": {"answer": "x"},
        "error": None,
    }


RECORD: dict[str, Any] = {
    "run_id": "run_X",
    "system": {"name": "s", "depth": 4, "top_k": 2},
    "evaluators": [{"criterion": "answer_correct", "type": "contains", "kind": "rate", "asserts": True}],
    "metrics": {},
    "cases": [
        _case("unlabelled", None, ["a", "b"], [1, 2], True),
        _case("missed", "z", ["a", "b", "c"], [1, 2], False),
        _case("ranked_out", "c", ["a", "b", "c"], [1, 2], False),
        _case("dropped", "b", ["a", "b", "c"], [1], False),
        _case("in_context_failed", "a", ["a", "b"], [1, 2], False),
        _case("good", "a", ["a", "b"], [1, 2], True),
        _case("good2", "b", ["a", "b"], [1, 2], True),
    ],
}


def test_funnel_counts_each_stage_of_the_labelled_cases() -> None:
    f = model.funnel(RECORD)
    assert f["labelled"] == 6 and f["criterion"] == "answer_correct"
    assert [(s["count"], s["dropped"]) for s in f["steps"]] == [(5, 1), (4, 1), (3, 1), (2, 1)]
    assert f["steps"][0]["label"] == "Relevant retrieved within depth 4"


def test_case_payload_marks_relevance_cut_and_budget() -> None:
    data = model.case_payload(RECORD)
    rows = {c["id"]: c for c in data["cases"]}
    ladder = rows["dropped"]["r"]
    assert [r[6] for r in ladder] == ["c", "d:token_budget", "b"]  # in context, dropped by the budget, below top-k
    assert [r[5] for r in ladder] == [None, 1, None]
    assert rows["unlabelled"]["r"][0][5] is None
    assert rows["missed"]["f"] is True and rows["good"]["f"] is False
    assert data["texts"] == ["t"]  # one passage text, stored once for every case that retrieved it


# ------------------------------------------------------------------ diagnosis and comparison views


def test_diagnosis_view_counts_and_cautious_words() -> None:
    doc = {
        "run_id": "run_A",
        "criterion": "answer_correct",
        "intervention": {"name": "gold-context", "settings": {}},
        "counts": {
            "selected": 2,
            "control_passed": 0,
            "unstable": 0,
            "not_diagnosed": 0,
            "diagnosed": 2,
            "recovered": 1,
            "undiagnosable": 0,
            "labels": {"RETRIEVAL_MISS": 1, "GENERATION_FAILURE": 1},
        },
        "implicated": [{"factor": "retrieval", "count": 1, "of": 1, "basis": "recovered", "label": "RETRIEVAL_MISS"}],
        "candidate_experiments": [{"factor": "retrieval", "experiment": "a larger depth"}],
        "child_runs": {"gold_context": "run_G", "control": "run_C"},
        "cases": [
            {
                "id": HOSTILE,
                "label": "RETRIEVAL_MISS",
                "reason": "relevant_not_retrieved",
                "strength": "s",
                "best_relevant_position": "none",
                "original": {"status": "observed", "value": 0.0},
                "control": {"status": "observed", "value": 0.0},
                "intervention": {"status": "observed", "value": 1.0},
            },
        ],
        "undiagnosable": [],
    }
    view = model.diagnosis_view(doc, "sha256:abc")
    counts = {x["label"]: x["count"] for x in view["label_counts"]}
    assert counts["RETRIEVAL_MISS"] == 1 and counts["GENERATION_FAILURE"] == 1 and counts["RANKED_OUT"] == 0
    assert view["control_line"] == "Control: 0 of 2 passed when re-executed without the intervention"
    assert (
        "Candidate experiment: a larger depth. This is a hypothesis to test, not an established cause."
        in (view["cautious"])
    )
    assert [v["text"] for v in view["cases"][0]["verdicts"]] == ["fail", "fail", "pass"]
    html = render_page(view)
    assert HOSTILE not in html and "&lt;/script&gt;&lt;script&gt;alert(1)" in html
    assert 'href="run_G.html"' in html and 'href="run_C.html"' in html


def test_comparison_view_puts_both_outputs_of_a_flipped_case_side_by_side() -> None:
    doc = {
        "candidate": {"run_id": "run_B"},
        "baseline": {"run_id": "run_A"},
        "paired_cases": 2,
        "criteria": {
            "answer_correct": {
                "paired": 2,
                "missing": 0,
                "excluded": 0,
                "estimate": -50.0,
                "low": -90.0,
                "high": 10.0,
                "printed": {"estimate": "-50.0", "low": "-90.0", "high": "+10.0"},
                "regressed": ["q1"],
                "improved": [],
            }
        },
        "decisions": [
            {
                "name": "d",
                "criterion": "answer_correct",
                "test": "non-inferiority",
                "margin": 5.0,
                "outcome": "FAIL",
                "reason": "interval_below_margin",
            }
        ],
        "policy": {"decisions": []},
        "gate": "BLOCK",
        "exit_code": 3,
        "case_sets": {"only_in_baseline": ["gone"]},
    }
    cand = {
        "cases": [
            {
                "id": "q1",
                "output": {"answer": "new <b>wrong</b>"},
                "criteria": {"answer_correct": {"status": "observed", "value": 0.0}},
            }
        ]
    }
    base = {
        "cases": [
            {
                "id": "q1",
                "output": {"answer": "old right"},
                "criteria": {"answer_correct": {"status": "observed", "value": 1.0}},
            }
        ]
    }
    view = model.comparison_view(doc, "sha256:c", cand, base)
    (flip,) = view["flipped"]
    assert (flip["baseline"], flip["candidate"], flip["direction"]) == ("old right", "new <b>wrong</b>", "pass → fail")
    assert view["only_in_baseline"] == ["gone"]
    root = ET.fromstring(str(view["plot"]))
    margin = root.find(f".//{SVG}line[@class='margin']")
    assert margin is not None  # the −5 point margin drawn on its row
    html = render_page(view)
    assert 'data-gate="BLOCK"' in html and "new &lt;b&gt;wrong&lt;/b&gt;" in html
    assert 'href="run_B.html#case=q1"' in html and 'href="run_A.html#case=q1"' in html


# ------------------------------------------------------------------ the CLI and the pytest option


def test_report_command_writes_pages_and_an_index(pytester: pytest.Pytester) -> None:
    rag_project(pytester, [case("good"), case("bad", answer="not there")])
    for _ in range(2):
        assert oloproof(pytester.path, "run", "-p", "no:cacheprovider", "-q").returncode == 1
    newest, oldest = [r["run_id"] for r in reversed(run_records(pytester.path / ".oloproof"))]

    proc = oloproof(pytester.path, "report", newest[:12], "--html", "out/run.html")
    assert proc.returncode == 0, proc.stderr
    page = (pytester.path / "out" / "run.html").read_text(encoding="utf-8")
    assert f"<title>Oloproof run {newest}</title>" in page
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in page

    proc = oloproof(pytester.path, "report", "--html", "site", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    index = (pytester.path / "site" / "index.html").read_text(encoding="utf-8")
    links = re.findall(r'href="(run_[0-9A-Z]+)\.html"', index)
    assert links == [newest, oldest]  # newest first
    assert all((pytester.path / "site" / f"{r}.html").is_file() for r in links)
    assert len(doc["pages"]) == 3


def test_report_command_errors_exit_2(pytester: pytest.Pytester) -> None:
    rag_project(pytester, [case("good")])
    assert oloproof(pytester.path, "run", "-p", "no:cacheprovider", "-q").returncode == 0
    proc = oloproof(pytester.path, "report", "run_NOPE", "--html", "x.html")
    assert proc.returncode == 2 and "no run or diagnosis or comparison matches 'run_NOPE'" in proc.stderr
    (pytester.path / "adir").mkdir()
    proc = oloproof(pytester.path, "report", "run_", "--html", "adir")
    assert proc.returncode == 2 and "is a folder" in proc.stderr
    proc = oloproof(pytester.path, "report", "run_")
    assert proc.returncode == 2 and "--html" in proc.stderr
    assert not (pytester.path / "x.html").exists()


def test_pytest_option_writes_the_run_page_with_the_comparison(pytester: pytest.Pytester) -> None:
    rag_project(pytester, [case("good"), case("good2")])
    pytester.runpytest("--oloproof", "-p", "no:cacheprovider").assert_outcomes(passed=2)
    (baseline,) = [r["run_id"] for r in run_records(pytester.path / ".oloproof")]
    pytester.makefile(
        ".yaml",
        compare="decisions:\n  - {name: d, criterion: answer_correct, test: non-inferiority, "
        "margin: 5.0}\nmin_pairs: 1\n",
    )
    result = pytester.runpytest(
        "--oloproof",
        "-p",
        "no:cacheprovider",
        "--oloproof-html",
        "report.html",
        "--oloproof-baseline",
        baseline,
        "--oloproof-policy",
        "compare.yaml",
    )
    assert result.ret == 3
    result.stdout.fnmatch_lines(["Gate: BLOCK (exit 3)", "HTML report: report.html"])
    page = (pytester.path / "report.html").read_text(encoding="utf-8")
    assert 'data-gate="BLOCK"' in page and baseline in page
    data = json.loads(re.search(r'<script type="application/json" id="oloproof-data">(.*?)</script>', page, re.S)[1])  # type: ignore[index]
    assert sorted(c["id"] for c in data["cases"]) == ["good", "good2"]
    assert data["cases"][0]["r"] is not None  # full case records, not the run record's slim summaries


def test_changed_cases_name_what_changed() -> None:
    assert model._changed_ids({"q1": ["input"], "q2": ["input", "expected"]}) == ["q1 (input)", "q2 (input, expected)"]
    assert model._changed_ids(["q1"]) == ["q1"]


def test_case_payload_keeps_rationales_and_reasons_but_not_repeated_values() -> None:
    rec = {
        "evaluators": [{"criterion": "grounded", "asserts": True, "kind": "rate"}],
        "cases": [
            {
                "id": "a",
                "criteria": {
                    "grounded": {
                        "status": "observed",
                        "value": 0.0,
                        "expected": "grounded",
                        "actual": 0.0,
                        "detail": {"rationale": "not in the context: 'x'"},
                    },
                    "other": {"status": "missing", "reason": "judge_error: timeout"},
                },
            }
        ],
    }
    data = model.case_payload(rec)
    (row,) = data["cases"]
    assert row["cd"]["grounded"] == {"xs": 0, "rationale": "not in the context: 'x'"}  # actual == value: left out
    assert data["texts"][0] == "grounded"
    assert row["cd"]["other"] == {"reason": "judge_error: timeout"}
    assert row["c"] == [["o", 0.0], ["m", "judge_error: timeout"]]
    assert row["f"] is True
    assert "r" not in row and "e" not in row  # no retrieval, no error: absent rather than null


def test_short_float_never_turns_a_fail_into_a_pass() -> None:
    assert model._short_float(0.63092975357) == 0.63093
    assert model._short_float(0.9999999) == 0.9999999
    assert model._short_float(1e-9) == 1e-9
    assert model._short_float(None) is None


def test_the_plugin_and_the_cli_import_jinja2_only_for_a_report(tmp_path: Path) -> None:
    check = (
        "import sys, pytest_oloproof.pytest_plugin.plugin, pytest_oloproof.cli; "
        "pytest_oloproof.cli.main(['runs', '--store', sys.argv[1]]); print('jinja2' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", check, str(tmp_path)], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False"


def test_index_names_an_unreadable_run_instead_of_leaving_it_out(pytester: pytest.Pytester) -> None:
    rag_project(pytester, [case("good")])
    for _ in range(2):
        assert oloproof(pytester.path, "run", "-p", "no:cacheprovider", "-q").returncode == 0
    newest, oldest = [r["run_id"] for r in reversed(run_records(pytester.path / ".oloproof"))]
    (pytester.path / ".oloproof" / "runs" / oldest / "run.json").write_text("{not json", encoding="utf-8")
    proc = oloproof(pytester.path, "report", "--html", "site")
    assert proc.returncode == 0, proc.stderr
    assert f"Not shown (unreadable): run {oldest}: " in proc.stdout
    index = (pytester.path / "site" / "index.html").read_text(encoding="utf-8")
    assert "Not shown: records that could not be read" in index and oldest in index
    assert (pytester.path / "site" / f"{newest}.html").is_file()
    assert 'href="index.html"' in (pytester.path / "site" / f"{newest}.html").read_text(encoding="utf-8")


def test_run_page_gives_the_cache_miss_reasons_the_terminal_gives() -> None:
    from pytest_oloproof.report.text import miss_lines

    misses = {
        "previous_run": "run_P",
        "stages": {"retrieve": {"miss": 13, "reasons": [{"reason": "index_version kb-1 → kb-2", "count": 13}]}},
        "new_cases": 0,
    }
    hm = {"hit": 0, "miss": 13}
    record = {**RECORD, "cache": dict.fromkeys(("execution", "judgment", "retrieve", "generate"), hm)}
    view = model.run_view({**record, "cache_misses": misses})
    assert [line.strip() for line in miss_lines(misses)] == view["cache_lines"][2:]
    assert any("index_version kb-1 → kb-2" in line for line in view["cache_lines"])


def test_run_page_gives_the_tokens_and_budget_lines_the_terminal_gives() -> None:
    from pytest_oloproof.report.text import usage_lines

    source = {"calls": 2, "input_tokens": 300, "output_tokens": 40, "unknown_calls": 0, "cost": None}
    usage = {"judges": source, "system": {"calls": 0}, "saved": {"calls": 0}, "priced": False}
    budget = {
        "exhausted": True,
        "max_judge_calls": 2,
        "cases_not_judged": ["b"],
        "cases_not_executed": [],
        "criteria_missing": 1,
    }
    record = {**RECORD, "usage": usage, "budget": budget, "cache": None}
    lines = model.run_view(record)["cache_lines"]
    assert lines == usage_lines(record) and len(lines) == 2
    assert lines[0].startswith("Tokens: judges 2 calls, 300 in / 40 out")


def test_ladder_scores_are_rounded_for_reading() -> None:
    case = _case("scored", "a", ["a", "b", "c"], [1, 2], True)
    for cand, score in zip(case["retrieval"], (0.8234567891234567, 12345.678, 1e-7), strict=True):
        cand["score"] = score
    data = model.case_payload({**RECORD, "cases": [case]})
    assert [r[3] for r in data["cases"][0]["r"]] == [0.8235, 12350.0, 1e-7]
