"""Comparison of two runs and the release gate.

Cases are paired by id. For every criterion both runs record, the difference
candidate − baseline is reported in percentage points with a paired interval
(the exact interval compatible with McNemar's test for pass/fail criteria, a paired mean-difference
interval otherwise) and its accounting. A policy (compare.yaml) turns chosen
criteria into decisions; the gate is PASS only when every decision passes.

The comparison is a content-addressed `oloproof.comparison/1` document; report/
renders it from that document alone, so `oloproof inspect` prints the same lines
as `oloproof compare`. Only the words stored in the document (warnings, printed
bounds, sample-size notes, plan lines) are written here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from pytest_oloproof.errors import ExitCode, OloproofError, StoreError
from pytest_oloproof.records.access import cases_by_id, criteria_of, shared_criteria
from pytest_oloproof.records.identity import sha256_of
from pytest_oloproof.records.redaction import redact_obj
from pytest_oloproof.records.shapes import ComparisonDoc, DecisionDoc, RunHeadline, RunRecord
from pytest_oloproof.stats.aggregate import slice_value
from pytest_oloproof.store.files import Store, load_run_file
from pytest_oloproof.usage.accounting import compare_costs

from .paired import JUDGE_EVALUATOR_TYPES, judge_gate, paired_interval, recorded_kind, refuse_partial, worst_bounds
from .policy import (
    CASES_CHANGED,
    INSUFFICIENT,
    MISSING_EXCEEDS_LIMIT,
    PASS,
    TOO_FEW_PAIRS,
    LoadedPolicy,
    load_policy,
)
from .words import changed_summary, fmt_margin, fmt_points, printed_interval, shown_ids

SCHEMA = "oloproof.comparison/1"


class ComparisonError(OloproofError):
    """The two runs cannot be compared (different systems, nothing recorded): exit 2."""

    exit_code = ExitCode.USAGE


# ------------------------------------------------------------------ loading runs


def load_run(store: Store, ref: str, role: str) -> RunRecord:
    """A whole run record (cases inline) from a run id, a unique prefix, or a run-record JSON file.

    A run that recorded no case cannot be compared: that is an error, not an empty comparison.
    """
    path = Path(ref)
    if ref.endswith(".json"):
        if not path.is_file():
            raise StoreError(f"{role} {ref}: no such run-record file")
        record = load_run_file(path)
    else:
        try:
            record = store.load_run(ref)
        except StoreError as exc:
            raise StoreError(f"{role}: {exc}") from None
    refuse_partial(record, role)
    if not record.get("cases"):
        status = record.get("status", "unknown")
        raise ComparisonError(
            f"{role} run {record.get('run_id', ref)} ({status}) recorded no cases; nothing to compare"
        )
    return record


def same_system_name(candidate_name: Any, baseline_name: Any) -> bool:
    """Whether two system names are one, as the store writes them.

    A name taken from an environment variable is stored as `${VAR}` (redaction.py), while the
    session's own run is compared before it is written: both are compared redacted.
    """
    return bool(redact_obj(candidate_name) == redact_obj(baseline_name))


def check_comparable(candidate: Mapping[str, Any], baseline: Mapping[str, Any]) -> None:
    """Runs of different systems (different `system.name`) are not comparable."""
    cand = (candidate.get("system") or {}).get("name")
    base = (baseline.get("system") or {}).get("name")
    if not same_system_name(cand, base):
        raise ComparisonError(
            f"the runs are of different systems: candidate {candidate.get('run_id')} is {cand!r}, "
            f"baseline {baseline.get('run_id')} is {base!r}; compare two runs of one system"
        )


# ------------------------------------------------------------------ judges


# ------------------------------------------------------------------ case content

CASE_CHANGED = "case_changed"


def changed_cases(
    cand: Mapping[str, Mapping[str, Any]], base: Mapping[str, Mapping[str, Any]], both: Sequence[str]
) -> tuple[dict[str, list[str]], bool]:
    """Cases in both runs whose input or expected data differ: {id: ["input", "expected"]}.

    The second value says whether every case of both runs carries a digest; when one does not
    (a run recorded before digests), changed cases cannot be detected.
    """
    out: dict[str, list[str]] = {}
    complete = True
    for cid in both:
        cd, bd = cand[cid].get("digest"), base[cid].get("digest")
        if not isinstance(cd, Mapping) or not isinstance(bd, Mapping):
            complete = False
            continue
        parts = [part for part in ("input", "expected") if cd.get(part) != bd.get(part)]
        if parts:
            out[cid] = parts
    if complete:
        complete = all(isinstance(c.get("digest"), Mapping) for c in (*cand.values(), *base.values()))
    return out, complete


# ------------------------------------------------------------------ pairing and intervals


@dataclass
class Pairing:
    """One criterion's pairs: values of cases observed in both runs, and what was left out and why."""

    criterion: str
    pairs: list[tuple[str, float, float]]  # (case id, baseline value, candidate value)
    missing: Counter[str]
    excluded: Counter[str]
    missing_ids: list[str]

    @property
    def binary(self) -> bool:
        return all(b in (0.0, 1.0) and c in (0.0, 1.0) for _, b, c in self.pairs)


