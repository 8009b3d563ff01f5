"""Tests for pytest_oloproof.stats.metrics: hand-computed cases and agreement with trec_eval."""

from __future__ import annotations

import ast
import math
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path

import numpy as np
import pytest
import pytrec_eval

from pytest_oloproof.stats import metrics
from pytest_oloproof.stats.metrics import (
    NoRelevantUnits,
    best_relevant_position,
    first_occurrence_gains,
    hit_rate,
    mrr,
    ndcg,
    num_relevant,
    precision,
    recall,
)

L2 = math.log2
CUTOFF_METRICS: list[Callable[..., float]] = [hit_rate, recall, precision, mrr, ndcg]

# Shared hand-computed fixture (document units, graded).
# Relevant: d1=3, d2=2, d4=1, d5=2 -> R = 4; d3 is judged not relevant (grade 0); x is unlabelled.
QRELS = {"d1": 3, "d2": 2, "d3": 0, "d4": 1, "d5": 2}
# Positions:  1     2     3 (dup)  4    5     6
RANKING = ["d3", "d1", "d1", "x", "d4", "d2"]


# --------------------------------------------------------------------------- hand-computed


def test_first_occurrence_gains_and_num_relevant() -> None:
    # d3 -> grade 0; d1 -> 3; second d1 is a later duplicate -> 0; x unlabelled -> 0; d4 -> 1; d2 -> 2
    assert first_occurrence_gains(RANKING, QRELS) == [0, 3, 0, 0, 1, 2]
    assert num_relevant(QRELS) == 4
    assert num_relevant({"a": 0, "b": 0}) == 0
    assert first_occurrence_gains([], QRELS) == []


def test_hit_rate_hand() -> None:
    assert hit_rate(RANKING, QRELS, 1) == 0.0  # position 1 is d3, grade 0
    assert hit_rate(RANKING, QRELS, 2) == 1.0  # d1 at position 2
    assert hit_rate(["x", "y"], QRELS, 10) == 0.0  # relevant never retrieved


def test_recall_hand() -> None:
    assert recall(RANKING, QRELS, 1) == 0.0
    assert recall(RANKING, QRELS, 3) == 1 / 4  # only d1; its duplicate is not counted twice
    assert recall(RANKING, QRELS, 6) == 3 / 4  # d1, d4, d2 of R = 4 (d5 never retrieved)
    assert recall(RANKING, QRELS, 100) == 3 / 4


def test_recall_is_not_capped_at_min_r_k() -> None:
    qrels = {f"r{i}": 1 for i in range(5)}
    # 2 relevant in the top 2 of R = 5: 2 / 5 = 0.4 (a capped recall would say 2 / min(5, 2) = 1.0)
    assert recall(["r0", "r1", "r2"], qrels, 2) == pytest.approx(0.4, abs=0)


def test_precision_hand() -> None:
    assert precision(RANKING, QRELS, 3) == 1 / 3  # d1 counted once: 1 / 3 (not 2 / 3)
    assert precision(RANKING, QRELS, 6) == 3 / 6  # d1, d4, d2
    assert precision(RANKING, QRELS, 10) == 3 / 10  # divided by k = 10, not by the 6 retrieved


def test_precision_divides_by_k_not_list_length() -> None:
    # one relevant retrieved, k = 5: 1 / 5 = 0.2 (dividing by the list length would say 1.0)
    assert precision(["a"], {"a": 1}, 5) == 0.2


def test_mrr_hand() -> None:
    assert mrr(RANKING, QRELS, 1) == 0.0  # nothing relevant within 1
    assert mrr(RANKING, QRELS, 2) == 1 / 2  # first relevant (d1) at position 2
    assert mrr(RANKING, QRELS, 10) == 1 / 2
    assert mrr(["x", "y", "z", "d4"], QRELS, 3) == 0.0  # relevant at 4, outside k = 3
    assert mrr(["x", "y", "z", "d4"], QRELS, 4) == 1 / 4


