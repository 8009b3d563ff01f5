"""Diagnosis: re-run a run's failed cases under interventions and label why they failed.

The core both faces drive: `oloproof diagnose` calls `Diagnoser.run_all`; the
pytest form builds one item per selected case, calls `Diagnoser.run_case` in
each item, `record` on the controller, and `finish` at session end. Nothing
here imports pytest.

A diagnosis is read case by case: a control (nothing changed, every cache
bypassed) guards against flaky cases, and an intervention (gold context, a
top-k, reranker or token-budget replay) tells which stage the failure is implicated
in. The words are deliberately weak: a factor is *implicated*, an experiment is
a *candidate*; recovery under an intervention never establishes a cause.

The diagnoser computes and stores the document; report/ renders it (report.text.diagnosis_lines).
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, cast

from pytest_oloproof.engine.recorder import RunRecorder
from pytest_oloproof.engine.setup import RunSetup, case_from_record, pricing_table, safe_settings
from pytest_oloproof.engine.stages import Engine, ExecutionPlan
from pytest_oloproof.engine.system_resolution import ResolvedSystem
from pytest_oloproof.errors import OloproofError, StoreError
from pytest_oloproof.evaluators.base import Evaluator
from pytest_oloproof.evaluators.retrieval import qrels_of
from pytest_oloproof.records.access import asserting, by_id, evaluator_rows, recorded_relevance_unit
from pytest_oloproof.records.cases import Case
from pytest_oloproof.records.repeats import flaky_criteria
from pytest_oloproof.records.shapes import CaseRecord, DiagnosisDoc, RunRecord
from pytest_oloproof.system.declare import load_object
from pytest_oloproof.usage import accounting as usage

from .labels import (
    CONFIRMS,
    FACTORS,
    LABELS,
    NOT_DIAGNOSED,
    REPLAYS,
    UNSTABLE,
    all_missing,
    failed,
    observed,
    passed,
)

SCHEMA = "oloproof.diagnosis/1"
INTERVENTIONS = ("gold-context", "top-k", "reranker", "token-budget")
# child-run kinds: key in the diagnosis document, run-header purpose, text in "Child runs:"
_CHILD = {
    "gold-context": ("gold_context", "diagnosis-gold-context"),
    "control": ("control", "diagnosis-control"),
    "replay": ("replay", "diagnosis-top-k"),
    "replay-control": ("replay_control", "diagnosis-replay-control"),
}


class DiagnosisError(OloproofError):
    """A diagnosis that cannot start (unknown run, incomplete run, bad options): exit 2, nothing written."""


@dataclass(frozen=True)
class Request:
    """What to diagnose and how (the CLI arguments, or the --oloproof-* options)."""

    run: str
    intervention: str = "gold-context"
    criterion: str | None = None
    top_k: int | None = None
    reranker: str | None = None
    token_budget: int | None = None
    fresh: bool = False


@dataclass
class Result:
    """A finished diagnosis: the stored document and its id (None when nothing was selected, or not stored);
    report.text.diagnosis_lines renders it."""

    doc: DiagnosisDoc
    doc_id: str | None
    #: what this diagnosis's re-execution spent (its child runs' `usage`); not part of the stored document
    usage: dict[str, Any] | None = None

    @property
    def measured_nothing(self) -> bool:
        """Every selected case lacks a value under the intervention or its control (exit non-zero)."""
        return all_missing(self.doc)

    def to_json(self) -> dict[str, Any]:
        out = {"id": self.doc_id, **self.doc}
        if self.usage is not None:
            out["usage"] = self.usage
        return out


# ------------------------------------------------------------------ per-case pieces


def value_of(rec: Mapping[str, Any], criterion: str) -> dict[str, Any]:
    """The criterion's value in a case record, reduced to status/value/reason."""
    c = (rec.get("criteria") or {}).get(criterion) or {"status": "missing", "reason": "not_evaluated"}
    out = {"status": c["status"]}
    for key in ("value", "reason"):
        if c.get(key) is not None:
            out[key] = c[key]
    message = (c.get("detail") or {}).get("message") if c["status"] == "missing" else None
    if message:
        out["message"] = str(message)  # what went wrong (e.g. the reranker's exception), for the output
    return out


