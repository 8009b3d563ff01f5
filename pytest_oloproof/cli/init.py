"""`oloproof init [DIR] [--template plain|langchain|llamaindex]`: write a project that runs at once.

The files are package data under cli/scaffold/: `common/` (the corpus, cases, configuration,
release policy, pytest.ini) and one app.py per template. Nothing is overwritten: if any file
exists, the command names them all, writes nothing and exits 2. It then prints what to do
next and what the suite can decide at its size under the release policy (the same exact
interval `oloproof gate` reads), before anything runs.
"""

from __future__ import annotations

import argparse
import importlib.util
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from pytest_oloproof.errors import ExitCode

from . import core as cli

TEMPLATES = {"plain": None, "langchain": ("langchain_core", "langchain"), "llamaindex": ("llama_index", "llamaindex")}
COMMON = ("app.py", "corpus.py", "cases.jsonl", "oloproof.yaml", "release.yaml", "pytest.ini")


def _add(sub: Any, common: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser("init", help="write a small runnable project (app.py, cases, oloproof.yaml, release policy)")
    p.add_argument("directory", nargs="?", default=".", metavar="DIR", help="where to write it (default: here)")
    p.add_argument(
        "--template",
        choices=tuple(TEMPLATES),
        default="plain",
        help="plain: a dependency-free system; langchain / llamaindex: the adapter with the library's offline "
        "components (needs the extra of that name)",
    )


def _sources(template: str) -> dict[str, str]:
    """File name -> text of the template's files."""
    root = resources.files("pytest_oloproof.cli").joinpath("scaffold")
    out = {}
    for name in COMMON:
        folder = template if name == "app.py" else "common"
        out[name] = root.joinpath(folder, name).read_text(encoding="utf-8")
    return out


def cmd_init(args: argparse.Namespace) -> int:
    from pytest_oloproof.compare.policy import load_policy
    from pytest_oloproof.compare.release import suite_capacity
    from pytest_oloproof.report.text import init_lines

    needs = TEMPLATES[args.template]
    if needs is not None and importlib.util.find_spec(needs[0]) is None:
        raise cli.UsageError(
            f"--template {args.template} needs {needs[0]}, which is not installed: "
            f"pip install 'pytest-oloproof[{needs[1]}]'"
        )
    target = Path(args.directory)
    if target.exists() and not target.is_dir():
        raise cli.UsageError(f"{target} is a file, not a folder")
    files = _sources(args.template)
    existing = [name for name in files if (target / name).exists()]
    if existing:
        raise cli.UsageError(
            f"{target} already has {', '.join(existing)}; init never overwrites a file, so it wrote nothing "
            "(choose an empty folder: oloproof init DIR)"
        )
    target.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        with (target / name).open("x", encoding="utf-8") as f:  # "x": a file that appeared meanwhile is kept
            f.write(text)
    cases = sum(1 for line in files["cases.jsonl"].splitlines() if line.strip())
    policy = load_policy(target / "release.yaml")
    confidence = float(policy.policy.confidence or 0.95)
    capacity = [suite_capacity(d, cases, confidence) for d in policy.policy.decisions]
    lines = init_lines(str(target), list(files), capacity, cases, confidence, in_place=target.resolve() == Path.cwd())
    cli._emit(
        args,
        {
            "directory": str(target),
            "template": args.template,
            "written": list(files),
            "cases": cases,
            "capacity": capacity,
        },
        lines,
    )
    return ExitCode.OK


SUBCOMMAND = cli.Subcommand("init", _add, cmd_init)
