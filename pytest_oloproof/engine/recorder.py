"""A run being recorded: its case records appended to the store as they come, and its final record."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from pytest_oloproof.cache.miss_reasons import explain as explain_misses
from pytest_oloproof.errors import StoreError
from pytest_oloproof.evaluate.wiring import WiringChecks
from pytest_oloproof.evaluators.base import Evaluator
from pytest_oloproof.records.cases import Case
from pytest_oloproof.records.identity import case_set_digest
from pytest_oloproof.records.shapes import CaseRecord, RunRecord, RunSummary
from pytest_oloproof.stats.aggregate import summarize_run, summary_settings
from pytest_oloproof.store.files import RunWriter, Store, new_run_id, write_json_lines, write_json_stream
from pytest_oloproof.store.summary import slim_case, usage_fields
from pytest_oloproof.usage import accounting as usage

from .setup import RunSetup, internal_error_case, now_iso
from .stages import NORMAL, ExecutionPlan


class RunRecorder:
    """Collects case records of one run, appends them to the store, and writes the final record."""

    def __init__(self, store: Store, header: Mapping[str, Any], run_id: str | None = None) -> None:
        self.run_id = run_id or new_run_id()
        self.store = store
        self.header = dict(header)
        self.cases: list[dict[str, Any]] = []
        self._writer: RunWriter | None = None
        #: wiring checks read every full case as it arrives (diagnosis child runs replay on purpose: none)
        self.wiring = WiringChecks(self.header) if self.header.get("purpose", "run") == "run" else None

    def _open(self) -> RunWriter:
        if self._writer is None:
            self._writer = self.store.start_run(self.run_id, self.header)
        return self._writer

    def add(self, rec: dict[str, Any]) -> None:
        """Append a case; one that cannot be written as it is is recorded as an internal error, never dropped."""
        try:  # per-case tokens and cost, for readers of the record
            usage.price_case(rec, self.header.get("pricing"))
        except Exception:  # pricing must never lose a case: it is recorded unpriced
            pass
        writer = self._open()
        try:
            writer.add_case(rec)
        except (TypeError, ValueError, OverflowError) as exc:  # not JSON (e.g. an evaluator's `actual` object)
            criteria = rec.get("criteria")
            configured = [e["criterion"] for e in self.header.get("evaluators", [])]
            names = list(criteria) if isinstance(criteria, Mapping) else configured
            fallback = internal_error_case(rec, exc, names)
            for key in ("input", "expected", "metadata", "source"):
                fallback[key] = rec.get(key)
            try:
                writer.add_case(fallback)
            except (TypeError, ValueError, OverflowError):
                for key in ("input", "expected", "metadata"):
                    fallback[key] = None
                writer.add_case(fallback)
            rec = fallback
        if self.wiring is not None:
            try:
                self.wiring.add(rec)
            except Exception:  # a check must never lose a case
                pass
        self.cases.append(slim_case(rec))

    def summarize(self) -> RunSummary:
        """Metrics, slices and cache counts for the cases recorded so far."""
        return summarize_run(self.cases, summary_settings(self.header))

    def finish(self, status: str, extra: Mapping[str, Any] | None = None, *, explain: bool = True) -> RunRecord:
        """Write the final record; returns it with the slim case summaries (full cases stay in the store).

        `explain=False`: the cache misses are not explained against this store's previous run (a merge of shards
        brings the reasons each shard found in its own store, in `extra`)."""
        if status != "complete" and self._writer is not None:
            self._reconcile()
        record = {**self.summarize(), "status": status, "finished_at": now_iso(), **(dict(extra) if extra else {})}
        digest = case_set_digest(self.cases)
        if digest is not None:
            record["case_set_digest"] = digest
        if explain and self.header.get("purpose", "run") == "run":  # diagnosis child runs bypass caches on purpose
            try:
                misses = explain_misses(self.store, self.run_id, self.header, self.cases, self._written_cases)
            except (OSError, ValueError, KeyError, TypeError, StoreError) as exc:  # never lose a run over this
                misses = {"note": f"the reasons could not be worked out ({type(exc).__name__}: {exc})"}
            if misses is not None:
                record["cache_misses"] = misses
        record.update(self.usage_fields())
        if self.wiring is not None:
            record["wiring"] = self.wiring.findings()
        self._open().finish(record)
        return cast(
            RunRecord, {**self.header, "run_id": self.run_id, "schema": "oloproof.run/1", **record, "cases": self.cases}
        )

    def written_ids(self) -> set[str]:
        """Ids of the cases in cases.jsonl so far (what every reader sees, whatever an interruption left in memory)."""
        if self._writer is None:
            return set()
        self._writer.flush()
        return {str(rec.get("id")) for rec in self.store.iter_cases(self.run_id, strict=False)}

    def _written_cases(self) -> Iterable[CaseRecord]:
        """This run's full case records, as written so far (read back once, for the cache-miss reasons)."""
        if self._writer is None:
            return iter(())
        self._writer.flush()
        return self.store.iter_cases(self.run_id, strict=False)  # its own lines, just written

    def usage_fields(self) -> dict[str, Any]:
        """`usage` (tokens, cost, saved) and `budget` (what the guard stopped) of the cases recorded so far."""
        return usage_fields(self.cases, self.header)

    def _reconcile(self) -> None:
        """After an interruption, count exactly the cases in cases.jsonl.

        Ctrl-C can land between writing a case's line and noting it in memory; the
        line is what the next run and every reader see, so the record follows it.
        """
        assert self._writer is not None
        self._writer.flush()
        written = [slim_case(rec) for rec in self.store.iter_cases(self.run_id, strict=False)]
        if len(written) != len(self.cases):
            self.cases = written

    def write_report(self, path: Path, record: Mapping[str, Any]) -> None:
        """The JSON run report with every full case record, streamed from the store (memory stays flat).

        The lines this recorder wrote are copied into the report as they are; a file holding
        anything else is read back and encoded record by record.
        """
        head = {k: v for k, v in record.items() if k != "cases"}
        lines = self._writer.own_lines() if self._writer is not None else None
        if lines is not None:
            write_json_lines(path, head, "cases", lines)
            return
        cases = self.store.iter_cases(self.run_id, strict=False)
        write_json_stream(path, head, "cases", cases)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


def run_cases(
    ev: RunSetup,
    cases: Iterable[Case],
    recorder: RunRecorder,
    plan_for: Callable[[Case], ExecutionPlan] | None = None,
    evaluators: Sequence[Evaluator] | None = None,
    gold_for: Callable[[Case], Sequence[Mapping[str, Any]] | None] | None = None,
    bypass_judgment: bool = False,
) -> None:
    """Execute and evaluate cases in order without pytest (diagnosis child runs, CLI)."""
    for case in cases:
        plan = plan_for(case) if plan_for else NORMAL
        rec = ev.execute(case, plan)
        gold = gold_for(case) if gold_for else None
        recorder.add(ev.evaluate(case, rec, evaluators, gold=gold, bypass_judgment=bypass_judgment))
