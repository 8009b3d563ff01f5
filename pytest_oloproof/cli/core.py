"""The `oloproof` command: a thin argparse face over the same core the plugin uses.

This module holds what every subcommand shares (store lookup, output, exit codes) and the built-in
commands. The other subcommands live in their own modules beside it and import only this one; the
package's __init__ lists them and hands them to `main`, so nothing here imports them back.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_oloproof.config.values import parse_positive_int
from pytest_oloproof.errors import ExitCode, OloproofError
from pytest_oloproof.records.redaction import redact
from pytest_oloproof.store.files import Store


class UsageError(OloproofError):
    """Bad command-line usage: exit 2."""


@dataclass(frozen=True)
class Subcommand:
    """A subcommand defined in its own module: its name, how to add its parser, and its command.

    `inspects` names the stored kind whose `oloproof inspect` text `inspect` renders, if any.
    """

    name: str
    add_parser: Callable[[Any, Callable[[argparse.ArgumentParser], None]], None]
    run: Callable[[argparse.Namespace], int]
    inspects: str | None = None
    inspect: Callable[[dict[str, Any], str], list[str]] | None = None


class _UsageExit(SystemExit):
    """argparse's usage error, carrying its message for the --json error document."""

    def __init__(self, message: str) -> None:
        super().__init__(ExitCode.USAGE)
        self.message = message


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse exits 2 itself; keep our prefix
        self.print_usage(sys.stderr)
        sys.stderr.write(f"oloproof: error: {message}\n")
        raise _UsageExit(message)