def test_ndcg_linear_hand() -> None:
    # k = 3: gains [0, 3, 0] -> DCG = 3 / log2(3) = 1.892789
    # ideal grades [3, 2, 2, 1] cut at 3 -> IDCG = 3/1 + 2/log2(3) + 2/log2(4) = 3 + 1.261860 + 1 = 5.261860
    # nDCG@3 = 1.892789 / 5.261860 = 0.359718
    expected3 = (3 / L2(3)) / (3 + 2 / L2(3) + 2 / L2(4))
    assert ndcg(RANKING, QRELS, 3) == pytest.approx(expected3, abs=1e-12)
    assert expected3 == pytest.approx(0.359718, abs=1e-6)
    # k = 6: gains [0, 3, 0, 0, 1, 2]
    # DCG = 3/log2(3) + 1/log2(6) + 2/log2(7) = 1.892789 + 0.386853 + 0.712414 = 2.992056
    # ideal [3, 2, 2, 1] -> IDCG = 3 + 2/log2(3) + 2/log2(4) + 1/log2(5) = 5.261860 + 0.430677 = 5.692537
    # nDCG@6 = 2.992056 / 5.692537 = 0.525610
    expected6 = (3 / L2(3) + 1 / L2(6) + 2 / L2(7)) / (3 + 2 / L2(3) + 2 / L2(4) + 1 / L2(5))
    assert ndcg(RANKING, QRELS, 6) == pytest.approx(expected6, abs=1e-12)
    assert expected6 == pytest.approx(0.525610, abs=1e-6)


def test_ndcg_exponential_hand() -> None:
    # gains 2**g - 1: d1 -> 7, d2 -> 3, d5 -> 3, d4 -> 1
    # k = 3: DCG = 7 / log2(3) = 4.416508; IDCG = 7 + 3/log2(3) + 3/log2(4) = 7 + 1.892789 + 1.5 = 10.392789
    # nDCG@3 = 4.416508 / 10.392789 = 0.424959
    expected = (7 / L2(3)) / (7 + 3 / L2(3) + 3 / L2(4))
    assert ndcg(RANKING, QRELS, 3, gain="exponential") == pytest.approx(expected, abs=1e-12)
    assert expected == pytest.approx(0.424959, abs=1e-6)
    # binary labels: exponential == linear (2**1 - 1 = 1)
    qrels = {"a": 1, "b": 1, "c": 0}
    ranking = ["c", "b", "z", "a"]
    assert ndcg(ranking, qrels, 4, gain="exponential") == ndcg(ranking, qrels, 4)


def test_ndcg_ideal_uses_all_labelled_units() -> None:
    # only d4 (grade 1) retrieved, d1 (grade 3) never: DCG = 1; IDCG = 3/1 + 1/log2(3) = 3.630930
    # nDCG@5 = 0.275411 (an ideal built from the retrieved units only would give 1.0)
    value = ndcg(["d4"], {"d1": 3, "d4": 1}, 5)
    assert value == pytest.approx(1 / (3 + 1 / L2(3)), abs=1e-12)
    assert value < 0.3


def test_ndcg_perfect_ranking_is_one() -> None:
    assert ndcg(["d1", "d2", "d5", "d4"], QRELS, 4) == pytest.approx(1.0, abs=1e-12)
    assert ndcg(["d1", "d5", "d2", "d4", "d3"], QRELS, 10) == pytest.approx(1.0, abs=1e-12)


def test_best_relevant_position_hand() -> None:
    assert best_relevant_position(RANKING, QRELS) == 2
    assert best_relevant_position(["x"] * 20 + ["d4"], QRELS) == 21  # no cutoff: whole ranking
    assert best_relevant_position(["x", "d3"], QRELS) is None  # grade 0 is not relevant
    assert best_relevant_position([], QRELS) is None


