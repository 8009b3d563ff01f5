"""The view model: a run, a case, a diagnosis, a comparison, a release decision and usage, as every renderer
reads them.

Each view is built once from a stored record or a computed result (`RunView.of(record)`,
`ComparisonView.of(doc, doc_id)`…) and holds data only: numbers, ids, reasons, the rows a
table shows. The terminal text (text.py), the Markdown step summary (markdown.py), the JUnit
properties (junit.py) and the HTML page (model.py) lay out the same views, so no renderer
reads a record the others do not, and none says what the others do not.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_oloproof.diagnose.labels import REPLAYS, all_missing
from pytest_oloproof.evaluators.retrieval import qrels_of
from pytest_oloproof.records.access import asserting, relevance_unit

if TYPE_CHECKING:
    from pytest_oloproof.diagnose.diagnosis import Result

# ------------------------------------------------------------------ usage


@dataclass(frozen=True)
class UsageView:
    """What was spent and saved (a usage summary: judges, system, saved), and the budget that stopped a run."""

    summary: Mapping[str, Any] | None
    budget: Mapping[str, Any] | None = None
    #: child runs of a diagnosis no longer in the store, so not counted in `summary`
    absent_runs: int = 0

    @classmethod
    def of_run(cls, record: Mapping[str, Any]) -> UsageView:
        return cls(record.get("usage"), record.get("budget"))

    @property
    def budget_stopped(self) -> bool:
        return bool(self.budget and self.budget.get("exhausted"))


# ------------------------------------------------------------------ a run and its cases


@dataclass(frozen=True)
class CaseView:
    """One case of a run: its criterion values, what it spent, and its error."""

    id: str
    criteria: Mapping[str, Mapping[str, Any]]
    relevant_position: int | None
    context_truncated: bool
    error: str | None
    #: calls, tokens (None when unknown) and cost (None when unpriced) spent by the case
    spent: Mapping[str, Any]

    @classmethod
    def of(cls, case: Mapping[str, Any]) -> CaseView:
        error = case.get("error")
        return cls(
            id=case["id"],
            criteria=case.get("criteria") or {},
            relevant_position=case.get("relevant_position"),
            context_truncated=bool(case.get("context_truncated")),
            error=error["message"] if error else None,
            spent=(((case.get("usage") or {}).get("totals")) or {}).get("spent") or {},
        )


@dataclass(frozen=True)
class FailedCase:
    """A case whose pytest item failed: asserting criteria below 1 or missing, or a system error."""

    id: str
    #: the failing criteria (`name`, or `name missing (reason)`), or `system error in STAGE: message`
    what: list[str]


def criterion_failures(case: Mapping[str, Any], asserts: Iterable[str]) -> list[str]:
    """The case's asserting criteria that failed its pytest item: below 1 (`name`) or missing (`name missing (why)`)."""
    what = []
    criteria = case.get("criteria") or {}
    for name in asserts:
        c = criteria.get(name)
        if not c:
            continue
        if c.get("status") == "observed" and c.get("value") is not None and c["value"] < 1.0:
            what.append(name)
        elif c.get("status") == "missing":
            what.append(f"{name} missing ({c.get('reason')})")
    return what


def failed_cases(record: Mapping[str, Any]) -> list[FailedCase]:
    """The failed cases of a run record, in the record's order."""
    out: list[FailedCase] = []
    for case in record.get("cases") or []:
        error = case.get("error")
        if error:
            stage = error.get("stage")
            out.append(
                FailedCase(case["id"], [f"system error{' in ' + stage if stage else ''}: {error.get('message', '')}"])
            )
            continue
        what = criterion_failures(case, asserting(record))
        if what:
            out.append(FailedCase(case["id"], what))
    return out


@dataclass(frozen=True)
class VarianceRow:
    """One criterion's variance split over repeats (stats/repeats.py; Miller 2024, arXiv:2411.00640)."""

    criterion: str
    between: float
    within: float
    repeats: int
    se: float  # the standard error of the run's mean now (from the case means)
    se_double: float  # ... with twice the repeats, as the model predicts
    se_floor: float  # ... with unlimited repeats: only the between-case part is left
    within_share: float  # the share of the mean's variance that more repeats could remove
    note: str | None = None


