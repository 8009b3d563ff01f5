"""The `oloproof` command line: `main` is the console script.

core.py holds the shared pieces and the built-in commands (run, runs, inspect); each other
subcommand lives in a module of its own, which imports core.py only. This front door lists them;
neither core.py nor a subcommand imports it, so there is no import circle to keep in mind.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from pytest_oloproof.errors import ExitCode

from . import cache, compare, core, diagnose, gate, init, judge_probe, labels, merge, report, validate_judge
from .core import Subcommand, UsageError

SUBCOMMANDS: tuple[Subcommand, ...] = (
    init.SUBCOMMAND,
    compare.SUBCOMMAND,
    gate.GATE,
    gate.PLAN,
    diagnose.SUBCOMMAND,
    validate_judge.SUBCOMMAND,
    labels.SUBCOMMAND,
    judge_probe.SUBCOMMAND,
    report.SUBCOMMAND,
    cache.SUBCOMMAND,
    merge.SUBCOMMAND,
)


def build_parser() -> argparse.ArgumentParser:
    """The whole parser, every subcommand included."""
    return core.build_parser(SUBCOMMANDS)


def main(argv: Sequence[str] | None = None) -> int:
    """`oloproof ARGS`: the exit status of the command."""
    return core.main(argv, SUBCOMMANDS)


__all__ = [
    "SUBCOMMANDS",
    "ExitCode",
    "Subcommand",
    "UsageError",
    "build_parser",
    "main",
]
