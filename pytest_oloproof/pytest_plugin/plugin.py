"""The pytest face of Oloproof: options, items per case, evaluator fixtures, session hooks.

Thin by design: everything it does is a call into the core (runner, execute,
evaluation, store, render). One stateful `OloproofPlugin` object is registered
per session when --oloproof is given.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import json
import os
import re
import shutil
import signal
import threading
import types
from collections.abc import Callable, Generator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_oloproof.cache.caches import CacheMode, parse_mode
from pytest_oloproof.config.values import parse_positive_int
from pytest_oloproof.errors import OloproofError, WriteError
from pytest_oloproof.records import redaction
from pytest_oloproof.records.redaction import redact
from pytest_oloproof.report.junit import junit_value

if TYPE_CHECKING:  # the core is imported when --oloproof is given, not whenever pytest starts
    from pytest_oloproof.config.settings import LoadedConfig
    from pytest_oloproof.evaluators.base import Evaluator
    from pytest_oloproof.evaluators.registry import Registry
    from pytest_oloproof.records.cases import Case
    from pytest_oloproof.session import Evaluation, RunRecorder

PLUGIN_KEY = pytest.StashKey["OloproofPlugin"]()
PLUGIN_NAME = "oloproof-session"
EXIT_BLOCK = 3
EXIT_USAGE = 2
EXIT_INTERNAL = 4
#: pytest's options (their dests) under which it only lists: items, fixtures, the cache; never runs a case
_LISTING_OPTIONS = ("collectonly", "setuponly", "setupplan", "showfixtures", "show_fixtures_per_test", "cacheshow")
#: A long session (this many case items or more) freezes the collector's view of what collection built.
LONG_SESSION_MIN_ITEMS = 1000


# ------------------------------------------------------------------ options


def _positive_int(value: str) -> int:
    try:
        return parse_positive_int(value)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def _cache_mode(value: str) -> CacheMode:
    try:
        return parse_mode(value)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("oloproof", "Oloproof: RAG evaluation")
    group.addoption("--oloproof", action="store_true", dest="oloproof", help="run the Oloproof evaluation")
    group.addoption("--oloproof-config", dest="oloproof_config", metavar="PATH", help="oloproof.yaml to use")
    group.addoption(
        "--oloproof-cache",
        dest="oloproof_cache",
        type=_cache_mode,
        default=None,
        metavar="MODE",
        help="off|read|write|refresh (default: read and write)",
    )
    group.addoption(
        "--oloproof-concurrency",
        dest="oloproof_concurrency",
        type=_positive_int,
        default=None,
        metavar="N",
        help="cases executing at once (overrides `concurrency`)",
    )
    group.addoption("--oloproof-report", dest="oloproof_report", metavar="PATH", help="write the JSON run report")
    group.addoption(
        "--oloproof-html",
        dest="oloproof_html",
        metavar="PATH",
        help="write the run's self-contained HTML report (with the comparison when a baseline is given)",
    )
    group.addoption("--oloproof-diagnose", dest="oloproof_diagnose", metavar="RUN_ID", help="diagnose a run")
    group.addoption(
        "--oloproof-intervention",
        dest="oloproof_intervention",
        default="gold-context",
        metavar="NAME",
        help="gold-context | top-k | reranker",
    )
    group.addoption("--oloproof-criterion", dest="oloproof_criterion", metavar="NAME", help="criterion to diagnose")
    group.addoption("--oloproof-top-k", dest="oloproof_top_k", type=_positive_int, metavar="N")
    group.addoption("--oloproof-reranker", dest="oloproof_reranker", metavar="MODULE:FUNCTION")
    group.addoption("--oloproof-fresh", dest="oloproof_fresh", action="store_true", help="re-run child runs")
    group.addoption("--oloproof-baseline", dest="oloproof_baseline", metavar="RUN_ID|FILE")
    group.addoption("--oloproof-policy", dest="oloproof_policy", metavar="PATH")
    parser.addini("oloproof_config", "path of oloproof.yaml (default: <rootdir>/oloproof.yaml)", default="")
    parser.addini(
        "oloproof_progress",
        "live progress line: auto (only when the output is a terminal) | on | off",
        default="auto",
    )
    parser.addini("oloproof_progress_interval", "seconds between progress lines (and before the first)", default="2")


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from . import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


def pytest_configure(config: pytest.Config) -> None:
    for line in (
        "oloproof: an Oloproof evaluation case",
        "oloproof_failed: a failed case selected for diagnosis",
        "oloproof_diagnose: an item of an Oloproof diagnosis session",
    ):
        config.addinivalue_line("markers", line)
    if not config.getoption("oloproof", False):
        return
    plugin = OloproofPlugin(config)
    config.stash[PLUGIN_KEY] = plugin
    config.pluginmanager.register(plugin, PLUGIN_NAME)
    # registered before the cleanups of pytest's own plugins, so it runs after them: their last
    # full garbage collections still skip what collection built
    config.add_cleanup(plugin.unfreeze_gc)


# ------------------------------------------------------------------ items


class ConfigCollectError(Exception):
    """Carries an Oloproof error raised while collecting, shown without a traceback."""


class OloproofFile(pytest.File):
    """oloproof.yaml as a collector: one item per case."""

    def collect(self) -> Any:
        plugin = self.config.stash[PLUGIN_KEY]
        try:
            ev = plugin.prepare()
        except OloproofError as exc:
            plugin.cannot_start.add(self.nodeid)
            raise ConfigCollectError(str(exc)) from exc
        yield from plugin.make_items(self, ev)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, ConfigCollectError):
            return redact(f"Oloproof cannot start:\n{excinfo.value}")
        return _redacted_repr(super().repr_failure(excinfo))


class CaseFailed(Exception):
    def __init__(self, case_id: str, failed: list[tuple[str, dict[str, Any]]]) -> None:
        self.case_id, self.failed = case_id, failed
        super().__init__(f"case {case_id} failed {', '.join(n for n, _ in failed)}")


class CaseSystemError(Exception):
    def __init__(self, case_id: str, error: dict[str, Any]) -> None:
        self.case_id, self.error = case_id, error
        super().__init__(error.get("message", "system error"))


def _run_case(request: pytest.FixtureRequest) -> None:
    """The test function of every case item; the item carries its case."""
    item = request.node
    assert isinstance(item, CaseItem)
    item.config.stash[PLUGIN_KEY].run_item(request, item.case)


# one function for every item, its signature given up front: pytest asks for it once per item
_run_case.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
)


class CaseItem(pytest.Function):
    """One case: execute (or take the pre-executed result), evaluate, fail on failed criteria.

    Items live until the session ends, so once a case has run the item lets go of
    it (and of its record) and keeps only its id and source line.
    """

    case_id: str = ""
    case_source: str = ""

    def bind(self, case: Case) -> None:
        self.case = case
        self.case_id = case.id
        self.case_source = case.source

    case: Case
    diagnosis: dict[str, Any] | None = None  # a diagnosis item's outcome (diagnose.Diagnoser.run_case)
    evaluators: list[dict[str, Any]] | None = None

    @property
    def id(self) -> Any:
        """pytest 9.2+: the structured node id, as pytest parses it back from the text `nodeid`.

        pytest's last-failed cache (`--lf`, `--ff`) stores node ids as text and reads
        `support-rag[refund_annual]` back as a name and a parameter; built from that name
        alone, the item's own id kept it whole and never matched. Same text, same id.
        """
        parsed = self.__dict__.get("_oloproof_id")
        if parsed is None:  # parsed once: pytest asks for it several times per item
            own = super().id
            parse = getattr(type(own), "parse", None)
            parsed = self.__dict__["_oloproof_id"] = parse(str(own)) if parse is not None else own
        return parsed

    def reportinfo(self) -> tuple[Any, int | None, str]:
        line = None
        src = self.case_source
        if ":" in src:
            tail = src.rsplit(":", 1)[1]
            line = int(tail) - 1 if tail.isdigit() else None
        return self.path, line, f"oloproof case {self.case_id}"

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        exc = excinfo.value
        if isinstance(exc, CaseFailed):
            lines = [f"case {exc.case_id!r} failed {len(exc.failed)} criterion(s):"]
            for name, c in exc.failed:
                if c.get("status") == "missing":
                    lines.append(f"  {name}: missing ({c.get('reason')})")
                else:
                    lines.append(f"  {name}: expected {c.get('expected')!r}, actual {c.get('actual')!r}")
            return redact("\n".join(lines))
        if isinstance(exc, CaseSystemError):
            err = exc.error
            tb = err.get("traceback") or ""
            what = {
                "timeout": "timed out",
                "contract_violation": f"{err.get('stage')}() broke the system contract",
                "internal_error": "an error inside Oloproof (not the system)",
                "budget_exhausted": "not executed, the run's budget stopped it",  # nothing failed
            }.get(str(err.get("reason")), f"the system failed in {err.get('stage')}")
            head = f"case {exc.case_id!r}: {what}; every criterion is missing"
            if err.get("reason") == "internal_error":
                head += " with reason internal_error — please report it"
            return redact(f"{head}\n{tb}{err.get('message', '')}".rstrip())
        return _redacted_repr(super().repr_failure(excinfo))


def _marker_name(value: Any) -> str:
    return re.sub(r"\W+", "_", str(value)).strip("_") or "_"


def _registered_markers(config: pytest.Config) -> set[str]:
    """Names of the markers registered so far (by pytest, plugins, conftest files, the ini file)."""
    return {str(line).split(":", 1)[0].split("(", 1)[0].strip() for line in config.getini("markers")}


def check_metadata_markers(config: pytest.Config, cases: Sequence[Case], markers: Sequence[str], where: str) -> None:
    """Refuse a metadata value that would become a marker someone else registered (raises ConfigCollectError).

    pytest, its plugins and conftest files give registered markers meanings of their own: a case
    whose topic is `skip` or `xfail` would be skipped or reported xfailed, changing the run's
    outcome. Oloproof cannot tell which registered markers something acts on, so none may be a
    metadata value; checked for every case before any item exists. `where`: the `markers:`
    setting's place in oloproof.yaml, for the message.
    """
    if not markers:
        return
    taken = _registered_markers(config)
    problems = []
    for case in cases:
        for key in markers:
            value = case.metadata.get(key)
            if value is None or value == "":
                continue
            name = _marker_name(value)
            if name in taken:
                problems.append(
                    f"{case.source}: case {case.id!r}: metadata.{key} is {value!r}, which would become the marker "
                    f"{name!r}; pytest or a plugin already registers {name!r} and may act on it (skip, xfail, "
                    "usefixtures and the like change what a case reports)"
                )
    if problems:
        shown = problems[:20] + ([f"... and {len(problems) - 20} more"] if len(problems) > 20 else [])
        keys = ", ".join(markers)
        raise ConfigCollectError(
            "\n".join(shown) + f"\nFix: give these cases another {keys} value, or take the key out of `markers:` "
            f"({where}); metadata values never become markers that pytest or a plugin registers"
        )


def _mark_case(config: pytest.Config, item: pytest.Item, case: Case, markers: Any) -> None:
    """Metadata markers (`markers:` in the config) and -k keywords (case id, metadata values)."""
    for key in markers:
        value = case.metadata.get(key)
        if value is None or value == "":
            continue
        mname = _marker_name(value)
        config.addinivalue_line("markers", f"{mname}: cases with metadata {key}={value}")
        item.add_marker(mname)
    item.extra_keyword_matches.update(str(v) for v in case.metadata.values() if isinstance(v, (str, int)))
    item.extra_keyword_matches.add(case.id)


# ------------------------------------------------------------------ the session object


class OloproofPlugin:
    """All Oloproof state of one pytest session; hooks are its methods."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.is_worker = hasattr(config, "workerinput")
        redaction.clear()  # this session's configuration says what is secret (pytester runs share a process)
        explicit = config.getoption("oloproof_config") or _ini_config_path(config)
        self.config_error: OloproofError | None = None
        self.config_path: Path | None = None
        self._loaded_config: LoadedConfig | None = None
        try:
            from pytest_oloproof.config.settings import find_config

            self.config_path = find_config(explicit, Path(config.rootpath), Path(config.invocation_params.dir))
        except OloproofError as exc:
            self.config_error = exc
        self.cache_mode: CacheMode = config.getoption("oloproof_cache") or CacheMode.READWRITE
        self.evaluation: Evaluation | None = None
        self.recorder: RunRecorder | None = None
        self.record: dict[str, Any] | None = None
        self._outcomes: dict[str, tuple[dict[str, Any], Any]] = {}  # nodeid -> (record, evaluators) until reported
        self._diagnoses: dict[str, dict[str, Any]] = {}  # nodeid -> a diagnosis item's outcome until reported
        self.prefetcher: Any = None
        self.run_gate: Any = None  # engine.attempts.CompletionLedger: which cases completed, on the controller
        self.progress: Any = None  # engine.progress.Progress, on the controller
        self.progress_display: Any = None  # engine.progress.ProgressDisplay when progress is shown
        self._evaluators: list[Evaluator] | None = None  # as resolved by the first item (session fixtures)
        self._evaluator_error: str | None = None  # why an item could not resolve them, if one could not
        self._judging_ahead = False  # the prefetcher was told what to judge ahead of the items
        #: the paths named on the command line leave oloproof.yaml out: the evaluation is not collected
        self.left_out_by_args = False
        self.interrupted = False
        #: the interruption was SIGTERM: no judge is asked any more and none is waited for
        self.terminated = False
        self.selection_failed = False
        #: node ids of config files whose collection failed on an Oloproof error (a usage error: exit 2)
        self.cannot_start: set[str] = set()
        self.start_failed = False  # such a collection error was reported (by this process or an xdist worker)
        self.items_selected = 0
        self._gc_frozen = False
        self.gate_exit: int | None = None
        self.gate: Any = None  # compare.SessionGate when --oloproof-baseline is given
        #: policy criteria oloproof.yaml does not give: checked once the evaluator fixtures are resolved
        self._gate_pending: list[str] = []
        self._deferred_cases: list[Case] | None = None  # the prefetcher's cases, until that check has passed
        self.summary_lines: list[str] = []
        self.cache_notice: str | None = None  # the cache could not be used (shown once, in the summary)
        self.store_error: OloproofError | None = None  # the store refused a write of the run: the session stops
        self._session: pytest.Session | None = None
        self.diagnoser: Any = None  # a diagnose.Diagnoser when --oloproof-diagnose is given
        self.diagnosis_notes: list[str] = []
        self._register_default_fixtures()
        self._extend_args()
        self._install_sigterm()
        #: names the budget ledger this session's xdist workers share (usage.Budget.share)
        self.budget_id = os.urandom(8).hex()
        if not self.is_worker and config.pluginmanager.hasplugin("xdist"):
            config.pluginmanager.register(_XdistControllerHooks(self), "oloproof-xdist")

    # -- startup

    def _extend_args(self) -> None:
        """Collect oloproof.yaml when pytest chose the paths itself (testpaths, the current folder).

        Paths named on the command line select what runs, as in any pytest session: when
        none of them is the config file or a folder holding it, the evaluation is not
        collected (`pytest --oloproof test_normal.py` runs test_normal.py only).
        """
        target = self.config_path
        if target is None:
            return
        args = self.config.args
        for a in args:
            p = Path(a.split("::", 1)[0])
            p = p if p.is_absolute() else Path(self.config.invocation_params.dir) / p
            try:
                if p.resolve() == target or target.is_relative_to(p.resolve()):
                    return
            except OSError:
                continue
        if self.config.args_source == pytest.Config.ArgsSource.ARGS:
            self.left_out_by_args = True
            return
        args.append(str(target))

    def _install_sigterm(self) -> None:
        if self.is_worker:
            return
        try:
            if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
                signal.signal(signal.SIGTERM, _sigterm_to_interrupt)
                self._sigterm_installed = True
        except ValueError:  # not the main thread
            pass

    def _register_default_fixtures(self) -> None:
        """Each configured evaluator becomes a session fixture named after its criterion.

        Registered now (before conftest files are parsed) so a conftest fixture of the
        same name overrides it.
        """
        names = self._configured_criteria()
        module = types.ModuleType("pytest_oloproof_evaluator_fixtures")
        plugin = self

        def make(name: str) -> Any:
            def fixture(request: pytest.FixtureRequest) -> Evaluator:
                provider = request.getfixturevalue("oloproof_judge_provider")
                return plugin.default_evaluator(name, provider)

            fixture.__name__ = name
            return pytest.fixture(scope="session", name=name)(fixture)

        for name in names:
            setattr(module, f"_oloproof_fixture_{_marker_name(name)}", make(name))
        self.config.pluginmanager.register(module, "oloproof-evaluator-fixtures")

    def _configured_criteria(self) -> list[str]:
        if self.config_path is None:
            return []
        try:
            from pytest_oloproof.config.settings import load_config

            # listing writes nothing: a store that cannot be created is no error then
            cfg = self._loaded_config = load_config(self.config_path, check_store=not self.runs_nothing)
        except OloproofError:
            return []  # reported at collection, where pytest shows it as a collection error
        registry = self._registry()
        names = []
        for entry in cfg.settings.evaluators:
            cls = registry.types.get(entry.type)
            if entry.criterion:
                names.append(entry.criterion)
            elif cls is not None:
                names.append(cls.default_criterion(entry.options()))
        return names

    def _registry(self) -> Registry:
        from pytest_oloproof.evaluators.registry import Registry

        registry = Registry()
        for types_ in self.config.hook.pytest_oloproof_evaluators():
            if types_:
                registry.add(types_)
        return registry

    def prepare(self) -> Evaluation:
        """Load and validate everything before any case runs (raises OloproofError)."""
        if self.evaluation is not None:
            return self.evaluation
        if self.config_error is not None:
            raise self.config_error
        assert self.config_path is not None
        overrides = {}
        conc = self.config.getoption("oloproof_concurrency")
        if conc:
            overrides["concurrency"] = conc
        from pytest_oloproof.session import Evaluation

        self.evaluation = Evaluation.load(
            self._loaded_config or self.config_path,  # parsed once, at configure time
            cache_mode=self.cache_mode,
            registry=self._registry(),
            overrides=overrides,
        )
        if not self.runs_nothing:  # listing items opens no cache (and creates no store)
            self._check_cache(self.evaluation)
        self._share_budget(self.evaluation)
        return self.evaluation

    def _check_cache(self, ev: Evaluation) -> None:
        """A cache that cannot be opened (a corrupt cache.db) is turned off: the run goes on uncached, said once."""
        reason = ev.caches.disable_if_unusable()
        if reason is None:
            return
        from pytest_oloproof.cache.caches import clear_command

        self.cache_mode = CacheMode.OFF  # and so the run record says the run was uncached
        self.cache_notice = (
            f"warning: the cache at {ev.store.cache_dir} is unusable ({reason}); this run is uncached. "
            f"Reset the cache with: {clear_command(ev.store.cache_dir)}"
        )

    def _share_budget(self, ev: Evaluation) -> None:
        """Under pytest-xdist the workers reserve from one ledger, so max_cost / max_judge_calls hold per run."""
        budget_id = getattr(self.config, "workerinput", {}).get("oloproof_budget")
        if ev.budget is not None and budget_id:
            ev.budget.share(ev.store.root / "budget" / str(budget_id))

    def default_evaluator(self, criterion: str, provider: Any = None) -> Evaluator:
        ev = self.prepare()
        for e in ev.evaluators:
            if e.criterion == criterion:
                if provider is not None and hasattr(e, "with_provider"):
                    return e.with_provider(provider)  # type: ignore[no-any-return]
                return e
        raise LookupError(criterion)

    def added_evaluator_fixtures(self) -> list[str]:
        """Fixtures declared with @pytest_oloproof.evaluator in conftest files or plugins."""
        names: list[str] = []
        for plugin in self.config.pluginmanager.get_plugins():
            for attr in list(getattr(plugin, "__dict__", {}).values()):
                name = getattr(attr, "__oloproof_evaluator__", None)
                if isinstance(name, str) and name not in names:
                    names.append(name)
        return names

    def make_items(self, parent: OloproofFile, ev: Evaluation) -> Generator[CaseItem, None, None]:
        if self.config.getoption("oloproof_diagnose"):
            yield from self._diagnosis_items(parent, ev)
            return
        configured = [e.criterion for e in ev.evaluators]
        fixture_names = configured + [n for n in self.added_evaluator_fixtures() if n not in configured]
        self.fixture_names = fixture_names
        system = redact(ev.system.config["name"])  # node ids are printed and written to JUnit
        markers = ev.cfg.settings.markers
        self._check_markers(ev, ev.cases, parent)
        fixtureinfo = None
        parent.add_marker("oloproof")  # items inherit it from their file: one marker, not one per item
        for case in ev.cases:
            # every item runs the same function under the same parent, so the fixture closure pytest
            # resolves for the first one holds for all (pytest shares it the same way between the
            # items of one parametrized test); resolving it per item was a third of collection
            item = CaseItem.from_parent(parent, name=f"{system}[{case.id}]", callobj=_run_case, fixtureinfo=fixtureinfo)
            if fixtureinfo is None:
                fixtureinfo = getattr(item, "_fixtureinfo", None)
            item.bind(case)
            _mark_case(self.config, item, case, markers)
            yield item

    def _check_markers(self, ev: Evaluation, cases: Sequence[Case], parent: OloproofFile) -> None:
        """Metadata markers that pytest or a plugin registers are a configuration error (exit 2, nothing runs)."""
        from pytest_oloproof.config.settings import where_in

        try:
            check_metadata_markers(
                self.config,
                cases,
                ev.cfg.settings.markers,
                where_in(Path(_shown_path(ev.cfg.path, self.config)), ev.cfg.node, ["markers"]),
            )
        except ConfigCollectError:
            self.cannot_start.add(parent.nodeid)
            raise

    # -- diagnosis (SPEC §9): items are the run's failed cases; the work is diagnose.Diagnoser's

    def _new_diagnoser(self, ev: Evaluation) -> Any:
        from pytest_oloproof.diagnose.diagnosis import Diagnoser, Request

        opt = self.config.getoption
        request = Request(
            run=opt("oloproof_diagnose"),
            intervention=opt("oloproof_intervention") or "gold-context",
            criterion=opt("oloproof_criterion"),
            top_k=opt("oloproof_top_k"),
            reranker=opt("oloproof_reranker"),
            fresh=bool(opt("oloproof_fresh")),
        )
        return Diagnoser(ev, request, warn=self.diagnosis_notes.append)

    def _diagnosis_items(self, parent: OloproofFile, ev: Evaluation) -> Generator[CaseItem, None, None]:
        from pytest_oloproof.session import case_from_record

        try:
            self.diagnoser = self.diagnoser or self._new_diagnoser(ev)
        except OloproofError as exc:
            self.cannot_start.add(parent.nodeid)
            raise ConfigCollectError(str(exc)) from exc
        system = redact(ev.system.config["name"])
        cases = [case_from_record(self.diagnoser.by_id[case_id]) for case_id in self.diagnoser.failed_ids]
        self._check_markers(ev, cases, parent)
        for case in cases:
            item = CaseItem.from_parent(parent, name=f"{system}[{case.id}]", callobj=_run_case)
            item.bind(case)
            for marker in ("oloproof", "oloproof_failed", "oloproof_diagnose"):
                item.add_marker(marker)
            _mark_case(self.config, item, case, ev.cfg.settings.markers)
            yield item

    def _run_diagnosis_item(self, request: pytest.FixtureRequest, case: Case) -> None:
        item = request.node
        assert isinstance(item, CaseItem)
        outcome = self.diagnoser.run_case(case.id)
        item.diagnosis = outcome
        self._diagnoses[item.nodeid] = outcome
        if outcome.get("undiagnosable"):
            pytest.skip(f"case {case.id!r} failed but has no expected.gold_context: undiagnosable")
        entry = outcome["entry"]
        for key in ("label", "reason", "strength", "best_relevant_position"):
            item.user_properties.append((f"oloproof.diagnosis.{key}", entry[key]))
        if "replay" in entry:
            item.user_properties.append(("oloproof.diagnosis.replay", entry["replay"].get("value", "missing")))

    def _finish_diagnosis(self, session: pytest.Session, exitstatus: int) -> None:
        interrupted = self.interrupted or int(exitstatus) == pytest.ExitCode.INTERRUPTED or bool(session.shouldstop)
        ran = len(self.diagnoser.outcomes)
        result = self.diagnoser.finish(complete=not interrupted and ran >= self.items_selected)
        self.summary_lines = [f"warning: {m}" for m in self.diagnosis_notes] + result.lines
        if result.measured_nothing and int(session.exitstatus) == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED  # nothing was diagnosed: never a success
        try:
            report_path = self.config.getoption("oloproof_report")
            if report_path:
                from pytest_oloproof.store.files import write_json

                write_json(Path(report_path), result.to_json())
            html_path = self.config.getoption("oloproof_html")
            if html_path and result.doc_id is not None:
                from pytest_oloproof.report.html import render_page, write_page
                from pytest_oloproof.report.model import diagnosis_view

                write_page(Path(html_path), render_page(diagnosis_view(result.doc, result.doc_id)))
        except WriteError as exc:
            self.summary_lines.append(f"error: the report was not written: {exc}")
            session.exitstatus = EXIT_USAGE

    # -- running

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if self.config_error is not None and not self.is_worker:
            pytest.exit(redact(f"Oloproof cannot start: {self.config_error}"), returncode=EXIT_USAGE)
        if not self.is_worker:
            self._session = session
            self._check_report_paths()
            self._check_store()
            self._prepare_gate()

    def _check_report_paths(self) -> None:
        """--oloproof-report and --oloproof-html must name files that can be written: checked before any case runs.

        A new path or a regular file; never a folder, a FIFO or a device (which a report would replace).
        """
        from pytest_oloproof.store.files import output_problem

        for option in ("oloproof_report", "oloproof_html"):
            value = self.config.getoption(option)
            if not value:
                continue
            path = Path(self.config.invocation_params.dir) / value
            flag = "--" + option.replace("_", "-")
            problem = None
            if path.is_dir():
                example = Path(value) / ("report.html" if option == "oloproof_html" else "report.json")
                problem = f"{value} is a folder; give the file to write, e.g. {example}"
            else:
                reason = output_problem(path)
                problem = f"cannot write {value}: {reason}" if reason is not None else None
            if problem is not None:
                pytest.exit(redact(f"Oloproof cannot start: {flag}: {problem}"), returncode=EXIT_USAGE)

    def _check_store(self) -> None:
        """The store can be created and written (a probe write), before any case runs: exit 2 naming it if not.

        Not when pytest only lists (--collect-only, --fixtures, ...), which writes nothing; a config that did
        not load is reported at collection.
        """
        if self._loaded_config is None or self.runs_nothing:
            return
        from pytest_oloproof.store.files import Store

        try:
            Store(self._loaded_config.store_dir).check_writable()
        except WriteError as exc:
            pytest.exit(redact(f"Oloproof cannot start: {exc}"), returncode=EXIT_USAGE)

    def _prepare_gate(self) -> None:
        """Validate --oloproof-baseline/--oloproof-policy before any case runs (exit 2 when wrong)."""
        baseline, policy = self.config.getoption("oloproof_baseline"), self.config.getoption("oloproof_policy")
        if not baseline and not policy:
            return
        from pytest_oloproof.compare.comparison import SessionGate
        from pytest_oloproof.config.settings import load_config
        from pytest_oloproof.store.files import Store

        try:
            assert self.config_path is not None
            store = Store(load_config(self.config_path).store_dir)
            self.gate = SessionGate.prepare(store, baseline, policy, Path(self.config.invocation_params.dir))
        except OloproofError as exc:
            pytest.exit(redact(f"Oloproof cannot start: {exc}"), returncode=EXIT_USAGE)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> None:
        """Under pytest-xdist, load and check the config, system and cases before the controller hands out any test.

        The controller collects nothing, so a bad config or case file would otherwise be only a worker's
        collection error: the rest of the suite would run and pytest would exit 1, not 2. Loaded now, the
        evaluation is the one the controller records the run with; it keeps no cases (the workers run them).
        """
        if self.is_worker or self.config.pluginmanager.get_plugin("dsession") is None:
            return  # one process: collection has loaded it already, and reported any error
        try:
            ev = self.prepare()
            if self.config.getoption("oloproof_diagnose"):
                self.diagnoser = self.diagnoser or self._new_diagnoser(ev)  # an unknown run, a bad intervention
        except OloproofError as exc:
            pytest.exit(redact(f"Oloproof cannot start:\n{exc}"), returncode=EXIT_USAGE)
        ev.cases = []
        self._check_gate(ev)
        # the workers resolve the evaluator fixtures: a policy criterion only they can give is checked after the run
        self._gate_pending = []

    def _check_gate(self, ev: Evaluation) -> None:
        """What the configuration already says against the session's policy, before any case runs (exit 2)."""
        if self.gate is None:
            return
        try:
            self._gate_pending = self.gate.check_candidate(
                ev.system.config["name"], [e.criterion for e in ev.evaluators]
            )
        except OloproofError as exc:
            pytest.exit(redact(f"Oloproof cannot start: {exc}"), returncode=EXIT_USAGE)

    def _check_resolved_gate(self, ev: Evaluation, evaluators: list[Evaluator]) -> None:
        """Once the evaluator fixtures are known, a policy criterion none of them gives is an error (exit 2).

        Checked by the first item, before it executes its case; the prefetcher waits for it.
        """
        if not self._gate_pending:
            return
        self._gate_pending = []
        criteria = list(dict.fromkeys([e.criterion for e in ev.evaluators] + [e.criterion for e in evaluators]))
        try:
            self.gate.check_resolved(criteria)
        except OloproofError as exc:
            pytest.exit(redact(f"Oloproof cannot start: {exc}"), returncode=EXIT_USAGE)
        cases, self._deferred_cases = self._deferred_cases, None
        if cases is not None:
            self._start_prefetcher(ev, cases)

    @pytest.hookimpl(tryfirst=True)
    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """Mark the collection error of an Oloproof config (it rides on the report to the xdist controller)."""
        if report.failed and report.nodeid in self.cannot_start:
            report.oloproof_cannot_start = True  # type: ignore[attr-defined]
        if not self.is_worker and getattr(report, "oloproof_cannot_start", False):
            self.start_failed = True

    @pytest.hookimpl(wrapper=True)
    def pytest_collection_modifyitems(self) -> Generator[None, None, None]:
        """Notes a selection that failed (a bad -k or -m expression): pytest still calls collection_finish."""
        try:
            return (yield)
        except BaseException:
            self.selection_failed = True
            raise

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if self.selection_failed:  # a usage error: no case may run, and no run is recorded
            return
        items = [i for i in session.items if isinstance(i, CaseItem)]
        self.items_selected = len(items)
        long_session = len(items) >= LONG_SESSION_MIN_ITEMS
        if long_session and not self._gc_frozen and gc.get_freeze_count() == 0:
            # the collected items, cases and modules live until the session ends: move them out of
            # the cyclic collector's sight, so its full passes during the run do not rescan them
            # (about a twentieth of a 10,000-case run); undone by unfreeze_gc, once pytest is done.
            # Not when the host process froze objects itself: unfreezing would release those too.
            gc.freeze()
            self._gc_frozen = True
        if self.evaluation is not None:
            self.evaluation.cases = []  # the selected items hold their cases; let the others go
        if self.runs_nothing:  # --collect-only, --setup-only, --setup-plan: no case executes, nothing is stored
            return
        if self.diagnoser is not None:
            self.diagnoser.select(i.case.id for i in items)
            return
        ev = self.evaluation
        if ev is None or not items or self.is_worker:
            return
        # this process alone runs these cases: commit cache writes in groups, skip lookups of absent keys
        # (xdist workers do neither: they must see each other's entries as soon as they are written)
        ev.caches.hold_writes()
        ev.caches.track_keys()
        from pytest_oloproof.engine.attempts import CompletionLedger

        self._check_gate(ev)
        self.run_gate = ev.engine.ledger = CompletionLedger()
        self._start_progress(len(items))
        if ev.cfg.settings.concurrency > 1 or ev.is_async:
            if self._gate_pending:  # no case runs before the policy is known to fit the session's criteria
                self._deferred_cases = [i.case for i in items]
            else:
                self._start_prefetcher(ev, [i.case for i in items])

    @property
    def runs_nothing(self) -> bool:
        """pytest only lists the items (--collect-only), their fixtures (--setup-only, --setup-plan,
        --fixtures, --fixtures-per-test) or its cache (--cache-show).

        Collecting and inspecting never execute a case or spend money: no case runs ahead of
        the items, no run or diagnosis is stored, no store is created.
        """
        opt = self.config.getoption
        return any(opt(name, None) for name in _LISTING_OPTIONS)

    def _start_prefetcher(self, ev: Evaluation, cases: list[Case]) -> None:
        from pytest_oloproof.engine.scheduler import Scheduler

        self.prefetcher = Scheduler(
            ev.engine,
            cases,
            ev.cfg.settings.concurrency,
            use_async=ev.is_async,
            progress=self.progress,
        )
        self.prefetcher.start()
        # while the cases wait on the system, import what the summary at the end computes with
        threading.Thread(target=_warm_summary, name="oloproof-warm-up", daemon=True).start()

    def _start_progress(self, total: int | None) -> None:
        """Counters on the controller; a throttled line through the terminal reporter when asked for."""
        from pytest_oloproof.engine.progress import Progress, ProgressDisplay

        if self.progress is not None:
            if total is not None:
                self.progress.total = total
            return
        self.progress = Progress(total)
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        mode = str(self.config.getini("oloproof_progress") or "auto").strip().lower()
        if tr is None or mode == "off":
            return
        verbosity = int(self.config.get_verbosity())
        if mode != "on" and not (bool(tr.isatty()) and verbosity > -2):
            return
        try:
            every = max(float(self.config.getini("oloproof_progress_interval")), 0.0)
        except ValueError:
            raise pytest.UsageError(
                "oloproof_progress_interval: expected a number of seconds, "
                f"got {self.config.getini('oloproof_progress_interval')!r}"
            ) from None
        self.progress_display = ProgressDisplay(self.progress, _progress_writer(tr), every_s=every, after_s=every)

    def _tick(self) -> None:
        if self.progress_display is not None:
            self.progress_display.tick()

    def run_item(self, request: pytest.FixtureRequest, case: Case) -> None:
        if self.diagnoser is not None:
            return self._run_diagnosis_item(request, case)
        ev = self.prepare()
        # evaluator fixtures are session-scoped: resolved by the first item, then reused
        evaluators = self._evaluators if self._evaluators is not None else self._resolve_evaluators(request)
        self._check_resolved_gate(ev, evaluators)
        if self.prefetcher is not None and not self._judging_ahead:
            self._judge_ahead(ev, evaluators)
        with ev.caches.batch():  # one cache commit for the case's stages and verdicts
            try:
                if self.prefetcher is not None and self.prefetcher.has(case.id):
                    rec = self.prefetcher.result(case.id, tick=self._tick)
                else:
                    rec = ev.execute(case)
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # never the system's (the engine records those): a case all the same
                from pytest_oloproof.engine.error_records import internal_error_record

                rec = internal_error_record(case, exc)
            rec = ev.evaluate(case, rec, evaluators)
        item = request.node
        assert isinstance(item, CaseItem)
        # held here until the report takes it: an attribute would grow every item's __dict__ for good
        self._outcomes[item.nodeid] = (rec, self._describe(evaluators))
        for name, c in rec["criteria"].items():
            value = junit_value(c)
            item.user_properties.append((self._property_name(name), redact(value) if isinstance(value, str) else value))
        if rec.get("error"):
            raise CaseSystemError(case.id, rec["error"])
        from pytest_oloproof.evaluate.record import failed_criteria, missing_criteria

        failed = failed_criteria(rec, evaluators) + missing_criteria(rec, evaluators)
        if failed:
            raise CaseFailed(case.id, [(n, dict(c)) for n, c in failed])

    def _judge_ahead(self, ev: Evaluation, evaluators: list[Evaluator]) -> None:
        """Let the scheduler run the evaluators that may run off this thread (see engine/judging_ahead.py), once."""
        from pytest_oloproof.engine.judging_ahead import AheadJudge, judge_threads, may_judge_ahead

        self._judging_ahead = True
        ahead = [i for i, e in enumerate(evaluators) if may_judge_ahead(e, ev.evaluators, ev.budget)]
        if not ahead:
            self.prefetcher.judge_ahead(None)
            return
        judge = AheadJudge(evaluators, ahead, ev.caches, relevance_unit=ev.relevance_unit, budget=ev.budget)
        threads = judge_threads([evaluators[i] for i in ahead], ev.cfg.settings.concurrency)
        self.prefetcher.judge_ahead(judge, threads)

    def _property_name(self, criterion: str) -> str:
        """`oloproof.<criterion>`, one string object per criterion (a report keeps one per case)."""
        names: dict[str, str] = self.__dict__.setdefault("_property_names", {})
        return names.setdefault(criterion, f"oloproof.{criterion}")

    def _resolve_evaluators(self, request: pytest.FixtureRequest) -> list[Evaluator]:
        from pytest_oloproof.evaluators.base import Evaluator

        evaluators = []
        for name in self.fixture_names:
            try:
                obj = request.getfixturevalue(name)
            except pytest.FixtureLookupError:
                # a criterion whose default fixture could not be registered at configure time
                # (e.g. a type added by a conftest.py below the rootdir): use the configured one
                obj = self.default_evaluator(name)
            if not isinstance(obj, Evaluator):
                self._evaluator_error = (
                    f"fixture {name!r} must return a pytest_oloproof.Evaluator, got {type(obj).__name__}"
                )
                raise TypeError(self._evaluator_error)
            evaluators.append(obj)
        self._evaluators = evaluators
        return evaluators

    def _describe(self, evaluators: list[Evaluator]) -> Any:
        """The evaluators' description, computed once while they are the same (session) objects."""
        key = tuple(id(e) for e in evaluators)
        cached = getattr(self, "_described", None)
        if cached is None or cached[0] != key:
            from pytest_oloproof.session import describe_evaluators

            labels = self.evaluation.labels if self.evaluation is not None else None
            cached = (key, json_safe(describe_evaluators(evaluators, labels)), evaluators)  # keep them alive
            self._described = cached
        return cached[1]

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> None:
        if isinstance(item, CaseItem) and not self.interrupted:
            item.case = None  # type: ignore[assignment]  # done with it; see CaseItem

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        _redact_sections(report)
        if report.when == "call" and (self._outcomes or self._diagnoses):
            # the case's record rides on its report: an xdist worker sends it to the controller
            # (this hook runs before xdist's, which serialises the report)
            outcome = self._outcomes.pop(report.nodeid, None)
            if outcome is not None:
                report.oloproof_case, report.oloproof_evaluators = outcome  # type: ignore[attr-defined]
            diagnosis = self._diagnoses.pop(report.nodeid, None)
            if diagnosis is not None:
                report.oloproof_diagnosis = diagnosis  # type: ignore[attr-defined]
        outcome = getattr(report, "oloproof_diagnosis", None)
        if outcome is not None and not self.is_worker and report.when == "call":
            if self.diagnoser is None:  # under xdist the controller collects nothing
                ev = self._controller_evaluation()
                self.diagnoser = self._new_diagnoser(ev) if ev is not None else None
            if self.diagnoser is not None:
                self.diagnoser.record(outcome)
            return
        rec = getattr(report, "oloproof_case", None)
        if rec is None or self.is_worker or report.when != "call":
            return
        if self.store_error is not None:
            return  # the store refused a write: the session is stopping, nothing more is recorded
        if self.recorder is None:
            ev = self._controller_evaluation()
            if ev is None:
                return
            from pytest_oloproof.session import RunRecorder

            self.recorder = RunRecorder(ev.store, ev.header(cache_mode=self.cache_mode))
        _merge_evaluators(self.recorder.header, getattr(report, "oloproof_evaluators", None) or [])
        try:
            self.recorder.add(rec)
        except WriteError as exc:  # a full disk, a read-only store: stop cleanly, keeping what was recorded
            self._stop_on_store_error(exc)
            return
        if self.run_gate is not None:
            self.run_gate.forget(rec["id"])
        del report.oloproof_case  # recorded in the store; pytest keeps every report until the session ends
        if self.progress is None:  # under xdist the controller collects nothing
            self._start_progress(None)
        if self.prefetcher is None:  # the prefetcher counts the cases it executes
            self.progress.add(rec)

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        # after pytest has written the item's letter or outcome (and any line break of its own)
        self._tick()

    def _controller_evaluation(self) -> Evaluation | None:
        try:
            return self.prepare()
        except OloproofError:
            return None

    @pytest.hookimpl(tryfirst=True)
    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        self.interrupted = True
        self.terminated = self.terminated or isinstance(excinfo.value, Terminated)
        if self.terminated and self.prefetcher is not None:
            # at once, not at session finish: pytest renders the interruption first (seconds, on a busy
            # machine), and the judge threads would go on asking judges all that time
            self.prefetcher.stop(grace_s=0.0, judges=False)
        _drop_lineless_frames(excinfo.value)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        try:
            self._sessionfinish(session, exitstatus)
        finally:
            if self.evaluation is not None:
                caches = self.evaluation.caches
                try:
                    caches.flush()  # held cache writes, before anything else may read them
                    if caches.write_failure is not None:
                        self.summary_lines.append(
                            f"warning: the cache at {self.evaluation.store.cache_dir} stopped taking writes "
                            f"({caches.write_failure}); the stages after that are not cached"
                        )
                except Exception as exc:  # the run is recorded; only later runs' reuse of these entries is lost
                    from pytest_oloproof.cache.caches import clear_command

                    self.summary_lines.append(
                        f"warning: the last cache writes could not be committed ({type(exc).__name__}: {exc}); "
                        "the run is recorded, but those stages are not cached. If this repeats, reset the cache "
                        f"with: {clear_command(self.evaluation.store.cache_dir)}"
                    )

    def _sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.prefetcher is not None:
            self._stop_prefetcher(session, exitstatus)
        if self.is_worker:
            return
        if int(exitstatus) == pytest.ExitCode.INTERNAL_ERROR:
            session.exitstatus = EXIT_INTERNAL
        elif int(exitstatus) == pytest.ExitCode.USAGE_ERROR or self.start_failed:
            session.exitstatus = EXIT_USAGE  # an Oloproof collection error is a usage error, also under xdist
        if self.runs_nothing:
            return
        if self.diagnoser is not None:
            try:
                self._finish_diagnosis(session, exitstatus)
            except WriteError as exc:  # the diagnosis could not be stored (a full disk, a read-only store)
                self.summary_lines = [*self.summary_lines, f"error: {exc}"]
                session.exitstatus = EXIT_USAGE
            return
        if self.store_error is None:
            try:
                self._record_unrecorded(session)
            except WriteError as exc:
                self.store_error = exc
        if self.store_error is not None:  # run.json keeps saying incomplete; cases.jsonl what was recorded
            self._report_store_error(session)
            return
        if self.recorder is None:
            if self.left_out_by_args and self.config_path is not None:
                name = self.config_path.name
                self.summary_lines = [
                    f"no case ran: the paths given do not include {name} (or a folder holding it); name it too "
                    f"to run the evaluation: pytest --oloproof {_shown_path(self.config_path, self.config)} ..."
                ]
            return
        interrupted = self.interrupted or int(exitstatus) == pytest.ExitCode.INTERRUPTED or bool(session.shouldstop)
        complete = not interrupted and len(self.recorder.cases) >= self.items_selected
        # the evaluators actually used (conftest overrides and additions), so the run
        # record and its metrics describe what ran, not only what was configured
        try:
            record = self.recorder.finish(
                "complete" if complete else "incomplete", {"evaluators": self.recorder.header["evaluators"]}
            )
        except WriteError as exc:  # a full disk at the end, or the run's record deleted during the run
            self.store_error = exc
            self._report_store_error(session)
            return
        self.record = record
        ev = self.evaluation
        store_root = str(ev.store.root) if ev else None
        from pytest_oloproof.report.text import markdown_summary, run_summary

        self.summary_lines = run_summary(record, store_root=store_root)
        step = os.environ.get("GITHUB_STEP_SUMMARY")
        if step:
            with open(step, "a", encoding="utf-8") as f:
                f.write(redact(markdown_summary(record)))
        self.config.hook.pytest_oloproof_run_recorded(record=record, config=self.config)
        gated: dict[str, Any] = {}
        if self.gate is not None and not (self.interrupted or int(exitstatus) == pytest.ExitCode.INTERRUPTED):
            gate_exit = self.gate.apply(record, self.summary_lines, step)
            self.gate_exit = gate_exit if gate_exit is not None else self.gate_exit
            gated = self.gate.report_fields()
            _junit_properties(self.config, self.gate.junit_properties())
        report_path = self.config.getoption("oloproof_report")
        report_failed = False
        if report_path:  # after the gate, so the report carries its decision
            try:
                self.recorder.write_report(Path(report_path), {**record, **gated})
            except WriteError as exc:  # the run is recorded in the store; the report asked for is not written
                self.summary_lines.append(f"error: the JSON report was not written: {exc}")
                report_failed = True
        html_path = self.config.getoption("oloproof_html")
        if html_path:
            self._write_html(Path(html_path), record)
        if self.gate_exit is not None:
            session.exitstatus = self.gate_exit
        if report_failed and session.exitstatus != EXIT_BLOCK:
            session.exitstatus = EXIT_USAGE

    def _stop_on_store_error(self, exc: OloproofError) -> None:
        """The store refused a write of the run (a full disk, a read-only folder): no further case starts."""
        self.store_error = exc
        if self._session is not None:
            self._session.shouldstop = redact(f"oloproof: {exc}")

    def _report_store_error(self, session: pytest.Session) -> None:
        """Say what the store refused and what of the run is kept; exit 2 (no report, no gate: there is no record)."""
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
        if self.config.getoption("oloproof_report") or self.config.getoption("oloproof_html"):
            lines.append("no report was written: the run has no record to report")
        self.summary_lines = lines
        session.exitstatus = EXIT_USAGE

    def _write_html(self, path: Path, record: dict[str, Any]) -> None:
        """The run's HTML page, with the session's comparison when there was one."""
        from pytest_oloproof.report.html import run_page, write_page

        assert self.recorder is not None
        # the record holds slim case summaries; the page shows every full case, read back from the store
        record = {**record, "cases": list(self.recorder.store.iter_cases(self.recorder.run_id))}
        gate = self.gate
        comparison = None
        if gate is not None and gate.comparison is not None:
            comparison = (*gate.comparison, gate.baseline)
        decision = gate.decision if gate is not None else None
        try:
            write_page(path, run_page(record, self.recorder.store, comparison, decision))
        except OSError as exc:  # the run is recorded; only its page is lost
            self.summary_lines.append(f"warning: could not write the HTML report {path}: {exc}")
            return
        self.summary_lines.append(f"HTML report: {path}")

    def _stop_prefetcher(self, session: pytest.Session, exitstatus: int) -> None:
        """Start no new case; on interruption, give running ones a short grace period to finish.

        A second Ctrl-C ends the wait. What completed is recorded by `_record_unrecorded`,
        which also makes sure nothing completes after that, so the incomplete run says
        exactly what the next run will reuse.
        """
        interrupted = self.interrupted or int(exitstatus) == pytest.ExitCode.INTERRUPTED
        prefetcher = self.prefetcher
        grace = PREFETCH_GRACE_S if interrupted else 0.0
        judges = not self.terminated  # after SIGTERM only the executing cases are waited for, never a judge
        running = prefetcher.running if judges else prefetcher.executing
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if interrupted and running and tr is not None:
            tr.write_line(
                f"oloproof: interrupted; waiting up to {grace:.0f} s for {running} running case(s) "
                "(Ctrl-C again to stop now)"
            )
        try:
            prefetcher.stop(grace_s=grace, judges=judges)
        except KeyboardInterrupt:
            prefetcher.stop(grace_s=0.0)

    def _record_unrecorded(self, session: pytest.Session) -> None:
        """Record the cases that completed but whose item never reported them (Ctrl-C, -x).

        Closing the run's gate stops any further case from completing (committing its
        execution entry), so the record then holds exactly the cases the next run reuses.
        """
        gate, self.run_gate = self.run_gate, None
        if gate is None:
            return
        done = gate.close()
        if not done:
            return
        ev = self._controller_evaluation()
        if ev is None:
            return
        recorded = self.recorder.written_ids() if self.recorder is not None else set()
        left = [c for c in done if c not in recorded]
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if self._evaluators is None and self._evaluator_error is not None:
            # the session's evaluators never resolved: judging these cases with the configured ones instead
            # would record verdicts of evaluators the conftest replaced (a sequential run records none either)
            if left and tr is not None:
                tr.write_line(
                    f"oloproof: {len(left)} completed case(s) not recorded: the evaluator fixtures could not be "
                    f"resolved ({self._evaluator_error})"
                )
            return
        evaluators = self._evaluators if self._evaluators is not None else ev.evaluators
        ask = not self.terminated  # SIGTERM: record with the verdicts already judged, ask no judge
        if self.interrupted and left and tr is not None:
            tr.write_line(
                f"oloproof: recording {len(left)} completed case(s), judging what was not judged ahead "
                "(Ctrl-C again to record them with only the verdicts already judged)"
                if ask
                else f"oloproof: terminated; recording {len(left)} completed case(s) with the verdicts already "
                "judged (no judge is asked)"
            )
        prefetcher = self.prefetcher
        # Only the judging is interrupted by Ctrl-C: a Ctrl-C landing anywhere else (while a record is
        # written, say) would lose that case and every one after it; it is noted, and stops the judging
        with _NotedInterrupts() as interrupts:
            for item in session.items:
                case = getattr(item, "case", None) if isinstance(item, CaseItem) else None
                if case is None or case.id not in done or case.id in recorded:
                    continue
                recorded.add(case.id)
                kept = dict(done[case.id])
                rec: dict[str, Any] | None = None
                stopped_here = False
                if ask and not interrupts.noted:
                    try:
                        with interrupts.raised():
                            # the prefetcher's own record carries what was judged ahead of the item (waited
                            # for while a judge thread still asks for a verdict of it: no judge is asked twice)
                            ahead = prefetcher.settled(case.id, wait=True) if prefetcher is not None else None
                            source = ahead or kept
                            kept = dict(source)  # evaluate pops what was judged ahead: kept for a second attempt
                            rec = ev.evaluate(case, source, evaluators, ask=True)
                    except KeyboardInterrupt:  # Ctrl-C again: judge nothing more, but record every completed case
                        interrupts.hold()
                        rec, stopped_here = None, True
                if stopped_here or interrupts.noted:
                    self.interrupted, ask = True, False
                if rec is None:
                    if not stopped_here and prefetcher is not None:
                        kept = prefetcher.settled(case.id, wait=False) or kept
                    rec = ev.evaluate(case, dict(kept), evaluators, ask=False)
                if self.recorder is None:
                    from pytest_oloproof.session import RunRecorder

                    self.recorder = RunRecorder(ev.store, ev.header(cache_mode=self.cache_mode))
                self.recorder.add(rec)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.is_worker or not (self.summary_lines or self.cache_notice):
            return
        terminalreporter.section("oloproof")
        for line in ([self.cache_notice] if self.cache_notice else []) + self.summary_lines:
            terminalreporter.write_line(redact(line))

    def unfreeze_gc(self) -> None:
        """Give the objects frozen after collection back to the collector (the session is over)."""
        if self._gc_frozen:
            gc.unfreeze()
            self._gc_frozen = False

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if getattr(self, "_sigterm_installed", False):  # in-process sessions (pytest.main) must not leak it
            try:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
            except ValueError:
                pass
        if self.recorder is not None:
            self.recorder.close()
        if self.evaluation is not None:
            try:
                self.evaluation.caches.close()
            except Exception:
                pass  # already reported by pytest_sessionfinish
            if self.evaluation.budget is not None:
                self.evaluation.budget.close()
                if not self.is_worker:  # the workers' shared ledger (if they had one) is done with
                    shutil.rmtree(self.evaluation.store.root / "budget" / self.budget_id, ignore_errors=True)