@dataclass(frozen=True)
class RepeatsView:
    """A run with repeats: how many per case, the flaky cases per criterion, and the variance split."""

    n: int
    case_count: int
    flaky: Mapping[str, Sequence[str]]  # criterion -> ids of the cases whose verdicts differ across repeats
    flaky_cases: Sequence[str]
    variance: Sequence[VarianceRow]

    @classmethod
    def of(cls, record: Mapping[str, Any]) -> RepeatsView | None:
        summary = record.get("repeat_summary")
        if not isinstance(summary, Mapping):
            return None
        rows = [
            VarianceRow(
                name,
                float(v["between"]),
                float(v["within"]),
                int(v["repeats"]),
                float(v["se"]),
                float(v["se_double"]),
                float(v["se_floor"]),
                float(v["within_share"]),
                v.get("note"),
            )
            for name, v in (summary.get("variance") or {}).items()
            if float(v.get("within", 0)) > 0  # a criterion that never varies within a case: nothing to split
        ]
        return cls(
            n=int(summary.get("n", 1)),
            case_count=int((record.get("counts") or {}).get("cases", len(record.get("cases") or []))),
            flaky=summary.get("flaky") or {},
            flaky_cases=summary.get("flaky_cases") or [],
            variance=rows,
        )


@dataclass(frozen=True)
class RepeatRow:
    """One repeat of one case: its verdicts, its output and its error (what `inspect` and the case page show)."""

    repeat: int
    criteria: Mapping[str, Mapping[str, Any]]
    output: Any
    error: str | None


def case_repeats(case: Mapping[str, Any]) -> list[RepeatRow]:
    """Every repeat of a stored case record, in order; [] for a case of a run without repeats."""
    out: list[RepeatRow] = []
    for r in case.get("repeats") or []:
        error = r.get("error")
        out.append(RepeatRow(int(r.get("repeat", len(out))), r.get("criteria") or {}, r.get("output"), _message(error)))
    return out


def _message(error: Any) -> str | None:
    return str(error.get("message", "")) if isinstance(error, Mapping) else None


@dataclass(frozen=True)
class RunView:
    """One run: metrics with their accounting, caches, usage, slices, errors and failed cases."""

    run_id: str
    status: str | None
    system_name: Any
    confidence: float
    metrics: Mapping[str, Mapping[str, Any]]
    #: hit/miss counts per cache (absent in a record that holds only its start header)
    cache: Mapping[str, Mapping[str, int]] | None
    cache_misses: Mapping[str, Any] | None
    usage: UsageView
    slices: Sequence[Mapping[str, Any]]
    min_slice_support: int
    case_count: int
    #: cases missing for every criterion because the system raised (not counting budget-stopped ones)
    system_errors: int
    #: cases missing for every criterion because of an error inside Oloproof
    internal_errors: int
    note: str | None
    record: Mapping[str, Any] = field(repr=False)
    #: judge-corrected rates per criterion, computed from imported labels when the run is read
    corrected: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: flaky cases and the variance split of a run with repeats (`repeats: N`), else None
    repeats: RepeatsView | None = None
    #: wiring checks whose sign held in every case (evaluate/wiring.py)
    wiring: Sequence[Mapping[str, Any]] = ()

    @classmethod
    def of(cls, record: Mapping[str, Any]) -> RunView:
        counts = record.get("counts") or {}
        internal = counts.get("internal_errors", 0)
        errors = counts.get("errors", 0) - internal
        errors -= len((record.get("budget") or {}).get("cases_not_executed") or [])  # told by the Budget: line
        return cls(
            run_id=record.get("run_id"),  # type: ignore[arg-type]
            status=record.get("status"),
            system_name=(record.get("system") or {}).get("name"),
            confidence=float(record.get("confidence", 0.95)),
            metrics=record.get("metrics") or {},
            cache=record.get("cache"),
            cache_misses=record.get("cache_misses"),
            usage=UsageView.of_run(record),
            slices=record.get("slices") or [],
            min_slice_support=int(record.get("min_slice_support", 5)),
            case_count=len(record.get("cases") or []),
            system_errors=errors,
            internal_errors=internal,
            note=record.get("note"),
            record=record,
            corrected=record.get("corrected") or {},
            repeats=RepeatsView.of(record),
            wiring=record.get("wiring") or [],
        )

    @property
    def cases(self) -> list[CaseView]:
        return [CaseView.of(c) for c in self.record.get("cases") or []]

    @property
    def failed(self) -> list[FailedCase]:
        return failed_cases(self.record)


