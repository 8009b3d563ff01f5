"""Running evaluators on one executed case, through the judgment cache."""

from __future__ import annotations

import hashlib
import traceback
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_oloproof.cache.caches import Caches
from pytest_oloproof.cache.execution_entry import EXECUTION_ENTRY, VERDICTS, cacheable
from pytest_oloproof.evaluators.base import CandidateView, ContextPassage, CriterionValue, EvalInput, Evaluator
from pytest_oloproof.evaluators.retrieval import qrels_of, units_of
from pytest_oloproof.records import fastjson
from pytest_oloproof.records.cases import Case
from pytest_oloproof.records.identity import context_identity, judgment_key, sha256_of
from pytest_oloproof.records.stored import in_unit_interval
from pytest_oloproof.stats import metrics
from pytest_oloproof.usage import accounting as usage

#: Key of an execution record that holds verdicts judged ahead of its item (an `Ahead`, see engine/judging_ahead.py);
#: evaluate_record pops it and uses those verdicts instead of judging them again.
AHEAD = "_oloproof_ahead"
#: Missing reason of a verdict left unjudged because the session was interrupted while recording its case.
INTERRUPTED = "interrupted"


@dataclass(slots=True)
class Verdict:
    """One evaluator's verdict on one case, judged ahead: what `judge_verdict` returned and what it logged."""

    evaluator: Evaluator
    value: CriterionValue
    hit: bool
    spent: list[dict[str, Any]] | None = None  # usage of the calls made for it
    saved: list[dict[str, Any]] | None = None  # usage recorded with the cached verdict it reused


@dataclass(slots=True)
class Ahead:
    """Verdicts of some of a case's evaluators (by position in the list), with the input they saw."""

    x: EvalInput
    digests: VerdictDigests
    verdicts: dict[int, Verdict] = field(default_factory=dict)


def candidate_views(retrieval: Sequence[Mapping[str, Any]] | None) -> list[CandidateView] | None:
    """The recorded candidates as evaluators see them."""
    if retrieval is None:
        return None
    return [
        CandidateView(c["position"], c["doc_id"], c.get("chunk_id"), c.get("score"), c.get("text"), c.get("tokens"))
        for c in retrieval
    ]


def eval_input(case: Case, rec: Mapping[str, Any], gold: Sequence[Mapping[str, Any]] | None = None) -> EvalInput:
    """What evaluators see: the case, the output, the recorded retrieval and the context generate() got."""
    retrieval = rec.get("retrieval")
    views = candidate_views(retrieval)
    context = None
    if retrieval is not None:
        if rec.get("gold_context") and gold is not None:
            context = [ContextPassage(g.get("doc_id") or "gold", g.get("chunk_id"), g.get("text")) for g in gold]
        else:
            by_pos = {c["position"]: c for c in retrieval}
            context = [
                ContextPassage(by_pos[p]["doc_id"], by_pos[p].get("chunk_id"), by_pos[p].get("text"), p)
                for p in rec.get("context") or []
            ]
    return EvalInput(
        case_id=case.id,
        input=case.input,
        expected=case.expected,
        metadata=case.metadata,
        output=rec.get("output"),
        retrieval=views,
        context=context,
    )


def relevant_position(case: Case, views: Sequence[CandidateView] | None, unit: str = "document") -> int | str | None:
    """Best-placed relevant unit's position; "none" if labelled but not retrieved; None if not applicable."""
    if case.relevant is None or views is None:
        return None
    qrels = qrels_of(case.relevant, unit)  # type: ignore[arg-type]
    try:
        pos = metrics.best_relevant_position(units_of(views, unit), qrels)  # type: ignore[arg-type]
    except metrics.NoRelevantUnits:
        return None
    return "none" if pos is None else pos


def _reads(ev: Evaluator, x: EvalInput) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "output" in ev.reads:
        out["output"] = x.output
    if "context" in ev.reads:
        out["context"] = None if x.context is None else context_identity(x.context)
    if "retrieval" in ev.reads:
        out["retrieval"] = None if x.retrieval is None else [[c.doc_id, c.chunk_id] for c in x.retrieval]
    if "input" in ev.reads:
        out["input"] = x.input
    return out