def pair_criterion(
    name: str,
    cand: Mapping[str, Mapping[str, Any]],
    base: Mapping[str, Mapping[str, Any]],
    changed: Mapping[str, Any] | None = None,
) -> Pairing:
    """Pair one criterion by case id and content.

    Excluded wins over missing: an exclusion (e.g. no relevance labels) is a property of the
    case, so a case the criterion does not apply to is not counted as missing even when one
    system failed on it. A case present in one run only is missing (never silently dropped).
    A case whose input or expected data differ between the runs (``changed``) is not a pair:
    it is excluded with reason `case_changed`.
    """
    pairs: list[tuple[str, float, float]] = []
    missing: Counter[str] = Counter()
    excluded: Counter[str] = Counter()
    missing_ids: list[str] = []
    for cid in sorted(set(cand) | set(base)):
        if cid not in base:
            missing["not_in_baseline"] += 1
            missing_ids.append(cid)
            continue
        if cid not in cand:
            missing["not_in_candidate"] += 1
            missing_ids.append(cid)
            continue
        if changed and cid in changed:
            excluded[CASE_CHANGED] += 1
            continue
        cv = (cand[cid].get("criteria") or {}).get(name) or {"status": "missing", "reason": "not_evaluated"}
        bv = (base[cid].get("criteria") or {}).get(name) or {"status": "missing", "reason": "not_evaluated"}
        statuses = (cv["status"], bv["status"])
        if "excluded" in statuses:
            reason = (cv if cv["status"] == "excluded" else bv).get("reason") or "excluded"
            excluded[reason] += 1
        elif "missing" in statuses:
            side = (
                "both"
                if statuses == ("missing", "missing")
                else ("candidate" if cv["status"] == "missing" else "baseline")
            )
            missing[f"missing_in_{side}"] += 1
            missing_ids.append(cid)
        else:
            pairs.append((cid, float(bv["value"]), float(cv["value"])))
    return Pairing(name, pairs, missing, excluded, missing_ids)


def criterion_kind(name: str, records: Sequence[Mapping[str, Any]], pairing: Pairing) -> str:
    """The kind, "rate" or "mean", as both runs recorded it, never from the values.

    When the runs recorded different kinds (recall over labels with one relevant unit per case in
    one run, more in the other) the criterion is compared as a mean (`kind_warnings` says so).
    Records written before evaluators carried a kind fall back to the values (0/1 pairs: a rate).
    A declared rate whose values are not all 0/1 is compared as a mean (the exact paired interval needs 0/1).
    """
    kinds = [k for k in (recorded_kind(r, name) for r in records) if k is not None]
    if kinds:
        return "rate" if all(k == "rate" for k in kinds) and pairing.binary else "mean"
    return "rate" if pairing.binary else "mean"