def test_chunk_units() -> None:
    qrels = {("d1", "c2"): 2, ("d2", "c1"): 1}
    ranking = [("d1", "c1"), ("d1", "c2"), ("d1", "c2"), ("d2", "c1")]
    # another chunk of d1 at 1 is not relevant; (d1, c2) counts at 2 only; its repeat at 3 gets 0
    assert first_occurrence_gains(ranking, qrels) == [0, 2, 0, 1]
    assert hit_rate(ranking, qrels, 1) == 0.0
    assert mrr(ranking, qrels, 5) == 1 / 2
    assert recall(ranking, qrels, 3) == 1 / 2
    assert precision(ranking, qrels, 4) == 2 / 4
    # DCG@4 = 2/log2(3) + 1/log2(5); IDCG = 2/1 + 1/log2(3)
    assert ndcg(ranking, qrels, 4) == pytest.approx((2 / L2(3) + 1 / L2(5)) / (2 + 1 / L2(3)), abs=1e-12)
    assert best_relevant_position(ranking, qrels) == 2


def test_empty_ranking_is_observed_zero() -> None:
    for k in (1, 5):
        for metric in CUTOFF_METRICS:
            assert metric([], QRELS, k) == 0.0
    assert ndcg([], QRELS, 3, gain="exponential") == 0.0
    assert best_relevant_position([], QRELS) is None


@pytest.mark.parametrize("qrels", [{}, {"a": 0}, {"a": 0, "b": 0}])
def test_no_relevant_units_raises(qrels: dict[str, int]) -> None:
    for metric in CUTOFF_METRICS:
        with pytest.raises(NoRelevantUnits):
            metric(["a", "b"], qrels, 3)
        with pytest.raises(NoRelevantUnits):  # even with an empty ranking
            metric([], qrels, 3)
    with pytest.raises(NoRelevantUnits):
        ndcg(["a"], qrels, 3, gain="exponential")
    with pytest.raises(NoRelevantUnits):
        best_relevant_position(["a"], qrels)
    assert issubclass(NoRelevantUnits, ValueError)


@pytest.mark.parametrize("k", [0, -1, 1.5, True, None, "3"])
def test_invalid_k(k: object) -> None:
    for metric in CUTOFF_METRICS:
        with pytest.raises(ValueError, match="k must be"):
            metric(RANKING, QRELS, k)


def test_invalid_gain() -> None:
    with pytest.raises(ValueError, match="gain"):
        ndcg(RANKING, QRELS, 3, gain="log")  # type: ignore[arg-type]


def test_module_does_not_import_pytest() -> None:
    tree = ast.parse(Path(metrics.__file__).read_text())
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert not imported & {"pytest", "_pytest", "numpy"}, imported


TOL = 1e-9
N_QUERIES = 800
CUTOFFS = (1, 2, 3, 5, 6, 10)


def _generate(seed: int) -> list[dict]:
    """Seeded random queries covering the cases that must agree with trec_eval."""
    rng = np.random.default_rng(seed)
    queries = []
    for qi in range(N_QUERIES):
        unit_kind = "chunk" if rng.random() < 0.5 else "document"
        graded = rng.random() < 0.6
        n_docs = int(rng.integers(2, 15))
        chunks = [(f"d{d}", f"c{c}") for d in range(n_docs) for c in range(int(rng.integers(1, 4)))]
        units: list[Hashable] = chunks if unit_kind == "chunk" else [f"d{d}" for d in range(n_docs)]

        label_mode = rng.choice(["labelled", "unlabelled", "zeros_only"], p=[0.85, 0.07, 0.08])
        qrels: dict[Hashable, int] = {}
        if label_mode != "unlabelled":
            n_labels = int(rng.integers(1, len(units) + 1))
            for idx in rng.choice(len(units), size=n_labels, replace=False):
                if label_mode == "zeros_only":
                    grade = 0
                elif graded:
                    grade = int(rng.integers(0, 4))
                else:
                    grade = int(rng.integers(0, 2))
                qrels[units[int(idx)]] = grade

        depth = int(rng.integers(1, 13))
        length = int(rng.integers(0, depth + 1))  # includes empty and fewer than k
        pool = list(chunks)
        if rng.random() < 0.15:  # relevant never retrieved: retrieve only non-relevant material
            pool = [c for c in chunks if qrels.get(c if unit_kind == "chunk" else c[0], 0) <= 0]
        pool += [(f"n{j}", "c0") for j in range(3)]  # unlabelled noise documents
        repeat = rng.random() < 0.1  # the same chunk retrieved twice
        picks = rng.choice(
            len(pool),
            size=min(length, len(pool)) if not repeat else length,
            replace=repeat,
        )
        retrieved = [pool[int(i)] for i in picks]
        ranking = retrieved if unit_kind == "chunk" else [doc for doc, _ in retrieved]
        # retriever scores with ties: Oloproof ignores them, trec_eval would re-sort on them
        scores = sorted((round(float(s), 1) for s in rng.random(len(ranking))), reverse=True)
        queries.append(
            {
                "qid": f"q{qi}",
                "unit": unit_kind,
                "graded": graded,
                "label_mode": str(label_mode),
                "qrels": qrels,
                "ranking": ranking,
                "scores": scores,
            }
        )
    return queries


