"""`repeats: N`: each case's generation N times, under keys of its own, through real pytest sessions."""

from __future__ import annotations

import fnmatch
import json
from pathlib import Path
from typing import Any

import pytest

from pytest_oloproof.records.identity import StageKeys, canonical_json, judgment_key
from pytest_oloproof.system.declare import Passage
from tests.oloproof_project import module_name, section
from tests.test_report_browser import chromium, open_page  # noqa: F401  (the browser fixtures)

# A system whose answer depends on the repeat it runs in (`current_repeat()`): right in the repeats listed
# in the case's `right_in`. It counts its calls in calls.txt, so a test can tell what really ran.
SEEDED = """
import os

from pytest_oloproof import Passage, Retrieval, current_repeat, rag_system

KB = {"d1": "Refunds take 14 days.", "d2": "Plans renew monthly.", "d3": "Teams get 10 seats."}


def _log(what):
    with open("calls.txt", "a") as f:
        f.write(what + "\\n")


@rag_system(name="seeded", version="1", depth=3, top_k=2)
class Seeded:
    def retrieve(self, input, depth):
        _log(f"retrieve {input['q']} {current_repeat()}")
        cands = tuple(Passage(d, score=1.0 / (i + 1), text=KB[d]) for i, d in enumerate(input["order"]))
        return Retrieval(query=input["q"], depth=depth, candidates=cands)

    def generate(self, input, context):
        r = current_repeat()
        _log(f"generate {input['q']} {r}")
        if r in input.get("fail_in", []):
            raise RuntimeError(f"model down in repeat {r}")
        right = r in input["right_in"] or os.environ.get("SEEDED_ALL_RIGHT") == "1"
        return {"answer": input["answer"] if right else "I do not know", "citations": [p.doc_id for p in context]}
"""

#: right in every repeat, in none, in repeats 0 and 2, in repeat 1 only (with repeats: 3)
CASES = [
    {"id": "always", "q": "refund", "order": ["d1", "d2"], "answer": "14 days", "right_in": [0, 1, 2, 3]},
    {"id": "never", "q": "seats", "order": ["d2", "d1"], "answer": "10 seats", "right_in": []},
    {"id": "even", "q": "renew", "order": ["d2", "d3"], "answer": "monthly", "right_in": [0, 2]},
    {"id": "odd", "q": "teams", "order": ["d3", "d1"], "answer": "10 seats", "right_in": [1]},
]


def seeded_project(
    pytester: pytest.Pytester,
    extra: str = "",
    *,
    folder: Path | None = None,
    cases: list[dict[str, Any]] = CASES,
    gold: bool = False,
) -> Path:
    """Write the seeded system, its 4 cases and an oloproof.yaml (`extra` appended); returns the folder."""
    root = folder or pytester.path
    root.mkdir(parents=True, exist_ok=True)
    mod = module_name(pytester, "seeded")
    (root / f"{mod}.py").write_text(SEEDED)
    lines = []
    for c in cases:
        inp = {k: c[k] for k in ("q", "order", "answer", "right_in", "fail_in") if k in c}
        expected: dict[str, Any] = {"answer": c["answer"]}
        if gold:
            expected["gold_context"] = [{"doc_id": "g", "text": c["answer"]}]
        lines.append(json.dumps({"id": c["id"], "input": inp, "expected": expected}))
    (root / "cases.jsonl").write_text("\n".join(lines) + "\n")
    (root / "oloproof.yaml").write_text(
        f"system:\n  rag: {{object: '{mod}:Seeded'}}\ncases: cases.jsonl\nstore: .oloproof\n"
        "evaluators:\n"
        "  - {type: contains, criterion: answer_correct, field: answer, expected_field: answer}\n"
        "  - {type: citation_validity}\n" + extra
    )
    return root


def run(pytester: pytest.Pytester, *args: str, name: str = "r.json") -> tuple[pytest.RunResult, dict[str, Any]]:
    path = pytester.path / name
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider", f"--oloproof-report={path}", *args)
    return result, json.loads(path.read_text(encoding="utf-8"))


def calls(pytester: pytest.Pytester) -> list[str]:
    path = pytester.path / "calls.txt"
    out = path.read_text().splitlines() if path.exists() else []
    path.unlink(missing_ok=True)
    return out


