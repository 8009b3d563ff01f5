"""`RunSession`: one run's lifecycle (prepare, start, one case at a time, interrupt, finish), face-neutral.

The pytest plugin builds one from its options and calls it from one-line hooks; whatever only pytest
can do (fixtures, items, stopping the session, the terminal) reaches the session through `Face`.
"""

from __future__ import annotations

import gc
import json
import os
import re
import shutil
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from pytest_oloproof.cache.caches import CacheMode
from pytest_oloproof.errors import ExitCode, OloproofError, WriteError
from pytest_oloproof.evaluators.providers import close_clients
from pytest_oloproof.records import redaction
from pytest_oloproof.records.redaction import redact
from pytest_oloproof.records.shapes import RunRecord

from .interrupts import NotedInterrupts, install_sigterm, restore_sigterm

if TYPE_CHECKING:  # the core loads when a run is asked for, not whenever a face starts
    from pytest_oloproof.compare.comparison import SessionGate
    from pytest_oloproof.config.settings import LoadedConfig
    from pytest_oloproof.diagnose.diagnosis import Diagnoser
    from pytest_oloproof.engine.attempts import CompletionLedger
    from pytest_oloproof.engine.progress import Progress, ProgressDisplay
    from pytest_oloproof.engine.recorder import RunRecorder
    from pytest_oloproof.engine.scheduler import Scheduler
    from pytest_oloproof.engine.setup import RunSetup
    from pytest_oloproof.evaluators.base import Evaluator
    from pytest_oloproof.evaluators.registry import Registry
    from pytest_oloproof.records.cases import Case

#: a comparison the session made: its id, document and the baseline's record
Comparison = tuple[str, Mapping[str, Any], Mapping[str, Any] | None]
#: the name the session is registered under in pytest's plugin manager, where `oloproof run` reads its outcome
SESSION_PLUGIN_NAME = "oloproof-run"
#: A long session (this many case items or more) freezes the collector's view of what collection built.
LONG_SESSION_MIN_ITEMS = 1000
#: Seconds an interrupted session waits for cases already running ahead of their items.
SCHEDULER_GRACE_S = 10.0


class CannotStart(OloproofError):
    """The run cannot start (a bad option, config, store, baseline or policy): exit 2, nothing has run."""


@dataclass(frozen=True)
class SessionOptions:
    """What the face was asked for, parsed: the `--oloproof-*` options and where the run was started."""

    config_path: Path | None
    invocation_dir: Path
    config_error: OloproofError | None = None
    cache_mode: CacheMode = CacheMode.READWRITE
    concurrency: int | None = None
    repeats: int | None = None  # --oloproof-repeats: overrides `repeats`
    report: str | None = None
    html: str | None = None
    diagnose: str | None = None  # the run id to diagnose
    intervention: str = "gold-context"
    criterion: str | None = None
    top_k: int | None = None
    reranker: str | None = None
    token_budget: int | None = None
    fresh: bool = False
    baseline: str | None = None
    policy: str | None = None
    #: `--oloproof-shard I/N`: (I, N), this run executes only the cases of shard I and is recorded `partial`
    shard: tuple[int, int] | None = None
    #: the face only lists (items, fixtures, its cache): no case runs, nothing is stored, no store is created
    lists_only: bool = False
    #: an xdist worker: it runs cases; the controller records them
    is_worker: bool = False
    #: the budget ledger an xdist worker shares with the other workers of its run
    budget_share: str | None = None
    #: the paths named on the command line leave oloproof.yaml out: the evaluation is not collected
    left_out_by_args: bool = False


class Face(Protocol):
    """What only the face (pytest) can do for the session."""

    def registry(self) -> Registry:
        """Evaluator types: the built-in ones and those the face's plugins add."""

    def say(self, line: str) -> None:
        """A line on the terminal now (an interruption being handled)."""

    def stop(self, reason: str) -> None:
        """Start no further case."""

    def progress_output(self) -> tuple[Callable[[str], bool], float] | None:
        """Where a live progress line goes and its interval in seconds, if one is shown."""

    def run_recorded(self, record: RunRecord) -> None:
        """The run record is written (plugins' `pytest_oloproof_run_recorded`)."""

    def junit_properties(self, props: list[tuple[str, Any]]) -> None:
        """Session-level properties for a JUnit report."""


@dataclass(frozen=True)
class RunEnd:
    """How the face's session ended, as the run reads it."""

    exitstatus: int
    internal_error: bool = False
    usage_error: bool = False
    interrupted: bool = False  # the face reports an interruption
    stopped: bool = False  # the face stopped early (-x, --maxfail, a store error)


