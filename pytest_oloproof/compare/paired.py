"""What both decisions share: the paired interval of a criterion, its bounds with missing pairs at their worst,
the kind a run recorded, and whether a decision may rest on the criterion's LLM judge.

Used by comparison.py (two runs) and release.py (one run, against its own minimums), so neither imports the other
for them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pytest_oloproof.errors import ExitCode, OloproofError
from pytest_oloproof.records.identity import settings_identity
from pytest_oloproof.records.repeats import kind_over_repeats
from pytest_oloproof.stats import intervals as stats
from pytest_oloproof.store.files import Store

from .policy import JUDGE_NOT_VALIDATED, JUDGES_DIFFER

JUDGE_EVALUATOR_TYPES = ("groundedness_judge", "citation_support_judge")


class PartialRunError(OloproofError):
    """A shard's (partial) run was given to a decision: exit 2, pointing at `oloproof merge`."""

    exit_code = ExitCode.USAGE


def refuse_partial(record: Mapping[str, Any], role: str) -> None:
    """A partial run (one shard of a case set) is never gated nor compared: its interval is a shard's, not the
    set's. Raises PartialRunError naming the run, its shard and the fix."""
    if record.get("status") != "partial":
        return
    shard = record.get("shard") or {}
    which = f"shard {shard.get('index', '?')}/{shard.get('count', '?')}"
    whose = "" if role == "run" else f"{role}: "
    raise PartialRunError(
        f"{whose}run {record.get('run_id')} is {which} of a sharded run (status partial): a shard is never gated "
        "or compared alone. Combine every shard's run with `oloproof merge SOURCE…` (store or run folders), "
        "then gate or compare the merged run"
    )


def _judge_identity(record: Mapping[str, Any], criterion: str) -> tuple[bool, str | None]:
    """(whether the run judged ``criterion`` with an LLM judge, the judge's identity), from its evaluators."""
    for e in record.get("evaluators") or []:
        if e.get("criterion") == criterion:
            if e.get("type") not in JUDGE_EVALUATOR_TYPES:
                return False, None
            return True, settings_identity(e.get("settings") or {})
    return False, None


def judge_gate(
    criterion: str,
    candidate_record: Mapping[str, Any],
    *,
    store: Store | None = None,
    baseline_record: Mapping[str, Any] | None = None,
) -> str | None:
    """Why a decision on ``criterion`` cannot rest on its judge, or None.

    `judges_differ` when the baseline was judged by a different judge identity (or not by a
    judge at all): the difference would measure the judges, not the system. Otherwise
    `judge_not_validated` unless the judge holds a passing validation; with one identity on
    both sides, that validates both runs' judge. The identity is the sha256 of the recorded
    settings (as `judge_validation.judge_identity` computes it); validation records are read
    from `<store>/judge_validations/`. Returns None for criteria no run judged with an LLM judge.
    """
    from pytest_oloproof.evaluate.judge_validation import passing_validation

    judged, identity = _judge_identity(candidate_record, criterion)
    if baseline_record is not None:
        base_judged, base_identity = _judge_identity(baseline_record, criterion)
        if judged or base_judged:
            if (judged, identity) != (base_judged, base_identity):
                return JUDGES_DIFFER
    if not judged or identity is None:
        return None
    records: Iterable[Mapping[str, Any]] = store.iter_docs("judge_validation") if store is not None else ()
    return None if passing_validation(records, identity) is not None else JUDGE_NOT_VALIDATED


def recorded_kind(record: Mapping[str, Any], name: str) -> str | None:
    """The kind a run recorded for a criterion (its evaluator's, decided from that run's labels), if any."""
    for e in record.get("evaluators") or []:
        if e.get("criterion") == name and e.get("kind") in ("rate", "mean"):
            # with repeats, a rate's per-case values are means over repeats: paired as means (differences in [-1, 1])
            return kind_over_repeats(record, e)
    return None


def paired_interval(
    pairs: Sequence[tuple[str, float, float]],
    binary: bool,
    confidence: float,
    seed: int,
    clusters: Sequence[Any] | None = None,
) -> stats.Interval:
    """Interval for the mean difference candidate − baseline (as a proportion, not points).

    Pass/fail: the exact interval compatible with the exact McNemar test
    (`stats.paired_rate_interval`). Graded: the paired interval of `stats` (the betting
    mixture, or Gaffke's from 100 pairs). With clusters (`metadata.cluster`), the paired
    interval over whole clusters, and for pass/fail never narrower than the exact unclustered
    one (clustering can only add uncertainty).
    """
    n = len(pairs)
    diffs = [cand - base for _, base, cand in pairs]
    if clusters is not None and not any(c is not None for c in clusters):
        clusters = None
    if binary:
        b = sum(1 for _, base, cand in pairs if cand == 1.0 and base == 0.0)
        c = sum(1 for _, base, cand in pairs if cand == 0.0 and base == 1.0)
        exact = stats.paired_rate_interval(b, c, n, confidence)
        if clusters is None:
            return exact
        iv = stats.paired_mean_diff_interval(diffs, confidence, seed=seed, clusters=clusters)
        if not iv.method.startswith("paired-cluster-"):
            return exact
        if iv.low <= exact.low and iv.high >= exact.high:
            return iv
        note = "; ".join(x for x in (iv.note, "widened to the unclustered exact interval") if x)
        return stats.Interval(min(iv.low, exact.low), max(iv.high, exact.high), iv.method, note)
    return stats.paired_mean_diff_interval(diffs, confidence, seed=seed, clusters=clusters)


def worst_bounds(
    pairs: Sequence[tuple[str, float, float]],
    missing: int,
    binary: bool,
    confidence: float,
    seed: int,
    clusters: Sequence[Any] | None = None,
) -> tuple[float, float]:
    """The paired bounds (fractions) with `missing` more pairs, each at −1 for the lower bound and +1 for the upper."""
    cl = None if clusters is None else [*clusters, *([None] * missing)]
    low = paired_interval([*pairs, *([("", 1.0, 0.0)] * missing)], binary, confidence, seed, cl).low
    high = paired_interval([*pairs, *([("", 0.0, 1.0)] * missing)], binary, confidence, seed, cl).high
    return low, high