def kind_warnings(candidate: Mapping[str, Any], baseline: Mapping[str, Any], names: Sequence[str]) -> list[str]:
    """One warning per criterion the two runs recorded as different kinds (their labels differ)."""
    out = []
    for name in names:
        ck, bk = recorded_kind(candidate, name), recorded_kind(baseline, name)
        if ck and bk and ck != bk:
            out.append(
                f"{name}: the candidate run reads it as a {ck}, the baseline as a {bk} (their relevance labels "
                "differ); compared as a mean"
            )
    return out


def pair_clusters(pairs: Sequence[tuple[str, float, float]], baseline: Mapping[str, Mapping[str, Any]]) -> list[Any]:
    """The baseline's `metadata.cluster` of each pair (None for cases without one)."""
    return [(baseline[cid].get("metadata") or {}).get("cluster") for cid, _b, _c in pairs]


def _points(x: float) -> float:
    return x * 100.0


def difference(
    pairing: Pairing, binary: bool, confidence: float, seed: int, clusters: Sequence[Any] | None = None
) -> dict[str, Any]:
    """Estimate and interval in points, unrounded and as printed."""
    n = len(pairing.pairs)
    iv = paired_interval(pairing.pairs, binary, confidence, seed, clusters)
    est = sum(c - b for _, b, c in pairing.pairs) / n if n else None
    out: dict[str, Any] = {
        "paired": n,
        "estimate": None if est is None else _points(est),
        "low": _points(iv.low),
        "high": _points(iv.high),
        "method": iv.method,
        "confidence": confidence,
    }
    if iv.note:
        out["note"] = iv.note
    lo, hi = printed_interval(out["low"], out["high"])
    out["printed"] = {"estimate": None if est is None else fmt_points(out["estimate"]), "low": lo, "high": hi}
    return out


def worst_difference(
    pairing: Pairing, binary: bool, confidence: float, seed: int, clusters: Sequence[Any] | None = None
) -> dict[str, Any]:
    """The difference's interval in points with each missing pair at its worst (−1 for the lower bound, +1 for
    the upper): it holds whatever the missing pairs' values would have been."""
    m = sum(pairing.missing.values())
    low, high = worst_bounds(pairing.pairs, m, binary, confidence, seed, clusters)
    return {"low": _points(low), "high": _points(high), "pairs": len(pairing.pairs) + m}


def criterion_summary(
    pairing: Pairing,
    confidence: float,
    seed: int,
    binary: bool | None = None,
    clusters: Sequence[Any] | None = None,
) -> dict[str, Any]:
    """Everything the comparison says about one criterion (``binary``: its kind is a rate)."""
    binary = pairing.binary if binary is None else binary
    out = difference(pairing, binary, confidence, seed, clusters)
    out.update(
        {
            "kind": "rate" if binary else "mean",
            "missing": sum(pairing.missing.values()),
            "excluded": sum(pairing.excluded.values()),
            "missing_reasons": dict(sorted(pairing.missing.items())),
            "excluded_reasons": dict(sorted(pairing.excluded.items())),
            "missing_cases": list(pairing.missing_ids),
        }
    )
    if out["missing"]:
        out["missing_at_worst"] = worst_difference(pairing, binary, confidence, seed, clusters)
    n = len(pairing.pairs)
    if n:
        out["baseline_mean"] = sum(b for _, b, _c in pairing.pairs) / n
        out["candidate_mean"] = sum(c for _, _b, c in pairing.pairs) / n
    if binary:
        out["improved"] = [cid for cid, b, c in pairing.pairs if c > b]
        out["regressed"] = [cid for cid, b, c in pairing.pairs if c < b]
    else:
        out["changed"] = [cid for cid, b, c in pairing.pairs if c != b]
    return out


# ------------------------------------------------------------------ slices


def slice_names(record: Mapping[str, Any]) -> list[str]:
    """The slices a run was configured with (the finished record keeps computed rows under `slices`)."""
    names: dict[str, None] = {}
    for entry in record.get("slices") or []:
        names.setdefault(entry["slice"] if isinstance(entry, Mapping) else str(entry), None)
    if not names:
        for entry in (record.get("config") or {}).get("slices") or []:
            names.setdefault(str(entry), None)
    return list(names)


