"""The stored schemas, read strictly: run.json, cases.jsonl lines, stored diagnoses and
comparisons, and execution cache entries.

Every reader of the store goes through these models, so a garbled or
wrong-shaped record is an error naming its file, line and field instead of a
case silently skipped or an AttributeError far away. The models check the type
of every field Oloproof reads and accept any other key: fields added later are
optional when read, and a newer writer's extra fields never break an older reader.
Readers get the validated mapping back unchanged (the models are a check, not a copy).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from .cases import json_type_name


class _Stored(BaseModel):
    """Strict types (no "1" for 1, no 1 for true), unknown keys kept."""

    model_config = ConfigDict(extra="allow", strict=True, populate_by_name=True)


class StoredCandidate(_Stored):
    """A recorded candidate: what the stage contract checks is checked again here, and no more
    (a retriever's chunk ids and texts are its own business), so every record a run writes reads back."""

    position: int
    doc_id: str
    chunk_id: str | int | None = None
    score: float | None = None
    tokens: int | None = None
    text: Any = None
    metadata: dict[str, Any] | None = None


class StoredDropped(_Stored):
    position: int
    reason: str


class StoredCriterion(_Stored):
    """One criterion of one case: an observed one has a value, a number in [0, 1] (what every reader assumes)."""

    status: Literal["observed", "missing", "excluded"]
    value: bool | float | None = None
    reason: str | None = None

    @model_validator(mode="after")
    def _value_fits_status(self) -> StoredCriterion:
        if self.status == "observed":
            if self.value is None:
                raise ValueError("an observed criterion has no value (it should be a number in [0, 1])")
            if not in_unit_interval(self.value):
                raise ValueError(f"value should be a number in [0, 1] (got {self.value!r})")
        return self


def in_unit_interval(value: Any) -> bool:
    """Whether `value` is a criterion value every reader accepts: a finite number in [0, 1]."""
    return isinstance(value, (int, float)) and math.isfinite(value) and 0.0 <= value <= 1.0


class StoredError(_Stored):
    stage: str | None = None
    type: str | None = None
    message: str = ""
    traceback: str | None = None
    transient: bool | None = None
    reason: str | None = None


class StoredRelevant(_Stored):
    doc_id: str
    chunk_id: str | None = None
    grade: int = 1


class StoredGold(_Stored):
    doc_id: str | None = None
    chunk_id: str | None = None
    text: str


class StoredExpected(_Stored):
    relevant: list[StoredRelevant] | None = None
    gold_context: list[StoredGold] | None = None


class StoredCall(_Stored):
    """One paid call a stage or judge reported (usage.make_entry)."""

    model: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_input_tokens: int | None = None


class StoredTotal(_Stored):
    calls: int
    tokens: int | None = None
    cost: float | None = None


class StoredTotals(_Stored):
    spent: StoredTotal | None = None
    saved: StoredTotal | None = None


class StoredSavedCalls(_Stored):
    judges: dict[str, list[StoredCall]] | None = None
    stages: dict[str, list[StoredCall]] | None = None


class StoredCaseUsage(StoredSavedCalls):
    """A case's `usage`: the calls per judge and per stage, those the caches saved, and the totals."""

    saved: StoredSavedCalls | None = None
    totals: StoredTotals | None = None


class StoredJudgmentCounts(_Stored):
    hit: int = 0
    miss: int = 0


class StoredCaseCache(_Stored):
    execution: str | None = None
    retrieve: str | None = None
    generate: str | None = None
    judgment: StoredJudgmentCounts | None = None


class StoredMetadata(_Stored):
    cluster: str | int | float | bool | None = None  # a key the clustered intervals group by


class StoredCase(_Stored):
    """One line of cases.jsonl (and one entry of a run report's `cases`)."""

    id: str
    criteria: dict[str, StoredCriterion]
    retrieval: list[StoredCandidate] | None = None
    context: list[int] | None = None
    dropped: list[StoredDropped] = []
    context_truncated: bool | None = None
    output: Any = None
    error: StoredError | None = None
    input: Any = None
    expected: StoredExpected | None = None
    metadata: StoredMetadata | None = None
    relevant_position: int | Literal["none"] | None = None
    cache: StoredCaseCache | None = None
    usage: StoredCaseUsage | None = None
    source: str | None = None


Scalar = str | int | float | bool


class StoredSystem(_Stored):
    """The effective system settings (a decorator's values are not type-checked, so names may be any scalar)."""

    name: Scalar
    kind: str | None = None
    version: Scalar | None = None
    depth: int | None = None
    top_k: int | None = None
    token_budget: int | None = None
    index_version: Scalar | None = None


class StoredEvaluator(_Stored):
    criterion: str
    type: str | None = None
    kind: str | None = None
    asserts: bool | None = None
    settings: dict[str, Any] | None = None


class StoredMetric(_Stored):
    kind: str
    observed: int
    missing: int
    excluded: int
    value: float | None = None
    low: float  # an interval is always written, [0, 1] when nothing was observed
    high: float
    passed: int | None = None
    missing_reasons: dict[str, int] = {}
    excluded_reasons: dict[str, int] = {}


class StoredHitMiss(_Stored):
    hit: int
    miss: int


class StoredCacheCounts(_Stored):
    """run.json `cache`: hits and misses per cache, as the `Cache:` and `Stages:` lines print them."""

    execution: StoredHitMiss
    judgment: StoredHitMiss
    retrieve: StoredHitMiss
    generate: StoredHitMiss


class StoredMissReason(_Stored):
    reason: str
    count: int
    detail: str | None = None


class StoredStageMisses(_Stored):
    miss: int
    reasons: list[StoredMissReason]


class StoredCacheMisses(_Stored):
    """run.json `cache_misses`: why the caches missed, per stage."""

    note: str | None = None
    previous_run: str | None = None
    stages: dict[str, StoredStageMisses] | None = None
    new_cases: int | None = None


class StoredSource(_Stored):
    calls: int
    input_tokens: int | None
    output_tokens: int | None
    cached_input_tokens: int | None = None
    unknown_calls: int
    cost: float | None = None
    unpriced_models: list[str] | None = None


class StoredSaved(_Stored):
    judges: StoredSource
    system: StoredSource
    calls: int
    tokens: int | None
    cost: float | None


class StoredUsage(_Stored):
    """run.json `usage`: what the `Tokens:` line prints."""

    judges: StoredSource
    system: StoredSource
    saved: StoredSaved
    priced: bool = False


class StoredBudget(_Stored):
    """run.json `budget`: the limits, and the cases the budget guard stopped."""

    max_cost: float | None = None
    max_judge_calls: int | None = None
    exhausted: bool = False  # a start header holds only the limits
    cases_not_executed: list[str] = []
    cases_not_judged: list[str] = []
    criteria_missing: int = 0

    @model_validator(mode="after")
    def _cases_when_exhausted(self) -> StoredBudget:
        keys = ("cases_not_executed", "cases_not_judged", "criteria_missing")
        absent = [key for key in keys if key not in self.model_fields_set]
        if self.exhausted and absent:
            raise ValueError(f"exhausted, but no {', '.join(absent)}")
        return self


class StoredCounts(_Stored):
    cases: int | None = None
    errors: int | None = None
    internal_errors: int | None = None


class StoredSliceRow(_Stored):
    """One computed slice row of a finished run.json (the start header lists slice names instead)."""

    slice: str
    value: Scalar | None
    criterion: str
    support: int
    kind: str | None = None
    insufficient_support: bool | None = None
    value_estimate: float | None = None
    low: float | None = None
    high: float | None = None
    passed: int | None = None

    @model_validator(mode="after")
    def _estimate_when_supported(self) -> StoredSliceRow:
        if self.insufficient_support:
            return self
        wanted = ("kind", "value_estimate", "low", "high") + (("passed",) if self.kind == "rate" else ())
        absent = [key for key in wanted if getattr(self, key) is None]
        if absent:
            raise ValueError(f"a row with enough support but no {', '.join(absent)}")
        return self


class StoredShard(_Stored):
    """A shard's run (`--oloproof-shard I/N`): shard `index` of `count`."""

    index: int
    count: int

    @model_validator(mode="after")
    def _index_in_range(self) -> StoredShard:
        if not 1 <= self.index <= self.count:
            raise ValueError(f"shard index {self.index} is not between 1 and count {self.count}")
        return self


class StoredPlanned(_Stored):
    """The whole case set a shard's run is part of."""

    case_set_digest: str | None
    cases: list[str]


class StoredRun(_Stored):
    """run.json: the header written when a run starts, completed with its summary when it ends.

    `partial`: a finished run of part of a planned case set (a shard): it carries `shard` and `planned`.
    """

    schema_: Literal["oloproof.run/1"] = Field(alias="schema")
    run_id: str
    status: Literal["complete", "incomplete", "partial"]
    shard: StoredShard | None = None
    planned: StoredPlanned | None = None
    merged_from: list[str] | None = None
    purpose: str = "run"
    started_at: str | None = None
    finished_at: str | None = None
    config: dict[str, Any] | None = None
    pricing: dict[str, Any] | None = None
    case_set_digest: str | None = None
    system: StoredSystem
    evaluators: list[StoredEvaluator] = []
    metrics: dict[str, StoredMetric] = {}
    slices: list[Any] = []
    cache: StoredCacheCounts | None = None
    cache_misses: StoredCacheMisses | None = None
    usage: StoredUsage | None = None
    budget: StoredBudget | None = None
    counts: StoredCounts | None = None
    confidence: float = 0.95  # readers fall back to these defaults when a key is absent, never on null
    min_slice_support: int = 5
    seed: int | None = None


class StoredExecution(_Stored):
    """An execution cache entry's value: every field a served record is rebuilt from, none defaulted."""

    retrieval: list[StoredCandidate] | None
    context: list[int] | None
    dropped: list[StoredDropped]
    context_truncated: bool
    output: Any


def problems(exc: ValidationError, prefix: str = "") -> str:
    """What pydantic found, as `key.path: message (got value)`, the first few joined by '; '."""
    out = []
    for err in exc.errors(include_url=False)[:3]:
        path = prefix
        for part in err["loc"]:
            path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
        got = _preview(err.get("input"))
        what = re.sub(r" or instance of \w+", "", err["msg"]).replace("Input should be", "should be")
        if err["type"] == "value_error":  # a model's own rule: its message says what is wrong
            out.append(f"{path}: {what.removeprefix('Value error, ')}")
            continue
        if not path:
            out.append(f"expected a JSON object, got {json_type_name(err.get('input'))}")
            continue
        if err["type"] == "missing":
            out.append(f"{path}: missing required key")
        else:
            out.append(f"{path}: {what} (got {got})")
    more = len(exc.errors()) - len(out)
    return "; ".join(out) + (f"; and {more} more" if more > 0 else "")


def check_case(value: Any, prefix: str = "") -> str | None:
    """None if `value` is a well-formed stored case, else what is wrong with it (naming the case when it has an id)."""
    try:
        StoredCase.model_validate(value)
    except ValidationError as exc:
        case_id = value.get("id") if isinstance(value, Mapping) else None
        found = problems(exc, prefix)
        if not isinstance(case_id, str):
            return found
        return f'{found} (case "{case_id}")' if prefix else f'case "{case_id}": {found}'
    return None


def check_run(value: Any, prefix: str = "") -> str | None:
    """None if `value` is a well-formed run.json (or run report head), else what is wrong with it.

    A finished record (status complete, or `finished_at` written) must hold the summary every
    finished run writes: `counts` (with `cases`: without it a lost case line cannot be told from
    a smaller run), `metrics`, `cache` and computed `slices`. Only a start header (an incomplete
    run without `finished_at`) goes without them; the store computes its summary from its cases.
    """
    try:
        StoredRun.model_validate(value)
    except ValidationError as exc:
        return problems(exc, prefix)
    if value["status"] == "partial" and (value.get("shard") is None or value.get("planned") is None):
        return f"{prefix}status: partial, but no shard and planned case set (what `oloproof merge` reads)"
    if is_start_header(value):  # its summary is computed from its cases: what that computation reads
        try:
            StoredStartHeader.model_validate(value)
        except ValidationError as exc:
            return problems(exc, prefix)
        return None
    why = f"a {value['status']} run.json records it, and a reader cannot tell lost cases without it"
    for key in ("counts", "metrics", "cache"):
        if value.get(key) is None:
            return f"{prefix}{key}: {'missing' if key not in value else 'null'} ({why})"
    if value["counts"].get("cases") is None:
        return f"{prefix}counts.cases: missing ({why})"
    try:
        _SLICE_ROWS.validate_python(value.get("slices") or [])
    except ValidationError as exc:
        return problems(exc, f"{prefix}slices")
    return None


class StoredStartEvaluator(StoredEvaluator):
    kind: str


class StoredStartHeader(_Stored):
    """What the summary of a run.json that holds only its start header is computed from."""

    evaluators: list[StoredStartEvaluator] = []
    slices: list[str] = []


def is_start_header(run: Mapping[str, Any]) -> bool:
    """Whether a run.json holds only the header written when its run started (killed, or still going)."""
    return run.get("status") == "incomplete" and "finished_at" not in run


_SLICE_ROWS = TypeAdapter(list[StoredSliceRow])


def is_execution_entry(value: Any, *, rag: bool) -> bool:
    """Whether a cached execution value can stand in for executing the case (else it is a miss).

    The check StoredExecution describes, written out by hand: it runs on every execution-cache
    hit (a warm run's one lookup per case), where pydantic would cost several times as much.
    """
    if type(value) is not dict or not _EXECUTION_KEYS <= value.keys():
        return False
    retrieval, context, dropped = value["retrieval"], value["context"], value["dropped"]
    if retrieval is not None and not is_candidates(retrieval):
        return False
    if context is not None and not (type(context) is list and all(type(p) is int for p in context)):
        return False
    if type(dropped) is not list or not all(
        type(d) is dict and type(d.get("position")) is int and type(d.get("reason")) is str for d in dropped
    ):
        return False
    if type(value["context_truncated"]) is not bool:
        return False
    if rag:
        return retrieval is not None and context is not None and isinstance(value["output"], Mapping)
    return True


def is_candidates(value: Any) -> bool:
    """Whether a cached retrieve value is a list of well-formed candidates (StoredCandidate, by hand)."""
    return type(value) is list and all(_is_candidate(c) for c in value)


_EXECUTION_KEYS = frozenset(StoredExecution.model_fields)


def _is_candidate(c: Any) -> bool:
    if type(c) is not dict or type(c.get("position")) is not int or type(c.get("doc_id")) is not str:
        return False
    chunk, score, tokens, meta = c.get("chunk_id"), c.get("score"), c.get("tokens"), c.get("metadata")
    return (
        (chunk is None or type(chunk) in (str, int))
        and (score is None or type(score) in (float, int))
        and (tokens is None or type(tokens) is int)
        and (meta is None or type(meta) is dict)
    )


def _preview(value: Any, limit: int = 40) -> str:
    import json

    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ------------------------------------------------------------------ stored diagnoses and comparisons
# What `oloproof inspect` (text and --json) and `oloproof report` read of a stored document, typed,
# so a foreign or edited document is an error naming its file and field, never a crash in a renderer.


class StoredIntervention(_Stored):
    name: Literal["gold-context", "top-k", "reranker", "token-budget"]
    settings: dict[str, Any] | None = None


class StoredDiagnosisEntry(_Stored):
    """One diagnosed case: its label and its criterion's value in the original run and each child run."""

    id: str
    label: str
    reason: str
    strength: str
    best_relevant_position: int | str | None = None
    original: StoredCriterion
    control: StoredCriterion
    intervention: StoredCriterion


class StoredReplayEntry(StoredDiagnosisEntry):
    replay: StoredCriterion
    replay_control: StoredCriterion
    unstable: bool


class StoredMissingGroup(_Stored):
    count: int
    of: int
    reasons: dict[str, int]
    example: str | None = None
    cases: list[str]


class StoredGoldTally(_Stored):
    diagnosed: int
    recovered: int
    labels: dict[str, int]


class StoredGoldCounts(StoredGoldTally):
    selected: int
    undiagnosable: int
    control_passed: int
    unstable: int
    not_diagnosed: int


class StoredReplayCounts(_Stored):
    selected: int
    undiagnosable: int
    control_passed: int
    unstable: int
    not_diagnosed: int
    diagnosed: int
    recovered: int
    confirm_labels: list[str]
    confirmable: int
    confirmed: int
    replay_not_counted: int = 0
    gold: StoredGoldTally


class StoredImplicated(_Stored):
    factor: str
    label: str
    count: int
    of: int
    basis: str


class StoredExperiment(_Stored):
    factor: str
    experiment: str


class StoredGoldChildren(_Stored):
    gold_context: str | None
    control: str | None


class StoredReplayChildren(StoredGoldChildren):
    replay: str | None
    replay_control: str | None


class _StoredDiagnosis(_Stored):
    schema_: Literal["oloproof.diagnosis/1"] = Field(alias="schema")
    run_id: str
    criterion: str
    intervention: StoredIntervention
    selected: list[str]
    undiagnosable: list[str]
    missing: dict[str, StoredMissingGroup] = {}
    system: dict[str, Any] | None = None


class StoredGoldDiagnosis(_StoredDiagnosis):
    """An `oloproof.diagnosis/1` document of a gold-context diagnosis."""

    counts: StoredGoldCounts
    cases: list[StoredDiagnosisEntry]
    implicated: list[StoredImplicated]
    candidate_experiments: list[StoredExperiment]
    child_runs: StoredGoldChildren


class StoredReplayDiagnosis(_StoredDiagnosis):
    """An `oloproof.diagnosis/1` document of a top-k, reranker or token-budget replay."""

    counts: StoredReplayCounts
    cases: list[StoredReplayEntry]
    gold_context_diagnosis: str
    child_runs: StoredReplayChildren


class StoredPrinted(_Stored):
    estimate: str | None
    low: str
    high: str


class StoredDifference(_Stored):
    """One criterion of a comparison; a difference with pairs has its printed interval."""

    paired: int
    missing: int
    excluded: int
    estimate: float | None = None
    low: float | None = None
    high: float | None = None
    printed: StoredPrinted | None = None
    missing_reasons: dict[str, int] = {}
    excluded_reasons: dict[str, int] = {}
    missing_cases: list[str] = []
    regressed: list[str] | None = None
    improved: list[str] | None = None
    changed: list[str] | None = None

    @model_validator(mode="after")
    def _printed_when_paired(self) -> StoredDifference:
        if self.paired and self.printed is None:
            raise ValueError(f"{self.paired} pairs but no printed interval (key printed)")
        return self


class StoredSliceDifference(_Stored):
    slice: str
    value: Scalar | None
    criterion: str
    paired: int
    insufficient_support: bool = False
    printed: StoredPrinted | None = None

    @model_validator(mode="after")
    def _printed_when_supported(self) -> StoredSliceDifference:
        if not self.insufficient_support and self.printed is None:
            raise ValueError("a row with enough support but no printed interval (key printed)")
        return self


class StoredDecision(_Stored):
    """One decision row: a comparison's (with its margin) or a single run's (threshold or failure limit)."""

    name: str
    criterion: str
    test: str
    margin: float | None = None
    threshold: float | None = None
    max_failures: int | None = None
    outcome: Literal["PASS", "FAIL", "INSUFFICIENT_EVIDENCE"]
    reason: str

    @model_validator(mode="after")
    def _has_its_limit(self) -> StoredDecision:
        if self.margin is None and self.threshold is None and self.max_failures is None:
            raise ValueError("a decision needs its margin, threshold or max_failures")
        return self


class StoredDecisionDoc(_Stored):
    """An `oloproof.decision/1` document: a policy's decisions on one run."""

    schema_: Literal["oloproof.decision/1"] = Field(alias="schema")
    run: StoredRunSummary
    decisions: list[StoredDecision]
    gate: Literal["PASS", "BLOCK"]
    exit_code: int


class StoredRunSummary(_Stored):
    run_id: str
    status: str | None = None
    cases: int | None = None
    system: dict[str, Any] | None = None
    source: str | None = None


class StoredCaseSets(_Stored):
    only_in_candidate: list[str] = []
    only_in_baseline: list[str] = []
    changed: dict[str, list[str]] = {}


class StoredCostTotals(_Stored):
    cost: float | None  # both keys always written, null when unknown
    tokens: float | None


class StoredCost(_Stored):
    paired: int = 0
    candidate: StoredCostTotals | None = None
    baseline: StoredCostTotals | None = None
    difference: StoredCostTotals | None = None
    difference_per_case: StoredCostTotals | None = None

    @model_validator(mode="after")
    def _totals_when_paired(self) -> StoredCost:
        parts = (self.candidate, self.baseline, self.difference, self.difference_per_case)
        if self.paired and any(part is None for part in parts):
            raise ValueError("paired cases but not every total (candidate, baseline, difference, difference_per_case)")
        return self


class StoredComparison(_Stored):
    """An `oloproof.comparison/1` document."""

    schema_: Literal["oloproof.comparison/1"] = Field(alias="schema")
    candidate: StoredRunSummary
    baseline: StoredRunSummary
    paired_cases: int
    case_sets: StoredCaseSets | None = None
    warnings: list[str] = []
    criteria: dict[str, StoredDifference]
    sample_size_notes: list[str] = []
    slices: list[StoredSliceDifference] = []
    min_slice_support: int | None = None
    policy: dict[str, Any] | None = None
    decisions: list[StoredDecision] = []
    gate: Literal["PASS", "BLOCK"] | None = None
    gate_reason: str | None = None
    exit_code: int
    cost: StoredCost | None = None


class StoredProbeJudge(_Stored):
    type: str
    criterion: str
    identity: str


class StoredProbeCase(_Stored):
    """One probed case: its verdicts (the recorded one first; None for an ask without a verdict)."""

    id: str
    verdicts: list[Literal["pass", "fail"] | None]
    flipped: bool | None
    missing: list[dict[str, Any]]


class StoredFlipRate(_Stored):
    flipped: int
    of: int
    rate: float | None
    low: float | None
    high: float | None
    confidence: float


class StoredJudgeProbe(_Stored):
    """An `oloproof.judge_probe/1` document (`oloproof judge probe`)."""

    schema_: Literal["oloproof.judge_probe/1"] = Field(alias="schema")
    run_id: str
    criterion: str
    judge: StoredProbeJudge
    times: int
    counts: dict[str, int]
    flip_rate: StoredFlipRate
    cases: list[StoredProbeCase]


def check_doc(kind: str, value: Any) -> str | None:
    """None if `value` is a well-formed stored diagnosis, comparison, decision or judge probe, else what is wrong."""
    model: type[_Stored]
    if kind == "comparison":
        model = StoredComparison
    elif kind == "decision":
        model = StoredDecisionDoc
    elif kind == "judge_probe":
        model = StoredJudgeProbe
    elif kind == "diagnosis":
        intervention = value.get("intervention") if isinstance(value, Mapping) else None
        name = intervention.get("name") if isinstance(intervention, Mapping) else None
        model = StoredReplayDiagnosis if name in ("top-k", "reranker", "token-budget") else StoredGoldDiagnosis
    else:
        return None
    try:
        model.model_validate(value)
    except ValidationError as exc:
        return problems(exc)
    return None
