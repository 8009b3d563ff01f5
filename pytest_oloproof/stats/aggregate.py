"""Per-criterion accounting (observed / missing / excluded), intervals and slices."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

from pytest_oloproof.records.repeats import flaky_criteria, kind_over_repeats, repeat_verdicts
from pytest_oloproof.records.shapes import MetricRecord, RunSummary

from . import intervals as stats
from .repeats import repeats_summary

COMPUTED_SLICES = ("relevant_position", "context_truncated", "flaky")


def is_binary(values: Iterable[float]) -> bool:
    return all(v in (0.0, 1.0) for v in values)


def summarize(
    values: Sequence[float],
    kind: str,
    *,
    confidence: float,
    seed: int,
    clusters: Sequence[Any] | None = None,
) -> dict[str, Any]:
    """Estimate and interval for one criterion's observed values.

    The kind is the evaluator's (`Evaluator.kind`), never guessed from the values: an
    nDCG or MRR whose values happen to be 0/1 in this run is still a mean, so one
    criterion reads the same in every run and in a comparison. A "rate" whose values
    are not all 0/1 (a custom evaluator declaring the wrong kind) is shown as a mean,
    with a note saying why.
    """
    n = len(values)
    value = sum(values) / n if n else None
    rate = kind == "rate"
    declared_note = None
    if rate and not is_binary(values):
        rate, declared_note = False, "declared a rate, but not every value is 0 or 1: shown as a mean"
    if rate:
        iv = stats.rate_interval(values, confidence, seed=seed, clusters=clusters)
    else:
        iv = stats.mean_interval(values, confidence, seed=seed, clusters=clusters)
    note = "; ".join(x for x in (declared_note, iv.note) if x) or None
    out: dict[str, Any] = {
        "kind": "rate" if rate else "mean",
        "value": value,
        "low": iv.low,
        "high": iv.high,
        "method": iv.method,
        "observed": n,
    }
    if rate:
        out["passed"] = round(sum(values))
    if note:
        out["note"] = note
    return out


def missing_at_worst(
    values: Sequence[float],
    missing: int,
    kind: str,
    *,
    confidence: float,
    seed: int,
    clusters: Sequence[Any] | None = None,
    missing_clusters: Sequence[Any] | None = None,
) -> dict[str, Any]:
    """The interval over every selected case, each missing one put at its worst value.

    The bounds are monotone in every value, so 0 in place of each missing case gives a lower
    bound and 1 an upper bound that hold whatever the missing cases' values would have been.
    `kind` is the one the observed values were read as.
    """
    interval = stats.rate_interval if kind == "rate" else stats.mean_interval
    cl = None if clusters is None else [*clusters, *(missing_clusters or [None] * missing)]
    low = interval([*values, *([0.0] * missing)], confidence, seed=seed, clusters=cl).low
    high = interval([*values, *([1.0] * missing)], confidence, seed=seed, clusters=cl).high
    return {"low": low, "high": high, "cases": len(values) + missing}


def compute_metrics(
    cases: Sequence[Mapping[str, Any]],
    criteria: Sequence[tuple[str, str]],
    *,
    confidence: float,
    seed: int,
) -> dict[str, MetricRecord]:
    """One entry per criterion: estimate, interval, and the full accounting."""
    clustered = any((c.get("metadata") or {}).get("cluster") is not None for c in cases)
    out: dict[str, MetricRecord] = {}
    for name, kind in criteria:
        values: list[float] = []
        clusters: list[Any] = []
        missing_clusters: list[Any] = []
        missing: Counter[str] = Counter()
        excluded: Counter[str] = Counter()
        for c in cases:
            cv = (c.get("criteria") or {}).get(name)
            if cv is None:
                continue
            if cv["status"] == "observed":
                values.append(float(cv["value"]))
                clusters.append((c.get("metadata") or {}).get("cluster"))
            elif cv["status"] == "missing":
                missing[_reason_key(cv.get("reason"))] += 1
                missing_clusters.append((c.get("metadata") or {}).get("cluster"))
            else:
                excluded[cv.get("reason") or "excluded"] += 1
        m = summarize(values, kind, confidence=confidence, seed=seed, clusters=clusters if clustered else None)
        m.update(
            {
                "missing": sum(missing.values()),
                "excluded": sum(excluded.values()),
                "excluded_reasons": dict(excluded),
                "missing_reasons": dict(missing),
                "confidence": confidence,
                "clustered": clustered,
            }
        )
        if m["missing"]:
            m["missing_at_worst"] = missing_at_worst(
                values,
                m["missing"],
                m["kind"],
                confidence=confidence,
                seed=seed,
                clusters=clusters if clustered else None,
                missing_clusters=missing_clusters,
            )
        out[name] = cast(MetricRecord, m)
    return out


def _reason_key(reason: str | None) -> str:
    return (reason or "missing").split(":", 1)[0]


def slice_value(case: Mapping[str, Any], name: str) -> str | None:
    """The case's value for a slice, or None when the slice does not apply to it."""
    if name == "relevant_position":
        v = case.get("relevant_position")
        return None if v is None else str(v)
    if name == "flaky":  # whether any verdict of the case differs across its repeats (`repeats: N`)
        return ("true" if flaky_criteria(case) else "false") if repeat_verdicts(case) else None
    if name == "context_truncated":
        v = case.get("context_truncated")
        if v is None or ("retrieval" in case and case["retrieval"] is None and case.get("error") is None):
            return None  # a plain callable assembles no context
        return "true" if v else "false"
    key = name.removeprefix("metadata.")
    meta = case.get("metadata") or {}
    if key not in meta:
        return None
    v = meta[key]
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def compute_slices(
    cases: Sequence[Mapping[str, Any]],
    slices: Sequence[str],
    criteria: Sequence[tuple[str, str]],
    *,
    min_support: int,
    confidence: float,
    seed: int,
    kinds: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Exploratory breakdowns; values with too little support get a count and no estimate.

    `kinds` carries each criterion's kind as decided over the whole run, so a slice
    reads the same kind as the run's table.
    """
    rows: list[dict[str, Any]] = []
    for sl in slices:
        groups: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
        for c in cases:
            v = slice_value(c, sl)
            if v is not None:
                groups[v].append(c)
        for value in sorted(groups, key=_slice_order):
            members = groups[value]
            for name, kind in criteria:
                kind = kinds.get(name, kind) if kinds else kind
                vals = [
                    float(c["criteria"][name]["value"])
                    for c in members
                    if (c.get("criteria") or {}).get(name, {}).get("status") == "observed"
                ]
                row: dict[str, Any] = {"slice": sl, "value": value, "criterion": name, "support": len(vals)}
                if len(vals) < min_support:
                    row["insufficient_support"] = True
                else:
                    m = summarize(vals, kind, confidence=confidence, seed=seed)
                    row.update({"kind": m["kind"], "value_estimate": m["value"], "low": m["low"], "high": m["high"]})
                    if "passed" in m:
                        row["passed"] = m["passed"]
                rows.append(row)
    return rows


def _slice_order(v: str) -> tuple[int, Any]:
    if v.isdigit():
        return (0, int(v))
    return (1, v)


def cache_counts(cases: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """Hit/miss counts per cache, summed from per-case records (so xdist gives the same totals)."""
    counts = {k: {"hit": 0, "miss": 0} for k in ("execution", "judgment", "retrieve", "generate")}
    for c in cases:
        cache = c.get("cache") or {}
        for k in ("execution", "retrieve", "generate"):
            v = cache.get(k)
            if v in ("hit", "miss"):
                counts[k][v] += 1
        for k, n in (cache.get("repeats") or {}).items():  # the case's repeats 1 … N−1 (`repeats: N`)
            if k in counts and isinstance(n, Mapping):
                counts[k]["hit"] += int(n.get("hit", 0))
                counts[k]["miss"] += int(n.get("miss", 0))
        j = cache.get("judgment") or {}
        counts["judgment"]["hit"] += int(j.get("hit", 0))
        counts["judgment"]["miss"] += int(j.get("miss", 0))
    return counts


#: The note on a rate criterion of a run with repeats: read as a mean of per-case means (the case is the unit).
REPEATED_RATE_NOTE = (
    "a rate averaged over {n} repeats per case: the mean of per-case means, with the bounded-mean interval over cases"
)


def summary_settings(header: Mapping[str, Any]) -> dict[str, Any]:
    """What a run's summary depends on besides its cases (plain JSON, so a stats worker can take it)."""
    return {
        # with repeats, a rate whose value can differ across repeats is read as a mean (records/repeats.py)
        "criteria": [[e["criterion"], kind_over_repeats(header, e)] for e in header.get("evaluators", [])],
        "declared": {e["criterion"]: e["kind"] for e in header.get("evaluators", [])},
        "confidence": float(header.get("confidence", 0.95)),
        "seed": int(header.get("seed", 0)),
        "slices": list(header.get("slices", [])),
        "min_slice_support": int(header.get("min_slice_support", 5)),
        "repeats": int(header.get("repeats") or 1),
    }


def summarize_run(cases: Sequence[Mapping[str, Any]], settings: Mapping[str, Any]) -> RunSummary:
    """Metrics, slices, cache counts and counts of a run's (slim) case summaries."""
    repeats = int(settings.get("repeats") or 1)
    criteria = [(name, kind) for name, kind in settings["criteria"]]
    conf, seed = settings["confidence"], settings["seed"]
    ordered = sorted(cases, key=lambda c: c["id"])
    metrics = compute_metrics(ordered, criteria, confidence=conf, seed=seed)
    declared = settings.get("declared") or {}
    for name, kind in criteria:
        if declared.get(name, kind) != kind:
            note = REPEATED_RATE_NOTE.format(n=repeats)
            metrics[name]["note"] = "; ".join(x for x in (note, metrics[name].get("note")) if x)
    out: RunSummary = {
        "metrics": metrics,
        "slices": compute_slices(
            ordered,
            settings["slices"],
            criteria,
            min_support=settings["min_slice_support"],
            confidence=conf,
            seed=seed,
            kinds={name: m["kind"] for name, m in metrics.items()},
        ),
        "cache": cache_counts(cases),
        "counts": {
            "cases": len(cases),
            "errors": sum(1 for c in cases if c.get("error")),
            "internal_errors": sum(1 for c in cases if (c.get("error") or {}).get("reason") == "internal_error"),
        },
    }
    repeated = repeats_summary(cases, [name for name, _ in criteria], repeats)
    if repeated is not None:
        out["repeat_summary"] = repeated
    return out
