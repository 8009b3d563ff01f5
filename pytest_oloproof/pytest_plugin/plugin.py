"""The pytest face of Oloproof (the `pytest11` entry point): options, the collector, one-line hooks.

With --oloproof, one `OloproofPlugin` is registered per session; its hooks hand each step of the run to
a `pytest_oloproof.session.RunSession`, and it does for the session what only pytest can (the `Face`).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pytest

from pytest_oloproof.errors import ExitCode
from pytest_oloproof.records.redaction import redact
from pytest_oloproof.records.shapes import RunRecord
from pytest_oloproof.session import SESSION_PLUGIN_NAME, CannotStart, RunEnd, RunSession, Terminated
from pytest_oloproof.session.interrupts import drop_lineless_frames

from . import items
from .items import PLUGIN_KEY, CaseItem, OloproofFile
from .options import add_options, progress_interval, session_options

if TYPE_CHECKING:
    from pytest_oloproof.evaluators.base import Evaluator
    from pytest_oloproof.evaluators.registry import Registry

PLUGIN_NAME = "oloproof-session"


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


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
    options = plugin.run.options
    helping = config.getoption("help", False) or config.getoption("version", False)
    if options.config_error is not None and options.config_path is None and not options.is_worker and not helping:
        # no oloproof.yaml: nothing to collect. Said once, before pytest's terminal reporter exists
        # (an exit from a later hook is printed twice, once as `_pytest.outcomes.Exit`)
        _cannot_start(CannotStart(f"Oloproof cannot start: {options.config_error}"))
    config.stash[PLUGIN_KEY] = plugin
    config.pluginmanager.register(plugin, PLUGIN_NAME)
    config.pluginmanager.register(plugin.run, SESSION_PLUGIN_NAME)  # where `oloproof run` reads the outcome
    if not plugin.run.options.is_worker and config.pluginmanager.hasplugin("xdist"):
        from .xdist import XdistControllerHooks

        config.pluginmanager.register(XdistControllerHooks(plugin.run), "oloproof-xdist")
    # registered before the cleanups of pytest's own plugins, so it runs after them: their last
    # full garbage collections still skip what collection built
    config.add_cleanup(plugin.run.unfreeze_gc)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    plugin = parent.config.stash.get(PLUGIN_KEY, None)
    if plugin is None or plugin.run.options.config_path is None:
        return None
    if file_path.resolve() != plugin.run.options.config_path:
        return None
    return OloproofFile.from_parent(parent, path=file_path)


@pytest.fixture(scope="session")
def oloproof_judge_provider() -> Any:
    """Override in conftest.py to hand LLM judges a provider object instead of the configured one."""
    return None


def _cannot_start(exc: CannotStart) -> NoReturn:
    """Exit 2 before any (further) case runs, saying why."""
    pytest.exit(redact(str(exc)), returncode=ExitCode.USAGE)


class OloproofPlugin:
    """The session's hooks (each a call into `run`), and the `Face` the session reaches pytest through."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.run = RunSession(session_options(config), self)
        self.fixture_names: list[str] = []
        #: node ids of config files whose collection failed on an Oloproof error (a usage error: exit 2)
        self.cannot_start: set[str] = set()
        self.selection_failed = False
        self.session: pytest.Session | None = None
        self._outcomes: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {}  # nodeid -> until reported
        self._diagnoses: dict[str, dict[str, Any]] = {}  # nodeid -> a diagnosis item's outcome until reported
        self._property_names: dict[str, str] = {}
        module = items.fixture_module(self, self.run.configured_criteria())
        config.pluginmanager.register(module, "oloproof-evaluator-fixtures")

    # -- hooks

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if not self.run.options.is_worker:
            self.session = session
            try:
                self.run.check_before_start()
            except CannotStart as exc:
                _cannot_start(exc)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> None:
        """Under pytest-xdist, check the config, system and cases before the controller hands out any test."""
        if not self.run.options.is_worker and self.config.pluginmanager.get_plugin("dsession") is not None:
            try:
                self.run.prepare_controller()
            except CannotStart as exc:
                _cannot_start(exc)

    @pytest.hookimpl(tryfirst=True)
    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """Mark the collection error of an Oloproof config (it rides on the report to the xdist controller)."""
        if report.failed and report.nodeid in self.cannot_start:
            report.oloproof_cannot_start = True  # type: ignore[attr-defined]
        if not self.run.options.is_worker and getattr(report, "oloproof_cannot_start", False):
            self.run.start_failed = True

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
        try:
            self.run.start([i.case for i in session.items if isinstance(i, CaseItem)])
        except CannotStart as exc:  # the config's criteria do not fit the policy
            _cannot_start(exc)

    def run_item(self, request: pytest.FixtureRequest, item: CaseItem) -> None:
        """The body of every case item."""
        if self.run.diagnoser is not None:
            assert self.run.diagnoser is not None
            self._diagnoses[item.nodeid] = outcome = self.run.diagnoser.run_case(item.case.id)
            return items.report_diagnosis(item, outcome)
        evaluators = self.run.evaluators if self.run.evaluators is not None else self._resolve_evaluators(request)
        try:
            rec = self.run.run_case(item.case, evaluators)
        except CannotStart as exc:
            _cannot_start(exc)
        # held here until the report takes it: an attribute would grow every item's __dict__ for good
        self._outcomes[item.nodeid] = (rec, self.run.describe(evaluators))
        items.report_case(item, rec, evaluators, self._property_names)

    def _resolve_evaluators(self, request: pytest.FixtureRequest) -> list[Evaluator]:
        """The evaluator fixtures (session-scoped: resolved by the first item, then reused)."""
        from pytest_oloproof.evaluators.base import Evaluator

        evaluators = []
        for name in self.fixture_names:
            try:
                obj = request.getfixturevalue(name)
            except pytest.FixtureLookupError:
                # a criterion whose default fixture could not be registered at configure time
                # (e.g. a type added by a conftest.py below the rootdir): use the configured one
                obj = self.run.default_evaluator(name)
            if not isinstance(obj, Evaluator):
                error = f"fixture {name!r} must return a pytest_oloproof.Evaluator, got {type(obj).__name__}"
                self.run.evaluator_error = error
                raise TypeError(error)
            evaluators.append(obj)
        self.run.evaluators = evaluators
        return evaluators

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> None:
        if isinstance(item, CaseItem) and not self.run.interrupted:
            item.case = None  # type: ignore[assignment]  # done with it; see CaseItem

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        items.redact_sections(report)
        if report.when != "call":
            return
        if self._outcomes or self._diagnoses:
            # the case's record rides on its report: an xdist worker sends it to the controller
            # (this hook runs before xdist's, which serialises the report)
            outcome = self._outcomes.pop(report.nodeid, None)
            if outcome is not None:
                report.oloproof_case, report.oloproof_evaluators = outcome  # type: ignore[attr-defined]
            diagnosis = self._diagnoses.pop(report.nodeid, None)
            if diagnosis is not None:
                report.oloproof_diagnosis = diagnosis  # type: ignore[attr-defined]
        if self.run.options.is_worker:
            return
        diagnosis = getattr(report, "oloproof_diagnosis", None)
        if diagnosis is not None:
            return self.run.record_diagnosis(diagnosis)
        rec = getattr(report, "oloproof_case", None)
        if rec is not None and self.run.record_case(rec, getattr(report, "oloproof_evaluators", None) or []):
            del report.oloproof_case  # in the store; pytest keeps every report until the session ends

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        self.run.tick()  # after pytest has written the item's letter or outcome (and any line break of its own)

    @pytest.hookimpl(tryfirst=True)
    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        self.run.interrupt(terminated=isinstance(excinfo.value, Terminated))
        drop_lineless_frames(excinfo.value)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        end = RunEnd(
            exitstatus=int(session.exitstatus),
            internal_error=int(exitstatus) == pytest.ExitCode.INTERNAL_ERROR,
            usage_error=int(exitstatus) == pytest.ExitCode.USAGE_ERROR,
            interrupted=int(exitstatus) == pytest.ExitCode.INTERRUPTED,
            stopped=bool(session.shouldstop),
        )
        status = self.run.finish(end, (getattr(i, "case", None) for i in session.items if isinstance(i, CaseItem)))
        if status != end.exitstatus:
            session.exitstatus = status

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        lines = self.run.summary()
        if lines:
            terminalreporter.section("oloproof")
            for line in lines:
                terminalreporter.write_line(redact(line))

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.run.close()

    # -- the Face: what the session asks of pytest

    def registry(self) -> Registry:
        from pytest_oloproof.evaluators.registry import Registry

        registry = Registry()
        for types_ in self.config.hook.pytest_oloproof_evaluators():
            if types_:
                registry.add(types_)
        return registry

    def say(self, line: str) -> None:
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None:
            tr.write_line(line)

    def stop(self, reason: str) -> None:
        if self.session is not None:
            self.session.shouldstop = reason

    def progress_output(self) -> tuple[Callable[[str], bool], float] | None:
        every = progress_interval(self.config)
        if every is None:
            return None
        from .progress import progress_writer

        return progress_writer(self.config.pluginmanager.get_plugin("terminalreporter")), every

    def run_recorded(self, record: RunRecord) -> None:
        self.config.hook.pytest_oloproof_run_recorded(record=record, config=self.config)

    def junit_properties(self, props: list[tuple[str, Any]]) -> None:
        """Session-level properties for `--junitxml`, through the junitxml plugin's `add_global_property`
        (the method `record_testsuite_property` calls); without `--junitxml` nothing is added."""
        for plugin in self.config.pluginmanager.get_plugins():
            add = getattr(plugin, "add_global_property", None)
            if callable(add):
                for name, value in props:
                    add(name, value)