class _ClosedStdout:
    """sys.stdout for `oloproof run`: once the reader goes away (`| head -1`), output is dropped, not an error.

    pytest writes the whole session to stdout; a BrokenPipeError in one of those
    writes would abort the run half-way. Here the run goes on and is recorded,
    and its writes go to /dev/null.
    """

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.closed_by_reader = False

    def _drop(self) -> None:
        self.closed_by_reader = True
        _stdout_to_devnull()

    def write(self, text: str) -> int:
        if not self.closed_by_reader:
            try:
                return int(self._stream.write(text))
            except BrokenPipeError:
                self._drop()
        return len(text)

    def flush(self) -> None:
        if not self.closed_by_reader:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._drop()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def positive_int(value: str) -> int:
    """An argparse type: an integer >= 1 (the message the pytest option prints too)."""
    try:
        return parse_positive_int(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _stdout_to_devnull() -> None:
    """Point fd 1 at /dev/null, so the interpreter's last flush of stdout cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.__stdout__.fileno() if sys.__stdout__ is not None else 1)
        os.close(devnull)
    except (OSError, ValueError):
        pass


def _store_from(args: argparse.Namespace) -> Store:
    """The store named by --store, else the one of the config (--config or ./oloproof.yaml)."""
    if getattr(args, "store", None):
        root = Path(args.store).resolve()
        if root.exists() and not root.is_dir():
            raise UsageError(f"--store: {root} is a file, not a store folder")
        return Store(root)
    cfg_path = Path(getattr(args, "config", None) or "oloproof.yaml")
    if cfg_path.is_file():
        from pytest_oloproof.config.settings import load_config

        return Store(load_config(cfg_path).store_dir)
    if getattr(args, "config", None):
        if cfg_path.is_dir():
            raise UsageError(f"--config: {cfg_path} is a folder; give the path of an oloproof.yaml")
        raise UsageError(f"--config: {cfg_path} does not exist")
    return Store(Path(".oloproof").resolve())


def _emit(args: argparse.Namespace, doc: Any, lines: Sequence[str]) -> None:
    """Print the command's result (secrets from the environment redacted)."""
    if getattr(args, "json", False):
        print(redact(json.dumps(doc, indent=2, ensure_ascii=False, default=str)))
    else:
        for line in lines:
            print(redact(line))


# ------------------------------------------------------------------ commands


RUN_USAGE = """usage: oloproof run [OLOPROOF OPTIONS] [PYTEST OPTIONS] [FILE_OR_DIR ...]

Runs pytest with --oloproof: evaluates the system oloproof.yaml declares, one pytest item per case.
Exit status: 0 every case passed, 1 a case failed, 2 a usage or configuration error, 3 the release
policy blocked (--oloproof-policy), 4 an internal error.
"""


def _run_help() -> int:
    """`oloproof run --help`: Oloproof's own options first (pytest's section for them), then where pytest's are."""
    import contextlib
    import io

    import pytest

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        pytest.main(["--help", "-p", "no:cacheprovider"])
    group: list[str] = []  # the section of the `oloproof` option group
    ini: list[str] = []  # the oloproof_* ini options, with their wrapped help lines
    where: list[str] | None = None
    for line in buf.getvalue().splitlines():
        if line.startswith("Oloproof: RAG evaluation"):
            where = group
        elif line.startswith("  oloproof_"):
            where = ini
        elif where is not None and not line.startswith(" " * 4) and not (where is group and line.startswith("  -")):
            where = None
        if where is not None:
            where.append(line)
    print(RUN_USAGE)
    print("\n".join(group).rstrip())
    print("\nini-options for Oloproof ([pytest] in pytest.ini):")
    print("\n".join(ini).rstrip())
    print(
        "\nEvery other argument goes to pytest (-k, -m, -x, --lf, --collect-only, -n ...): "
        "`oloproof run --help-pytest` lists pytest's options."
    )
    return ExitCode.OK


def cmd_run(args: argparse.Namespace, rest: list[str]) -> int:
    import pytest

    if "-h" in rest or "--help" in rest:
        try:
            return _run_help()
        except BrokenPipeError:  # `oloproof run --help | head`
            _stdout_to_devnull()
            return ExitCode.OK
    rest = ["--help" if a == "--help-pytest" else a for a in rest]  # pytest's own, whole help

    class GateObserver:
        """Tells a gate's BLOCK (3) apart from pytest's own internal-error code (also 3)."""

        blocked = False

        def pytest_unconfigure(self, config: pytest.Config) -> None:
            from pytest_oloproof.session import SESSION_PLUGIN_NAME, RunSession

            run = config.pluginmanager.get_plugin(SESSION_PLUGIN_NAME)
            self.blocked = isinstance(run, RunSession) and run.blocked

    observer = GateObserver()
    stdout, sys.stdout = sys.stdout, _ClosedStdout(sys.stdout)
    try:
        code = int(pytest.main(["--oloproof", *rest], plugins=[observer]))
    finally:
        sys.stdout.flush()
        sys.stdout = stdout
    if code == ExitCode.BLOCK and not observer.blocked:
        return ExitCode.INTERNAL
    return {4: ExitCode.USAGE}.get(code, code)


def cmd_runs(args: argparse.Namespace) -> int:
    from pytest_oloproof.records.stored import is_start_header
    from pytest_oloproof.report.text import runs_line
    from pytest_oloproof.report.views import RunRow
    from pytest_oloproof.store.files import RecordError

    store = _store_from(args)
    rows: list[dict[str, Any]] = []
    lines: list[str] = []
    for run_id in store.run_ids():
        try:
            h = store.run_header(run_id)
        except RecordError as exc:  # one damaged run never hides the others
            rows.append({"run_id": run_id, "status": "unreadable", "error": f"run.json: {exc.problem}"})
            lines.append(f"{run_id} unreadable: run.json: {exc.problem}")
            continue
        started_only = is_start_header(h)
        # killed, or still going: the cases recorded so far
        cases = store.count_cases(run_id) if started_only else (h.get("counts") or {}).get("cases")
        row = RunRow.of(run_id, h, started_only=started_only, cases=cases)
        doc = row.to_json()
        if started_only:
            doc["note"] = "run.json holds only its start header"
        rows.append(doc)
        lines.append(runs_line(row))
    _emit(args, {"store": str(store.root), "runs": rows}, lines or [f"no runs in {store.root}"])
    return ExitCode.OK


def cmd_inspect(args: argparse.Namespace) -> int:
    from pytest_oloproof.report.text import case_line, case_repeat_lines, run_summary

    store = _store_from(args)
    kind, full = store.resolve(args.id)
    if kind != "run" and (args.failures or args.case):
        raise UsageError(f"--failures and --case read a run; {args.id} is a {kind}")
    if kind == "run":
        from pytest_oloproof.store.labels import corrected_rates

        record = store.load_run(full)
        record["corrected"] = corrected_rates(store, record)  # from imported labels, computed when read
        if args.case is not None:
            return _inspect_case(args, record)
        if args.failures:
            from pytest_oloproof.report.text import failures_lines
            from pytest_oloproof.report.views import RunView

            view = RunView.of(record)
            doc = {
                "run_id": full,
                "cases": view.case_count,
                "failed": [{"id": f.id, "what": f.what} for f in view.failed],
            }
            _emit(args, doc, failures_lines(view))
            return ExitCode.OK
        lines = run_summary(record, store_root=str(store.root))
        lines.append("Cases:")
        for c in record.get("cases", []):
            lines += [f"  {case_line(c)}", *(f"  {line}" for line in case_repeat_lines(c))]  # every repeat, if any
        _emit(args, record, lines)
        return ExitCode.OK
    doc = store.load_doc(kind, full)
    renderer = getattr(args, "inspectors", {}).get(kind)
    lines = renderer(doc, full) if renderer else [json.dumps(doc, indent=2)]
    _emit(args, {"id": full, **doc}, lines)
    return ExitCode.OK


def _inspect_case(args: argparse.Namespace, record: Mapping[str, Any]) -> int:
    """`oloproof inspect RUN --case ID`: the case whole (the JSON form is its full record)."""
    from pytest_oloproof.report.text import case_detail_lines
    from pytest_oloproof.report.views import CaseDetail

    cases = [c for c in record.get("cases") or [] if str(c.get("id")) == args.case]
    if not cases:
        ids = [str(c.get("id")) for c in record.get("cases") or []]
        near = [i for i in ids if args.case.lower() in i.lower()][:5]
        hint = (
            f"; did you mean {', '.join(near)}?"
            if near
            else f" (its {len(ids)} cases: oloproof inspect {record.get('run_id')})"
        )
        raise UsageError(f"--case: run {record.get('run_id')} has no case {args.case!r}{hint}")
    case = cases[-1]
    _emit(args, case, case_detail_lines(CaseDetail.of(record, case)))
    return ExitCode.OK


# ------------------------------------------------------------------ parser


def build_parser(subcommands: Sequence[Subcommand] = ()) -> argparse.ArgumentParser:
    parser = _Parser(prog="oloproof", description="Evaluate RAG systems and learn why answers were wrong.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--config", metavar="PATH", help="oloproof.yaml (default: ./oloproof.yaml)")
        p.add_argument("--store", metavar="DIR", help="store folder (default: the config's `store`)")
        p.add_argument("--json", action="store_true", help="print one JSON document instead of text")

    sub.add_parser("run", help="run pytest with --oloproof; other arguments go to pytest", add_help=False)
    p = sub.add_parser("runs", help="list stored runs, newest first")
    common(p)
    p = sub.add_parser("inspect", help="show a run, diagnosis, comparison or decision (id, unique prefix, latest)")
    p.add_argument("id", help="run, diagnosis, comparison or decision: id, unique prefix, latest, latest~N")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--failures", action="store_true", help="a run: one line per failed, errored or missing case")
    what.add_argument(
        "--case", metavar="ID", help="a run: one case whole (input, retrieval, context, output, verdicts)"
    )
    p.set_defaults(inspectors={s.inspects: s.inspect for s in subcommands if s.inspects and s.inspect})
    common(p)
    for s in subcommands:
        s.add_parser(sub, common)
    return parser


#: the built-in commands; the others come as `Subcommand`s from the package's __init__
COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "runs": cmd_runs,
    "inspect": cmd_inspect,
}