def evaluate_record(
    case: Case,
    rec: dict[str, Any],
    evaluators: Sequence[Evaluator],
    caches: Caches,
    *,
    relevance_unit: str = "document",
    gold: Sequence[Mapping[str, Any]] | None = None,
    bypass_judgment: bool = False,
    ask: bool = True,
) -> dict[str, Any]:
    """Add criteria, relevant_position and judgment cache counts to an execution record.

    `ask=False` (the session was interrupted while recording): no judge is asked (evaluators that only
    compute still run); verdicts judged ahead or in the judgment cache are used, the others are missing
    with reason `interrupted`.
    """
    criteria: dict[str, dict[str, Any]] = {}
    hits = misses = 0
    error = rec.get("error")
    entry = rec.pop(EXECUTION_ENTRY, None)
    ahead = rec.pop(AHEAD, None)  # verdicts judged ahead of the item (engine/judging_ahead.py)
    if not isinstance(ahead, Ahead) or gold is not None or bypass_judgment or error:
        ahead = None
    expected_digest = bundle_id = None
    if entry is not None and not error and gold is None and not bypass_judgment and evaluators:
        known = ahead.digests.expected() if ahead is not None else None  # hashed once, when it was planned
        expected_digest, bundle_id, bundle = stored_bundle(case, entry, evaluators, relevance_unit, known)
        if bundle is not None:
            rec["criteria"] = bundle["criteria"]
            rec["relevant_position"] = bundle["relevant_position"]  # fixed by the entry, expected data, unit
            rec.setdefault("cache", {})["judgment"] = {"hit": len(evaluators), "miss": 0}
            _note_judge_usage(rec, {}, _bundle_usage(entry[1].get(bundle_id), evaluators))
            return rec
    if ahead is not None:
        x, digests = ahead.x, ahead.digests
    else:
        x = eval_input(case, rec, gold) if not error else None
        digests = VerdictDigests(x, expected_digest, int(rec.get("repeat") or 0)) if x is not None else None
    spent: dict[str, list[dict[str, Any]]] = {}  # criterion -> usage entries of the calls made now
    saved: dict[str, list[dict[str, Any]]] = {}  # criterion -> usage recorded with a cached verdict
    with caches.batch():  # the case's verdicts and its bundle in one commit
        for i, ev in enumerate(evaluators):
            done = ahead.verdicts.get(i) if ahead is not None else None
            if error or x is None or digests is None:
                value = CriterionValue.missing(
                    error["reason"] if error else "system_error",
                    detail={"message": error["message"] if error else ""},
                )
            elif done is not None and done.evaluator is ev:
                value, hit = done.value, done.hit
                if done.spent:
                    spent[ev.criterion] = done.spent
                if done.saved:
                    saved[ev.criterion] = done.saved
                hits += hit
                misses += not hit
            else:
                asks = ask or not asks_a_model(ev)
                value, hit = judge_verdict(ev, x, caches, bypass_judgment, digests, (spent, saved), ask=asks)
                hits += hit
                misses += not hit
            criteria[ev.criterion] = value.to_json()
        rec["criteria"] = criteria
        views = x.retrieval if x is not None else candidate_views(rec.get("retrieval"))
        rec["relevant_position"] = relevant_position(case, views, relevance_unit)
        if bundle_id is not None and all(c["status"] != "missing" for c in criteria.values()):
            # file the bundle in the execution entry it was judged on (rewritten with it; held in the
            # same commit as the entry's first write when the case was just executed); the latest few
            # evaluator sets are kept
            bundles = dict(list(entry[1].items())[-(MAX_BUNDLES - 1) :])
            bundles[bundle_id] = {"criteria": criteria, "relevant_position": rec["relevant_position"]}
            produced = {**saved, **spent}  # what producing each verdict cost, for later hits to count as saved
            if produced:
                bundles[bundle_id]["usage"] = produced
            caches.put("execution", entry[0], {**cacheable(rec), VERDICTS: bundles})
    rec.setdefault("cache", {})["judgment"] = {"hit": hits, "miss": misses}
    _note_judge_usage(rec, spent, saved)
    return rec