def _docno(unit: Hashable) -> str:
    return f"{unit[0]}#{unit[1]}" if isinstance(unit, tuple) else str(unit)


def _trec_qrels(queries: list[dict], transform: Callable[[int], int] = lambda g: g) -> dict:
    return {q["qid"]: {_docno(u): transform(g) for u, g in q["qrels"].items()} for q in queries if q["qrels"]}


def _trec_run(queries: list[dict], cut: int | None = None) -> dict:
    """Run with position-derived scores; later duplicates become unique never-relevant dummies."""
    run = {}
    for q in queries:
        ranking: Sequence[Hashable] = q["ranking"][:cut] if cut else q["ranking"]
        depth = len(ranking)
        seen: set[Hashable] = set()
        docs: dict[str, float] = {}
        for pos, unit in enumerate(ranking, start=1):
            docno = _docno(unit) if unit not in seen else f"__dup_{pos}"
            seen.add(unit)
            docs[docno] = float(depth - pos + 1)
        run[q["qid"]] = docs
    return run


def _ours(queries: list[dict], metric: Callable[..., float], k: int, **kwargs: str) -> dict[str, float]:
    """Our metric per query; queries without a grade > 0 must raise NoRelevantUnits."""
    out = {}
    for q in queries:
        if num_relevant(q["qrels"]) == 0:
            with pytest.raises(NoRelevantUnits):
                metric(q["ranking"], q["qrels"], k, **kwargs)
            continue
        out[q["qid"]] = metric(q["ranking"], q["qrels"], k, **kwargs)
    return out


def _compare(
    name: str,
    ours: dict[str, float],
    trec: dict[str, dict[str, float]],
    measure: str,
    mismatches: list[str],
) -> int:
    for qid, value in ours.items():
        expected = trec[qid][measure]
        if abs(value - expected) > TOL:
            mismatches.append(f"{name} {qid}: ours={value!r} trec {measure}={expected!r}")
    return len(ours)


@pytest.fixture(scope="module")
def generated() -> list[dict]:
    return _generate(20260916)


