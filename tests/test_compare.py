"""Comparison and the gate: pairing, intervals, decisions, the CLI and the example walk-through."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_oloproof import cli
from pytest_oloproof.compare.comparison import ComparisonError, judge_gate, load_run, run_comparison
from pytest_oloproof.engine.recorder import RunRecorder
from pytest_oloproof.errors import StoreError
from pytest_oloproof.evaluate.judge_validation import judge_identity
from pytest_oloproof.evaluators.base import CriterionValue, EvalInput, Evaluator
from pytest_oloproof.records.identity import sha256_of
from pytest_oloproof.report.text import comparison_lines as render
from pytest_oloproof.stats import intervals as stats
from pytest_oloproof.store.files import Store

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "support_rag"

Value = float | str  # a float is observed; "missing" / "excluded" are statuses


def criterion(v: Value) -> dict[str, Any]:
    if v == "missing":
        return {"status": "missing", "reason": "system_error: boom"}
    if v == "excluded":
        return {"status": "excluded", "reason": "no_relevance_labels"}
    return {"status": "observed", "value": float(v)}


def make_run(
    store: Store,
    cases: Mapping[str, Mapping[str, Value]],
    *,
    system: str = "toy",
    index: str = "idx-1",
    evaluators: Sequence[Mapping[str, Any]] | None = None,
    metadata: Mapping[str, Mapping[str, Any]] | None = None,
    status: str = "complete",
) -> str:
    """Write a run record through the real RunRecorder into a real store."""
    names = sorted({n for vals in cases.values() for n in vals})

    def kind(name: str) -> str:
        vals = [v.get(name) for v in cases.values()]
        return "rate" if all(v in (0.0, 1.0, "missing", "excluded", None) for v in vals) else "mean"

    evs = evaluators or [
        {"criterion": n, "type": "contains", "kind": kind(n), "asserts": True, "settings": {}} for n in names
    ]
    header = {
        "purpose": "run",
        "system": {"name": system, "version": "v", "index_version": index},
        "evaluators": list(evs),
        "slices": ["metadata.topic"],
        "min_slice_support": 2,
        "confidence": 0.95,
        "seed": 0,
    }
    rec = RunRecorder(store, header)
    for cid, vals in cases.items():
        rec.add(
            {
                "id": cid,
                "criteria": {n: criterion(v) for n, v in vals.items()},
                "metadata": dict((metadata or {}).get(cid, {})),
                "error": None,
                "cache": {},
            }
        )
    rec.finish(status)
    return rec.run_id


def binary_runs(n: int, base_pass: set[int], cand_pass: set[int]) -> tuple[dict[str, Any], dict[str, Any]]:
    cand = {f"c{i:04d}": {"ok": 1.0 if i in cand_pass else 0.0} for i in range(n)}
    base = {f"c{i:04d}": {"ok": 1.0 if i in base_pass else 0.0} for i in range(n)}
    return cand, base


def policy_file(tmp_path: Path, decisions: str, extra: str = "", name: str = "compare.yaml") -> Path:
    p = tmp_path / name
    p.write_text(f"decisions:\n{decisions}{extra}", encoding="utf-8")
    return p


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / ".oloproof")


def compare_ids(
    store: Store, cand: Mapping[str, Any], base: Mapping[str, Any], policy: Path | None = None
) -> tuple[str, dict[str, Any]]:
    return run_comparison(store, make_run(store, cand), make_run(store, base), policy)


# ------------------------------------------------------------------ pairing and accounting


def test_pairing_counts_paired_missing_excluded(store: Store) -> None:
    cand = {"a": {"ok": 1}, "b": {"ok": "missing"}, "c": {"ok": 1}, "d": {"ok": 1}, "e": {"ok": 0}}
    base = {"b": {"ok": 1}, "c": {"ok": "excluded"}, "d": {"ok": 0}, "e": {"ok": 0}, "f": {"ok": 1}}
    doc_id, doc = compare_ids(store, cand, base)
    ok = doc["criteria"]["ok"]
    assert (ok["paired"], ok["missing"], ok["excluded"]) == (2, 3, 1)
    assert ok["missing_reasons"] == {"missing_in_candidate": 1, "not_in_baseline": 1, "not_in_candidate": 1}
    assert ok["excluded_reasons"] == {"no_relevance_labels": 1}
    assert ok["missing_cases"] == ["a", "b", "f"]
    assert ok["improved"] == ["d"] and ok["regressed"] == []
    assert doc["paired_cases"] == 4  # cases present in both runs
    sets = doc["case_sets"]
    assert (sets["only_in_candidate"], sets["only_in_baseline"]) == (["a"], ["f"])
    assert sets["counts"] == {"only_in_candidate": 1, "only_in_baseline": 1, "changed": 0}
    lines = render(doc, doc_id)
    assert lines[0] == (
        f"Comparison {doc_id} of {doc['candidate']['run_id']} against {doc['baseline']['run_id']} · 4 paired cases"
    )
    assert any(line.startswith("Warning: the runs used different case sets: 1 case(s) only") for line in lines)
    iv = stats.paired_rate_interval(1, 0, 2)
    lo, hi = stats.round_outward(iv.low * 100, iv.high * 100, 1)
    # the 3 missing pairs at worst: all regressed for the lower bound (b=1, c=3, n=5), all improved for the upper
    wlo, whi = stats.round_outward(
        stats.paired_rate_interval(1, 3, 5).low * 100, stats.paired_rate_interval(4, 0, 5).high * 100, 1
    )
    assert (
        f"ok: +50.0 points [{lo:+.1f}, {hi:+.1f}] · 2 paired · 3 missing · "
        f"with missing at worst: [{wlo:+.1f}, {whi:+.1f}] · 1 excluded"
    ) in lines
    assert "  missing: missing_in_candidate 1, not_in_baseline 1, not_in_candidate 1" in lines
    changed = {c["id"]: c.get("changed") for c in doc["cases"]}
    assert changed["d"] == {"ok": {"baseline": 0.0, "candidate": 1.0}} and changed["e"] is None
    assert {c["id"]: c["in"] for c in doc["cases"]}["a"] == "candidate"


def test_excluded_wins_over_missing(store: Store) -> None:
    _id, doc = compare_ids(store, {"a": {"ok": "missing"}}, {"a": {"ok": "excluded"}})
    assert (doc["criteria"]["ok"]["missing"], doc["criteria"]["ok"]["excluded"]) == (0, 1)


def test_no_change_13_pairs_is_the_exact_bound(store: Store) -> None:
    cand = {f"k{i}": {"ok": float(i % 3 == 0), "g": 0.5 + i / 100} for i in range(13)}
    doc_id, doc = compare_ids(store, cand, cand)
    ok, g = doc["criteria"]["ok"], doc["criteria"]["g"]
    assert ok["method"] == "exact-mcnemar"
    assert ok["high"] == pytest.approx(100 * (1 - 0.025 ** (1 / 13)), abs=1e-9)  # 24.705 points
    assert ok["low"] == pytest.approx(-ok["high"])
    # a graded criterion with no change: the paired betting mixture, wider than the exact rate interval
    gexp = stats.paired_mean_diff_interval([0.0] * 13)
    assert g["method"] == "paired-mixture" and g["high"] == pytest.approx(100 * gexp.high)
    assert g["low"] == pytest.approx(-g["high"]) and g["high"] > ok["high"]
    assert doc["criteria"]["ok"]["kind"] == "rate" and doc["criteria"]["g"]["kind"] == "mean"
    lines = render(doc, doc_id)
    assert "ok: +0.0 points [-24.8, +24.8] · 13 paired · 0 missing · 0 excluded" in lines
    lo, hi = g["printed"]["low"], g["printed"]["high"]
    assert f"g: +0.0 points [{lo}, {hi}] · 13 paired · 0 missing · 0 excluded" in lines
    assert (lo, hi) == ("-33.6", "+33.6")
    assert lines[1] == "No policy given: no decisions and no gate (add --policy compare.yaml)"
    assert doc["gate"] is None and doc["exit_code"] == 0


def test_kind_comes_from_the_evaluator_not_the_values(store: Store) -> None:
    # an MRR whose values are all 0/1 in both runs is still a mean: the paired mixture, not the rate interval
    cases = {f"k{i}": {"mrr": float(i % 2)} for i in range(13)}
    evs = [{"criterion": "mrr", "type": "mrr", "kind": "mean", "asserts": False, "settings": {}}]
    base = make_run(store, cases, evaluators=evs)
    cand = make_run(store, cases, evaluators=evs)
    _id, doc = run_comparison(store, cand, base)
    assert doc["criteria"]["mrr"]["kind"] == "mean" and doc["criteria"]["mrr"]["method"] == "paired-mixture"
    assert "changed" in doc["criteria"]["mrr"] and "improved" not in doc["criteria"]["mrr"]


def test_sample_size_line_for_a_graded_criterion(store: Store, tmp_path: Path) -> None:
    cand = {f"k{i:02d}": {"ndcg_at_6": 0.5 + i / 40} for i in range(13)}
    p = policy_file(tmp_path, "  - {name: ni, criterion: ndcg_at_6, test: non-inferiority, margin: 5.0}\n")
    _id, doc = compare_ids(store, cand, cand, p)
    needed = stats.mean_pairs_needed_without_change(0.05)
    assert doc["decisions"][0]["pairs_needed_without_change"] == needed
    assert doc["sample_size_notes"] == [
        "ndcg_at_6: 13 paired cases cannot establish non-inferiority at a 5.0-point margin, even with no change; "
        f"about {needed} would be needed"
    ]
    assert needed > stats.pairs_needed_without_change(0.05)  # derived from the wider graded interval


def test_clustered_pairs_get_a_cluster_level_interval(store: Store) -> None:
    ids = [f"c{i:02d}" for i in range(12)]
    base = {cid: {"g": 0.4 + (i % 4) / 10, "ok": float(i % 2)} for i, cid in enumerate(ids)}
    cand = {cid: {"g": min(1.0, 0.45 + (i % 4) / 10), "ok": float(i % 2)} for i, cid in enumerate(ids)}
    meta = {cid: {"cluster": f"doc{i // 4}"} for i, cid in enumerate(ids)}  # 3 clusters of 4
    b = make_run(store, base, metadata=meta)
    c = make_run(store, cand, metadata=meta)
    _id, doc = run_comparison(store, c, b)
    g, ok = doc["criteria"]["g"], doc["criteria"]["ok"]
    plain = stats.paired_mean_diff_interval([cand[k]["g"] - base[k]["g"] for k in ids])
    assert g["method"] == "paired-cluster-mixture" and "3 clusters" in g["note"]
    assert g["high"] - g["low"] > 100 * plain.width  # 3 clusters are weak evidence
    exact = stats.paired_rate_interval(0, 0, 12)
    assert ok["method"] == "paired-cluster-mixture"
    assert ok["low"] <= 100 * exact.low and ok["high"] >= 100 * exact.high


def test_interval_methods_binary_and_graded(store: Store) -> None:
    base = {f"k{i:02d}": {"ok": float(i < 20), "g": (i % 7) / 7} for i in range(40)}
    cand = {
        f"k{i:02d}": {"ok": float(i < 20 or i % 4 == 0), "g": min(1.0, (i % 7) / 7 + (i % 3) / 10)} for i in range(40)
    }
    _id, doc = compare_ids(store, cand, base)
    ok, g = doc["criteria"]["ok"], doc["criteria"]["g"]
    b = sum(1 for i in range(20, 40) if i % 4 == 0)
    expected = stats.paired_rate_interval(b, 0, 40)
    assert ok["method"] == "exact-mcnemar"
    assert (ok["low"], ok["high"]) == pytest.approx((expected.low * 100, expected.high * 100))
    diffs = [cand[k]["g"] - base[k]["g"] for k in sorted(cand)]
    gexp = stats.paired_mean_diff_interval(diffs)
    assert g["method"] == gexp.method == "paired-mixture"
    assert (g["low"], g["high"]) == pytest.approx((gexp.low * 100, gexp.high * 100))
    assert g["estimate"] == pytest.approx(100 * sum(diffs) / 40)
    lo, hi = stats.round_outward(g["low"], g["high"], 1)
    assert g["printed"] == {"estimate": f"{round(g['estimate'], 1):+.1f}", "low": f"{lo:+.1f}", "high": f"{hi:+.1f}"}
    assert float(g["printed"]["low"]) <= g["low"] and float(g["printed"]["high"]) >= g["high"]


def test_slices_are_exploratory_and_grouped_by_baseline(store: Store) -> None:
    ids = [f"s{i}" for i in range(6)]
    meta = {cid: {"topic": "billing" if i < 4 else "account"} for i, cid in enumerate(ids)}
    cand = {cid: {"ok": 1.0} for cid in ids}
    base = {cid: {"ok": float(i % 2)} for i, cid in enumerate(ids)}
    c = make_run(store, cand, metadata={cid: {"topic": "moved"} for cid in ids})  # candidate labels ignored
    b = make_run(store, base, metadata=meta)
    doc_id, doc = run_comparison(store, c, b)
    rows = {(r["value"], r["criterion"]): r for r in doc["slices"]}
    assert set(rows) == {("account", "ok"), ("billing", "ok")}
    assert rows[("billing", "ok")]["paired"] == 4 and rows[("billing", "ok")]["method"] == "exact-mcnemar"
    lines = render(doc, doc_id)
    assert "Slices (exploratory; grouped by the baseline's value; not population claims)" in lines
    assert any(x.startswith("  metadata.topic=billing  ok: +50.0 points [") for x in lines)


def test_warns_on_index_version_and_incomplete_runs(store: Store) -> None:
    cases = {"a": {"ok": 1.0}, "b": {"ok": 0.0}}
    c = make_run(store, cases, index="idx-2", status="incomplete")
    b = make_run(store, cases)
    _id, doc = run_comparison(store, c, b)
    assert "the runs used different index_version: candidate 'idx-2', baseline 'idx-1'" in doc["warnings"]
    assert f"the candidate run {c} is incomplete" in doc["warnings"]


def test_a_criterion_only_the_cases_record_is_compared_as_the_report_shows_it(store: Store) -> None:
    """A run killed before an evaluator fixture's criterion reached its header still records it in every
    case; the comparison pairs it like the HTML report lists it, instead of leaving it out silently."""
    from pytest_oloproof.report.model import case_payload

    declared = [{"criterion": "ok", "type": "contains", "kind": "rate", "asserts": True, "settings": {}}]
    cases = {"a": {"ok": 1.0, "grounded": 1.0}, "b": {"ok": 0.0, "grounded": 0.0}}
    c = make_run(store, cases, evaluators=declared, status="incomplete")
    b = make_run(store, cases, evaluators=declared)
    _id, doc = run_comparison(store, c, b)
    shown = [row["name"] for row in case_payload(store.load_run(c))["criteria"]]
    assert shown == ["ok", "grounded"]
    assert list(doc["criteria"]) == shown
    assert doc["criteria"]["grounded"]["paired"] == 2


# ------------------------------------------------------------------ errors before anything is written


def test_different_systems_unknown_runs_and_empty_runs_are_errors(store: Store, tmp_path: Path) -> None:
    c = make_run(store, {"a": {"ok": 1.0}}, system="alpha")
    b = make_run(store, {"a": {"ok": 1.0}}, system="beta")
    with pytest.raises(ComparisonError, match=r"different systems: candidate .* is 'alpha', baseline .* is 'beta'"):
        run_comparison(store, c, b)
    with pytest.raises(StoreError, match="baseline: no run matches 'run_nothing'"):
        run_comparison(store, c, "run_nothing")
    with pytest.raises(StoreError, match=r"candidate missing\.json: no such run-record file"):
        run_comparison(store, "missing.json", b)
    empty = RunRecorder(store, {"system": {"name": "alpha"}, "evaluators": []})
    empty.finish("incomplete")
    with pytest.raises(ComparisonError, match=f"baseline run {empty.run_id} \\(incomplete\\) recorded no cases"):
        load_run(store, empty.run_id, "baseline")
    assert not (store.root / "comparisons").exists()


def test_unknown_criterion_in_policy_writes_nothing(store: Store, tmp_path: Path) -> None:
    p = policy_file(tmp_path, "  - {name: x, criterion: okk, test: superiority}\n")
    from pytest_oloproof.errors import ConfigError

    with pytest.raises(
        ConfigError, match=r"compare.yaml:2: decisions\[0\].criterion: unknown criterion 'okk'.*did you"
    ):
        compare_ids(store, {"a": {"ok": 1.0}}, {"a": {"ok": 1.0}}, p)
    assert not (store.root / "comparisons").exists()


# ------------------------------------------------------------------ decisions


def test_decisions_use_unrounded_bounds(store: Store, tmp_path: Path) -> None:
    # 100 unchanged pairs: exact bound ±3.6217 points, printed [-3.7, +3.7]. A 3.63-point
    # non-inferiority margin passes (unrounded -3.6217 > -3.63) although the printed bound is beyond it.
    cand = {f"k{i:03d}": {"ok": float(i % 2)} for i in range(100)}
    p = policy_file(tmp_path, "  - {name: ni, criterion: ok, test: non-inferiority, margin: 3.63}\n")
    _id, doc = compare_ids(store, cand, cand, p)
    assert doc["criteria"]["ok"]["printed"]["low"] == "-3.7"
    assert doc["criteria"]["ok"]["low"] > -3.63
    assert doc["decisions"][0]["outcome"] == "PASS"
    assert doc["gate"] == "PASS" and doc["exit_code"] == 0
    assert doc["sample_size_notes"] == []
    p2 = policy_file(tmp_path, "  - {name: ni, criterion: ok, test: non-inferiority, margin: 3.62}\n", name="b.yaml")
    _id, doc2 = run_comparison(store, doc["candidate"]["run_id"], doc["baseline"]["run_id"], p2)
    assert (doc2["decisions"][0]["outcome"], doc2["decisions"][0]["reason"]) == (
        "INSUFFICIENT_EVIDENCE",
        "interval_overlaps_margin",
    )
    assert doc2["sample_size_notes"] == [
        "ok: 100 paired cases cannot establish non-inferiority at a 3.62-point margin; "
        f"about {stats.pairs_needed_without_change(0.0362)} would be needed with no changed verdicts"
    ]
    assert render(doc2, _id)[1] == "Gate: BLOCK (exit 3)"  # the answer first


def test_equivalence_decides_on_the_90_percent_interval(store: Store, tmp_path: Path) -> None:
    cand = {f"k{i:03d}": {"ok": float(i % 2)} for i in range(100)}
    p = policy_file(tmp_path, "  - {name: eq, criterion: ok, test: equivalence, margin: 3.5}\n")
    _id, doc = compare_ids(store, cand, cand, p)
    d = doc["decisions"][0]
    iv90 = stats.paired_rate_interval(0, 0, 100, 0.90)
    assert d["interval"]["confidence"] == pytest.approx(0.90)
    assert (d["interval"]["low"], d["interval"]["high"]) == pytest.approx((iv90.low * 100, iv90.high * 100))
    assert doc["criteria"]["ok"]["high"] > 3.5 > d["interval"]["high"]  # 95% would overlap; 90% is inside
    assert (d["outcome"], d["reason"]) == ("PASS", "interval_within_margins")


def test_missing_fail_exclude_and_min_pairs(store: Store, tmp_path: Path) -> None:
    cand, base = binary_runs(300, set(range(150)), set(range(280)))
    cand["c0000"] = {"ok": "missing"}
    c, b = make_run(store, cand), make_run(store, base)
    decision = "  - {name: better, criterion: ok, test: superiority}\n"
    fail = policy_file(tmp_path, decision, name="fail.yaml")
    _id, doc = run_comparison(store, c, b, fail)
    assert (doc["decisions"][0]["outcome"], doc["decisions"][0]["reason"]) == (
        "INSUFFICIENT_EVIDENCE",
        "missing_exceeds_limit",
    )
    assert doc["gate"] == "BLOCK" and doc["exit_code"] == 3
    exclude = policy_file(tmp_path, decision, "missing: exclude\n", name="exclude.yaml")
    _id, doc = run_comparison(store, c, b, exclude)
    d = doc["decisions"][0]
    assert (d["outcome"], d["paired"], d["missing_dropped"]) == ("PASS", 299, 1)
    assert doc["gate"] == "PASS"
    too_few = policy_file(tmp_path, decision, "missing: exclude\nmin_pairs: 300\n", name="few.yaml")
    _id, doc = run_comparison(store, c, b, too_few)
    assert (doc["decisions"][0]["outcome"], doc["decisions"][0]["reason"]) == ("INSUFFICIENT_EVIDENCE", "too_few_pairs")
    just_enough = policy_file(tmp_path, decision, "missing: exclude\nmin_pairs: 299\n", name="enough.yaml")
    assert run_comparison(store, c, b, just_enough)[1]["gate"] == "PASS"


class _FakeJudge(Evaluator):
    type = "groundedness_judge"

    def settings(self) -> dict[str, Any]:
        return {"model": "m-1", "prompt_version": "g/1", "temperature": 0}

    def evaluate(self, x: EvalInput) -> CriterionValue:
        return CriterionValue.observed(True)


def test_judge_criteria_need_a_passing_validation(store: Store, tmp_path: Path) -> None:
    judge = _FakeJudge("grounded")
    evs = [
        {"criterion": "grounded", "type": "groundedness_judge", "kind": "rate", "settings": judge.settings()},
        {"criterion": "ok", "type": "contains", "kind": "rate", "settings": {}},
    ]
    cand, base = binary_runs(300, set(range(100)), set(range(290)))
    for k in cand:
        cand[k]["grounded"] = cand[k]["ok"]
        base[k]["grounded"] = base[k]["ok"]
    c, b = make_run(store, cand, evaluators=evs), make_run(store, base, evaluators=evs)
    record = store.load_run(c)
    assert judge_gate("ok", record, store=store) is None
    assert judge_gate("grounded", record, store=store) == "judge_not_validated"
    p = policy_file(
        tmp_path,
        "  - {name: g, criterion: grounded, test: superiority}\n  - {name: o, criterion: ok, test: superiority}\n",
    )
    _id, doc = run_comparison(store, c, b, p)
    assert [(d["outcome"], d["reason"]) for d in doc["decisions"]] == [
        ("INSUFFICIENT_EVIDENCE", "judge_not_validated"),
        ("PASS", "lower_bound_above_margin"),
    ]
    assert doc["gate"] == "BLOCK"
    # a failing validation does not count; a passing one for the same identity does
    validation = {"schema": "oloproof.judge_validation/1", "judge": {"identity": judge_identity(judge)}}
    store.save_doc("judge_validation", {**validation, "passed": False})
    assert judge_gate("grounded", record, store=store) == "judge_not_validated"
    store.save_doc("judge_validation", {**validation, "passed": True})
    assert judge_identity(judge) == "sha256:" + sha256_of(judge.settings())
    assert judge_gate("grounded", record, store=store) is None
    assert run_comparison(store, c, b, p)[1]["gate"] == "PASS"


# ------------------------------------------------------------------ stored document, inspect, --json


def test_document_is_stored_and_inspect_prints_the_same(
    store: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cand = {f"k{i}": {"ok": 1.0} for i in range(13)}
    p = policy_file(tmp_path, "  - {name: ni, criterion: ok, test: non-inferiority, margin: 5.0}\nmin_pairs: 10\n")
    c, b = make_run(store, cand), make_run(store, cand)
    code = cli.main(["compare", c, b, "--policy", str(p), "--store", str(store.root)])
    out = capsys.readouterr().out.splitlines()
    assert code == 3
    doc_id = out[0].split()[1]
    assert (store.root / "comparisons" / f"{doc_id.removeprefix('sha256:')}.json").is_file()
    doc = store.load_doc("comparison", doc_id)
    assert doc["schema"] == "oloproof.comparison/1" and doc["gate"] == "BLOCK"
    assert doc["policy"]["decisions"][0]["margin"] == 5.0
    assert "sha256:" + sha256_of(doc) == doc_id
    assert out == render(doc, doc_id)
    needed = stats.pairs_needed_without_change(0.05)  # the paired rate interval with no changed verdict
    assert out[1:5] == [
        "Gate: BLOCK (exit 3)",
        "Decisions",
        "  ni  ok  non-inferiority, margin 5.0 points  INSUFFICIENT_EVIDENCE  interval_overlaps_margin",
        f"    a suite of about {needed} pairs ({needed - 13} more) would decide it, if the next pairs go like these",
    ]
    assert cli.main(["inspect", doc_id[:16], "--store", str(store.root)]) == 0
    assert capsys.readouterr().out.splitlines() == out
    assert cli.main(["compare", c, b, "--policy", str(p), "--store", str(store.root), "--json"]) == 3
    js = json.loads(capsys.readouterr().out)
    assert js["id"] == doc_id and js["decisions"][0]["outcome"] == "INSUFFICIENT_EVIDENCE"
    assert js["criteria"]["ok"]["printed"] == {"estimate": "+0.0", "low": "-24.8", "high": "+24.8"}


def test_baseline_from_a_run_record_file(store: Store, tmp_path: Path) -> None:
    cases = {f"k{i}": {"ok": float(i % 2)} for i in range(6)}
    b = make_run(store, cases)
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps(store.load_run(b) | {"schema": "oloproof.run/1"}), encoding="utf-8")
    c = make_run(store, cases)
    _id, doc = run_comparison(store, c, str(path))
    assert doc["baseline"]["run_id"] == b and doc["baseline"]["source"] == str(path.resolve())
    assert doc["criteria"]["ok"]["paired"] == 6


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "  - {name: a, criterion: ok, test: non-inferiority, margin: 5}\nmin_pair: 3\n",
            ":3: min_pair: unknown key; did you mean min_pairs?",
        ),
        ("  - {name: a, criterion: ok, test: non_inferiority, margin: 5}\n", "did you mean non-inferiority?"),
        ("  - {name: a, criterion: ok, test: equivalence}\n", ":2: decisions[0]: margin is required for equivalence"),
        ("  - {name: a, criterion: ok, test: superiority\n", ":3:1: invalid YAML: expected ','"),
    ],
)
def test_bad_policy_exit_2_nothing_written(
    store: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    cases = {"a": {"ok": 1.0}}
    c, b = make_run(store, cases), make_run(store, cases)
    p = policy_file(tmp_path, text)
    assert cli.main(["compare", c, b, "--policy", str(p), "--store", str(store.root)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"oloproof: error: {p}") and message in err
    assert not (store.root / "comparisons").exists()


# ------------------------------------------------------------------ real subprocesses


def oloproof(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_oloproof.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_large_comparison_pass_and_fail_through_the_cli(store: Store, tmp_path: Path) -> None:
    # 400 pairs; baseline passes 240 (60%); the candidate fixes 120 cases and breaks 8.
    base_pass = set(range(240))
    cand_pass = (base_pass - set(range(8))) | set(range(240, 360))
    cand, base = binary_runs(400, base_pass, cand_pass)
    c, b = make_run(store, cand), make_run(store, base)
    p = policy_file(
        tmp_path,
        "  - {name: not-worse, criterion: ok, test: non-inferiority, margin: 5.0}\n"
        "  - {name: better, criterion: ok, test: superiority, margin: 10}\n",
        "min_pairs: 300\n",
    )
    better = oloproof("compare", c, b, "--policy", str(p), "--store", str(store.root), cwd=tmp_path)
    assert better.returncode == 0, better.stderr
    lines = better.stdout.splitlines()
    assert lines[1:5] == [
        "Gate: PASS (exit 0)",
        "Decisions",
        "  not-worse  ok  non-inferiority, margin 5.0 points  PASS  lower_bound_above_minus_margin",
        "  better  ok  superiority, margin 10.0 points  PASS  lower_bound_above_margin",
    ]
    assert any(
        x.startswith("ok: +28.0 points [") and x.endswith("· 400 paired · 0 missing · 0 excluded") for x in lines
    )
    flipped = lines.index("Flipped cases")  # after the gate and the differences, regressions first
    assert flipped > lines.index("Gate: PASS (exit 0)")
    assert lines[flipped + 1].startswith("  ok pass → fail (8): c0000, c0001,")
    assert lines[flipped + 2].startswith("  ok fail → pass (120): c0240, c0241,")
    worse = oloproof("compare", b, c, "--policy", str(p), "--store", str(store.root), "--json", cwd=tmp_path)
    assert worse.returncode == 3, worse.stderr
    doc = json.loads(worse.stdout)
    assert [(d["outcome"], d["reason"]) for d in doc["decisions"]] == [
        ("FAIL", "upper_bound_below_minus_margin"),
        ("FAIL", "upper_bound_below_margin"),
    ]
    assert doc["gate"] == "BLOCK" and doc["criteria"]["ok"]["high"] < -5.0
    assert len(list((store.root / "comparisons").glob("*.json"))) == 2


def test_cli_bad_policy_exit_2_in_a_real_process(store: Store, tmp_path: Path) -> None:
    c = make_run(store, {"a": {"ok": 1.0}})
    p = policy_file(tmp_path, "  - {name: a, criterion: ok, test: superiority}\nmin_pairz: 1\n")
    s = str(store.root)
    bad_policy = oloproof("compare", c, c, "--policy", str(p), "--store", s, cwd=tmp_path)
    assert bad_policy.returncode == 2
    assert bad_policy.stderr == f"oloproof: error: {p}:3: min_pairz: unknown key; did you mean min_pairs?\n"
    assert not (store.root / "comparisons").exists()


def test_cli_unknown_runs_and_different_systems_exit_2(
    store: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    c = make_run(store, {"a": {"ok": 1.0}}, system="alpha")
    b = make_run(store, {"a": {"ok": 1.0}}, system="beta")
    s = str(store.root)
    assert cli.main(["compare", c, "run_01NOPE", "--store", s]) == 2
    assert "oloproof: error: baseline: no run matches 'run_01NOPE'" in capsys.readouterr().err
    assert cli.main(["compare", "nope.json", c, "--store", s]) == 2
    assert capsys.readouterr().err == "oloproof: error: candidate nope.json: no such run-record file\n"
    assert cli.main(["compare", c, b, "--store", s]) == 2
    assert capsys.readouterr().err == (
        f"oloproof: error: the runs are of different systems: candidate {c} is 'alpha', baseline {b} is 'beta'; "
        "compare two runs of one system\n"
    )
    assert not (store.root / "comparisons").exists()


def test_example_walkthrough_compare(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """README walk-through: raise token_budget to 120, run, compare → every rate ±24.8, every mean ±33.6, BLOCK."""
    ex = tmp_path / "support_rag"
    shutil.copytree(EXAMPLE, ex, ignore=shutil.ignore_patterns(".oloproof", "__pycache__", ".pytest_cache"))
    first = oloproof("run", "-q", "-p", "no:cacheprovider", cwd=ex)
    assert first.returncode == 1, first.stdout  # the example has four known failures
    cfg = ex / "oloproof.yaml"
    cfg.write_text(cfg.read_text(encoding="utf-8").replace("token_budget: 40", "token_budget: 120"), encoding="utf-8")
    second = oloproof("run", "-q", "-p", "no:cacheprovider", cwd=ex)
    assert second.returncode == 1, second.stdout
    new, old = Store(ex / ".oloproof").run_ids()[:2]
    monkeypatch.chdir(ex)
    assert cli.main(["compare", new, old, "--policy", "compare.yaml"]) == 3
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("Comparison sha256:") and lines[0].endswith(f"of {new} against {old} · 13 paired cases")
    # rates (recall too: every labelled case of the example has one relevant unit): the exact paired interval
    for name in ("answer_correct", "hit_rate_at_2", "recall_at_2", "citations_valid"):
        assert f"{name}: +0.0 points [-24.8, +24.8] · 13 paired · 0 missing · 0 excluded" in lines
    for name in ("ndcg_at_6",):  # graded means: the paired betting mixture
        assert f"{name}: +0.0 points [-33.6, +33.6] · 13 paired · 0 missing · 0 excluded" in lines
    assert (
        "answer_correct: 13 paired cases cannot establish non-inferiority at a 5.0-point margin; "
        "about 72 would be needed with no changed verdicts"
    ) in lines
    n5, n2 = stats.pairs_needed_without_change(0.05), stats.pairs_needed_without_change(0.02)
    assert lines[1:7] == [
        "Gate: BLOCK (exit 3)",
        "Decisions",
        "  answers-not-worse  answer_correct  non-inferiority, margin 5.0 points  INSUFFICIENT_EVIDENCE  "
        "interval_overlaps_margin",
        f"    a suite of about {n5} pairs ({n5 - 13} more) would decide it, if the next pairs go like these",
        "  citations-not-worse  citations_valid  non-inferiority, margin 2.0 points  INSUFFICIENT_EVIDENCE  "
        "interval_overlaps_margin",
        f"    a suite of about {n2} pairs ({n2 - 13} more) would decide it, if the next pairs go like these",
    ]
    assert not any("Warning" in x for x in lines)
    at = lines.index("Slices (exploratory; grouped by the baseline's value; not population claims)")
    slices = lines[at + 1 :]
    assert slices and all(" paired" in x or "not shown" in x for x in slices)