def asks_a_model(ev: Evaluator) -> bool:
    """Whether an evaluator asks a model (an LLM judge, with its provider) rather than only computing."""
    return getattr(ev, "provider", None) is not None


def _note_judge_usage(
    rec: dict[str, Any], spent: Mapping[str, list[dict[str, Any]]], saved: Mapping[str, list[dict[str, Any]]]
) -> None:
    """Record judges' usage per criterion: `usage.judges` (spent now), `usage.saved.judges` (cache hits)."""
    if spent:
        rec.setdefault("usage", {})["judges"] = dict(spent)
    if saved:
        rec.setdefault("usage", {}).setdefault("saved", {})["judges"] = dict(saved)


def _bundle_usage(value: Any, evaluators: Sequence[Evaluator]) -> dict[str, list[dict[str, Any]]]:
    """The usage a stored bundle's verdicts cost when they were judged (what reusing it saves)."""
    stored = value.get("usage") if isinstance(value, dict) else None
    if not isinstance(stored, dict):
        return {}
    return {ev.criterion: stored[ev.criterion] for ev in evaluators if isinstance(stored.get(ev.criterion), list)}


#: Verdict bundles kept per execution entry (one per set of evaluators it was judged with).
MAX_BUNDLES = 8


def _bundle_id(expected_digest: str, evaluators: Sequence[Evaluator], unit: str) -> str:
    """Names a bundle of verdicts within its execution entry: the expected data and the evaluators.

    Each verdict is also filed on its own (the judgment cache); the bundle, kept in
    the execution entry it was judged on, lets an unchanged case reuse all of them
    with the one lookup that serves its execution. A refreshed entry starts without bundles.
    """
    text = f"verdicts/2|{expected_digest}|{_evaluators_identity(evaluators)}|{unit}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


_EVALUATORS_IDENTITY: dict[tuple[int, ...], tuple[str, Sequence[Evaluator]]] = {}


def _evaluators_identity(evaluators: Sequence[Evaluator]) -> str:
    """What the bundle key says about the evaluators (criterion, type, settings), memoised per list."""
    memo_key = tuple(id(e) for e in evaluators)
    memo = _EVALUATORS_IDENTITY.get(memo_key)
    if memo is None:
        described = [[e.criterion, e.type or type(e).__name__, _settings_digest(e)] for e in evaluators]
        memo = (sha256_of(described), list(evaluators))  # the list keeps the ids valid
        if len(_EVALUATORS_IDENTITY) > 64:
            _EVALUATORS_IDENTITY.clear()
        _EVALUATORS_IDENTITY[memo_key] = memo
    return memo[0]


def stored_bundle(
    case: Case,
    entry: tuple[str, Mapping[str, Any]],
    evaluators: Sequence[Evaluator],
    unit: str,
    expected_digest: str | None = None,
) -> tuple[str | None, str | None, dict[str, Any] | None]:
    """The case's expected-data digest, these evaluators' bundle id, and the bundle its execution entry holds.

    (None, None, None) when the expected data cannot be digested; the bundle is None unless it holds a
    verdict for every evaluator. `expected_digest`: already computed by the caller.
    """
    try:
        expected_digest = expected_digest or sha256_of(dict(case.expected))
        bundle_id = _bundle_id(expected_digest, evaluators, unit)
    except (TypeError, ValueError):
        return None, None, None
    return expected_digest, bundle_id, _bundle(entry[1].get(bundle_id), evaluators)