# ------------------------------------------------------------------ a. settings, keys, caching


def test_keys_without_repeats_are_the_keys_of_before() -> None:
    """A cache written before repeats existed still hits: repeat 0's keys are byte-identical to the old ones
    (computed by the identity module as it was before `repeats`), and a repeat > 0 gets keys of its own."""
    system = {"name": "mini", "version": "1", "depth": 4, "top_k": 2, "token_budget": None, "index_version": "kb-1"}
    keys = StageKeys(system)
    inp = canonical_json({"q": "refund"})
    ctx = [Passage("d1", text="Refunds take 14 days.")]
    old = {
        "retrieve": "07703fcc196bfdd91911eb8b9b040f544dc79015e83864ee840461d1982da7f3",
        "generate": "7df012ad733ddc8b6018598279afed041a49254c188518eb1117c5c34f1d3354",
        "execution": "79e3d250bd733cab2825a749552d8c0f595fe9f2837bf610e4b61dd36d247b28",
        "judgment": "5e913d3f06c80a70d6693a4799cf9b9107bb18aa33c03da8923fdcb225526fe9",
    }
    assert keys.retrieve(inp) == keys.retrieve(inp, 0) == old["retrieve"]
    assert keys.generate(inp, ctx) == keys.generate(inp, ctx, 0) == old["generate"]
    assert keys.execution(inp) == keys.execution(inp, 0, True) == old["execution"]
    assert judgment_key("contains", "a" * 64, "b" * 64, "c" * 64, 0) == old["judgment"]
    fresh = {
        keys.retrieve(inp, 1),
        keys.generate(inp, ctx, 1),
        keys.generate(inp, ctx, 2),
        keys.execution(inp, 1),
        keys.execution(inp, 1, True),
        judgment_key("contains", "a" * 64, "b" * 64, "c" * 64, 1),
    }
    assert len(fresh) == 6 and not fresh & set(old.values())


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("repeats: 0", "*oloproof.yaml:*repeats*greater than or equal to 1*"),
        ("repeats: true", "*oloproof.yaml:*repeats*expected a number, got true*"),
        ("repeats: three", "*oloproof.yaml:*repeats*"),
        ("repeat_retrieval: sometimes", "*oloproof.yaml:*repeat_retrieval*"),
    ],
)
def test_a_bad_repeats_setting_is_a_config_error_before_anything_runs(
    pytester: pytest.Pytester, setting: str, message: str
) -> None:
    seeded_project(pytester, setting + "\n")
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider")
    assert result.ret == 2
    assert any(fnmatch.fnmatch(line, message) for line in result.outlines + result.errlines), result.errlines
    assert calls(pytester) == []
    assert not (pytester.path / ".oloproof" / "runs").exists()


def test_a_bad_repeats_option_is_a_usage_error(pytester: pytest.Pytester) -> None:
    seeded_project(pytester)
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider", "--oloproof-repeats", "0")
    assert result.ret == 4  # pytest's own usage-error status for a bad option value
    result.stderr.fnmatch_lines(["*--oloproof-repeats*expected a positive integer, got '0'*"])
    assert calls(pytester) == []


def test_each_repeat_generates_once_retrieval_once_and_a_rerun_is_fully_cached(pytester: pytest.Pytester) -> None:
    seeded_project(pytester, "repeats: 3\n")
    _, cold = run(pytester)
    made = calls(pytester)
    # retrieval once per case; generation once per repeat, each seeing its repeat index
    assert sorted(c for c in made if c.startswith("retrieve")) == sorted(f"retrieve {c['q']} 0" for c in CASES)
    assert sorted(c for c in made if c.startswith("generate")) == sorted(
        f"generate {c['q']} {r}" for c in CASES for r in range(3)
    )
    assert cold["cache"]["execution"] == {"hit": 0, "miss": 12}
    assert cold["cache"]["retrieve"] == {"hit": 0, "miss": 4}
    assert cold["cache"]["generate"] == {"hit": 0, "miss": 12}
    assert cold["cache"]["judgment"] == {"hit": 0, "miss": 24}  # judges asked per repeat

    _, warm = run(pytester, name="warm.json")
    assert calls(pytester) == []
    assert warm["cache"]["execution"] == {"hit": 12, "miss": 0}
    assert warm["cache"]["judgment"] == {"hit": 24, "miss": 0}
    assert [c["criteria"] for c in warm["cases"]] == [c["criteria"] for c in cold["cases"]]


