"""Tokens and cost: what judges and stages report, what pricing makes of it, what caches saved, the budget.

Usage travels through one small context API. While Oloproof calls into a
stage (retrieve, generate, a plain callable, a reranker, count_tokens) or asks a
judge's provider, a collector is active for that call (a `contextvars` variable,
so threads and asyncio tasks each see their own); ``report_usage(...)`` adds one
entry to it. The OpenAI-compatible provider reports each reply's ``usage`` itself;
hand-written systems, ``provider: python`` judges and framework adapters call
``pytest_oloproof.report_usage``. Outside an Oloproof call it does nothing.

An entry is one paid call: ``{"model", "input_tokens", "output_tokens",
"cached_input_tokens"}``; a token count the provider did not report is None
(unknown), never 0. A judge call whose provider reported nothing is recorded as
one entry with unknown tokens, so it is counted as a call of unknown usage.

Cached entries keep the usage that produced them; a cache hit counts that usage
as *saved*. Costs come only from the optional ``pricing:`` table (USD per million
tokens, per model); without a price a cost is missing, never guessed.

This module computes; the `Tokens:`, `Budget:` and cost lines that show the results are report/'s.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from pytest_oloproof.errors import OloproofError
from pytest_oloproof.records.access import cases_by_id

# the totals of recorded cases are computed beside the run record; readers still find them here
from pytest_oloproof.store.summary import BUDGET_EXHAUSTED as BUDGET_EXHAUSTED
from pytest_oloproof.store.summary import budget_summary as budget_summary
from pytest_oloproof.store.summary import case_tallies as case_tallies
from pytest_oloproof.store.summary import cost_of_row, merge_tallies
from pytest_oloproof.store.summary import source_summary as source_summary
from pytest_oloproof.store.summary import summarize as summarize

Entry = dict[str, Any]

#: the collector of the Oloproof call in progress (None outside one)
_COLLECTOR: ContextVar[list[Entry] | None] = ContextVar("oloproof_usage", default=None)
#: the run's budget, while a case is evaluated
_BUDGET: ContextVar[Budget | None] = ContextVar("oloproof_budget", default=None)

#: stages whose calls the budget may refuse (count_tokens is local by nature)
PAID_STAGES = frozenset({"call", "retrieve", "generate", "reranker"})
_FIELDS = ("input_tokens", "output_tokens", "cached_input_tokens")


class BudgetExhausted(OloproofError):
    """The run's budget (max_cost / max_judge_calls) refused a new paid call."""


# ------------------------------------------------------------------ reporting


def _count(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"report_usage: {name} must be a non-negative integer or None, got {value!r}")
    return value


def _from_mapping(usage: Any) -> dict[str, Any]:
    """Token counts from an OpenAI-style (prompt/completion) or Anthropic/LangChain-style (input/output) usage."""

    def get(obj: Any, key: str) -> Any:
        return obj.get(key) if isinstance(obj, Mapping) else getattr(obj, key, None)

    inp = get(usage, "prompt_tokens")
    out = get(usage, "completion_tokens")
    if inp is None and out is None:
        inp, out = get(usage, "input_tokens"), get(usage, "output_tokens")
    cached = get(get(usage, "prompt_tokens_details") or {}, "cached_tokens")
    if cached is None:
        cached = get(usage, "cache_read_input_tokens")  # Anthropic
    if cached is None:
        cached = get(get(usage, "input_token_details") or {}, "cache_read")  # LangChain's usage_metadata
    return {"input_tokens": inp, "output_tokens": out, "cached_input_tokens": cached}


def make_entry(
    model: str | None = None,
    input_tokens: int | None = None,
    output_tokens: int | None = None,
    cached_input_tokens: int | None = None,
) -> Entry:
    """One validated usage entry (counts are non-negative ints, or None when unknown)."""
    return {
        "model": None if model is None else str(model),
        "input_tokens": _count("input_tokens", input_tokens),
        "output_tokens": _count("output_tokens", output_tokens),
        "cached_input_tokens": _count("cached_input_tokens", cached_input_tokens),
    }


