"""The pytest face of Oloproof: options, items per case, evaluator fixtures, session hooks.

Thin by design: everything it does is a call into the core (runner, execute,
evaluation, store, render). One stateful `OloproofPlugin` object is registered
per session when --oloproof is given.
"""

from __future__ import annotations

import json
import os
import re
import signal
import types
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from .cache import CacheMode, parse_mode
from .cases import Case
from .config import find_config
from .errors import OloproofError
from .evaluation import failed_criteria
from .evaluators import Registry
from .evaluators.base import Evaluator
from .render import markdown_summary, run_summary
from .runner import Evaluation, RunRecorder
from .store import write_json

PLUGIN_KEY = pytest.StashKey["OloproofPlugin"]()
PLUGIN_NAME = "oloproof-session"
EXIT_BLOCK = 3
EXIT_USAGE = 2
EXIT_INTERNAL = 4


# ------------------------------------------------------------------ options


def _positive_int(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise pytest.UsageError(f"expected a positive integer, got {value!r}") from None
    if n < 1:
        raise pytest.UsageError(f"expected a positive integer, got {value!r}")
    return n


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
            raise ConfigCollectError(str(exc)) from exc
        yield from plugin.make_items(self, ev)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, ConfigCollectError):
            return f"Oloproof cannot start:\n{excinfo.value}"
        return super().repr_failure(excinfo)


class CaseFailed(Exception):
    def __init__(self, case_id: str, failed: list[tuple[str, dict[str, Any]]]) -> None:
        self.case_id, self.failed = case_id, failed
        super().__init__(f"case {case_id} failed {', '.join(n for n, _ in failed)}")


class CaseSystemError(Exception):
    def __init__(self, case_id: str, error: dict[str, Any]) -> None:
        self.case_id, self.error = case_id, error
        super().__init__(error.get("message", "system error"))


class CaseItem(pytest.Function):
    """One case: execute (or take the pre-executed result), evaluate, fail on failed criteria."""

    case: Case
    record: dict[str, Any] | None = None

    def reportinfo(self) -> tuple[Any, int | None, str]:
        line = None
        src = getattr(self.case, "source", "")
        if ":" in src:
            tail = src.rsplit(":", 1)[1]
            line = int(tail) - 1 if tail.isdigit() else None
        return self.path, line, f"oloproof case {self.case.id}"

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        exc = excinfo.value
        if isinstance(exc, CaseFailed):
            lines = [f"case {exc.case_id!r} failed {len(exc.failed)} criterion(s):"]
            for name, c in exc.failed:
                lines.append(f"  {name}: expected {c.get('expected')!r}, actual {c.get('actual')!r}")
            return "\n".join(lines)
        if isinstance(exc, CaseSystemError):
            err = exc.error
            tb = err.get("traceback") or ""
            head = f"case {exc.case_id!r}: the system failed in {err.get('stage')}; every criterion is missing"
            return f"{head}\n{tb}{err.get('message', '')}".rstrip()
        return super().repr_failure(excinfo)  # type: ignore[arg-type]


def _marker_name(value: Any) -> str:
    return re.sub(r"\W+", "_", str(value)).strip("_") or "_"


# ------------------------------------------------------------------ the session object


