"""Deciding one run and how many cases would decide it.

A policy's single-run decisions (`minimum`, `maximum`, `max-failures`) read one run's
criterion: its interval (or, with `missing: bound`, the interval with every missing case
at its worst value) against a threshold, or its count of failed cases against a limit.
The result is a content-addressed `oloproof.decision/1` document, which report/ renders
as text, Markdown and in the HTML and JSON reports.

For a decision the interval leaves undecided, `plan_line` says how many cases would decide
it, if the next cases go like these: the observed values (and, under `missing: bound`, the
missing cases) are scaled up to N cases keeping their proportions — each distinct value's
count becomes its share of N, rounded by largest remainder, ties in value order — and the
interval the decision reads is recomputed with the same method and confidence. The smallest
N that decides is found by doubling, then bisection (intervals narrow as N grows). Nothing
random is involved, so the answer is the same every time.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from pytest_oloproof.errors import ExitCode, OloproofError
from pytest_oloproof.records.access import criteria_of
from pytest_oloproof.records.shapes import DecisionDoc, RunRecord
from pytest_oloproof.stats.aggregate import compute_metrics, missing_at_worst
from pytest_oloproof.store.files import Store

from .paired import judge_gate, paired_interval, recorded_kind, refuse_partial, worst_bounds
from .policy import (
    CORRECTED_RATE_MISSING,
    FAIL,
    INSUFFICIENT,
    INTERVAL_OVERLAPS_MARGIN,
    INTERVAL_OVERLAPS_THRESHOLD,
    MISSING_COULD_EXCEED_LIMIT,
    MISSING_EXCEEDS_LIMIT,
    NO_CORRECTING_LABELS,
    NO_OBSERVATIONS,
    PASS,
    Decision,
    LoadedPolicy,
)
from .words import MAX_FAILURES, fmt_fraction, fmt_margin

SCHEMA = "oloproof.decision/1"
#: the largest suite `plan_line` considers; beyond it, it says "more than"
PLAN_CAP = 100_000


class DecisionError(OloproofError):
    """A run cannot be decided by the policy (a comparison decision without a baseline): exit 2."""

    exit_code = ExitCode.USAGE


# ------------------------------------------------------------------ one run's values


def run_kind(record: Mapping[str, Any], criterion: str, values: Sequence[float]) -> str:
    """The kind the run recorded for the criterion (from its evaluator and labels); 0/1 values as a fallback."""
    recorded = recorded_kind(record, criterion)
    if recorded is not None:
        return recorded
    return "rate" if all(v in (0.0, 1.0) for v in values) else "mean"


def observed_values(cases: Sequence[Mapping[str, Any]], criterion: str) -> list[float]:
    """The criterion's observed values, in the order of `cases`."""
    values: list[float] = []
    for c in cases:
        cv = (c.get("criteria") or {}).get(criterion)
        if cv is not None and cv["status"] == "observed":
            values.append(float(cv["value"]))
    return values


# ------------------------------------------------------------------ deciding


def decide_rows(
    record: Mapping[str, Any],
    policy: LoadedPolicy,
    confidence: float,
    seed: int,
    store: Store | None,
) -> list[dict[str, Any]]:
    """One row per single-run decision of the policy, read from the run's cases."""
    p = policy.policy
    rows = []
    cases = sorted(record.get("cases") or [], key=lambda c: c["id"])
    for d in p.run_decisions:
        values = observed_values(cases, d.criterion)
        kind = run_kind(record, d.criterion, values)
        m = compute_metrics(cases, [(d.criterion, kind)], confidence=confidence, seed=seed)[d.criterion]
        kind = m["kind"]
        missing = int(m["missing"])
        row: dict[str, Any] = {
            "name": d.name,
            "criterion": d.criterion,
            "test": d.test,
            "scope": "run",
            "kind": kind,
            "observed": m["observed"],
            "missing": missing,
            "estimate": m["value"],
        }
        if d.corrected:
            row.update(_decide_corrected(d, record, store, m, p.missing))
            rows.append(row)
            continue
        judge = judge_gate(d.criterion, record, store=store)
        if d.test == MAX_FAILURES:
            limit = int(d.max_failures or 0)
            failures = sum(1 for v in values if v < 1.0)
            row.update({"max_failures": limit, "failures": failures})
            if judge is not None:
                outcome, reason = INSUFFICIENT, judge
            elif failures > limit:
                outcome, reason = FAIL, "failures_exceed_limit"
            elif missing and p.missing == "fail":
                outcome, reason = INSUFFICIENT, MISSING_EXCEEDS_LIMIT
            elif missing and p.missing == "bound" and failures + missing > limit:
                outcome, reason = INSUFFICIENT, MISSING_COULD_EXCEED_LIMIT
            else:
                outcome, reason = PASS, "failures_within_limit"
        else:
            threshold = float(d.threshold or 0.0)
            worst = m.get("missing_at_worst") if p.missing == "bound" else None
            low, high = (worst["low"], worst["high"]) if worst else (m["low"], m["high"])
            row["threshold"] = threshold
            row["interval"] = {
                "low": low,
                "high": high,
                "confidence": confidence,
                "method": m["method"],
                "missing_at_worst": bool(worst),
            }
            if judge is not None:
                outcome, reason = INSUFFICIENT, judge
            elif not m["observed"]:
                outcome, reason = INSUFFICIENT, NO_OBSERVATIONS
            elif missing and p.missing == "fail":
                outcome, reason = INSUFFICIENT, MISSING_EXCEEDS_LIMIT
            else:
                outcome, reason = d.run_rule.decide(low, high, threshold)
        if p.missing == "exclude" and missing:
            row["missing_dropped"] = missing
        row.update({"outcome": outcome, "reason": reason})
        if outcome == INSUFFICIENT:
            row["plan"] = plan_run(d, values, missing, kind, p.missing, confidence, seed, reason)
            if m.get("clustered") and reason == INTERVAL_OVERLAPS_THRESHOLD:
                row["plan"] += " (counting cases as independent: with clusters of several cases, more are needed)"
        rows.append(row)
    return rows


