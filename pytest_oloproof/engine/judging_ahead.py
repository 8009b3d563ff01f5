"""Judging executed cases ahead of their items, with the verdicts a sequential run would give.

The scheduler executes cases concurrently; without this, their evaluators (LLM
judges included) would run one case at a time on pytest's main thread as each item
reports. An `AheadJudge` says which of a case's verdicts may be judged off that
thread and judges one of them; the scheduler files them in the case's record
(`evaluate.record.AHEAD`), and the item's `evaluate_record` uses them, runs the
others and writes the verdict bundle, as before. Which case asks which judge, and
when, is the scheduler's: one map from judgment key to a shared future.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pytest_oloproof.cache.caches import Caches
from pytest_oloproof.cache.execution_entry import EXECUTION_ENTRY
from pytest_oloproof.evaluate.record import (
    Ahead,
    Verdict,
    VerdictDigests,
    asks_a_model,
    eval_input,
    judge_verdict,
    stored_bundle,
    verdict_key,
)
from pytest_oloproof.evaluators.base import Evaluator
from pytest_oloproof.records.cases import Case
from pytest_oloproof.usage import accounting as usage

#: The most judge calls in flight ahead of the items, however many providers a run has.
MAX_JUDGE_THREADS = 128


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
    """Judge calls in flight at once: enough to keep every model provider's own `concurrency` busy.

    One when no evaluator asks a model: the others only compute, and threads sharing the GIL would
    not compute faster. A provider without a `concurrency` of its own counts as the run's.
    """
    providers: dict[int, int] = {}
    for ev in evaluators:
        provider = getattr(ev, "provider", None)
        if provider is not None:
            providers[id(provider)] = int(getattr(provider, "concurrency", 0) or concurrency)
    return max(1, min(sum(providers.values()), MAX_JUDGE_THREADS))


class AheadJudge:
    """Judges the evaluators that may run ahead (`ahead`, positions in `evaluators`) for executed cases."""

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

    def verdicts_to_judge(self, case: Case, rec: dict[str, Any]) -> tuple[Ahead, list[tuple[int, str | None]]] | None:
        """What to judge ahead for a case: its input, and per evaluator its position and judgment key.

        None when nothing is: a case that failed (every criterion is missing), or whose execution
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
        digests = VerdictDigests(x, expected_digest)
        keys = [(i, verdict_key(self.evaluators[i], digests)) for i in self.ahead]
        return Ahead(x, digests), keys

    def judge(self, ahead: Ahead, i: int, key: str | None) -> None:
        """Judge evaluator `i` through the judgment cache (a thread's work) and file its verdict in `ahead`."""
        ev = self.evaluators[i]
        spent: dict[str, list[dict[str, Any]]] = {}
        saved: dict[str, list[dict[str, Any]]] = {}
        with usage.using_budget(self.budget), self.caches.batch():
            value, hit = judge_verdict(ev, ahead.x, self.caches, False, ahead.digests, (spent, saved), (key,))
        ahead.verdicts[i] = Verdict(ev, value, hit, spent.get(ev.criterion), saved.get(ev.criterion))