def _bundle(value: Any, evaluators: Sequence[Evaluator]) -> dict[str, Any] | None:
    """A stored bundle as {criteria, relevant_position}, or None unless it holds a verdict for every evaluator."""
    if not isinstance(value, dict) or "relevant_position" not in value:
        return None
    criteria = value.get("criteria")
    if not isinstance(criteria, dict):
        return None
    out = {}
    for ev in evaluators:
        c = criteria.get(ev.criterion)
        if not isinstance(c, dict) or c.get("status") not in ("observed", "excluded"):
            return None
        out[ev.criterion] = c
    return {"criteria": out, "relevant_position": value["relevant_position"]}


class VerdictDigests:
    """Digests of what evaluators read of one case, each computed once however many evaluators read it."""

    def __init__(self, x: EvalInput, expected: str | None = None, repeat: int = 0) -> None:
        self.x = x
        self.repeat = repeat  # a repeat > 0 is part of each verdict's key (`repeats: N`)
        self._expected = expected  # already computed by the caller, or on first use
        self._reads: dict[frozenset[str], str] = {}

    def expected(self) -> str:
        if self._expected is None:
            self._expected = sha256_of(dict(self.x.expected))
        return self._expected

    def reads(self, ev: Evaluator) -> str:
        key = frozenset(ev.reads)
        if key not in self._reads:
            self._reads[key] = sha256_of(_reads(ev, self.x))
        return self._reads[key]


_SETTINGS_DIGESTS: weakref.WeakKeyDictionary[Evaluator, str] = weakref.WeakKeyDictionary()


def _settings_digest(ev: Evaluator) -> str:
    """An evaluator's settings digest, memoised per evaluator object (settings do not change)."""
    try:
        return _SETTINGS_DIGESTS[ev]
    except (KeyError, TypeError):
        digest = sha256_of(dict(ev.settings()))
        try:
            _SETTINGS_DIGESTS[ev] = digest
        except TypeError:  # an unhashable evaluator: no memo
            pass
        return digest


def verdict_key(ev: Evaluator, digests: VerdictDigests) -> str | None:
    """The judgment-cache key of one evaluator's verdict on one case (None when it cannot be computed)."""
    try:
        return judgment_key(
            ev.type or type(ev).__name__, _settings_digest(ev), digests.expected(), digests.reads(ev), digests.repeat
        )
    except (TypeError, ValueError):
        return None


def judge_verdict(
    ev: Evaluator,
    x: EvalInput,
    caches: Caches,
    bypass: bool,
    digests: VerdictDigests | None = None,
    usage_log: tuple[dict[str, list[dict[str, Any]]], dict[str, list[dict[str, Any]]]] | None = None,
    keyed: tuple[str | None] | None = None,
    ask: bool = True,
) -> tuple[CriterionValue, bool]:
    """One verdict through the judgment cache: (value, whether it was a hit); `keyed`: (verdict_key,) if known.

    `ask=False`: a verdict not in the cache is missing (`interrupted`) instead of asking the evaluator.
    """
    digests = digests or VerdictDigests(x)
    key = keyed[0] if keyed is not None else verdict_key(ev, digests)
    if key is not None:
        cached = caches.get("judgment", key, bypass=bypass)
        if isinstance(cached, dict):
            try:
                value = CriterionValue.from_json(cached)
            except (KeyError, TypeError):
                pass
            else:
                if usage_log is not None and isinstance(cached.get("usage"), list) and cached["usage"]:
                    usage_log[1][ev.criterion] = cached["usage"]
                return value, True
    if not ask:
        return CriterionValue.missing(
            INTERRUPTED, detail={"message": "the run was interrupted before this verdict was judged"}
        ), False
    got: list[dict[str, Any]] = []
    try:
        with usage.collect() as got:
            value = ev.evaluate(x)
        if not isinstance(value, CriterionValue):
            raise TypeError(f"{ev!r}.evaluate() returned {type(value).__name__}, not a CriterionValue")
        if (value.status == "observed" or value.value is not None) and not in_unit_interval(value.value):
            # what the store's readers accept (records.StoredCriterion): a run never writes a record it cannot read
            raise ValueError(
                f"{ev!r}.evaluate() returned {value.value!r}; a criterion value must be a finite number in [0, 1] "
                "(and an observed criterion needs one)"
            )
        unstorable = _unstorable(value)
        if unstorable:
            raise ValueError(f"{ev!r}.evaluate() returned text that cannot be stored: {unstorable}")
    except KeyboardInterrupt:
        raise
    except usage.BudgetExhausted as exc:  # an evaluator of the user's that asked for a judge call
        _log_spent(usage_log, ev, got)
        return CriterionValue.missing(usage.BUDGET_EXHAUSTED, detail={"message": str(exc)}), False
    except BaseException as exc:  # SystemExit, pytest.skip() ... from an evaluator: its criterion is missing
        _log_spent(usage_log, ev, got)
        return CriterionValue.missing(
            f"evaluator_error: {type(exc).__name__}: {exc}", detail={"traceback": traceback.format_exc()}
        ), False
    _log_spent(usage_log, ev, got)
    if key is not None and value.status != "missing":
        stored = value.to_json()
        if got:
            stored["usage"] = got  # kept with the verdict: a later hit counts it as saved
        caches.put("judgment", key, stored, bypass=bypass)
    return value, False