# ------------------------------------------------------------------ the runs of a store


def headline_criterion(record: Mapping[str, Any]) -> str | None:
    """The metric a run is known by: its first pass/fail criterion (as diagnose picks it), else its first metric."""
    metrics = record.get("metrics") or {}
    for e in record.get("evaluators") or []:
        if isinstance(e, Mapping) and e.get("asserts") and e.get("criterion") in metrics:
            return str(e["criterion"])
    return next(iter(metrics), None)


@dataclass(frozen=True)
class RunRow:
    """One run in `oloproof runs`: who, when, how many cases, its headline metric, and what kind of run it is."""

    run_id: str
    status: str | None
    purpose: str
    started_at: str | None
    system: Any
    version: Any
    cases: int | None
    #: the headline criterion and its metric (None before the run finished, or without evaluators)
    headline: tuple[str, Mapping[str, Any]] | None
    #: a diagnosis's child run (a re-execution under an intervention), not a run of its own
    child: bool
    #: a run of only part of the suite: status `partial` ("shard 1/4" for a shard's run)
    partial: str | None
    started_only: bool

    @classmethod
    def of(cls, run_id: str, header: Mapping[str, Any], *, started_only: bool, cases: int | None) -> RunRow:
        system = header.get("system") or {}
        name = headline_criterion(header)
        metric = (header.get("metrics") or {}).get(name) if name else None
        shard = header.get("shard")
        partial = None
        if header.get("status") == "partial" or shard is not None:
            if isinstance(shard, Mapping) and {"index", "count"} <= shard.keys():
                partial = f"shard {shard['index']}/{shard['count']}"
            else:
                partial = "partial"
        return cls(
            run_id=run_id,
            status=header.get("status"),
            purpose=str(header.get("purpose", "run")),
            started_at=header.get("started_at"),
            system=system.get("name"),
            version=system.get("version"),
            cases=cases,
            headline=(name, metric) if name and isinstance(metric, Mapping) else None,
            child=header.get("purpose", "run") != "run",
            partial=partial,
            started_only=started_only,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "status": self.status,
            "purpose": self.purpose,
            "started_at": self.started_at,
            "system": self.system,
            "version": self.version,
            "cases": self.cases,
            "headline": None if self.headline is None else {"criterion": self.headline[0], **self.headline[1]},
            "child": self.child,
            "partial": self.partial,
        }


# ------------------------------------------------------------------ one case whole


@dataclass(frozen=True)
class LadderRow:
    """One retrieved candidate: its rank, ids, score, relevance grade and what became of it."""

    position: Any
    doc_id: Any
    chunk_id: Any
    score: Any
    #: the candidate's relevance grade under the run's relevance unit (None: the case has no labels)
    grade: int | None
    #: "context", "dropped" (by assembly, with `reason`), "below" (the top-k cut) or "not in context"
    state: str
    reason: str | None
    text: str | None


@dataclass(frozen=True)
class Verdict:
    """One criterion of a case: its status, value, what was expected and seen, why it has no value, and its part."""

    name: str
    status: str
    value: Any
    expected: Any
    actual: Any
    reason: str | None
    asserts: bool

    @property
    def failed(self) -> bool:
        return self.asserts and (self.status == "missing" or (self.status == "observed" and (self.value or 0) < 1.0))