def slice_rows(
    pairings: Mapping[str, Pairing],
    binary: Mapping[str, bool],
    baseline_cases: Mapping[str, Mapping[str, Any]],
    slices: Sequence[str],
    min_support: int,
    confidence: float,
    seed: int,
) -> list[dict[str, Any]]:
    """Exploratory differences per slice value and criterion.

    Pairs are grouped by the *baseline's* slice value: grouping by the candidate's (e.g. its
    relevant_position) would select on an outcome of the change being measured.
    """
    from pytest_oloproof.stats.aggregate import _slice_order

    rows: list[dict[str, Any]] = []
    for sl in slices:
        values: set[str] = set()
        for c in baseline_cases.values():
            v = slice_value(c, sl)
            if v is not None:
                values.add(v)
        for value in sorted(values, key=_slice_order):
            for name, pairing in pairings.items():
                members = [p for p in pairing.pairs if slice_value(baseline_cases[p[0]], sl) == value]
                row: dict[str, Any] = {"slice": sl, "value": value, "criterion": name, "paired": len(members)}
                if len(members) < min_support:
                    row["insufficient_support"] = True
                else:
                    sub = Pairing(name, members, Counter(), Counter(), [])
                    row.update(difference(sub, binary[name], confidence, seed, pair_clusters(members, baseline_cases)))
                rows.append(row)
    return rows


# ------------------------------------------------------------------ decisions


def decide(
    policy: LoadedPolicy,
    pairings: Mapping[str, Pairing],
    binary: Mapping[str, bool],
    criteria: Mapping[str, Mapping[str, Any]],
    candidate: Mapping[str, Any],
    confidence: float,
    seed: int,
    store: Store | None,
    baseline: Mapping[str, Any] | None = None,
    changed: Mapping[str, Any] | None = None,
    clusters: Mapping[str, Sequence[Any] | None] | None = None,
) -> list[dict[str, Any]]:
    """Apply each decision of the policy; rules read the unrounded bounds."""
    out = []
    p = policy.policy
    clusters = clusters or {}
    for d in p.comparison_decisions:
        rule = d.rule
        margin = float(d.margin or 0.0)
        conf = rule.interval_confidence(confidence)
        crit = criteria[d.criterion]
        pairing = pairings[d.criterion]
        iv = (
            crit
            if conf == confidence
            else difference(pairing, binary[d.criterion], conf, seed, clusters.get(d.criterion))
        )
        missing = int(crit["missing"])
        interval = {"low": iv["low"], "high": iv["high"], "confidence": conf, "method": iv["method"]}
        if p.missing == "bound" and missing:
            worst = worst_difference(pairing, binary[d.criterion], conf, seed, clusters.get(d.criterion))
            interval.update({"low": worst["low"], "high": worst["high"], "missing_at_worst": True})
        row: dict[str, Any] = {
            "name": d.name,
            "criterion": d.criterion,
            "test": d.test,
            "scope": "comparison",
            "margin": margin,
            "interval": interval,
            "paired": crit["paired"],
            "missing": missing,
        }
        if p.missing == "exclude":
            row["missing_dropped"] = missing
        judge = judge_gate(d.criterion, candidate, store=store, baseline_record=baseline)
        if changed and p.changed_cases == "fail":
            outcome, reason = INSUFFICIENT, CASES_CHANGED
        elif judge is not None:
            outcome, reason = INSUFFICIENT, judge
        elif p.missing == "fail" and missing > 0:
            outcome, reason = INSUFFICIENT, MISSING_EXCEEDS_LIMIT
        elif crit["paired"] < p.min_pairs:
            outcome, reason = INSUFFICIENT, TOO_FEW_PAIRS
        else:
            outcome, reason = rule.decide(float(interval["low"]), float(interval["high"]), margin)
        row.update({"outcome": outcome, "reason": reason})
        if outcome == INSUFFICIENT:
            from .release import plan_comparison

            row["plan"] = plan_comparison(
                d, pairing.pairs, missing, binary[d.criterion], p.missing, confidence, seed, reason
            )
        kind = "rate" if binary[d.criterion] else "mean"
        needed = rule.pairs_needed(margin, confidence, kind)
        if needed is not None and crit["paired"] < needed:
            row["pairs_needed_without_change"] = needed
            row["kind"] = kind
        out.append(row)
    return out