class RunSession:
    """All state of one run; the faces drive it and never reach past it into the core."""

    def __init__(self, options: SessionOptions, face: Face) -> None:
        self.options = options
        self.face = face
        redaction.clear()  # this run's configuration says what is secret (in-process sessions share a process)
        self.config_error = options.config_error
        self.cache_mode = options.cache_mode
        self.loaded_config: LoadedConfig | None = None
        self.setup: RunSetup | None = None
        self.recorder: RunRecorder | None = None
        self.record: RunRecord | None = None
        self.scheduler: Scheduler | None = None
        self.ledger: CompletionLedger | None = None  # which cases completed, on the controller of a run
        self.progress: Progress | None = None
        self.progress_display: ProgressDisplay | None = None
        self.evaluators: list[Evaluator] | None = None  # as the face resolved them (session fixtures)
        self.evaluator_error: str | None = None  # why the face could not resolve them, if it could not
        self._judging_ahead = False
        self.interrupted = False
        self.terminated = False  # the interruption was SIGTERM: no judge is asked any more and none waited for
        self.start_failed = False  # an Oloproof collection error was reported (here or by an xdist worker)
        self.items_selected = 0
        self._gc_frozen = False
        self.gate: SessionGate | None = None  # when a baseline or a policy is given
        self.gate_exit: int | None = None
        self._gate_pending: list[str] = []  # policy criteria the config does not give, checked once resolved
        self._deferred_cases: list[Case] | None = None  # the look-ahead's cases, until that check has passed
        self.summary_lines: list[str] = []
        self.cache_notice: str | None = None  # the cache could not be used (shown once, in the summary)
        self.store_error: OloproofError | None = None  # the store refused a write of the run: the run stops
        self.diagnoser: Diagnoser | None = None
        self.diagnosis_notes: list[str] = []
        self._described: tuple[tuple[int, ...], list[dict[str, Any]], list[Evaluator]] | None = None
        self.planned: dict[str, Any] | None = None  # a shard's run: the whole case set it is part of
        self.budget_id = os.urandom(8).hex()  # names the ledger this run's xdist workers share
        self._sigterm_installed = not options.is_worker and install_sigterm()

    @property
    def blocked(self) -> bool:
        """The release gate decided BLOCK (exit 3)."""
        return self.gate_exit == ExitCode.BLOCK

    # -- prepare

    def configured_criteria(self) -> list[str]:
        """The criteria oloproof.yaml configures (the face offers each as a fixture); [] when it does not load."""
        if self.options.config_path is None:
            return []
        try:
            from pytest_oloproof.config.settings import load_config

            # listing writes nothing: a store that cannot be created is no error then
            cfg = self.loaded_config = load_config(self.options.config_path, check_store=not self.options.lists_only)
        except OloproofError:
            return []  # reported at collection
        registry = self.face.registry()
        names = []
        for entry in cfg.settings.evaluators:
            cls = registry.types.get(entry.type)
            if entry.criterion:
                names.append(entry.criterion)
            elif cls is not None:
                names.append(cls.default_criterion(entry.options()))
        return names

    def prepare(self) -> RunSetup:
        """Load and validate everything before any case runs (raises OloproofError)."""
        if self.setup is not None:
            return self.setup
        if self.config_error is not None:
            raise self.config_error
        assert self.options.config_path is not None
        from pytest_oloproof.engine.setup import RunSetup

        overrides: dict[str, Any] = {"concurrency": self.options.concurrency} if self.options.concurrency else {}
        if self.options.repeats:
            overrides["repeats"] = self.options.repeats
        setup = self.setup = RunSetup.load(
            self.loaded_config or self.options.config_path,  # parsed once, when the face started
            cache_mode=self.cache_mode,
            registry=self.face.registry(),
            overrides=overrides,
        )
        if not self.options.lists_only:  # listing items opens no cache (and creates no store)
            self._check_cache(setup)
        if self.options.shard is not None:
            self.planned = planned_set(setup.cases)
        if setup.budget is not None and self.options.budget_share:
            # under pytest-xdist the workers reserve from one ledger, so max_cost / max_judge_calls hold per run
            setup.budget.share(setup.store.root / "budget" / self.options.budget_share)
        return setup

    def _check_cache(self, setup: RunSetup) -> None:
        """A cache that cannot be opened (a corrupt cache.db) is turned off: the run goes on uncached, said once."""
        notice = turn_off_unusable_cache(setup, "run")
        if notice is not None:
            self.cache_mode = CacheMode.OFF  # and so the run record says the run was uncached
            self.cache_notice = f"warning: {notice}"

    def default_evaluator(self, criterion: str, provider: Any = None) -> Evaluator:
        """The configured evaluator of `criterion`, asking `provider` when one is given (LLM judges)."""
        for e in self.prepare().evaluators:
            if e.criterion == criterion:
                if provider is not None and hasattr(e, "with_provider"):
                    return e.with_provider(provider)  # type: ignore[no-any-return]
                return e
        raise LookupError(criterion)

    def new_diagnoser(self) -> Diagnoser:
        """The diagnosis the options ask for (the run, the intervention): raises OloproofError when it cannot be."""
        if self.diagnoser is None:
            from pytest_oloproof.diagnose.diagnosis import Diagnoser, Request

            o = self.options
            request = Request(
                run=o.diagnose or "",
                intervention=o.intervention or "gold-context",
                criterion=o.criterion,
                top_k=o.top_k,
                reranker=o.reranker,
                token_budget=o.token_budget,
                fresh=o.fresh,
            )
            self.diagnoser = Diagnoser(self.prepare(), request, warn=self.diagnosis_notes.append)
        return self.diagnoser

    def check_before_start(self) -> None:
        """What can be decided before any case runs: the config, the report paths, the store, the gate."""
        if self.config_error is not None:
            raise CannotStart(f"Oloproof cannot start: {self.config_error}")
        self._check_report_paths()
        self._check_store()
        self._prepare_gate()

    def _check_report_paths(self) -> None:
        """The JSON and HTML reports must name files that can be written: a new path or a regular file,
        never a folder, a FIFO or a device (which a report would replace)."""
        from pytest_oloproof.store.files import output_problem

        for flag, value, example in (
            ("--oloproof-report", self.options.report, "report.json"),
            ("--oloproof-html", self.options.html, "report.html"),
        ):
            if not value:
                continue
            path = self.options.invocation_dir / value
            problem = None
            if path.is_dir():
                problem = f"{value} is a folder; give the file to write, e.g. {Path(value) / example}"
            else:
                reason = output_problem(path)
                problem = f"cannot write {value}: {reason}" if reason is not None else None
            if problem is not None:
                raise CannotStart(f"Oloproof cannot start: {flag}: {problem}")

    def _check_store(self) -> None:
        """The store can be created and written (a probe write); not when the face only lists."""
        if self.loaded_config is None or self.options.lists_only:
            return
        from pytest_oloproof.store.files import Store

        try:
            Store(self.loaded_config.store_dir).check_writable()
        except WriteError as exc:
            raise CannotStart(f"Oloproof cannot start: {exc}") from exc

    def _prepare_gate(self) -> None:
        """Validate the baseline and the policy before any case runs."""
        baseline, policy = self.options.baseline, self.options.policy
        if self.options.shard is not None:
            _check_shard_alone(self.options)
        if not baseline and not policy:
            return
        from pytest_oloproof.compare.comparison import SessionGate
        from pytest_oloproof.config.settings import load_config
        from pytest_oloproof.store.files import Store

        try:
            assert self.options.config_path is not None
            store = Store(load_config(self.options.config_path).store_dir)
            self.gate = SessionGate.prepare(store, baseline, policy, self.options.invocation_dir)
        except OloproofError as exc:
            raise CannotStart(f"Oloproof cannot start: {exc}") from exc

    def prepare_controller(self) -> None:
        """An xdist controller collects nothing: load and check here what the workers will run, before they do.

        The setup is the one the controller records the run with; it keeps no cases (the workers run them).
        """
        try:
            setup = self.prepare()
            if self.options.diagnose:
                self.new_diagnoser()  # an unknown run, a bad intervention
        except OloproofError as exc:
            raise CannotStart(f"Oloproof cannot start:\n{exc}") from exc
        setup.cases = []
        self._check_gate(setup)
        # the workers resolve the evaluator fixtures: a policy criterion only they can give is checked after the run
        self._gate_pending = []

    def _check_gate(self, setup: RunSetup) -> None:
        """What the configuration already says against the session's policy, before any case runs."""
        if self.gate is None:
            return
        try:
            self._gate_pending = self.gate.check_candidate(
                setup.system.config["name"], [e.criterion for e in setup.evaluators]
            )
        except OloproofError as exc:
            raise CannotStart(f"Oloproof cannot start: {exc}") from exc

    def _check_resolved_gate(self, setup: RunSetup, evaluators: list[Evaluator]) -> None:
        """Once the evaluators are resolved, a policy criterion none of them gives is an error; the look-ahead
        waits for this check."""
        if not self._gate_pending:
            return
        self._gate_pending = []
        assert self.gate is not None
        criteria = list(dict.fromkeys([e.criterion for e in setup.evaluators] + [e.criterion for e in evaluators]))
        try:
            self.gate.check_resolved(criteria)
        except OloproofError as exc:
            raise CannotStart(f"Oloproof cannot start: {exc}") from exc
        cases, self._deferred_cases = self._deferred_cases, None
        if cases is not None:
            self._start_scheduler(setup, cases)

    def check_metadata_markers(self, cases: Sequence[Case], registered: set[str]) -> None:
        """Refuse a metadata value that would become a marker someone else registered (raises ConfigError).

        pytest, its plugins and conftest files give registered markers meanings of their own: a case
        whose topic is `skip` or `xfail` would be skipped or reported xfailed, changing the run's
        outcome. Oloproof cannot tell which registered markers something acts on, so none may be a
        metadata value; checked for every case before any item exists.
        """
        setup = self.prepare()
        markers = setup.cfg.settings.markers
        if not markers:
            return
        problems = []
        for case in cases:
            for key in markers:
                value = case.metadata.get(key)
                if value is None or value == "":
                    continue
                name = marker_name(value)
                if name in registered:
                    problems.append(
                        f"{case.source}: case {case.id!r}: metadata.{key} is {value!r}, which would become the "
                        f"marker {name!r}; pytest or a plugin already registers {name!r} and may act on it (skip, "
                        "xfail, usefixtures and the like change what a case reports)"
                    )
        if problems:
            from pytest_oloproof.config.settings import where_in
            from pytest_oloproof.errors import ConfigError

            where = where_in(Path(self.shown_path(setup.cfg.path)), setup.cfg.node, ["markers"])
            shown = problems[:20] + ([f"... and {len(problems) - 20} more"] if len(problems) > 20 else [])
            raise ConfigError(
                "\n".join(shown) + f"\nFix: give these cases another {', '.join(markers)} value, or take the key "
                f"out of `markers:` ({where}); metadata values never become markers that pytest or a plugin registers"
            )

    def shard_cases(self, cases: Sequence[Case]) -> list[Case]:
        """The cases this run executes: all of them, or with `--oloproof-shard I/N` those of shard I."""
        if self.options.shard is None or self.options.diagnose:
            return list(cases)
        from pytest_oloproof.records.identity import shard_of

        index, count = self.options.shard
        return [c for c in cases if shard_of(c.id, count) == index]

    def shard_fields(self) -> dict[str, Any]:
        """What a shard's run record says of its shard and of the whole case set it is part of."""
        if self.options.shard is None or self.planned is None:
            return {}
        index, count = self.options.shard
        return {"shard": {"index": index, "count": count}, "planned": self.planned}

    # -- start

    def start(self, cases: list[Case]) -> None:
        """The selected cases, in order: start the store's grouped writes, progress and the look-ahead."""
        self.items_selected = len(cases)
        if len(cases) >= LONG_SESSION_MIN_ITEMS and not self._gc_frozen and gc.get_freeze_count() == 0:
            # the collected items and cases live until the session ends: out of the cyclic collector's sight,
            # its full passes during the run do not rescan them (about a twentieth of a 10,000-case run);
            # undone by `unfreeze_gc`. Not when the host process froze objects itself: unfreezing would
            # release those too.
            gc.freeze()
            self._gc_frozen = True
        if self.setup is not None:
            self.setup.cases = []  # the selected items hold their cases; let the others go
        if self.options.lists_only:
            return
        if self.diagnoser is not None:
            self.diagnoser.select(c.id for c in cases)
            return
        setup = self.setup
        if setup is None or not cases or self.options.is_worker:
            return
        # this process alone runs these cases: commit cache writes in groups, skip lookups of absent keys
        # (xdist workers do neither: they must see each other's entries as soon as they are written)
        setup.caches.hold_writes()
        setup.caches.track_keys()
        from pytest_oloproof.engine.attempts import CompletionLedger

        self._check_gate(setup)
        self.ledger = setup.engine.ledger = CompletionLedger()
        self.start_progress(len(cases))
        if setup.cfg.settings.concurrency > 1 or setup.is_async:
            if self._gate_pending:  # no case runs before the policy is known to fit the session's criteria
                self._deferred_cases = cases
            else:
                self._start_scheduler(setup, cases)

    def _start_scheduler(self, setup: RunSetup, cases: list[Case]) -> None:
        from pytest_oloproof.engine.scheduler import Scheduler

        self.scheduler = Scheduler(
            setup.engine, cases, setup.cfg.settings.concurrency, use_async=setup.is_async, progress=self.progress
        )
        self.scheduler.start()
        # while the cases wait on the system, import what the summary at the end computes with
        threading.Thread(target=self._warm_up, name="oloproof-warm-up", daemon=True).start()

    def _warm_up(self) -> None:
        """Import (and run once) what the run's summary needs, so a latency-bound run does not pay it at its end.

        The intervals' first call imports scipy's quantile functions (a few tenths of a second); done
        while the cases ahead wait on retrievers, models and judges, it costs no wall time. Never fails.
        """
        try:
            from pytest_oloproof.report import text  # noqa: F401
            from pytest_oloproof.stats import intervals as stats

            stats.clopper_pearson(1, 2)
        except Exception:
            pass

    def start_progress(self, total: int | None) -> None:
        """Counters on the controller; a throttled line through the face when it shows one."""
        from pytest_oloproof.engine.progress import Progress, ProgressDisplay

        if self.progress is not None:
            if total is not None:
                self.progress.total = total
            return
        self.progress = Progress(total)
        output = self.face.progress_output()
        if output is not None:
            write, every = output
            self.progress_display = ProgressDisplay(self.progress, write, every_s=every, after_s=every)

    def tick(self) -> None:
        if self.progress_display is not None:
            self.progress_display.tick()

    # -- one case

    def run_case(self, case: Case, evaluators: list[Evaluator]) -> dict[str, Any]:
        """Execute (or take the look-ahead's result) and evaluate one case: its record, never raising for the
        system's errors (raises CannotStart when the resolved evaluators do not fit the policy)."""
        setup = self.prepare()
        self.evaluators = evaluators
        self._check_resolved_gate(setup, evaluators)
        if self.scheduler is not None and not self._judging_ahead:
            self._judge_ahead(setup, self.scheduler, evaluators)
        with setup.caches.batch():  # one cache commit for the case's stages and verdicts
            try:
                if self.scheduler is not None and self.scheduler.has(case.id):
                    rec = self.scheduler.result(case.id, tick=self.tick)
                else:
                    rec = setup.execute(case)
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # never the system's (the engine records those): a case all the same
                from pytest_oloproof.engine.error_records import internal_error_record

                rec = internal_error_record(case, exc)
            return setup.evaluate(case, rec, evaluators)

    def _judge_ahead(self, setup: RunSetup, scheduler: Scheduler, evaluators: list[Evaluator]) -> None:
        """Let the look-ahead run the evaluators that may run off this thread (see engine/judging_ahead.py), once."""
        from pytest_oloproof.engine.judging_ahead import AheadJudge, judge_threads, may_judge_ahead

        self._judging_ahead = True
        ahead = [i for i, e in enumerate(evaluators) if may_judge_ahead(e, setup.evaluators, setup.budget)]
        if not ahead:
            scheduler.judge_ahead(None)
            return
        judge = AheadJudge(evaluators, ahead, setup.caches, relevance_unit=setup.relevance_unit, budget=setup.budget)
        scheduler.judge_ahead(judge, judge_threads([evaluators[i] for i in ahead], setup.cfg.settings.concurrency))

    def describe(self, evaluators: list[Evaluator]) -> list[dict[str, Any]]:
        """The evaluators' description, computed once while they are the same (session) objects."""
        key = tuple(id(e) for e in evaluators)
        if self._described is None or self._described[0] != key:
            from pytest_oloproof.engine.setup import describe_evaluators

            labels = self.setup.labels if self.setup is not None else None
            self._described = (key, json_safe(describe_evaluators(evaluators, labels)), evaluators)  # keep them alive
        return self._described[1]

    def record_case(self, rec: dict[str, Any], evaluators: list[dict[str, Any]]) -> bool:
        """Record a case on the controller; False when it was not (the store refused a write: the run stops)."""
        if self.store_error is not None:
            return False  # the run is stopping, nothing more is recorded
        recorder = self._recorder()
        if recorder is None:
            return False
        _merge_evaluators(recorder.header, evaluators)
        try:
            recorder.add(rec)
        except WriteError as exc:  # a full disk, a read-only store: stop cleanly, keeping what was recorded
            self.store_error = exc
            self.face.stop(redact(f"oloproof: {exc}"))
            return False
        if self.ledger is not None:
            self.ledger.forget(rec["id"])
        if self.progress is None:  # under xdist the controller collects nothing
            self.start_progress(None)
        if self.scheduler is None and self.progress is not None:  # the look-ahead counts the cases it executes
            self.progress.add(rec)
        return True

    def record_diagnosis(self, outcome: dict[str, Any]) -> None:
        """A diagnosis item's outcome, on the controller."""
        try:
            diagnoser = self.new_diagnoser()  # under xdist the controller collects nothing
        except OloproofError:
            return
        diagnoser.record(outcome)

    def _recorder(self) -> RunRecorder | None:
        if self.recorder is None:
            try:
                setup = self.prepare()
            except OloproofError:
                return None
            from pytest_oloproof.engine.recorder import RunRecorder

            header = setup.header(cache_mode=self.cache_mode, extra=self.shard_fields())
            self.recorder = RunRecorder(setup.store, header)
        return self.recorder

    # -- interrupt

    def interrupt(self, *, terminated: bool) -> None:
        """Ctrl-C (or SIGTERM, `terminated`) reached the face."""
        self.interrupted = True
        self.terminated = self.terminated or terminated
        if self.terminated and self.scheduler is not None:
            # at once, not at finish: the face renders the interruption first (seconds, on a busy machine),
            # and the judge threads would go on asking judges all that time
            self.scheduler.stop(grace_s=0.0, judges=False)

    # -- finish

    def finish(self, end: RunEnd, cases: Iterable[Case | None]) -> int:
        """Stop the look-ahead, record what completed, write the run record, reports and decisions.

        `cases`: the selected cases in order (None for one already let go). Returns the exit status.
        """
        try:
            return self._finish(end, cases)
        finally:
            self._flush_cache()

    def _flush_cache(self) -> None:
        if self.setup is None:
            return
        caches, cache_dir = self.setup.caches, self.setup.store.cache_dir
        try:
            caches.flush()  # held cache writes, before anything else may read them
            if caches.write_failure is not None:
                self.summary_lines.append(
                    f"warning: the cache at {cache_dir} stopped taking writes "
                    f"({caches.write_failure}); the stages after that are not cached"
                )
        except Exception as exc:  # the run is recorded; only later runs' reuse of these entries is lost
            from pytest_oloproof.cache.caches import clear_command

            self.summary_lines.append(
                f"warning: the last cache writes could not be committed ({type(exc).__name__}: {exc}); "
                "the run is recorded, but those stages are not cached. If this repeats, reset the cache "
                f"with: {clear_command(cache_dir)}"
            )

    def _finish(self, end: RunEnd, cases: Iterable[Case | None]) -> int:
        status = end.exitstatus
        interrupted = self.interrupted or end.interrupted
        if self.scheduler is not None:
            self._stop_scheduler(self.scheduler, interrupted)
        if self.options.is_worker:
            return status
        if end.internal_error:
            status = ExitCode.INTERNAL
        elif end.usage_error or self.start_failed:
            status = ExitCode.USAGE  # an Oloproof collection error is a usage error, also under xdist
        if self.options.lists_only:
            return status
        if self.diagnoser is not None:
            try:
                return self._finish_diagnosis(self.diagnoser, interrupted or end.stopped, status)
            except WriteError as exc:  # the diagnosis could not be stored (a full disk, a read-only store)
                self.summary_lines = [*self.summary_lines, f"error: {exc}"]
                return ExitCode.USAGE
        if self.store_error is None:
            try:
                self._record_unrecorded(cases)
            except WriteError as exc:
                self.store_error = exc
        if self.store_error is not None:  # run.json keeps saying incomplete; cases.jsonl what was recorded
            return self._report_store_error()
        shard = self.options.shard is not None and not self.options.left_out_by_args
        if self.recorder is None and shard and status in (0, 5):
            self._recorder()  # a shard none of whose cases ran is still recorded: the merge needs every shard
        if self.recorder is None:
            if self.options.left_out_by_args and self.options.config_path is not None:
                path = self.options.config_path
                self.summary_lines = [
                    f"no case ran: the paths given do not include {path.name} (or a folder holding it); name it "
                    f"too to run the evaluation: pytest --oloproof {self.shown_path(path)} ..."
                ]
            return status
        interrupted = self.interrupted or end.interrupted  # a second Ctrl-C while recording counts too
        complete = not (interrupted or end.stopped) and len(self.recorder.cases) >= self.items_selected
        # the evaluators actually used (conftest overrides and additions), so the run
        # record and its metrics describe what ran, not only what was configured
        try:
            done = ("partial" if self.options.shard is not None else "complete") if complete else "incomplete"
            record = self.recorder.finish(done, {"evaluators": self.recorder.header["evaluators"]})
        except WriteError as exc:  # a full disk at the end, or the run's record deleted during the run
            self.store_error = exc
            return self._report_store_error()
        self.record = record
        from pytest_oloproof.report.markdown import run_markdown
        from pytest_oloproof.report.text import run_summary

        self.summary_lines = run_summary(record, store_root=str(self.recorder.store.root))
        if self.options.shard is not None and self.planned is not None:
            index, count = self.options.shard
            self.summary_lines.append(
                f"Shard {index}/{count}: {len(self.recorder.cases)} of {len(self.planned['cases'])} planned cases "
                "(not gated alone); combine every shard's run with `oloproof merge SOURCE…`"
            )
        step = os.environ.get("GITHUB_STEP_SUMMARY")
        if step:
            with open(step, "a", encoding="utf-8") as f:
                f.write(redact(run_markdown(record)))
        self.face.run_recorded(record)
        gated: dict[str, Any] = {}
        if self.gate is not None and not interrupted:
            from pytest_oloproof.report.junit import gate_properties
            from pytest_oloproof.report.markdown import gate_markdown
            from pytest_oloproof.report.text import gate_lines

            gate_exit = self.gate.apply(record)
            self.summary_lines += gate_lines(self.gate)
            section = gate_markdown(self.gate) if step else ""
            if step and section:
                with open(step, "a", encoding="utf-8") as f:
                    f.write(redact(section))
            self.gate_exit = gate_exit if gate_exit is not None else self.gate_exit
            gated = self.gate.report_fields()
            self.face.junit_properties(gate_properties(self.gate))
        report_failed = False
        if self.options.report:  # after the gate, so the report carries its decision
            try:
                self.recorder.write_report(Path(self.options.report), {**record, **gated})
            except WriteError as exc:  # the run is recorded in the store; the report asked for is not written
                self.summary_lines.append(f"error: the JSON report was not written: {exc}")
                report_failed = True
        if self.options.html:
            self._write_html(Path(self.options.html), record)
        if self.gate_exit is not None:
            status = self.gate_exit
        if report_failed and status != ExitCode.BLOCK:
            status = ExitCode.USAGE
        return status

    def _finish_diagnosis(self, diagnoser: Diagnoser, interrupted: bool, status: int) -> int:
        result = diagnoser.finish(complete=not interrupted and len(diagnoser.outcomes) >= self.items_selected)
        from pytest_oloproof.report.text import diagnosis_lines

        self.summary_lines = [f"warning: {m}" for m in self.diagnosis_notes] + diagnosis_lines(result)
        if result.measured_nothing and int(status) == 0:
            status = ExitCode.FAILED  # nothing was diagnosed: never a success
        try:
            if self.options.report:
                from pytest_oloproof.store.files import write_json

                write_json(Path(self.options.report), result.to_json())
            if self.options.html and result.doc_id is not None:
                from pytest_oloproof.report.html import render_page, write_page
                from pytest_oloproof.report.model import diagnosis_view

                write_page(Path(self.options.html), render_page(diagnosis_view(result.doc, result.doc_id)))
        except WriteError as exc:
            self.summary_lines.append(f"error: the report was not written: {exc}")
            status = ExitCode.USAGE
        return status

    def _report_store_error(self) -> int:
        """Say what the store refused and what of the run is kept (no report, no gate: there is no record)."""
        recorder = self.recorder
        lines = [f"error: {self.store_error}"]
        kept = recorder is not None and (recorder.store.run_dir(recorder.run_id) / "cases.jsonl").is_file()
        if recorder is not None and kept and "was lost" not in str(self.store_error):
            lines.append(
                f"the run stopped: the {len(recorder.cases)} case(s) recorded before that are kept in "
                f"{recorder.store.run_dir(recorder.run_id)} (an incomplete run); free space or fix the store, "
                "then run again"
            )
        elif not kept:
            lines.append("the run stopped; nothing of it is stored")
        if self.options.report or self.options.html:
            lines.append("no report was written: the run has no record to report")
        self.summary_lines = lines
        return ExitCode.USAGE

    def _write_html(self, path: Path, record: RunRecord) -> None:
        """The run's HTML page, with the session's comparison when there was one."""
        assert self.recorder is not None
        # the record holds slim case summaries; the page shows every full case, read back from the store
        full = cast(RunRecord, {**record, "cases": list(self.recorder.store.iter_cases(self.recorder.run_id))})
        gate = self.gate
        comparison: Comparison | None = None
        if gate is not None and gate.comparison is not None:
            comparison = (*gate.comparison, gate.baseline)
        decision = gate.decision if gate is not None else None
        try:
            from pytest_oloproof.report.html import run_page, write_page

            write_page(path, run_page(full, self.recorder.store, comparison, decision))
        except OSError as exc:  # the run is recorded; only its page is lost
            self.summary_lines.append(f"warning: could not write the HTML report {path}: {exc}")
            return
        self.summary_lines.append(f"HTML report: {path}")

    def _stop_scheduler(self, scheduler: Scheduler, interrupted: bool) -> None:
        """Start no new case; on interruption, give running ones a short grace period to finish.

        A second Ctrl-C ends the wait. What completed is recorded by `_record_unrecorded`,
        which also makes sure nothing completes after that, so the incomplete run says
        exactly what the next run will reuse.
        """
        grace = SCHEDULER_GRACE_S if interrupted else 0.0
        judges = not self.terminated  # after SIGTERM only the executing cases are waited for, never a judge
        running = scheduler.running if judges else scheduler.executing
        if interrupted and running:
            self.face.say(
                f"oloproof: interrupted; waiting up to {grace:.0f} s for {running} running case(s) "
                "(Ctrl-C again to stop now)"
            )
        try:
            scheduler.stop(grace_s=grace, judges=judges)
        except KeyboardInterrupt:
            scheduler.stop(grace_s=0.0)

    def _record_unrecorded(self, cases: Iterable[Case | None]) -> None:
        """Record the cases that completed but whose item never reported them (Ctrl-C, -x).

        Closing the run's gate stops any further case from completing (committing its
        execution entry), so the record then holds exactly the cases the next run reuses.
        """
        gate, self.ledger = self.ledger, None
        if gate is None:
            return
        done = gate.close()
        if not done:
            return
        try:
            setup = self.prepare()
        except OloproofError:
            return
        recorded = self.recorder.written_ids() if self.recorder is not None else set()
        left = [c for c in done if c not in recorded]
        if self.evaluators is None and self.evaluator_error is not None:
            # the session's evaluators never resolved: judging these cases with the configured ones instead
            # would record verdicts of evaluators the conftest replaced (a sequential run records none either)
            if left:
                self.face.say(
                    f"oloproof: {len(left)} completed case(s) not recorded: the evaluator fixtures could not be "
                    f"resolved ({self.evaluator_error})"
                )
            return
        evaluators = self.evaluators if self.evaluators is not None else setup.evaluators
        ask = not self.terminated  # SIGTERM: record with the verdicts already judged, ask no judge
        if self.interrupted and left:
            self.face.say(
                f"oloproof: recording {len(left)} completed case(s), judging what was not judged ahead "
                "(Ctrl-C again to record them with only the verdicts already judged)"
                if ask
                else f"oloproof: terminated; recording {len(left)} completed case(s) with the verdicts already "
                "judged (no judge is asked)"
            )
        scheduler = self.scheduler
        # Only the judging is interrupted by Ctrl-C: a Ctrl-C landing anywhere else (while a record is
        # written, say) would lose that case and every one after it; it is noted, and stops the judging
        with NotedInterrupts() as interrupts:
            for case in cases:
                if case is None or case.id not in done or case.id in recorded:
                    continue
                recorded.add(case.id)
                kept = dict(done[case.id])
                rec: dict[str, Any] | None = None
                stopped_here = False
                if ask and not interrupts.noted:
                    try:
                        with interrupts.raised():
                            # the look-ahead's own record carries what was judged ahead of the item (waited
                            # for while a judge thread still asks for a verdict of it: no judge is asked twice)
                            ahead = scheduler.settled(case.id, wait=True) if scheduler is not None else None
                            source = ahead or kept
                            kept = dict(source)  # evaluate pops what was judged ahead: kept for a second attempt
                            rec = setup.evaluate(case, source, evaluators, ask=True)
                    except KeyboardInterrupt:  # Ctrl-C again: judge nothing more, but record every completed case
                        interrupts.hold()
                        rec, stopped_here = None, True
                if stopped_here or interrupts.noted:
                    self.interrupted, ask = True, False
                if rec is None:
                    if not stopped_here and scheduler is not None:
                        kept = scheduler.settled(case.id, wait=False) or kept
                    rec = setup.evaluate(case, dict(kept), evaluators, ask=False)
                recorder = self._recorder()
                assert recorder is not None
                recorder.add(rec)

    def summary(self) -> list[str]:
        """The lines the face shows at the end (a cache notice first)."""
        if self.options.is_worker:
            return []
        return ([self.cache_notice] if self.cache_notice else []) + self.summary_lines

    def unfreeze_gc(self) -> None:
        """Give the objects frozen after collection back to the collector (the face is done with them)."""
        if self._gc_frozen:
            gc.unfreeze()
            self._gc_frozen = False

    def close(self) -> None:
        """Release the signal handler, the judges' HTTP connections, the store's writer, the caches and the
        budget's ledger."""
        if self._sigterm_installed:
            restore_sigterm()
        close_clients()
        if self.recorder is not None:
            self.recorder.close()
        if self.setup is not None:
            try:
                self.setup.caches.close()
            except Exception:
                pass  # already reported by finish
            if self.setup.budget is not None:
                self.setup.budget.close()
                if not self.options.is_worker:  # the workers' shared ledger (if they had one) is done with
                    shutil.rmtree(self.setup.store.root / "budget" / self.budget_id, ignore_errors=True)

    def shown_path(self, path: Path) -> str:
        """`path` relative to where the run was started, when it is below it."""
        try:
            return str(path.relative_to(self.options.invocation_dir.resolve()))
        except ValueError:
            return str(path)