def _redact_sections(report: pytest.TestReport) -> None:
    """Captured output (stdout, stderr, log) of an item, redacted before JUnit XML or the terminal shows it."""
    if redaction.active() and report.sections:
        report.sections = [(title, redact(text)) for title, text in report.sections]


def _redacted_repr(rep: Any) -> Any:
    """pytest's own failure text, as text with secrets redacted once any is registered (colours are lost)."""
    return redact(str(rep)) if redaction.active() else rep


def _shown_path(path: Path, config: pytest.Config) -> str:
    """`path` relative to where pytest was invoked, when it is below it."""
    try:
        return str(path.relative_to(Path(config.invocation_params.dir).resolve()))
    except ValueError:
        return str(path)


def _ini_config_path(config: pytest.Config) -> str | None:
    """The `oloproof_config` ini value, relative to the ini file's folder as pytest does for paths."""
    ini = str(config.getini("oloproof_config") or "").strip()
    if not ini:
        return None
    path = Path(ini)
    if not path.is_absolute() and config.inipath is not None:
        path = config.inipath.parent / path
    return str(path)


def _junit_properties(config: pytest.Config, props: list[tuple[str, Any]]) -> None:
    """Session-level properties for `--junitxml` (the gate and its decisions), written by pytest's junitxml plugin.

    The plugin object registered for `--junitxml` is found by its `add_global_property` method (the one the
    `record_testsuite_property` fixture calls); without `--junitxml` there is none and nothing is added.
    """
    for plugin in config.pluginmanager.get_plugins():
        add = getattr(plugin, "add_global_property", None)
        if callable(add):
            for name, value in props:
                add(name, value)


