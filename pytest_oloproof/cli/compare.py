"""`oloproof compare`: the command-line face of compare.py (which, with scipy, is imported only when used)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from . import core as cli


def add_parser(sub: Any, common: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser(
        "compare",
        help="compare a candidate run with a baseline run; with --policy, decide the release (exit 3 on BLOCK)",
    )
    p.add_argument(
        "candidate", metavar="CANDIDATE", help="run id, unique prefix, latest, latest~N, or run-record JSON file"
    )
    p.add_argument(
        "baseline", metavar="BASELINE", help="run id, unique prefix, latest, latest~N, or run-record JSON file"
    )
    p.add_argument("--policy", metavar="PATH", help="compare.yaml with the decisions of the gate")
    common(p)


def cmd_compare(args: argparse.Namespace) -> int:
    from pytest_oloproof.compare.comparison import run_comparison
    from pytest_oloproof.compare.policy import load_policy
    from pytest_oloproof.report.text import comparison_lines
    from pytest_oloproof.report.views import ComparisonView

    policy = load_policy(args.policy) if args.policy else None
    store = cli._store_from(args)
    doc_id, doc = run_comparison(store, args.candidate, args.baseline, policy)
    cli._emit(args, {"id": doc_id, **doc}, comparison_lines(ComparisonView.of(doc, doc_id)))
    return int(doc["exit_code"])


def inspect_lines(doc: dict[str, Any], doc_id: str) -> list[str]:
    """`oloproof inspect COMPARISON_ID`: the same text `oloproof compare` printed."""
    from pytest_oloproof.report.text import comparison_lines
    from pytest_oloproof.report.views import ComparisonView

    return comparison_lines(ComparisonView.of(doc, doc_id))


SUBCOMMAND = cli.Subcommand("compare", add_parser, cmd_compare, inspects="comparison", inspect=inspect_lines)