def _decide_corrected(
    d: Decision, record: Mapping[str, Any], store: Store | None, m: Mapping[str, Any], missing_policy: str
) -> dict[str, Any]:
    """A `minimum`/`maximum` decision on the judge-corrected rate (`corrected: true`).

    It does not ask for a judge validation: the correction's guarantee rests on the human labels of a
    random sample, whatever the judge's quality. Without imported labels it is INSUFFICIENT_EVIDENCE."""
    from pytest_oloproof.store.labels import corrected_rates

    threshold = float(d.threshold or 0.0)
    found = corrected_rates(store, record).get(d.criterion) if store is not None else None
    out: dict[str, Any] = {"threshold": threshold, "corrected": True}
    if found is None or found.get("missing"):
        reason = NO_CORRECTING_LABELS if found is None else CORRECTED_RATE_MISSING
        fix = (
            f"label a random sample of its judged cases: oloproof labels export {record.get('run_id')} "
            f"--criterion {d.criterion} --sample N, then oloproof labels import FILE"
        )
        out.update({"interval": {"low": 0.0, "high": 1.0, "method": "none", "missing_at_worst": False}})
        out.update({"outcome": INSUFFICIENT, "reason": reason, "plan": f"{found['missing']}; {fix}" if found else fix})
        return out
    interval = {k: found[k] for k in ("low", "high", "confidence", "method")}
    out["interval"] = {**interval, "missing_at_worst": False}
    out["estimate"] = found["value"]
    out["labels"] = {k: found[k] for k in ("labels_id", "labelled", "judged", "judge_rate", "rectifier")}
    missing = int(m["missing"])
    if missing and missing_policy != "exclude":
        outcome, reason = INSUFFICIENT, MISSING_EXCEEDS_LIMIT
        out["plan"] = f"{missing} case(s) without a judge verdict: the corrected rate covers judged cases only"
    else:
        outcome, reason = d.run_rule.decide(found["low"], found["high"], threshold)
        if outcome == INSUFFICIENT:
            out["plan"] = (
                f"more labels narrow it: {found['labelled']} labelled of {found['judged']} judged; "
                f"export a larger sample (oloproof labels export {record.get('run_id')} --criterion {d.criterion} "
                "--sample N) and import it (the largest sample is used)"
            )
    out.update({"outcome": outcome, "reason": reason})
    return out


def gate_of(policy: LoadedPolicy, decisions: Sequence[Mapping[str, Any]]) -> str:
    """BLOCK when any decision's outcome is one the policy blocks on (`block_on`), else PASS."""
    return "BLOCK" if any(policy.policy.blocks(d["outcome"]) for d in decisions) else "PASS"


def decide_run(
    record: RunRecord,
    policy: LoadedPolicy,
    *,
    store: Store | None = None,
    source: str | None = None,
) -> DecisionDoc:
    """The `oloproof.decision/1` document of one run under a policy of single-run decisions."""
    policy.check_single_run("compare two runs with `oloproof compare CANDIDATE BASELINE --policy FILE`")
    refuse_partial(record, "run")
    policy.check_criteria(
        criteria_of(record), why="the run must record it", listing="criteria of the run", single_run=True
    )
    confidence = float(policy.policy.confidence or record.get("confidence", 0.95))
    seed = int(record.get("seed", 0) or 0)
    decisions = decide_rows(record, policy, confidence, seed, store)
    gate = gate_of(policy, decisions)
    return {
        "schema": SCHEMA,
        "run": {
            "run_id": record.get("run_id"),
            "status": record.get("status"),
            "system": dict(record.get("system") or {}),
            "cases": len(record.get("cases") or []),
            "source": source or "store",
        },
        "confidence": confidence,
        "seed": seed,
        "policy": policy.snapshot(),
        "decisions": decisions,
        "gate": gate,
        "exit_code": ExitCode.BLOCK if gate == "BLOCK" else ExitCode.OK,
    }