def _merge_evaluators(header: dict[str, Any], used: list[dict[str, Any]]) -> None:
    """Fold the evaluators an item used into the run header: a fixture overriding a
    configured criterion replaces its description; an added evaluator is appended."""
    known = header.setdefault("evaluators", [])
    index = {d["criterion"]: i for i, d in enumerate(known)}
    for d in used:
        if d["criterion"] in index:
            known[index[d["criterion"]]] = d
        else:
            index[d["criterion"]] = len(known)
            known.append(d)


def _warm_summary() -> None:
    """Import (and run once) what the run's summary needs, so a latency-bound session does not pay it at its end.

    The intervals' first call imports scipy's quantile functions (a few tenths of a second); done
    while the prefetched cases wait on retrievers, models and judges, it costs no wall time. Never fails.
    """
    try:
        from pytest_oloproof.report import text  # noqa: F401
        from pytest_oloproof.stats import intervals as stats

        stats.clopper_pearson(1, 2)
    except Exception:
        pass


class Terminated(KeyboardInterrupt):
    """SIGTERM on the controller: an interruption (exit 2) that asks no more judges and waits on none."""


def _sigterm_to_interrupt(signum: int, frame: Any) -> None:
    raise Terminated("SIGTERM")


class _NotedInterrupts:
    """Inside the block, Ctrl-C (and a SIGTERM that Oloproof turns into one) is noted, not raised.

    For work that must finish whole once started, such as writing a completed case's record; `raised()`
    opens a stretch inside it where they raise as usual (asking a judge). `noted` lists the signals that
    arrived. Only the main thread can set handlers: elsewhere nothing changes.
    """

    def __init__(self) -> None:
        self.noted: list[int] = []
        self._previous: dict[int, Any] = {}

    def _note(self, signum: int, frame: Any) -> None:
        self.noted.append(signum)

    def __enter__(self) -> _NotedInterrupts:
        if threading.current_thread() is threading.main_thread():
            if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not ignored, not the user's own
                self._previous[signal.SIGINT] = signal.signal(signal.SIGINT, self._note)
            if signal.getsignal(signal.SIGTERM) is _sigterm_to_interrupt:
                self._previous[signal.SIGTERM] = signal.signal(signal.SIGTERM, self._note)
        return self

    def __exit__(self, *exc: object) -> None:
        self._restore()

    def _restore(self) -> None:
        """The handlers from before the block: the signals raise again."""
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def hold(self) -> None:
        """Note the signals again (after `raised()`; also when a KeyboardInterrupt cut its clean-up short)."""
        for signum in self._previous:
            signal.signal(signum, self._note)

    @contextlib.contextmanager
    def raised(self) -> Generator[None, None, None]:
        """A stretch where the signals raise KeyboardInterrupt again."""
        try:
            self._restore()
            yield
        finally:
            self.hold()


