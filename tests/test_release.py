"""Deciding one run by a release policy: decisions against hand-computed bounds, `gate`, `plan`,
`latest`, missing cases bounded at worst, and the sample-size line."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from scipy.stats import binomtest

from pytest_oloproof.compare.policy import load_policy
from pytest_oloproof.compare.release import decide_run, scaled
from pytest_oloproof.errors import ConfigError
from pytest_oloproof.stats import intervals as stats
from pytest_oloproof.store.files import Store
from tests.test_compare import make_run


def cp(k: int, n: int) -> tuple[float, float]:
    """scipy's exact Clopper–Pearson bounds: the independent reference."""
    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    return float(ci.low), float(ci.high)


def write(tmp_path: Path, text: str, name: str = "release.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def rate_run(store: Store, passed: int, failed: int, missing: int = 0) -> str:
    cases: dict[str, dict[str, Any]] = {}
    for i in range(passed + failed + missing):
        v: Any = 1.0 if i < passed else (0.0 if i < passed + failed else "missing")
        cases[f"c{i:02d}"] = {"ok": v}
    return make_run(store, cases)


def oloproof(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_oloproof.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / ".oloproof")


def decide(store: Store, run_id: str, policy: Path) -> dict[str, Any]:
    return decide_run(store.load_run(run_id), load_policy(policy), store=store)


# ------------------------------------------------------------------ decisions against hand-computed bounds


@pytest.mark.parametrize(
    ("test", "threshold", "outcome", "reason"),
    [
        # 9/13: Clopper–Pearson [0.3857, 0.9091]
        ("minimum", 0.38, "PASS", "lower_bound_above_threshold"),
        ("minimum", 0.70, "INSUFFICIENT_EVIDENCE", "interval_overlaps_threshold"),
        ("minimum", 0.92, "FAIL", "upper_bound_below_threshold"),
        ("maximum", 0.92, "PASS", "upper_bound_below_threshold"),
        ("maximum", 0.70, "INSUFFICIENT_EVIDENCE", "interval_overlaps_threshold"),
        ("maximum", 0.38, "FAIL", "lower_bound_above_threshold"),
    ],
)
def test_minimum_and_maximum_read_the_exact_interval(
    store: Store, tmp_path: Path, test: str, threshold: float, outcome: str, reason: str
) -> None:
    low, high = cp(9, 13)
    assert low < 0.70 < high and 0.38 < low and high < 0.92  # the thresholds bracket the hand-computed bounds
    p = write(tmp_path, f"decisions:\n  - {{name: d, criterion: ok, test: {test}, threshold: {threshold}}}\n")
    doc = decide(store, rate_run(store, 9, 4), p)
    (d,) = doc["decisions"]
    assert d["interval"]["low"] == pytest.approx(low, abs=1e-9)
    assert d["interval"]["high"] == pytest.approx(high, abs=1e-9)
    assert (d["outcome"], d["reason"]) == (outcome, reason)
    assert doc["gate"] == ("PASS" if outcome == "PASS" else "BLOCK")
    assert doc["exit_code"] == (0 if outcome == "PASS" else 3)


def test_block_on_fail_only_lets_insufficient_evidence_pass(store: Store, tmp_path: Path) -> None:
    text = "decisions:\n  - {name: floor, criterion: ok, test: minimum, threshold: 0.70}\n"
    run = rate_run(store, 9, 4)
    assert decide(store, run, write(tmp_path, text))["gate"] == "BLOCK"
    doc = decide(store, run, write(tmp_path, text + "block_on: [FAIL]\n", "fail_only.yaml"))
    assert doc["decisions"][0]["outcome"] == "INSUFFICIENT_EVIDENCE" and doc["gate"] == "PASS"


@pytest.mark.parametrize(
    ("missing_policy", "outcome", "reason"),
    [
        ("fail", "INSUFFICIENT_EVIDENCE", "missing_exceeds_limit"),
        ("exclude", "PASS", "lower_bound_above_threshold"),
        ("bound", "INSUFFICIENT_EVIDENCE", "interval_overlaps_threshold"),
    ],
)
def test_missing_cases_fail_are_excluded_or_bounded_at_worst(
    store: Store, tmp_path: Path, missing_policy: str, outcome: str, reason: str
) -> None:
    # 18 of 20 observed pass, 4 cases missing: observed [0.683, 0.988]; with the 4 at worst
    # (0 for the lower bound, 1 for the upper) over all 24 cases: [CP(18, 24).low, CP(22, 24).high]
    run = rate_run(store, 18, 2, missing=4)
    low_observed = cp(18, 20)[0]
    worst_low, worst_high = cp(18, 24)[0], cp(22, 24)[1]
    assert worst_low < 0.65 < low_observed
    p = write(
        tmp_path,
        f"decisions:\n  - {{name: floor, criterion: ok, test: minimum, threshold: 0.65}}\nmissing: {missing_policy}\n",
    )
    doc = decide(store, run, p)
    (d,) = doc["decisions"]
    assert (d["outcome"], d["reason"]) == (outcome, reason)
    if missing_policy == "bound":
        assert d["interval"]["missing_at_worst"] is True
        assert d["interval"]["low"] == pytest.approx(worst_low, abs=1e-9)
        assert d["interval"]["high"] == pytest.approx(worst_high, abs=1e-9)
    # the run's own metrics carry the bounded interval too
    worst = store.load_run(run)["metrics"]["ok"]["missing_at_worst"]
    assert (worst["low"], worst["high"], worst["cases"]) == (
        pytest.approx(worst_low, abs=1e-9),
        pytest.approx(worst_high, abs=1e-9),
        24,
    )


@pytest.mark.parametrize(
    ("failed", "missing", "missing_policy", "outcome", "reason"),
    [
        (0, 0, "fail", "PASS", "failures_within_limit"),
        (1, 0, "fail", "PASS", "failures_within_limit"),
        (2, 0, "fail", "FAIL", "failures_exceed_limit"),
        (2, 3, "bound", "FAIL", "failures_exceed_limit"),  # missing cases cannot lower the failures seen
        (1, 1, "fail", "INSUFFICIENT_EVIDENCE", "missing_exceeds_limit"),
        (1, 1, "bound", "INSUFFICIENT_EVIDENCE", "missing_could_exceed_limit"),
        (0, 1, "bound", "PASS", "failures_within_limit"),
        (1, 1, "exclude", "PASS", "failures_within_limit"),
    ],
)
def test_max_failures(
    store: Store, tmp_path: Path, failed: int, missing: int, missing_policy: str, outcome: str, reason: str
) -> None:
    p = write(
        tmp_path,
        "decisions:\n  - {name: few, criterion: ok, test: max-failures, max_failures: 1}\n"
        f"missing: {missing_policy}\n",
    )
    (d,) = decide(store, rate_run(store, 10, failed, missing), p)["decisions"]
    assert (d["failures"], d["outcome"], d["reason"]) == (failed, outcome, reason)


# ------------------------------------------------------------------ how many cases would decide it


def test_plan_line_is_the_smallest_scaled_suite_that_decides(store: Store, tmp_path: Path) -> None:
    # 12 of 13 against a 0.80 floor: [0.639, 0.998] overlaps it. Scaled to N cases keeping 12:1,
    # the smallest N whose Clopper–Pearson lower bound is above 0.80, found here by a plain scan.
    def passes(n: int) -> bool:
        c = scaled({1.0: 12, 0.0: 1}, n)
        return cp(c[1.0], n)[0] > 0.80

    needed = next(n for n in range(14, 1000) if passes(n))
    p = write(tmp_path, "decisions:\n  - {name: floor, criterion: ok, test: minimum, threshold: 0.80}\n")
    (d,) = decide(store, rate_run(store, 12, 1), p)["decisions"]
    assert d["outcome"] == "INSUFFICIENT_EVIDENCE"
    assert d["plan"] == (
        f"a suite of about {needed} cases ({needed - 13} more) would decide it, if the next cases go like these"
    )


def test_plan_says_no_sample_size_passes_when_the_estimate_is_below_the_threshold(store: Store, tmp_path: Path) -> None:
    p = write(tmp_path, "decisions:\n  - {name: floor, criterion: ok, test: minimum, threshold: 0.70}\n")
    (d,) = decide(store, rate_run(store, 9, 4), p)["decisions"]
    assert d["plan"].startswith(
        "no sample size would make this PASS: the observed rate (69.2%) is itself below the threshold (70.0%); "
    )


@pytest.mark.parametrize(
    ("threshold", "plan"),
    [
        # 9 passed, 2 failed, 2 missing: at best 11/13 = 84.6% is still below 0.90, so nothing can PASS
        (0.90, "no sample size would make this PASS: the observed rate with every missing case at its best (84.6%) "
         "is itself below the threshold (90.0%); "),
        # at worst 9/13 = 69.2%, at best 84.6%: the missing cases alone put 0.75 on either side
        (0.75, "no sample size would decide it: with its missing cases at worst and at best the rate lies between "
         "69.2% and 84.6%, across the threshold (75.0%)"),
    ],
)  # fmt: skip
def test_plan_line_under_missing_bound_says_which_value_of_the_missing_cases_it_reads(
    store: Store, tmp_path: Path, threshold: float, plan: str
) -> None:
    p = write(
        tmp_path,
        f"decisions:\n  - {{name: floor, criterion: ok, test: minimum, threshold: {threshold}}}\nmissing: bound\n",
    )
    (d,) = decide(store, rate_run(store, 9, 2, missing=2), p)["decisions"]
    assert d["outcome"] == "INSUFFICIENT_EVIDENCE" and d["plan"].startswith(plan)


def test_scaling_keeps_proportions_and_the_total() -> None:
    c = scaled({1.0: 9, 0.0: 4}, 48)
    assert sum(c.values()) == 48 and c[1.0] == 33 and c[0.0] == 15  # 48·9/13 = 33.2, 48·4/13 = 14.8
    assert scaled({0.5: 1, 1.0: 1, 0.0: 1}, 4) == scaled({0.0: 1, 1.0: 1, 0.5: 1}, 4)


# ------------------------------------------------------------------ policy validation


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "decisions:\n  - {name: a, criterion: ok, test: minimum, threshold: 70}\n",
            "release.yaml:2: decisions[0].threshold: threshold is a fraction in [0, 1] (0.70 for 70%), got 70; "
            "did you mean 0.70?",
        ),
        (
            "decisions:\n  - {name: a, criterion: ok, test: minimum}\n",
            "threshold is required for minimum (a fraction in [0, 1], e.g. threshold: 0.70)",
        ),
        (
            "decisions:\n  - {name: a, criterion: ok, test: max-failures}\n",
            "max_failures is required for max-failures",
        ),
        (
            "decisions:\n  - {name: a, criterion: ok, test: minimum, threshold: 0.7, margin: 5}\n",
            "margin belongs to comparison tests; minimum tests one run",
        ),
        (
            "decisions:\n  - {name: a, criterion: ok, test: minimum, threshold: 0.7}\nblock_on: [BLOCK]\n",
            "release.yaml:3: block_on[0]:",
        ),
    ],
)
def test_bad_release_policies_name_file_line_key_and_fix(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_policy(write(tmp_path, text))
    assert message in str(exc.value)


# ------------------------------------------------------------------ the CLI: gate, plan, inspect, latest


def test_gate_and_plan_through_the_cli(store: Store, tmp_path: Path) -> None:
    first = rate_run(store, 13, 0)  # 13/13: [0.752, 1]
    second = rate_run(store, 9, 4)  # 9/13, the newest
    floor = write(tmp_path, "decisions:\n  - {name: floor, criterion: ok, test: minimum, threshold: 0.70}\n")
    args = ("--policy", str(floor), "--store", str(store.root))

    blocked = oloproof("gate", "latest", *args, cwd=tmp_path)
    assert blocked.returncode == 3, blocked.stderr
    lines = blocked.stdout.splitlines()
    assert lines[0].startswith("Decision sha256:") and f"of {second} · 13 cases" in lines[0]
    assert lines[-1] == "Gate: BLOCK (exit 3) · blocks on FAIL, INSUFFICIENT_EVIDENCE"
    assert "  floor  ok  minimum 70.0%  [38.5%, 91.0%]  INSUFFICIENT_EVIDENCE  interval_overlaps_threshold" in lines
    doc_id = lines[0].split()[1]
    assert (store.root / "decisions" / f"{doc_id.removeprefix('sha256:')}.json").is_file()
    inspected = oloproof("inspect", doc_id, "--store", str(store.root), cwd=tmp_path)
    assert inspected.returncode == 0 and inspected.stdout.splitlines() == lines

    passed = oloproof("gate", "latest~1", *args, "--json", cwd=tmp_path)
    assert passed.returncode == 0, passed.stderr
    js = json.loads(passed.stdout)
    assert js["run"]["run_id"] == first and js["gate"] == "PASS" and js["decisions"][0]["outcome"] == "PASS"

    plan = oloproof("plan", "latest", *args, cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    assert plan.stdout.splitlines()[2].startswith("    no sample size would make this PASS")
    assert len(list((store.root / "decisions").iterdir())) == 2  # plan stored nothing

    too_far = oloproof("gate", "latest~2", *args, cwd=tmp_path)
    assert too_far.returncode == 2
    assert "'latest~2' names the run 2 before the newest, but" in too_far.stderr
    assert "holds 2 runs" in too_far.stderr


def test_gate_refuses_a_comparison_test_without_a_baseline(store: Store, tmp_path: Path) -> None:
    rate_run(store, 13, 0)
    p = write(tmp_path, "decisions:\n  - {name: ni, criterion: ok, test: non-inferiority, margin: 5}\n")
    out = oloproof("gate", "latest", "--policy", str(p), "--store", str(store.root), cwd=tmp_path)
    assert out.returncode == 2
    assert "release.yaml:2: decisions[0].test: non-inferiority compares a candidate with a baseline" in out.stderr
    assert not (store.root / "decisions").exists()


def test_plan_of_a_comparison(store: Store, tmp_path: Path) -> None:
    cases: Mapping[str, Mapping[str, Any]] = {f"k{i:02d}": {"ok": 1.0} for i in range(13)}
    cand, base = make_run(store, cases), make_run(store, cases)
    p = write(tmp_path, "decisions:\n  - {name: ni, criterion: ok, test: non-inferiority, margin: 5}\n")
    compared = oloproof("compare", cand, base, "--policy", str(p), "--store", str(store.root), cwd=tmp_path)
    doc_id = compared.stdout.splitlines()[0].split()[1]
    out = oloproof("plan", doc_id, "--policy", str(p), "--store", str(store.root), "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)["decisions"]
    needed = stats.pairs_needed_without_change(0.05)  # with no discordant pair, as the comparison's own note
    assert row["plan"] == (
        f"a suite of about {needed} pairs ({needed - 13} more) would decide it, if the next pairs go like these"
    )


def test_latest_skips_diagnosis_child_runs(store: Store) -> None:
    parent = rate_run(store, 3, 1)
    from pytest_oloproof.engine.recorder import RunRecorder

    head = store.run_header(parent)
    keep = ("system", "evaluators", "slices", "min_slice_support", "confidence", "seed")
    header = {**{k: head[k] for k in keep}, "purpose": "diagnosis-gold-context", "parent_run": parent}
    child = RunRecorder(store, header)
    child.add({"id": "c00", "criteria": {}, "metadata": {}, "error": None, "cache": {}})
    child.finish("complete")
    assert store.run_ids()[0] == child.run_id  # the newest run is the child
    assert store.resolve("latest") == ("run", parent)


# ------------------------------------------------------------------ with a baseline


def test_a_mixed_policy_decides_the_comparison_and_the_candidate_alone(store: Store, tmp_path: Path) -> None:
    base = make_run(store, {f"k{i:02d}": {"ok": 1.0} for i in range(13)})
    cand = make_run(store, {f"k{i:02d}": {"ok": 1.0 if i < 9 else 0.0} for i in range(12)})  # k12 missing
    p = write(
        tmp_path,
        "decisions:\n"
        "  - {name: ni, criterion: ok, test: non-inferiority, margin: 5}\n"
        "  - {name: floor, criterion: ok, test: minimum, threshold: 0.30}\n"
        "missing: bound\nmin_pairs: 5\n",
    )
    # the newest run is the candidate, the one before it the baseline
    out = oloproof("compare", "latest", "latest~1", "--policy", str(p), "--store", str(store.root), cwd=tmp_path)
    assert out.returncode == 3, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].endswith(f"of {cand} against {base} · 12 paired cases")
    # the one missing pair at worst (−1 for the lower bound, +1 for the upper)
    worst = [ln for ln in lines if ln.startswith("ok: ")]
    assert worst and "12 paired · 1 missing · with missing at worst: [" in worst[0]
    assert "Decisions (1 against the baseline, 1 on the candidate alone)" in lines
    ni = next(ln for ln in lines if ln.startswith("  ni  "))
    assert "with missing at worst" in ni and ni.endswith("INSUFFICIENT_EVIDENCE  interval_overlaps_margin")
    # its plan line: even with the missing pair improved the difference is -2/13 = -15.4 points (observed: -25.0)
    assert lines[lines.index(ni) + 1].startswith(
        "    no sample size would make this PASS: the observed difference with every missing pair at its best "
        "(-15.4 points) itself fails non-inferiority at a 5.0-point margin; "
    )
    # the candidate alone: 9 of its 12 cases (k12 is not one of its cases, so nothing of its own is missing)
    low, high = cp(9, 12)
    assert low > 0.30
    floor = next(ln for ln in lines if ln.startswith("  floor  "))
    printed = f"[{math.floor(low * 1000) / 10:.1f}%, {math.ceil(high * 1000) / 10:.1f}%]"
    assert floor == f"  floor  ok  minimum 30.0%  {printed}  PASS  lower_bound_above_threshold"
    # the step summary's decisions table says the same, and the plan line follows it
    from markdown_it import MarkdownIt

    from pytest_oloproof.report.markdown import comparison_markdown as markdown

    doc_id = lines[0].split()[1]
    html = MarkdownIt("commonmark").enable("table").render(markdown(store.load_doc("comparison", doc_id), doc_id))
    assert f"<td>minimum 30.0% {printed} (candidate alone)</td>" in html
    assert "<li>ni: a suite of about" in html or "<li>ni: no sample size" in html


def test_runs_whose_recall_kinds_differ_are_compared_as_means_and_say_so(store: Store) -> None:
    from pytest_oloproof.compare.comparison import compare_runs

    def run(kind: str) -> str:
        ev = [{"criterion": "recall_at_2", "type": "recall", "kind": kind, "asserts": False, "settings": {}}]
        return make_run(store, {f"k{i}": {"recall_at_2": 1.0} for i in range(6)}, evaluators=ev)

    doc = compare_runs(store.load_run(run("rate")), store.load_run(run("mean")))
    assert doc["criteria"]["recall_at_2"]["kind"] == "mean"
    assert (
        "recall_at_2: the candidate run reads it as a rate, the baseline as a mean (their relevance labels differ); "
        "compared as a mean"
    ) in doc["warnings"]


def test_report_of_a_gated_run_shows_its_decision(store: Store, tmp_path: Path) -> None:
    rate_run(store, 9, 4)
    floor = write(tmp_path, "decisions:\n  - {name: floor, criterion: ok, test: minimum, threshold: 0.70}\n")
    args = ("--store", str(store.root))
    page = tmp_path / "run.html"
    assert oloproof("report", "latest", "--html", str(page), *args, cwd=tmp_path).returncode == 0
    assert 'id="decision-h"' not in page.read_text(encoding="utf-8")
    assert oloproof("gate", "latest", "--policy", str(floor), *args, cwd=tmp_path).returncode == 3
    assert oloproof("report", "latest", "--html", str(page), *args, cwd=tmp_path).returncode == 0
    html = page.read_text(encoding="utf-8")
    assert 'id="decision-h"' in html and 'data-gate="BLOCK"' in html and "interval_overlaps_threshold" in html


def test_plan_line_of_a_clustered_run_says_it_counts_cases_as_independent(store: Store, tmp_path: Path) -> None:
    cases = {f"c{i:02d}": {"ok": 1.0 if i < 12 else 0.0} for i in range(13)}
    run = make_run(store, cases, metadata={cid: {"cluster": f"doc{i // 2}"} for i, cid in enumerate(cases)})
    p = write(tmp_path, "decisions:\n  - {name: floor, criterion: ok, test: minimum, threshold: 0.60}\n")
    (d,) = decide(store, run, p)["decisions"]
    assert d["outcome"] == "INSUFFICIENT_EVIDENCE"
    assert d["plan"].endswith("(counting cases as independent: with clusters of several cases, more are needed)")


def test_plan_of_a_comparison_whose_missing_pair_alone_straddles_the_margin(store: Store, tmp_path: Path) -> None:
    # 12 unchanged pairs and one missing: at worst -1/13, at best +1/13 = ±7.7 points, across -5.0
    base = make_run(store, {f"k{i:02d}": {"ok": 1.0} for i in range(13)})
    cand = make_run(store, {f"k{i:02d}": {"ok": 1.0} for i in range(12)})
    p = write(tmp_path, "decisions:\n  - {name: ni, criterion: ok, test: non-inferiority, margin: 5}\nmissing: bound\n")
    compared = oloproof("compare", cand, base, "--policy", str(p), "--store", str(store.root), cwd=tmp_path)
    doc_id = compared.stdout.splitlines()[0].split()[1]
    out = oloproof("plan", doc_id, "--policy", str(p), "--store", str(store.root), "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)["decisions"]
    assert row["plan"] == (
        "no sample size would decide it: with its missing pairs at worst and at best the difference lies between "
        "-7.7 and +7.7 points, across the margin (5.0 points)"
    )