def sample_size_notes(decisions: Sequence[Mapping[str, Any]]) -> list[str]:
    notes: list[str] = []
    for d in decisions:
        needed = d.get("pairs_needed_without_change")
        if needed is None:
            continue
        n = d["paired"]
        margin = fmt_margin(d["margin"])
        cases = f"{n} paired case{'' if n == 1 else 's'}"
        head = f"{d['criterion']}: {cases} cannot establish {d['test']} at a {margin}-point"
        if d.get("outcome") == PASS:  # the decision passed: the changed verdicts, not the sample size, carried it
            unchanged = "with every difference 0" if d.get("kind") == "mean" else "with no changed verdicts"
            note = (
                f"{d['criterion']}: {d['name']} PASSED on {cases} because the candidate's changes favour it; "
                f"{unchanged}, about {needed} pairs would be needed to establish {d['test']} at a {margin}-point "
                "margin"
            )
        elif d.get("kind") == "mean":  # from the paired graded interval with every difference 0
            note = f"{head} margin, even with no change; about {needed} would be needed"
        else:  # from the exact paired interval with no discordant pair
            note = f"{head} margin; about {needed} would be needed with no changed verdicts"
        if note not in notes:
            notes.append(note)
    return notes


# ------------------------------------------------------------------ the whole comparison


def _run_summary(record: Mapping[str, Any], source: str | None) -> RunHeadline:
    return {
        "run_id": record.get("run_id"),
        "status": record.get("status"),
        "system": dict(record.get("system") or {}),
        "cases": len(record.get("cases") or []),
        "source": source or "store",
    }