def load_setup(config_path: Path, *, store: Path | None = None) -> tuple[RunSetup, str | None]:
    """A setup outside a pytest session (a diagnosis from the command line): the store of `store` when given,
    and an unusable cache turned off; returns it with the warning to show about the cache, if any."""
    from pytest_oloproof.cache.caches import Caches
    from pytest_oloproof.engine.setup import RunSetup
    from pytest_oloproof.store.files import Store

    setup = RunSetup.load(config_path, load_case_files=False)
    if store is not None:
        setup.store = Store(store)
        setup.caches = Caches(setup.store.cache_dir, setup.caches.mode)
    return setup, turn_off_unusable_cache(setup, "diagnosis")


def turn_off_unusable_cache(setup: RunSetup, what: str) -> str | None:
    """Turn off a cache that cannot be opened (a corrupt cache.db): the warning saying so, or None."""
    reason = setup.caches.disable_if_unusable()
    if reason is None:
        return None
    from pytest_oloproof.cache.caches import clear_command

    cache_dir = setup.store.cache_dir
    return (
        f"the cache at {cache_dir} is unusable ({reason}); this {what} is uncached. "
        f"Reset the cache with: {clear_command(cache_dir)}"
    )


def planned_set(cases: Sequence[Case]) -> dict[str, Any]:
    """The whole case set a shard is part of: its case-set digest (as a run of every case records it) and its
    case ids in file order (the order a merged run records them in)."""
    from pytest_oloproof.records.identity import case_digest, case_set_digest

    digest = case_set_digest([{"id": c.id, "digest": case_digest(c.input, c.expected)} for c in cases])
    return {"case_set_digest": digest, "cases": [c.id for c in cases]}