class OloproofPlugin:
    """All Oloproof state of one pytest session; hooks are its methods."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.is_worker = hasattr(config, "workerinput")
        ini = config.getini("oloproof_config")
        explicit = config.getoption("oloproof_config") or (ini or None)
        self.config_error: OloproofError | None = None
        self.config_path: Path | None = None
        try:
            self.config_path = find_config(explicit, Path(config.rootpath), Path(config.invocation_params.dir))
        except OloproofError as exc:
            self.config_error = exc
        self.cache_mode: CacheMode = config.getoption("oloproof_cache") or CacheMode.READWRITE
        self.evaluation: Evaluation | None = None
        self.recorder: RunRecorder | None = None
        self.record: dict[str, Any] | None = None
        self.prefetcher: Any = None
        self.interrupted = False
        self.items_selected = 0
        self.gate_exit: int | None = None
        self.summary_lines: list[str] = []
        self._register_default_fixtures()
        self._extend_args()
        self._install_sigterm()

    # -- startup

    def _extend_args(self) -> None:
        """Make sure oloproof.yaml is collected even when pytest was given other paths."""
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
        args.append(str(target))

    def _install_sigterm(self) -> None:
        if self.is_worker:
            return
        try:
            if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
                signal.signal(signal.SIGTERM, _sigterm_to_interrupt)
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
            from .config import load_config

            cfg = load_config(self.config_path)
        except OloproofError:
            return []  # reported at collection, where pytest shows it as a collection error
        registry = self._registry()
        names = []
        for entry in cfg.settings.evaluators:
            cls = registry.types.get(entry.type)
            if entry.criterion:
                names.append(entry.criterion)
            elif cls is not None:
                try:
                    names.append(cls(**entry.options()).criterion)  # type: ignore[call-arg]
                except Exception:
                    pass
        return names

    def _registry(self) -> Registry:
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
        self.evaluation = Evaluation.load(
            self.config_path, cache_mode=self.cache_mode, registry=self._registry(), overrides=overrides
        )
        return self.evaluation

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
        configured = [e.criterion for e in ev.evaluators]
        fixture_names = configured + [n for n in self.added_evaluator_fixtures() if n not in configured]
        self.fixture_names = fixture_names
        system = ev.system.config["name"]
        markers = ev.cfg.settings.markers
        for case in ev.cases:

            def run_case(request: pytest.FixtureRequest, case: Case = case) -> None:
                self.run_item(request, case)

            item = CaseItem.from_parent(parent, name=f"{system}[{case.id}]", callobj=run_case)
            item.case = case
            item.add_marker("oloproof")
            for key in markers:
                value = case.metadata.get(key)
                if value is None or value == "":
                    continue
                mname = _marker_name(value)
                self.config.addinivalue_line("markers", f"{mname}: cases with metadata {key}={value}")
                item.add_marker(mname)
            item.extra_keyword_matches.update(str(v) for v in case.metadata.values() if isinstance(v, (str, int)))
            item.extra_keyword_matches.add(case.id)
            yield item

    # -- running

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if self.config_error is not None and not self.is_worker:
            pytest.exit(f"Oloproof cannot start: {self.config_error}", returncode=EXIT_USAGE)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        items = [i for i in session.items if isinstance(i, CaseItem)]
        self.items_selected = len(items)
        ev = self.evaluation
        if ev is None or not items or self.is_worker:
            return
        if ev.cfg.settings.concurrency > 1 or ev.is_async:
            from .prefetch import Prefetcher

            self.prefetcher = Prefetcher(
                ev.engine, [i.case for i in items], ev.cfg.settings.concurrency, use_async=ev.is_async
            )
            self.prefetcher.start()

    def run_item(self, request: pytest.FixtureRequest, case: Case) -> None:
        ev = self.prepare()
        evaluators = []
        for name in self.fixture_names:
            obj = request.getfixturevalue(name)
            if not isinstance(obj, Evaluator):
                raise TypeError(f"fixture {name!r} must return a pytest_oloproof.Evaluator, got {type(obj).__name__}")
            evaluators.append(obj)
        if self.prefetcher is not None and self.prefetcher.has(case.id):
            rec = self.prefetcher.result(case.id)
        else:
            rec = ev.execute(case)
        rec = ev.evaluate(case, rec, evaluators)
        item = request.node
        assert isinstance(item, CaseItem)
        item.record = rec
        for name, c in rec["criteria"].items():
            item.user_properties.append((f"oloproof.{name}", c.get("value", c["status"])))
        if rec.get("error"):
            raise CaseSystemError(case.id, rec["error"])
        failed = failed_criteria(rec, evaluators)
        if failed:
            raise CaseFailed(case.id, [(n, dict(c)) for n, c in failed])

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
        report = yield
        if call.when == "call" and isinstance(item, CaseItem) and item.record is not None:
            report.oloproof_case = item.record
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        rec = getattr(report, "oloproof_case", None)
        if rec is None or self.is_worker or report.when != "call":
            return
        if self.recorder is None:
            ev = self._controller_evaluation()
            if ev is None:
                return
            self.recorder = RunRecorder(ev.store, ev.header(cache_mode=self.cache_mode))
        self.recorder.add(rec)

    def _controller_evaluation(self) -> Evaluation | None:
        try:
            return self.prepare()
        except OloproofError:
            return None

    def pytest_keyboard_interrupt(self, excinfo: Any) -> None:
        self.interrupted = True

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.prefetcher is not None:
            self.prefetcher.stop()
        if self.is_worker:
            return
        if int(exitstatus) == pytest.ExitCode.INTERNAL_ERROR:
            session.exitstatus = EXIT_INTERNAL
        elif int(exitstatus) == pytest.ExitCode.USAGE_ERROR:
            session.exitstatus = EXIT_USAGE
        if self.recorder is None:
            return
        interrupted = self.interrupted or int(exitstatus) == pytest.ExitCode.INTERRUPTED or bool(session.shouldstop)
        complete = not interrupted and len(self.recorder.cases) >= self.items_selected
        record = self.recorder.finish("complete" if complete else "incomplete")
        self.record = record
        ev = self.evaluation
        store_root = str(ev.store.root) if ev else None
        self.summary_lines = run_summary(record, store_root=store_root)
        report_path = self.config.getoption("oloproof_report")
        if report_path:
            write_json(Path(report_path), record)
        step = os.environ.get("GITHUB_STEP_SUMMARY")
        if step:
            with open(step, "a", encoding="utf-8") as f:
                f.write(markdown_summary(record))
        self.config.hook.pytest_oloproof_run_recorded(record=record, config=self.config)
        if self.gate_exit is not None:
            session.exitstatus = self.gate_exit

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.is_worker or not self.summary_lines:
            return
        terminalreporter.section("oloproof")
        for line in self.summary_lines:
            terminalreporter.write_line(line)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.recorder is not None:
            self.recorder.close()
        if self.evaluation is not None:
            self.evaluation.caches.close()


def _sigterm_to_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


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
