"""`oloproof diagnose` and `oloproof inspect DIAGNOSIS`: the command-line face of diagnose.py."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_oloproof.errors import ExitCode

from . import core as cli

if TYPE_CHECKING:
    from pytest_oloproof.engine.setup import RunSetup

# diagnose/ (and scipy behind the run recorder) is imported only when a diagnosis runs, so that
# registering the subcommand keeps every other `oloproof` command quick to start
INTERVENTIONS = ("gold-context", "top-k", "reranker", "token-budget")


def _add(sub: Any, common: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser("diagnose", help="re-run a run's failed cases under an intervention to learn why they failed")
    p.add_argument("run_id", metavar="RUN_ID", help="run id, unique prefix, latest, latest~N, or run-record JSON file")
    p.add_argument("--intervention", choices=INTERVENTIONS, default="gold-context", help="default: gold-context")
    p.add_argument("--criterion", help="criterion to diagnose (default: the run's first pass/fail criterion)")
    p.add_argument("--top-k", type=cli.positive_int, metavar="N", help="the cut to replay with (--intervention top-k)")
    p.add_argument("--reranker", metavar="MODULE:FUNCTION", help="function(query, candidates) -> candidates")
    p.add_argument(
        "--token-budget",
        type=cli.positive_int,
        metavar="N",
        help="the budget to re-assemble the recorded candidates under (--intervention token-budget)",
    )
    p.add_argument("--fresh", action="store_true", help="re-execute child runs even if identical ones exist")
    common(p)


def load_evaluation(config: str | None, store: str | None) -> RunSetup:
    """The configured system and evaluators, with the store of --store when given."""
    from pytest_oloproof.session import load_setup

    path = Path(config or "oloproof.yaml")
    if not path.is_file():
        raise cli.UsageError(f"--config: {path} does not exist (diagnose loads the system from oloproof.yaml)")
    setup, cache_warning = load_setup(path.resolve(), store=Path(store).resolve() if store else None)
    if cache_warning is not None:
        _warn(cache_warning)
    return setup


def _warn(message: str) -> None:
    from pytest_oloproof.records.redaction import redact

    sys.stderr.write(redact(f"oloproof: warning: {message}\n"))


def cmd_diagnose(args: argparse.Namespace) -> int:
    from pytest_oloproof.diagnose.diagnosis import Diagnoser, Request

    ev = load_evaluation(args.config, args.store)
    request = Request(
        run=args.run_id,
        intervention=args.intervention,
        criterion=args.criterion,
        top_k=args.top_k,
        reranker=args.reranker,
        token_budget=args.token_budget,
        fresh=args.fresh,
    )
    try:
        diagnoser = Diagnoser(ev, request, warn=_warn)
        if diagnoser.is_replay() and not request.fresh:
            if diagnoser.select() and diagnoser.gold is None:  # run_all keeps this selection: one store scan
                sys.stderr.write(
                    f"oloproof: no gold-context diagnosis of {diagnoser.run_id} for {diagnoser.criterion} yet; "
                    "running it first\n"
                )
        result = diagnoser.run_all(ev.cfg.settings.concurrency)
    finally:
        ev.caches.close()
    from pytest_oloproof.report.text import diagnosis_lines

    cli._emit(args, result.to_json(), diagnosis_lines(result))
    # every replay (or intervention, or control) without a value: nothing was diagnosed, and a
    # script must not read the output as a diagnosis
    return ExitCode.FAILED if result.measured_nothing else ExitCode.OK


def _inspect(doc: dict[str, Any], doc_id: str) -> list[str]:
    from pytest_oloproof.report.text import diagnosis_case_lines
    from pytest_oloproof.report.views import DiagnosisView

    return diagnosis_case_lines(DiagnosisView.of(doc, doc_id))


SUBCOMMAND = cli.Subcommand("diagnose", _add, cmd_diagnose, inspects="diagnosis", inspect=_inspect)