def relevant_evidence(rec: Mapping[str, Any], unit: str) -> tuple[list[int], bool] | None:
    """Positions of relevant candidates in the recorded retrieval, and whether any entered the context.

    None when the case has no relevance labels (or none with grade > 0).
    """
    case = case_from_record(rec)
    if not case.relevant:
        return None
    qrels = qrels_of(case.relevant, unit)  # type: ignore[arg-type]
    if not any(g > 0 for g in qrels.values()):
        return None
    positions = []
    for c in rec.get("retrieval") or []:
        key = (c["doc_id"], c.get("chunk_id")) if unit == "chunk" else c["doc_id"]
        if qrels.get(key, 0) > 0:
            positions.append(int(c["position"]))
    in_context = bool(set(positions) & set(rec.get("context") or []))
    return positions, in_context


def label_case(
    original: Mapping[str, Any],
    criterion: str,
    control: Mapping[str, Any],
    intervention: Mapping[str, Any],
    *,
    top_k: int,
    unit: str,
) -> dict[str, Any]:
    """One case's gold-context entry: label, reason, strength, best relevant position, the three values."""
    evidence = relevant_evidence(original, unit)
    best: int | str | None = None
    if evidence is not None:
        best = min(evidence[0]) if evidence[0] else "none"
    if passed(control):
        label, reason, strength = UNSTABLE, "passed_in_control", "not_diagnosed"
    elif intervention.get("status") != "observed":
        label, reason, strength = (
            NOT_DIAGNOSED,
            f"intervention_{intervention.get('reason', 'missing')}",
            "not_diagnosed",
        )
    elif control.get("status") != "observed":  # without the control, a flaky case cannot be told apart
        label, reason, strength = NOT_DIAGNOSED, f"control_{control.get('reason', 'missing')}", "not_diagnosed"
    else:
        if not passed(intervention):
            label = "GENERATION_FAILURE"
        elif evidence is None:
            label = "RECOVERED_UNLABELED"
        elif evidence[1]:
            label = "CONTEXT_DISTRACTION"
        elif not evidence[0]:
            label = "RETRIEVAL_MISS"
        elif min(evidence[0]) <= top_k:
            label = "CONTEXT_ASSEMBLY_LOSS"
        else:
            label = "RANKED_OUT"
        reason, strength = LABELS[label][0], LABELS[label][1]
    return {
        "id": original["id"],
        "label": label,
        "reason": reason,
        "strength": strength,
        "best_relevant_position": best,
        "original": value_of(original, criterion),
        "control": dict(control),
        "intervention": dict(intervention),
    }


#: Reason of an UNSTABLE case whose verdicts already differ across the parent run's repeats (`repeats: N`).
UNSTABLE_ACROSS_REPEATS = "verdicts_differ_across_repeats"


def unstable_across_repeats(rec: Mapping[str, Any], diagnoser: Diagnoser) -> dict[str, Any]:
    """The entry of a case the run's repeats already show to be unstable: labelled UNSTABLE without a re-run;
    its control and intervention values are excluded (never run), so they count as neither passed nor missing."""
    evidence = relevant_evidence(rec, diagnoser.unit)
    best: int | str | None = None
    if evidence is not None:
        best = min(evidence[0]) if evidence[0] else "none"
    not_run = {"status": "excluded", "reason": UNSTABLE_ACROSS_REPEATS}
    entry = {
        "id": rec["id"],
        "label": UNSTABLE,
        "reason": UNSTABLE_ACROSS_REPEATS,
        "strength": "not_diagnosed",
        "best_relevant_position": best,
        "original": value_of(rec, diagnoser.criterion),
        "control": dict(not_run),
        "intervention": dict(not_run),
    }
    if diagnoser.is_replay():
        entry["replay_control"] = dict(not_run)
        entry["replay"] = dict(not_run)
    return entry


def _not_run(v: Mapping[str, Any]) -> bool:
    """A value never measured on purpose (an UNSTABLE case of the run's repeats): not missing."""
    return v.get("status") == "excluded" and v.get("reason") == UNSTABLE_ACROSS_REPEATS


# ------------------------------------------------------------------ documents