def report_usage(
    *,
    model: str | None = None,
    input_tokens: int | None = None,
    output_tokens: int | None = None,
    cached_input_tokens: int | None = None,
    usage: Any = None,
) -> bool:
    """Report one paid call (a chat completion, an embedding request) made by the current stage or judge.

    Call it from `retrieve`, `generate`, a plain system callable or a `provider: python`
    judge function, once per model call; ``usage=`` takes a provider's usage object or
    mapping (``prompt_tokens``/``completion_tokens`` or ``input_tokens``/``output_tokens``)
    instead of the counts. Leave a count you do not know as None: it is shown as unknown.
    Returns False (and records nothing) outside a call Oloproof is making.
    """
    collector = _COLLECTOR.get()
    if collector is None:
        return False
    counts: dict[str, Any] = {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cached_input_tokens": cached_input_tokens,
    }
    if usage is not None:
        for k, v in _from_mapping(usage).items():
            if counts[k] is None:
                counts[k] = v
    collector.append(make_entry(model, **counts))
    return True


class collect:
    """Collect the usage reported inside the block (nested blocks keep their own).

    A class rather than a generator-based context manager: it wraps every stage call.
    """

    __slots__ = ("got", "token")

    def __init__(self) -> None:
        self.got: list[Entry] = []

    def __enter__(self) -> list[Entry]:
        self.token = _COLLECTOR.set(self.got)
        return self.got

    def __exit__(self, *exc: object) -> None:
        _COLLECTOR.reset(self.token)


def _forward(entries: Iterable[Entry]) -> None:
    outer = _COLLECTOR.get()
    if outer is not None:
        outer.extend(entries)


@contextmanager
def using_budget(budget: Budget | None) -> Iterator[None]:
    """Make `budget` the one judge calls inside the block reserve from."""
    token = _BUDGET.set(budget)
    try:
        yield
    finally:
        _BUDGET.reset(token)


@contextmanager
def judge_call(model: str | None) -> Iterator[None]:
    """One judge request: reserved from the budget before it is sent, its usage collected after.

    Raises BudgetExhausted (sending nothing) when the budget refuses. A provider that
    reported no usage leaves one entry with unknown tokens: the call happened, its size
    is not known.
    """
    budget = _BUDGET.get()
    ticket = budget.reserve("judge") if budget is not None else None
    got: list[Entry] = []
    token = _COLLECTOR.set(got)
    answered = False
    try:
        yield
        answered = True
    finally:
        _COLLECTOR.reset(token)
        entries = list(got) if got or not answered else [make_entry(model)]
        _forward(entries)
        if budget is not None and ticket is not None:
            budget.settle(ticket, entries)


def model_of(identity: Mapping[str, Any]) -> str | None:
    model = identity.get("model")
    return None if model is None else str(model)


# ------------------------------------------------------------------ pricing


def entry_cost(entry: Mapping[str, Any], pricing: Mapping[str, Mapping[str, Any]] | None) -> float | None:
    """USD for one entry, or None (no price for its model, or a token count unknown)."""
    if not pricing:
        return None
    price = pricing.get(entry.get("model") or "")
    inp, out = entry.get("input_tokens"), entry.get("output_tokens")
    if price is None or inp is None or out is None:
        return None
    return cost_of_row([1, int(inp), int(out), int(entry.get("cached_input_tokens") or 0), 0, 1], price)


# ------------------------------------------------------------------ tallies


def case_cost(rec: Mapping[str, Any], pricing: Mapping[str, Any] | None, *, include_saved: bool = True) -> float | None:
    """What one case cost (spent, plus what its cache hits had cost when `include_saved`); None if unknown."""
    tallies = case_tallies(rec) or {}
    names = ("judges", "system", "saved_judges", "saved_system") if include_saved else ("judges", "system")
    total = 0.0
    for name in names:
        tally = tallies.get(name)
        if not tally:
            continue
        cost = source_summary(tally, pricing).get("cost")
        if cost is None:
            return None
        total += cost
    return total if pricing else None


# ------------------------------------------------------------------ dollars (the budget message; report/ too)


def fmt_cost(cost: float) -> str:
    """Dollars, with enough digits that a small test run does not print $0.00."""
    if cost == 0:
        return "$0"
    if cost >= 0.01:
        return f"${cost:,.2f}"
    if cost < 1e-9:
        return "<$0.000000001"
    digits = 1 - math.floor(math.log10(cost))  # two significant digits, never an exponent
    return f"${cost:.{digits}f}"