def test_repeat_retrieval_retrieves_in_every_repeat(pytester: pytest.Pytester) -> None:
    seeded_project(pytester, "repeats: 2\nrepeat_retrieval: true\n")
    _, rep = run(pytester)
    made = calls(pytester)
    assert sorted(c for c in made if c.startswith("retrieve")) == sorted(
        f"retrieve {c['q']} {r}" for c in CASES for r in range(2)
    )
    assert rep["cache"]["retrieve"] == {"hit": 0, "miss": 8}


def test_a_single_run_cache_serves_repeat_0_and_the_option_overrides_the_file(pytester: pytest.Pytester) -> None:
    """repeats: 1 writes the keys it always wrote; `--oloproof-repeats 3` then reuses them as repeat 0."""
    seeded_project(pytester)
    _, single = run(pytester)
    assert "repeats" not in single and all("repeats" not in c for c in single["cases"])
    assert len(calls(pytester)) == 8  # 4 retrievals, 4 generations
    _, three = run(pytester, "--oloproof-repeats", "3", name="three.json")
    assert sorted(calls(pytester)) == sorted(f"generate {c['q']} {r}" for c in CASES for r in (1, 2))
    assert three["cache"]["execution"] == {"hit": 4, "miss": 8}
    reasons = three["cache_misses"]["stages"]
    new_repeats = "new repeats (the previous run made 1 per case; each repeat has entries of its own)"
    assert reasons["execution"] == {"miss": 8, "reasons": [{"reason": new_repeats, "count": 8}]}
    assert reasons["judgment"] == {"miss": 16, "reasons": [{"reason": new_repeats, "count": 16}]}
    assert all(len(c["repeats"]) == 3 for c in three["cases"])
    section(pytester.runpytest("--oloproof", "-p", "no:cacheprovider"))  # and repeats: 1 again still hits
    assert calls(pytester) == []


# ------------------------------------------------------------------ b. per-case means, the record, missing repeats


def test_the_case_value_is_its_mean_over_repeats_and_the_record_keeps_every_repeat(pytester: pytest.Pytester) -> None:
    seeded_project(pytester, "repeats: 3\n")
    result, rep = run(pytester)
    cases = {c["id"]: c for c in rep["cases"]}
    expected = {"always": [1.0, 1.0, 1.0], "never": [0.0, 0.0, 0.0], "even": [1.0, 0.0, 1.0], "odd": [0.0, 1.0, 0.0]}
    for cid, values in expected.items():
        c = cases[cid]["criteria"]["answer_correct"]
        assert c["status"] == "observed"
        assert c["value"] == pytest.approx(sum(values) / 3)
        assert c["repeat_values"] == values
        repeats = cases[cid]["repeats"]
        assert [r["repeat"] for r in repeats] == [0, 1, 2]
        assert [r["criteria"]["answer_correct"]["value"] for r in repeats] == values
        answers = [r["output"]["answer"] for r in repeats]
        assert answers == [CASES_BY_ID[cid]["answer"] if v else "I do not know" for v in values]
        assert cases[cid]["output"] == repeats[0]["output"]  # repeat 0 where a record without repeats has it
    assert rep["repeats"] == 3 and rep["repeat_retrieval"] is False
    m = rep["metrics"]["answer_correct"]
    # a rate over repeats is read as a mean of per-case means: the bounded-mean interval over the 4 cases
    assert m["kind"] == "mean" and m["method"] == "mixture" and m["value"] == pytest.approx(0.5)
    assert "averaged over 3 repeats" in m["note"]
    from pytest_oloproof.stats.intervals import mean_interval

    iv = mean_interval([1.0, 0.0, 2 / 3, 1 / 3], 0.95, seed=0)
    assert (m["low"], m["high"]) == pytest.approx((iv.low, iv.high))
    # the items: a case that failed in any repeat fails
    result.assert_outcomes(passed=1, failed=3)


