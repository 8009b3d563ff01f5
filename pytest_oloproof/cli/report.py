"""`oloproof report`: the self-contained HTML page of a run, diagnosis or comparison, or of the whole store."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_oloproof.errors import ExitCode

from . import core as cli


def _add(sub: Any, common: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser(
        "report",
        help="write an HTML report of a run, diagnosis or comparison (or, with no ID, of the whole store)",
    )
    p.add_argument("id", nargs="?", metavar="ID", help="run, diagnosis or comparison id, unique prefix, latest")
    p.add_argument(
        "--html",
        required=True,
        metavar="PATH",
        help="the HTML file to write; with no ID, a folder for index.html and a page per run",
    )
    common(p)


def cmd_report(args: argparse.Namespace) -> int:
    from pytest_oloproof.report.html import page_for, write_index, write_page
    from pytest_oloproof.store.files import output_problem

    store = cli._store_from(args)
    target = Path(args.html)
    if args.id is None:
        if (target.exists() or target.is_symlink()) and not target.is_dir():
            raise cli.UsageError(
                f"--html: {target} is not a folder; with no ID the report is a folder (index.html and pages)"
            )
        problem = output_problem(target)
        if problem is not None:  # a path under a regular file
            raise cli.UsageError(f"--html: cannot write {target}: {problem}")
        created = not target.exists()
        try:
            written = write_index(store, target)
        except OSError:
            if created:  # a folder made for the report and left empty is not a report
                with contextlib.suppress(OSError):
                    target.rmdir()
            raise
        lines = [f"Wrote {len(written.pages)} pages to {target}/ (open {target / 'index.html'})"]
        lines += [f"Not shown (unreadable): {p}" for p in written.problems]
        doc = {
            "directory": str(target),
            "index": str(target / "index.html"),
            "pages": [str(p) for p in written.pages],
            "problems": written.problems,
        }
        cli._emit(args, doc, lines)
        return ExitCode.OK
    if target.is_dir():
        raise cli.UsageError(f"--html: {target} is a folder; give the file to write, e.g. {target / 'report.html'}")
    problem = output_problem(target)
    if problem is not None:  # a FIFO or a device is never replaced; nothing is written under a regular file
        raise cli.UsageError(f"--html: cannot write {target}: {problem}")
    kind, full, html = page_for(store, args.id)
    write_page(target, html)
    cli._emit(args, {"kind": kind, "id": full, "path": str(target)}, [f"Wrote the {kind} report of {full} to {target}"])
    return ExitCode.OK


SUBCOMMAND = cli.Subcommand("report", _add, cmd_report)