def main(argv: Sequence[str] | None = None, subcommands: Sequence[Subcommand] = ()) -> int:
    """The command with the built-in commands and `subcommands` (`pytest_oloproof.cli.main` passes them all)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "run":
        return cmd_run(argparse.Namespace(), argv[1:])
    as_json = "--json" in argv
    try:
        try:
            return _dispatch(argv, as_json, subcommands)
        finally:
            sys.stdout.flush()  # a reader that went away shows here at the latest, not at interpreter exit
    except BrokenPipeError:
        _stdout_to_devnull()
        return ExitCode.PIPE


def _dispatch(argv: list[str], as_json: bool, subcommands: Sequence[Subcommand]) -> int:
    """Run one command; every error is text on stderr, and with --json also a JSON object on stdout."""

    def fail(code: int, message: str, text: str | None = None) -> int:
        message = redact(message)
        if text is not None:
            sys.stderr.write(redact(text))
        if as_json:
            print(json.dumps({"error": {"code": code, "message": message}}, indent=2, ensure_ascii=False))
        return code

    try:
        parser = build_parser(subcommands)
        args = parser.parse_args(argv)
        return {**COMMANDS, **{s.name: s.run for s in subcommands}}[args.command](args)
    except _UsageExit as exc:  # already printed by the parser
        return fail(ExitCode.USAGE, exc.message)
    except SystemExit as exc:
        code = int(exc.code or 0) if isinstance(exc.code, int) else ExitCode.USAGE
        return fail(code, "usage error") if code else code
    except OloproofError as exc:
        code = getattr(exc, "exit_code", ExitCode.USAGE)
        return fail(code, str(exc), f"oloproof: error: {exc}\n")
    except KeyboardInterrupt:
        return fail(ExitCode.USAGE, "interrupted", "oloproof: interrupted\n")
    except BrokenPipeError:
        raise
    except Exception as exc:
        text = "oloproof: internal error\n" + traceback.format_exc()
        return fail(ExitCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}", text)