@dataclass(frozen=True)
class CaseDetail:
    """One case whole (`oloproof inspect RUN --case ID`): input, the retrieval ladder, context, output, verdicts."""

    run_id: Any
    id: str
    input: Any
    query: Any
    expected: Any
    metadata: Any
    depth: Any
    top_k: Any
    ladder: Sequence[LadderRow] | None
    context: Sequence[LadderRow]
    context_truncated: bool
    output: Any
    verdicts: Sequence[Verdict]
    error: Mapping[str, Any] | None
    cache: Mapping[str, Any]
    failed: Sequence[str]
    #: every repeat of the case (`repeats: N`); empty for a run without repeats
    repeats: Sequence[RepeatRow] = ()

    @classmethod
    def of(cls, record: Mapping[str, Any], case: Mapping[str, Any]) -> CaseDetail:
        system = record.get("system") or {}
        top_k = system.get("top_k")
        unit = relevance_unit(record)
        expected = case.get("expected")
        relevant = expected.get("relevant") if isinstance(expected, Mapping) else None
        try:
            qrels = qrels_of(relevant, unit) if relevant else None  # type: ignore[arg-type]
        except (KeyError, TypeError, ValueError):
            qrels = None
        in_context = set(case.get("context") or [])
        dropped = {d.get("position"): d.get("reason") for d in case.get("dropped") or [] if isinstance(d, Mapping)}
        ladder: list[LadderRow] | None = None
        if isinstance(case.get("retrieval"), list):
            ladder = []
            for c in case["retrieval"]:
                pos = c.get("position")
                key = (c.get("doc_id"), c.get("chunk_id")) if unit == "chunk" else c.get("doc_id")
                if pos in in_context:
                    state, reason = "context", None
                elif pos in dropped:
                    state, reason = "dropped", str(dropped[pos] or "dropped")
                elif isinstance(top_k, int) and isinstance(pos, int) and pos > top_k:
                    state, reason = "below", None
                else:
                    state, reason = "not in context", None
                grade = None if qrels is None else int(qrels.get(key, 0))
                ladder.append(
                    LadderRow(
                        pos, c.get("doc_id"), c.get("chunk_id"), c.get("score"), grade, state, reason, c.get("text")
                    )
                )
        asserts = set(asserting(record))
        verdicts = [
            Verdict(
                name,
                str(c.get("status")),
                c.get("value"),
                c.get("expected"),
                c.get("actual"),
                c.get("reason"),
                name in asserts,
            )
            for name, c in (case.get("criteria") or {}).items()
            if isinstance(c, Mapping)
        ]
        failed = next((f.what for f in failed_cases({**record, "cases": [case]})), [])
        return cls(
            run_id=record.get("run_id"),
            id=str(case.get("id")),
            input=case.get("input"),
            query=case.get("query"),
            expected=expected,
            metadata=case.get("metadata"),
            depth=system.get("depth"),
            top_k=top_k,
            ladder=ladder,
            context=[r for r in ladder or [] if r.state == "context"],
            context_truncated=bool(case.get("context_truncated")),
            output=case.get("output"),
            verdicts=verdicts,
            error=case.get("error"),
            cache=case.get("cache") or {},
            failed=failed,
            repeats=case_repeats(case),
        )


# ------------------------------------------------------------------ a diagnosis