def test_generated_data_covers_the_traps(generated: list[dict]) -> None:
    kinds = Counter()
    for q in generated:
        ranking, qrels = q["ranking"], q["qrels"]
        kinds[q["unit"]] += 1
        kinds["graded" if q["graded"] else "binary"] += 1
        kinds[q["label_mode"]] += 1
        kinds["grade0_label"] += any(g == 0 for g in qrels.values())
        kinds["empty"] += not ranking
        kinds["duplicates"] += len(set(ranking)) < len(ranking)
        kinds["tied_scores"] += len(set(q["scores"])) < len(q["scores"])
        if num_relevant(qrels):
            found = best_relevant_position(ranking, qrels)
            kinds["no_relevant_retrieved"] += found is None and bool(ranking)
            kinds["some_relevant_missed"] += any(g > 0 and u not in set(ranking) for u, g in qrels.items())
            kinds["shorter_than_10"] += 0 < len(ranking) < 10
            kinds["more_rel_than_k2"] += num_relevant(qrels) > 2
    for key in (
        "chunk",
        "document",
        "graded",
        "binary",
        "labelled",
        "unlabelled",
        "zeros_only",
        "grade0_label",
        "empty",
        "duplicates",
        "tied_scores",
        "no_relevant_retrieved",
        "some_relevant_missed",
        "shorter_than_10",
        "more_rel_than_k2",
    ):
        assert kinds[key] >= 20, (key, kinds)


def test_agreement_with_trec_eval(generated: list[dict]) -> None:
    cuts = ",".join(map(str, CUTOFFS))
    qrels = _trec_qrels(generated)
    evaluator = pytrec_eval.RelevanceEvaluator(
        qrels, {f"P.{cuts}", f"recall.{cuts}", f"success.{cuts}", f"ndcg_cut.{cuts}"}
    )
    trec = evaluator.evaluate(_trec_run(generated))
    # trec_eval skips queries absent from the qrels; Oloproof raises NoRelevantUnits for them
    assert not {q["qid"] for q in generated if not q["qrels"]} & trec.keys()

    mismatches: list[str] = []
    compared = 0
    for k in CUTOFFS:
        compared += _compare(
            f"hit_rate@{k}",
            _ours(generated, hit_rate, k),
            trec,
            f"success_{k}",
            mismatches,
        )
        compared += _compare(f"recall@{k}", _ours(generated, recall, k), trec, f"recall_{k}", mismatches)
        compared += _compare(f"precision@{k}", _ours(generated, precision, k), trec, f"P_{k}", mismatches)
        compared += _compare(f"ndcg@{k}", _ours(generated, ndcg, k), trec, f"ndcg_cut_{k}", mismatches)
        # mrr@k = trec recip_rank on the run truncated to k
        rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(_trec_run(generated, cut=k))
        compared += _compare(f"mrr@{k}", _ours(generated, mrr, k), rr, "recip_rank", mismatches)
    assert not mismatches, f"{len(mismatches)} mismatches, e.g.\n" + "\n".join(mismatches[:10])
    assert compared >= 5 * len(CUTOFFS) * 500


def test_exponential_ndcg_agrees_with_relabelled_trec_eval(
    generated: list[dict],
) -> None:
    cuts = ",".join(map(str, CUTOFFS))
    qrels = _trec_qrels(generated, transform=lambda g: 2**g - 1 if g > 0 else g)
    trec = pytrec_eval.RelevanceEvaluator(qrels, {f"ndcg_cut.{cuts}"}).evaluate(_trec_run(generated))
    mismatches: list[str] = []
    compared = 0
    for k in CUTOFFS:
        compared += _compare(
            f"ndcg_exp@{k}",
            _ours(generated, ndcg, k, gain="exponential"),
            trec,
            f"ndcg_cut_{k}",
            mismatches,
        )
    assert not mismatches, f"{len(mismatches)} mismatches, e.g.\n" + "\n".join(mismatches[:10])
    assert compared >= len(CUTOFFS) * 500


def test_trec_eval_needs_positional_scores_for_ties() -> None:
    # Retriever returned a then b with tied scores. trec_eval re-sorts and breaks the tie by
    # docno descending, putting b first; positional scores reproduce the retrieval order.
    qrels = {"q": {"a": 1}}
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"})
    assert evaluator.evaluate({"q": {"a": 0.5, "b": 0.5}})["q"]["recip_rank"] == 0.5
    assert evaluator.evaluate({"q": {"a": 2.0, "b": 1.0}})["q"]["recip_rank"] == 1.0
    assert mrr(["a", "b"], {"a": 1}, 10) == 1.0