def test_a_repeat_that_fails_leaves_the_case_its_other_repeats(pytester: pytest.Pytester) -> None:
    """Decided: the case's value is the mean over the repeats that observed it, the missing repeats named;
    a criterion missing in every repeat leaves the case missing."""
    cases = [
        {"id": "once", "q": "a", "order": ["d1"], "answer": "14 days", "right_in": [0, 1, 2], "fail_in": [1]},
        {"id": "all", "q": "b", "order": ["d1"], "answer": "14 days", "right_in": [0, 1, 2], "fail_in": [0, 1, 2]},
        {"id": "fine", "q": "c", "order": ["d1"], "answer": "14 days", "right_in": [0]},
    ]
    seeded_project(pytester, "repeats: 3\n", cases=cases)
    _, rep = run(pytester)
    by_id = {c["id"]: c for c in rep["cases"]}
    once = by_id["once"]["criteria"]["answer_correct"]
    assert once["status"] == "observed" and once["value"] == 1.0
    assert once["missing_repeats"] == [1] and once["repeat_values"] == [1.0, None, 1.0]
    assert by_id["once"]["repeats"][1]["error"]["message"].endswith("model down in repeat 1")
    every = by_id["all"]["criteria"]["answer_correct"]
    assert every["status"] == "missing" and every["missing_repeats"] == [0, 1, 2]
    m = rep["metrics"]["answer_correct"]
    assert (m["observed"], m["missing"]) == (2, 1)


CASES_BY_ID = {c["id"]: c for c in CASES}


def test_two_xdist_workers_give_the_record_of_one_process(pytester: pytest.Pytester) -> None:
    from tests.test_scale import assert_same, strip_volatile

    reports = {}
    for mode in ("0", "2"):
        project = seeded_project(pytester, "repeats: 3\n", folder=pytester.path / f"n{mode}")
        (project / "pytest.ini").write_text("[pytest]\n")  # the project's folder is the rootdir
        path = project / "r.json"
        result = pytester.runpytest_subprocess(
            "--oloproof", "-p", "xdist", "-n", mode, "-p", "no:cacheprovider", f"--oloproof-report={path}", str(project)
        )
        result.assert_outcomes(passed=1, failed=3)
        rep = strip_volatile(json.loads(path.read_text()))
        rep["cases"] = {c["id"]: c for c in rep["cases"]}
        rep.pop("config_path", None)
        reports[mode] = rep
    assert reports["0"]["cache"]["generate"] == {"hit": 0, "miss": 12}
    assert reports["0"]["repeat_summary"]["flaky"] == {"answer_correct": ["even", "odd"]}
    assert_same(reports["0"], reports["2"])


# ------------------------------------------------------------------ c. flaky cases, the variance split, the views


def test_variance_split_against_a_hand_computed_example() -> None:
    """Four cases, three repeats: 1 1 1 | 0 0 0 | 1 0 1 | 0 1 0 (the seeded system's answer_correct).

    By hand: case means 1, 0, 2/3, 1/3 (grand mean 1/2); their sample variance
    (1/4 + 1/4 + 1/36 + 1/36) / 3 = 5/27. Within-case sample variances 0, 0, 1/3, 1/3: mean 1/6.
    Between = 5/27 − (1/6)/3 = 7/54. SE now = √(5/27 / 4); with 6 repeats √((7/54 + 1/36)/4);
    floor √(7/54 / 4); the within part's share of Var(mean): (1/18) / (5/27) = 0.3.
    """
    from pytest_oloproof.stats.repeats import variance_split

    s = variance_split([[1, 1, 1], [0, 0, 0], [1, 0, 1], [0, 1, 0]], 3)
    assert s is not None
    assert s["between"] == pytest.approx(7 / 54) and s["within"] == pytest.approx(1 / 6)
    assert s["se"] == pytest.approx((5 / 27 / 4) ** 0.5) == pytest.approx(s["se_model"])
    assert s["se_double"] == pytest.approx(((7 / 54 + 1 / 36) / 4) ** 0.5)
    assert s["se_floor"] == pytest.approx((7 / 54 / 4) ** 0.5)
    assert s["within_share"] == pytest.approx(0.3)
    # Miller's model by simulation: case means p_i ~ U(0,1), K Bernoulli(p_i) answers each; the variance of the
    # run's mean over many runs matches (σ²_between + σ²_within / K) / n (σ²_b = 1/12, σ²_w = E[p(1−p)] = 1/6)
    import numpy as np

    rng = np.random.default_rng(26)
    n, k, reps = 40, 3, 4000
    p = rng.uniform(size=(reps, n))
    means = rng.binomial(k, p).mean(axis=1) / k
    assert means.var() == pytest.approx((1 / 12 + (1 / 6) / k) / n, rel=0.08)
    # a missing repeat: K_i = 2 for that case, and the estimate uses mean(1/K_i)
    m = variance_split([[1, 1], [0, 0, 0], [1, 0, 1]], 3)
    assert m is not None and m["repeats_observed"] == pytest.approx(3 / (1 / 2 + 1 / 3 + 1 / 3))
    assert variance_split([[1, 0, 1]], 3) is None  # one case: nothing to split