@dataclass(frozen=True)
class DiagnosisView:
    """A diagnosis document (gold context, or a top-k / reranker replay) and what its re-execution spent."""

    #: the id shown: None when nothing was diagnosed or the document is not stored
    doc_id: str | None
    run_id: Any
    criterion: Any
    system: Mapping[str, Any]
    intervention: Mapping[str, Any]
    replay: bool
    counts: Mapping[str, Any]
    missing: Mapping[str, Mapping[str, Any]]
    cases: Sequence[Mapping[str, Any]]
    undiagnosable: Sequence[Any]
    implicated: Sequence[Mapping[str, Any]]
    candidate_experiments: Sequence[Mapping[str, Any]]
    child_runs: Mapping[str, Any]
    gold_context_diagnosis: Any
    measured_nothing: bool
    reexecution: UsageView | None = None

    @classmethod
    def of(cls, doc: Mapping[str, Any], doc_id: str | None, reexecution: UsageView | None = None) -> DiagnosisView:
        return cls(
            doc_id=doc_id,
            run_id=doc.get("run_id"),
            criterion=doc.get("criterion"),
            system=doc.get("system") or {},
            intervention=doc["intervention"],
            replay=doc["intervention"]["name"] in REPLAYS,
            counts=doc["counts"],
            missing=doc.get("missing") or {},
            cases=doc.get("cases") or [],
            undiagnosable=doc.get("undiagnosable") or [],
            implicated=doc.get("implicated") or [],
            candidate_experiments=doc.get("candidate_experiments") or [],
            child_runs=doc.get("child_runs") or {},
            gold_context_diagnosis=doc.get("gold_context_diagnosis"),
            measured_nothing=all_missing(doc),
            reexecution=reexecution,
        )

    @classmethod
    def of_result(cls, result: Result) -> DiagnosisView:
        """A diagnosis just run: a replay interrupted before it was stored is shown as not stored."""
        doc_id = result.doc_id
        if doc_id is None and result.doc["intervention"]["name"] in REPLAYS:
            doc_id = "(not stored: interrupted)"
        return cls.of(result.doc, doc_id, UsageView(result.usage))


# ------------------------------------------------------------------ a comparison and a release decision


@dataclass(frozen=True)
class FlippedGroup:
    """The cases of one criterion that moved one way between baseline and candidate."""

    criterion: str
    #: "regressed", "improved" or "changed" (a graded value that moved)
    key: str
    direction: str
    ids: Sequence[str]


FLIP_DIRECTIONS = (("regressed", "pass → fail"), ("improved", "fail → pass"), ("changed", "value changed"))


def flipped_groups(doc: Mapping[str, Any]) -> list[FlippedGroup]:
    """A comparison's flipped cases per criterion and direction, regressions first (empty groups left out)."""
    out = []
    for key, direction in FLIP_DIRECTIONS:
        for name, c in (doc.get("criteria") or {}).items():
            ids = [i if isinstance(i, str) else str(i.get("id", i)) for i in c.get(key) or []]
            if ids:
                out.append(FlippedGroup(name, key, direction, ids))
    return out


@dataclass(frozen=True)
class ComparisonView:
    """Two runs compared: paired differences per criterion, the cases not paired, cost, slices, decisions, gate."""

    doc_id: str
    candidate_id: Any
    baseline_id: Any
    paired_cases: int
    warnings: Sequence[str]
    criteria: Mapping[str, Mapping[str, Any]]
    sample_size_notes: Sequence[str]
    cost: Mapping[str, Any] | None
    slices: Sequence[Mapping[str, Any]]
    min_slice_support: Any
    #: case id -> what changed ("input", "expected") between the runs
    changed: Mapping[str, Sequence[str]]
    only_in_candidate: Sequence[str]
    only_in_baseline: Sequence[str]
    has_policy: bool
    decisions: Sequence[Mapping[str, Any]]
    gate: str | None
    gate_reason: str | None
    exit_code: int
    doc: Mapping[str, Any] = field(repr=False)

    @classmethod
    def of(cls, doc: Mapping[str, Any], doc_id: str) -> ComparisonView:
        sets = doc.get("case_sets") or {}
        return cls(
            doc_id=doc_id,
            candidate_id=doc["candidate"]["run_id"],
            baseline_id=doc["baseline"]["run_id"],
            paired_cases=doc["paired_cases"],
            warnings=doc.get("warnings") or [],
            criteria=doc["criteria"],
            sample_size_notes=doc.get("sample_size_notes") or [],
            cost=doc.get("cost"),
            slices=doc.get("slices") or [],
            min_slice_support=doc.get("min_slice_support"),
            changed=sets.get("changed") or {},
            only_in_candidate=sets.get("only_in_candidate") or [],
            only_in_baseline=sets.get("only_in_baseline") or [],
            has_policy=doc.get("policy") is not None,
            decisions=doc.get("decisions") or [],
            gate=doc.get("gate"),
            gate_reason=doc.get("gate_reason"),
            exit_code=doc.get("exit_code"),  # type: ignore[arg-type]
            doc=doc,
        )

    @property
    def flipped(self) -> list[FlippedGroup]:
        """The paired cases whose value changed, per criterion: what `compare` and the HTML page list."""
        return flipped_groups(self.doc)

    @property
    def mixed_scopes(self) -> bool:
        """Whether the policy decided some criteria on the candidate alone besides those against the baseline."""
        return any(d.get("scope") == "run" for d in self.decisions)


