"""A criterion's kind comes from its evaluator, not from its values."""

from __future__ import annotations

from typing import Any

from pytest_oloproof.evaluators.answers import Contains
from pytest_oloproof.evaluators.citations import CitationValidity
from pytest_oloproof.evaluators.retrieval import MRR, NDCG, HitRate, Precision, Recall
from pytest_oloproof.stats.aggregate import compute_metrics, compute_slices, summarize


def test_evaluator_kinds() -> None:
    assert {c.kind for c in (Contains, CitationValidity, HitRate)} == {"rate"}
    assert {c.kind for c in (Recall, Precision, MRR, NDCG)} == {"mean"}


def test_zero_one_values_of_a_mean_stay_a_mean() -> None:
    m = summarize([1.0, 0.0, 1.0, 1.0], "mean", confidence=0.95, seed=0)
    assert m["kind"] == "mean" and m["method"] == "mixture" and "passed" not in m
    r = summarize([1.0, 0.0, 1.0, 1.0], "rate", confidence=0.95, seed=0)
    assert r["kind"] == "rate" and r["method"] == "clopper-pearson" and r["passed"] == 3


def test_a_rate_with_graded_values_is_shown_as_a_mean_and_says_why() -> None:
    m = summarize([0.5, 1.0, 0.25], "rate", confidence=0.95, seed=0)
    assert m["kind"] == "mean" and m["method"] == "mixture"
    assert "declared a rate" in m["note"]


def _case(cid: str, value: float, cluster: Any = None, topic: str = "t") -> dict[str, Any]:
    meta: dict[str, Any] = {"topic": topic}
    if cluster is not None:
        meta["cluster"] = cluster
    return {"id": cid, "criteria": {"mrr_at_5": {"status": "observed", "value": value}}, "metadata": meta}


def test_metrics_and_slices_follow_the_declared_kind() -> None:
    cases = [_case(f"c{i}", float(i % 2)) for i in range(10)]
    m = compute_metrics(cases, [("mrr_at_5", "mean")], confidence=0.95, seed=0)["mrr_at_5"]
    assert m["kind"] == "mean" and m["method"] == "mixture"
    rows = compute_slices(
        cases,
        ["metadata.topic"],
        [("mrr_at_5", "mean")],
        min_support=2,
        confidence=0.95,
        seed=0,
        kinds={"mrr_at_5": "mean"},
    )
    assert rows[0]["kind"] == "mean" and "passed" not in rows[0]


def test_clustered_metrics_bet_on_clusters() -> None:
    cases = [_case(f"c{i}", 0.5 + (i % 3) / 10, cluster=i // 4) for i in range(12)]
    m = compute_metrics(cases, [("mrr_at_5", "mean")], confidence=0.95, seed=0)["mrr_at_5"]
    assert m["clustered"] is True and m["method"] == "cluster-mixture" and m["note"] == "3 clusters"