def _check_shard_alone(options: SessionOptions) -> None:
    """A shard's run is partial: it is neither gated nor compared, and a diagnosis is not sharded (CannotStart)."""
    used = [
        flag
        for flag, value in (
            ("--oloproof-policy", options.policy),
            ("--oloproof-baseline", options.baseline),
            ("--oloproof-diagnose", options.diagnose),
        )
        if value
    ]
    if used:
        raise CannotStart(
            f"Oloproof cannot start: --oloproof-shard with {' and '.join(used)}: a shard's run is partial, "
            "so it is never gated, compared or diagnosed alone. Run each shard without it, combine the shards' "
            "runs with `oloproof merge SOURCE…`, then gate or compare the merged run "
            "(`oloproof gate RUN --policy FILE`, `oloproof compare RUN BASELINE --policy FILE`)"
        )


def marker_name(value: Any) -> str:
    """The marker a metadata value becomes (`markers:` in oloproof.yaml)."""
    return re.sub(r"\W+", "_", str(value)).strip("_") or "_"


def _merge_evaluators(header: dict[str, Any], used: Sequence[dict[str, Any]]) -> None:
    """Fold the evaluators a case used into the run header: a fixture overriding a
    configured criterion replaces its description; an added evaluator is appended."""
    known = header.setdefault("evaluators", [])
    index = {d["criterion"]: i for i, d in enumerate(known)}
    for d in used:
        if d["criterion"] in index:
            known[index[d["criterion"]]] = d
        else:
            index[d["criterion"]] = len(known)
            known.append(d)


def json_safe(value: Any) -> Any:
    """`value` as plain JSON types (anything else as its text), as a report carries it to another process."""
    return json.loads(json.dumps(value, default=str))