def compare_runs(
    candidate: RunRecord,
    baseline: RunRecord,
    policy: LoadedPolicy | None = None,
    *,
    store: Store | None = None,
    sources: tuple[str | None, str | None] = (None, None),
) -> ComparisonDoc:
    """Build the `oloproof.comparison/1` document (raises ComparisonError/ConfigError before any write)."""
    refuse_partial(candidate, "candidate")
    refuse_partial(baseline, "baseline")
    check_comparable(candidate, baseline)
    shared = shared_criteria(candidate, baseline)
    if policy is not None:
        policy.check_criteria(shared)
        policy.check_criteria(
            criteria_of(candidate),
            why="the candidate run must record it",
            listing="criteria of the candidate",
            single_run=True,
        )
    confidence = float(
        (policy.policy.confidence if policy and policy.policy.confidence else None) or candidate.get("confidence", 0.95)
    )
    seed = int(candidate.get("seed", 0) or 0)
    cand_cases, base_cases = cases_by_id(candidate), cases_by_id(baseline)
    both = sorted(set(cand_cases) & set(base_cases))
    only_cand = sorted(set(cand_cases) - set(base_cases))
    only_base = sorted(set(base_cases) - set(cand_cases))

    changed, digests_complete = changed_cases(cand_cases, base_cases, both)
    warnings = _warnings(candidate, baseline, only_cand, only_base, shared)
    if changed:
        warnings.insert(0, f"{changed_summary(changed)}; excluded from every difference and decision (case_changed)")
    if not digests_complete:
        warnings.append(
            "a run was recorded without case digests (before Oloproof kept them): cases whose input or expected "
            "data changed between the runs cannot be detected"
        )
    warnings += kind_warnings(candidate, baseline, shared)
    pairings = {name: pair_criterion(name, cand_cases, base_cases, changed) for name in shared}
    binary = {name: criterion_kind(name, (candidate, baseline), p) == "rate" for name, p in pairings.items()}
    clusters = {name: pair_clusters(p.pairs, base_cases) for name, p in pairings.items()}
    criteria = {
        name: criterion_summary(p, confidence, seed, binary[name], clusters[name]) for name, p in pairings.items()
    }
    slices = slice_rows(
        pairings,
        binary,
        base_cases,
        slice_names(candidate),
        int(candidate.get("min_slice_support", 5)),
        confidence,
        seed,
    )
    decisions = (
        decide(policy, pairings, binary, criteria, candidate, confidence, seed, store, baseline, changed, clusters)
        if policy is not None
        else []
    )
    gate = None
    gate_reason = None
    if policy is not None:
        from .release import decide_rows, gate_of

        decisions += decide_rows(candidate, policy, confidence, seed, store)
        gate = gate_of(policy, decisions)
        if changed and policy.policy.changed_cases == "fail":
            gate, gate_reason = "BLOCK", CASES_CHANGED
    values_changed: dict[str, dict[str, dict[str, float]]] = {}
    for name, p in pairings.items():
        for cid, b, c in p.pairs:
            if b != c:
                values_changed.setdefault(cid, {})[name] = {"baseline": b, "candidate": c}
    case_rows = []
    for cid in sorted(set(cand_cases) | set(base_cases)):
        where = (
            "both" if cid in base_cases and cid in cand_cases else ("candidate" if cid in cand_cases else "baseline")
        )
        row: dict[str, Any] = {"id": cid, "in": where}
        if cid in changed:
            row["case_changed"] = list(changed[cid])
        if cid in values_changed:
            row["changed"] = values_changed[cid]
        case_rows.append(row)
    doc = {
        "schema": SCHEMA,
        "candidate": _run_summary(candidate, sources[0]),
        "baseline": _run_summary(baseline, sources[1]),
        "paired_cases": len(both) - len(changed),
        "confidence": confidence,
        "seed": seed,
        "case_sets": {
            "only_in_candidate": only_cand,
            "only_in_baseline": only_base,
            "changed": {cid: list(changed[cid]) for cid in sorted(changed)},
            "counts": {
                "only_in_candidate": len(only_cand),
                "only_in_baseline": len(only_base),
                "changed": len(changed),
            },
            "changes_detectable": digests_complete,
            "digests": {
                "candidate": candidate.get("case_set_digest"),
                "baseline": baseline.get("case_set_digest"),
            },
        },
        "warnings": warnings,
        "criteria": criteria,
        "sample_size_notes": sample_size_notes(decisions),
        "slices": slices,
        "min_slice_support": int(candidate.get("min_slice_support", 5)),
        "policy": policy.snapshot() if policy is not None else None,
        "decisions": decisions,
        "gate": gate,
        **({"gate_reason": gate_reason} if gate_reason else {}),
        "exit_code": ExitCode.BLOCK if gate == "BLOCK" else ExitCode.OK,
        "cases": case_rows,
        **_cost_field(candidate, baseline),
    }
    return cast(ComparisonDoc, doc)


def _cost_field(candidate: Mapping[str, Any], baseline: Mapping[str, Any]) -> dict[str, Any]:
    """`cost`: per paired case and in total, what each run spent (absent when neither run recorded usage)."""
    cost = compare_costs(candidate, baseline)
    return {"cost": cost} if cost is not None else {}


