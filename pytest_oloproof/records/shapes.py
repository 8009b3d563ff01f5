"""The shapes of the records Oloproof writes: a run (run.json, with its cases when loaded whole), a case
(one line of cases.jsonl), a diagnosis, a comparison and a release decision.

TypedDicts, so they cost nothing where records flow (a record stays the plain dict written and read
as JSON); `stored.py` validates the same shapes with pydantic where a record is read back from disk.
Keys marked `Required` are written on every record; the others only when they apply. `Any` stands
where the value is the user's own data (a case's input, output and metadata) or a settings object.
"""

from __future__ import annotations

from typing import Any, Literal, Required, TypedDict

Scalar = str | int | float | bool
Status = Literal["observed", "missing", "excluded"]
Gate = Literal["PASS", "BLOCK"]

# ------------------------------------------------------------------ a case


class CriterionRecord(TypedDict, total=False):
    """One criterion of one case: observed (a value in [0, 1]), missing or excluded (with a reason)."""

    status: Required[Status]
    value: bool | float | None
    reason: str | None
    detail: dict[str, Any]


class ErrorRecord(TypedDict, total=False):
    """A case's system error (`reason` says why: a stage error, a timeout, an internal error, …)."""

    stage: str | None
    type: str | None
    message: str
    traceback: str | None
    transient: bool | None
    reason: str | None


class JudgmentCounts(TypedDict):
    hit: int
    miss: int


class CaseCache(TypedDict, total=False):
    """How each cache served the case: "hit" or "miss" per stage, judgment hits and misses."""

    execution: str | None
    retrieve: str | None
    generate: str | None
    judgment: JudgmentCounts


class CaseRecord(TypedDict, total=False):
    """One line of cases.jsonl, and one entry of a loaded run's `cases` (a finishing run's record holds the
    slim summaries instead: id, criteria, metadata, relevant_position, context_truncated, error, cache,
    digest and usage_tally)."""

    id: Required[str]
    criteria: Required[dict[str, CriterionRecord]]
    plan: str  # "normal", or the diagnosis child run's plan
    attempts: int  # when a stage was retried
    input: Any
    expected: dict[str, Any]
    metadata: dict[str, Any]
    query: Any
    retrieval: list[dict[str, Any]] | None
    context: list[int] | None
    dropped: list[dict[str, Any]]
    context_truncated: bool | None
    output: Any
    error: ErrorRecord | None
    relevant_position: int | Literal["none"] | None
    cache: CaseCache
    usage: dict[str, Any]
    timings: dict[str, Any]
    source: str | None
    digest: str | None  # of the case's input and expected data: a comparison tells a changed case by it
    usage_tally: dict[str, Any]  # slim summaries only: per-model call and token counts


# ------------------------------------------------------------------ a run


class EvaluatorRecord(TypedDict, total=False):
    """One evaluator of a run, in the order the run declared it (the order of its metrics table)."""

    criterion: Required[str]
    type: str | None
    kind: str | None
    asserts: bool | None
    settings: dict[str, Any] | None
    identity: str | None


class MetricRecord(TypedDict, total=False):
    """One criterion's estimate over a run: its kind, counts, value and interval."""

    kind: Required[str]
    observed: Required[int]
    missing: Required[int]
    excluded: Required[int]
    value: float | None
    low: Required[float]
    high: Required[float]
    passed: int
    method: str
    note: str
    confidence: float
    clustered: bool
    missing_reasons: dict[str, int]
    excluded_reasons: dict[str, int]
    missing_at_worst: dict[str, Any]  # the interval with every missing case at its worst value


class RunCounts(TypedDict, total=False):
    cases: int
    errors: int
    internal_errors: int


class RunSummary(TypedDict, total=False):
    """What a run's summary adds to its header when it finishes (stats.aggregate.summarize_run, then
    the usage fields), or what a reader computes for a run.json holding only its start header (`note`)."""

    metrics: Required[dict[str, MetricRecord]]
    slices: Required[list[Any]]
    cache: Required[dict[str, dict[str, int]]]  # per cache (execution, judgment, retrieve, generate): hit, miss
    counts: Required[RunCounts]
    usage: dict[str, Any] | None
    budget: dict[str, Any] | None
    note: str
    repeat_summary: dict[str, Any]  # `repeats: N`: flaky cases and the variance split (stats/repeats.py)