def _unstorable(value: CriterionValue) -> str | None:
    """Why a verdict cannot be written as UTF-8 JSON (a lone surrogate such as \\ud800 in its text), or None.

    Checked where the verdict is made, so it costs only its own criterion: found later, when the
    case's record is written, it would cost every criterion of the case.
    """
    data = value.to_json()
    try:
        text = fastjson.dumps(data)  # the usual case: one fast encoding
        if not text.isascii():  # ASCII text always encodes (isascii is O(1)): no copy for it
            text.encode("utf-8")
    except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
        stack: list[tuple[str, Any]] = [("", data)]
        while stack:
            path, item = stack.pop()
            if isinstance(item, dict):
                stack.extend((f"{path}.{k}" if path else str(k), v) for k, v in item.items())
                stack.extend((f"{path} key", k) for k in item if isinstance(k, str))
            elif isinstance(item, list | tuple):
                stack.extend((f"{path}[{i}]", v) for i, v in enumerate(item))
            elif isinstance(item, str):
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError as bad:
                    char = bad.object[bad.start : bad.end]
                    return (
                        f"{path}: {char!r} at character {bad.start} is a lone surrogate, which no UTF-8 file can hold"
                    )
        return f"{type(exc).__name__}: {exc}"
    return None


def _log_spent(
    usage_log: tuple[dict[str, list[dict[str, Any]]], dict[str, list[dict[str, Any]]]] | None,
    ev: Evaluator,
    got: list[dict[str, Any]],
) -> None:
    if usage_log is not None and got:
        usage_log[0][ev.criterion] = list(got)


def judge_one(ev: Evaluator, x: EvalInput, caches: Caches, bypass: bool = False) -> CriterionValue:
    """One evaluator on one input through the judgment cache (validate-judge uses it too)."""
    return judge_verdict(ev, x, caches, bypass)[0]


def failed_criteria(rec: Mapping[str, Any], evaluators: Sequence[Evaluator]) -> list[tuple[str, Mapping[str, Any]]]:
    """Asserting criteria whose observed value is below 1 (a fail)."""
    out = []
    for ev in evaluators:
        c = rec["criteria"].get(ev.criterion)
        if ev.asserts and c and c["status"] == "observed" and c["value"] < 1.0:
            out.append((ev.criterion, c))
    return out


def missing_criteria(rec: Mapping[str, Any], evaluators: Sequence[Evaluator]) -> list[tuple[str, Mapping[str, Any]]]:
    """Asserting criteria left missing by their evaluator (an exception, a missing output field, a judge error).

    A pytest item fails on these too, so an evaluator bug is never a silent pass; system
    errors are reported separately (every criterion is missing then).
    """
    out = []
    for ev in evaluators:
        c = rec["criteria"].get(ev.criterion)
        if ev.asserts and c and c["status"] == "missing":
            out.append((ev.criterion, c))
    return out
