"""oloproof.yaml as a collector, one item per case, and what an item reports (failed criteria, system errors)."""

from __future__ import annotations

import inspect
from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import pytest

from pytest_oloproof.errors import OloproofError
from pytest_oloproof.records import redaction
from pytest_oloproof.records.redaction import redact
from pytest_oloproof.report.junit import junit_value
from pytest_oloproof.session.run import marker_name

if TYPE_CHECKING:
    from pytest_oloproof.engine.setup import RunSetup
    from pytest_oloproof.evaluators.base import Evaluator
    from pytest_oloproof.records.cases import Case
    from pytest_oloproof.session import RunSession


class CasePlugin(Protocol):
    """What the collector and the items need of the session's plugin (plugin.OloproofPlugin)."""

    config: pytest.Config
    run: RunSession
    cannot_start: set[str]
    fixture_names: list[str]

    def run_item(self, request: pytest.FixtureRequest, item: CaseItem) -> None: ...


PLUGIN_KEY = pytest.StashKey[CasePlugin]()


class ConfigCollectError(Exception):
    """Carries an Oloproof error raised while collecting, shown without a traceback."""


class OloproofFile(pytest.File):
    """oloproof.yaml as a collector: one item per case."""

    def collect(self) -> Any:
        plugin = self.config.stash[PLUGIN_KEY]
        try:
            setup = plugin.run.prepare()
            if plugin.run.options.diagnose:
                plugin.run.new_diagnoser()
            if plugin.run.options.is_worker:
                from .xdist import check_worker

                check_worker(self.config, setup)
        except OloproofError as exc:
            plugin.cannot_start.add(self.nodeid)
            raise ConfigCollectError(str(exc)) from exc
        try:
            yield from make_items(plugin, self, setup)
        except OloproofError as exc:  # a metadata value that would become a registered marker
            plugin.cannot_start.add(self.nodeid)
            raise ConfigCollectError(str(exc)) from exc

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, ConfigCollectError):
            return redact(f"Oloproof cannot start:\n{excinfo.value}")
        return redacted_repr(super().repr_failure(excinfo))


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
    item.config.stash[PLUGIN_KEY].run_item(request, item)


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
        return redacted_repr(super().repr_failure(excinfo))


def make_items(plugin: CasePlugin, parent: OloproofFile, setup: RunSetup) -> Generator[CaseItem, None, None]:
    """One item per case (a diagnosis: per failed case of the run), after the metadata markers are checked."""
    config, run = plugin.config, plugin.run
    markers = setup.cfg.settings.markers
    diagnoser = run.diagnoser
    if diagnoser is not None:
        from pytest_oloproof.engine.setup import case_from_record

        cases = [case_from_record(diagnoser.by_id[case_id]) for case_id in diagnoser.failed_ids]
    else:
        cases = run.shard_cases(setup.cases)
        configured = [e.criterion for e in setup.evaluators]
        plugin.fixture_names = configured + [n for n in added_evaluator_fixtures(config) if n not in configured]
    registered = {str(line).split(":", 1)[0].split("(", 1)[0].strip() for line in config.getini("markers")}
    run.check_metadata_markers(cases, registered)  # before any item exists
    system = redact(setup.system.config["name"])  # node ids are printed and written to JUnit
    fixtureinfo = None
    if diagnoser is None:
        parent.add_marker("oloproof")  # items inherit it from their file: one marker, not one per item
    for case in cases:
        # every item runs the same function under the same parent, so the fixture closure pytest
        # resolves for the first one holds for all (pytest shares it the same way between the
        # items of one parametrized test); resolving it per item was a third of collection.
        # The one private read left in the package: `fixtureinfo=` is Function's documented argument, but
        # pytest has no public getter for the value. Measured: 0.95 s more CPU per 10,000 items without it
        # (collect-only 2.89 s -> 3.84 s), which would break the warm-run target. Should a pytest drop the
        # attribute, getattr gives None and every item resolves its own closure: slower, never wrong.
        item = CaseItem.from_parent(parent, name=f"{system}[{case.id}]", callobj=_run_case, fixtureinfo=fixtureinfo)
        if diagnoser is None and fixtureinfo is None:
            fixtureinfo = getattr(item, "_fixtureinfo", None)
        item.bind(case)
        if diagnoser is not None:
            for marker in ("oloproof", "oloproof_failed", "oloproof_diagnose"):
                item.add_marker(marker)
        _mark_case(config, item, case, markers)
        yield item