# ------------------------------------------------------------------ the budget guard


class Ticket:
    """One reserved call: what it was expected to cost while in flight."""

    __slots__ = ("estimate", "kind")

    def __init__(self, kind: str, estimate: float) -> None:
        self.kind, self.estimate = kind, estimate


class Budget:
    """max_cost / max_judge_calls for one run, shared by every thread and task of the process.

    A call is reserved before it is sent: a judge call only while fewer than
    `max_judge_calls` were issued; any paid call only while the cost spent plus the
    expected cost of the calls in flight (each as the dearest call of its kind so far)
    leaves room for it under `max_cost`. A refused call is never sent, and once
    `max_cost` refuses one no later paid call is issued (`max_judge_calls` stops judges only).

    `share(directory)` moves the counts into a diskcache ledger, so the pytest-xdist
    workers of one session reserve from one budget (each reservation is one SQLite
    transaction, serialised across processes).
    """

    def __init__(
        self,
        *,
        max_cost: float | None = None,
        max_judge_calls: int | None = None,
        pricing: Mapping[str, Any] | None = None,
    ) -> None:
        self.max_cost = max_cost
        self.max_judge_calls = max_judge_calls
        self.pricing = dict(pricing or {})
        self._lock = threading.Lock()
        self._memory: dict[str, Any] = _fresh_state()
        self._ledger: Any = None  # a diskcache.Cache once shared

    def share(self, directory: Path) -> None:
        """Keep the counts in a ledger under `directory`, shared with other processes of the session."""
        from pytest_oloproof.cache.caches import open_diskcache

        directory.mkdir(parents=True, exist_ok=True)
        self._ledger = open_diskcache(directory)

    def close(self) -> None:
        if self._ledger is not None:
            self._ledger.close()

    @contextmanager
    def _state(self) -> Iterator[dict[str, Any]]:
        """The counts, read and written atomically (never raise inside: a raise would roll the write back)."""
        with self._lock:
            ledger = self._ledger
            if ledger is None:
                yield self._memory
                return
            with ledger.transact(retry=True):
                state = ledger.get("state") or _fresh_state()
                yield state
                ledger.set("state", state, retry=True)

    def _read(self) -> dict[str, Any]:
        with self._state() as state:
            return dict(state)

    @property
    def judge_calls(self) -> int:
        return int(self._read()["judge_calls"])

    @property
    def spent(self) -> float:
        return float(self._read()["spent"])

    @property
    def refused(self) -> int:
        return int(self._read()["refused"])

    @property
    def stopped_by(self) -> str | None:
        value = self._read()["stopped_by"]
        return None if value is None else str(value)

    def reserve(self, kind: str) -> Ticket:
        """Reserve one call of `kind` ("judge" or a stage name); raises BudgetExhausted when refused."""
        with self._state() as st:
            if st["stopped_by"] is None and kind == "judge" and self.max_judge_calls is not None:
                if st["judge_calls"] >= self.max_judge_calls:
                    st["stopped_by"] = "max_judge_calls"
            estimate = float(st["dearest"].get(kind, 0.0)) if self.max_cost is not None else 0.0
            if self.max_cost is not None and st["stopped_by"] != "max_cost":
                if st["spent"] >= self.max_cost or st["spent"] + st["in_flight"] + estimate > self.max_cost:
                    st["stopped_by"] = "max_cost"
            refused = st["stopped_by"] == "max_cost" or (kind == "judge" and st["stopped_by"] == "max_judge_calls")
            if refused:
                st["refused"] += 1
            else:
                st["judge_calls"] += kind == "judge"
                st["in_flight"] += estimate
            snapshot = dict(st)
        if refused:
            raise BudgetExhausted(self._describe(snapshot))
        return Ticket(kind, estimate)

    def settle(self, ticket: Ticket, entries: Sequence[Mapping[str, Any]]) -> None:
        """Replace a reservation by what the call cost (entries of unknown cost count as 0)."""
        cost = sum(entry_cost(e, self.pricing) or 0.0 for e in entries)
        with self._state() as st:
            st["in_flight"] = max(0.0, st["in_flight"] - ticket.estimate)
            st["spent"] += cost
            if cost > st["dearest"].get(ticket.kind, 0.0):
                st["dearest"] = {**st["dearest"], ticket.kind: cost}

    def _describe(self, st: Mapping[str, Any]) -> str:
        if st["stopped_by"] == "max_judge_calls":
            return f"budget exhausted: max_judge_calls {self.max_judge_calls} reached"
        return (
            f"budget exhausted: max_cost ~{fmt_cost(self.max_cost or 0.0)} reached "
            f"(spent ~{fmt_cost(float(st['spent']))})"
        )