# ------------------------------------------------------------------ how many cases would decide it


def scaled(counts: Mapping[Hashable, int], total: int) -> Counter[Hashable]:
    """`counts` scaled to `total` items keeping their proportions (largest remainder; ties in key order)."""
    n = sum(counts.values())
    keys = sorted(counts, key=repr)
    exact = {k: counts[k] * total / n for k in keys}
    out = Counter({k: math.floor(exact[k]) for k in keys})
    short = total - sum(out.values())
    for k in sorted(keys, key=lambda k: (-(exact[k] - math.floor(exact[k])), repr(k)))[:short]:
        out[k] += 1
    return out


def smallest_deciding(now: int, decides: Callable[[int], bool], cap: int = PLAN_CAP) -> int | None:
    """The smallest N > `now` for which `decides(N)`, by doubling then bisection; None beyond `cap`.

    Exact below 400 cases; above, the bisection stops within 0.5% (it is "about" N, and a suite of
    100,000 graded values costs seconds per interval).
    """
    lo, hi = now, max(now * 2, now + 1)
    while not decides(hi):
        if hi >= cap:
            return None
        lo, hi = hi, min(hi * 2, cap)
    while hi - lo > max(1, lo // 200):
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if decides(mid) else (mid, hi)
    return hi


def suite_line(needed: int | None, now: int, unit: str = "cases", verb: str = "decide it") -> str:
    if needed is None:
        return f"more than {PLAN_CAP:,} {unit} would be needed to {verb}, if the next {unit} go like these"
    return f"a suite of about {needed:,} {unit} ({needed - now:,} more) would {verb}, if the next {unit} go like these"


def plan_run(
    d: Decision,
    values: Sequence[float],
    missing: int,
    kind: str,
    missing_policy: str,
    confidence: float,
    seed: int,
    reason: str,
) -> str:
    """One line: how many cases would decide an undecided single-run decision (see the module's docstring)."""
    if reason == MISSING_EXCEEDS_LIMIT:
        return (
            f"{missing} missing case{'' if missing == 1 else 's'} decide{'s' if missing == 1 else ''} this "
            "(missing: fail), not the sample size: fix what made them missing and re-run, or decide with missing: bound"
        )
    if reason == MISSING_COULD_EXCEED_LIMIT:
        return f"{missing} missing case{'' if missing == 1 else 's'} could exceed the limit: more cases cannot help"
    if reason != INTERVAL_OVERLAPS_THRESHOLD:
        return f"not a question of sample size ({reason})"
    threshold = float(d.threshold or 0.0)
    rule = d.run_rule
    counts: Counter[Hashable] = Counter(values)
    bound = missing_policy == "bound" and missing > 0
    if bound:
        counts["missing"] = missing
    now = sum(counts.values())
    # the interval of a suite far larger than this one closes in on these limits
    total = sum(values) if values else 0.0
    lim_low = total / now
    lim_high = (total + (missing if bound else 0)) / now
    target, _ = rule.decide(lim_low, lim_high, threshold)
    if target == INSUFFICIENT:
        if bound:  # the missing cases alone can put it on either side
            return (
                f"no sample size would decide it: with its missing cases at worst and at best the {kind} lies "
                f"between {fmt_fraction(lim_low, kind)} and {fmt_fraction(lim_high, kind)}, across the threshold "
                f"({fmt_fraction(threshold, kind)})"
            )
        return (
            f"no sample size would decide it: the observed {kind} ({fmt_fraction(lim_low, kind)}) "
            f"is itself at the threshold ({fmt_fraction(threshold, kind)})"
        )

    def outcome(n: int) -> str:
        c = scaled(counts, n)
        vals = [float(v) for v, k in c.items() if v != "missing" for _ in range(k)]  # type: ignore[arg-type]
        if bound:
            worst = missing_at_worst(vals, c["missing"], kind, confidence=confidence, seed=seed)
            low, high = worst["low"], worst["high"]
        else:
            from pytest_oloproof.stats import intervals as stats

            iv = (stats.rate_interval if kind == "rate" else stats.mean_interval)(vals, confidence, seed=seed)
            low, high = iv.low, iv.high
        return rule.decide(low, high, threshold)[0]

    needed = smallest_deciding(now, lambda n: outcome(n) == target)
    if target == PASS:
        return suite_line(needed, now)
    side = "below" if rule.test == "minimum" else "above"
    value = lim_high if rule.test == "minimum" else lim_low  # the most favourable: missing cases at their best
    what = f"observed {kind}" + (" with every missing case at its best" if bound else "")
    head = (
        f"no sample size would make this PASS: the {what} ({fmt_fraction(value, kind)}) is itself {side} "
        f"the threshold ({fmt_fraction(threshold, kind)})"
    )
    return f"{head}; {suite_line(needed, now, verb='FAIL it')}"


def plan_comparison(
    d: Decision,
    pairs: Sequence[tuple[str, float, float]],
    missing: int,
    binary: bool,
    missing_policy: str,
    confidence: float,
    seed: int,
    reason: str,
) -> str:
    """One line for an undecided comparison decision: how many pairs would decide it (see the module's docstring)."""
    if reason != INTERVAL_OVERLAPS_MARGIN:
        return f"not a question of sample size ({reason})"
    rule = d.rule
    margin = float(d.margin or 0.0)
    conf = rule.interval_confidence(confidence)
    counts: Counter[Hashable] = Counter((b, c) for _, b, c in pairs)
    bound = missing_policy == "bound" and missing > 0
    if bound:
        counts["missing"] = missing
    now = sum(counts.values())
    total = sum(c - b for _, b, c in pairs)
    lim_low = 100.0 * (total - (missing if bound else 0)) / now
    lim_high = 100.0 * (total + (missing if bound else 0)) / now
    target, _ = rule.decide(lim_low, lim_high, margin)
    if target == INSUFFICIENT:
        if bound:  # the missing pairs alone can put it on either side
            return (
                f"no sample size would decide it: with its missing pairs at worst and at best the difference lies "
                f"between {lim_low:+.1f} and {lim_high:+.1f} points, across the margin ({fmt_margin(margin)} points)"
            )
        return (
            f"no sample size would decide it: the observed difference ({lim_low:+.1f} points) sits on the margin "
            f"({fmt_margin(margin)} points)"
        )

    def outcome(n: int) -> str:
        c = scaled(counts, n)
        ps = [("", float(k[0]), float(k[1])) for k, m in c.items() if k != "missing" for _ in range(m)]  # type: ignore[index]
        if bound:
            lo, hi = worst_bounds(ps, c["missing"], binary, conf, seed)
        else:
            iv = paired_interval(ps, binary, conf, seed)
            lo, hi = iv.low, iv.high
        return rule.decide(100.0 * lo, 100.0 * hi, margin)[0]

    needed = smallest_deciding(now, lambda n: outcome(n) == target)
    if target == PASS:
        return suite_line(needed, now, unit="pairs")
    # the most favourable difference: every missing pair improved; for equivalence, the one nearer 0
    value = lim_low if d.test == "equivalence" and lim_low > 0 else lim_high
    what = "observed difference" + (" with every missing pair at its best" if bound else "")
    return (
        f"no sample size would make this PASS: the {what} ({value:+.1f} points) itself fails "
        f"{d.test} at a {fmt_margin(margin)}-point margin; {suite_line(needed, now, unit='pairs', verb='FAIL it')}"
    )


__all__ = [
    "SCHEMA",
    "DecisionError",
    "decide_rows",
    "decide_run",
    "gate_of",
    "plan_comparison",
    "plan_run",
    "scaled",
    "smallest_deciding",
]


# ------------------------------------------------------------------ what a suite of N cases can decide


def suite_capacity(d: Decision, cases: int, confidence: float) -> dict[str, Any]:
    """What a single-run decision can decide at `cases` cases, before anything ran (`oloproof init`).

    For a `minimum` on a pass rate: the most failed cases that still PASS (the same exact
    interval the gate reads), or, when even a suite where every case passes cannot PASS, the
    smallest such suite that could. A `maximum` mirrors it (failures read as values above the
    threshold); `max-failures` counts failed cases, whatever the suite's size.
    """
    from pytest_oloproof.stats.intervals import rate_interval

    out: dict[str, Any] = {"name": d.name, "criterion": d.criterion, "test": d.test, "cases": cases}
    if d.test == MAX_FAILURES:
        out["max_failures"] = d.max_failures
        return out
    threshold = float(d.threshold or 0.0)
    out["threshold"] = threshold
    good, bad = (1.0, 0.0) if d.test == "minimum" else (0.0, 1.0)

    def passes(n: int, failed: int) -> bool:
        iv = rate_interval([good] * (n - failed) + [bad] * failed, confidence)
        return d.run_rule.decide(iv.low, iv.high, threshold)[0] == PASS

    allowed = None
    for failed in range(cases + 1):
        if not passes(cases, failed):
            break
        allowed = failed
    out["failures_allowed"] = allowed
    if allowed is None:
        out["cases_needed"] = smallest_deciding(cases, lambda n: passes(n, 0))
    return out