def _warnings(
    candidate: Mapping[str, Any],
    baseline: Mapping[str, Any],
    only_cand: Sequence[str],
    only_base: Sequence[str],
    shared: Sequence[str],
) -> list[str]:
    out = []
    if only_cand or only_base:
        out.append(
            f"the runs used different case sets: {len(only_cand)} case(s) only in the candidate"
            f"{' (' + shown_ids(only_cand) + ')' if only_cand else ''}, {len(only_base)} only in the baseline"
            f"{' (' + shown_ids(only_base) + ')' if only_base else ''}; they count as missing"
        )
    ci = (candidate.get("system") or {}).get("index_version")
    bi = (baseline.get("system") or {}).get("index_version")
    if ci != bi:
        out.append(f"the runs used different index_version: candidate {ci!r}, baseline {bi!r}")
    for role, rec in (("candidate", candidate), ("baseline", baseline)):
        if rec.get("status") != "complete":
            out.append(f"the {role} run {rec.get('run_id')} is {rec.get('status') or 'of unknown status'}")
    for role, rec in (("candidate", candidate), ("baseline", baseline)):
        lonely = [c for c in criteria_of(rec) if c not in shared]
        if lonely:
            out.append(f"criteria only in the {role} run, not compared: {', '.join(lonely)}")
    cj = {e["criterion"]: sha256_of(e.get("settings") or {}) for e in candidate.get("evaluators") or []}
    for e in baseline.get("evaluators") or []:
        name = e.get("criterion")
        if e.get("type") in JUDGE_EVALUATOR_TYPES and name in cj and cj[name] != sha256_of(e.get("settings") or {}):
            out.append(f"{name}: the runs used different judge settings (model, prompt or options)")
    return out


# ------------------------------------------------------------------ one call for the CLI and the plugin


def run_comparison(
    store: Store,
    candidate_ref: str | RunRecord,
    baseline_ref: str | RunRecord,
    policy: LoadedPolicy | str | Path | None = None,
) -> tuple[str, ComparisonDoc]:
    """Load, validate, compare, store; returns (comparison id, document).

    Everything that can be wrong (policy, run ids, systems, criteria) is checked before
    the document is written, so a failed comparison leaves nothing behind.
    """
    loaded = load_policy(policy) if isinstance(policy, (str, Path)) else policy
    sources: list[str | None] = []
    records: list[RunRecord] = []
    for role, ref in (("candidate", candidate_ref), ("baseline", baseline_ref)):
        if isinstance(ref, str):
            records.append(load_run(store, ref, role))
            sources.append(str(Path(ref).resolve()) if ref.endswith(".json") else None)
        else:
            records.append(ref)
            sources.append(None)
    doc = compare_runs(records[0], records[1], loaded, store=store, sources=(sources[0], sources[1]))
    return store.save_doc("comparison", doc), doc


# ------------------------------------------------------------------ pytest session gate (called by plugin.py)