@dataclass(frozen=True)
class DecisionView:
    """One run decided alone by a release policy's single-run decisions (no baseline)."""

    doc_id: str
    run_id: Any
    cases: int
    decisions: Sequence[Mapping[str, Any]]
    gate: str
    exit_code: int
    block_on: Sequence[str]

    @classmethod
    def of(cls, doc: Mapping[str, Any], doc_id: str) -> DecisionView:
        return cls(
            doc_id=doc_id,
            run_id=doc["run"]["run_id"],
            cases=doc["run"]["cases"],
            decisions=doc["decisions"],
            gate=doc["gate"],
            exit_code=doc["exit_code"],
            block_on=list((doc.get("policy") or {}).get("block_on") or []),
        )


@dataclass(frozen=True)
class GateView:
    """What the pytest session's gate (`--oloproof-baseline` / `--oloproof-policy`) decided, or why it could not."""

    comparison: ComparisonView | None = None
    decision: DecisionView | None = None
    #: "Comparison" or "Decision" with the error that prevented it
    failure: tuple[str, str] | None = None

    @classmethod
    def of(cls, gate: Any) -> GateView:
        """From a `compare.comparison.SessionGate` after `apply`."""
        if gate.failure is not None:
            what, exc = gate.failure
            return cls(failure=(what, str(exc)))
        if gate.decision is not None:
            return cls(decision=DecisionView.of(gate.decision[1], gate.decision[0]))
        if gate.comparison is not None:
            return cls(comparison=ComparisonView.of(gate.comparison[1], gate.comparison[0]))
        return cls()


@dataclass(frozen=True)
class PlanView:
    """How many cases would decide each undecided decision of a policy (`oloproof plan`); stores nothing."""

    #: "run" (single-run decisions) or "comparison"
    kind: str
    #: the run's id, or the comparison's
    ref: Any
    #: the run's cases, or the comparison's paired cases
    cases: int
    policy: str
    #: each decision's name, criterion, test, outcome, reason and plan line (None when decided)
    rows: list[dict[str, Any]]

    @classmethod
    def of(cls, kind: str, ref: str, doc: Mapping[str, Any], policy: str) -> PlanView:
        """From a decision document (`kind` "run") or a comparison document recomputed under the policy."""
        run_id, cases = (doc["run"]["run_id"], doc["run"]["cases"]) if kind == "run" else (ref, doc["paired_cases"])
        keys = ("name", "criterion", "test", "outcome", "reason", "plan")
        return cls(kind, run_id, cases, policy, [{k: d.get(k) for k in keys} for d in doc["decisions"]])


@dataclass(frozen=True)
class JudgeValidationView:
    """A judge measured against human labels (`oloproof validate-judge`): agreement, kappa, the confusion table."""

    doc_id: str
    judge: Mapping[str, Any]
    n: int
    judged: int
    judge_failures: int
    agreement: Mapping[str, Any]
    kappa: Mapping[str, Any]
    #: human label × judge verdict counts of the judged examples (None when there are none)
    confusion: Mapping[str, Any] | None
    passed: bool
    reasons: Sequence[str]

    @classmethod
    def of(cls, record: Mapping[str, Any], doc_id: str) -> JudgeValidationView:
        return cls(
            doc_id=doc_id,
            judge=record["judge"],
            n=record["n"],
            judged=record["judged"],
            judge_failures=record["judge_failures"],
            agreement=record["agreement"],
            kappa=record["kappa"],
            confusion=record.get("confusion"),
            passed=bool(record["passed"]),
            reasons=record.get("reasons") or [],
        )