class RunRecord(TypedDict, total=False):
    """run.json: the header written when a run starts, completed with its summary when it ends;
    a loaded run also holds its `cases`."""

    schema: Required[Literal["oloproof.run/1"]]
    run_id: Required[str]
    status: Required[Literal["complete", "incomplete", "partial"]]  # partial: a shard (`shard`, `planned`)
    shard: dict[str, int]  # a shard's run: {index, count}
    planned: dict[str, Any]  # a shard's run: the whole case set's {case_set_digest, cases}
    merged_from: list[str]  # a merged run: the shards' run ids, in shard order
    oloproof_version: str
    purpose: str
    config_path: str
    cache_mode: str
    labels: dict[str, Any]
    started_at: str | None
    finished_at: str | None
    config: dict[str, Any] | None
    pricing: dict[str, Any] | None
    case_set_digest: str | None
    system: Required[dict[str, Any]]
    evaluators: list[EvaluatorRecord]
    metrics: dict[str, MetricRecord]
    slices: list[Any]
    cache: dict[str, dict[str, int]]  # per cache (execution, judgment, retrieve, generate): hit, miss
    cache_misses: dict[str, Any] | None
    #: wiring checks whose sign held in every case (evaluate/wiring.py); [] when none did
    wiring: list[dict[str, Any]]
    usage: dict[str, Any] | None
    budget: dict[str, Any] | None
    counts: RunCounts
    repeats: int  # `repeats: N` (only when N > 1)
    repeat_retrieval: bool
    repeat_summary: dict[str, Any]  # flaky cases and the variance split (stats/repeats.py)
    confidence: float
    min_slice_support: int
    seed: int | None
    note: str  # a summary computed from the cases of a run whose run.json holds only its start header
    decision: dict[str, Any]  # the JSON run report: the release decision or comparison its gate made
    comparison: dict[str, Any]
    corrected: dict[str, Any]  # computed when read, never stored: judge-corrected rates from imported labels
    cases: list[CaseRecord]


# ------------------------------------------------------------------ documents


class DiagnosisEntry(TypedDict, total=False):
    """One diagnosed case: its label and its criterion's value in the original run and each child run."""

    id: Required[str]
    label: Required[str]
    reason: Required[str]
    strength: Required[str]
    best_relevant_position: int | str | None
    original: Required[dict[str, Any]]
    control: Required[dict[str, Any]]
    intervention: Required[dict[str, Any]]
    replay: dict[str, Any]
    replay_control: dict[str, Any]
    unstable: bool


class DiagnosisDoc(TypedDict, total=False):
    """An `oloproof.diagnosis/1` document (gold-context diagnosis, or a top-k or reranker replay)."""

    schema: Required[Literal["oloproof.diagnosis/1"]]
    run_id: Required[str]
    criterion: Required[str]
    evaluator: dict[str, Any]
    intervention: Required[dict[str, Any]]
    selected: Required[list[str]]
    undiagnosable: Required[list[str]]
    missing: dict[str, dict[str, Any]]
    system: dict[str, Any] | None
    counts: Required[dict[str, Any]]
    cases: Required[list[DiagnosisEntry]]
    implicated: list[dict[str, Any]]
    candidate_experiments: list[dict[str, Any]]
    child_runs: Required[dict[str, str]]  # child run ids: gold_context, control (and replay, replay_control)
    gold_context_diagnosis: str


class RunHeadline(TypedDict, total=False):
    """Which run a comparison or decision is about."""

    run_id: Required[str | None]  # a stored run always has one
    status: str | None
    cases: int
    system: dict[str, Any] | None
    source: str | None


class ComparisonDoc(TypedDict, total=False):
    """An `oloproof.comparison/1` document."""

    schema: Required[Literal["oloproof.comparison/1"]]
    candidate: Required[RunHeadline]
    baseline: Required[RunHeadline]
    paired_cases: Required[int]
    confidence: float
    seed: int
    case_sets: dict[str, Any]
    warnings: list[str]
    criteria: Required[dict[str, dict[str, Any]]]
    sample_size_notes: list[str]
    slices: list[dict[str, Any]]
    min_slice_support: int | None
    policy: dict[str, Any] | None
    decisions: list[dict[str, Any]]  # name, criterion, test, margin/threshold/max_failures, outcome, reason
    gate: Gate | None
    gate_reason: str | None
    exit_code: Required[int]
    cases: list[dict[str, Any]]  # each case: in which run(s), and what changed
    cost: dict[str, Any] | None


class DecisionDoc(TypedDict):
    """An `oloproof.decision/1` document: a policy's decisions on one run."""

    schema: str  # oloproof.decision/1
    run: RunHeadline
    confidence: float
    seed: int
    policy: dict[str, Any]
    decisions: list[dict[str, Any]]  # name, criterion, test, margin/threshold/max_failures, outcome, reason
    gate: str  # PASS or BLOCK
    exit_code: int