def test_the_summary_lists_flaky_cases_and_the_split_in_every_renderer(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    seeded_project(pytester, "repeats: 3\nslices: [flaky]\nmin_slice_support: 1\n")
    summary_md = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary_md))
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider")
    lines = section(result)
    assert "Repeats: 3 per case · flaky cases (a verdict differs across repeats): 2 of 4" in lines
    assert "  answer_correct: even, odd" in lines
    assert "Variance of answer_correct (Miller 2024): between cases 0.1296, within a case 0.1667" in lines
    assert any(
        line.startswith("  standard error 0.215 with 3 repeats, 0.198 with 6, 0.180 with unlimited") for line in lines
    )
    assert any(line.startswith("  flaky=true: answer_correct 0.500") for line in lines)
    assert any(line.startswith("  flaky=false: answer_correct 0.500") for line in lines)
    md = summary_md.read_text()
    assert "- Repeats: 3 per case · flaky cases (a verdict differs across repeats): 2 of 4" in md
    assert "- answer_correct: even, odd" in md
    # inspect shows every repeat of every case (the CLI, in a subprocess)
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "pytest_oloproof.cli", "inspect", "latest"],
        cwd=pytester.path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout.splitlines()
    i = text.index(next(line for line in text if line.startswith("  even: answer_correct=0.667")))
    assert text[i + 1 : i + 4] == [
        "    repeat 0: answer_correct=pass, citations_valid=pass · answer 'monthly'",
        "    repeat 1: answer_correct=fail, citations_valid=pass · answer 'I do not know'",
        "    repeat 2: answer_correct=pass, citations_valid=pass · answer 'monthly'",
    ]