class SessionGate:
    """The CI form: a baseline and a policy validated at session start, applied to the new run.

    Lives here, not in plugin.py, so the plugin only calls `prepare` and `apply`.
    """

    def __init__(
        self, store: Store, baseline: RunRecord | None, baseline_source: str | None, policy: LoadedPolicy | None
    ) -> None:
        self.store = store
        self.baseline = baseline  # None: a policy of single-run decisions decides the run alone
        self.baseline_source = baseline_source
        self.policy = policy
        self.comparison: tuple[str, ComparisonDoc] | None = None  # (id, document) once applied
        self.decision: tuple[str, DecisionDoc] | None = None  # (id, document) of a run decided alone
        self.failure: tuple[str, OloproofError] | None = None  # ("Comparison" or "Decision", why it could not be made)

    @classmethod
    def prepare(
        cls, store: Store, baseline_ref: str | None, policy_path: str | None, invocation_dir: Path
    ) -> SessionGate | None:
        """Validate --oloproof-baseline / --oloproof-policy before any case runs (raises OloproofError)."""
        if not baseline_ref and not policy_path:
            return None
        policy = None
        if policy_path:
            p = Path(policy_path)
            policy = load_policy(p if p.is_absolute() else invocation_dir / p, "--oloproof-policy")
        if not baseline_ref:
            assert policy is not None
            policy.check_single_run()
            return cls(store, None, None, policy)
        ref, source = baseline_ref, None
        if baseline_ref.endswith(".json"):
            p = Path(baseline_ref)
            p = p if p.is_absolute() else invocation_dir / p
            ref, source = str(p), str(p.resolve())
        baseline = load_run(store, ref, "--oloproof-baseline")
        if policy is not None:  # a criterion the baseline lacks fails whatever the candidate records
            policy.check_criteria(
                criteria_of(baseline),
                why=f"both runs must record it, and the baseline {baseline.get('run_id')} does not",
                listing="criteria of the baseline",
            )
        return cls(store, baseline, source, policy)

    def check_candidate(self, system_name: str, configured: Sequence[str]) -> list[str]:
        """Before any case runs: fail (OloproofError) where the candidate's configuration already rules the policy out.

        A run of another system than the baseline's cannot be compared. A decision's criterion that
        the configured evaluators do not give may still come from a conftest.py evaluator fixture (an
        addition, or an override): those criteria are returned, for `check_resolved` once the session's
        evaluator fixtures are known. Only with a policy: without one, the comparison is a report, and
        a run it cannot be made for still stands.
        """
        if self.policy is None:
            return []
        if self.baseline is None:
            return [d.criterion for d in self.policy.policy.decisions if d.criterion not in configured]
        base_name = (self.baseline.get("system") or {}).get("name")
        if not same_system_name(system_name, base_name):
            raise ComparisonError(
                f"--oloproof-baseline: run {self.baseline.get('run_id')} is of system {base_name!r}, but this "
                f"session runs {system_name!r}; a policy compares two runs of one system: give a baseline of "
                f"{system_name!r}"
            )
        return [d.criterion for d in self.policy.policy.decisions if d.criterion not in configured]

    def check_resolved(self, criteria: Sequence[str]) -> None:
        """The session's criteria (configured and from evaluator fixtures) must give every decision's criterion."""
        if self.policy is None:
            return
        own = "this run's evaluators (oloproof.yaml and conftest.py fixtures) do not"
        self.policy.check_criteria(
            criteria, why=f"the run must record it, and {own}", listing="criteria of this run", single_run=True
        )
        if self.baseline is None:
            return
        base = set(criteria_of(self.baseline))
        self.policy.check_criteria([c for c in criteria if c in base], why=f"both runs must record it, and {own}")

    def apply(self, record: RunRecord) -> int | None:
        """Compare the session's run with the baseline (or decide it alone); return the exit status to force.

        Returns 0 (PASS) or 3 (BLOCK) with a policy, None without one (pytest's own status stands).
        Errors that only show once the run exists (e.g. a criterion the run lacks) are kept in
        `failure` for the summary and give exit 2. The stored document is kept in `comparison` or
        `decision`, for the renderers (report.text.gate_lines, report.markdown.gate_markdown).
        """
        if self.baseline is None:
            return self._decide_alone(record)
        try:
            doc = compare_runs(
                record, self.baseline, self.policy, store=self.store, sources=(None, self.baseline_source)
            )
            doc_id = self.store.save_doc("comparison", doc)
            self.comparison = (doc_id, doc)
        except OloproofError as exc:
            self.failure = ("Comparison", exc)
            return ExitCode.USAGE if self.policy is not None else None
        return int(doc["exit_code"]) if self.policy is not None else None

    def _decide_alone(self, record: RunRecord) -> int:
        """No baseline: the policy's single-run decisions decide the run; the decision is stored content-addressed."""
        from . import release

        assert self.policy is not None
        try:
            doc = release.decide_run(record, self.policy, store=self.store)
            doc_id = self.store.save_doc("decision", doc)
            self.decision = (doc_id, doc)
        except OloproofError as exc:
            self.failure = ("Decision", exc)
            return ExitCode.USAGE
        return int(doc["exit_code"])

    def report_fields(self) -> dict[str, Any]:
        """What the JSON run report adds about the gate: the stored decision or comparison, with its id."""
        if self.decision is not None:
            return {"decision": {"id": self.decision[0], **self.decision[1]}}
        if self.comparison is not None and self.policy is not None:
            doc_id, doc = self.comparison
            return {"comparison": {"id": doc_id, "gate": doc["gate"], "decisions": doc["decisions"]}}
        return {}


__all__ = [
    "SCHEMA",
    "ComparisonError",
    "SessionGate",
    "compare_runs",
    "judge_gate",
    "load_run",
    "pair_criterion",
    "paired_interval",
    "run_comparison",
]