def _label_counts(entries: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    counts = {label: 0 for label in LABELS}
    for e in entries:
        if e["label"] in counts:
            counts[e["label"]] += 1
    return counts


def _gold_tally(entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Diagnosed and recovered counts and the label counts of gold-context labels (UNSTABLE, NOT_DIAGNOSED aside)."""
    labels = _label_counts(entries)
    return {
        "diagnosed": sum(1 for e in entries if e["label"] not in (UNSTABLE, NOT_DIAGNOSED)),
        "recovered": sum(n for label, n in labels.items() if LABELS[label][1] == "intervention_recovery"),
        "labels": labels,
    }


def implicated(counts: Mapping[str, int], recovered: int, diagnosed: int) -> list[dict[str, Any]]:
    """The factor(s) with the largest count, each with its share; never a cause."""
    present = [(label, counts.get(label, 0)) for label in LABELS if label in FACTORS and counts.get(label, 0)]
    if not present:
        return []
    top = max(n for _, n in present)
    out = []
    for label, n in present:
        if n != top:
            continue
        basis, of = ("diagnosed", diagnosed) if label == "GENERATION_FAILURE" else ("recovered", recovered)
        out.append({"factor": FACTORS[label][0], "label": label, "count": n, "of": of, "basis": basis})
    return out


def build_gold_doc(
    base: Mapping[str, Any],
    entries: Sequence[Mapping[str, Any]],
    undiagnosable: Sequence[str],
    child_runs: Mapping[str, str],
) -> DiagnosisDoc:
    """The oloproof.diagnosis/1 document of a gold-context diagnosis (no timestamps: equal inputs, equal id)."""
    entries = sorted(entries, key=lambda e: e["id"])
    tally = _gold_tally(entries)
    imp = implicated(tally["labels"], tally["recovered"], tally["diagnosed"])
    experiments = [{"factor": i["factor"], "experiment": x} for i in imp for x in FACTORS[i["label"]][1]]
    doc = {
        **base,
        "intervention": {"name": "gold-context", "settings": {}},
        "selected": [e["id"] for e in entries],
        "undiagnosable": sorted(undiagnosable),
        "counts": {
            "selected": len(entries),
            "undiagnosable": len(undiagnosable),
            "control_passed": sum(1 for e in entries if passed(e["control"])),
            "unstable": sum(1 for e in entries if e["label"] == UNSTABLE),
            "unstable_across_repeats": sum(1 for e in entries if e["reason"] == UNSTABLE_ACROSS_REPEATS),
            "not_diagnosed": sum(1 for e in entries if e["label"] == NOT_DIAGNOSED),
            **tally,
        },
        "missing": _missing_of(entries, ("control", "intervention")),
        "cases": list(entries),
        "implicated": imp,
        "candidate_experiments": experiments,
        "child_runs": dict(child_runs),
    }
    return cast(DiagnosisDoc, doc)  # built from the writer's own parts


def build_replay_doc(
    base: Mapping[str, Any],
    intervention: Mapping[str, Any],
    entries: Sequence[Mapping[str, Any]],
    undiagnosable: Sequence[str],
    child_runs: Mapping[str, str],
    gold_doc_id: str,
) -> DiagnosisDoc:
    """The document of a top-k, reranker or token-budget replay, carrying the gold-context labels of the same cases."""
    entries = [
        {**e, "unstable": e["label"] == UNSTABLE or passed(e["replay_control"])}
        for e in sorted(entries, key=lambda e: e["id"])
    ]
    name = intervention["name"]
    # a replay (or its control) without a value is missing: shown with its reason, never "not recovered"
    counted = [
        e
        for e in entries
        if not e["unstable"] and e["label"] != NOT_DIAGNOSED and observed(e["replay"]) and observed(e["replay_control"])
    ]
    confirmable = [e for e in counted if e["label"] in CONFIRMS[name]]
    doc = {
        **base,
        "intervention": dict(intervention),
        "gold_context_diagnosis": gold_doc_id,
        "selected": [e["id"] for e in entries],
        "undiagnosable": sorted(undiagnosable),
        "counts": {
            "selected": len(entries),
            "undiagnosable": len(undiagnosable),
            "control_passed": sum(1 for e in entries if passed(e["replay_control"])),
            "unstable": sum(1 for e in entries if e["unstable"]),
            "unstable_across_repeats": sum(1 for e in entries if e["reason"] == UNSTABLE_ACROSS_REPEATS),
            "not_diagnosed": sum(1 for e in entries if e["label"] == NOT_DIAGNOSED),
            "diagnosed": len(counted),
            "recovered": sum(1 for e in counted if passed(e["replay"])),
            "confirm_labels": list(CONFIRMS[name]),
            "confirmable": len(confirmable),
            "confirmed": sum(1 for e in confirmable if passed(e["replay"])),
            "replay_missing": sum(1 for e in entries if not observed(e["replay"]) and not _not_run(e["replay"])),
            "replay_control_missing": sum(
                1 for e in entries if not observed(e["replay_control"]) and not _not_run(e["replay_control"])
            ),
            # the cases left out of "diagnosed" for want of a replay or replay-control value
            "replay_not_counted": sum(
                1
                for e in entries
                if not e["unstable"]
                and e["label"] != NOT_DIAGNOSED
                and not (observed(e["replay"]) and observed(e["replay_control"]))
            ),
            "gold": _gold_tally(entries),
        },
        "missing": _missing_of(entries, ("control", "intervention", "replay_control", "replay")),
        "cases": list(entries),
        "child_runs": dict(child_runs),
    }
    return cast(DiagnosisDoc, doc)  # built from the writer's own parts


def _missing_of(entries: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per child run (control, intervention, replay…): the cases whose criterion has no value there.

    Each with its count, the count per reason, one example message and the case ids, so the
    output can say *why* (e.g. the reranker raised) instead of counting them as not recovered.
    """
    out: dict[str, dict[str, Any]] = {}
    for key in keys:
        bad = [e for e in entries if key in e and not observed(e[key]) and not _not_run(e[key])]
        if not bad:
            continue
        reasons: dict[str, int] = {}
        for e in bad:
            r = str(e[key].get("reason") or "missing")
            reasons[r] = reasons.get(r, 0) + 1
        example = next((str(e[key]["message"]) for e in bad if e[key].get("message")), None)
        out[key] = {
            "count": len(bad),
            "of": len(entries),
            "reasons": dict(sorted(reasons.items())),
            "example": example,
            "cases": [e["id"] for e in bad],
        }
    return out


# ------------------------------------------------------------------ the diagnoser


@dataclass
class _GoldSource:
    """A stored gold-context diagnosis reused instead of re-executing its child runs."""

    doc_id: str
    doc: DiagnosisDoc

    @cached_property
    def _by_id(self) -> dict[str, Mapping[str, Any]]:
        return by_id(self.doc["cases"])

    def entry(self, case_id: str) -> dict[str, Any]:
        e = self._by_id[case_id]  # KeyError for a case the stored diagnosis does not hold
        return {k: e[k] for k in _GOLD_KEYS}


_GOLD_KEYS = ("id", "label", "reason", "strength", "best_relevant_position", "original", "control", "intervention")


@dataclass
class Diagnoser:
    """One diagnosis of one run: validated on construction (raises DiagnosisError, writes nothing)."""

    ev: RunSetup
    request: Request
    warn: Callable[[str], None] = field(default=lambda message: None)

    def __post_init__(self) -> None:
        req, store = self.request, self.ev.store
        if req.intervention not in INTERVENTIONS:
            raise DiagnosisError(f"--intervention: {req.intervention!r} is not one of {', '.join(INTERVENTIONS)}")
        try:
            run = store.load_run(req.run)
        except StoreError as exc:
            raise DiagnosisError(f"cannot diagnose {req.run!r}: {exc}") from None
        self.run_id: str = run["run_id"]
        if run.get("status") == "partial":
            shard = run.get("shard") or {}
            raise DiagnosisError(
                f"run {self.run_id} is shard {shard.get('index')}/{shard.get('count')} of a sharded run (status "
                "partial); diagnose the merged run: combine every shard's run with `oloproof merge SOURCE…`"
            )
        if run.get("status") != "complete":
            raise DiagnosisError(
                f"run {self.run_id} is {run.get('status') or 'incomplete'} (it was interrupted or is still running); "
                "only a complete run can be diagnosed — re-run it with `oloproof run`"
            )
        rsys = dict(run.get("system") or {})
        if rsys.get("kind") != "rag" or not self.ev.system.is_rag:
            which = "the run's" if rsys.get("kind") != "rag" else f"the config's ({self.ev.cfg.path})"
            raise DiagnosisError(
                f"run {self.run_id}: {which} system {rsys.get('name')!r} is a plain callable, not a RAG system; "
                "diagnosis needs the retrieve and generate stages (system.rag in oloproof.yaml)"
            )
        csys = self.ev.system.config
        if csys.get("name") != rsys.get("name"):
            raise DiagnosisError(
                f"{self.ev.cfg.path}: system.name is {csys.get('name')!r} but run {self.run_id} is of "
                f"{rsys.get('name')!r}; use --config with the oloproof.yaml of that system"
            )
        differ = [k for k in sorted(set(csys) | set(rsys)) if csys.get(k) != rsys.get(k)]
        if differ:
            detail = ", ".join(f"{k}: run {rsys.get(k)!r}, config {csys.get(k)!r}" for k in differ)
            self.warn(
                f"the system in {self.ev.cfg.path} differs from run {self.run_id} ({detail}); "
                "diagnosing with the run's recorded settings"
            )
        self.criterion, self.evaluator = self._criterion(run)
        depth = int(rsys["depth"])
        if req.intervention == "top-k":
            if req.top_k is None:
                raise DiagnosisError("--intervention top-k needs --top-k N (the cut to replay with)")
            if req.top_k < 1 or req.top_k > depth:
                raise DiagnosisError(
                    f"--top-k {req.top_k}: run {self.run_id} recorded {depth} candidates per case (depth {depth}); "
                    f"a replay can only cut what was recorded — choose 1..{depth}, or re-run with a larger depth"
                )
        elif req.top_k is not None:
            raise DiagnosisError(f"--top-k is for --intervention top-k, not {req.intervention}")
        self.rerank: Callable[..., Any] | None = None
        if req.intervention == "reranker":
            if not req.reranker:
                raise DiagnosisError("--intervention reranker needs --reranker module:function")
            try:
                fn = load_object(req.reranker, self.ev.cfg.base_dir, what="--reranker")
            except OloproofError as exc:
                raise DiagnosisError(str(exc)) from None
            except Exception as exc:
                raise DiagnosisError(
                    f"--reranker: importing {req.reranker!r} failed: {type(exc).__name__}: {exc}"
                ) from None
            if not callable(fn):
                raise DiagnosisError(
                    f"--reranker: {req.reranker!r} is not callable (expected function(query, candidates))"
                )
            self.rerank = fn
        elif req.reranker:
            raise DiagnosisError(f"--reranker is for --intervention reranker, not {req.intervention}")
        if req.intervention == "token-budget":
            self._check_token_budget(req.token_budget)
        elif req.token_budget is not None:
            raise DiagnosisError(f"--token-budget is for --intervention token-budget, not {req.intervention}")
        system = self.ev.system
        self.engine = Engine(
            ResolvedSystem(system.kind, system.obj, rsys, system.transient),
            self.ev.caches,
            timeout_s=self.ev.cfg.settings.timeout_s,
            retries=self.ev.cfg.settings.retries,
            base_dir=self.ev.cfg.base_dir,
            budget=self.ev.budget,
        )
        self.top_k = int(rsys.get("top_k") or depth)
        self.unit = recorded_relevance_unit(run) or self.ev.relevance_unit
        self.by_id: dict[str, CaseRecord] = {}
        self.failed_ids: list[str] = []
        self.undiagnosable: set[str] = set()
        for rec in run.get("cases") or []:
            if not failed(value_of(rec, self.criterion)):
                continue
            self.by_id[rec["id"]] = rec
            self.failed_ids.append(rec["id"])
            if not (rec.get("expected") or {}).get("gold_context"):
                self.undiagnosable.add(rec["id"])
        if req.intervention == "reranker":
            self._check_queries()
        self.gold: _GoldSource | None = None
        self._planned = False
        self._selected: list[str] = []
        self.outcomes: dict[str, dict[str, Any]] = {}
        self._recorders: dict[str, RunRecorder] = {}

    # -- validation helpers

    def _check_token_budget(self, budget: int | None) -> None:
        """A budget replay needs a whole number of tokens >= 1 and the system's count_tokens (for the
        candidates the run recorded without a count); Oloproof never estimates tokens itself."""
        if budget is None:
            raise DiagnosisError("--intervention token-budget needs --token-budget N (the budget to replay with)")
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            raise DiagnosisError(f"--token-budget {budget!r}: the budget is a whole number of tokens, at least 1")
        if not callable(getattr(self.ev.system.obj, "count_tokens", None)):
            raise DiagnosisError(
                f"--intervention token-budget: the system {self.ev.system.config.get('name')!r} in "
                f"{self.ev.cfg.path} has no count_tokens(passage); a budget replay assembles the context by the "
                "system's own token counts — add count_tokens to the system"
            )

    def _check_queries(self) -> None:
        """A reranker replay needs the query retrieve() returned; runs recorded before it was kept have none."""
        lacking = [
            i for i in self.selectable if self.by_id[i].get("retrieval") is not None and "query" not in self.by_id[i]
        ]
        if lacking:
            raise DiagnosisError(
                f"run {self.run_id} does not record the retrieval query (Retrieval.query) of "
                f"{len(lacking)} failed case(s) ({', '.join(lacking[:3])}{', …' if len(lacking) > 3 else ''}): "
                "it was recorded before Oloproof kept it, and a reranker replay passes exactly that query to "
                "function(query, candidates); re-run the cases and diagnose the new run"
            )

    def _criterion(self, run: RunRecord) -> tuple[str, Evaluator]:
        names = [e["criterion"] for e in evaluator_rows(run)]
        name = self.request.criterion
        if name is None:
            asserts = asserting(run)
            if not asserts:
                raise DiagnosisError(f"run {self.run_id} has no pass/fail criterion; name one with --criterion")
            name = asserts[0]
        if name not in names:
            raise DiagnosisError(
                f"--criterion {name!r}: run {self.run_id} has no such criterion (it has {', '.join(names) or 'none'})"
            )
        for e in self.ev.evaluators:
            if e.criterion == name:
                return name, e
        raise DiagnosisError(
            f"--criterion {name!r}: {self.ev.cfg.path} configures no evaluator for it; "
            "diagnosis re-evaluates with the configured evaluators"
        )

    # -- selection and reuse

    @property
    def selectable(self) -> list[str]:
        """Failed cases with gold context, in the run's order."""
        return [i for i in self.failed_ids if i not in self.undiagnosable]

    def is_replay(self) -> bool:
        return self.request.intervention in REPLAYS

    def base(self) -> dict[str, Any]:
        """What identifies a diagnosis besides its cases: parent run, criterion, evaluator, system."""
        return {
            "schema": SCHEMA,
            "run_id": self.run_id,
            "criterion": self.criterion,
            "evaluator": {"type": self.evaluator.type, "settings": safe_settings(self.evaluator)},
            "system": dict(self.engine.system.config),
        }

    def select(self, ids: Iterable[str] | None = None) -> list[str]:
        """Fix the cases to diagnose (all selectable ones by default) and find a reusable gold diagnosis."""
        wanted = None if ids is None else set(ids)
        selected = [i for i in self.selectable if wanted is None or i in wanted]
        self.gold = None
        if not self.request.fresh and selected:
            self.gold = self.find_gold(selected, exact=not self.is_replay())
        self._planned = True
        self._selected = selected
        return selected

    def find_gold(self, selected: Sequence[str], *, exact: bool) -> _GoldSource | None:
        """A stored gold-context diagnosis of this run, criterion, evaluator and system covering the cases.

        `exact` asks for the same selection (so re-running diagnose yields the same document);
        a replay only needs the labels, so any diagnosis covering its cases will do.
        """
        store, base = self.ev.store, self.base()
        found: list[tuple[str, str, DiagnosisDoc]] = []
        for doc_id in store.docs("diagnosis"):
            try:
                doc = cast(DiagnosisDoc, store.load_doc("diagnosis", doc_id))  # validated by check_doc
            except StoreError:
                continue
            if any(doc.get(k) != v for k, v in base.items()):
                continue
            if (doc.get("intervention") or {}).get("name") != "gold-context":
                continue
            have = set(doc.get("selected") or [])
            if (have != set(selected)) if exact else not set(selected) <= have:
                continue
            runs = doc.get("child_runs") or {}
            try:
                if any(store.run_header(runs[k]).get("status") != "complete" for k in ("gold_context", "control")):
                    continue
            except (KeyError, StoreError):
                continue
            found.append((runs["gold_context"], doc_id, doc))
        if not found:
            return None
        _, doc_id, doc = max(found, key=lambda t: t[0])  # the newest gold-context child run
        return _GoldSource(doc_id, doc)

    # -- executing one case

    def _plans(self, rec: Mapping[str, Any]) -> dict[str, tuple[ExecutionPlan, Any, bool]]:
        cands = rec.get("retrieval") or []
        gold = (rec.get("expected") or {}).get("gold_context")
        query = rec.get("query")  # what retrieve() put in Retrieval(query=...), as recorded
        plans: dict[str, tuple[ExecutionPlan, Any, bool]] = {
            "control": (ExecutionPlan(label="control", bypass_cache=True), None, True),
            "gold-context": (
                ExecutionPlan(label="gold-context", recorded=cands, gold_context=gold, query=query),
                gold,
                False,
            ),
        }
        if self.request.intervention == "top-k":
            plans["replay"] = (
                ExecutionPlan(label="top-k", recorded=cands, top_k=self.request.top_k, query=query),
                None,
                False,
            )
        elif self.request.intervention == "reranker":
            plans["replay"] = (
                ExecutionPlan(label="reranker", recorded=cands, reranker=self.rerank, query=query),
                None,
                False,
            )
        elif self.request.intervention == "token-budget":
            plans["replay"] = (
                ExecutionPlan(
                    label="token-budget", recorded=cands, token_budget=self.request.token_budget, query=query
                ),
                None,
                False,
            )
        if self.is_replay():
            plans["replay-control"] = (ExecutionPlan(label="replay-control", recorded=cands, query=query), None, True)
        return plans

    def run_case(self, case_id: str, *, control_first: bool = True) -> dict[str, Any]:
        """Execute what one case needs (control and intervention, in either order) and label it.

        Returns a JSON-safe outcome: the child-run case records (to record) and the case's entry.
        Thread-safe if the system is; writes nothing.
        """
        if not self._planned:
            self.select()
        rec = self.by_id[case_id]
        if case_id in self.undiagnosable:
            return {"id": case_id, "undiagnosable": True}
        if self.criterion in flaky_criteria(rec):  # its verdicts differ across the run's repeats: no re-run needed
            return {"id": case_id, "gold_diagnosis": None, "records": {}, "entry": unstable_across_repeats(rec, self)}
        case = case_from_record(rec)
        plans = self._plans(rec)
        kinds: list[str] = []
        if self.gold is None:
            kinds += ["control", "gold-context"] if control_first else ["gold-context", "control"]
        if self.is_replay():
            kinds += ["replay-control", "replay"] if control_first else ["replay", "replay-control"]
        records = {kind: self._execute(case, *plans[kind]) for kind in kinds}
        if self.gold is not None:
            entry = self.gold.entry(case_id)
        else:
            entry = label_case(
                rec,
                self.criterion,
                value_of(records["control"], self.criterion),
                value_of(records["gold-context"], self.criterion),
                top_k=self.top_k,
                unit=self.unit,
            )
        if self.is_replay():
            entry["replay_control"] = value_of(records["replay-control"], self.criterion)
            entry["replay"] = value_of(records["replay"], self.criterion)
        return {
            "id": case_id,
            "gold_diagnosis": None if self.gold is None else self.gold.doc_id,
            "records": records,
            "entry": entry,
        }

    def _execute(self, case: Case, plan: ExecutionPlan, gold: Any, bypass_judgment: bool) -> dict[str, Any]:
        rec = self.engine.execute(case, plan)
        return self.ev.evaluate(case, rec, gold=gold, bypass_judgment=bypass_judgment)

    # -- recording and finishing

    def record(self, outcome: Mapping[str, Any]) -> None:
        """Keep a case's outcome and append its child-run records to the child runs (controller side)."""
        self.outcomes[outcome["id"]] = dict(outcome)
        for kind, rec in (outcome.get("records") or {}).items():
            self._recorder(kind).add(rec)

    def _recorder(self, kind: str) -> RunRecorder:
        if kind not in self._recorders:
            key, purpose = _CHILD[kind]
            intervention = {"name": self.request.intervention, "settings": self.settings()}
            extra = {
                "parent_run": self.run_id,
                "diagnosis": {"criterion": self.criterion, "intervention": intervention, "child": key},
            }
            if kind == "replay":
                purpose = f"diagnosis-{self.request.intervention}"
            header = self.ev.header(cache_mode=self.ev.caches.mode, purpose=purpose, extra=extra)
            header["system"] = dict(self.engine.system.config)
            self._recorders[kind] = RunRecorder(self.ev.store, header)
        return self._recorders[kind]

    def settings(self) -> dict[str, Any]:
        if self.request.intervention == "top-k":
            return {"top_k": self.request.top_k}
        if self.request.intervention == "reranker":
            return {"reranker": self.request.reranker}
        if self.request.intervention == "token-budget":
            return {"token_budget": self.request.token_budget}
        return {}

    def finish(self, *, complete: bool = True) -> Result:
        """Close the child runs, build and store the diagnosis document(s).

        The result also says what re-executing the cases spent (tokens and cost of the child runs).
        """
        result = self._finish(complete=complete)
        cases = [c for recorder in self._recorders.values() for c in recorder.cases]
        result.usage = usage.summarize(cases, pricing_table(self.ev.cfg.settings))
        return result

    def _finish(self, *, complete: bool = True) -> Result:
        status = "complete" if complete else "incomplete"
        child: dict[str, str] = {}
        for kind, recorder in self._recorders.items():
            recorder.finish(status)
            child[_CHILD[kind][0]] = recorder.run_id
        outcomes = [self.outcomes[i] for i in self.failed_ids if i in self.outcomes]
        undiagnosable = [o["id"] for o in outcomes if o.get("undiagnosable")]
        done = [o for o in outcomes if not o.get("undiagnosable")]
        base = self.base()
        if not done:
            doc = build_gold_doc(base, [], undiagnosable, {})
            return Result(doc, None)
        reused = {o.get("gold_diagnosis") for o in done}
        gold_id: str | None = None
        if reused == {None}:
            gold_entries = [{k: o["entry"][k] for k in _GOLD_KEYS} for o in done]
            gold_doc = build_gold_doc(
                base,
                gold_entries,
                undiagnosable,
                {"gold_context": child["gold_context"], "control": child["control"]},
            )
            if complete:
                gold_id = self.ev.store.save_doc("diagnosis", gold_doc)
        else:
            gold_id = next(iter(reused - {None}))
            assert gold_id is not None
            gold_doc = cast(DiagnosisDoc, self.ev.store.load_doc("diagnosis", gold_id))
        if not self.is_replay():
            return Result(gold_doc, gold_id)
        children = {**gold_doc["child_runs"], "replay": child["replay"], "replay_control": child["replay_control"]}
        intervention = {"name": self.request.intervention, "settings": self.settings()}
        doc = build_replay_doc(
            base, intervention, [dict(o["entry"]) for o in done], undiagnosable, children, gold_id or "(incomplete)"
        )
        doc_id = self.ev.store.save_doc("diagnosis", doc) if complete else None
        return Result(doc, doc_id)

    # -- the whole diagnosis without pytest

    def run_all(self, concurrency: int = 1) -> Result:
        """Select (unless already selected), execute every case (threads when concurrency > 1), record, finish."""
        selected = self._selected if self._planned else self.select()
        ids = [i for i in self.failed_ids if i in selected or i in self.undiagnosable]
        try:
            if concurrency > 1 and len(ids) > 1:
                with concurrent.futures.ThreadPoolExecutor(max_workers=concurrency) as pool:
                    for outcome in pool.map(self.run_case, ids):
                        self.record(outcome)
            else:
                for case_id in ids:
                    self.record(self.run_case(case_id))
        except BaseException:
            self.finish(complete=False)
            raise
        return self.finish()
