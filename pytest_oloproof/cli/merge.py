"""`oloproof merge SOURCE…`: the runs of every shard (`--oloproof-shard I/N`) pooled into one complete run."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_oloproof.errors import ExitCode

from . import core as cli


def add_parser(sub: Any, common: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser(
        "merge",
        help="pool the runs of every shard (--oloproof-shard I/N) into one complete run, recomputed as one job would",
    )
    p.add_argument(
        "sources",
        nargs="+",
        metavar="SOURCE",
        help="a shard's store folder (its shard runs are taken) or a shard's run folder (run.json and cases.jsonl)",
    )
    common(p)


def cmd_merge(args: argparse.Namespace) -> int:
    from pytest_oloproof.engine.merge import find_shard_runs, merge_runs
    from pytest_oloproof.records.redaction import redact
    from pytest_oloproof.report.markdown import run_markdown
    from pytest_oloproof.report.text import run_summary

    shards = [run for source in args.sources for run in find_shard_runs(Path(source))]
    store = cli._store_from(args)
    record = merge_runs(shards, store)
    step = os.environ.get("GITHUB_STEP_SUMMARY")
    if step:  # as a single job's run writes it
        with open(step, "a", encoding="utf-8") as f:
            f.write(redact(run_markdown(record)))
    merged = record.get("merged_from") or []
    lines = [f"Merged {len(merged)} shards ({', '.join(merged)}) into run {record['run_id']} in {store.root}"]
    lines += run_summary(record, store_root=str(store.root))
    cli._emit(args, {"run_id": record["run_id"], "store": str(store.root), "merged_from": merged}, lines)
    return ExitCode.OK


SUBCOMMAND = cli.Subcommand("merge", add_parser, cmd_merge)