def _drop_lineless_frames(exc: BaseException) -> None:
    """Unlink traceback entries that have no line number from `exc` and the exceptions it chains.

    A signal can land on an instruction CPython gives no line (the clean-up code of a `with` block,
    say): the traceback entry's `tb_lineno` is then None, and pytest's rendering of the interrupt
    fails on it (`None - 1`), turning Ctrl-C into an internal error with exit 1 instead of 2.
    The entry's frame has no source line to show anyway, so it is skipped; the first entry (the
    outermost frame, pytest's own) always has one.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        entry = current.__traceback__
        while entry is not None:
            following = entry.tb_next
            while following is not None and following.tb_lineno is None:
                following = following.tb_next
            entry.tb_next = following
            entry = following
        current = current.__cause__ or current.__context__


def _progress_writer(tr: Any) -> Callable[[str], bool]:
    """Write the progress line only between pytest's lines, as pytest's own `[ 40%]` progress does.

    pytest tracks where its output stands: the terminal writer's width of the current line
    and the reporter's `currentfspath` (the file prefix of a line of dots, a node id in -v,
    or -2 once a -v line is finished). Writing a line break of our own into a line of dots
    would cut it short and make pytest reprint the file prefix, and in -v it would land
    between a node id and its outcome. So the line is written only when pytest is at the
    start of a line (after it wrapped a line of dots with its percentage), or when a -v
    line is finished (pytest ends it itself before the next node id); otherwise this
    returns False and the display tries again on the next item.
    """
    tw = getattr(tr, "_tw", None)

    def write(line: str) -> bool:
        width = getattr(tw, "width_of_current_line", None)
        if tw is None or width is None:
            return False
        if width == 0:
            tw.line(line)  # a line of its own; the dots go on below it under the same prefix
        elif getattr(tr, "currentfspath", None) == -2:
            tw.write("\n" + line)  # pytest's next node id starts with the line break that ends this one
        else:
            return False
        tw.flush()
        return True

    return write


#: Seconds an interrupted session waits for cases already running in the prefetcher.
PREFETCH_GRACE_S = 10.0


class _XdistControllerHooks:
    """Registered on the xdist controller only: learns how many cases the workers collected."""

    def __init__(self, plugin: OloproofPlugin) -> None:
        self.plugin = plugin

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput["oloproof_budget"] = self.plugin.budget_id

    def pytest_xdist_node_collection_finished(self, node: Any, ids: Any) -> None:
        plugin = self.plugin
        if plugin.config_path is None:
            return
        name = plugin.config_path.name
        n = sum(1 for i in ids if str(i).split("::", 1)[0].rsplit("/", 1)[-1] == name)
        plugin.items_selected = max(plugin.items_selected, n)
        plugin._start_progress(n)


@pytest.fixture(scope="session")
def oloproof_judge_provider() -> Any:
    """Override in conftest.py to hand LLM judges a provider object instead of the configured one."""
    return None


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    plugin = parent.config.stash.get(PLUGIN_KEY, None)
    if plugin is None or plugin.config_path is None:
        return None
    if file_path.resolve() != plugin.config_path:
        return None
    return OloproofFile.from_parent(parent, path=file_path)


def json_safe(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))
