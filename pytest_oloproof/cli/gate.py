"""`oloproof gate` and `oloproof plan`: decide a stored run by a release policy, and how many cases would decide it."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping
from typing import Any

from pytest_oloproof.errors import ExitCode

from . import core as cli


def add_gate_parser(sub: Any, common: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser(
        "gate",
        help="decide a stored run by a release policy's single-run decisions, running nothing (exit 3 on BLOCK)",
    )
    p.add_argument("run", metavar="RUN", help="run id, unique prefix, latest, latest~N, or run-record JSON file")
    p.add_argument("--policy", metavar="PATH", required=True, help="release.yaml with minimum / maximum / max-failures")
    common(p)


def cmd_gate(args: argparse.Namespace) -> int:
    from pytest_oloproof.compare import release
    from pytest_oloproof.compare.comparison import load_run
    from pytest_oloproof.compare.policy import load_policy

    policy = load_policy(args.policy)
    policy.check_single_run("compare two runs with `oloproof compare CANDIDATE BASELINE --policy FILE`")
    store = cli._store_from(args)
    record = load_run(store, args.run, "run")
    source = args.run if args.run.endswith(".json") else None
    doc = release.decide_run(record, policy, store=store, source=source)
    doc_id = store.save_doc("decision", doc)
    from pytest_oloproof.report.text import decision_lines
    from pytest_oloproof.report.views import DecisionView

    step = os.environ.get("GITHUB_STEP_SUMMARY")
    if step:  # as the session's gate writes it (a merged run of shards is gated here, in CI)
        from pytest_oloproof.records.redaction import redact
        from pytest_oloproof.report.markdown import decision_markdown

        with open(step, "a", encoding="utf-8") as f:
            f.write(redact(decision_markdown(doc, doc_id)))

    cli._emit(args, {"id": doc_id, **doc}, decision_lines(DecisionView.of(doc, doc_id)))
    return int(doc["exit_code"])


def add_plan_parser(sub: Any, common: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser(
        "plan",
        help="for each undecided decision of a policy, how many cases would decide it (stores nothing)",
    )
    p.add_argument("ref", metavar="RUN|COMPARISON", help="a run (id, prefix, latest, latest~N) or a comparison id")
    p.add_argument("--policy", metavar="PATH", required=True, help="the policy whose decisions to plan")
    common(p)


def cmd_plan(args: argparse.Namespace) -> int:
    from pytest_oloproof.compare import release
    from pytest_oloproof.compare.comparison import compare_runs, load_run
    from pytest_oloproof.compare.policy import load_policy

    policy = load_policy(args.policy)
    store = cli._store_from(args)
    if args.ref.endswith(".json"):
        kind, full = "run", args.ref
    else:
        kind, full = store.resolve(args.ref, kinds=("run", "comparison"))
    if kind == "run":
        policy.check_single_run(f"plan a comparison (`oloproof plan COMPARISON --policy {args.policy}`)")
        doc: Mapping[str, Any] = release.decide_run(load_run(store, full, "run"), policy, store=store)
    else:
        stored = store.load_doc("comparison", full)
        runs = []
        for role in ("candidate", "baseline"):
            info = stored[role]
            ref = info["source"] if info.get("source") not in (None, "store") else info["run_id"]
            runs.append(load_run(store, ref, role))
        doc = compare_runs(runs[0], runs[1], policy, store=store)
    from pytest_oloproof.report.text import plan_lines
    from pytest_oloproof.report.views import PlanView

    view = PlanView.of(kind, full, doc, args.policy)
    cli._emit(args, {"ref": full, "kind": kind, "decisions": view.rows}, plan_lines(view))
    return ExitCode.OK


GATE = cli.Subcommand("gate", add_gate_parser, cmd_gate, inspects="decision", inspect=lambda doc, i: _inspect(doc, i))
PLAN = cli.Subcommand("plan", add_plan_parser, cmd_plan)


def _inspect(doc: dict[str, Any], doc_id: str) -> list[str]:
    """`oloproof inspect DECISION_ID`: the text `oloproof gate` printed."""
    from pytest_oloproof.report.text import decision_lines
    from pytest_oloproof.report.views import DecisionView

    return decision_lines(DecisionView.of(doc, doc_id))
