"""Judging prefetched cases ahead of their items (SPEC §11), with the verdicts a sequential run would give.

The prefetcher executes cases concurrently; without this, their evaluators (LLM
judges included) would run one case at a time on pytest's main thread as each item
reports. A `Prejudger` runs the evaluators it may run off that thread on the
prefetcher's judge threads, and files the verdicts in the case's record
(`evaluation.AHEAD`); the item's `evaluate_record` then uses them, runs the others
and writes the verdict bundle, as before.

Same records as a sequential run: cases are *planned* in item order, and each
verdict's judgment-cache key is claimed then. A case whose key an earlier case
claimed waits for that case's verdict before looking the key up, so exactly the
cases that would hit sequentially hit, and no judge is asked twice for one verdict.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_oloproof.cache.caches import Caches
from pytest_oloproof.evaluate.record import (
    AHEAD,
    Ahead,
    Verdict,
    _Digests,
    _judge,
    asks_a_model,
    eval_input,
    stored_bundle,
    verdict_key,
)
from pytest_oloproof.evaluators.base import Evaluator
from pytest_oloproof.records.cases import Case
from pytest_oloproof.usage import accounting as usage

from .stages import EXECUTION_ENTRY

#: How often (seconds) a verdict waiting on an earlier case's claim checks whether the run is stopping.
WAIT_POLL_S = 0.05


def may_judge_ahead(ev: Evaluator, configured: Sequence[Evaluator], budget: usage.Budget | None) -> bool:
    """Whether `ev` may run off pytest's main thread, ahead of its item.

    Only Oloproof's own evaluator types, as configured in oloproof.yaml: an evaluator a
    conftest.py fixture supplies (an override, an addition, or a judge handed the
    `oloproof_judge_provider` fixture's provider) is the user's object and stays on
    the main thread, in item order, as any fixture's code. Under a budget guard, judges
    stay there too, so the guard refuses exactly the calls a sequential run refuses.
    """
    if not any(ev is c for c in configured):
        return False
    if not type(ev).__module__.startswith("pytest_oloproof."):
        return False
    return budget is None or not asks_a_model(ev)


def judge_threads(evaluators: Sequence[Evaluator], concurrency: int) -> int:
    """Threads that judge ahead: enough to keep every model provider's own `concurrency` busy.

    One when no evaluator asks a model: the others only compute, and threads sharing the GIL would
    not compute faster. A provider without a `concurrency` of its own counts as the run's.
    """
    providers: dict[int, int] = {}
    for ev in evaluators:
        provider = getattr(ev, "provider", None)
        if provider is not None:
            providers[id(provider)] = int(getattr(provider, "concurrency", 0) or concurrency)
    return max(1, min(sum(providers.values()), MAX_JUDGE_THREADS))


#: The most threads judging ahead, however many providers a run has.
MAX_JUDGE_THREADS = 128


class Claims:
    """Judgment-cache keys claimed by cases planned and not yet judged, each with the event its claimant sets."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_key: dict[str, threading.Event] = {}

    def claim(self, keys: Sequence[str | None]) -> list[tuple[threading.Event | None, threading.Event | None]]:
        """Claim `keys` (in order) for one case: per key, (the earlier claimant's event to wait for, its own)."""
        out: list[tuple[threading.Event | None, threading.Event | None]] = []
        with self._lock:
            for key in keys:
                if key is None:
                    out.append((None, None))
                    continue
                mine = threading.Event()
                out.append((self._by_key.get(key), mine))
                self._by_key[key] = mine
        return out

    def release(self, key: str | None, mine: threading.Event | None) -> None:
        """The claimant's verdict is in the cache (or never will be): later claimants may look it up."""
        if key is None or mine is None:
            return
        with self._lock:
            if self._by_key.get(key) is mine:
                del self._by_key[key]
        mine.set()

    def __len__(self) -> int:
        return len(self._by_key)


@dataclass(slots=True)
class Plan:
    """What to judge ahead for one case: its input, and per evaluator its key and claim."""

    ahead: Ahead
    keyed: list[tuple[int, Evaluator, str | None, threading.Event | None, threading.Event | None]]


class Prejudger:
    """Judges the evaluators that may run ahead (`ahead`, positions in `evaluators`) for prefetched cases."""

    def __init__(
        self,
        evaluators: Sequence[Evaluator],
        ahead: Sequence[int],
        caches: Caches,
        *,
        relevance_unit: str = "document",
        budget: usage.Budget | None = None,
    ) -> None:
        self.evaluators = list(evaluators)
        self.ahead = [i for i in ahead if 0 <= i < len(self.evaluators)]
        self.caches = caches
        self.relevance_unit = relevance_unit
        self.budget = budget
        self.claims = Claims()

    def plan(self, case: Case, rec: dict[str, Any]) -> Plan | None:
        """Called in item order: claim the case's verdict keys; None when nothing is to be judged ahead.

        Nothing is: a case that failed (every criterion is missing), or whose execution
        entry holds the verdict bundle of these evaluators (the item reuses it whole).
        """
        if not self.ahead or rec.get("error"):
            return None
        entry = rec.get(EXECUTION_ENTRY)
        expected_digest = None
        if entry is not None:
            expected_digest, _, bundle = stored_bundle(case, entry, self.evaluators, self.relevance_unit)
            if bundle is not None:
                return None
        x = eval_input(case, rec)
        digests = _Digests(x, expected_digest)
        evs = [(i, self.evaluators[i]) for i in self.ahead]
        keys = [verdict_key(ev, digests) for _, ev in evs]  # before claiming: a raise here claims nothing
        claimed = self.claims.claim(keys)
        keyed = [(i, ev, key, wait, mine) for (i, ev), key, (wait, mine) in zip(evs, keys, claimed, strict=True)]
        return Plan(Ahead(x, digests), keyed)

    def abandon(self, plan: Plan) -> None:
        """Judge nothing of `plan` (the run is stopping): release its claims."""
        for _, _, key, _, mine in plan.keyed:
            self.claims.release(key, mine)

    def judge(self, plan: Plan, rec: dict[str, Any], stopping: Callable[[], bool]) -> None:
        """Judge what `plan` says (on a judge thread) and file the verdicts in `rec` for its item.

        Every claim is released, whatever happens. A run that stops leaves the rest of the
        case's verdicts to the evaluation that records it (nothing is lost, nothing judged twice
        that was already filed).
        """
        spent: dict[str, list[dict[str, Any]]] = {}
        saved: dict[str, list[dict[str, Any]]] = {}
        ahead = plan.ahead
        pending = list(plan.keyed)
        try:
            with usage.using_budget(self.budget), self.caches.batch():
                while pending:
                    i, ev, key, wait, mine = pending[0]
                    if stopping():
                        return
                    if wait is not None:
                        while not wait.wait(WAIT_POLL_S):
                            if stopping():
                                return
                    value, hit = _judge(ev, ahead.x, self.caches, False, ahead.digests, (spent, saved), (key,))
                    ahead.verdicts[i] = Verdict(
                        ev, value, hit, spent.pop(ev.criterion, None), saved.pop(ev.criterion, None)
                    )
                    pending.pop(0)
                    self.claims.release(key, mine)
        finally:
            for _, _, key, _, mine in pending:
                self.claims.release(key, mine)
            if ahead.verdicts:
                rec[AHEAD] = ahead