def test_the_html_case_page_shows_every_repeat(pytester: pytest.Pytester, request: pytest.FixtureRequest) -> None:
    import subprocess
    import sys

    seeded_project(pytester, "repeats: 3\n")
    pytester.runpytest("--oloproof", "-p", "no:cacheprovider")
    page_path = pytester.path / "run.html"
    out = subprocess.run(
        [sys.executable, "-m", "pytest_oloproof.cli", "report", "latest", "--html", str(page_path)],
        cwd=pytester.path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    opened = request.getfixturevalue("open_page")(page_path, "#case=odd")  # headless Chromium
    page = opened.page
    assert "flaky cases (a verdict differs across repeats): 2 of 4" in page.locator("ul.repeat-lines").inner_text()
    rows = page.locator("#detail-body table.repeats tbody tr")
    assert rows.count() == 3
    cells = rows.evaluate_all("rows => rows.map(r => Array.from(r.cells).slice(0, 3).map(c => c.textContent))")
    assert cells == [["0", "fail", "pass"], ["1", "pass", "pass"], ["2", "fail", "pass"]]
    assert "10 seats" in rows.nth(1).inner_text() and "I do not know" in rows.nth(0).inner_text()
    opened.check_clean()


# ------------------------------------------------------------------ d. compare and diagnose


def cli(cwd: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    import os
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "pytest_oloproof.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def test_compare_pairs_cases_on_their_means_over_repeats_with_the_graded_paired_interval(
    pytester: pytest.Pytester,
) -> None:
    from pytest_oloproof.stats.intervals import paired_mean_diff_interval

    root = seeded_project(pytester, "repeats: 3\n")
    assert cli(root, "run", "-p", "no:cacheprovider").returncode == 1
    # the candidate answers right in every repeat (the cache is off, so the change is seen)
    done = cli(root, "run", "-p", "no:cacheprovider", "--oloproof-cache=off", env={"SEEDED_ALL_RIGHT": "1"})
    assert done.returncode == 0, done.stdout
    out = cli(root, "compare", "latest", "latest~1", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    answer = doc["criteria"]["answer_correct"]
    # per-case differences of the means: always 0, never +1, even +1/3, odd +2/3
    diffs = [0.0, 1.0, 1 / 3, 2 / 3]
    iv = paired_mean_diff_interval(diffs, 0.95, seed=0)
    assert answer["kind"] == "mean" and answer["method"] == "paired-mixture"
    assert answer["estimate"] == pytest.approx(50.0)
    assert (answer["low"], answer["high"]) == pytest.approx((iv.low * 100, iv.high * 100))
    # a rate whose per-case means happen to be all 0/1 is still paired as a mean, not by the exact McNemar interval
    cited = doc["criteria"]["citations_valid"]
    assert cited["kind"] == "mean" and cited["method"] == "paired-mixture"


def test_diagnose_labels_cases_unstable_across_repeats_without_re_running_them(pytester: pytest.Pytester) -> None:
    root = seeded_project(pytester, "repeats: 3\n", gold=True)
    assert cli(root, "run", "-p", "no:cacheprovider").returncode == 1
    calls(pytester)
    out = cli(root, "diagnose", "latest", "--criterion", "answer_correct", "--json")
    assert out.returncode == 0, out.stderr + out.stdout
    doc = json.loads(out.stdout)
    entries = {e["id"]: e for e in doc["cases"]}
    assert sorted(entries) == ["even", "never", "odd"]
    for cid in ("even", "odd"):
        assert entries[cid]["label"] == "UNSTABLE" and entries[cid]["reason"] == "verdicts_differ_across_repeats"
    assert entries["never"]["label"] == "GENERATION_FAILURE"
    counts = doc["counts"]
    assert (counts["unstable"], counts["unstable_across_repeats"], counts["diagnosed"]) == (2, 2, 1)
    assert doc["missing"] == {}  # never re-run is not missing
    # only the stable case was re-executed (its control and its gold-context run): nothing for even and odd
    assert sorted(c for c in calls(pytester) if c.startswith("generate")) == ["generate seats 0", "generate seats 0"]
    text = cli(root, "inspect", doc["id"]).stdout
    assert "even: UNSTABLE, verdicts_differ_across_repeats, strength not_diagnosed" in text
    shown = cli(root, "diagnose", "latest", "--criterion", "answer_correct")
    assert "UNSTABLE: 2 of 3, verdicts differ across the run's repeats (not re-run); not diagnosed" in shown.stdout
    assert "Control: 0 of 1 passed when re-executed without the intervention" in shown.stdout


def test_a_run_whose_repeats_never_differ_says_more_repeats_would_not_help() -> None:
    """A deterministic system run with repeats: no split to show, and the summary says what that means."""
    from pytest_oloproof.report.text import repeats_lines
    from pytest_oloproof.report.views import RepeatsView
    from pytest_oloproof.stats.repeats import repeats_summary

    cases = [
        {"id": f"c{i}", "criteria": {"answer_correct": {"status": "observed", "value": float(i % 2)}}} for i in range(4)
    ]
    for c in cases:
        value = c["criteria"]["answer_correct"]["value"]
        c["repeats"] = [
            {"repeat": r, "criteria": {"answer_correct": {"status": "observed", "value": value}}} for r in range(3)
        ]
    summary = repeats_summary(cases, ["answer_correct"], 3)
    view = RepeatsView.of({"repeat_summary": summary, "counts": {"cases": 4}})
    lines = repeats_lines(view)
    assert lines[0] == "Repeats: 3 per case · flaky cases (a verdict differs across repeats): 0 of 4"
    assert "No criterion varies within a case: more repeats would not narrow any interval" in lines
    assert not any(line.startswith("Variance of") for line in lines)