def added_evaluator_fixtures(config: pytest.Config) -> list[str]:
    """Fixtures declared with @pytest_oloproof.evaluator in conftest files or plugins."""
    names: list[str] = []
    for plugin in config.pluginmanager.get_plugins():
        for attr in list(getattr(plugin, "__dict__", {}).values()):
            name = getattr(attr, "__oloproof_evaluator__", None)
            if isinstance(name, str) and name not in names:
                names.append(name)
    return names


def report_case(item: CaseItem, rec: dict[str, Any], evaluators: list[Evaluator], names: dict[str, str]) -> None:
    """The case's criteria as the item's properties; fail the item on a system error or failed criteria."""
    for name, c in rec["criteria"].items():
        value = junit_value(c)
        prop = names.get(name) or names.setdefault(name, f"oloproof.{name}")  # one string per criterion
        item.user_properties.append((prop, redact(value) if isinstance(value, str) else value))
    if rec.get("error"):
        raise CaseSystemError(item.case_id, rec["error"])
    from pytest_oloproof.evaluate.record import failed_criteria, missing_criteria

    failed = failed_criteria(rec, evaluators) + missing_criteria(rec, evaluators)
    if failed:
        raise CaseFailed(item.case_id, [(n, dict(c)) for n, c in failed])


def report_diagnosis(item: CaseItem, outcome: dict[str, Any]) -> None:
    """A diagnosis item's label and reason as its properties; skipped when the case cannot be diagnosed."""
    item.diagnosis = outcome
    if outcome.get("undiagnosable"):
        pytest.skip(f"case {item.case_id!r} failed but has no expected.gold_context: undiagnosable")
    entry = outcome["entry"]
    for key in ("label", "reason", "strength", "best_relevant_position"):
        item.user_properties.append((f"oloproof.diagnosis.{key}", entry[key]))
    if "replay" in entry:
        item.user_properties.append(("oloproof.diagnosis.replay", entry["replay"].get("value", "missing")))


def _mark_case(config: pytest.Config, item: pytest.Item, case: Case, markers: Sequence[str]) -> None:
    """Metadata markers (`markers:` in the config) and -k keywords (case id, metadata values)."""
    for key in markers:
        value = case.metadata.get(key)
        if value is None or value == "":
            continue
        mname = marker_name(value)
        config.addinivalue_line("markers", f"{mname}: cases with metadata {key}={value}")
        item.add_marker(mname)
    item.extra_keyword_matches.update(str(v) for v in case.metadata.values() if isinstance(v, (str, int)))
    item.extra_keyword_matches.add(case.id)


def fixture_module(plugin: CasePlugin, names: Sequence[str]) -> Any:
    """Each configured evaluator as a session fixture named after its criterion (a conftest fixture of the
    same name overrides it: registered before conftest files are parsed)."""
    import types

    module = types.ModuleType("pytest_oloproof_evaluator_fixtures")

    def make(name: str) -> Any:
        def fixture(request: pytest.FixtureRequest) -> Evaluator:
            return plugin.run.default_evaluator(name, request.getfixturevalue("oloproof_judge_provider"))

        fixture.__name__ = name
        return pytest.fixture(scope="session", name=name)(fixture)

    for name in names:
        setattr(module, f"_oloproof_fixture_{marker_name(name)}", make(name))
    return module


def redact_sections(report: pytest.TestReport) -> None:
    """Captured output (stdout, stderr, log) of an item, redacted before JUnit XML or the terminal shows it."""
    if redaction.active() and report.sections:
        report.sections = [(title, redact(text)) for title, text in report.sections]


def redacted_repr(rep: Any) -> Any:
    """pytest's own failure text, as text with secrets redacted once any is registered (colours are lost)."""
    return redact(str(rep)) if redaction.active() else rep