def _fresh_state() -> dict[str, Any]:
    return {"judge_calls": 0, "spent": 0.0, "in_flight": 0.0, "dearest": {}, "refused": 0, "stopped_by": None}


# ------------------------------------------------------------------ comparisons and diagnoses


def case_tokens(rec: Mapping[str, Any], *, include_saved: bool = True) -> int | None:
    """Input plus output tokens of a case (spent, and saved when asked); None when a call's are unknown."""
    tallies = case_tallies(rec) or {}
    names = ("judges", "system", "saved_judges", "saved_system") if include_saved else ("judges", "system")
    total = 0
    for name in names:
        for row in (tallies.get(name) or {}).values():
            if row[4]:
                return None
            total += row[1] + row[2]
    return total


def compare_costs(candidate: Mapping[str, Any], baseline: Mapping[str, Any]) -> dict[str, Any] | None:
    """What each paired case cost to evaluate in each run, and the difference (None when neither run has usage).

    A case's cost counts its cache hits at the cost recorded with them, so a re-run served
    by the cache compares as what the configuration costs, not as free. Both runs are priced
    with one table (the candidate's, else the baseline's), so the difference is usage, not prices.
    """
    cand, base = cases_by_id(candidate), cases_by_id(baseline)
    if not any(case_tallies(c) for c in (*cand.values(), *base.values())):
        return None
    pricing = candidate.get("pricing") or baseline.get("pricing")
    source = "candidate" if candidate.get("pricing") else ("baseline" if baseline.get("pricing") else None)
    rows: dict[str, dict[str, Any]] = {}
    sums: dict[str, dict[str, float | int | None]] = {
        side: {"cost": 0.0 if pricing else None, "tokens": 0} for side in ("candidate", "baseline")
    }
    for cid in sorted(set(cand) & set(base)):
        row: dict[str, Any] = {}
        for side, rec in (("candidate", cand[cid]), ("baseline", base[cid])):
            cost, tokens = case_cost(rec, pricing), case_tokens(rec)
            row[side] = {"cost": cost, "tokens": tokens}
            total = sums[side]
            total["cost"] = None if cost is None or total["cost"] is None else float(total["cost"]) + cost
            total["tokens"] = None if tokens is None or total["tokens"] is None else int(total["tokens"]) + tokens
        row["difference"] = {k: _diff(row["candidate"][k], row["baseline"][k]) for k in ("cost", "tokens")}
        rows[cid] = row
    paired = len(rows)
    difference = {k: _diff(sums["candidate"][k], sums["baseline"][k]) for k in ("cost", "tokens")}
    per_case = {k: (None if v is None or not paired else v / paired) for k, v in difference.items()}
    return {
        "pricing_from": source,
        "paired": paired,
        "candidate": sums["candidate"],
        "baseline": sums["baseline"],
        "difference": difference,
        "difference_per_case": per_case,
        "cases": rows,
    }


def _diff(a: float | int | None, b: float | int | None) -> float | int | None:
    return None if a is None or b is None else a - b


def price_case(rec: dict[str, Any], pricing: Mapping[str, Any] | None) -> None:
    """Add `usage.totals` to a case record: tokens and cost spent and saved (None where unknown or unpriced)."""
    usage = rec.get("usage")
    if not isinstance(usage, dict):
        return
    tallies = case_tallies(rec) or {}
    totals: dict[str, Any] = {}
    for side, names in (("spent", ("judges", "system")), ("saved", ("saved_judges", "saved_system"))):
        merged: dict[str, list[int]] = {}
        for name in names:
            merge_tallies(merged, tallies.get(name) or {})
        s = source_summary(merged, pricing)
        tokens = None if s["input_tokens"] is None else s["input_tokens"] + s["output_tokens"]
        totals[side] = {"calls": s["calls"], "tokens": tokens, "cost": s["cost"]}
    usage["totals"] = totals
